//! Create, list, read, update and delete memories, one at a time or every memory of a type.

use auditmem_projections::memories::{Extra, MemoryQuery, MemoryView};
use auditmem_projections::{
    vector_to_bytes, AuditDetail, Event, MemoriesDeleted, MemoriesDeletedByType, MemoryCreated,
    MemoryDeleted, MemoryUpdated,
};
use axum::extract::{Path, State};
use axum::Extension;
use uuid::Uuid;

use super::{embed_one, owned, resolve, RequestId};
use crate::api::error::ApiError;
use crate::api::extract::{Json, Query};
use crate::api::gate::{Caller, PendingOps, Recorded};
use crate::api::state::AppState;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{
    BatchDelete, BatchDeleteRequest, BatchDeleted, Changes, DeletedMemory, Memory,
    MemoryCreateRequest, MemoryListQuery, MemoryListing, MemoryPage, MemoryQueryRequest,
    MemoryQuerying, MemoryResolution, MemoryUpdateRequest, NewMemory,
};
use crate::wire::query::Paging;
use crate::wire::time::now_stored;

type MemoryEnvelope = Data<Memory>;
type MemoryPageEnvelope = Data<MemoryPage>;
type MemoryDeletedEnvelope = Data<DeletedMemory>;
type BatchDeletedEnvelope = Data<BatchDeleted>;

/// Memories listed in one audit entry's `memory_results` at most (batch deletes can be large).
const MAX_AUDITED_RESULTS: usize = 1000;

