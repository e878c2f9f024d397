//! Audit exports: `POST /v1/audit/logs/export` (decided by `crate::command::export`), its
//! status, and the file download.

use auditmem_projections::exports::{ExportStatus, ExportView};
use auditmem_projections::{ExportFormat, Named};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{is_json, read};
use super::gate::{Caller, PendingOps, Recorded};
use super::state::AppState;
use crate::command::export::{self, ExportRules};
use crate::command::{Context, Refusal};
use crate::registry::ErrorCode;
use crate::wire::envelope::{AuditOk, ErrorEnvelope};
use crate::wire::export::{ExportCreated, ExportRequest, ExportTask, Manifest};
use crate::wire::time::now;

type ExportCreatedEnvelope = AuditOk<ExportCreated>;
type ExportTaskEnvelope = AuditOk<ExportTask>;

#[utoipa::path(post, path = "/v1/audit/logs/export", tag = "audit", security(("api_key" = [])),
    request_body(content = ExportRequest, description = "optional, as is every field"),
    responses((status = 200, description = "the task, processing", body = ExportCreatedEnvelope), (status = 400, description = "bad format or times (4000), start beyond retention (2201)", body = ErrorEnvelope), (status = 403, description = "permission (4030), subscription (2200), below Pro (2202)", body = ErrorEnvelope), (status = 409, description = "an export is in progress (2203)", body = ErrorEnvelope), (status = 429, description = "the tenant's export quota is used up (2204), or the key's rate limit (4290)", body = ErrorEnvelope, headers(("Retry-After" = u64, description = "whole seconds until the quota (or the rate limit) lets the request pass, at least 1")))))]
pub(crate) async fn create_export(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Recorded<AuditOk<ExportCreated>>, ApiError> {
    let tenant = &caller.tenant;
    // Read when the command asks: after the plan allowed exports.
    let asked = || read::<ExportRequest>(is_json(&headers), &body).map_err(Refusal::from);
    let rules = ExportRules {
        retention_days: state.settings.retention_days(tenant.plan),
        quota: state.exports.quota,
        ttl: state.exports.ttl,
    };
    let ctx = Context::service(&state.projections);
    let decision = export::create(&ctx, tenant, asked, &rules)?;
    Ok(Recorded::decided(decision, AuditOk))
}

pub(crate) fn owned_export(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<ExportView, ApiError> {
    let not_found = || ApiError::not_found("export not found");
    let id = Uuid::parse_str(id.trim()).map_err(|_| not_found())?;
    let v = state.projections.exports.get(&id)?.ok_or_else(not_found)?;
    if v.tenant_id != caller.tenant.id {
        return Err(not_found());
    }
    Ok(v)
}

fn is_expired(v: &ExportView) -> bool {
    v.expired(now())
}

#[utoipa::path(get, path = "/v1/audit/logs/export/{export_id}", tag = "audit", security(("api_key" = [])),
    params(("export_id" = String, Path, description = "export id")),
    responses((status = 200, description = "the task", body = ExportTaskEnvelope), (status = 403, description = "permission (4030), subscription (2200)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn export_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<AuditOk<ExportTask>, ApiError> {
    let v = owned_export(&state, &caller, &id)?;
    let manifest = Manifest::of(&v, &state.signer);
    Ok(AuditOk(ExportTask::new(&v, is_expired(&v), manifest)))
}

#[utoipa::path(get, path = "/v1/audit/logs/export/{export_id}/manifest", tag = "audit", security(("api_key" = [])),
    params(("export_id" = String, Path, description = "export id")),
    responses((status = 200, description = "the export's signed manifest, also after the file expired (what `auditmem verify --export FILE --manifest M --pubkey K` checks a file against)", body = Manifest), (status = 403, description = "permission (4030), subscription (2200)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope), (status = 409, description = "not completed: processing or failed (4090)", body = ErrorEnvelope)))]
pub(crate) async fn export_manifest(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let v = owned_export(&state, &caller, &id)?;
    let Some(manifest) = Manifest::of(&v, &state.signer) else {
        let why = match v.status {
            ExportStatus::Failed => "the export failed; it has no manifest",
            _ => "the export is still processing; its manifest comes with the file",
        };
        return Err(ApiError::new(ErrorCode::Conflict, why));
    };
    let mut body = serde_json::to_vec_pretty(&manifest).map_err(ApiError::internal)?;
    body.push(b'\n');
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"audit-export-{}.manifest.json\"",
                    v.export_id
                ),
            ),
        ],
        body,
    )
        .into_response())
}

#[utoipa::path(get, path = "/v1/audit/logs/export/{export_id}/download", tag = "audit", security(("api_key" = [])),
    params(("export_id" = String, Path, description = "export id")),
    responses((status = 200, description = "the file, in the export's format", content((String = "text/csv"), (serde_json::Value = "application/json"))), (status = 403, description = "permission (4030), subscription (2200)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope), (status = 409, description = "not completed (4090)", body = ErrorEnvelope), (status = 410, description = "expired (4100)", body = ErrorEnvelope)))]
pub(crate) async fn download_export(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Response>, ApiError> {
    let v = owned_export(&state, &caller, &id)?;
    let path = crate::export::file_path(&state.exports.dir, &v);
    if is_expired(&v) {
        // The file is gone for good; remove it now if the sweeper has not yet.
        let _ = std::fs::remove_file(&path);
        return Err(ApiError::new(
            ErrorCode::Gone,
            "this export has expired; request a new one",
        ));
    }
    match v.status {
        ExportStatus::Processing => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "the export is still processing",
            ))
        }
        ExportStatus::Failed => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "the export failed; request a new one",
            ))
        }
        ExportStatus::Completed => {}
    }
    if state.exports.clustered && !path.exists() {
        // Recorded by another node: this node writes its own copy from its mirror of the log.
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "this node is still writing its copy of the export (every node of the cluster writes one); retry in a few seconds",
        ));
    }
    let file = std::fs::File::open(&path)
        .map_err(|e| ApiError::internal(format!("opening {}: {e}", path.display())))?;
    let content_type = match v.format {
        ExportFormat::Csv => "text/csv; charset=utf-8",
        ExportFormat::Json | ExportFormat::Ocsf => "application/json",
    };
    // An OCSF export is JSON: named so that a tool choosing by extension reads it as such.
    let extension = match v.format {
        ExportFormat::Ocsf => "ocsf.json",
        other => other.as_str(),
    };
    let mut opener = crate::export::sealed_file::Opener::new(
        std::io::BufReader::with_capacity(256 * 1024, file),
        v.export_id,
    )
    .map_err(|e| ApiError::internal(format!("opening {}: {e}", path.display())))?;
    // The stored file is opened as it is sent (`export::sealed_file`), a batch at a time on a
    // blocking thread: opening reads the file and derives keys.
    let ring = state.projections.keys.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(2);
    tokio::task::spawn_blocking(move || loop {
        let mut batch = Vec::with_capacity(256 * 1024);
        let more = opener.fill(&*ring, &mut batch, 256 * 1024);
        let (more, sent) = match more {
            Ok(more) => (more, Ok(Bytes::from(batch))),
            Err(e) => {
                tracing::error!(error = %e, "an export download failed");
                (false, Err(std::io::Error::other(e.to_string())))
            }
        };
        if tx.blocking_send(sent).is_err() || !more {
            return;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let resp = (
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"audit-export-{}.{}\"",
                    v.export_id, extension
                ),
            ),
        ],
        Body::from_stream(stream),
    )
        .into_response();
    Ok(Recorded::new(
        resp,
        PendingOps {
            streamed: true,
            ..Default::default()
        },
    ))
}
