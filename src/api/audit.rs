//! `GET /v1/audit/logs` and `GET /v1/audit/logs/{audit_id}`.
//!
//! Newest first, times inclusive, retention by plan (a `start_time` older than the window is
//! clamped silently), `page_size` above 100 clamped, `total` from the index by rank, and a
//! seq-snapshot cursor for stable deep paging.

use std::collections::HashMap;

use auditmem_projections::audit_index::{AuditRef, Filter};
use auditmem_projections::audit_view::entry_fields;
use auditmem_projections::{AuditEntry, AuditRecorded, Event};
use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Router};
use base64::Engine;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::envelope::AuditOk;
use super::error::ApiError;
use super::gate::Caller;
#[allow(unused_imports)]
use super::openapi::*;
use crate::state::AppState;

pub const DEFAULT_PAGE_SIZE: usize = 50;
pub const MAX_PAGE_SIZE: usize = 100;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/audit/logs", get(list_logs))
        .route("/v1/audit/logs/{audit_id}", get(get_log))
}

/// Parses an ISO 8601 time: RFC 3339; a time in minutes or in the basic form (no separators)
/// with `Z` or an offset; or a date-time / date without offset, taken as UTC.
pub fn parse_time(field: &str, s: &str) -> Result<i64, ApiError> {
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
    Err(ApiError::bad_request(format!(
        "{field} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got '{s}'"
    )))
}

fn parse_positive(field: &str, v: Option<&String>, default: usize) -> Result<usize, ApiError> {
    match v {
        None => Ok(default),
        Some(s) => match s.trim().parse::<i64>() {
            Ok(n) if n >= 1 => Ok(n as usize),
            _ => Err(ApiError::bad_request(format!(
                "{field} must be an integer of at least 1, got '{s}'"
            ))),
        },
    }
}

/// Start of the readable window for a plan.
pub fn retention_start(state: &AppState, plan: auditmem_projections::Plan) -> i64 {
    let days = state.settings.retention_days(plan);
    chrono::Utc::now().timestamp_micros() - days * 86_400 * 1_000_000
}

/// The list item of an entry, with `hash` shown for plans that see the chain.
pub fn entry_json(entry: &AuditEntry, r: &AuditRef, show_hash: bool) -> Map<String, Value> {
    let mut m = entry_fields(entry);
    m.insert(
        "hash".into(),
        if show_hash {
            Value::String(auditmem_projections::audit_view::hash_hex(&r.hash))
        } else {
            Value::Null
        },
    );
    m
}

/// A list item: the fields of [`entry_json`], serialised straight from the entry (a page of
/// maps built only to be written out and freed was most of the list's CPU time).
#[derive(serde::Serialize)]
pub struct EntryView<'a> {
    id: Uuid,
    action: &'a str,
    model_id: &'a Option<String>,
    project_id: &'a Option<String>,
    gateway_id: &'a Option<String>,
    ip_address: &'a Option<String>,
    user_agent: &'a Option<String>,
    http_status: u16,
    is_success: bool,
    is_cache_hit: bool,
    error_code: Option<i64>,
    error_msg: &'a Option<String>,
    duration: Option<f64>,
    credits_consumed: f64,
    balance_consumed_usd: f64,
    tokens: &'a Option<auditmem_projections::Tokens>,
    metadata: &'a Option<Value>,
    created_at: String,
    hash: Option<String>,
}

impl<'a> EntryView<'a> {
    pub fn new(e: &'a AuditEntry, r: &AuditRef, show_hash: bool) -> Self {
        EntryView {
            id: e.id,
            action: &e.action,
            model_id: &e.model_id,
            project_id: &e.project_id,
            gateway_id: &e.gateway_id,
            ip_address: &e.ip_address,
            user_agent: &e.user_agent,
            http_status: e.http_status,
            is_success: e.is_success,
            is_cache_hit: e.is_cache_hit,
            error_code: e.error_code,
            error_msg: &e.error_msg,
            duration: e.duration,
            credits_consumed: e.credits_consumed,
            balance_consumed_usd: e.balance_consumed_usd,
            tokens: &e.tokens,
            metadata: &e.metadata,
            created_at: auditmem_projections::audit_view::format_time(e.created_at),
            hash: show_hash.then(|| auditmem_projections::audit_view::hash_hex(&r.hash)),
        }
    }
}

