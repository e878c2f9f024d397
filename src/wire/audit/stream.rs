//! The live tail: `GET /v1/audit/logs/stream`, its query and how a resumed stream says where
//! it stands.

use serde::Deserialize;
use utoipa::IntoParams;

use super::list::time_range;
use crate::wire::field::Invalid;
use crate::wire::query;
use crate::wire::Params;

/// What each streamed entry is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFormat {
    /// The entry as `GET /v1/audit/logs` lists it.
    Json,
    /// The entry as an OCSF API Activity event (docs/OCSF.md).
    Ocsf,
}

/// The query of `GET /v1/audit/logs/stream`: the list's filters, where to resume, and the
/// format. Empty values are "not given".
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditStreamQuery {
    /// ISO 8601, inclusive; clamped to the retention window
    start_time: Option<String>,
    /// ISO 8601, inclusive
    end_time: Option<String>,
    /// exact action name
    action: Option<String>,
    /// the log position to resume after (an event's `id`); `Last-Event-ID` wins over it;
    /// default: the log's head (live entries only); `0`: from the start of retention
    after: Option<String>,
    /// json (default: entries as the list shows them) or ocsf (OCSF API Activity events)
    format: Option<String>,
}

/// [`AuditStreamQuery`] checked: times in microseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamQuery {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub action: Option<String>,
    pub after: Option<u64>,
    pub format: StreamFormat,
}

/// A log position as `after` or `Last-Event-ID` give it.
pub fn parse_position(what: &str, raw: &str) -> Result<u64, Invalid> {
    raw.trim().parse::<u64>().map_err(|_| {
        Invalid(format!(
            "{what} must be a log position: an unsigned integer, as an event's id gives it, got '{}'",
            crate::wire::audit::bounds::truncate_text(raw.trim(), 64)
        ))
    })
}

impl Params for AuditStreamQuery {
    type Checked = StreamQuery;

    fn check(self) -> Result<StreamQuery, Invalid> {
        let (start, end) = time_range(self.start_time, self.end_time)?;
        let action = query::given(self.action.map(|a| a.trim().to_string()));
        let after = query::given(self.after)
            .map(|a| parse_position("after", &a))
            .transpose()?;
        let format = match query::given(self.format).as_deref().map(str::trim) {
            None | Some("json") => StreamFormat::Json,
            Some("ocsf") => StreamFormat::Ocsf,
            Some(other) => {
                return Err(Invalid(format!(
                    "format must be json or ocsf, got '{}'",
                    crate::wire::audit::bounds::truncate_text(other, 64)
                )))
            }
        };
        Ok(StreamQuery {
            start,
            end,
            action,
            after,
            format,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(after: Option<&str>, format: Option<&str>) -> Result<StreamQuery, Invalid> {
        AuditStreamQuery {
            after: after.map(str::to_string),
            format: format.map(str::to_string),
            ..Default::default()
        }
        .check()
    }

    #[test]
    fn positions_and_formats_are_checked() {
        assert_eq!(checked(Some("17"), None).map(|q| q.after), Ok(Some(17)));
        assert_eq!(checked(Some(""), None).map(|q| q.after), Ok(None));
        assert_eq!(
            checked(None, Some("ocsf")).map(|q| q.format),
            Ok(StreamFormat::Ocsf)
        );
        for bad in ["-1", "x", "1.5", "18446744073709551616"] {
            let e = checked(Some(bad), None).expect_err(bad);
            assert!(e.0.starts_with("after must be a log position"), "{}", e.0);
        }
        let e = checked(None, Some("csv")).expect_err("csv");
        assert_eq!(e.0, "format must be json or ocsf, got 'csv'");
    }
}
