//! The fields the memory bodies and the list's query share, each checked by its own type.

use auditmem_projections::memories::filter::Filter;
use auditmem_projections::memories::SearchMode;
use auditmem_projections::{MemoryExtra, MemoryType};
use serde_json::Value;

use crate::extract::MAX_CONTENT_CHARS;
use crate::wire::field::{optional, Check, Field, Invalid};
use crate::wire::filter::parse_filter;
use crate::wire::time::{now, parse_time};

pub(super) const IMPORTANCE_RANGE: &str = "importance must be a number from 0.0 to 1.0";

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
pub(super) fn scope_id(field: &str, raw: Value) -> Result<String, Invalid> {
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
pub(super) fn extra_of(
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