#[derive(serde::Serialize)]
struct ListPage<'a> {
    logs: Vec<EntryView<'a>>,
    total: usize,
    page: usize,
    page_size: usize,
    next_cursor: Option<String>,
}

fn missing(seq: u64) -> ApiError {
    ApiError::internal(format!(
        "audit index points to seq {seq}, which holds no audit entry"
    ))
}

/// The whole audit event at `seq`, detail included.
pub fn load_entry(state: &AppState, seq: u64) -> Result<AuditRecorded, ApiError> {
    match state.log.event(seq)? {
        Some((_, Event::AuditRecorded(rec))) => Ok(*rec),
        _ => Err(missing(seq)),
    }
}

/// The list fields of the audit entry at `seq`, without decoding its detail.
pub fn load_list_entry(state: &AppState, seq: u64) -> Result<AuditEntry, ApiError> {
    match state.log.audit_entry(seq)? {
        Some((_, entry)) => Ok(entry),
        None => Err(missing(seq)),
    }
}

/// Where a cursor page starts: after `(created_at, seq)`, among entries up to `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub seq: u64,
    pub snapshot: u64,
}

pub fn encode_cursor(c: &Cursor) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{}.{}.{}", c.created_at, c.seq, c.snapshot))
}

pub fn decode_cursor(s: &str) -> Result<Cursor, ApiError> {
    let bad = || ApiError::bad_request("cursor is not a cursor returned by this endpoint");
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

/// The parameters of `GET /v1/audit/logs`, parsed and checked (times in micros).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub page: usize,
    /// Already clamped to [`MAX_PAGE_SIZE`].
    pub page_size: usize,
    pub action: Option<String>,
    pub cursor: Option<Cursor>,
}

