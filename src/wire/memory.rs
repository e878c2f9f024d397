//! The memory store's shapes: memories, the create, update, search, extract and batch-delete
//! bodies with their checks, and what each answers.

use auditmem_projections::keyword::Fusion;
use auditmem_projections::memories::filter::Filter;
use auditmem_projections::memories::{MemoryView, SearchMode};
use auditmem_projections::{MemoryAmend, MemoryExtra, MemoryType};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::envelope::Payload;
use super::field::{optional, present, required, whole_number, Check, Field, Invalid};
use super::filter::parse_filter;
use super::query::{self, Paging};
use super::time::{now, parse_time, Time};
use super::{empty_refused, unknown_field_named, Body, Params};
use crate::extract::{ChatMessage, ChatRole, ExtractInput, MAX_CONTENT_CHARS};

/// The memory list's page size: default 20, at most 100 (larger is clamped).
pub const DEFAULT_PAGE_SIZE: usize = 20;
/// Search's result count: default 5, 1 to 100.
pub const DEFAULT_TOP_K: usize = 5;
pub const MAX_TOP_K: usize = 100;

const IMPORTANCE_RANGE: &str = "importance must be a number from 0.0 to 1.0";

/// A memory's text: 1 to [`MAX_CONTENT_CHARS`] characters after trimming (stored trimmed).
#[derive(Clone, Debug, PartialEq)]
pub struct Content(pub String);

impl Check for Content {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::Null => Err(Invalid::new("content is required")),
            Value::String(s) => {
                let t = s.trim();
                let n = t.chars().count();
                if n == 0 {
                    Err(Invalid::new("content must not be empty"))
                } else if n > MAX_CONTENT_CHARS {
                    Err(Invalid(format!(
                        "content is {n} characters; at most {MAX_CONTENT_CHARS} are allowed"
                    )))
                } else {
                    Ok(Content(t.to_string()))
                }
            }
            _ => Err(Invalid::new("content must be a string")),
        }
    }
}

impl Check for MemoryType {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::String(s) => s.parse().map_err(Invalid),
            _ => Err(Invalid::new(
                "memory_type must be one of rule, fact, context",
            )),
        }
    }
}

/// How much a memory matters, 0.0 to 1.0: search ranks by it beside similarity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Importance(pub f64);

impl Check for Importance {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_f64() {
            Some(x) if raw.is_number() && (0.0..=1.0).contains(&x) => Ok(Importance(x)),
            _ => Err(Invalid::new(IMPORTANCE_RANGE)),
        }
    }
}

/// Characters of a `user_id`, `agent_id` or `session_id` at most.
pub const MAX_SCOPE_CHARS: usize = 256;
/// Bytes of a memory's `metadata` as compact JSON at most, and its nesting at most.
pub const MAX_METADATA_BYTES: usize = 8192;
pub const MAX_METADATA_DEPTH: usize = 5;

/// A `user_id`, `agent_id` or `session_id`: 1 to [`MAX_SCOPE_CHARS`] characters after
/// trimming, no control characters. The refusal names the field.
fn scope_id(field: &str, raw: Value) -> Result<String, Invalid> {
    match raw {
        Value::String(s) => {
            let t = s.trim();
            let n = t.chars().count();
            if n == 0 || n > MAX_SCOPE_CHARS {
                Err(Invalid(format!(
                    "{field} must be 1 to {MAX_SCOPE_CHARS} characters"
                )))
            } else if t.chars().any(char::is_control) {
                Err(Invalid(format!("{field} must not hold control characters")))
            } else {
                Ok(t.to_string())
            }
        }
        _ => Err(Invalid(format!("{field} must be a string"))),
    }
}

macro_rules! scope_field {
    ($name:ident, $field:literal) => {
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name(pub String);

        impl Check for $name {
            type Raw = Value;

            fn check(raw: Value) -> Result<Self, Invalid> {
                scope_id($field, raw).map($name)
            }
        }
    };
}

scope_field!(UserId, "user_id");
scope_field!(AgentId, "agent_id");
scope_field!(SessionId, "session_id");

/// A memory's metadata: a JSON object of at most [`MAX_METADATA_BYTES`] bytes and
/// [`MAX_METADATA_DEPTH`] levels, held as its compact JSON text. `null` (where an update takes
/// it) clears it.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata(pub Option<String>);

fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

impl Check for Metadata {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::Null => Ok(Metadata(None)),
            Value::Object(_) => {
                if depth(&raw) > MAX_METADATA_DEPTH {
                    return Err(Invalid(format!(
                        "metadata is nested deeper than {MAX_METADATA_DEPTH} levels"
                    )));
                }
                let text = raw.to_string();
                if text.len() > MAX_METADATA_BYTES {
                    return Err(Invalid(format!(
                        "metadata is {} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed",
                        text.len()
                    )));
                }
                Ok(Metadata(Some(text)))
            }
            _ => Err(Invalid::new("metadata must be a JSON object")),
        }
    }
}

/// When a memory expires: an ISO 8601 time after now; `null` (where an update takes it)
/// clears it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpiresAt(pub Option<i64>);

