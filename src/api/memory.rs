//! The memory store: CRUD, batch delete, semantic search, extraction, history.
//!
//! Every mutation is an event appended with the request's audit entry; every read comes from
//! the memories projection. Vectors are computed here (the embedder runs on its own worker)
//! and stored in the events, so replay never calls a model.

use std::collections::HashMap;

use auditmem_projections::audit_view::format_time;
use auditmem_projections::memories::MemoryView;
use auditmem_projections::{
    vector_to_bytes, CreditsConsumed, Event, MemoriesDeletedByType, MemoryCreated, MemoryDeleted,
    MemoryType, MemoryUpdated,
};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::envelope::{parse_json_body, Data};
use super::error::ApiError;
use super::gate::{Caller, Pending, PendingOps};
#[allow(unused_imports)]
use super::openapi::*;
use crate::extract::{ChatMessage, ExtractInput};
use crate::log::appender::Rejection;
use crate::registry::ErrorCode;
use crate::state::AppState;

/// The message roles extraction accepts (the OpenAPI document's `ChatRole` lists the same).
pub const CHAT_ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

pub const MAX_CONTENT_CHARS: usize = 10_000;
pub const DEFAULT_PAGE_SIZE: usize = 20;
pub const MAX_PAGE_SIZE: usize = 100;
pub const DEFAULT_TOP_K: usize = 5;
pub const MAX_TOP_K: usize = 100;
/// Memories listed in one audit entry's `memory_results` at most (batch deletes can be large).
const MAX_AUDITED_RESULTS: usize = 1000;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/memories",
            post(create_memory)
                .get(list_memories)
                .delete(delete_by_type),
        )
        .route("/v1/memories/search", post(search_memories))
        .route("/v1/memories/extract", post(extract_memories))
        .route(
            "/v1/memories/{id}",
            get(get_memory).patch(update_memory).delete(delete_memory),
        )
        .route("/v1/memories/{id}/history", get(memory_history))
}

pub fn memory_json(m: &MemoryView) -> Value {
    json!({
        "id": m.id.to_string(),
        "content": m.content,
        "memory_type": m.memory_type,
        "importance": m.importance,
        "created_at": format_time(m.created_at),
        "updated_at": format_time(m.updated_at),
    })
}

fn now() -> i64 {
    auditmem_projections::audit_view::millis_floor(chrono::Utc::now().timestamp_micros())
}

/// A JSON object body; an empty body is `{}` only where the caller allows it.
fn object_body(headers: &HeaderMap, body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; a JSON object is required",
        ));
    }
    match parse_json_body::<Value>(headers, body)? {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad_request(
            "the request body must be a JSON object",
        )),
    }
}

fn reject_unknown(body: &Map<String, Value>, allowed: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::bad_request(format!(
            "unknown field '{k}' (allowed: {})",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

fn content_field(v: Option<&Value>) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Err(ApiError::bad_request("content is required")),
        Some(Value::String(s)) => {
            let t = s.trim();
            let n = t.chars().count();
            if n == 0 {
                Err(ApiError::bad_request("content must not be empty"))
            } else if n > MAX_CONTENT_CHARS {
                Err(ApiError::bad_request(format!(
                    "content is {n} characters; at most {MAX_CONTENT_CHARS} are allowed"
                )))
            } else {
                Ok(t.to_string())
            }
        }
        Some(_) => Err(ApiError::bad_request("content must be a string")),
    }
}

fn type_field(v: Option<&Value>, required: bool) -> Result<Option<MemoryType>, ApiError> {
    match v {
        None | Some(Value::Null) if required => Err(ApiError::bad_request(
            "memory_type is required (rule, fact or context)",
        )),
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|e: String| ApiError::bad_request(e)),
        Some(_) => Err(ApiError::bad_request(
            "memory_type must be one of rule, fact, context",
        )),
    }
}

fn importance_field(v: Option<&Value>) -> Result<Option<f64>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::bad_request(
                "importance must be a number from 0.0 to 1.0",
            )),
        },
        Some(_) => Err(ApiError::bad_request(
            "importance must be a number from 0.0 to 1.0",
        )),
    }
}

