//! The audit list: `GET /v1/audit/logs`, its query, cursor and page.

use base64::Engine;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::entry::ListedEntry;
use crate::wire::envelope::Payload;
use crate::wire::field::{Field, Invalid};
use crate::wire::query::{self, Page, PageSize, Paging};
use crate::wire::time::parse_time;
use crate::wire::Params;

/// A page of `GET /v1/audit/logs`, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditLogPage {
    pub logs: Vec<ListedEntry>,
    #[schema(value_type = u64)]
    pub total: usize,
    #[schema(value_type = u64)]
    pub page: usize,
    #[schema(value_type = u64)]
    pub page_size: usize,
    pub next_cursor: Option<String>,
}

impl Payload for AuditLogPage {}

/// The audit list's page size: default 50, at most 100 (larger is clamped).
pub const DEFAULT_PAGE_SIZE: usize = 50;

/// Where a cursor page starts: after `(created_at, seq)`, among entries up to `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub seq: u64,
    pub snapshot: u64,
}

impl Cursor {
    pub fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
            "{}.{}.{}",
            self.created_at, self.seq, self.snapshot
        ))
    }

    pub fn decode(s: &str) -> Result<Cursor, Invalid> {
        let bad = || Invalid::new("cursor is not a cursor returned by this endpoint");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s.trim())
            .map_err(|_| bad())?;
        let text = String::from_utf8(raw).map_err(|_| bad())?;
        let mut it = text.split('.');
        let (Some(a), Some(b), Some(c), None) = (it.next(), it.next(), it.next(), it.next()) else {
            return Err(bad());
        };
        Ok(Cursor {
            created_at: a.parse().map_err(|_| bad())?,
            seq: b.parse().map_err(|_| bad())?,
            snapshot: c.parse().map_err(|_| bad())?,
        })
    }
}

/// The query of `GET /v1/audit/logs`. Empty values are "not given" (but for the page numbers).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditListQuery {
    /// ISO 8601; clamped to the retention window
    start_time: Option<String>,
    /// ISO 8601, inclusive
    end_time: Option<String>,
    /// exact action name
    action: Option<String>,
    /// default 1
    #[param(inline)]
    page: Option<Field<Page>>,
    /// default 50, above 100 clamped
    #[param(inline)]
    page_size: Option<Field<PageSize>>,
    /// next_cursor of a previous page
    cursor: Option<String>,
}

/// `start_time` and `end_time` as the audit list and its tail take them: each optional, in
/// microseconds, the end not before the start.
pub fn time_range(
    start_time: Option<String>,
    end_time: Option<String>,
) -> Result<(Option<i64>, Option<i64>), Invalid> {
    let time =
        |field: &str, v: Option<String>| query::given(v).map(|s| parse_time(field, &s)).transpose();
    let start = time("start_time", start_time)?;
    let end = time("end_time", end_time)?;
    if let (Some(s), Some(e)) = (start, end) {
        if e < s {
            return Err(Invalid::new("end_time is before start_time"));
        }
    }
    Ok((start, end))
}

/// [`AuditListQuery`] checked: times in microseconds, the page size clamped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub page: usize,
    pub page_size: usize,
    pub action: Option<String>,
    pub cursor: Option<Cursor>,
}

impl Params for AuditListQuery {
    type Checked = ListQuery;

    fn check(self) -> Result<ListQuery, Invalid> {
        let (start, end) = time_range(self.start_time, self.end_time)?;
        let Paging { page, page_size } = Paging::of(self.page, self.page_size, DEFAULT_PAGE_SIZE)?;
        let action = query::given(self.action.map(|a| a.trim().to_string()));
        let cursor = query::given(self.cursor)
            .map(|c| Cursor::decode(&c))
            .transpose()?;
        Ok(ListQuery {
            start,
            end,
            page,
            page_size,
            action,
            cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_forgeries_are_refused() {
        let c = Cursor {
            created_at: -5,
            seq: 7,
            snapshot: 9,
        };
        assert_eq!(Cursor::decode(&c.encode()), Ok(c));
        for bad in ["", "!!", "MS4y", "MS4yLjMuNA"] {
            assert!(Cursor::decode(bad).is_err(), "{bad}");
        }
    }
}