impl Check for ExpiresAt {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::Null => Ok(ExpiresAt(None)),
            Value::String(s) => {
                let at = parse_time("expires_at", &s)?;
                if at <= now() {
                    return Err(Invalid::new("expires_at must be in the future"));
                }
                Ok(ExpiresAt(Some(at)))
            }
            _ => Err(Invalid::new(
                "expires_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or null",
            )),
        }
    }
}

/// `filters`: see [`crate::wire::filter`].
#[derive(Clone, Debug, PartialEq)]
pub struct Filters(pub Filter);

impl Check for Filters {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        parse_filter(&raw).map(Filters)
    }
}

/// A boolean flag (`include_superseded`, `resolve`, `explain`), its refusal naming it.
macro_rules! flag_field {
    ($name:ident, $field:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub bool);

        impl Check for $name {
            type Raw = Value;

            fn check(raw: Value) -> Result<Self, Invalid> {
                match raw {
                    Value::Bool(b) => Ok($name(b)),
                    _ => Err(Invalid::new(concat!($field, " must be a boolean"))),
                }
            }
        }
    };
}

flag_field!(IncludeSuperseded, "include_superseded");
flag_field!(Explain, "explain");
flag_field!(Resolve, "resolve");

impl Check for SearchMode {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_str() {
            Some("semantic") => Ok(SearchMode::Semantic),
            Some("keyword") => Ok(SearchMode::Keyword),
            Some("hybrid") => Ok(SearchMode::Hybrid),
            _ => Err(Invalid::new(
                "search_mode must be one of semantic, keyword, hybrid",
            )),
        }
    }
}

/// A number of the fusion's settings within a range, its refusal naming it.
macro_rules! ranged_field {
    ($name:ident, $field:literal, $lo:expr, $hi:expr, $range:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name(pub f32);

        impl Check for $name {
            type Raw = Value;

            fn check(raw: Value) -> Result<Self, Invalid> {
                match raw.as_f64() {
                    Some(x) if raw.is_number() && ($lo..=$hi).contains(&x) => Ok($name(x as f32)),
                    _ => Err(Invalid::new(concat!($field, " must be a number ", $range))),
                }
            }
        }
    };
}

ranged_field!(RrfK, "rrf_k", 0.0, 1000.0, "from 0 to 1000");
ranged_field!(
    SemanticWeight,
    "semantic_weight",
    0.0,
    10.0,
    "from 0.0 to 10.0"
);
ranged_field!(
    KeywordWeight,
    "keyword_weight",
    0.0,
    10.0,
    "from 0.0 to 10.0"
);

/// The scope and metadata fields a create, a batch item and an extraction share, checked in
/// this order.
fn extra_of(
    user_id: Option<Field<UserId>>,
    agent_id: Option<Field<AgentId>>,
    session_id: Option<Field<SessionId>>,
    metadata: Option<Field<Metadata>>,
    expires_at: Option<Field<ExpiresAt>>,
) -> Result<MemoryExtra, Invalid> {
    Ok(MemoryExtra {
        user_id: optional(user_id)?.map(|v| v.0),
        agent_id: optional(agent_id)?.map(|v| v.0),
        session_id: optional(session_id)?.map(|v| v.0),
        metadata: optional(metadata)?.and_then(|m| m.0),
        expires_at: optional(expires_at)?.and_then(|e| e.0),
    })
}

/// `POST /v1/memories`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryCreateRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(value_type = String, min_length = 1, max_length = 10000, pattern = r"\S")]
    pub content: Option<Field<Content>>,
    #[schema(value_type = MemoryType)]
    pub memory_type: Option<Field<MemoryType>>,
    /// 0.0 to 1.0, default 0.5.
    #[schema(value_type = Option<f64>, minimum = 0.0, maximum = 1.0)]
    pub importance: Option<Field<Importance>>,
    /// The end user the memory is about (1 to 256 characters).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256)]
    pub user_id: Option<Field<UserId>>,
    /// The agent the memory belongs to (1 to 256 characters).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256)]
    pub agent_id: Option<Field<AgentId>>,
    /// The session the memory came from (1 to 256 characters).
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256)]
    pub session_id: Option<Field<SessionId>>,
    /// A JSON object, at most 8192 bytes as JSON and 5 levels deep.
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Field<Metadata>>,
    /// ISO 8601, in the future: from then on the memory is gone from get, list and search.
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Field<ExpiresAt>>,
    /// Default false. True: a stored memory of the same scope this one contradicts is
    /// superseded by it, and if one equal in meaning is stored this one is not (see
    /// `resolution` in the answer). Not taken by batches.
    #[schema(value_type = Option<bool>)]
    pub resolve: Option<Field<Resolve>>,
}

/// A memory to store, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMemory {
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    /// Scope, metadata and expiry (all empty when none was given).
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

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
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
            )?,
            resolve: optional(self.resolve)?.is_some_and(|r| r.0),
        })
    }
}

fn memory_type_required(field: Option<Field<MemoryType>>) -> Result<MemoryType, Invalid> {
    required(field, "memory_type is required (rule, fact or context)")
}

