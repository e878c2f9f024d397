//! The fields the memory bodies and the list's query share, each checked by its own type and
//! documented by the schema of what that check takes.

use auditmem_projections::memories::filter::Filter;
use auditmem_projections::{MemoryExtra, MemoryType};
use serde_json::Value;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use crate::extract::MAX_CONTENT_CHARS;
use crate::wire::field::{optional, Check, Field, Invalid, NOT_BLANK};
use crate::wire::filter::parse_filter;
use crate::wire::time::{now, parse_time};

/// A memory's importance, from this to [`MAX_IMPORTANCE`].
pub const MIN_IMPORTANCE: f64 = 0.0;
pub const MAX_IMPORTANCE: f64 = 1.0;

pub(super) const IMPORTANCE_RANGE: &str = "importance must be a number from 0.0 to 1.0";

/// A schema of JSON type `t`.
pub(crate) fn typed(t: Type) -> ObjectBuilder {
    ObjectBuilder::new().schema_type(t)
}

/// A JSON number as the document writes a `f64`.
pub(crate) fn double() -> ObjectBuilder {
    typed(Type::Number).format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
}

/// A JSON integer as the document writes a `u64`.
pub(crate) fn int64() -> ObjectBuilder {
    typed(Type::Integer).format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
}

/// A text of 1 to `max` characters after trimming.
pub(crate) fn trimmed_text(max: usize) -> RefOr<Schema> {
    typed(Type::String)
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(NOT_BLANK))
        .into()
}

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

impl PartialSchema for Content {
    fn schema() -> RefOr<Schema> {
        trimmed_text(MAX_CONTENT_CHARS)
    }
}

impl ToSchema for Content {}

impl Check for MemoryType {
    type Raw = Value;
    const BY_NAME: bool = true;

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
            Some(x) if raw.is_number() && (MIN_IMPORTANCE..=MAX_IMPORTANCE).contains(&x) => {
                Ok(Importance(x))
            }
            _ => Err(Invalid::new(IMPORTANCE_RANGE)),
        }
    }
}

impl PartialSchema for Importance {
    fn schema() -> RefOr<Schema> {
        double()
            .minimum(Some(MIN_IMPORTANCE))
            .maximum(Some(MAX_IMPORTANCE))
            .into()
    }
}

impl ToSchema for Importance {}

/// Characters of a `user_id`, `agent_id` or `session_id` at most.
pub const MAX_SCOPE_CHARS: usize = 256;
/// Bytes of a memory's `metadata` as compact JSON at most, and its nesting at most.
pub const MAX_METADATA_BYTES: usize = 8192;
pub const MAX_METADATA_DEPTH: usize = 5;

/// A `user_id`, `agent_id` or `session_id`: 1 to [`MAX_SCOPE_CHARS`] characters after
/// trimming, no control characters. The refusal names the field. The schema says the length
/// (a string of spaces, refused after trimming, is within it).
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

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                typed(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_SCOPE_CHARS))
                    .into()
            }
        }

        impl ToSchema for $name {}
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

/// An object: its bounds (bytes of JSON, nesting) are not JSON Schema keywords.
impl PartialSchema for Metadata {
    fn schema() -> RefOr<Schema> {
        typed(Type::Object).into()
    }
}

impl ToSchema for Metadata {}

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

/// A string: ISO 8601 in more forms than the `date-time` format names, so none is claimed.
impl PartialSchema for ExpiresAt {
    fn schema() -> RefOr<Schema> {
        typed(Type::String).into()
    }
}

impl ToSchema for ExpiresAt {}

/// When what a memory says happened or was said: an ISO 8601 time, past or future; `null`
/// (where an update takes it) clears it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OccurredAt(pub Option<i64>);

impl Check for OccurredAt {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::Null => Ok(OccurredAt(None)),
            Value::String(s) => parse_time("occurred_at", &s).map(|t| OccurredAt(Some(t))),
            _ => Err(Invalid::new(
                "occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or null",
            )),
        }
    }
}

/// A string: ISO 8601 in more forms than the `date-time` format names, so none is claimed.
impl PartialSchema for OccurredAt {
    fn schema() -> RefOr<Schema> {
        typed(Type::String).into()
    }
}

impl ToSchema for OccurredAt {}

/// `filters`: see [`crate::wire::filter`].
#[derive(Clone, Debug, PartialEq)]
pub struct Filters(pub Filter);

impl Check for Filters {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        parse_filter(&raw).map(Filters)
    }
}

/// An object, whose language the API reference describes.
impl PartialSchema for Filters {
    fn schema() -> RefOr<Schema> {
        typed(Type::Object).into()
    }
}

impl ToSchema for Filters {}

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

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                typed(Type::Boolean).into()
            }
        }

        impl ToSchema for $name {}
    };
}

flag_field!(IncludeSuperseded, "include_superseded");
flag_field!(Explain, "explain");
flag_field!(Resolve, "resolve");

/// The scope, metadata and time fields a create, a batch item and an extraction share,
/// checked in this order.
pub(super) fn extra_of(
    user_id: Option<Field<UserId>>,
    agent_id: Option<Field<AgentId>>,
    session_id: Option<Field<SessionId>>,
    metadata: Option<Field<Metadata>>,
    expires_at: Option<Field<ExpiresAt>>,
    occurred_at: Option<Field<OccurredAt>>,
) -> Result<MemoryExtra, Invalid> {
    Ok(MemoryExtra {
        user_id: optional(user_id)?.map(|v| v.0),
        agent_id: optional(agent_id)?.map(|v| v.0),
        session_id: optional(session_id)?.map(|v| v.0),
        metadata: optional(metadata)?.and_then(|m| m.0),
        expires_at: optional(expires_at)?.and_then(|e| e.0),
        occurred_at: optional(occurred_at)?.and_then(|o| o.0),
    })
}
