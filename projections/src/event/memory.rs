//! The memory events: created, updated, deleted, expired and superseded memories.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::MemoryType;

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
    /// Scope, metadata and expiry, when the memory was created with any: absent otherwise, so
    /// such a record is what it was before these fields existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<MemoryExtra>,
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
}

impl MemoryExtra {
    /// `None` when it carries nothing, so that the event is written without it.
    pub fn or_none(self) -> Option<Self> {
        (self != Self::default()).then_some(self)
    }
}

/// An update's changes to metadata and expiry: each is set (to a value or cleared) only when
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
    /// Metadata and expiry changes; absent when the update changed neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amend: Option<MemoryAmend>,
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