/// `PATCH /v1/memories/{id}`: at least one field; content and importance may not be null,
/// metadata and expires_at null clears them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    description = "At least one field; content and importance may not be null; metadata and expires_at null clears them."
)]
pub struct MemoryUpdateRequest {
    /// 1 to 10,000 characters after trimming.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, max_length = 10000, pattern = r"\S")]
    pub content: Option<Field<Content>>,
    /// 0.0 to 1.0.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, nullable = false, minimum = 0.0, maximum = 1.0)]
    pub importance: Option<Field<Importance>>,
    /// Replaces the metadata object; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>, nullable = true)]
    pub metadata: Option<Field<Metadata>>,
    /// ISO 8601, in the future; null clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, nullable = true)]
    pub expires_at: Option<Field<ExpiresAt>>,
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
    /// Metadata and expiry changes, when it asks for any.
    pub amend: Option<MemoryAmend>,
}

impl Body for MemoryUpdateRequest {
    type Checked = MemoryUpdate;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<MemoryUpdate, Invalid> {
        if self.content.is_none()
            && self.importance.is_none()
            && self.metadata.is_none()
            && self.expires_at.is_none()
        {
            return Err(Invalid::new(
                "give content, importance, metadata and/or expires_at to update",
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
        let amend = (metadata.is_some() || expires_at.is_some()).then(|| MemoryAmend {
            set_metadata: metadata.is_some(),
            metadata: metadata.and_then(|m| m.0),
            set_expires_at: expires_at.is_some(),
            expires_at: expires_at.and_then(|e| e.0),
        });
        Ok(Changes {
            content,
            importance,
            amend,
        })
    }
}

/// Memories one batch call creates or updates at most.
pub const MAX_BATCH: usize = 100;
/// Invalid items a batch's 400 names at most (the first ones, by index).
const MAX_NAMED_ITEMS: usize = 10;

/// `POST /v1/memories/batch`: 1 to 100 memories, each as `POST /v1/memories` takes it; all are
/// created or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatchCreateRequest {
    /// 1 to 100 items, each a `MemoryCreateRequest`.
    #[schema(value_type = Vec<MemoryCreateRequest>, min_items = 1, max_items = 100)]
    pub memories: Option<Value>,
}

/// `PATCH /v1/memories/batch`: 1 to 100 updates, each the memory's `id` and the fields
/// `PATCH /v1/memories/{id}` takes; all are applied or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatchUpdateRequest {
    /// 1 to 100 items, each a `MemoryBatchUpdateItem`.
    #[schema(value_type = Vec<MemoryBatchUpdateItem>, min_items = 1, max_items = 100)]
    pub memories: Option<Value>,
}

/// One update of a batch: which memory, and at least one of content and importance.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatchUpdateItem {
    #[schema(value_type = String)]
    pub id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, max_length = 10000, pattern = r"\S")]
    pub content: Option<Field<Content>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, nullable = false, minimum = 0.0, maximum = 1.0)]
    pub importance: Option<Field<Importance>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>, nullable = true)]
    pub metadata: Option<Field<Metadata>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, nullable = true)]
    pub expires_at: Option<Field<ExpiresAt>>,
}

/// A batch update's item whose shape is checked; its values are checked once its memory is
/// found, as a single update's are.
#[derive(Debug)]
pub struct BatchUpdate {
    pub id: Uuid,
    pub update: MemoryUpdate,
}

/// The items of a batch body: each read as `T` and checked, every refusal named by its index
/// (`memories[3]: content is required`), the first [`MAX_NAMED_ITEMS`] of them in one message.
fn batch_items<T: Body>(memories: Option<Value>) -> Result<Vec<T::Checked>, Invalid> {
    let items = match memories {
        None | Some(Value::Null) => return Err(Invalid::new("memories is required")),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Invalid::new("memories must be an array")),
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(Invalid(format!(
            "memories holds {} items; a batch holds 1 to {MAX_BATCH}",
            items.len()
        )));
    }
    let mut checked = Vec::with_capacity(items.len());
    let mut refused = Vec::new();
    let mut refusals = 0usize;
    for (i, item) in items.into_iter().enumerate() {
        let result = if item.is_object() {
            serde_path_to_error::deserialize::<_, T>(item)
                .map_err(T::refused)
                .and_then(T::check)
        } else {
            Err(Invalid::new("must be an object"))
        };
        match result {
            Ok(c) => checked.push(c),
            Err(Invalid(why)) => {
                refusals += 1;
                if refused.len() < MAX_NAMED_ITEMS {
                    refused.push(format!("memories[{i}]: {why}"));
                }
            }
        }
    }
    if refusals > 0 {
        let mut message = refused.join("; ");
        if refusals > refused.len() {
            message.push_str(&format!(" (and {} more)", refusals - refused.len()));
        }
        return Err(Invalid(format!("{message}; nothing was stored")));
    }
    Ok(checked)
}

impl Body for MemoryBatchCreateRequest {
    type Checked = Vec<NewMemory>;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Vec<NewMemory>, Invalid> {
        let items = batch_items::<MemoryCreateRequest>(self.memories)?;
        if let Some(i) = items.iter().position(|m| m.resolve) {
            return Err(Invalid(format!(
                "memories[{i}]: resolve is taken by POST /v1/memories and extraction, not by a batch; nothing was stored"
            )));
        }
        Ok(items)
    }
}

