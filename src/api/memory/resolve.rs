//! `resolve: true` on create and extract: a new memory that states a different value for the
//! same subject and scope as a stored one supersedes it, and one equal in meaning to a stored
//! one is not stored. The resolver (the rules, or the chat model when extraction uses one)
//! decides among the nearest memories of the same tenant and scope.

use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::{Event, MemoryExtra, MemorySuperseded};
use uuid::Uuid;

use super::extract::scope_filter;
use super::{provider_failed, RequestId};
use crate::api::error::ApiError;
use crate::api::gate::Caller;
use crate::api::state::AppState;
use crate::extract::Resolution;

/// Stored memories a new one is compared with: the nearest by meaning, of its scope.
pub const CANDIDATES: usize = 20;

/// What a new memory (`content`, embedded as `vector`, scoped by `extra`) does to the stored
/// ones: the ones it supersedes, or the one it duplicates (by the resolver, or by a cosine at
/// or above the deduplication threshold, as extraction's `deduplicate` finds them).
pub(super) async fn resolve(
    state: &AppState,
    caller: &Caller,
    request: &RequestId,
    content: &str,
    vector: &[f32],
    extra: &MemoryExtra,
) -> Result<Resolution, ApiError> {
    let scope = scope_filter(extra);
    let nearest = state
        .projections
        .memories
        .search(
            &caller.tenant.id,
            vector,
            MemoryQuery {
                memory_type: None,
                filter: scope.as_ref(),
                include_superseded: false,
            },
            -1.0,
            CANDIDATES,
        )
        .map_err(ApiError::internal)?;
    if nearest.is_empty() {
        return Ok(Resolution::default());
    }
    let threshold = state.memory.dedup_threshold;
    // The closest at or above the deduplication threshold, should the resolver find nothing.
    let close = nearest
        .iter()
        .filter(|(_, h)| h.score >= threshold)
        .max_by(|a, b| a.1.score.total_cmp(&b.1.score))
        .map(|(m, _)| m.id);
    let existing: Vec<(Uuid, String)> = nearest
        .into_iter()
        .map(|(m, _)| (m.id, m.content))
        .collect();
    let resolver = state.resolver.clone();
    let new = content.to_string();
    // Dropped with this future when the caller goes away, which closes `alive`.
    let (alive, _caller_here) = tokio::sync::oneshot::channel::<()>();
    let resolution = tokio::task::spawn_blocking(move || {
        let borrowed: Vec<(Uuid, &str)> = existing.iter().map(|(i, c)| (*i, c.as_str())).collect();
        resolver.resolve(&new, &borrowed, &|| alive.is_closed())
    })
    .await
    .map_err(|e| ApiError::internal(format!("resolver crashed: {e}")))?
    .map_err(|e| provider_failed("conflict resolution", request, e))?;
    // A contradiction is decided first: "I live in Porto" and "I live in Lisbon" can be close
    // enough by cosine to pass for duplicates.
    if !resolution.supersedes.is_empty() || resolution.duplicate_of.is_some() {
        return Ok(resolution);
    }
    Ok(Resolution {
        supersedes: Vec::new(),
        duplicate_of: close,
    })
}

/// The events that mark `superseded` as superseded by `by`.
pub(super) fn superseded_events(
    caller: &Caller,
    superseded: &[Uuid],
    by: Uuid,
    at: i64,
) -> Vec<Event> {
    superseded
        .iter()
        .map(|id| {
            Event::MemorySuperseded(MemorySuperseded {
                memory_id: *id,
                tenant_id: caller.tenant.id,
                superseded_by: by,
                superseded_at: at,
            })
        })
        .collect()
}
