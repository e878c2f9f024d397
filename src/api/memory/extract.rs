//! `POST /v1/memories/extract`: memories found in a conversation or a text by the extractor,
//! embedded, optionally deduplicated against the tenant's memories and each other, stored, and
//! charged.
//!
//! The steps: check the input's size and price it; reserve the price from the tenant's credits
//! (402 at once when its credits, less what its other extractions hold, do not cover it:
//! [`super::credits`]); extract, and refuse more memories than one call may store; embed, in the
//! tenant's turns; keep or skip each candidate; commit the memories with the charge, which the
//! appender checks again against the credits and which replaces the reservation. Nothing is
//! stored or charged on any refusal or failure. A caller that goes away (timeout, disconnect)
//! drops this future: its reservation is released, and no further extraction or embedding
//! work is started for it.

use auditmem_projections::memories::filter::Filter;
use auditmem_projections::memories::{Extra, MemoryQuery, MemoryView};
use auditmem_projections::{
    vector_to_bytes, AuditDetail, CreditsConsumed, Event, MemoryCreated, MemoryExtra, MemoryType,
    Projections,
};
use axum::extract::State;
use axum::Extension;
use uuid::Uuid;

use super::credits::{Held, Hold, Refused};
use super::{embed_many, provider_failed, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::gate::{Caller, PendingOps, Recorded};
use crate::api::state::AppState;
use crate::extract::{Candidate, ExtractInput};
use crate::log::appender::{Precondition, Rejection};
use crate::registry::ErrorCode;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{
    ExtractRequest, Extracted, Extraction, Memory, MemoryResolution, SkippedMemory,
};
use crate::wire::time::now_stored;

type ExtractEnvelope = Data<Extracted>;

/// What an extraction costs, in credits and USD: a base per call plus a rate per started 1,000
/// input characters.
pub fn extraction_cost(state: &AppState, input_chars: usize) -> (f64, f64) {
    let s = &state.memory;
    let credits = s.credits_per_call + s.credits_per_1k_chars * input_chars.div_ceil(1000) as f64;
    (credits, ((credits * s.usd_per_credit) * 1e6).round() / 1e6)
}

fn insufficient(needed: f64, have: f64) -> ApiError {
    ApiError::new(
        ErrorCode::InsufficientCredits,
        format!("extraction needs {needed} credits; the tenant has {have}"),
    )
}

#[utoipa::path(post, path = "/v1/memories/extract", tag = "memory", security(("api_key" = [])),
    request_body = ExtractRequest,
    responses((status = 200, description = "created and skipped memories", body = ExtractEnvelope), (status = 400, description = "invalid input, or over the caps on its characters or on the memories found in it (4000)", body = ErrorEnvelope), (status = 402, description = "insufficient credits (4020)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn extract_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(extraction): Json<ExtractRequest>,
) -> Result<Held<Recorded<Data<Extracted>>>, ApiError> {
    let Extraction {
        deduplicate,
        resolve,
        extra,
        input,
        skipped_messages,
        input_value,
        input_text,
    } = extraction;
    let (credits, usd) = price(&state, &input_text)?;
    let hold = reserve(&state, &caller, credits)?;
    let candidates = extract(&state, &request, input).await?;
    let most = state.memory.max_extract_memories;
    if candidates.len() > most {
        return Err(ApiError::bad_request(format!(
            "the input holds {} memories; at most {most} are extracted in one call (nothing was stored or charged)",
            candidates.len()
        )));
    }
    let texts = candidates.iter().map(|c| c.content.clone()).collect();
    let vectors = embed_many(&state, &caller, &request, texts).await?;
    let at = now_stored();
    let mut kept = sort(&state, &caller, &candidates, &vectors, deduplicate, &extra)?;
    let mut events = Vec::with_capacity(kept.created.len() + 1);
    let mut memories = Vec::with_capacity(kept.created.len());
    for (c, id, vector) in kept.created {
        let resolution = if resolve {
            let r = super::resolve::resolve(&state, &caller, &request, &c.content, vector, &extra)
                .await?;
            if let Some(dup) = r.duplicate_of {
                kept.skipped.push(duplicate_of(c, dup));
                continue;
            }
            events.extend(super::resolve::superseded_events(
                &caller,
                &r.supersedes,
                id,
                at,
            ));
            Some(MemoryResolution {
                stored: true,
                superseded: r.supersedes,
                duplicate_of: None,
            })
        } else {
            None
        };
        let importance = (c.importance as f64 * 100.0).round() / 100.0;
        events.push(Event::MemoryCreated(MemoryCreated {
            memory_id: id,
            tenant_id: caller.tenant.id,
            content: c.content.clone(),
            memory_type: c.memory_type,
            importance,
            created_at: at,
            model: state.embed.model_id().to_string(),
            vector: vector_to_bytes(vector),
            extra: extra.clone().or_none(),
        }));
        let mut memory = Memory::from(MemoryView {
            id,
            content: c.content.clone(),
            memory_type: c.memory_type,
            importance,
            created_at: at,
            updated_at: at,
            extra: extra.clone().or_none().map(Extra::from),
        });
        memory.resolution = resolution;
        memories.push(memory);
    }
    events.push(Event::CreditsConsumed(CreditsConsumed {
        tenant_id: caller.tenant.id,
        credits,
        usd,
        at,
    }));
    let answer = Extracted {
        memories,
        skipped: kept.skipped,
        credits_consumed: credits,
        skipped_messages,
    };
    let ops = PendingOps {
        events,
        check: Some(credits_cover(caller.tenant.id, credits)),
        detail: AuditDetail {
            input_content: Some(input_value),
            output_content: Some(answer.output()),
            memory_query: Some(vec![input_text]),
            memory_results: Some(answer.memories.iter().map(Memory::audited).collect()),
            ..Default::default()
        },
        credits,
        usd,
        ..Default::default()
    };
    Ok(Held {
        response: Recorded::new(Data(answer), ops),
        hold,
    })
}

/// The cost of extracting from `input_text`, refused when the input is over the limit.
fn price(state: &AppState, input_text: &str) -> Result<(f64, f64), ApiError> {
    let input_chars = input_text.chars().count();
    if input_chars > state.memory.max_extract_chars {
        return Err(ApiError::bad_request(format!(
            "the input is {input_chars} characters; at most {} are allowed",
            state.memory.max_extract_chars
        )));
    }
    Ok(extraction_cost(state, input_chars))
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
            Refused::Short { needed, credits, .. } => insufficient(needed, credits),
            Refused::Unreadable(e) => e,
        })
}