impl Body for MemoryBatchUpdateItem {
    type Checked = BatchUpdate;

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<BatchUpdate, Invalid> {
        let id = match self.id {
            None | Some(Value::Null) => return Err(Invalid::new("id is required")),
            Some(Value::String(s)) => Uuid::parse_str(s.trim())
                .map_err(|_| Invalid(format!("id '{s}' is not a memory id")))?,
            Some(_) => return Err(Invalid::new("id must be a string")),
        };
        let update = MemoryUpdateRequest {
            content: self.content,
            importance: self.importance,
            metadata: self.metadata,
            expires_at: self.expires_at,
        };
        Ok(BatchUpdate {
            id,
            update: Body::check(update)?,
        })
    }
}

impl Body for MemoryBatchUpdateRequest {
    type Checked = Vec<BatchUpdate>;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Vec<BatchUpdate>, Invalid> {
        let updates = batch_items::<MemoryBatchUpdateItem>(self.memories)?;
        let mut seen = std::collections::HashMap::with_capacity(updates.len());
        for (i, u) in updates.iter().enumerate() {
            if let Some(first) = seen.insert(u.id, i) {
                return Err(Invalid(format!(
                    "memories[{i}]: id {} is memories[{first}]'s too; a batch updates a memory once; nothing was stored",
                    u.id
                )));
            }
        }
        Ok(updates)
    }
}

/// What a batch created or updated, in the order asked.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryBatch {
    pub memories: Vec<Memory>,
}

impl Payload for MemoryBatch {}

/// `DELETE /v1/memories`: every memory of one type, or every memory a filter matches (both:
/// those of the type the filter matches). There is no "delete everything": an empty body, or
/// a filter without a condition, is refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchDeleteRequest {
    #[schema(value_type = Option<MemoryType>)]
    pub memory_type: Option<Field<MemoryType>>,
    /// A filter (see `POST /v1/memories/query`); superseded memories it matches go too.
    #[schema(value_type = Option<Object>)]
    pub filters: Option<Field<Filters>>,
}

/// A batch delete, checked: at least one of the two.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchDelete {
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
}

impl Body for BatchDeleteRequest {
    type Checked = BatchDelete;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<BatchDelete, Invalid> {
        if self.filters.is_none() {
            return Ok(BatchDelete {
                memory_type: Some(memory_type_required(self.memory_type)?),
                filter: None,
            });
        }
        Ok(BatchDelete {
            memory_type: optional(self.memory_type)?,
            filter: optional(self.filters)?.map(|f| f.0),
        })
    }
}

/// `POST /v1/memories/query`: the tenant's memories a filter matches, newest first, paged as
/// `GET /v1/memories` is.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryQueryRequest {
    #[schema(value_type = Option<Object>)]
    pub filters: Option<Field<Filters>>,
    #[schema(value_type = Option<MemoryType>)]
    pub memory_type: Option<Field<MemoryType>>,
    /// Default false: memories another superseded are left out.
    #[schema(value_type = Option<bool>)]
    pub include_superseded: Option<Field<IncludeSuperseded>>,
    /// Default 1.
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub page: Option<Value>,
    /// Default 20, above 100 clamped.
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub page_size: Option<Value>,
}

/// A memory query, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryQuerying {
    pub paging: Paging,
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
    pub include_superseded: bool,
}

/// A page number given in a body: a JSON number, or a string as in a query.
fn body_number(v: Option<Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    }
}

impl Body for MemoryQueryRequest {
    type Checked = MemoryQuerying;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        Some(Ok(Self::default()))
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<MemoryQuerying, Invalid> {
        let filter = optional(self.filters)?.map(|f| f.0);
        let memory_type = optional(self.memory_type)?;
        let include_superseded = optional(self.include_superseded)?.is_some_and(|f| f.0);
        let paging = Paging::check(
            body_number(self.page),
            body_number(self.page_size),
            DEFAULT_PAGE_SIZE,
        )?;
        Ok(MemoryQuerying {
            paging,
            memory_type,
            filter,
            include_superseded,
        })
    }
}

/// A search query: 1 to [`MAX_CONTENT_CHARS`] characters after trimming.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchText(pub String);

impl Check for SearchText {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        let query = match raw {
            Value::String(s) if !s.trim().is_empty() => s.trim().to_string(),
            Value::String(_) => return Err(Invalid::new("query must not be empty")),
            Value::Null => return Err(Invalid::new("query is required")),
            _ => return Err(Invalid::new("query must be a string")),
        };
        if query.chars().count() > MAX_CONTENT_CHARS {
            return Err(Invalid(format!(
                "query is longer than {MAX_CONTENT_CHARS} characters"
            )));
        }
        Ok(SearchText(query))
    }
}

/// How many results a search returns: 1 to [`MAX_TOP_K`]; the interface calls it a number, so a
/// whole one written as 5.0 is 5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopK(pub usize);

impl Check for TopK {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_number().and_then(whole_number) {
            Some(k) if (1..=MAX_TOP_K as i128).contains(&k) => Ok(TopK(k as usize)),
            _ => Err(Invalid(format!(
                "top_k must be an integer from 1 to {MAX_TOP_K}"
            ))),
        }
    }
}

/// The lowest similarity a search result may have, -1.0 to 1.0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinSimilarity(pub f64);

impl Check for MinSimilarity {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_f64() {
            Some(x) if (-1.0..=1.0).contains(&x) => Ok(MinSimilarity(x)),
            _ => Err(Invalid::new(
                "min_similarity must be a number from -1.0 to 1.0",
            )),
        }
    }
}

