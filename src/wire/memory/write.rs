//! Creating and updating one memory: `POST /v1/memories` and `PATCH /v1/memories/{id}`.

use auditmem_projections::{MemoryAmend, MemoryExtra, MemoryType};
use serde::Deserialize;
use utoipa::ToSchema;

use super::fields::{
    extra_of, AgentId, Content, ExpiresAt, Importance, Metadata, OccurredAt, Resolve, SessionId,
    UserId,
};
use crate::wire::field::{optional, present, required, Field, Invalid};
use crate::wire::{empty_refused, unknown_field_named, Body, Refusal};

/// `POST /v1/memories`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryCreateRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(inline, required = true, nullable = false)]
    pub content: Option<Field<Content>>,
    #[schema(inline, required = true, nullable = false)]
    pub memory_type: Option<Field<MemoryType>>,
    /// 0.0 to 1.0, default 0.5.
    #[schema(inline)]
    pub importance: Option<Field<Importance>>,
    /// The end user the memory is about (1 to 256 characters).
    #[schema(inline)]
    pub user_id: Option<Field<UserId>>,
    /// The agent the memory belongs to (1 to 256 characters).
    #[schema(inline)]
    pub agent_id: Option<Field<AgentId>>,
    /// The session the memory came from (1 to 256 characters).
    #[schema(inline)]
    pub session_id: Option<Field<SessionId>>,
    /// A JSON object, at most 8192 bytes as JSON and 5 levels deep.
    #[schema(inline)]
    pub metadata: Option<Field<Metadata>>,
    /// ISO 8601, in the future: from then on the memory is gone from get, list and search.
    #[schema(inline)]
    pub expires_at: Option<Field<ExpiresAt>>,
    /// ISO 8601, past or future: when what the memory says happened or was said (a
    /// conversation turn's time). Shown in answers, filtered on as `occurred_at`, and matched
    /// by a hybrid search whose query names a date (docs/SEARCH.md).
    #[schema(inline)]
    pub occurred_at: Option<Field<OccurredAt>>,
    /// Default false. True: a stored memory of the same scope this one contradicts is
    /// superseded by it, and if one equal in meaning is stored this one is not (see
    /// `resolution` in the answer). Not taken by batches.
    #[schema(inline)]
    pub resolve: Option<Field<Resolve>>,
}

/// A memory to store, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMemory {
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    /// Scope, metadata, expiry and occurrence time (all empty when none was given).
    pub extra: MemoryExtra,
    /// Whether contradictions and duplicates are resolved on create.
    pub resolve: bool,
}

/// The importance of a memory created without one.
pub const DEFAULT_IMPORTANCE: f64 = 0.5;

impl Body for MemoryCreateRequest {
    type Checked = NewMemory;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<NewMemory, Invalid> {
        Ok(NewMemory {
            content: required(self.content, "content is required")?.0,
            memory_type: memory_type_required(self.memory_type)?,
            importance: optional(self.importance)?.map_or(DEFAULT_IMPORTANCE, |i| i.0),
            extra: extra_of(
                self.user_id,
                self.agent_id,
                self.session_id,
                self.metadata,
                self.expires_at,
                self.occurred_at,
            )?,
            resolve: optional(self.resolve)?.is_some_and(|r| r.0),
        })
    }
}

pub(super) fn memory_type_required(
    field: Option<Field<MemoryType>>,
) -> Result<MemoryType, Invalid> {
    required(field, "memory_type is required (rule, fact or context)")
}

/// `PATCH /v1/memories/{id}`: at least one field; content and importance may not be null,
/// metadata, expires_at and occurred_at null clears them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    description = "At least one field; content and importance may not be null; metadata, expires_at and occurred_at null clears them."
)]
pub struct MemoryUpdateRequest {
    /// 1 to 10,000 characters after trimming.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    pub content: Option<Field<Content>>,
    /// 0.0 to 1.0.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    pub importance: Option<Field<Importance>>,
    /// Replaces the metadata object; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline)]
    pub metadata: Option<Field<Metadata>>,
    /// ISO 8601, in the future; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline)]
    pub expires_at: Option<Field<ExpiresAt>>,
    /// ISO 8601, past or future; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(inline)]
    pub occurred_at: Option<Field<OccurredAt>>,
}

/// An update whose shape is checked: at least one field. Its values are checked after the
/// memory is found ([`MemoryUpdate::check`]), so that an update of a missing memory is 404
/// whatever its values.
#[derive(Debug)]
pub struct MemoryUpdate(MemoryUpdateRequest);