/// The extractor's candidates; it may call a remote model, so it runs off the runtime. The
/// extractor asks whether the caller is still there before starting more work (a retry).
async fn extract(
    state: &AppState,
    request: &RequestId,
    input: ExtractInput,
) -> Result<Vec<Candidate>, ApiError> {
    let extractor = state.extractor.clone();
    // Dropped with this future when the caller goes away, which closes `alive`.
    let (alive, _caller_here) = tokio::sync::oneshot::channel::<()>();
    tokio::task::spawn_blocking(move || {
        extractor.extract_unless_gone(&input, &|| alive.is_closed())
    })
    .await
    .map_err(|e| ApiError::internal(format!("extractor crashed: {e}")))?
    .map_err(|e| provider_failed("extraction", request, e))
}

/// The candidates to store, each with its new id and vector, and the ones skipped.
struct Sorted<'a> {
    created: Vec<(&'a Candidate, Uuid, &'a [f32])>,
    skipped: Vec<SkippedMemory>,
}

/// Keeps every candidate, or with `deduplicate` skips one as similar as the threshold to a
/// memory of the same type already stored or kept earlier in this call.
fn sort<'a>(
    state: &AppState,
    caller: &Caller,
    candidates: &'a [Candidate],
    vectors: &'a [Vec<f32>],
    deduplicate: bool,
    extra: &MemoryExtra,
) -> Result<Sorted<'a>, ApiError> {
    let threshold = state.memory.dedup_threshold;
    let scope = scope_filter(extra);
    let mut sorted = Sorted {
        created: Vec::new(),
        skipped: Vec::new(),
    };
    for (c, v) in candidates.iter().zip(vectors) {
        if deduplicate {
            if let Some(dup) = duplicate(
                state,
                caller,
                &sorted.created,
                c.memory_type,
                scope.as_ref(),
                v,
                threshold,
            )? {
                sorted.skipped.push(duplicate_of(c, dup));
                continue;
            }
        }
        sorted.created.push((c, Uuid::now_v7(), v));
    }
    Ok(sorted)
}