/// `POST /v1/memories/search`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(value_type = String, min_length = 1, max_length = 10000, pattern = r"\S")]
    pub query: Option<Field<SearchText>>,
    /// 1 to 100, default 5; a whole number written as 5.0 is 5.
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 100)]
    pub top_k: Option<Field<TopK>>,
    /// -1.0 to 1.0, default 0.
    #[schema(value_type = Option<f64>, minimum = -1.0, maximum = 1.0)]
    pub min_similarity: Option<Field<MinSimilarity>>,
    #[schema(value_type = Option<MemoryType>)]
    pub memory_type: Option<Field<MemoryType>>,
    /// Only memories this filter matches (see `POST /v1/memories/query`).
    #[schema(value_type = Option<Object>)]
    pub filters: Option<Field<Filters>>,
    /// Default false: memories another superseded are left out.
    #[schema(value_type = Option<bool>)]
    pub include_superseded: Option<Field<IncludeSuperseded>>,
    /// `semantic` (the default: by meaning), `keyword` (BM25 over the contents) or `hybrid`
    /// (both, fused by reciprocal rank).
    #[schema(value_type = Option<String>, example = "hybrid")]
    pub search_mode: Option<Field<SearchMode>>,
    /// Default false: true adds each result's ranking breakdown (`explain`).
    #[schema(value_type = Option<bool>)]
    pub explain: Option<Field<Explain>>,
    /// Hybrid: the fusion's constant added to every rank (0 to 1000, default 60).
    #[schema(value_type = Option<f64>, minimum = 0.0, maximum = 1000.0)]
    pub rrf_k: Option<Field<RrfK>>,
    /// Hybrid: the semantic list's weight (0 to 10, default 1).
    #[schema(value_type = Option<f64>, minimum = 0.0, maximum = 10.0)]
    pub semantic_weight: Option<Field<SemanticWeight>>,
    /// Hybrid: the keyword list's weight (0 to 10, default 1).
    #[schema(value_type = Option<f64>, minimum = 0.0, maximum = 10.0)]
    pub keyword_weight: Option<Field<KeywordWeight>>,
}

/// A search, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    pub query: String,
    pub top_k: usize,
    pub min_similarity: f64,
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
    pub include_superseded: bool,
    pub mode: SearchMode,
    pub explain: bool,
    pub fusion: Fusion,
}

impl Body for SearchRequest {
    type Checked = Search;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Search, Invalid> {
        Ok(Search {
            query: required(self.query, "query is required")?.0,
            top_k: optional(self.top_k)?.map_or(DEFAULT_TOP_K, |k| k.0),
            min_similarity: optional(self.min_similarity)?.map_or(0.0, |m| m.0),
            memory_type: optional(self.memory_type)?,
            filter: optional(self.filters)?.map(|f| f.0),
            include_superseded: optional(self.include_superseded)?.is_some_and(|f| f.0),
            mode: optional(self.search_mode)?.unwrap_or_default(),
            explain: optional(self.explain)?.is_some_and(|e| e.0),
            fusion: {
                let d = Fusion::default();
                Fusion {
                    k: optional(self.rrf_k)?.map_or(d.k, |v| v.0),
                    semantic_weight: optional(self.semantic_weight)?
                        .map_or(d.semantic_weight, |v| v.0),
                    keyword_weight: optional(self.keyword_weight)?
                        .map_or(d.keyword_weight, |v| v.0),
                    ..d
                }
            },
        })
    }
}

/// A conversation to extract from: 1 or more messages in OpenAI's chat format, kept also as
/// given (the audit entry's `input_content`). `list` holds the messages of known roles, read
/// into text; a message of an unknown role is in `skipped` instead of refusing the call, so
/// that a transcript from another tool still gives what it can.
#[derive(Clone, Debug, PartialEq)]
pub struct Messages {
    pub list: Vec<ChatMessage>,
    pub skipped: Vec<SkippedMessage>,
    pub given: Value,
}

/// A message of a conversation in OpenAI's chat format.
// Only for the OpenAPI document: `Messages::check` reads the JSON itself, to name the part
// that is wrong.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct GivenMessage {
    /// system, developer, user, assistant, tool or function, in any case. A message of
    /// another role is skipped and named in the answer's `skipped_messages`.
    role: String,
    /// A string; null or left out (no text, e.g. an assistant's tool call); or content
    /// parts, of which the `text` parts are read (joined by newlines) and the others (images,
    /// audio, files) ignored. Other fields of a message (`name`, `tool_calls`,
    /// `tool_call_id`) are ignored.
    content: Option<GivenContent>,
}

/// A message's content: a string or content parts.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum GivenContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A content part: `{"type": "text", "text": "..."}` is read; a part of another type is
/// ignored.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// A message extraction did not read, and why.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct SkippedMessage {
    /// Its position in `messages`, from 0.
    pub index: usize,
    /// e.g. `unknown role "narrator"`.
    pub reason: String,
}