impl ListQuery {
    /// Parses the query map; every refusal is a 400 naming the parameter. Empty values mean
    /// "not given"; unknown parameters are ignored.
    pub fn parse(q: &HashMap<String, String>) -> Result<ListQuery, ApiError> {
        let start = q
            .get("start_time")
            .filter(|s| !s.is_empty())
            .map(|s| parse_time("start_time", s))
            .transpose()?;
        let end = q
            .get("end_time")
            .filter(|s| !s.is_empty())
            .map(|s| parse_time("end_time", s))
            .transpose()?;
        if let (Some(s), Some(e)) = (start, end) {
            if e < s {
                return Err(ApiError::bad_request("end_time is before start_time"));
            }
        }
        let page = parse_positive("page", q.get("page"), 1)?;
        let page_size =
            parse_positive("page_size", q.get("page_size"), DEFAULT_PAGE_SIZE)?.min(MAX_PAGE_SIZE);
        let action = q
            .get("action")
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let cursor = q
            .get("cursor")
            .filter(|s| !s.is_empty())
            .map(|s| decode_cursor(s))
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

#[utoipa::path(get, path = "/v1/audit/logs", tag = "audit", security(("api_key" = [])),
    params(("start_time" = Option<String>, Query, description = "ISO 8601; clamped to the retention window"),
           ("end_time" = Option<String>, Query, description = "ISO 8601, inclusive"),
           ("action" = Option<String>, Query, description = "exact action name"),
           ("page" = Option<u64>, Query, minimum = 1, description = "default 1"),
           ("page_size" = Option<u64>, Query, minimum = 1, description = "default 50, above 100 clamped"),
           ("cursor" = Option<String>, Query, description = "next_cursor of a previous page")),
    responses((status = 200, description = "newest first", body = AuditLogPageEnvelope), (status = 400, description = "bad parameter (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope)))]
pub(crate) async fn list_logs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<axum::response::Response, ApiError> {
    let ListQuery {
        start,
        end,
        page,
        page_size,
        action,
        cursor,
    } = ListQuery::parse(&q)?;
    let action = action.as_deref();
    let window = retention_start(&state, caller.tenant.plan);
    let filter = Filter {
        tenant_id: caller.tenant.id,
        action,
        from: start.unwrap_or(window).max(window),
        to: end.unwrap_or(i64::MAX),
    };
    let snapshot = cursor
        .as_ref()
        .map(|c| c.snapshot)
        .unwrap_or_else(|| state.appender.head().seq);
    let result = match &cursor {
        Some(c) => {
            state
                .projections
                .audit
                .after(&filter, (c.created_at, c.seq), c.snapshot, page_size)?
        }
        None => {
            let offset = (page - 1).saturating_mul(page_size);
            state.projections.audit.page(&filter, offset, page_size)?
        }
    };
    let show_hash = caller.tenant.plan.shows_hash();
    let seqs: Vec<u64> = result.items.iter().map(|k| k.1).collect();
    let refs = state.projections.audit.at_seqs(&seqs)?;
    let mut entries = Vec::with_capacity(seqs.len());
    for (seq, r) in seqs.iter().zip(refs) {
        let r =
            r.ok_or_else(|| ApiError::internal(format!("seq {seq} missing from the audit index")))?;
        entries.push((load_list_entry(&state, *seq)?, r));
    }
    let next_cursor = match result.items.last() {
        Some(&(created_at, seq)) if result.items.len() == page_size => {
            Some(encode_cursor(&Cursor {
                created_at,
                seq,
                snapshot,
            }))
        }
        _ => None,
    };
    Ok(AuditOk(ListPage {
        logs: entries
            .iter()
            .map(|(e, r)| EntryView::new(e, r, show_hash))
            .collect(),
        total: result.total,
        page,
        page_size,
        next_cursor,
    })
    .into_response())
}

#[utoipa::path(get, path = "/v1/audit/logs/{audit_id}", tag = "audit", security(("api_key" = [])),
    params(("audit_id" = String, Path, description = "audit log id")),
    responses((status = 200, description = "the entry and its detail", body = AuditLogDetailEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope), (status = 404, description = "missing, foreign or outside retention (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_log(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(audit_id): Path<String>,
) -> Result<AuditOk<Value>, ApiError> {
    let not_found = || ApiError::not_found("audit log not found");
    let id = Uuid::parse_str(audit_id.trim()).map_err(|_| not_found())?;
    let r = state.projections.audit.get(&id)?.ok_or_else(not_found)?;
    if r.tenant_id != caller.tenant.id || r.created_at < retention_start(&state, caller.tenant.plan)
    {
        return Err(not_found());
    }
    let rec = load_entry(&state, r.seq)?;
    let mut m = entry_json(&rec.entry, &r, caller.tenant.plan.shows_hash());
    let d = &rec.detail;
    m.insert("request_body".into(), json!(d.request_body));
    m.insert("response_body".into(), json!(d.response_body_value()));
    m.insert("input_content".into(), json!(d.input_content));
    m.insert("output_content".into(), json!(d.output_content));
    m.insert("rag_query".into(), json!(d.rag_query));
    m.insert("rag_results".into(), json!(d.rag_results));
    m.insert("memory_query".into(), json!(d.memory_query));
    m.insert("memory_results".into(), json!(d.memory_results));
    Ok(AuditOk(Value::Object(m)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An entry with every kind of cell (text needing CSV quoting, nulls, nested objects,
    /// small floats) and its ref; shared with the export rows' tests.
    pub(crate) fn sample() -> (AuditEntry, AuditRef) {
        let entry = AuditEntry {
            id: Uuid::now_v7(),
            action: "gateway.chat".into(),
            model_id: Some("m, \"quoted\"".into()),
            project_id: None,
            gateway_id: Some("g\nline".into()),
            ip_address: Some("10.0.0.1".into()),
            user_agent: None,
            http_status: 429,
            is_success: false,
            is_cache_hit: true,
            error_code: Some(4290),
            error_msg: Some("slow down".into()),
            duration: Some(100.0),
            credits_consumed: 0.25,
            balance_consumed_usd: 1e-7,
            tokens: Some(auditmem_projections::Tokens {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
            }),
            metadata: Some(json!({"b": [1, 2.5], "a": null})),
            created_at: 1_700_000_000_123_000,
        };
        let r = AuditRef {
            id: entry.id,
            seq: 7,
            tenant_id: Uuid::now_v7(),
            created_at: entry.created_at,
            action_key: 1,
            chain_index: 3,
            hash: [7; 32],
            prev_hash: [9; 32],
        };
        (entry, r)
    }

    #[test]
    fn iso_8601_times_in_their_common_forms() {
        let at = |s: &str| parse_time("t", s).map_err(|e| e.message);
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
    fn list_items_serialise_as_the_entry_fields_do() {
        let (entry, r) = sample();
        for show_hash in [true, false] {
            let view = serde_json::to_value(EntryView::new(&entry, &r, show_hash)).expect("json");
            assert_eq!(view, Value::Object(entry_json(&entry, &r, show_hash)));
        }
    }
}
