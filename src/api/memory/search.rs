//! `POST /v1/memories/search`: the tenant's memories ranked by meaning and importance
//! (`crate::command::memory::search` decides the results and what the audit entry records).

use axum::extract::State;
use axum::Extension;

use super::{as_of, embed_one, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, Recorded};
use crate::api::state::AppState;
use crate::command::memory::search;
use crate::command::Context;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{AsOfShown, SearchRequest, SearchResults};

type SearchEnvelope = Data<SearchResults>;

#[utoipa::path(post, path = "/v1/memories/search", tag = "memory", security(("api_key" = [])),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked by final_score: 0.85 * score + 0.15 * importance (semantic), BM25 (keyword) or reciprocal rank fusion (hybrid); with `as_of`, over the store as it stood then", body = SearchEnvelope), (status = 400, description = "invalid field, `as_of` beyond the head, in the future or past the replay bound (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope), (status = 429, description = "the key's rate limit, or with `as_of` the tenant's reads as of a position already running or waiting, 2 at most (4290)", headers(("Retry-After" = u64, description = "whole seconds to wait, at least 1")), body = ErrorEnvelope)))]
pub(crate) async fn search_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(mut asked): Json<SearchRequest>,
) -> Result<Recorded<Data<SearchResults>>, ApiError> {
    asked.filter = caller.narrow(asked.filter.take());
    let tenant = caller.tenant.id;
    let Some(wanted) = asked.as_of else {
        // Every mode embeds the query: each result shows its cosine similarity as `score`.
        let vector = embed_one(&state, &caller, &request, &asked.query).await?;
        let ctx = Context::service(&state.projections);
        let decision = search::search(&ctx, tenant, asked, &vector)?;
        return Ok(Recorded::decided(decision, Data));
    };
    let then = as_of::resolve(&state, wanted)?;
    let seqs = as_of::history(&state, tenant, &then)?;
    let events = seqs.len();
    // Let in before the query's embedding: the tenant's pace bounds that work too.
    let pass = as_of::admit(&state, tenant).await?;
    let vector = embed_one(&state, &caller, &request, &asked.query).await?;
    let (mut decision, memory_models) = as_of::replay(&state, pass, then, seqs, move |past| {
        let decision = search::search_in(past, tenant, asked, &vector)?;
        Ok((decision, past.live_models(&tenant)))
    })
    .await?;
    // The memories were embedded then by the models their events name; the query is embedded
    // now: another model ranks by another geometry.
    let query_model = state.embed.model_id().to_string();
    decision.answer.as_of = Some(AsOfShown {
        embedder_changed: Some(memory_models.iter().any(|m| *m != query_model)),
        query_model: Some(query_model),
        memory_models: Some(memory_models),
        ..then.shown(events)
    });
    Ok(Recorded::decided(decision, Data))
}