impl Check for Messages {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        let Value::Array(items) = &raw else {
            return Err(Invalid::new(
                "messages must be a list of {role, content} messages",
            ));
        };
        if items.is_empty() {
            return Err(Invalid::new("messages must not be empty"));
        }
        let mut list = Vec::with_capacity(items.len());
        let mut skipped = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Value::Object(m) = item else {
                return Err(Invalid(format!(
                    "messages[{i}] must be an object with role and content"
                )));
            };
            let Some(Value::String(role)) = m.get("role") else {
                return Err(Invalid(format!("messages[{i}].role must be a string")));
            };
            let content = message_text(i, m.get("content"))?;
            match role.parse::<ChatRole>() {
                Ok(known) => list.push(ChatMessage {
                    role: <&str>::from(known).to_string(),
                    content,
                }),
                Err(_) => skipped.push(SkippedMessage {
                    index: i,
                    reason: format!("unknown role {}", Value::String(role.clone())),
                }),
            }
        }
        Ok(Messages {
            list,
            skipped,
            given: raw,
        })
    }
}

/// The text of message `i`'s content: a string as it is, null or absent as no text, content
/// parts as their text parts joined by newlines (a newline ends a statement, as a part does).
fn message_text(i: usize, content: Option<&Value>) -> Result<String, Invalid> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                let Value::Object(p) = part else {
                    return Err(Invalid(format!(
                        "messages[{i}].content[{j}] must be an object with a type"
                    )));
                };
                match (p.get("type"), p.get("text")) {
                    (Some(Value::String(t)), Some(Value::String(text))) if t == "text" => {
                        texts.push(text.as_str())
                    }
                    (Some(Value::String(t)), _) if t == "text" => {
                        return Err(Invalid(format!(
                            "messages[{i}].content[{j}].text must be a string"
                        )))
                    }
                    (Some(Value::String(_)), _) => {}
                    _ => {
                        return Err(Invalid(format!(
                            "messages[{i}].content[{j}].type must be a string"
                        )))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(Invalid(format!(
            "messages[{i}].content must be a string, null or a list of content parts"
        ))),
    }
}

/// A text to extract from: not blank.
#[derive(Clone, Debug, PartialEq)]
pub struct Text(pub String);

impl Check for Text {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::String(t) if !t.trim().is_empty() => Ok(Text(t)),
            _ => Err(Invalid::new("text must be a non-empty string")),
        }
    }
}

/// Whether extraction skips what duplicates a memory already stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deduplicate(pub bool);

impl Check for Deduplicate {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::Bool(b) => Ok(Deduplicate(b)),
            _ => Err(Invalid::new("deduplicate must be a boolean")),
        }
    }
}

/// `POST /v1/memories/extract`: exactly one of `messages` and `text` (at most
/// `--max-extract-chars` characters in all, 20,000 by default); `null` is "not given".
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    description = "Exactly one of `messages` and `text` (at most 20,000 characters in all by default; an input in which more than 50 memories are found, by default, is refused)."
)]
pub struct ExtractRequest {
    #[schema(value_type = Option<Vec<GivenMessage>>, nullable = false, min_items = 1)]
    pub messages: Option<Field<Messages>>,
    #[schema(value_type = Option<String>, nullable = false, min_length = 1, pattern = r"\S")]
    pub text: Option<Field<Text>>,
    /// Default false.
    #[schema(value_type = Option<bool>)]
    pub deduplicate: Option<Field<Deduplicate>>,
    /// Given to every memory extracted.
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256)]
    pub user_id: Option<Field<UserId>>,
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256)]
    pub agent_id: Option<Field<AgentId>>,
    #[schema(value_type = Option<String>, min_length = 1, max_length = 256)]
    pub session_id: Option<Field<SessionId>>,
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Field<Metadata>>,
    /// Default false. True: each memory found supersedes the stored ones of its scope it
    /// contradicts, and one equal in meaning to a stored one is skipped (`skipped`).
    #[schema(value_type = Option<bool>)]
    pub resolve: Option<Field<Resolve>>,
}

/// An extraction, checked: its input as the extractor takes it, as it is audited, and as text
/// (what is measured and charged).
#[derive(Clone, Debug, PartialEq)]
pub struct Extraction {
    pub deduplicate: bool,
    pub resolve: bool,
    /// Scope and metadata every memory extracted is given.
    pub extra: MemoryExtra,
    pub input: ExtractInput,
    /// The messages not read (an unknown role), answered as `skipped_messages`.
    pub skipped_messages: Vec<SkippedMessage>,
    pub input_value: Value,
    pub input_text: String,
}

