//! The handlers: each mem0 call as the `/v1` call (or calls) it is, and its answer in mem0's
//! shape ([`super::shape`]). The `/v1` call's refusal is the mem0 call's, with its status,
//! code and message.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, Request, State};
use axum::http::Method;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Map, Value};

use super::shape::{self, SCOPES};
use super::{body_of, object, Answered, Call, Mem0, Refused};
use crate::api::inprocess::segment;

/// mem0's page size when a list names none (its `get_all` default), our largest page.
const PAGE_SIZE: u64 = 100;

/// mem0's `top_k` when a search names none.
const TOP_K: u64 = 10;

/// The most pages of 100 memories `users` reads: past this it refuses rather than answer a
/// part of the tenant's users.
const USERS_MAX_PAGES: u64 = 100;

fn json(v: Value) -> Answered {
    Ok(Json(v).into_response())
}

/// The body's fields outside `taken` that are given (not null): the first is refused.
/// The `memories` list of a `/v1` answer (empty when it has none).
fn memories_of(data: &Value) -> Vec<Value> {
    data.get("memories")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn only(body: &Map<String, Value>, taken: &[&str], call: &str) -> Result<(), Refused> {
    match body
        .iter()
        .find(|(k, v)| !v.is_null() && !taken.contains(&k.as_str()))
    {
        Some((k, _)) => Err(Refused::unsupported(&format!("the {call} field {k}"))),
        None => Ok(()),
    }
}

/// `POST /v3/memories/add/`: `infer` (the default) extracts with contradiction resolution
/// (`POST /v1/memories/extract`, `resolve: true`); `infer: false` stores each message but the
/// system's as one fact (`POST /v1/memories/batch`).
pub(super) async fn add(State(m): State<Mem0>, c: Call, req: Request) -> Answered {
    let body = object(&body_of(&m, req).await?)?;
    only(
        &body,
        &[
            "messages",
            "user_id",
            "agent_id",
            "run_id",
            "filters",
            "metadata",
            "infer",
            "async_mode",
            "version",
            "output_format",
            "timestamp",
        ],
        "add",
    )?;
    let mut scope = shape::add_scope(&body)?;
    // mem0's `timestamp` (Unix seconds: when what is remembered happened) is our
    // `occurred_at`, on what extraction finds and on each message stored as given.
    if let Some(at) = shape::occurred_at(body.get("timestamp"))? {
        scope.insert("occurred_at".into(), Value::String(at));
    }
    let Some(Value::Array(messages)) = body.get("messages") else {
        return Err(Refused::bad_request("messages must be a list of messages"));
    };
    let metadata = body.get("metadata").filter(|v| !v.is_null()).cloned();
    let infer = match body.get("infer") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Refused::bad_request("infer must be true or false")),
    };
    if infer {
        let mut req = scope;
        req.insert("messages".into(), Value::Array(messages.clone()));
        if let Some(md) = metadata {
            req.insert("metadata".into(), md);
        }
        req.insert("resolve".into(), Value::Bool(true));
        let path = "/v1/memories/extract";
        let data = m
            .v1(&c, "add", Method::POST, path, Some(Value::Object(req)))
            .await?;
        let written = memories_of(&data);
        // The superseded memories' texts, for their DELETE events (they stay readable by id).
        let mut ids: Vec<String> = Vec::new();
        for w in &written {
            if let Some(Value::Array(old)) = w.pointer("/resolution/superseded") {
                ids.extend(old.iter().filter_map(Value::as_str).map(str::to_string));
            }
        }
        let mut superseded = Vec::new();
        for id in ids {
            let path = format!("/v1/memories/{}", segment(&id));
            let old = m.v1(&c, "add", Method::GET, &path, None).await?;
            let text = old.get("content").cloned().unwrap_or(Value::Null);
            superseded.push((id, text));
        }
        return json(shape::add_results(&written, &superseded));
    }
    let mut items = Vec::new();
    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str);
        let content = msg.get("content");
        match (role, content) {
            (Some("system"), _) | (_, None | Some(Value::Null)) => continue,
            (Some(_), Some(Value::String(text))) => {
                let mut item = scope.clone();
                item.insert("content".into(), Value::String(text.clone()));
                item.insert("memory_type".into(), json!("fact"));
                if let Some(md) = &metadata {
                    item.insert("metadata".into(), md.clone());
                }
                items.push(Value::Object(item));
            }
            _ => {
                return Err(Refused::bad_request(format!(
                    "messages[{i}] must have a string role and a string content"
                )))
            }
        }
    }
    if items.is_empty() {
        return json(json!({ "results": [] }));
    }
    let body = json!({ "memories": items });
    let data = m
        .v1(&c, "add", Method::POST, "/v1/memories/batch", Some(body))
        .await?;
    let written = memories_of(&data);
    json(shape::add_results(&written, &[]))
}