/// A candidate not stored because it duplicates the stored memory `dup`.
fn duplicate_of(c: &Candidate, dup: Uuid) -> SkippedMemory {
    SkippedMemory {
        content: c.content.clone(),
        memory_type: c.memory_type,
        reason: "duplicate",
        duplicate_of: dup,
    }
}

/// The memories an extraction's duplicates are looked for among: those of the same end user
/// and agent when it names them (another user's identical fact is no duplicate), else all the
/// tenant's.
pub(super) fn scope_filter(extra: &MemoryExtra) -> Option<Filter> {
    use auditmem_projections::memories::filter::{FilterField, FilterOp, Operand};
    let conds: Vec<Filter> = [
        (FilterField::UserId, &extra.user_id),
        (FilterField::AgentId, &extra.agent_id),
    ]
    .into_iter()
    .filter_map(|(field, v)| {
        v.as_ref().map(|v| Filter::Cond {
            field,
            op: FilterOp::Eq,
            operand: Operand::One(serde_json::Value::String(v.clone())),
        })
    })
    .collect();
    (!conds.is_empty()).then_some(Filter::And(conds))
}

/// The memory `v` duplicates: a stored one of the tenant's first, else one kept in this call.
fn duplicate(
    state: &AppState,
    caller: &Caller,
    kept: &[(&Candidate, Uuid, &[f32])],
    memory_type: MemoryType,
    scope: Option<&Filter>,
    v: &[f32],
    threshold: f32,
) -> Result<Option<Uuid>, ApiError> {
    let stored = state
        .projections
        .memories
        .nearest(
            &caller.tenant.id,
            v,
            MemoryQuery {
                memory_type: Some(memory_type),
                filter: scope,
                include_superseded: false,
            },
        )
        .map_err(ApiError::internal)?
        .filter(|(_, s)| *s >= threshold);
    let within = kept
        .iter()
        .filter(|(c, _, _)| c.memory_type == memory_type)
        .map(|(_, id, kv)| (*id, auditmem_projections::vector_table::dot(kv, v)))
        .filter(|(_, s)| *s >= threshold)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    Ok(stored.or(within).map(|(id, _)| id))
}

/// The appender's check that the tenant's credits still cover the charge, against every charge
/// committed before it.
fn credits_cover(tenant_id: Uuid, credits: f64) -> Precondition {
    Box::new(move |p: &Projections| match p.tenants.tenant(&tenant_id) {
        Ok(Some(t)) if t.credits >= credits => Ok(()),
        Ok(Some(t)) => {
            let e = insufficient(credits, t.credits);
            Err(Rejection {
                code: e.code,
                message: e.message,
                retry_after: None,
            })
        }
        Ok(None) => Err(Rejection {
            code: ErrorCode::Unauthorized,
            message: "unknown tenant".into(),
            retry_after: None,
        }),
        Err(e) => Err(Rejection {
            code: ErrorCode::Internal,
            message: format!("reading credits: {e}"),
            retry_after: None,
        }),
    })
}
