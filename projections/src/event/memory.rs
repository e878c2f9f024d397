//! The memory events: created, updated, deleted, expired and superseded memories.
//!
//! A memory's personal fields (its content, its metadata and its vector, which can be inverted
//! towards the content) are written only sealed: `MemoryCreated` and `MemoryUpdated` carry them
//! in their last field, `sealed`, as the msgpack of a [`MemoryPersonal`] sealed under the keys of
//! the memory's subjects ([`memory_subjects`]) and bound to the memory's id ([`memory_aad`]);
//! the same fields in the clear part of a sealed event are empty. Records written before
//! sealing existed carry them in the clear and `sealed` absent: they still decode and read as
//! they did. What stays clear (ids, tenant, type, importance, times, model, scope ids, expiry)
//! is what lists, filters and erasure need without opening anything.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::MemoryType;
use crate::seal::{KeyError, Keyring, SealError, Sealed, Subject};

/// The associated data a memory's sealed fields are bound to: moved to another memory's
/// event, they do not open.
pub fn memory_aad(id: &Uuid) -> Vec<u8> {
    let mut aad = b"memory/v1".to_vec();
    aad.extend_from_slice(id.as_bytes());
    aad
}

/// The subjects a memory is about: the memory itself, and each scope it names. Erasing any of
/// them erases it.
pub fn memory_subjects(
    tenant: Uuid,
    id: Uuid,
    user_id: Option<&str>,
    agent_id: Option<&str>,
    session_id: Option<&str>,
) -> Vec<Subject> {
    let mut subjects = vec![Subject::Memory(tenant, id)];
    if let Some(u) = user_id {
        subjects.push(Subject::User(tenant, u.to_string()));
    }
    if let Some(a) = agent_id {
        subjects.push(Subject::Agent(tenant, a.to_string()));
    }
    if let Some(s) = session_id {
        subjects.push(Subject::Session(tenant, s.to_string()));
    }
    subjects
}

/// A memory event's personal fields, as sealed: each absent when the event does not set it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPersonal {
    #[serde(default)]
    pub content: Option<String>,
    /// The metadata object as JSON text.
    #[serde(default)]
    pub metadata: Option<String>,
    #[serde(default, with = "serde_bytes")]
    pub vector: Option<Vec<u8>>,
}

impl MemoryPersonal {
    fn seal(
        &self,
        ring: &dyn Keyring,
        subjects: &[Subject],
        id: &Uuid,
    ) -> Result<Sealed, KeyError> {
        // Strings, an optional byte string: encoding into a Vec cannot fail.
        let bytes = zeroize::Zeroizing::new(rmp_serde::to_vec(self).unwrap_or_default());
        Sealed::seal_for(ring, subjects, &memory_aad(id), &bytes)
    }

    /// The fields in `sealed`; `Ok(None)` when one of its keys was destroyed (erased).
    fn open(sealed: &Sealed, ring: &dyn Keyring, id: &Uuid) -> Result<Option<Self>, KeyError> {
        let Some(bytes) = sealed.open_with(ring, &memory_aad(id))? else {
            return Ok(None);
        };
        // Opened under its keys, so the bytes are what was sealed: undecodable means changed.
        rmp_serde::from_slice(&bytes)
            .map(Some)
            .map_err(|_| KeyError::Seal(SealError::Open))
    }
}

/// A vector as stored in events: f32 little-endian bytes (compact, and decoded without parsing).
pub fn vector_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn vector_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryCreated {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub created_at: i64,
    /// Embedding model id and the vector (normalised, f32 LE), so replay never calls a model.
    pub model: String,
    #[serde(with = "serde_bytes")]
    pub vector: Vec<u8>,
    /// Scope, metadata and expiry, when the memory was created with any. Records from before
    /// `sealed` existed may omit it; it is always written now (nil when absent), so that
    /// `sealed` after it keeps its place in the positional encoding.
    #[serde(default)]
    pub extra: Option<MemoryExtra>,
    /// The personal fields (`content`, `extra.metadata`, `vector`) sealed under the memory's
    /// subjects; absent in records that predate sealing, which carry them in the clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Sealed>,
}

impl MemoryCreated {
    /// The memory's subjects, by its scope ids.
    pub fn subjects(&self) -> Vec<Subject> {
        let x = self.extra.as_ref();
        memory_subjects(
            self.tenant_id,
            self.memory_id,
            x.and_then(|x| x.user_id.as_deref()),
            x.and_then(|x| x.agent_id.as_deref()),
            x.and_then(|x| x.session_id.as_deref()),
        )
    }

    /// The event with its personal fields sealed under `subjects` and emptied in the clear.
    pub fn sealed_for(
        mut self,
        ring: &dyn Keyring,
        subjects: &[Subject],
    ) -> Result<Self, KeyError> {
        let personal = MemoryPersonal {
            content: Some(std::mem::take(&mut self.content)),
            metadata: self.extra.as_mut().and_then(|x| x.metadata.take()),
            vector: Some(std::mem::take(&mut self.vector)),
        };
        self.sealed = Some(personal.seal(ring, subjects, &self.memory_id)?);
        Ok(self)
    }

