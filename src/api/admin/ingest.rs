//! `POST /admin/v1/audit/logs`: entries the gateway reports (gateway.chat, rag.query, ...),
//! checked one by one (fields over their bounds refused, detail fields over the audit body
//! limit stored with a marker, each entry's detail hashed) and appended as one atomic group.

use axum::extract::State;

use super::{context, record};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::position::Position;
use crate::api::state::AppState;
use crate::command::admin;
use crate::wire::audit::{IngestRequest, Ingested};
use crate::wire::envelope::Data;

type IngestedEnvelope = Data<Ingested>;

/// `POST /admin/v1/audit/logs`: entries the gateway reports (gateway.chat, rag.query, ...),
/// validated one by one, appended as one atomic group.
#[utoipa::path(post, path = "/admin/v1/audit/logs", tag = "admin", security(("admin_token" = [])), request_body = IngestRequest,
    responses((status = 200, description = "the ids of the entries", body = IngestedEnvelope)))]
pub(crate) async fn ingest_audit(
    State(state): State<AppState>,
    Json(entries): Json<IngestRequest>,
) -> Result<(Position, Data<Ingested>), ApiError> {
    let limit = state.settings.audit_body_limit;
    let decision = admin::ingest(&context(&state), entries, limit)?;
    let (position, ingested) = record(&state, decision).await?;
    Ok((position, Data(ingested)))
}
