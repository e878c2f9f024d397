//! The memory store's endpoints: CRUD and batch delete ([`crud`]), batch create and update
//! ([`batch`]), semantic search
//! ([`search`]), extraction from a conversation or a text ([`extract`]), a memory's every
//! version from the log ([`history`]), and any read as the store stood at a log position
//! ([`as_of`]).
//!
//! Each handler reads its request, embeds what needs a vector (the embedder runs on its own
//! worker, where each tenant's texts take their turn with the other tenants'), asks the
//! extractor or the resolver when the request needs them, and hands the rest to its command
//! (`crate::command::memory`), which decides the events, the answer and what the audit entry
//! records; the gate appends them with the request's audit entry. Every read comes from the
//! memories projection; vectors travel in the events, so replay never calls a model.
//!
//! A provider's failure reaches the caller, and so the audit entry, as a generic message naming
//! the request id; its detail (the endpoint without credentials, the status, the start of the
//! provider's answer) goes to the server log only, under the same id.

pub mod as_of;
pub mod batch;
pub mod credits;
pub mod crud;
pub mod expiry;
pub mod extract;
pub mod history;
pub mod resolve;
pub mod search;

use auditmem_projections::memories::MemoryView;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;
use super::gate::Caller;
use super::state::AppState;
use crate::command::{self, Context};
use crate::registry::ErrorCode;

/// The request's id: the `x-request-id` header, which the outermost layer sets on every request
/// (or keeps the client's) and sends back with the answer.
pub(crate) struct RequestId(String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let id = parts
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        Ok(RequestId(id.to_string()))
    }
}

/// The embedding of `text`, queued as the caller's tenant's; a failing provider is 502 with
/// nothing stored.
async fn embed_one(
    state: &AppState,
    caller: &Caller,
    request: &RequestId,
    text: &str,
) -> Result<Vec<f32>, ApiError> {
    state
        .embed
        .embed_one_for(caller.tenant.id, text.to_string())
        .await
        .map_err(|e| provider_failed("embedding", request, e))
}

/// The embeddings of `texts`, in order, as one batch of the caller's tenant's work (the
/// embedding worker cuts it into turns with other tenants'); a failing provider is 502 with
/// nothing stored.
async fn embed_many(
    state: &AppState,
    caller: &Caller,
    request: &RequestId,
    texts: Vec<String>,
) -> Result<Vec<Vec<f32>>, ApiError> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let n = texts.len();
    let vectors = state
        .embed
        .embed_for(caller.tenant.id, texts)
        .await
        .map_err(|e| provider_failed("embedding", request, e))?;
    if vectors.len() != n {
        return Err(provider_failed(
            "embedding",
            request,
            format!("{} vectors for {n} texts", vectors.len()),
        ));
    }
    Ok(vectors)
}

/// A provider's failure as the caller and its audit entry see it: a generic message naming the
/// request; the detail is logged under the request id, never answered.
fn provider_failed(
    provider: &'static str,
    request: &RequestId,
    detail: impl std::fmt::Display,
) -> ApiError {
    tracing::error!(request_id = %request.0, provider, detail = %detail, "provider call failed");
    ApiError::new(
        ErrorCode::ProviderFailure,
        format!(
            "the {provider} provider failed; nothing was stored (request {}: the server log has the detail)",
            request.0
        ),
    )
}

/// The caller's memory `id`; another tenant's, or one outside the caller's scope, is as
/// missing as one that never existed.
fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<MemoryView, ApiError> {
    let memory =
        command::memory::owned(&Context::service(&state.projections), caller.tenant.id, id)?;
    match caller.sees(memory.extra.as_ref()) {
        true => Ok(memory),
        false => Err(command::memory::not_found().into()),
    }
}

/// Refuses, as missing, the memory `id` when the caller is bound to a scope it is outside;
/// the command that follows finds it again (a tenant-wide caller is not looked up twice).
fn within_scope(state: &AppState, caller: &Caller, id: &str) -> Result<(), ApiError> {
    match caller.scope {
        Some(_) => owned(state, caller, id).map(|_| ()),
        None => Ok(()),
    }
}