    /// The event with its personal fields in the clear (as it is, for a record that predates
    /// sealing); `Ok(None)` when they no longer open: the memory was erased.
    pub fn opened(&self, ring: &dyn Keyring) -> Result<Option<Cow<'_, Self>>, KeyError> {
        let Some(sealed) = &self.sealed else {
            return Ok(Some(Cow::Borrowed(self)));
        };
        let Some(p) = MemoryPersonal::open(sealed, ring, &self.memory_id)? else {
            return Ok(None);
        };
        let mut e = self.clone();
        e.sealed = None;
        e.content = p.content.unwrap_or_default();
        e.vector = p.vector.unwrap_or_default();
        if p.metadata.is_some() {
            e.extra.get_or_insert_with(MemoryExtra::default).metadata = p.metadata;
        }
        Ok(Some(Cow::Owned(e)))
    }
}

/// What a memory may carry beyond the interface's fields, each optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryExtra {
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// The metadata object as JSON text (a JSON value does not round-trip through the
    /// positional encoding of events; text does, byte for byte).
    #[serde(default)]
    pub metadata: Option<String>,
    /// When the memory stops being answered (µs since the epoch).
    #[serde(default)]
    pub expires_at: Option<i64>,
    /// When what the memory says happened or was said (µs since the epoch), as the caller
    /// gave it: a conversation turn's time, not the time it was stored.
    #[serde(default)]
    pub occurred_at: Option<i64>,
}

impl MemoryExtra {
    /// `None` when it carries nothing, so that the event is written without it.
    pub fn or_none(self) -> Option<Self> {
        (self != Self::default()).then_some(self)
    }
}

/// An update's changes to metadata, expiry and occurrence time: each is set (to a value or cleared) only when
/// its flag says so (an `Option<Option<_>>` would not survive the positional encoding).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryAmend {
    #[serde(default)]
    pub set_metadata: bool,
    #[serde(default)]
    pub metadata: Option<String>,
    #[serde(default)]
    pub set_expires_at: bool,
    #[serde(default)]
    pub expires_at: Option<i64>,
    #[serde(default)]
    pub set_occurred_at: bool,
    #[serde(default)]
    pub occurred_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryUpdated {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub importance: Option<f64>,
    pub updated_at: i64,
    /// Set with a new vector when the content changed.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, with = "serde_bytes")]
    pub vector: Option<Vec<u8>>,
    /// Metadata and expiry changes; absent when the update changed neither. Records from
    /// before `sealed` existed may omit it; it is always written now (nil when absent), so
    /// that `sealed` after it keeps its place in the positional encoding.
    #[serde(default)]
    pub amend: Option<MemoryAmend>,
    /// The personal fields the update sets (`content`, `amend.metadata`, `vector`) sealed
    /// under the memory's subjects; absent when it sets none of them, and in records that
    /// predate sealing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Sealed>,
}

impl MemoryUpdated {
    /// The event with the personal fields it sets sealed under `subjects` (the memory's) and
    /// emptied in the clear; as it is when it sets none.
    pub fn sealed_for(
        mut self,
        ring: &dyn Keyring,
        subjects: &[Subject],
    ) -> Result<Self, KeyError> {
        let metadata = match self.amend.as_mut() {
            Some(a) if a.set_metadata => a.metadata.take(),
            _ => None,
        };
        let personal = MemoryPersonal {
            content: self.content.take(),
            metadata,
            vector: self.vector.take(),
        };
        if personal == MemoryPersonal::default() {
            return Ok(self);
        }
        self.sealed = Some(personal.seal(ring, subjects, &self.memory_id)?);
        Ok(self)
    }

    /// The event with its personal fields in the clear (as it is when nothing is sealed);
    /// `Ok(None)` when they no longer open: the memory was erased.
    pub fn opened(&self, ring: &dyn Keyring) -> Result<Option<Cow<'_, Self>>, KeyError> {
        let Some(sealed) = &self.sealed else {
            return Ok(Some(Cow::Borrowed(self)));
        };
        let Some(p) = MemoryPersonal::open(sealed, ring, &self.memory_id)? else {
            return Ok(None);
        };
        let mut e = self.clone();
        e.sealed = None;
        e.content = p.content;
        e.vector = p.vector;
        if let Some(a) = e.amend.as_mut().filter(|a| a.set_metadata) {
            a.metadata = p.metadata;
        }
        Ok(Some(Cow::Owned(e)))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryDeleted {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    pub deleted_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoriesDeletedByType {
    pub tenant_id: Uuid,
    pub memory_type: MemoryType,
    /// Exactly the memories deleted, decided by the handler: replay deletes the same ones.
    pub memory_ids: Vec<Uuid>,
    pub deleted_at: i64,
}

/// Memories a filtered batch delete chose (exactly these: replay deletes the same ones).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoriesDeleted {
    pub tenant_id: Uuid,
    pub memory_ids: Vec<Uuid>,
    pub deleted_at: i64,
}

/// Memories whose `expires_at` had passed, taken out by the sweeper: from then on they are
/// gone as deleted ones are, their history saying `expired`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoriesExpired {
    pub tenant_id: Uuid,
    pub memory_ids: Vec<Uuid>,
    pub expired_at: i64,
}

/// An older memory that a newer one contradicts: it stays readable and in history, marked,
/// and leaves list and search unless superseded memories are asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemorySuperseded {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    pub superseded_by: Uuid,
    pub superseded_at: i64,
}
