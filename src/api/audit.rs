//! `GET /v1/audit/logs` and `GET /v1/audit/logs/{audit_id}`, and the rendering of their
//! answers from what their own audit entries keep.
//!
//! Newest first, times inclusive, retention by plan (a `start_time` older than the window is
//! clamped silently), `page_size` above 100 clamped, `total` from the index by rank, and a
//! seq-snapshot cursor for stable deep paging.
//!
//! **Answers recorded by reference.** Both answers are functions of entries that never change
//! once appended and of a few values, so their audit entries keep those values
//! ([`ResponseRef`]) instead of a copy of the body: a list, its effective query after clamping,
//! the log head it was answered at, the seqs it returned, `total`, `next_cursor` and whether
//! hashes were shown; a detail read, the seq it read and whether the hash was shown. The
//! handler answers with the bytes [`render_list`] / [`render_detail`] write from that
//! reference, and a later read of the entry's detail renders them again from the same
//! reference with the same code: the same bytes, whatever the plan, the retention window or the
//! rest of the log have become since (a reference never rechecks retention). An audited read
//! so appends a few hundred bytes to the log instead of the tens of kilobytes it answered.
//!
//! A detail read of an entry that is itself a detail read nests that entry's answer in its
//! own; rendering it in full would descend a chain of reads of reads as long as callers made it
//! (a poller reading every new entry makes one a poll). So a read of a read rendered in full is
//! rendered as a marker naming the entry it read ([`ReadRef::full`]): every answer renders
//! from at most two entries' details and one list page.

use auditmem_projections::audit_index::{AuditRef, Filter};
use auditmem_projections::event::{
    open_personal, AuditHead, KeyCache, ListRef, Opened, ReadRef, ResponseRef,
};
use auditmem_projections::{AuditDetail, AuditEntry, AuditRecorded, Event};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::json;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::Query;
use super::gate::{Caller, PendingOps, Recorded};
use super::state::AppState;
use crate::wire::audit::bounds::{truncate_text, ACTION_MAX};
use crate::wire::audit::{
    AuditListQuery, AuditLogDetail, AuditLogPage, Cursor, ListQuery, ListedEntry, Personal,
    ShownBody,
};
use crate::wire::envelope::{AuditOk, ErrorEnvelope};

type AuditLogPageEnvelope = AuditOk<AuditLogPage>;
type AuditLogDetailEnvelope = AuditOk<AuditLogDetail>;

/// An answer rendered to its bytes: `200`, `application/json`.
pub(crate) struct Rendered(Vec<u8>);

impl IntoResponse for Rendered {
    fn into_response(self) -> Response {
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            self.0,
        )
            .into_response()
    }
}

/// The answer `body`, recorded by its reference `r`.
fn by_reference(body: Vec<u8>, r: ResponseRef) -> Recorded<Rendered> {
    let ops = PendingOps {
        detail: AuditDetail {
            response_ref: Some(r),
            ..Default::default()
        },
        ..Default::default()
    };
    Recorded::new(Rendered(body), ops)
}

fn missing(seq: u64) -> ApiError {
    ApiError::internal(format!(
        "audit index points to seq {seq}, which holds no audit entry"
    ))
}

/// The whole audit event at `seq`, detail included, its personal part opened: the entry and
/// detail as a read shows them, how its personal fields stand, and the salt of its
/// `detail_hash` (a sealed entry not erased).
fn load_entry(state: &AppState, seq: u64) -> Result<OpenedEntry, ApiError> {
    let rec = match state.log.event(seq)? {
        Some((_, Event::AuditRecorded(rec))) => *rec,
        _ => return Err(missing(seq)),
    };
    let opened = open_personal(&*state.projections.keys, &rec).map_err(keyring_failed)?;
    let AuditRecorded {
        mut entry, detail, ..
    } = rec;
    Ok(match opened {
        Opened::Plain => OpenedEntry {
            entry,
            detail,
            personal: Personal::Plain,
            salt: None,
        },
        Opened::Open(p) => {
            p.fields.restore_entry(&mut entry);
            OpenedEntry {
                entry,
                detail: p.detail,
                personal: Personal::Opened,
                salt: Some(p.fields.salt),
            }
        }
        Opened::Erased => OpenedEntry {
            entry,
            detail,
            personal: Personal::Erased,
            salt: None,
        },
    })
}