impl Body for ExtractRequest {
    type Checked = Extraction;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Extraction, Invalid> {
        let deduplicate = optional(self.deduplicate)?.is_some_and(|d| d.0);
        let extra = extra_of(
            self.user_id,
            self.agent_id,
            self.session_id,
            self.metadata,
            None,
        )?;
        let mut skipped_messages = Vec::new();
        let (input, input_value, input_text) = match (self.messages, self.text) {
            (Some(_), Some(_)) => {
                return Err(Invalid::new(
                    "give exactly one of messages or text, not both",
                ))
            }
            (None, None) => return Err(Invalid::new("give exactly one of messages or text")),
            (Some(m), None) => {
                let Messages {
                    list,
                    skipped,
                    given,
                } = m.value()?;
                skipped_messages = skipped;
                // What is measured and charged is the text of the messages read.
                let text = list
                    .iter()
                    .map(|m| m.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n");
                (ExtractInput::Messages(list), given, text)
            }
            // The audit detail's input_content is an object or an array (the interface), so
            // the text is recorded as the object it came in.
            (None, Some(t)) => {
                let Text(t) = t.value()?;
                (
                    ExtractInput::Text(t.clone()),
                    serde_json::json!({ "text": t }),
                    t,
                )
            }
        };
        Ok(Extraction {
            deduplicate,
            resolve: optional(self.resolve)?.is_some_and(|r| r.0),
            extra,
            input,
            skipped_messages,
            input_value,
            input_text,
        })
    }
}

/// The query of `GET /v1/memories`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MemoryListQuery {
    /// rule, fact or context
    #[param(value_type = Option<MemoryType>)]
    memory_type: Option<String>,
    /// default 1
    #[param(value_type = Option<u64>, minimum = 1)]
    page: Option<String>,
    /// default 20, above 100 clamped
    #[param(value_type = Option<u64>, minimum = 1)]
    page_size: Option<String>,
    /// only the memories of this end user
    user_id: Option<String>,
    /// only the memories of this agent
    agent_id: Option<String>,
    /// only the memories of this session
    session_id: Option<String>,
}

/// A memory list, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryListing {
    pub paging: Paging,
    pub memory_type: Option<MemoryType>,
    /// The scopes asked for, as a filter.
    pub filter: Option<Filter>,
}

impl Params for MemoryListQuery {
    type Checked = MemoryListing;

    fn check(self) -> Result<MemoryListing, Invalid> {
        let paging = Paging::check(self.page, self.page_size, DEFAULT_PAGE_SIZE)?;
        let memory_type = query::given(self.memory_type.map(|t| t.trim().to_string()))
            .map(|t| t.parse::<MemoryType>().map_err(Invalid))
            .transpose()?;
        let mut scopes = serde_json::Map::new();
        for (name, v) in [
            ("user_id", self.user_id),
            ("agent_id", self.agent_id),
            ("session_id", self.session_id),
        ] {
            if let Some(v) = v {
                scopes.insert(
                    name.into(),
                    Value::String(scope_id(name, Value::String(v))?),
                );
            }
        }
        let filter = (!scopes.is_empty())
            .then(|| parse_filter(&Value::Object(scopes)))
            .transpose()?;
        Ok(MemoryListing {
            paging,
            memory_type,
            filter,
        })
    }
}

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
            superseded_by: x.superseded_by,
            superseded_at: x.superseded_at.map(Time),
            resolution: None,
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

#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryPage {
    pub memories: Vec<Memory>,
    #[schema(value_type = u64)]
    pub total: usize,
    #[schema(value_type = u64)]
    pub page: usize,
    #[schema(value_type = u64)]
    pub page_size: usize,
}

impl Payload for MemoryPage {}

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

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchDeleted {
    /// The type asked for (absent when only `filters` was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<MemoryType>,
    #[schema(value_type = u64)]
    pub deleted: usize,
}

impl Payload for BatchDeleted {}

/// A similarity as the API shows it: six decimals.
pub fn shown_score(s: f32) -> f64 {
    ((s as f64) * 1e6).round() / 1e6
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResult {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    /// Cosine similarity.
    pub score: f64,
    /// The value results are ranked by: `0.85 * score + 0.15 * importance` (semantic), the
    /// BM25 score (keyword) or the fused score (hybrid).
    pub final_score: f64,
    /// The BM25 score, where keyword search contributed the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_score: Option<f64>,
    /// The ranking's breakdown, when the search asked for `explain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<SearchExplain>,
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
    pub superseded_by: Option<Uuid>,
}

/// How a result came to its place.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchExplain {
    pub search_mode: &'static str,
    /// Its place in the semantic list (from 1), if it was in it.
    pub semantic_rank: Option<usize>,
    /// `0.85 * score + 0.15 * importance`.
    pub semantic_final_score: f64,
    /// Its place in the keyword list (from 1), if it was in it.
    pub keyword_rank: Option<usize>,
    pub keyword_score: Option<f64>,
    /// Hybrid: the fusion's constant and weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rrf_k: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_weight: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_weight: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResults {
    pub results: Vec<SearchResult>,
}

impl Payload for SearchResults {
    fn envelope_name() -> std::borrow::Cow<'static, str> {
        "SearchEnvelope".into()
    }
}

/// A search result as the search's audit entry records it (`memory_results`): its ranking too.
#[derive(Debug, Serialize)]
pub struct AuditedHit<'a> {
    pub id: Uuid,
    pub content: &'a str,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub similarity: f64,
    pub final_score: f64,
    /// How the memory was found: `semantic` (by meaning), `keyword` (BM25) or `hybrid` (by
    /// both lists of a hybrid search).
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_score: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedMemory {
    pub content: String,
    pub memory_type: MemoryType,
    // Why it was not stored: `duplicate`.
    pub reason: &'static str,
    #[schema(value_type = String)]
    pub duplicate_of: Uuid,
}

/// What an extraction stored and skipped, and what it cost.
#[derive(Debug, Serialize, ToSchema)]
pub struct Extracted {
    pub memories: Vec<Memory>,
    pub skipped: Vec<SkippedMemory>,
    pub credits_consumed: f64,
    /// The messages not read, each with its index and why (an unknown role); empty for a
    /// text.
    pub skipped_messages: Vec<SkippedMessage>,
}

