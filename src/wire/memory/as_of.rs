//! `as_of`: a memory read answered as the tenant's store stood right after a log position,
//! given as the position or as an RFC 3339 time; and the echo of what it resolved to.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};

use crate::wire::field::{optional, whole_number, Check, Field, Invalid};
use crate::wire::time::Time;
use crate::wire::Params;

/// What `as_of` asks for: a log position (as `X-Auditmem-Position` gives it), or a time,
/// which stands for the last position at or before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsOf {
    Position(u64),
    /// Microseconds since the Unix epoch.
    Time(i64),
}

const AS_OF_REFUSED: &str =
    "as_of must be a log position (an integer of at least 0, as X-Auditmem-Position gives it) or an RFC 3339 time such as 2026-01-31T12:00:00Z";

impl Check for AsOf {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match &raw {
            Value::Number(n) => match whole_number(n) {
                Some(p) if (0..=u64::MAX as i128).contains(&p) => Ok(AsOf::Position(p as u64)),
                _ => Err(Invalid::new(AS_OF_REFUSED)),
            },
            Value::String(s) => {
                let s = s.trim();
                if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                    return s
                        .parse::<u64>()
                        .map(AsOf::Position)
                        .map_err(|_| Invalid::new(AS_OF_REFUSED));
                }
                chrono::DateTime::parse_from_rfc3339(s)
                    .map(|t| AsOf::Time(t.timestamp_micros()))
                    .map_err(|_| Invalid::new(AS_OF_REFUSED))
            }
            _ => Err(Invalid::new(AS_OF_REFUSED)),
        }
    }
}

/// Either kind: the schema names no type (an integer and a string are both taken).
impl PartialSchema for AsOf {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "A log position (an integer of at least 0, at most the log's head) or an RFC 3339 time not in the future: the answer is the store as it stood right after that position (for a time, the last position at or before it).",
            ))
            .into()
    }
}

impl ToSchema for AsOf {}

/// The query of `GET /v1/memories/{id}` and `GET /v1/memories/{id}/history`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AsOfQuery {
    /// a log position, or an RFC 3339 time: the answer as the store stood then
    #[param(inline)]
    pub as_of: Option<Field<AsOf>>,
}

impl Params for AsOfQuery {
    type Checked = Option<AsOf>;

    fn check(self) -> Result<Option<AsOf>, Invalid> {
        optional(self.as_of)
    }
}

/// What an answer `as_of` was answered as of: the position, and the time of its record.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct AsOfShown {
    /// The log position the answer stands right after.
    pub position: u64,
    /// When the record at that position was written (RFC 3339); null for position 0.
    #[schema(value_type = Option<String>)]
    pub at: Option<Time>,
    /// How many of the tenant's memory events were replayed to answer.
    pub events_replayed: u64,
    /// A search: the model that embedded the query now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_model: Option<String>,
    /// A search: the models the memories searched were embedded with then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_models: Option<Vec<String>>,
    /// A search: true when a memory searched was embedded by another model than the one that
    /// embedded the query, so the ranking may differ from what was answered then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_changed: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_position_or_an_rfc_3339_time_and_nothing_else() {
        let check = |v: Value| AsOf::check(v).map_err(|e| e.0);
        assert_eq!(check(json!(12)), Ok(AsOf::Position(12)));
        assert_eq!(check(json!(0)), Ok(AsOf::Position(0)));
        assert_eq!(check(json!("12")), Ok(AsOf::Position(12)));
        assert_eq!(
            check(json!("2026-01-31T12:00:00Z")),
            Ok(AsOf::Time(1_769_860_800_000_000))
        );
        for bad in [
            json!(-1),
            json!(1.5),
            json!("-1"),
            json!(""),
            json!("yesterday"),
            json!("2026-01-31"),
            json!(true),
            json!(null),
        ] {
            assert_eq!(check(bad), Err(AS_OF_REFUSED.to_string()));
        }
    }
}
