//! `POST /admin/v1/audit/logs`: entries the gateway reports (gateway.chat, rag.query, ...),
//! checked one by one (fields over their bounds refused, detail fields over the audit body
//! limit stored with a marker, each entry's detail hashed) and appended as one atomic group.

use crate::api::position::Position;
use std::collections::HashMap;

use auditmem_projections::Event;
use axum::extract::State;
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::state::AppState;
use crate::wire::audit::{IngestRequest, Ingested};
use crate::wire::envelope::Data;
use crate::wire::time::now;
use crate::wire::Invalid;

type IngestedEnvelope = Data<Ingested>;

/// `POST /admin/v1/audit/logs`: entries the gateway reports (gateway.chat, rag.query, ...),
/// validated one by one, appended as one atomic group.
#[utoipa::path(post, path = "/admin/v1/audit/logs", tag = "admin", security(("admin_token" = [])), request_body = IngestRequest,
    responses((status = 200, description = "the ids of the entries", body = IngestedEnvelope)))]
pub(crate) async fn ingest_audit(
    State(state): State<AppState>,
    Json(entries): Json<IngestRequest>,
) -> Result<(Position, Data<Ingested>), ApiError> {
    let now = now();
    let mut tenants: HashMap<Uuid, bool> = HashMap::new();
    let mut events = Vec::with_capacity(entries.len());
    let mut ids = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        let known = match tenants.get(&e.tenant_id) {
            Some(k) => *k,
            None => {
                let k = state.projections.tenants.tenant(&e.tenant_id)?.is_some();
                tenants.insert(e.tenant_id, k);
                k
            }
        };
        if !known {
            return Err(Invalid(format!("entries[{i}]: unknown tenant_id {}", e.tenant_id)).into());
        }
        let id = Uuid::now_v7();
        ids.push(id);
        let limit = state.settings.audit_body_limit;
        events.push(Event::AuditRecorded(Box::new(e.check(i, id, now, limit)?)));
    }
    let c = state.appender.append(events).await?;
    Ok((Position(c.last_seq), Data(Ingested { ids })))
}