/// Our filter for a mem0 list or search: its `filters` translated, AND-ed with `created_at`
/// bounds when `start_date` or `end_date` is given.
fn filter_of(body: &Map<String, Value>) -> Result<Option<Value>, Refused> {
    let mut parts = Vec::new();
    if let Some(f) = body.get("filters").filter(|v| !v.is_null()) {
        parts.push(shape::filters(f, "filters")?);
    }
    for (field, op) in [("start_date", "gte"), ("end_date", "lte")] {
        if let Some(t) = body.get(field).filter(|v| !v.is_null()) {
            parts.push(json!({ "created_at": { op: t } }));
        }
    }
    Ok(match parts.len() {
        0 => None,
        1 => parts.pop(),
        _ => Some(json!({ "AND": parts })),
    })
}

/// `POST /v3/memories/` (`get_all`): `POST /v1/memories/query`, newest first, paged by the
/// query's `page` and `page_size`.
pub(super) async fn get_all(
    State(m): State<Mem0>,
    c: Call,
    Query(q): Query<HashMap<String, String>>,
    req: Request,
) -> Answered {
    let body = object(&body_of(&m, req).await?)?;
    only(
        &body,
        &[
            "filters",
            "start_date",
            "end_date",
            "show_expired",
            "latest_only",
        ],
        "get_all",
    )?;
    let number = |name: &str, default: u64| -> Result<u64, Refused> {
        match q.get(name) {
            None => Ok(default),
            Some(s) => s.parse().map_err(|_| {
                Refused::bad_request(format!("{name} must be a whole number of at least 1"))
            }),
        }
    };
    let page = number("page", 1)?;
    let page_size = number("page_size", PAGE_SIZE)?;
    let mut query = Map::new();
    if let Some(f) = filter_of(&body)? {
        query.insert("filters".into(), f);
    }
    query.insert("page".into(), json!(page));
    query.insert("page_size".into(), json!(page_size));
    let data = m
        .v1(
            &c,
            "get_all",
            Method::POST,
            "/v1/memories/query",
            Some(Value::Object(query)),
        )
        .await?;
    let total = data.get("total").and_then(Value::as_u64).unwrap_or(0);
    let size = data
        .get("page_size")
        .and_then(Value::as_u64)
        .unwrap_or(page_size);
    let link = |p: u64| format!("{}/v3/memories/?page={p}&page_size={size}", super::PREFIX);
    let results: Vec<Value> = data
        .get("memories")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(shape::memory)
        .collect();
    json(json!({
        "count": total,
        "next": (page.saturating_mul(size) < total).then(|| link(page + 1)),
        "previous": (page > 1).then(|| link(page - 1)),
        "results": results,
    }))
}