async fn embed_one(state: &AppState, text: &str) -> Result<Vec<f32>, ApiError> {
    state.embed.embed_one(text.to_string()).await.map_err(|e| {
        tracing::error!(error = %e, "embedding failed");
        ApiError::new(
            ErrorCode::ProviderFailure,
            "the embedding provider failed; nothing was stored",
        )
    })
}

fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id.trim()).map_err(|_| ApiError::not_found("memory not found"))
}

fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<MemoryView, ApiError> {
    let id = parse_id(id)?;
    state
        .projections
        .memories
        .get(&caller.tenant.id, &id)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::not_found("memory not found"))
}

/// The checked fields of a create body: content, type, importance. This and the other
/// `*_fields` / `*_params` functions hold everything a handler checks before it touches the
/// state, so the fuzz targets (`crate::fuzzing`) run exactly the handlers' checks.
pub(crate) fn create_fields(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(String, MemoryType, f64), ApiError> {
    let body = object_body(headers, body)?;
    reject_unknown(&body, &["content", "memory_type", "importance"])?;
    let content = content_field(body.get("content"))?;
    let memory_type = type_field(body.get("memory_type"), true)?.unwrap_or(MemoryType::Fact);
    let importance = importance_field(body.get("importance"))?.unwrap_or(0.5);
    Ok((content, memory_type, importance))
}

#[utoipa::path(post, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    request_body = MemoryCreateRequest,
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn create_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (content, memory_type, importance) = create_fields(&headers, &body)?;
    let vector = embed_one(&state, &content).await?;
    let at = now();
    let view = MemoryView {
        id: Uuid::now_v7(),
        content: content.clone(),
        memory_type,
        importance,
        created_at: at,
        updated_at: at,
    };
    let event = Event::MemoryCreated(MemoryCreated {
        memory_id: view.id,
        tenant_id: caller.tenant.id,
        content: content.clone(),
        memory_type,
        importance,
        created_at: at,
        model: state.embed.model_id().to_string(),
        vector: vector_to_bytes(&vector),
    });
    let data = memory_json(&view);
    let ops = PendingOps {
        events: vec![event],
        detail: auditmem_projections::AuditDetail {
            memory_query: Some(vec![content]),
            memory_results: Some(vec![data.clone()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Pending::attach(Data(data), ops))
}

fn page_params(
    q: &HashMap<String, String>,
    default_size: usize,
) -> Result<(usize, usize), ApiError> {
    let parse = |field: &str, default: usize| -> Result<usize, ApiError> {
        match q.get(field) {
            None => Ok(default),
            Some(s) => match s.trim().parse::<i64>() {
                Ok(n) if n >= 1 => Ok(n as usize),
                _ => Err(ApiError::bad_request(format!(
                    "{field} must be an integer of at least 1, got '{s}'"
                ))),
            },
        }
    };
    Ok((
        parse("page", 1)?,
        parse("page_size", default_size)?.min(MAX_PAGE_SIZE),
    ))
}

/// The checked query of a list: page, page size (clamped), type filter.
pub(crate) fn list_params(
    q: &HashMap<String, String>,
) -> Result<(usize, usize, Option<MemoryType>), ApiError> {
    let (page, page_size) = page_params(q, DEFAULT_PAGE_SIZE)?;
    let memory_type = match q
        .get("memory_type")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
    {
        None => None,
        Some(s) => Some(s.parse::<MemoryType>().map_err(ApiError::bad_request)?),
    };
    Ok((page, page_size, memory_type))
}

#[utoipa::path(get, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    params(("memory_type" = Option<MemoryTypeName>, Query, description = "rule, fact or context"),
           ("page" = Option<u64>, Query, minimum = 1, description = "default 1"),
           ("page_size" = Option<u64>, Query, minimum = 1, description = "default 20, above 100 clamped")),
    responses((status = 200, description = "newest first", body = MemoryPageEnvelope), (status = 400, description = "bad parameter (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope)))]
pub(crate) async fn list_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Data<Value>, ApiError> {
    let (page, page_size, memory_type) = list_params(&q)?;
    let (total, items) = state
        .projections
        .memories
        .list(
            &caller.tenant.id,
            memory_type,
            (page - 1).saturating_mul(page_size),
            page_size,
        )
        .map_err(ApiError::internal)?;
    Ok(Data(json!({
        "memories": items.iter().map(memory_json).collect::<Vec<_>>(),
        "total": total,
        "page": page,
        "page_size": page_size,
    })))
}

#[utoipa::path(get, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let m = owned(&state, &caller, &id)?;
    let data = memory_json(&m);
    let ops = PendingOps {
        detail: auditmem_projections::AuditDetail {
            memory_results: Some(vec![data.clone()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Pending::attach(Data(data), ops))
}

/// An update body's shape: an object of known fields, not empty. Checked before the memory is
/// looked up (a malformed body is 400 even for a missing id); its fields after.
pub(crate) fn update_body(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Map<String, Value>, ApiError> {
    let body = object_body(headers, body)?;
    reject_unknown(&body, &["content", "importance"])?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "give content and/or importance to update",
        ));
    }
    Ok(body)
}

/// The checked fields of an update body: new content, new importance.
pub(crate) fn update_fields(
    body: &Map<String, Value>,
) -> Result<(Option<String>, Option<f64>), ApiError> {
    let content = match body.get("content") {
        None => None,
        Some(v) => Some(content_field(Some(v))?),
    };
    let importance = match body.get("importance") {
        None => None,
        Some(Value::Null) => {
            return Err(ApiError::bad_request(
                "importance must be a number from 0.0 to 1.0",
            ))
        }
        Some(v) => importance_field(Some(v))?,
    };
    Ok((content, importance))
}

#[utoipa::path(patch, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")), request_body = MemoryUpdateRequest,
    responses((status = 200, description = "the memory", body = MemoryEnvelope), (status = 400, description = "empty body or another field (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn update_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body = update_body(&headers, &body)?;
    let m = owned(&state, &caller, &id)?;
    let (content, importance) = update_fields(&body)?;
    // Only changed content is embedded again.
    let changed = content.as_ref().filter(|c| **c != m.content).cloned();
    let vector = match &changed {
        Some(c) => Some(embed_one(&state, c).await?),
        None => None,
    };
    let at = now();
    let event = Event::MemoryUpdated(MemoryUpdated {
        memory_id: m.id,
        tenant_id: caller.tenant.id,
        content: changed.clone(),
        importance,
        updated_at: at,
        model: vector.as_ref().map(|_| state.embed.model_id().to_string()),
        vector: vector.as_deref().map(vector_to_bytes),
    });
    let view = MemoryView {
        content: changed.unwrap_or(m.content.clone()),
        importance: importance.unwrap_or(m.importance),
        updated_at: at,
        ..m
    };
    let data = memory_json(&view);
    let ops = PendingOps {
        events: vec![event],
        detail: auditmem_projections::AuditDetail {
            memory_query: content.map(|c| vec![c]),
            memory_results: Some(vec![data.clone()]),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Pending::attach(Data(data), ops))
}

#[utoipa::path(delete, path = "/v1/memories/{id}", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "deleted", body = MemoryDeletedEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn delete_memory(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let m = owned(&state, &caller, &id)?;
    let event = Event::MemoryDeleted(MemoryDeleted {
        memory_id: m.id,
        tenant_id: caller.tenant.id,
        deleted_at: now(),
    });
    let ops = PendingOps {
        events: vec![event],
        detail: auditmem_projections::AuditDetail {
            memory_results: Some(vec![memory_json(&m)]),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Pending::attach(
        Data(json!({"id": m.id.to_string(), "deleted": true})),
        ops,
    ))
}

/// The type a batch delete names.
pub(crate) fn delete_by_type_field(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<MemoryType, ApiError> {
    // Never "delete everything": an empty body or no memory_type is refused.
    let body = object_body(headers, body)?;
    reject_unknown(&body, &["memory_type"])?;
    Ok(type_field(body.get("memory_type"), true)?.unwrap_or(MemoryType::Fact))
}

#[utoipa::path(delete, path = "/v1/memories", tag = "memory", security(("api_key" = [])),
    request_body = BatchDeleteRequest,
    responses((status = 200, description = "how many were deleted", body = BatchDeletedEnvelope), (status = 400, description = "empty body or bad memory_type (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope)))]
pub(crate) async fn delete_by_type(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let memory_type = delete_by_type_field(&headers, &body)?;
    let ids = state
        .projections
        .memories
        .ids_of_type(&caller.tenant.id, memory_type);
    let mut audited: Vec<Value> = Vec::new();
    for id in ids.iter().take(MAX_AUDITED_RESULTS) {
        let m = state
            .projections
            .memories
            .get(&caller.tenant.id, id)
            .map_err(ApiError::internal)?;
        audited.extend(m.as_ref().map(memory_json));
    }
    let deleted = ids.len();
    let mut events = Vec::new();
    if deleted > 0 {
        events.push(Event::MemoriesDeletedByType(MemoriesDeletedByType {
            tenant_id: caller.tenant.id,
            memory_type,
            memory_ids: ids,
            deleted_at: now(),
        }));
    }
    let ops = PendingOps {
        events,
        detail: auditmem_projections::AuditDetail {
            memory_results: Some(audited),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Pending::attach(
        Data(json!({"memory_type": memory_type, "deleted": deleted})),
        ops,
    ))
}

/// The checked fields of a search body.
#[derive(Debug)]
pub(crate) struct SearchParams {
    pub query: String,
    pub top_k: usize,
    pub min_similarity: f32,
    pub memory_type: Option<MemoryType>,
}

pub(crate) fn search_params(headers: &HeaderMap, body: &[u8]) -> Result<SearchParams, ApiError> {
    let body = object_body(headers, body)?;
    reject_unknown(&body, &["query", "top_k", "min_similarity", "memory_type"])?;
    let query = match body.get("query") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        Some(Value::String(_)) => return Err(ApiError::bad_request("query must not be empty")),
        None | Some(Value::Null) => return Err(ApiError::bad_request("query is required")),
        Some(_) => return Err(ApiError::bad_request("query must be a string")),
    };
    if query.chars().count() > MAX_CONTENT_CHARS {
        return Err(ApiError::bad_request(format!(
            "query is longer than {MAX_CONTENT_CHARS} characters"
        )));
    }
    let top_k = match body.get("top_k") {
        None | Some(Value::Null) => DEFAULT_TOP_K,
        // The interface calls top_k a number: a whole one written as 5.0 is 5.
        Some(v) => match v.as_number().and_then(super::whole_number) {
            Some(k) if (1..=MAX_TOP_K as i128).contains(&k) => k as usize,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "top_k must be an integer from 1 to {MAX_TOP_K}"
                )))
            }
        },
    };
    let min_similarity = match body.get("min_similarity") {
        None | Some(Value::Null) => score_floor(0.0),
        Some(v) => match v.as_f64() {
            Some(x) if (-1.0..=1.0).contains(&x) => score_floor(x),
            _ => {
                return Err(ApiError::bad_request(
                    "min_similarity must be a number from -1.0 to 1.0",
                ))
            }
        },
    };
    let memory_type = type_field(body.get("memory_type"), false)?;
    Ok(SearchParams {
        query,
        top_k,
        min_similarity,
        memory_type,
    })
}

#[utoipa::path(post, path = "/v1/memories/search", tag = "memory", security(("api_key" = [])),
    request_body = SearchRequest,
    responses((status = 200, description = "ranked by 0.85 * score + 0.15 * importance", body = SearchEnvelope), (status = 400, description = "invalid field (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "embedding provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn search_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let SearchParams {
        query,
        top_k,
        min_similarity,
        memory_type,
    } = search_params(&headers, &body)?;
    let vector = embed_one(&state, &query).await?;
    let hits = state
        .projections
        .memories
        .search(
            &caller.tenant.id,
            &vector,
            memory_type,
            min_similarity,
            top_k,
        )
        .map_err(ApiError::internal)?;
    let results: Vec<Value> = hits
        .iter()
        .map(|(m, h)| {
            json!({"id": m.id.to_string(), "content": m.content, "memory_type": m.memory_type, "importance": m.importance, "score": shown_score(h.score)})
        })
        .collect();
    let audited: Vec<Value> = hits
        .iter()
        .map(|(m, h)| {
            json!({"id": m.id.to_string(), "content": m.content, "memory_type": m.memory_type, "importance": m.importance,
                   "similarity": shown_score(h.score), "final_score": shown_score(h.final_score), "source": "semantic"})
        })
        .collect();
    let ops = PendingOps {
        detail: auditmem_projections::AuditDetail {
            memory_query: Some(vec![query]),
            memory_results: Some(audited),
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(Pending::attach(Data(json!({"results": results})), ops))
}

/// What an extraction costs: a base per call plus a rate per started 1,000 input characters.
pub fn extraction_cost(state: &AppState, input_chars: usize) -> (f64, f64) {
    let s = &state.memory;
    let credits = s.credits_per_call + s.credits_per_1k_chars * input_chars.div_ceil(1000) as f64;
    (credits, ((credits * s.usd_per_credit) * 1e6).round() / 1e6)
}

/// The checked fields of an extraction body: the input as the extractor takes it, as it is
/// audited, and as text (what is measured and charged).
pub(crate) struct ExtractBody {
    pub deduplicate: bool,
    pub input: ExtractInput,
    pub input_value: Value,
    pub input_text: String,
}

/// A similarity as the API shows it: six decimals.
fn shown_score(s: f32) -> f64 {
    ((s as f64) * 1e6).round() / 1e6
}

/// The lowest similarity whose shown value is at least `min`: the scan's threshold, so that
/// search keeps exactly the results whose shown `score` meets `min_similarity` (a score given
/// back as the threshold keeps its result). The shown value rises with the similarity, so the
/// threshold is found a few f32 steps from `min - 0.5e-6`.
fn score_floor(min: f64) -> f32 {
    let mut t = (min - 0.5e-6) as f32;
    while shown_score(t) < min {
        t = next_f32(t, true);
    }
    while shown_score(next_f32(t, false)) >= min {
        t = next_f32(t, false);
    }
    t
}

/// The adjacent f32 above (`up`) or below a finite `t` (`f32::next_up` is newer than the MSRV):
/// f32s are ordered by their bits' magnitude, so a step away from zero adds one to the bits.
fn next_f32(t: f32, up: bool) -> f32 {
    if t == 0.0 {
        let least = f32::from_bits(1);
        return if up { least } else { -least };
    }
    let bits = t.to_bits();
    f32::from_bits(if (t > 0.0) == up { bits + 1 } else { bits - 1 })
}

pub(crate) fn extract_request(headers: &HeaderMap, body: &[u8]) -> Result<ExtractBody, ApiError> {
    let body = object_body(headers, body)?;
    reject_unknown(&body, &["messages", "text", "deduplicate"])?;
    let deduplicate = match body.get("deduplicate") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("deduplicate must be a boolean")),
    };
    // null is "not given", as for every optional field.
    let given = |k: &str| body.get(k).filter(|v| !v.is_null());
    let (input, input_value, input_text) = match (given("messages"), given("text")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give exactly one of messages or text, not both",
            ))
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "give exactly one of messages or text",
            ))
        }
        (Some(m), None) => {
            let msgs: Vec<ChatMessage> = serde_json::from_value(m.clone()).map_err(|e| {
                ApiError::bad_request(format!(
                    "messages must be a list of {{role, content}} strings: {e}"
                ))
            })?;
            if msgs.is_empty() {
                return Err(ApiError::bad_request("messages must not be empty"));
            }
            if let Some((i, bad)) = msgs
                .iter()
                .enumerate()
                .find(|(_, m)| !CHAT_ROLES.contains(&m.role.as_str()))
            {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].role must be system, user, assistant or tool, got '{}'",
                    bad.role
                )));
            }
            let text = msgs
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            (ExtractInput::Messages(msgs), m.clone(), text)
        }
        // The audit detail's input_content is an object or an array (the interface), so the
        // text is recorded as the object it came in.
        (None, Some(Value::String(t))) if !t.trim().is_empty() => (
            ExtractInput::Text(t.clone()),
            json!({ "text": t }),
            t.clone(),
        ),
        (None, Some(_)) => return Err(ApiError::bad_request("text must be a non-empty string")),
    };
    Ok(ExtractBody {
        deduplicate,
        input,
        input_value,
        input_text,
    })
}

