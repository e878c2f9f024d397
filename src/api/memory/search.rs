//! `POST /v1/memories/search`: the tenant's memories ranked by meaning and importance.

use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::AuditDetail;
use axum::extract::State;
use axum::Extension;

use super::{embed_one, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, PendingOps, Recorded};
use crate::api::state::AppState;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{
    json_of, shown_score, AuditedHit, Search, SearchRequest, SearchResult, SearchResults,
};

type SearchEnvelope = Data<SearchResults>;

/// The lowest similarity whose shown value is at least `min`: the scan's threshold, so that
/// search keeps exactly the results whose shown `score` meets `min_similarity` (a score given
/// back as the threshold keeps its result). The shown value rises with the similarity, so the
/// threshold is found a few f32 steps from `min - 0.5e-6`.
fn score_floor(min: f64) -> f32 {
    let mut t = (min - 0.5e-6) as f32;
    while shown_score(t) < min {
        t = t.next_up();
    }
    while shown_score(t.next_down()) >= min {
        t = t.next_down();
    }
    t
}

#[utoipa::path(post, path = "/v1/memories/search", tag = "memory", security(("api_key" = [])),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked by 0.85 * score + 0.15 * importance", body = SearchEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn search_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(search): Json<SearchRequest>,
) -> Result<Recorded<Data<SearchResults>>, ApiError> {
    let Search {
        query,
        top_k,
        min_similarity,
        memory_type,
        filter,
        include_superseded,
    } = search;
    let vector = embed_one(&state, &caller, &request, &query).await?;
    let hits = state
        .projections
        .memories
        .search(
            &caller.tenant.id,
            &vector,
            MemoryQuery {
                memory_type,
                filter: filter.as_ref(),
                include_superseded,
            },
            score_floor(min_similarity),
            top_k,
        )
        .map_err(ApiError::internal)?;
    let audited = hits
        .iter()
        .map(|(m, h)| {
            json_of(&AuditedHit {
                id: m.id,
                content: &m.content,
                memory_type: m.memory_type,
                importance: m.importance,
                similarity: shown_score(h.score),
                final_score: shown_score(h.final_score),
                source: "semantic",
            })
        })
        .collect();
    let results = hits
        .into_iter()
        .map(|(m, h)| {
            let x = m.extra.unwrap_or_default();
            SearchResult {
                id: m.id,
                content: m.content,
                memory_type: m.memory_type,
                importance: m.importance,
                score: shown_score(h.score),
                final_score: shown_score(h.final_score),
                user_id: x.user_id,
                agent_id: x.agent_id,
                session_id: x.session_id,
                metadata: x.metadata.and_then(|t| serde_json::from_str(&t).ok()),
                superseded_by: x.superseded_by,
            }
        })
        .collect();
    let ops = PendingOps {
        detail: AuditDetail {
            memory_query: Some(vec![query]),
            memory_results: Some(audited),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Recorded::new(Data(SearchResults { results }), ops))
}

#[cfg(test)]
mod tests {
    use super::{score_floor, shown_score};

    #[test]
    fn the_score_floor_is_the_lowest_similarity_shown_at_the_threshold() {
        for min in [-1.0, -0.25, 0.0, 1e-6, 0.123_456, 0.8, 0.999_999, 1.0] {
            let t = score_floor(min);
            assert!(shown_score(t) >= min, "{min}: {t} shows {}", shown_score(t));
            assert!(
                shown_score(t.next_down()) < min,
                "{min}: {} shows {}",
                t.next_down(),
                shown_score(t.next_down())
            );
        }
        // A similarity shown as 0.8 passes a threshold of 0.8 though it is below it unrounded.
        assert!(0.799_999_6_f32 >= score_floor(0.8));
        assert!(0.799_999_4_f32 < score_floor(0.8));
    }
}
