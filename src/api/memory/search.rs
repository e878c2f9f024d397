//! `POST /v1/memories/search`: the tenant's memories ranked by meaning and importance
//! (`crate::command::memory::search` decides the results and what the audit entry records).

use axum::extract::State;
use axum::Extension;

use super::{embed_one, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, Recorded};
use crate::api::state::AppState;
use crate::command::memory::search;
use crate::command::Context;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{SearchRequest, SearchResults};

type SearchEnvelope = Data<SearchResults>;

#[utoipa::path(post, path = "/v1/memories/search", tag = "memory", security(("api_key" = [])),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked by final_score: 0.85 * score + 0.15 * importance (semantic), BM25 (keyword) or reciprocal rank fusion (hybrid)", body = SearchEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn search_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(mut asked): Json<SearchRequest>,
) -> Result<Recorded<Data<SearchResults>>, ApiError> {
    asked.filter = caller.narrow(asked.filter.take());
    // Every mode embeds the query: each result shows its cosine similarity as `score`.
    let vector = embed_one(&state, &caller, &request, &asked.query).await?;
    let ctx = Context::service(&state.projections);
    let decision = search::search(&ctx, caller.tenant.id, asked, &vector)?;
    Ok(Recorded::decided(decision, Data))
}
