//! `resolve: true` on create and extract, around the resolver: the stored memories a new one
//! is compared with and the decision are the command's (`crate::command::memory::resolve`);
//! asking the resolver (the rules, or the chat model when extraction uses one) is the
//! handler's, since it may be a provider.

use auditmem_projections::MemoryExtra;

use super::{provider_failed, RequestId};
use crate::api::error::ApiError;
use crate::api::gate::Caller;
use crate::api::state::AppState;
use crate::command::memory::resolve::{decide, nearby};
use crate::command::Context;
use crate::extract::Resolution;

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
    let near = nearby(
        &Context::service(&state.projections),
        caller.tenant.id,
        vector,
        extra,
        state.memory.dedup_threshold,
    )?;
    if near.is_empty() {
        return Ok(Resolution::default());
    }
    let resolver = state.resolver.clone();
    let new = content.to_string();
    // Dropped with this future when the caller goes away, which closes `alive`.
    let (alive, _caller_here) = tokio::sync::oneshot::channel::<()>();
    let (near, verdict) = tokio::task::spawn_blocking(move || {
        let verdict = resolver.resolve(&new, &near.borrowed(), &|| alive.is_closed());
        (near, verdict)
    })
    .await
    .map_err(|e| ApiError::internal(format!("resolver crashed: {e}")))?;
    let verdict = verdict.map_err(|e| provider_failed("conflict resolution", request, e))?;
    Ok(decide(&near, verdict))
}