/// An audit entry as a detail read shows it.
struct OpenedEntry {
    entry: AuditEntry,
    detail: AuditDetail,
    personal: Personal,
    salt: Option<[u8; 32]>,
}

fn keyring_failed(e: auditmem_projections::seal::KeyError) -> ApiError {
    ApiError::internal(format!("opening an audit entry: {e}"))
}

/// The list fields of the audit entry at `seq`, its personal ones opened (through `keys`),
/// without reading its detail.
pub fn load_list_entry(
    state: &AppState,
    keys: &mut KeyCache<'_>,
    seq: u64,
) -> Result<(AuditEntry, Personal), ApiError> {
    let Some(head) = state.log.audit_entry(seq)? else {
        return Err(missing(seq));
    };
    let AuditHead {
        tenant_id,
        mut entry,
        sealed,
    } = head;
    let personal = match keys
        .open_fields(tenant_id, entry.id, sealed.as_ref())
        .map_err(keyring_failed)?
    {
        Opened::Plain => Personal::Plain,
        Opened::Open(p) => {
            p.restore_entry(&mut entry);
            Personal::Opened
        }
        Opened::Erased => Personal::Erased,
    };
    Ok((entry, personal))
}

/// The audit index's ref of the entry at `seq` (its chain hash).
fn load_ref(state: &AppState, seq: u64) -> Result<AuditRef, ApiError> {
    state
        .projections
        .audit
        .at_seq(seq)?
        .ok_or_else(|| ApiError::internal(format!("seq {seq} missing from the audit index")))
}

fn serialised<T: serde::Serialize>(body: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(body).map_err(|e| ApiError::internal(format!("rendering an answer: {e}")))
}

/// The bytes of the list page `r` describes.
pub(crate) fn render_list(state: &AppState, r: &ListRef) -> Result<Vec<u8>, ApiError> {
    let refs = state.projections.audit.at_seqs(&r.seqs)?;
    let mut keys = KeyCache::new(&*state.projections.keys);
    let mut logs = Vec::with_capacity(r.seqs.len());
    for (seq, found) in r.seqs.iter().zip(refs) {
        let found = found
            .ok_or_else(|| ApiError::internal(format!("seq {seq} missing from the audit index")))?;
        let (entry, personal) = load_list_entry(state, &mut keys, *seq)?;
        logs.push(ListedEntry::with(entry, personal, &found, r.show_hash));
    }
    serialised(&AuditOk(AuditLogPage {
        logs,
        total: r.total as usize,
        page: r.page as usize,
        page_size: r.page_size as usize,
        next_cursor: r.next_cursor.clone(),
    }))
}

/// How deep a detail renders reads of reads: a read's answer (depth 0) may render the read it
/// read in full (depth 1), never further (see the module doc).
const MAX_READ_DEPTH: u8 = 1;

/// The bytes of the detail answer of `rec` (at `seq`), its hash shown or not; `depth` counts
/// the reads being rendered around it.
fn render_detail(
    state: &AppState,
    rec: OpenedEntry,
    r: &AuditRef,
    show_hash: bool,
    depth: u8,
) -> Result<Vec<u8>, ApiError> {
    let OpenedEntry {
        entry,
        detail,
        personal,
        salt,
    } = rec;
    let response = shown_response(state, &detail, depth)?;
    let view = AuditLogDetail::new(
        ListedEntry::with(entry, personal, r, show_hash),
        detail,
        response,
        salt,
    );
    serialised(&AuditOk(view))
}

