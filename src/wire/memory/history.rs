//! A memory's history: its versions as the log recorded them.

use auditmem_projections::MemoryType;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::wire::envelope::Payload;
use crate::wire::time::Time;

/// One version of a memory, from the log: what the change set and when.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryVersion {
    /// created, updated, superseded, deleted, expired or erased.
    pub change: &'static str,
    pub seq: u64,
    #[schema(value_type = Option<String>)]
    pub audit_id: Option<Uuid>,
    #[schema(value_type = String)]
    pub at: Time,
    /// The content set (created, updated; null when an update left it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub content: Option<Option<String>>,
    /// The type of a created memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<MemoryType>,
    /// The importance set (created, updated; null when an update left it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<f64>)]
    pub importance: Option<Option<f64>>,
    /// The type a batch delete named, when the memory went in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_memory_type: Option<MemoryType>,
    /// Scope a created memory was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The metadata set (created, updated; null when an update cleared it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// The expiry set (created, updated; null when an update cleared it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Option<Time>>,
    /// The occurrence time set (created, updated; null when an update cleared it).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub occurred_at: Option<Option<Time>>,
    /// The newer memory that superseded it (superseded).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub superseded_by: Option<Uuid>,
    /// The memory was erased: this version's personal fields (`content`, `metadata`) are
    /// null, whatever they were. Absent (false) otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub erased: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryHistory {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub deleted: bool,
    /// The memory was erased (it is then deleted too). Absent (false) otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub erased: bool,
    pub versions: Vec<MemoryVersion>,
    /// A history `as_of`: the position it was answered as of (the versions up to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<super::as_of::AsOfShown>,
}

impl Payload for MemoryHistory {}
