//! `POST /v1/memories/extract`: memories found in a conversation or a text by the extractor,
//! embedded, optionally deduplicated against the tenant's memories and each other, stored, and
//! charged.
//!
//! The steps: check the input's size and price it; reserve the price from the tenant's credits
//! (402 at once when its credits, less what its other extractions hold, do not cover it:
//! [`super::credits`]); extract, and refuse more memories than one call may store; embed, in the
//! tenant's turns; keep or skip each candidate, and with `resolve` ask the resolver about each
//! one kept; commit the memories with the charge, which the appender checks again against the
//! credits and which replaces the reservation. Every decision is the command's
//! (`crate::command::memory::extract`); the providers and the reservation are the handler's. Nothing is
//! stored or charged on any refusal or failure. A caller that goes away (timeout, disconnect)
//! drops this future: its reservation is released, and no further extraction or embedding
//! work is started for it.

use axum::extract::State;
use axum::Extension;

use super::credits::{Held, Hold, Refused};
use super::{embed_many, provider_failed, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, Recorded};
use crate::api::state::AppState;
use crate::command::memory::extract::{at_most, decide, insufficient, price, sort, Asked, Found};
use crate::command::Context;
use crate::extract::{Candidate, ExtractInput, Sourced};
use crate::registry::ErrorCode;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{ExtractRequest, Extracted, Extraction};

type ExtractEnvelope = Data<Extracted>;

#[utoipa::path(post, path = "/v1/memories/extract", tag = "memory", security(("api_key" = [])),
    request_body = ExtractRequest,
    responses((status = 200, description = "created and skipped memories", body = ExtractEnvelope), (status = 400, description = "invalid input, or over the caps on its characters or on the memories found in it (4000)", body = ErrorEnvelope), (status = 402, description = "insufficient credits (4020)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn extract_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(mut extraction): Json<ExtractRequest>,
) -> Result<Held<Recorded<Data<Extracted>>>, ApiError> {
    caller.confine(&mut extraction.extra)?;
    let Extraction {
        deduplicate,
        resolve,
        extra,
        input,
        message_times,
        skipped_messages,
        input_value,
        input_text,
    } = extraction;
    let charge = price(
        &state.memory.pricing(),
        state.memory.max_extract_chars,
        &input_text,
    )?;
    let hold = reserve(&state, &caller, charge.credits)?;
    let (candidates, sources): (Vec<Candidate>, Vec<Vec<usize>>) = extract(&state, &request, input)
        .await?
        .into_iter()
        .map(|s| (s.candidate, s.messages))
        .unzip();
    at_most(candidates.len(), state.memory.max_extract_memories)?;
    let texts = candidates.iter().map(|c| c.content.clone()).collect();
    let vectors = embed_many(&state, &caller, &request, texts).await?;
    let tenant = caller.tenant.id;
    let threshold = state.memory.dedup_threshold;
    let sorted = sort(
        &Context::service(&state.projections),
        tenant,
        &candidates,
        &vectors,
        deduplicate,
        &extra,
        threshold,
    )?;
    let resolutions = match resolve {
        true => {
            let kept: Vec<usize> = sorted.kept().collect();
            let mut resolutions = Vec::with_capacity(kept.len());
            for i in kept {
                let (content, vector) = (&candidates[i].content, &vectors[i]);
                resolutions.push(
                    super::resolve::resolve(&state, &caller, &request, content, vector, &extra)
                        .await?,
                );
            }
            Some(resolutions)
        }
        false => None,
    };
    let found = Found {
        candidates: &candidates,
        sources: &sources,
        vectors: &vectors,
        model: state.embed.model_id(),
    };
    let asked = Asked {
        extra,
        message_times,
        skipped_messages,
        input_value,
        input_text,
    };
    let ctx = Context::service(&state.projections);
    let decision = decide(&ctx, tenant, found, sorted, resolutions, asked, charge)?;
    Ok(Held {
        response: Recorded::decided(decision, Data),
        hold,
    })
}

/// `credits` held from the tenant's credits until the charge is committed or the call ends.
fn reserve(state: &AppState, caller: &Caller, credits: f64) -> Result<Hold, ApiError> {
    let tenant = caller.tenant.id;
    state
        .memory
        .reservations
        .reserve(tenant, credits, || {
            Ok(state
                .projections
                .tenants
                .tenant(&tenant)?
                .map_or(0.0, |t| t.credits))
        })
        .map_err(|refused| match refused {
            Refused::Short { needed, credits, held } if held > 0.0 => ApiError::new(
                ErrorCode::InsufficientCredits,
                format!(
                    "extraction needs {needed} credits; the tenant has {credits}, of which its extractions in progress hold {held}"
                ),
            ),
            Refused::Short { needed, credits, .. } => insufficient(needed, credits).into(),
            Refused::Unreadable(e) => e,
        })
}

/// The extractor's candidates; it may call a remote model, so it runs off the runtime. The
/// extractor asks whether the caller is still there before starting more work (a retry).
async fn extract(
    state: &AppState,
    request: &RequestId,
    input: ExtractInput,
) -> Result<Vec<Sourced>, ApiError> {
    let extractor = state.extractor.clone();
    // Dropped with this future when the caller goes away, which closes `alive`.
    let (alive, _caller_here) = tokio::sync::oneshot::channel::<()>();
    tokio::task::spawn_blocking(move || extractor.extract_sourced(&input, &|| alive.is_closed()))
        .await
        .map_err(|e| ApiError::internal(format!("extractor crashed: {e}")))?
        .map_err(|e| provider_failed("extraction", request, e))
}
