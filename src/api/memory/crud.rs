//! Create, list, read, update and delete memories, one at a time or every memory of a type:
//! the handlers of `crate::command::memory::{create, update, delete}`, and the reads.

use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::AuditDetail;
use axum::extract::{Path, State};
use axum::Extension;

use super::as_of;
use super::{embed_one, owned, resolve, within_scope, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::{Json, Query};
use crate::api::gate::{Caller, PendingOps, Recorded};
use crate::api::state::AppState;
use crate::command::memory::{
    all_subjects, create, delete, not_found, parse_id, update, Embedding,
};
use crate::command::Context;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{
    AsOf, AsOfQuery, BatchDeleteRequest, BatchDeleted, DeletedMemory, Memory, MemoryCreateRequest,
    MemoryListQuery, MemoryListing, MemoryPage, MemoryQueryRequest, MemoryQuerying,
    MemoryUpdateRequest,
};
use crate::wire::query::Paging;

type MemoryEnvelope = Data<Memory>;
type MemoryPageEnvelope = Data<MemoryPage>;
type MemoryDeletedEnvelope = Data<DeletedMemory>;
type BatchDeletedEnvelope = Data<BatchDeleted>;

#[utoipa::path(post, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    request_body = MemoryCreateRequest,
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn create_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(mut new): Json<MemoryCreateRequest>,
) -> Result<Recorded<Data<Memory>>, ApiError> {
    caller.confine(&mut new.extra)?;
    let vector = embed_one(&state, &caller, &request, &new.content).await?;
    let resolution = match new.resolve {
        true => Some(
            resolve::resolve(&state, &caller, &request, &new.content, &vector, &new.extra).await?,
        ),
        false => None,
    };
    let embedding = Embedding {
        model: state.embed.model_id(),
        vector: &vector,
    };
    let ctx = Context::service(&state.projections);
    let decision = create::create(&ctx, caller.tenant.id, new, embedding, resolution)?;
    Ok(Recorded::decided(decision, Data))
}