/// The changes an update asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Changes {
    pub content: Option<String>,
    pub importance: Option<f64>,
    /// Metadata, expiry and occurrence time changes, when it asks for any.
    pub amend: Option<MemoryAmend>,
}

impl Body for MemoryUpdateRequest {
    type Checked = MemoryUpdate;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<MemoryUpdate, Invalid> {
        if self.content.is_none()
            && self.importance.is_none()
            && self.metadata.is_none()
            && self.expires_at.is_none()
            && self.occurred_at.is_none()
        {
            return Err(Invalid::new(
                "give content, importance, metadata, expires_at and/or occurred_at to update",
            ));
        }
        Ok(MemoryUpdate(self))
    }
}

impl MemoryUpdate {
    pub fn check(self) -> Result<Changes, Invalid> {
        let content = optional(self.0.content)?.map(|c| c.0);
        let importance = optional(self.0.importance)?.map(|i| i.0);
        let metadata = optional(self.0.metadata)?;
        let expires_at = optional(self.0.expires_at)?;
        let occurred_at = optional(self.0.occurred_at)?;
        let amend =
            (metadata.is_some() || expires_at.is_some() || occurred_at.is_some()).then(|| {
                MemoryAmend {
                    set_metadata: metadata.is_some(),
                    metadata: metadata.and_then(|m| m.0),
                    set_expires_at: expires_at.is_some(),
                    expires_at: expires_at.and_then(|e| e.0),
                    set_occurred_at: occurred_at.is_some(),
                    occurred_at: occurred_at.and_then(|o| o.0),
                }
            });
        Ok(Changes {
            content,
            importance,
            amend,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::memory::fields::IMPORTANCE_RANGE;
    use crate::wire::memory::parse;
    use serde_json::Value;

    #[test]
    fn create_checks_name_the_field_in_order() {
        let check = |body: Value| parse::<MemoryCreateRequest>(body).check().map_err(|e| e.0);
        assert_eq!(
            check(serde_json::json!({"content": " a fact ", "memory_type": "fact"})),
            Ok(NewMemory {
                content: "a fact".into(),
                memory_type: MemoryType::Fact,
                importance: 0.5,
                extra: MemoryExtra::default(),
                resolve: false,
            })
        );
        for (body, message) in [
            (serde_json::json!({}), "content is required"),
            (serde_json::json!({"content": null}), "content is required"),
            (
                serde_json::json!({"content": 5, "memory_type": 1}),
                "content must be a string",
            ),
            (
                serde_json::json!({"content": "  "}),
                "content must not be empty",
            ),
            (
                serde_json::json!({"content": "x"}),
                "memory_type is required (rule, fact or context)",
            ),
            (
                serde_json::json!({"content": "x", "memory_type": "opinion"}),
                "unknown memory_type 'opinion' (expected rule, fact or context)",
            ),
            (
                serde_json::json!({"content": "x", "memory_type": 3}),
                "memory_type must be one of rule, fact, context",
            ),
            (
                serde_json::json!({"content": "x", "memory_type": "fact", "importance": 1.5}),
                IMPORTANCE_RANGE,
            ),
            (
                serde_json::json!({"content": "x", "memory_type": "fact", "importance": "high"}),
                IMPORTANCE_RANGE,
            ),
        ] {
            assert_eq!(check(body.clone()), Err(message.to_string()), "{body}");
        }
    }

    #[test]
    fn an_update_refuses_null_and_needs_a_field() {
        let shape = |body: Value| parse::<MemoryUpdateRequest>(body).check();
        assert_eq!(
            shape(serde_json::json!({})).map(|_| ()).map_err(|e| e.0),
            Err(
                "give content, importance, metadata, expires_at and/or occurred_at to update"
                    .into()
            )
        );
        let fields = |body: Value| shape(body).and_then(MemoryUpdate::check).map_err(|e| e.0);
        assert_eq!(
            fields(serde_json::json!({"importance": null})),
            Err(IMPORTANCE_RANGE.into())
        );
        assert_eq!(
            fields(serde_json::json!({"content": null})),
            Err("content is required".into())
        );
        assert_eq!(
            fields(serde_json::json!({"importance": 0.25})),
            Ok(Changes {
                content: None,
                importance: Some(0.25),
                amend: None,
            })
        );
    }
}