impl Extracted {
    /// What the extraction's audit entry records as its `output_content`: the memories stored
    /// and skipped (the charge is the entry's own `credits_consumed`).
    pub fn output(&self) -> Value {
        #[derive(Serialize)]
        struct Output<'a> {
            memories: &'a [Memory],
            skipped: &'a [SkippedMemory],
            skipped_messages: &'a [SkippedMessage],
        }
        json_of(&Output {
            memories: &self.memories,
            skipped: &self.skipped,
            skipped_messages: &self.skipped_messages,
        })
    }
}

impl Payload for Extracted {
    fn envelope_name() -> std::borrow::Cow<'static, str> {
        "ExtractEnvelope".into()
    }
}

/// One version of a memory, from the log: what the change set and when.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryVersion {
    /// created, updated, superseded, deleted or expired.
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
    /// The newer memory that superseded it (superseded).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub superseded_by: Option<Uuid>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryHistory {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub deleted: bool,
    pub versions: Vec<MemoryVersion>,
}

impl Payload for MemoryHistory {}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: for<'de> Deserialize<'de>>(body: Value) -> T {
        serde_json::from_value(body).expect("parses")
    }

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
            Err("give content, importance, metadata and/or expires_at to update".into())
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

    #[test]
    fn an_unknown_field_is_named_with_the_allowed_ones() {
        let refused = |body: &str| {
            let mut de = serde_json::Deserializer::from_str(body);
            match serde_path_to_error::deserialize::<_, SearchRequest>(&mut de) {
                Err(e) => <SearchRequest as Body>::refused(e).0,
                Ok(_) => String::from("accepted"),
            }
        };
        assert_eq!(
            refused(r#"{"query": "x", "z": 1}"#),
            "unknown field 'z' (allowed: query, top_k, min_similarity, memory_type, filters, include_superseded, search_mode, explain, rrf_k, semantic_weight, keyword_weight)"
        );
        assert_eq!(
            refused(r#"{"query": tru}"#),
            "invalid JSON body: query: expected ident at line 1 column 14"
        );
    }

    #[test]
    fn roles_are_the_schemas() {
        let names: Vec<&str> = <ChatRole as strum::VariantArray>::VARIANTS
            .iter()
            .map(|r| r.into())
            .collect();
        assert_eq!(
            names,
            [
                "system",
                "developer",
                "user",
                "assistant",
                "tool",
                "function"
            ]
        );
    }

    fn extraction(body: Value) -> Result<Extraction, String> {
        parse::<ExtractRequest>(body).check().map_err(|e| e.0)
    }

    #[test]
    fn a_transcript_is_read_as_openai_sends_it() {
        // Given roles in any case, null content, content parts and an unknown role
        let got = extraction(serde_json::json!({"messages": [
            {"role": "SYSTEM", "content": "Be brief."},
            {"role": "User", "content": [
                {"type": "text", "text": "My name is Dana."},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "I live in Lisbon."}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "narrator", "content": "Meanwhile..."},
            {"role": "function", "name": "f"}
        ]}))
        .expect("accepted");
        // Then the known ones are read into text and the unknown one is skipped
        let m = |role: &str, content: &str| ChatMessage {
            role: role.into(),
            content: content.into(),
        };
        assert_eq!(
            got.input,
            ExtractInput::Messages(vec![
                m("system", "Be brief."),
                m("user", "My name is Dana.\nI live in Lisbon."),
                m("assistant", ""),
                m("tool", "42"),
                m("function", ""),
            ])
        );
        assert_eq!(
            got.skipped_messages,
            vec![SkippedMessage {
                index: 4,
                reason: "unknown role \"narrator\"".into()
            }]
        );
        assert_eq!(
            got.input_text,
            "Be brief.\nMy name is Dana.\nI live in Lisbon.\n\n42\n"
        );
    }

    #[test]
    fn a_malformed_message_is_named() {
        for (messages, message) in [
            (
                serde_json::json!({"role": "user"}),
                "messages must be a list of {role, content} messages",
            ),
            (serde_json::json!([]), "messages must not be empty"),
            (
                serde_json::json!(["hi"]),
                "messages[0] must be an object with role and content",
            ),
            (
                serde_json::json!([{"content": "x"}]),
                "messages[0].role must be a string",
            ),
            (
                serde_json::json!([{"role": "user", "content": "a"}, {"role": "user", "content": 5}]),
                "messages[1].content must be a string, null or a list of content parts",
            ),
            (
                serde_json::json!([{"role": "user", "content": ["x"]}]),
                "messages[0].content[0] must be an object with a type",
            ),
            (
                serde_json::json!([{"role": "user", "content": [{"type": "text", "text": 1}]}]),
                "messages[0].content[0].text must be a string",
            ),
            (
                serde_json::json!([{"role": "user", "content": [{"text": "x"}]}]),
                "messages[0].content[0].type must be a string",
            ),
        ] {
            assert_eq!(
                extraction(serde_json::json!({ "messages": messages })).map(|_| ()),
                Err(message.to_string()),
                "{messages}"
            );
        }
    }

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