#[utoipa::path(post, path = "/v1/memories/extract", tag = "memory", security(("api_key" = [])),
    request_body = ExtractRequest,
    responses((status = 200, description = "created and skipped memories", body = ExtractEnvelope), (status = 400, description = "invalid input (4000)", body = ErrorEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 402, description = "insufficient credits (4020)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 502, description = "provider failed (5020)", body = ErrorEnvelope)))]
pub(crate) async fn extract_memories(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let ExtractBody {
        deduplicate,
        input,
        input_value,
        input_text,
    } = extract_request(&headers, &body)?;
    let input_chars = input_text.chars().count();
    if input_chars > state.memory.max_extract_chars {
        return Err(ApiError::bad_request(format!(
            "the input is {input_chars} characters; at most {} are allowed",
            state.memory.max_extract_chars
        )));
    }
    let (credits, usd) = extraction_cost(&state, input_chars);
    if caller.tenant.credits < credits {
        return Err(insufficient(credits, caller.tenant.credits));
    }
    let extractor = state.extractor.clone();
    let candidates = tokio::task::spawn_blocking(move || extractor.extract(&input))
        .await
        .map_err(|e| ApiError::internal(format!("extractor crashed: {e}")))?
        .map_err(|e| {
            tracing::warn!(error = %e, "extraction provider failed");
            ApiError::new(
                ErrorCode::ProviderFailure,
                format!("the extraction provider failed; nothing was stored: {e}"),
            )
        })?;
    let vectors = if candidates.is_empty() {
        Vec::new()
    } else {
        state
            .embed
            .embed(candidates.iter().map(|c| c.content.clone()).collect())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "embedding failed");
                ApiError::new(
                    ErrorCode::ProviderFailure,
                    "the embedding provider failed; nothing was stored",
                )
            })?
    };
    let at = now();
    let mut events = Vec::new();
    let mut created: Vec<Value> = Vec::new();
    let mut skipped: Vec<Value> = Vec::new();
    let mut kept: Vec<(Uuid, MemoryType, &Vec<f32>)> = Vec::new();
    for (c, v) in candidates.iter().zip(&vectors) {
        if deduplicate {
            let threshold = state.memory.dedup_threshold;
            let existing = state
                .projections
                .memories
                .nearest(&caller.tenant.id, v, Some(c.memory_type))
                .map_err(ApiError::internal)?
                .filter(|(_, s)| *s >= threshold);
            let within = kept
                .iter()
                .filter(|(_, t, _)| *t == c.memory_type)
                .map(|(id, _, kv)| (*id, auditmem_projections::vector_table::dot(kv, v)))
                .filter(|(_, s)| *s >= threshold)
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((dup, _)) = existing.or(within) {
                skipped.push(json!({"content": c.content, "memory_type": c.memory_type, "reason": "duplicate", "duplicate_of": dup.to_string()}));
                continue;
            }
        }
        let id = Uuid::now_v7();
        let importance = (c.importance as f64 * 100.0).round() / 100.0;
        let view = MemoryView {
            id,
            content: c.content.clone(),
            memory_type: c.memory_type,
            importance,
            created_at: at,
            updated_at: at,
        };
        created.push(memory_json(&view));
        events.push(Event::MemoryCreated(MemoryCreated {
            memory_id: id,
            tenant_id: caller.tenant.id,
            content: c.content.clone(),
            memory_type: c.memory_type,
            importance,
            created_at: at,
            model: state.embed.model_id().to_string(),
            vector: vector_to_bytes(v),
        }));
        kept.push((id, c.memory_type, v));
    }
    events.push(Event::CreditsConsumed(CreditsConsumed {
        tenant_id: caller.tenant.id,
        credits,
        usd,
        at,
    }));
    let tenant_id = caller.tenant.id;
    // Credits are checked again by the appender, against every charge already applied.
    let check =
        Box::new(
            move |p: &auditmem_projections::Projections| match p.tenants.tenant(&tenant_id) {
                Ok(Some(t)) if t.credits >= credits => Ok(()),
                Ok(Some(t)) => {
                    let e = insufficient(credits, t.credits);
                    Err(Rejection {
                        code: e.code,
                        message: e.message,
                    })
                }
                Ok(None) => Err(Rejection {
                    code: ErrorCode::Unauthorized,
                    message: "unknown tenant".into(),
                }),
                Err(e) => Err(Rejection {
                    code: ErrorCode::Internal,
                    message: format!("reading credits: {e}"),
                }),
            },
        );
    let data = json!({"memories": created, "skipped": skipped, "credits_consumed": credits});
    let ops = PendingOps {
        events,
        check: Some(check),
        detail: auditmem_projections::AuditDetail {
            input_content: Some(input_value),
            output_content: Some(json!({"memories": created, "skipped": skipped})),
            memory_query: Some(vec![input_text]),
            memory_results: Some(created.clone()),
            ..Default::default()
        },
        credits,
        usd,
        ..Default::default()
    };
    Ok(Pending::attach(Data(data), ops))
}

