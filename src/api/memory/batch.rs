//! `POST /v1/memories/batch` and `PATCH /v1/memories/batch`: up to 100 memories created, or
//! updated, in one call. Every item is checked before anything else (a 400 names each invalid
//! item by its index); the texts are embedded as one batch, in the tenant's turns; the events
//! go into the log in one append with the call's audit entry, so the batch is stored whole or
//! not at all.

use auditmem_projections::memories::{Extra, MemoryView};
use auditmem_projections::{vector_to_bytes, AuditDetail, Event, MemoryUpdated};
use axum::extract::State;
use axum::Extension;

use super::crud::created;
use super::{embed_many, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, PendingOps, Recorded};
use crate::api::state::AppState;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{
    BatchUpdate, Changes, Memory, MemoryBatch, MemoryBatchCreateRequest, MemoryBatchUpdateRequest,
};
use crate::wire::time::now_stored;

type MemoryBatchEnvelope = Data<MemoryBatch>;

/// The batch's answer, which its audit entry records in `memory_results` (and the contents
/// written in `memory_query`).
fn answered(
    memories: Vec<Memory>,
    written: Vec<String>,
    events: Vec<Event>,
) -> Recorded<Data<MemoryBatch>> {
    let ops = PendingOps {
        events,
        detail: AuditDetail {
            memory_query: (!written.is_empty()).then_some(written),
            memory_results: Some(memories.iter().map(Memory::audited).collect()),
            ..Default::default()
        },
        ..Default::default()
    };
    Recorded::new(Data(MemoryBatch { memories }), ops)
}

#[utoipa::path(post, path = "/v1/memories/batch", tag = "memory", security(("api_key" = [])),
    request_body = MemoryBatchCreateRequest,
    responses((status = 200, description = "the memories, in the order given", body = MemoryBatchEnvelope), (status = 400, description = "no items, more than 100, or invalid items, each named by its index (4000); nothing is stored", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020); nothing is stored", body = ErrorEnvelope)))]
pub(crate) async fn create_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(batch): Json<MemoryBatchCreateRequest>,
) -> Result<Recorded<Data<MemoryBatch>>, ApiError> {
    let texts = batch.iter().map(|m| m.content.clone()).collect();
    let vectors = embed_many(&state, &caller, &request, texts).await?;
    let at = now_stored();
    let mut events = Vec::with_capacity(batch.len());
    let mut memories = Vec::with_capacity(batch.len());
    let mut written = Vec::with_capacity(batch.len());
    for (new, vector) in batch.into_iter().zip(vectors) {
        let (event, memory) = created(&state, &caller, new, &vector, at);
        written.push(memory.content.clone());
        events.push(event);
        memories.push(memory);
    }
    Ok(answered(memories, written, events))
}

#[utoipa::path(patch, path = "/v1/memories/batch", tag = "memory", security(("api_key" = [])),
    request_body = MemoryBatchUpdateRequest,
    responses((status = 200, description = "the memories as updated, in the order given", body = MemoryBatchEnvelope), (status = 400, description = "no items, more than 100, invalid items or an id given twice, each named by its index (4000); nothing is stored", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "an item's memory is missing or another tenant's, named by its index (4040); nothing is stored", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020); nothing is stored", body = ErrorEnvelope)))]
pub(crate) async fn update_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(batch): Json<MemoryBatchUpdateRequest>,
) -> Result<Recorded<Data<MemoryBatch>>, ApiError> {
    // Every memory is found first (a missing one is 404 whatever the values), then every
    // item's values are checked, as a single update does.
    let mut found = Vec::with_capacity(batch.len());
    let mut missing = Vec::new();
    for (i, BatchUpdate { id, update }) in batch.into_iter().enumerate() {
        // The index names the item; the id is not echoed (it may be another tenant's).
        match state
            .projections
            .memories
            .get(&caller.tenant.id, &id)
            .map_err(ApiError::internal)?
        {
            Some(m) => found.push((i, m, update)),
            None => missing.push(format!("memories[{i}]: memory not found")),
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::not_found(format!(
            "{}; nothing was stored",
            missing.join("; ")
        )));
    }
    let mut checked = Vec::with_capacity(found.len());
    let mut refused = Vec::new();
    for (i, m, update) in found {
        match update.check() {
            Ok(changes) => checked.push((m, changes)),
            Err(e) => refused.push(format!("memories[{i}]: {}", e.0)),
        }
    }
    if !refused.is_empty() {
        return Err(ApiError::bad_request(format!(
            "{}; nothing was stored",
            refused.join("; ")
        )));
    }
    // Only changed contents are embedded again, all in one batch.
    let changed: Vec<Option<String>> = checked
        .iter()
        .map(|(m, c)| c.content.as_ref().filter(|t| **t != m.content).cloned())
        .collect();
    let texts: Vec<String> = changed.iter().flatten().cloned().collect();
    let mut vectors = embed_many(&state, &caller, &request, texts)
        .await?
        .into_iter();
    let at = now_stored();
    let model = state.embed.model_id().to_string();
    let mut events = Vec::with_capacity(checked.len());
    let mut memories = Vec::with_capacity(checked.len());
    let mut written = Vec::new();
    for (
        (
            m,
            Changes {
                content,
                importance,
                amend,
            },
        ),
        changed,
    ) in checked.into_iter().zip(changed)
    {
        let vector = changed.as_ref().and_then(|_| vectors.next());
        events.push(Event::MemoryUpdated(MemoryUpdated {
            memory_id: m.id,
            tenant_id: caller.tenant.id,
            content: changed.clone(),
            importance,
            updated_at: at,
            model: vector.as_ref().map(|_| model.clone()),
            vector: vector.as_deref().map(vector_to_bytes),
            amend: amend.clone(),
        }));
        written.extend(content);
        let extra = Extra::amended(m.extra.clone(), amend.as_ref());
        memories.push(Memory::from(MemoryView {
            content: changed.unwrap_or_else(|| m.content.clone()),
            importance: importance.unwrap_or(m.importance),
            updated_at: at,
            extra,
            ..m
        }));
    }
    Ok(answered(memories, written, events))
}
