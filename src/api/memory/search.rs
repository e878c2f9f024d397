//! `POST /v1/memories/search`: the tenant's memories ranked by meaning and importance.

use auditmem_projections::memories::{Found, MemoryQuery, SearchMode};
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
    json_of, shown_score, AuditedHit, Search, SearchExplain, SearchRequest, SearchResult,
    SearchResults,
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
    responses((status = 200, description = "ranked by final_score: 0.85 * score + 0.15 * importance (semantic), BM25 (keyword) or reciprocal rank fusion (hybrid)", body = SearchEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
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
        mode,
        explain,
        fusion,
    } = search;
    // Every mode embeds the query: each result shows its cosine similarity as `score`.
    let vector = embed_one(&state, &caller, &request, &query).await?;
    let found = state
        .projections
        .memories
        .search_in_mode(
            &caller.tenant.id,
            &query,
            &vector,
            MemoryQuery {
                memory_type,
                filter: filter.as_ref(),
                include_superseded,
            },
            score_floor(min_similarity),
            top_k,
            mode,
            &fusion,
        )
        .map_err(ApiError::internal)?;
    let mode_name = match mode {
        SearchMode::Semantic => "semantic",
        SearchMode::Keyword => "keyword",
        SearchMode::Hybrid => "hybrid",
    };
    let source = |f: &Found| match (f.semantic_rank, f.keyword_rank) {
        (Some(_), Some(_)) => "hybrid",
        (None, Some(_)) => "keyword",
        _ => "semantic",
    };
    let audited = found
        .iter()
        .map(|f| {
            json_of(&AuditedHit {
                id: f.memory.id,
                content: &f.memory.content,
                memory_type: f.memory.memory_type,
                importance: f.memory.importance,
                similarity: shown_score(f.score),
                final_score: shown_score(f.final_score),
                source: source(f),
                keyword_score: f.keyword_score.map(shown_score),
            })
        })
        .collect();
    let results = found
        .into_iter()
        .map(|f| {
            let explained = explain.then(|| SearchExplain {
                search_mode: mode_name,
                semantic_rank: f.semantic_rank,
                semantic_final_score: shown_score(f.semantic_final_score),
                keyword_rank: f.keyword_rank,
                keyword_score: f.keyword_score.map(shown_score),
                rrf_k: (mode == SearchMode::Hybrid).then_some(f64::from(fusion.k)),
                semantic_weight: (mode == SearchMode::Hybrid)
                    .then_some(f64::from(fusion.semantic_weight)),
                keyword_weight: (mode == SearchMode::Hybrid)
                    .then_some(f64::from(fusion.keyword_weight)),
            });
            let m = f.memory;
            let x = m.extra.unwrap_or_default();
            let metadata = x.metadata_value();
            SearchResult {
                id: m.id,
                content: m.content,
                memory_type: m.memory_type,
                importance: m.importance,
                score: shown_score(f.score),
                final_score: shown_score(f.final_score),
                keyword_score: f.keyword_score.map(shown_score),
                explain: explained,
                user_id: x.user_id,
                agent_id: x.agent_id,
                session_id: x.session_id,
                metadata,
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