fn insufficient(needed: f64, have: f64) -> ApiError {
    ApiError::new(
        ErrorCode::InsufficientCredits,
        format!("extraction needs {needed} credits; the tenant has {have}"),
    )
}

#[utoipa::path(get, path = "/v1/memories/{id}/history", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "every version, from the log", body = MemoryHistoryEnvelope), (status = 401, description = "missing, unknown or revoked key (4010)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn memory_history(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Data<Value>, ApiError> {
    let id = parse_id(&id)?;
    let stored = state
        .projections
        .memories
        .stored(&id)?
        .filter(|m| m.tenant_id == caller.tenant.id)
        .ok_or_else(|| ApiError::not_found("memory not found"))?;
    let mut versions = Vec::new();
    for seq in &stored.versions {
        let Some((record, event)) = state.log.event(*seq)? else {
            continue;
        };
        let (change, body) = match &event {
            Event::MemoryCreated(e) => (
                "created",
                json!({"content": e.content, "memory_type": e.memory_type, "importance": e.importance}),
            ),
            Event::MemoryUpdated(e) => (
                "updated",
                json!({"content": e.content, "importance": e.importance}),
            ),
            Event::MemoryDeleted(_) => ("deleted", json!({})),
            Event::MemoriesDeletedByType(e) => {
                ("deleted", json!({"batch_memory_type": e.memory_type}))
            }
            _ => continue,
        };
        // The audit entry is the last event of the same atomic submission, right after.
        let mut audit_id = Value::Null;
        let mut at = *seq + 1;
        while let Some((_, e)) = state.log.event(at)? {
            if let Event::AuditRecorded(a) = e {
                if a.tenant_id == caller.tenant.id {
                    audit_id = Value::String(a.entry.id.to_string());
                }
                break;
            }
            at += 1;
        }
        let mut v = body;
        if let Value::Object(m) = &mut v {
            m.insert("change".into(), json!(change));
            m.insert("seq".into(), json!(seq));
            m.insert("audit_id".into(), audit_id);
            m.insert("at".into(), json!(format_time(record.ts_micros)));
        }
        versions.push(v);
    }
    Ok(Data(
        json!({"id": id.to_string(), "deleted": stored.deleted_at.is_some(), "versions": versions}),
    ))
}

#[cfg(test)]
mod tests {
    use super::{next_f32, score_floor, shown_score};

    #[test]
    fn the_score_floor_is_the_lowest_similarity_shown_at_the_threshold() {
        for min in [-1.0, -0.25, 0.0, 1e-6, 0.123_456, 0.8, 0.999_999, 1.0] {
            let t = score_floor(min);
            assert!(shown_score(t) >= min, "{min}: {t} shows {}", shown_score(t));
            assert!(
                shown_score(next_f32(t, false)) < min,
                "{min}: {} shows {}",
                next_f32(t, false),
                shown_score(next_f32(t, false))
            );
        }
        for t in [-1.0f32, -0.3, -1e-40, 0.0, 1e-40, 0.3, 1.0] {
            assert!(next_f32(t, true) > t && next_f32(t, false) < t, "{t}");
            assert_eq!(next_f32(next_f32(t, true), false), t, "{t}");
        }
        // A similarity shown as 0.8 passes a threshold of 0.8 though it is below it unrounded.
        assert!(0.799_999_6_f32 >= score_floor(0.8));
        assert!(0.799_999_4_f32 < score_floor(0.8));
    }
}
