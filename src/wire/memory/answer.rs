//! A memory as every answer shows it, and the answer to a delete.

use auditmem_projections::memories::MemoryView;
use auditmem_projections::MemoryType;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::wire::envelope::Payload;
use crate::wire::time::Time;

/// A memory as the interface shows it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Memory {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    #[schema(value_type = String)]
    pub created_at: Time,
    #[schema(value_type = String)]
    pub updated_at: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Time>,
    /// When what it says happened or was said, as the caller gave it; absent when not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub occurred_at: Option<Time>,
    /// The newer memory that contradicted this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub superseded_by: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub superseded_at: Option<Time>,
    /// A create with `resolve: true`: what it superseded, or the stored memory it duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<MemoryResolution>,
    /// A read `as_of`: the position it was answered as of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<super::as_of::AsOfShown>,
}

/// What a create with `resolve: true` did beside storing (or not storing) the memory.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MemoryResolution {
    /// Whether the memory asked for was stored (false: it duplicates `duplicate_of`, and the
    /// answer is that stored memory).
    pub stored: bool,
    /// The stored memories the new one superseded.
    #[schema(value_type = Vec<String>)]
    pub superseded: Vec<Uuid>,
    #[schema(value_type = Option<String>)]
    pub duplicate_of: Option<Uuid>,
}

impl From<MemoryView> for Memory {
    fn from(m: MemoryView) -> Self {
        let x = m.extra.unwrap_or_default();
        let metadata = x.metadata_value();
        Memory {
            id: m.id,
            content: m.content,
            memory_type: m.memory_type,
            importance: m.importance,
            created_at: Time(m.created_at),
            updated_at: Time(m.updated_at),
            user_id: x.user_id,
            agent_id: x.agent_id,
            session_id: x.session_id,
            metadata,
            expires_at: x.expires_at.map(Time),
            occurred_at: x.occurred_at.map(Time),
            superseded_by: x.superseded_by,
            superseded_at: x.superseded_at.map(Time),
            resolution: None,
            as_of: None,
        }
    }
}

impl Memory {
    /// The memory as an audit entry's `memory_results` holds it.
    pub fn audited(&self) -> Value {
        json_of(self)
    }
}

impl Payload for Memory {}

/// The JSON tree of a shape an audit detail stores (its fields are trees).
pub(crate) fn json_of<T: Serialize>(v: &T) -> Value {
    // A shape of strings, numbers and ids always serialises.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The answer to a delete.
// Named apart from the event `MemoryDeleted`; the schema keeps the document's name.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = MemoryDeleted)]
pub struct DeletedMemory {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub deleted: bool,
}

impl Payload for DeletedMemory {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_shows_its_fields() {
        let view = MemoryView {
            id: Uuid::nil(),
            content: "c".into(),
            memory_type: MemoryType::Rule,
            importance: 0.5,
            created_at: 1_763_773_323_456_789,
            updated_at: 1_763_773_323_456_789,
            extra: None,
        };
        assert_eq!(
            Memory::from(view).audited(),
            serde_json::json!({"id": Uuid::nil().to_string(), "content": "c", "memory_type": "rule",
                "importance": 0.5, "created_at": "2025-11-22T01:02:03.456Z", "updated_at": "2025-11-22T01:02:03.456Z"})
        );
    }
}