/// The response body of an entry as its detail shows it: stored, or rendered again from its
/// reference.
fn shown_response(
    state: &AppState,
    d: &AuditDetail,
    depth: u8,
) -> Result<Option<ShownBody>, ApiError> {
    let rendered = |bytes: Vec<u8>| {
        ShownBody::rendered(bytes)
            .map(Some)
            .map_err(|e| ApiError::internal(format!("a rendered answer is not JSON: {e}")))
    };
    match &d.response_ref {
        None => Ok(ShownBody::stored(d)),
        Some(ResponseRef::List(l)) => rendered(render_list(state, l)?),
        Some(ResponseRef::Read(read)) if read.full && depth < MAX_READ_DEPTH => {
            let rec = load_entry(state, read.seq)?;
            let r = load_ref(state, read.seq)?;
            rendered(render_detail(state, rec, &r, read.show_hash, depth + 1)?)
        }
        Some(ResponseRef::Read(read)) => {
            let id = state
                .log
                .audit_entry(read.seq)?
                .ok_or_else(|| missing(read.seq))?
                .entry
                .id;
            Ok(Some(ShownBody::Value(json!({ "_detail_of": id }))))
        }
    }
}

#[utoipa::path(get, path = "/v1/audit/logs", tag = "audit", security(("api_key" = [])),
    params(AuditListQuery),
    responses((status = 200, description = "newest first", body = AuditLogPageEnvelope), (status = 400, description = "bad parameter (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope)))]
pub(crate) async fn list_logs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<AuditListQuery>,
) -> Result<Recorded<Rendered>, ApiError> {
    let ListQuery {
        start,
        end,
        page,
        page_size,
        action,
        cursor,
    } = q;
    let window = state.settings.retention_start(caller.tenant.plan);
    let filter = Filter {
        tenant_id: caller.tenant.id,
        action: action.as_deref(),
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
    let next_cursor = match result.items.last() {
        Some(&(created_at, seq)) if result.items.len() == page_size => Some(
            Cursor {
                created_at,
                seq,
                snapshot,
            }
            .encode(),
        ),
        _ => None,
    };
    let r = ListRef {
        from: filter.from,
        to: filter.to,
        // No action is longer: a longer filter matched nothing, and is not worth its bytes.
        action: action.map(|a| truncate_text(&a, ACTION_MAX).into_owned()),
        after: cursor.as_ref().map(|c| (c.created_at, c.seq)),
        at_seq: snapshot,
        page: page as u64,
        page_size: page_size as u64,
        seqs: result.items.iter().map(|k| k.1).collect(),
        total: result.total as u64,
        next_cursor,
        show_hash: caller.tenant.plan.shows_hash(),
    };
    let body = render_list(&state, &r)?;
    Ok(by_reference(body, ResponseRef::List(r)))
}

/// The caller's own entry `audit_id` within its plan's retention: its id and index ref. Any
/// other id, unknown, foreign or expired, is the same 404 (no existence oracle).
pub(crate) fn owned_entry(
    state: &AppState,
    caller: &Caller,
    audit_id: &str,
) -> Result<(Uuid, AuditRef), ApiError> {
    let not_found = || ApiError::not_found("audit log not found");
    let id = Uuid::parse_str(audit_id.trim()).map_err(|_| not_found())?;
    let r = state.projections.audit.get(&id)?.ok_or_else(not_found)?;
    if r.tenant_id != caller.tenant.id
        || r.created_at < state.settings.retention_start(caller.tenant.plan)
    {
        return Err(not_found());
    }
    Ok((id, r))
}

#[utoipa::path(get, path = "/v1/audit/logs/{audit_id}", tag = "audit", security(("api_key" = [])),
    params(("audit_id" = String, Path, description = "audit log id")),
    responses((status = 200, description = "the entry and its detail", body = AuditLogDetailEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope), (status = 404, description = "missing, foreign or outside retention (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_log(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(audit_id): Path<String>,
) -> Result<Recorded<Rendered>, ApiError> {
    let (_, r) = owned_entry(&state, &caller, &audit_id)?;
    let rec = load_entry(&state, r.seq)?;
    // This answer nests the entry's own answer in full when that entry is a read rendered in
    // full; a later read of this one then shows a marker in its place (see the module doc).
    let nests_a_read = matches!(
        &rec.detail.response_ref,
        Some(ResponseRef::Read(read)) if read.full
    );
    let read = ReadRef {
        seq: r.seq,
        show_hash: caller.tenant.plan.shows_hash(),
        full: !nests_a_read,
    };
    let body = render_detail(&state, rec, &r, read.show_hash, 0)?;
    Ok(by_reference(body, ResponseRef::Read(read)))
}