/// An answer of one memory, which its audit entry records in `memory_results`.
fn answered(
    memory: Memory,
    memory_query: Option<Vec<String>>,
    events: Vec<Event>,
) -> Recorded<Data<Memory>> {
    let ops = PendingOps {
        events,
        detail: AuditDetail {
            memory_query,
            memory_results: Some(vec![memory.audited()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Recorded::new(Data(memory), ops)
}

#[utoipa::path(post, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    request_body = MemoryCreateRequest,
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn create_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: RequestId,
    Json(new): Json<MemoryCreateRequest>,
) -> Result<Recorded<Data<Memory>>, ApiError> {
    let vector = embed_one(&state, &caller, &request, &new.content).await?;
    let content = new.content.clone();
    if !new.resolve {
        let (event, memory) = created(&state, &caller, new, &vector, now_stored());
        return Ok(answered(memory, Some(vec![content]), vec![event]));
    }
    let resolution =
        resolve::resolve(&state, &caller, &request, &content, &vector, &new.extra).await?;
    if let Some(dup) = resolution.duplicate_of {
        // Nothing is stored: the answer is the stored memory it duplicates.
        let mut memory = Memory::from(owned(&state, &caller, &dup.to_string())?);
        memory.resolution = Some(MemoryResolution {
            stored: false,
            superseded: Vec::new(),
            duplicate_of: Some(dup),
        });
        return Ok(answered(memory, Some(vec![content]), Vec::new()));
    }
    let at = now_stored();
    let (event, mut memory) = created(&state, &caller, new, &vector, at);
    let mut events = vec![event];
    events.extend(resolve::superseded_events(
        &caller,
        &resolution.supersedes,
        memory.id,
        at,
    ));
    memory.resolution = Some(MemoryResolution {
        stored: true,
        superseded: resolution.supersedes,
        duplicate_of: None,
    });
    Ok(answered(memory, Some(vec![content]), events))
}

/// A new memory's creation event, with its vector, and the memory it answers.
pub(super) fn created(
    state: &AppState,
    caller: &Caller,
    new: NewMemory,
    vector: &[f32],
    at: i64,
) -> (Event, Memory) {
    let NewMemory {
        content,
        memory_type,
        importance,
        extra,
        resolve: _,
    } = new;
    let id = Uuid::now_v7();
    let extra = extra.or_none();
    let event = Event::MemoryCreated(MemoryCreated {
        memory_id: id,
        tenant_id: caller.tenant.id,
        content: content.clone(),
        memory_type,
        importance,
        created_at: at,
        model: state.embed.model_id().to_string(),
        vector: vector_to_bytes(vector),
        extra: extra.clone(),
    });
    let memory = Memory::from(MemoryView {
        id,
        content,
        memory_type,
        importance,
        created_at: at,
        updated_at: at,
        extra: extra.and_then(|x| Extra::from(x).or_none()),
    });
    (event, memory)
}

#[utoipa::path(get, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    params(MemoryListQuery),
    responses((status = 200, description = "newest first", body = MemoryPageEnvelope), (status = 400, description = "bad parameter (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope)))]
pub(crate) async fn list_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<MemoryListQuery>,
) -> Result<Data<MemoryPage>, ApiError> {
    let MemoryListing {
        paging,
        memory_type,
        filter,
    } = q;
    page(
        &state,
        &caller,
        paging,
        MemoryQuery {
            memory_type,
            filter: filter.as_ref(),
            include_superseded: false,
        },
    )
}

/// A page of the caller's memories a query takes, newest first.
fn page(
    state: &AppState,
    caller: &Caller,
    paging: Paging,
    query: MemoryQuery<'_>,
) -> Result<Data<MemoryPage>, ApiError> {
    let (total, items) = state
        .projections
        .memories
        .list(&caller.tenant.id, query, paging.offset(), paging.page_size)
        .map_err(ApiError::internal)?;
    Ok(Data(MemoryPage {
        memories: items.into_iter().map(Memory::from).collect(),
        total,
        page: paging.page,
        page_size: paging.page_size,
    }))
}

#[utoipa::path(get, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<Memory>>, ApiError> {
    let memory = Memory::from(owned(&state, &caller, &id)?);
    Ok(answered(memory, None, Vec::new()))
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
    let m = owned(&state, &caller, &id)?;
    let Changes {
        content,
        importance,
        amend,
    } = update.check()?;
    // Only changed content is embedded again.
    let changed = content.as_ref().filter(|c| **c != m.content).cloned();
    let vector = match &changed {
        Some(c) => Some(embed_one(&state, &caller, &request, c).await?),
        None => None,
    };
    let at = now_stored();
    let event = Event::MemoryUpdated(MemoryUpdated {
        memory_id: m.id,
        tenant_id: caller.tenant.id,
        content: changed.clone(),
        importance,
        updated_at: at,
        model: vector.as_ref().map(|_| state.embed.model_id().to_string()),
        vector: vector.as_deref().map(vector_to_bytes),
        amend: amend.clone(),
    });
    let extra = Extra::amended(m.extra.clone(), amend.as_ref());
    let memory = Memory::from(MemoryView {
        content: changed.unwrap_or_else(|| m.content.clone()),
        importance: importance.unwrap_or(m.importance),
        updated_at: at,
        extra,
        ..m
    });
    Ok(answered(memory, content.map(|c| vec![c]), vec![event]))
}

#[utoipa::path(delete, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "deleted", body = MemoryDeletedEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn delete_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<DeletedMemory>>, ApiError> {
    let m = owned(&state, &caller, &id)?;
    let id = m.id;
    let event = Event::MemoryDeleted(MemoryDeleted {
        memory_id: id,
        tenant_id: caller.tenant.id,
        deleted_at: now_stored(),
    });
    let ops = PendingOps {
        events: vec![event],
        detail: AuditDetail {
            memory_results: Some(vec![Memory::from(m).audited()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Recorded::new(
        Data(DeletedMemory { id, deleted: true }),
        ops,
    ))
}

#[utoipa::path(delete, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    request_body = BatchDeleteRequest,
    responses((status = 200, description = "how many were deleted", body = BatchDeletedEnvelope), (status = 400, description = "empty body, bad memory_type or filter (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope)))]
pub(crate) async fn delete_by_type(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(delete): Json<BatchDeleteRequest>,
) -> Result<Recorded<Data<BatchDeleted>>, ApiError> {
    let BatchDelete {
        memory_type,
        filter,
    } = delete;
    let memories = &state.projections.memories;
    let ids = match (&filter, memory_type) {
        (None, Some(t)) => memories.ids_of_type(&caller.tenant.id, t),
        _ => memories.ids_matching(
            &caller.tenant.id,
            &MemoryQuery {
                memory_type,
                filter: filter.as_ref(),
                include_superseded: true,
            },
        ),
    };
    let mut audited = Vec::new();
    for id in ids.iter().take(MAX_AUDITED_RESULTS) {
        let m = memories
            .get(&caller.tenant.id, id)
            .map_err(ApiError::internal)?;
        audited.extend(m.map(|m| Memory::from(m).audited()));
    }
    let deleted = ids.len();
    let mut events = Vec::new();
    if deleted > 0 {
        let deleted_at = now_stored();
        events.push(match (filter, memory_type) {
            // A delete by type alone is the event it always was.
            (None, Some(memory_type)) => Event::MemoriesDeletedByType(MemoriesDeletedByType {
                tenant_id: caller.tenant.id,
                memory_type,
                memory_ids: ids,
                deleted_at,
            }),
            _ => Event::MemoriesDeleted(MemoriesDeleted {
                tenant_id: caller.tenant.id,
                memory_ids: ids,
                deleted_at,
            }),
        });
    }
    let ops = PendingOps {
        events,
        detail: AuditDetail {
            memory_results: Some(audited),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Recorded::new(
        Data(BatchDeleted {
            memory_type,
            deleted,
        }),
        ops,
    ))
}

#[utoipa::path(post, path = "/v1/memories/query", tag = "memory", security(("api_key" = [])),
    request_body = MemoryQueryRequest,
    responses((status = 200, description = "the memories the filter matches, newest first", body = MemoryPageEnvelope), (status = 400, description = "bad filter or paging (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope)))]
pub(crate) async fn query_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(q): Json<MemoryQueryRequest>,
) -> Result<Data<MemoryPage>, ApiError> {
    let MemoryQuerying {
        paging,
        memory_type,
        filter,
        include_superseded,
    } = q;
    page(
        &state,
        &caller,
        paging,
        MemoryQuery {
            memory_type,
            filter: filter.as_ref(),
            include_superseded,
        },
    )
}
