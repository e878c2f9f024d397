//! `POST /v1/memories/search`: the tenant's memories ranked by meaning and importance, by
//! keyword, or both; and what the search's audit entry records of them (each hit with its
//! ranking, in `memory_results`, and the query in `memory_query`). A search appends nothing
//! but its audit entry.

use auditmem_projections::memories::{Found, Memories, MemoryQuery, SearchMode};
use auditmem_projections::AuditDetail;
use uuid::Uuid;

use super::view_subjects;
use crate::command::{Context, Decision, Refusal};
use crate::wire::memory::{
    json_of, shown_score, AuditedHit, Search, SearchExplain, SearchResult, SearchResults,
};
use crate::wire::time::Time;

/// The lowest similarity whose shown value is at least `min`: the scan's threshold, so that
/// search keeps exactly the results whose shown `score` meets `min_similarity` (a score given
/// back as the threshold keeps its result). The shown value rises with the similarity, so the
/// threshold is found a few f32 steps from `min - 0.5e-6`.
pub fn score_floor(min: f64) -> f32 {
    let mut t = (min - 0.5e-6) as f32;
    while shown_score(t) < min {
        t = t.next_up();
    }
    while shown_score(t.next_down()) >= min {
        t = t.next_down();
    }
    t
}

/// The search `search`, its query embedded as `vector` (every mode shows each result's
/// cosine similarity as `score`).
pub fn search(
    ctx: &Context<'_>,
    tenant: Uuid,
    search: Search,
    vector: &[f32],
) -> Result<Decision<SearchResults>, Refusal> {
    search_in(&ctx.projections.memories, tenant, search, vector)
}

/// [`search`] over `memories`: the current store, or one as it stood at a log position.
pub fn search_in(
    memories: &Memories,
    tenant: Uuid,
    search: Search,
    vector: &[f32],
) -> Result<Decision<SearchResults>, Refusal> {
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
        as_of: _,
    } = search;
    let found = memories.search_in_mode(
        &tenant,
        &query,
        vector,
        MemoryQuery {
            memory_type,
            filter: filter.as_ref(),
            include_superseded,
        },
        score_floor(min_similarity),
        top_k,
        mode,
        &fusion,
    )?;
    let mode_name = match mode {
        SearchMode::Semantic => "semantic",
        SearchMode::Keyword => "keyword",
        SearchMode::Hybrid => "hybrid",
    };
    let detail = AuditDetail {
        memory_results: Some(recorded(&found)),
        memory_query: Some(vec![query]),
        ..Default::default()
    };
    let mut subjects: Vec<_> = found
        .iter()
        .flat_map(|f| view_subjects(tenant, &f.memory))
        .collect();
    subjects.sort();
    subjects.dedup();
    let hybrid = mode == SearchMode::Hybrid;
    let results = found
        .into_iter()
        .map(|f| {
            let explained = explain.then(|| SearchExplain {
                search_mode: mode_name,
                semantic_rank: f.semantic_rank,
                semantic_final_score: shown_score(f.semantic_final_score),
                keyword_rank: f.keyword_rank,
                keyword_score: f.keyword_score.map(shown_score),
                rrf_k: hybrid.then_some(f64::from(fusion.k)),
                semantic_weight: hybrid.then_some(f64::from(fusion.semantic_weight)),
                keyword_weight: hybrid.then_some(f64::from(fusion.keyword_weight)),
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
                occurred_at: x.occurred_at.map(Time),
                superseded_by: x.superseded_by,
            }
        })
        .collect();
    let mut d = Decision::new(
        SearchResults {
            results,
            as_of: None,
        },
        Vec::new(),
    )
    .recording(detail);
    d.audit.subjects = subjects;
    Ok(d)
}

/// The search's recorded result: each hit as its audit entry keeps it, with how it was found.
pub fn recorded(found: &[Found]) -> Vec<serde_json::Value> {
    let source = |f: &Found| match (f.semantic_rank, f.keyword_rank) {
        (Some(_), Some(_)) => "hybrid",
        (None, Some(_)) => "keyword",
        _ => "semantic",
    };
    found
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
        .collect()
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{MemoryExtra, MemoryType, Plan};
    use serde_json::json;

    use super::*;
    use crate::api::extract::read;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, tenant, unit, TENANT};
    use crate::wire::memory::SearchRequest;

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

    #[test]
    fn given_memories_when_searched_then_the_audit_entry_records_the_hits_as_answered() {
        let given = Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            memory(
                TENANT,
                Uuid::from_u128(1),
                "drinks green tea every morning",
                MemoryType::Fact,
                &unit(0, 0.0),
                MemoryExtra::default(),
                NOON,
            ),
            memory(
                TENANT,
                Uuid::from_u128(2),
                "owns a bicycle",
                MemoryType::Fact,
                &unit(2, 0.0),
                MemoryExtra::default(),
                NOON,
            ),
        ])
        .expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let asked = read::<SearchRequest>(
            true,
            json!({"query": "tea", "top_k": 1, "min_similarity": 0.5, "search_mode": "semantic"})
                .to_string()
                .as_bytes(),
        )
        .expect("checked");
        let d = search(&ctx, TENANT, asked, &unit(0, 0.0)).expect("decided");
        assert!(d.events.is_empty() && d.check.is_none());
        assert_eq!(d.answer.results.len(), 1);
        assert_eq!(d.answer.results[0].id, Uuid::from_u128(1));
        assert_eq!(d.answer.results[0].score, 1.0);
        assert_eq!(d.audit.detail.memory_query, Some(vec!["tea".to_string()]));
        assert_eq!(
            d.audit.detail.memory_results,
            Some(vec![json!({
                "id": Uuid::from_u128(1),
                "content": "drinks green tea every morning",
                "memory_type": "fact",
                "importance": 0.5,
                "similarity": 1.0,
                "final_score": 0.925,
                "source": "semantic",
            })])
        );
    }
}
