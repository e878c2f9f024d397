//! Times on the wire: read as ISO 8601 in any common form, written as RFC 3339 UTC with
//! milliseconds (the precision every stored time has).

use auditmem_projections::audit_view::{format_time, millis_floor};
use serde::{Serialize, Serializer};

use super::field::Invalid;

/// How far ahead of the service's clock a caller's time may lie (its clock's skew): ingested
/// entries may be dated that far in the future, and an export may start that far before the
/// retention window.
pub const CLOCK_SKEW_MICROS: i64 = 5 * 60 * 1_000_000;

/// Now, in microseconds since the Unix epoch.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Now in whole milliseconds, as times are stored and shown.
pub fn now_stored() -> i64 {
    millis_floor(now())
}

/// A time in microseconds since the Unix epoch, written as RFC 3339 UTC with milliseconds
/// (`2026-11-22T01:02:03.456Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Time(pub i64);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(self.0))
    }
}

/// Parses an ISO 8601 time: RFC 3339; a time in minutes or in the basic form (no separators)
/// with `Z` or an offset; or a date-time / date without offset, taken as UTC. The refusal
/// names `field`.
pub fn parse_time(field: &str, s: &str) -> Result<i64, Invalid> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_micros());
    }
    // chrono's `%z` takes an offset but not `Z`, which is the offset +00:00.
    let zoned = match s.strip_suffix(['Z', 'z']) {
        Some(rest) => format!("{rest}+00:00"),
        None => s.to_string(),
    };
    for fmt in ["%Y-%m-%dT%H:%M%#z", "%Y%m%dT%H%M%S%.f%#z", "%Y%m%dT%H%M%#z"] {
        if let Ok(t) = chrono::DateTime::parse_from_str(&zoned, fmt) {
            return Ok(t.timestamp_micros());
        }
    }
    for fmt in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y%m%dT%H%M%S%.f",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, fmt) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    Err(Invalid(format!(
        "{field} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got '{s}'"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_8601_times_in_their_common_forms() {
        let at = |s: &str| parse_time("t", s).map_err(|e| e.0);
        let noon = Ok(1_769_860_800_000_000); // 2026-01-31T12:00:00Z
        for s in [
            "2026-01-31T12:00:00Z",
            "2026-01-31T12:00:00.000+00:00",
            "2026-01-31T14:00:00+02:00",
            "2026-01-31T12:00Z",
            "2026-01-31T13:00+01:00",
            "2026-01-31T13:00+0100",
            "20260131T120000Z",
            "20260131T120000.000Z",
            "20260131T140000+0200",
            "20260131T1200Z",
            "2026-01-31T12:00:00",
            "2026-01-31 12:00:00",
            "2026-01-31T12:00",
            "20260131T120000",
        ] {
            assert_eq!(at(s), noon, "{s}");
        }
        assert_eq!(at("2026-01-31"), Ok(1_769_817_600_000_000));
        for bad in [
            "2026-01-31T12",
            "31/01/2026",
            "2026-13-01T00:00:00Z",
            "noon",
            "",
        ] {
            assert!(at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_written_in_milliseconds_utc() {
        assert_eq!(
            serde_json::to_string(&Time(1_763_773_323_456_789)).expect("json"),
            "\"2025-11-22T01:02:03.456Z\""
        );
    }
}