/// `POST /v3/memories/search/`: `POST /v1/memories/search` (hybrid, our default), `threshold`
/// as `min_similarity`; each result's `score` is its cosine similarity.
pub(super) async fn search(State(m): State<Mem0>, c: Call, req: Request) -> Answered {
    let body = object(&body_of(&m, req).await?)?;
    only(
        &body,
        &[
            "query",
            "filters",
            "top_k",
            "threshold",
            "rerank",
            "keyword_search",
            "fields",
            "show_expired",
            "latest_only",
        ],
        "search",
    )?;
    let mut req = Map::new();
    req.insert(
        "query".into(),
        body.get("query").cloned().unwrap_or(Value::Null),
    );
    req.insert(
        "top_k".into(),
        body.get("top_k")
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(json!(TOP_K)),
    );
    if let Some(t) = body.get("threshold").filter(|v| !v.is_null()) {
        req.insert("min_similarity".into(), t.clone());
    }
    if let Some(f) = filter_of(&body)? {
        req.insert("filters".into(), f);
    }
    let path = "/v1/memories/search";
    let data = m
        .v1(&c, "search", Method::POST, path, Some(Value::Object(req)))
        .await?;
    let results: Vec<Value> = data
        .get("results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(shape::search_result)
        .collect();
    json(json!({ "results": results }))
}

/// `GET /v1/memories/{id}/`: `GET /v1/memories/{id}`.
pub(super) async fn get(State(m): State<Mem0>, c: Call, Path(id): Path<String>) -> Answered {
    let path = format!("/v1/memories/{}", segment(&id));
    let data = m.v1(&c, "get", Method::GET, &path, None).await?;
    json(shape::memory(&data))
}

/// `PUT /v1/memories/{id}/`: `PATCH /v1/memories/{id}` with `text` as `content` and
/// `expiration_date` as `expires_at`; the memory as changed.
pub(super) async fn update(
    State(m): State<Mem0>,
    c: Call,
    Path(id): Path<String>,
    req: Request,
) -> Answered {
    let body = object(&body_of(&m, req).await?)?;
    only(&body, &["text", "metadata", "expiration_date"], "update")?;
    let mut patch = Map::new();
    if let Some(t) = body.get("text").filter(|v| !v.is_null()) {
        patch.insert("content".into(), t.clone());
    }
    if let Some(md) = body.get("metadata").filter(|v| !v.is_null()) {
        patch.insert("metadata".into(), md.clone());
    }
    if let Some(e) = body.get("expiration_date") {
        patch.insert("expires_at".into(), shape::expires_at(e)?);
    }
    let path = format!("/v1/memories/{}", segment(&id));
    let data = m
        .v1(
            &c,
            "update",
            Method::PATCH,
            &path,
            Some(Value::Object(patch)),
        )
        .await?;
    json(shape::memory(&data))
}

/// `DELETE /v1/memories/{id}/`: `DELETE /v1/memories/{id}` (hidden, not erased).
pub(super) async fn delete_one(
    State(m): State<Mem0>,
    c: Call,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Answered {
    if q.get("delete_linked").is_some_and(|v| v != "false") {
        return Err(Refused::unsupported("delete_linked"));
    }
    let path = format!("/v1/memories/{}", segment(&id));
    m.v1(&c, "delete", Method::DELETE, &path, None).await?;
    json(json!({ "message": "Memory deleted successfully!" }))
}

/// `GET /v1/memories/{id}/history/`: `GET /v1/memories/{id}/history`, as mem0's events.
pub(super) async fn history(State(m): State<Mem0>, c: Call, Path(id): Path<String>) -> Answered {
    let path = format!("/v1/memories/{}/history", segment(&id));
    let data = m.v1(&c, "history", Method::GET, &path, None).await?;
    json(shape::history(&data))
}

/// Our filter naming the scope ids of a query string, `None` when it names none.
fn scope_filter(q: &HashMap<String, String>) -> Result<Option<Value>, Refused> {
    if let Some(k) = q
        .keys()
        .find(|k| !SCOPES.iter().any(|(theirs, _)| theirs == k))
    {
        return Err(Refused::unsupported(&format!("the parameter {k}")));
    }
    let mut f = Map::new();
    for (theirs, ours) in SCOPES {
        if let Some(v) = q.get(theirs) {
            f.insert(ours.into(), Value::String(v.clone()));
        }
    }
    Ok((!f.is_empty()).then_some(Value::Object(f)))
}

/// `DELETE /v1/memories/` (`delete_all`): `DELETE /v1/memories` with the scope ids as the
/// filter. One is required, as on `/v1` (an empty request never deletes everything).
pub(super) async fn delete_all(
    State(m): State<Mem0>,
    c: Call,
    Query(q): Query<HashMap<String, String>>,
) -> Answered {
    let Some(filter) = scope_filter(&q)? else {
        return Err(Refused::bad_request(
            "at least one of user_id, agent_id and run_id is required to delete memories",
        ));
    };
    let body = json!({ "filters": filter });
    m.v1(&c, "delete_all", Method::DELETE, "/v1/memories", Some(body))
        .await?;
    json(json!({ "message": "Memories deleted successfully!" }))
}

/// One entity of `users`, gathered.
struct Entity {
    count: u64,
    created_at: Value,
    updated_at: Value,
}

/// `GET /v1/entities/` (`users`): the tenant's users, agents and runs that have memories,
/// read page by page from `POST /v1/memories/query` (each page an audited `memory.query`).
pub(super) async fn users(State(m): State<Mem0>, c: Call) -> Answered {
    let mut found: BTreeMap<(usize, String), Entity> = BTreeMap::new();
    let mut page = 1;
    loop {
        if page > USERS_MAX_PAGES {
            return Err(Refused::bad_request(format!(
                "users reads at most {} memories; filter get_all by user_id instead",
                USERS_MAX_PAGES * PAGE_SIZE
            )));
        }
        let body = json!({ "page": page, "page_size": PAGE_SIZE });
        let data = m
            .v1(&c, "users", Method::POST, "/v1/memories/query", Some(body))
            .await?;
        let memories = memories_of(&data);
        for mem in &memories {
            for (rank, (_, ours)) in SCOPES.iter().enumerate() {
                let Some(name) = mem.get(*ours).and_then(Value::as_str) else {
                    continue;
                };
                let created = mem.get("created_at").cloned().unwrap_or(Value::Null);
                let updated = mem.get("updated_at").cloned().unwrap_or(Value::Null);
                let e = found
                    .entry((rank, name.to_string()))
                    .or_insert_with(|| Entity {
                        count: 0,
                        created_at: created.clone(),
                        updated_at: updated.clone(),
                    });
                e.count += 1;
                // RFC 3339 times in UTC with the same precision compare as text.
                if created.as_str() < e.created_at.as_str() {
                    e.created_at = created;
                }
                if updated.as_str() > e.updated_at.as_str() {
                    e.updated_at = updated;
                }
            }
        }
        let total = data.get("total").and_then(Value::as_u64).unwrap_or(0);
        if memories.is_empty() || page * PAGE_SIZE >= total {
            break;
        }
        page += 1;
    }
    const TYPES: [&str; 3] = ["user", "agent", "run"];
    let results: Vec<Value> = found
        .into_iter()
        .map(|((rank, name), e)| {
            json!({
                "id": name,
                "name": name,
                "type": TYPES[rank],
                "total_memories": e.count,
                "created_at": e.created_at,
                "updated_at": e.updated_at,
                "metadata": null,
            })
        })
        .collect();
    json(json!({
        "count": results.len(),
        "next": null,
        "previous": null,
        "results": results,
    }))
}

/// `DELETE /v2/entities/{type}/{name}/` (`delete_users`): deletes the entity's memories,
/// `DELETE /v1/memories` with its id as the filter (hidden, not erased: docs/COMPAT.md).
pub(super) async fn delete_user(
    State(m): State<Mem0>,
    c: Call,
    Path((kind, name)): Path<(String, String)>,
) -> Answered {
    let field = match kind.as_str() {
        "user" => "user_id",
        "agent" => "agent_id",
        "run" => "session_id",
        other => return Err(Refused::unsupported(&format!("the entity type '{other}'"))),
    };
    let body = json!({ "filters": { field: name } });
    m.v1(
        &c,
        "delete_users",
        Method::DELETE,
        "/v1/memories",
        Some(body),
    )
    .await?;
    json(json!({ "message": "Entity deleted successfully!" }))
}
