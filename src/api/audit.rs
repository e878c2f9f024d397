//! `GET /v1/audit/logs` and `GET /v1/audit/logs/{audit_id}`.
//!
//! Newest first, times inclusive, retention by plan (a `start_time` older than the window is
//! clamped silently), `page_size` above 100 clamped, `total` from the index by rank, and a
//! seq-snapshot cursor for stable deep paging.

use auditmem_projections::audit_index::Filter;
use auditmem_projections::{AuditEntry, AuditRecorded, Event};
use axum::extract::{Path, State};
use axum::Extension;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::Query;
use super::gate::Caller;
use super::state::AppState;
use crate::wire::audit::{
    AuditListQuery, AuditLogDetail, AuditLogPage, Cursor, ListQuery, ListedEntry,
};
use crate::wire::envelope::{AuditOk, ErrorEnvelope};

type AuditLogPageEnvelope = AuditOk<AuditLogPage>;
type AuditLogDetailEnvelope = AuditOk<AuditLogDetail>;

fn missing(seq: u64) -> ApiError {
    ApiError::internal(format!(
        "audit index points to seq {seq}, which holds no audit entry"
    ))
}

/// The whole audit event at `seq`, detail included.
fn load_entry(state: &AppState, seq: u64) -> Result<AuditRecorded, ApiError> {
    match state.log.event(seq)? {
        Some((_, Event::AuditRecorded(rec))) => Ok(*rec),
        _ => Err(missing(seq)),
    }
}

/// The list fields of the audit entry at `seq`, without decoding its detail.
fn load_list_entry(state: &AppState, seq: u64) -> Result<AuditEntry, ApiError> {
    match state.log.audit_entry(seq)? {
        Some((_, entry)) => Ok(entry),
        None => Err(missing(seq)),
    }
}

#[utoipa::path(get, path = "/v1/audit/logs", tag = "audit", security(("api_key" = [])),
    params(AuditListQuery),
    responses((status = 200, description = "newest first", body = AuditLogPageEnvelope), (status = 400, description = "bad parameter (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope)))]
pub(crate) async fn list_logs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<AuditListQuery>,
) -> Result<AuditOk<AuditLogPage>, ApiError> {
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
    let show_hash = caller.tenant.plan.shows_hash();
    let seqs: Vec<u64> = result.items.iter().map(|k| k.1).collect();
    let refs = state.projections.audit.at_seqs(&seqs)?;
    let mut logs = Vec::with_capacity(seqs.len());
    for (seq, r) in seqs.iter().zip(refs) {
        let r =
            r.ok_or_else(|| ApiError::internal(format!("seq {seq} missing from the audit index")))?;
        logs.push(ListedEntry::new(
            load_list_entry(&state, *seq)?,
            &r,
            show_hash,
        ));
    }
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
    Ok(AuditOk(AuditLogPage {
        logs,
        total: result.total,
        page,
        page_size,
        next_cursor,
    }))
}

#[utoipa::path(get, path = "/v1/audit/logs/{audit_id}", tag = "audit", security(("api_key" = [])),
    params(("audit_id" = String, Path, description = "audit log id")),
    responses((status = 200, description = "the entry and its detail", body = AuditLogDetailEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope), (status = 404, description = "missing, foreign or outside retention (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_log(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(audit_id): Path<String>,
) -> Result<AuditOk<AuditLogDetail>, ApiError> {
    let not_found = || ApiError::not_found("audit log not found");
    let id = Uuid::parse_str(audit_id.trim()).map_err(|_| not_found())?;
    let r = state.projections.audit.get(&id)?.ok_or_else(not_found)?;
    if r.tenant_id != caller.tenant.id
        || r.created_at < state.settings.retention_start(caller.tenant.plan)
    {
        return Err(not_found());
    }
    let AuditRecorded { entry, detail, .. } = load_entry(&state, r.seq)?;
    let entry = ListedEntry::new(entry, &r, caller.tenant.plan.shows_hash());
    Ok(AuditOk(AuditLogDetail::new(entry, detail)))
}
