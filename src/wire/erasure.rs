//! Erasure: `POST /v1/erasures` (one subject of the caller's tenant) and
//! `POST /admin/v1/tenants/{id}/erasures` (a whole tenant), and the receipt both answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ArrayBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::envelope::Payload;
use super::field::{optional, Check, Field, Invalid};
use super::memory::batch::MemoryId;
use super::memory::fields::{AgentId, SessionId, UserId};
use super::{empty_refused, unknown_field_named, Body, Refusal};
use crate::log::checkpoint::Checkpoint;
use crate::tlog::proof::ErasureProof;

/// Memory ids one erasure names at most.
pub const MAX_ERASED_IDS: usize = 1000;

/// `POST /v1/erasures`: exactly one of the four.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    description = "Exactly one of `user_id`, `agent_id`, `session_id` and `memory_ids`: the subject whose data is erased for good."
)]
pub struct ErasureRequest {
    /// Every memory of this user scope and every audit entry that shows one (1 to 256
    /// characters).
    #[schema(inline, nullable = false)]
    pub user_id: Option<Field<UserId>>,
    /// An agent scope (1 to 256 characters).
    #[schema(inline, nullable = false)]
    pub agent_id: Option<Field<AgentId>>,
    /// A session scope (1 to 256 characters).
    #[schema(inline, nullable = false)]
    pub session_id: Option<Field<SessionId>>,
    /// 1 to 1000 memories of the tenant (live, or deleted: a delete hides, an erasure forgets).
    #[schema(inline, nullable = false)]
    pub memory_ids: Option<Field<MemoryIds>>,
}

/// What an erasure names, checked.
#[derive(Clone, Debug, PartialEq)]
pub enum ErasureTarget {
    User(String),
    Agent(String),
    Session(String),
    /// Distinct ids, in the order given.
    Memories(Vec<Uuid>),
    /// The whole tenant (the admin route).
    Tenant,
}

impl Body for ErasureRequest {
    type Checked = ErasureTarget;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<ErasureTarget, Invalid> {
        let given = [
            self.user_id.is_some(),
            self.agent_id.is_some(),
            self.session_id.is_some(),
            self.memory_ids.is_some(),
        ];
        match given.iter().filter(|g| **g).count() {
            0 => {
                return Err(Invalid::new(
                    "give exactly one of user_id, agent_id, session_id or memory_ids",
                ))
            }
            1 => {}
            _ => {
                let names: Vec<&str> = ["user_id", "agent_id", "session_id", "memory_ids"]
                    .into_iter()
                    .zip(given)
                    .filter(|(_, g)| *g)
                    .map(|(n, _)| n)
                    .collect();
                return Err(Invalid(format!(
                    "give exactly one of user_id, agent_id, session_id or memory_ids, not {}",
                    names.join(" and ")
                )));
            }
        }
        if let Some(u) = optional(self.user_id)? {
            return Ok(ErasureTarget::User(u.0));
        }
        if let Some(a) = optional(self.agent_id)? {
            return Ok(ErasureTarget::Agent(a.0));
        }
        if let Some(s) = optional(self.session_id)? {
            return Ok(ErasureTarget::Session(s.0));
        }
        match optional(self.memory_ids)? {
            Some(ids) => Ok(ErasureTarget::Memories(ids.0)),
            None => Err(Invalid::new(
                "give exactly one of user_id, agent_id, session_id or memory_ids",
            )),
        }
    }
}

/// `memory_ids`: 1 to [`MAX_ERASED_IDS`] memory ids, repeats dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryIds(pub Vec<Uuid>);

impl Check for MemoryIds {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        let Value::Array(items) = raw else {
            return Err(Invalid::new("memory_ids must be an array of memory ids"));
        };
        if !(1..=MAX_ERASED_IDS).contains(&items.len()) {
            return Err(Invalid(format!(
                "memory_ids must name 1 to {MAX_ERASED_IDS} memories; it names {}",
                items.len()
            )));
        }
        let mut ids: Vec<Uuid> = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let id = MemoryId::check(item).map_err(|e| Invalid(format!("memory_ids[{i}]: {e}")))?;
            if !ids.contains(&id.0) {
                ids.push(id.0);
            }
        }
        Ok(MemoryIds(ids))
    }
}

impl PartialSchema for MemoryIds {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new()
            .items(Ref::from_schema_name(MemoryId::name()))
            .min_items(Some(1))
            .max_items(Some(MAX_ERASED_IDS))
            .into()
    }
}

impl ToSchema for MemoryIds {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((MemoryId::name().into_owned(), MemoryId::schema()));
    }
}

/// What one erasure erased.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Erased {
    /// Memories erased: every memory sealed under a destroyed key.
    pub memories: usize,
    /// Data keys destroyed.
    pub keys: usize,
    /// The tenant's audit entries logged before the erasure and sealed under a destroyed key
    /// (every entry that showed an erased memory or named the erased scope).
    pub audit_entries: usize,
    /// Export files (completed and not expired, or being written) holding one of those
    /// entries: their rows of it download erased.
    pub exports: usize,
}

/// The receipt of an erasure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErasureReceipt {
    pub erasure_id: Uuid,
    pub erased: Erased,
    /// Erased memories stored before encryption (in plaintext in the log), which destroying
    /// keys cannot shred; 0 on a data dir that holds none.
    pub predate_encryption: usize,
    /// `"N records predate encryption and cannot be shredded"` when `predate_encryption` is not
    /// 0, else null.
    pub notice: Option<String>,
    /// RFC 3339 UTC.
    pub erased_at: String,
    /// The log position of the erasure event.
    pub seq: u64,
    /// A signed checkpoint whose tree holds the erasure event (`checkpoint.seq >= seq`).
    pub checkpoint: Checkpoint,
    /// The erasure event's record and its inclusion proof in the checkpoint's tree:
    /// `auditmem verify --proof RECEIPT --pubkey KEY` checks it offline.
    pub proof: ErasureProof,
}

impl Payload for ErasureReceipt {}
