//! The erasure event: subjects erased, and the data keys that destroyed.
//!
//! An erasure is appended before its keys are destroyed, so the log always names every key
//! that must not exist: a start (or a restore from a backup taken before the erasure) destroys
//! any named key it still finds before it serves.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::seal::{KeyId, Subject};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubjectsErased {
    pub erasure_id: Uuid,
    pub tenant_id: Uuid,
    /// What the erasure named (a user, agent or session scope, memories, or the tenant).
    pub subjects: Vec<Subject>,
    /// The data keys destroyed: random ids, which tell nothing about whom they served.
    pub key_ids: Vec<KeyId>,
    /// Every memory sealed under one of those keys, which the memories projection drops.
    pub memory_ids: Vec<Uuid>,
    pub erased_at: i64,
}
