//! The memory store's endpoints: CRUD and batch delete ([`crud`]), semantic search
//! ([`search`]), extraction from a conversation or a text ([`extract`]), and a memory's every
//! version from the log ([`history`]).
//!
//! Every mutation is an event appended with the request's audit entry; every read comes from
//! the memories projection. Vectors are computed here (the embedder runs on its own worker)
//! and stored in the events, so replay never calls a model.

pub mod crud;
pub mod extract;
pub mod history;
pub mod search;

use auditmem_projections::memories::MemoryView;
use uuid::Uuid;

use super::error::ApiError;
use super::gate::Caller;
use super::state::AppState;
use crate::registry::ErrorCode;

/// The embedding of `text`; a failing provider is 502 with nothing stored.
async fn embed_one(state: &AppState, text: &str) -> Result<Vec<f32>, ApiError> {
    state
        .embed
        .embed_one(text.to_string())
        .await
        .map_err(embedding_failed)
}

fn embedding_failed(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "embedding failed");
    ApiError::new(
        ErrorCode::ProviderFailure,
        "the embedding provider failed; nothing was stored",
    )
}

/// A memory id from the path; one that is no id is a memory that does not exist.
fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id.trim()).map_err(|_| not_found())
}

fn not_found() -> ApiError {
    ApiError::not_found("memory not found")
}

/// The caller's memory `id`; another tenant's is as missing as one that never existed.
fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<MemoryView, ApiError> {
    let id = parse_id(id)?;
    state
        .projections
        .memories
        .get(&caller.tenant.id, &id)
        .map_err(ApiError::internal)?
        .ok_or_else(not_found)
}