#[utoipa::path(get, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    params(MemoryListQuery),
    responses((status = 200, description = "newest first", body = MemoryPageEnvelope), (status = 400, description = "bad parameter (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 429, description = "the key's rate limit, or with `as_of` the tenant's reads as of a position already running or waiting, 2 at most (4290)", headers(("Retry-After" = u64, description = "whole seconds to wait, at least 1")), body = ErrorEnvelope)))]
pub(crate) async fn list_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<MemoryListQuery>,
) -> Result<Recorded<Data<MemoryPage>>, ApiError> {
    let MemoryListing {
        paging,
        memory_type,
        filter,
        as_of,
    } = q;
    let filter = caller.narrow(filter);
    let query = MemoryQuery {
        memory_type,
        filter: filter.as_ref(),
        include_superseded: false,
    };
    page(&state, &caller, paging, query, as_of).await
}

/// A page of the caller's memories a query takes, newest first (as the store stood at
/// `as_of`, when given); its audit entry is about every memory on the page.
async fn page(
    state: &AppState,
    caller: &Caller,
    paging: Paging,
    query: MemoryQuery<'_>,
    as_of: Option<AsOf>,
) -> Result<Recorded<Data<MemoryPage>>, ApiError> {
    let tenant = caller.tenant.id;
    let (offset, size) = (paging.offset(), paging.page_size);
    let ((total, items), shown) = match as_of {
        None => (
            state
                .projections
                .memories
                .list(&tenant, query, offset, size)
                .map_err(ApiError::internal)?,
            None,
        ),
        Some(wanted) => {
            let then = as_of::resolve(state, wanted)?;
            let seqs = as_of::history(state, tenant, &then)?;
            let shown = then.shown(seqs.len());
            // The replay thread outlives this borrow: it takes its own copy of the filter.
            let (memory_type, filter, include_superseded) = (
                query.memory_type,
                query.filter.cloned(),
                query.include_superseded,
            );
            let pass = as_of::admit(state, tenant).await?;
            let listed = as_of::replay(state, pass, then, seqs, move |past| {
                let query = MemoryQuery {
                    memory_type,
                    filter: filter.as_ref(),
                    include_superseded,
                };
                past.list(&tenant, query, offset, size)
                    .map_err(ApiError::internal)
            })
            .await?;
            (listed, Some(shown))
        }
    };
    let memories: Vec<Memory> = items.into_iter().map(Memory::from).collect();
    let ops = PendingOps {
        subjects: all_subjects(caller.tenant.id, &memories),
        ..Default::default()
    };
    let page = MemoryPage {
        memories,
        total,
        page: paging.page,
        page_size: paging.page_size,
        as_of: shown,
    };
    Ok(Recorded::new(Data(page), ops))
}

#[utoipa::path(get, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id"), AsOfQuery),
    responses((status = 200, description = "the memory (as it stood at `as_of`, when given)", body = MemoryEnvelope), (status = 400, description = "`as_of` malformed, beyond the head or in the future (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope), (status = 429, description = "the key's rate limit, or with `as_of` the tenant's reads as of a position already running or waiting, 2 at most (4290)", headers(("Retry-After" = u64, description = "whole seconds to wait, at least 1")), body = ErrorEnvelope)))]
pub(crate) async fn get_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(as_of): Query<AsOfQuery>,
) -> Result<Recorded<Data<Memory>>, ApiError> {
    // A read, which its audit entry records in `memory_results`.
    let memory = match as_of {
        None => Memory::from(owned(&state, &caller, &id)?),
        Some(wanted) => past_memory(&state, &caller, &id, wanted).await?,
    };
    let ops = PendingOps {
        detail: AuditDetail {
            memory_results: Some(vec![memory.audited()]),
            ..Default::default()
        },
        subjects: all_subjects(caller.tenant.id, [&memory]),
        ..Default::default()
    };
    Ok(Recorded::new(Data(memory), ops))
}

/// The caller's memory `id` as it stood at `wanted`: its own events up to there, folded.
async fn past_memory(
    state: &AppState,
    caller: &Caller,
    id: &str,
    wanted: AsOf,
) -> Result<Memory, ApiError> {
    let tenant = caller.tenant.id;
    let id = parse_id(id)?;
    let then = as_of::resolve(state, wanted)?;
    let stored = state
        .projections
        .memories
        .stored(&id)?
        .filter(|m| m.tenant_id == tenant && caller.sees(m.extra.as_ref()))
        .ok_or_else(not_found)?;
    let seqs: Vec<u64> = stored
        .versions
        .into_iter()
        .take_while(|s| *s <= then.position)
        .collect();
    if seqs.is_empty() {
        return Err(not_found().into());
    }
    as_of::bounded(&then, seqs.len())?;
    let events = seqs.len();
    let pass = as_of::admit(state, tenant).await?;
    let view = as_of::replay_part(state, pass, then, seqs, move |past| {
        past.get(&tenant, &id).map_err(ApiError::internal)
    })
    .await?
    .ok_or_else(not_found)?;
    Ok(Memory {
        as_of: Some(then.shown(events)),
        ..Memory::from(view)
    })
}

#[utoipa::path(patch, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")), request_body = MemoryUpdateRequest,
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 400, description = "empty body or another field (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn update_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    request: RequestId,
    Json(update): Json<MemoryUpdateRequest>,
) -> Result<Recorded<Data<Memory>>, ApiError> {
    // The body's shape was checked first (a malformed body is 400 even for a missing id); its
    // values once the memory is found.
    within_scope(&state, &caller, &id)?;
    let planned = {
        let ctx = Context::service(&state.projections);
        update::plan(&ctx, caller.tenant.id, &id, update)?
    };
    // Only changed content is embedded again.
    let vector = match planned.to_embed() {
        Some(c) => Some(embed_one(&state, &caller, &request, c).await?),
        None => None,
    };
    let embedding = vector.as_deref().map(|vector| Embedding {
        model: state.embed.model_id(),
        vector,
    });
    let ctx = Context::service(&state.projections);
    let decision = update::decide(&ctx, caller.tenant.id, planned, embedding)?;
    Ok(Recorded::decided(decision, Data))
}

#[utoipa::path(delete, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "deleted", body = MemoryDeletedEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn delete_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<DeletedMemory>>, ApiError> {
    within_scope(&state, &caller, &id)?;
    let ctx = Context::service(&state.projections);
    let decision = delete::delete_one(&ctx, caller.tenant.id, &id)?;
    Ok(Recorded::decided(decision, Data))
}

#[utoipa::path(delete, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    request_body = BatchDeleteRequest,
    responses((status = 200, description = "how many were deleted", body = BatchDeletedEnvelope), (status = 400, description = "empty body, bad memory_type or filter (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope)))]
pub(crate) async fn delete_by_type(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(mut delete): Json<BatchDeleteRequest>,
) -> Result<Recorded<Data<BatchDeleted>>, ApiError> {
    if caller.scope.is_some() {
        delete.filter = caller.narrow(delete.filter.take());
    }
    let ctx = Context::service(&state.projections);
    let decision = delete::delete_many(&ctx, caller.tenant.id, delete)?;
    Ok(Recorded::decided(decision, Data))
}

#[utoipa::path(post, path = "/v1/memories/query", tag = "memory", security(("api_key" = [])),
    request_body = MemoryQueryRequest,
    responses((status = 200, description = "the memories the filter matches, newest first", body = MemoryPageEnvelope), (status = 400, description = "bad filter or paging (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 429, description = "the key's rate limit, or with `as_of` the tenant's reads as of a position already running or waiting, 2 at most (4290)", headers(("Retry-After" = u64, description = "whole seconds to wait, at least 1")), body = ErrorEnvelope)))]
pub(crate) async fn query_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(q): Json<MemoryQueryRequest>,
) -> Result<Recorded<Data<MemoryPage>>, ApiError> {
    let MemoryQuerying {
        paging,
        memory_type,
        filter,
        include_superseded,
        as_of,
    } = q;
    let filter = caller.narrow(filter);
    let query = MemoryQuery {
        memory_type,
        filter: filter.as_ref(),
        include_superseded,
    };
    page(&state, &caller, paging, query, as_of).await
}
