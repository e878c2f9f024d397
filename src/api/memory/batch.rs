//! `POST /v1/memories/batch` and `PATCH /v1/memories/batch`: up to 100 memories created, or
//! updated, in one call. Every item is checked before anything else (a 400 names each invalid
//! item by its index); the texts are embedded as one batch, in the tenant's turns; the events
//! go into the log in one append with the call's audit entry, so the batch is stored whole or
//! not at all.

use axum::extract::State;
use axum::Extension;

use super::{embed_many, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, Recorded};
use crate::api::state::AppState;
use crate::command::memory::{create, update};
use crate::command::Context;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{MemoryBatch, MemoryBatchCreateRequest, MemoryBatchUpdateRequest};

type MemoryBatchEnvelope = Data<MemoryBatch>;

#[utoipa::path(post, path = "/v1/memories/batch", tag = "memory", security(("api_key" = [])),
    request_body = MemoryBatchCreateRequest,
    responses((status = 200, description = "the memories, in the order given", body = MemoryBatchEnvelope), (status = 400, description = "no items, more than 100, or invalid items, each named by its index (4000); nothing is stored", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020); nothing is stored", body = ErrorEnvelope)))]
pub(crate) async fn create_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(mut batch): Json<MemoryBatchCreateRequest>,
) -> Result<Recorded<Data<MemoryBatch>>, ApiError> {
    for item in &mut batch {
        caller.confine(&mut item.extra)?;
    }
    let texts = batch.iter().map(|m| m.content.clone()).collect();
    let vectors = embed_many(&state, &caller, &request, texts).await?;
    let ctx = Context::service(&state.projections);
    let model = state.embed.model_id();
    let decision = create::create_batch(&ctx, caller.tenant.id, batch, model, &vectors)?;
    Ok(Recorded::decided(decision, Data))
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
    let planned = {
        let ctx = Context::service(&state.projections);
        update::plan_batch(&ctx, caller.tenant.id, batch)?
    };
    // Only changed contents are embedded again, all in one batch.
    let texts = planned
        .iter()
        .filter_map(|p| p.to_embed().map(str::to_string))
        .collect();
    let vectors = embed_many(&state, &caller, &request, texts).await?;
    let ctx = Context::service(&state.projections);
    let model = state.embed.model_id();
    let decision = update::decide_batch(&ctx, caller.tenant.id, planned, model, &vectors)?;
    Ok(Recorded::decided(decision, Data))
}
