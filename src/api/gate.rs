//! The `/v1` gate: authentication, the per-key rate limit, permissions, and the audit entry of
//! every request.
//!
//! Handlers decide (through `crate::command`); the gate commits. A handler returns its response
//! together with the events of the operation ([`Recorded`]); the gate adds the request's `AuditRecorded` and appends them
//! all as one atomic submission, so an operation never lands without its audit entry nor an
//! audit entry without its operation. Requests refused before a tenant is known (401) are not
//! tenant entries; they are traced.
//!
//! The gate runs on each `/v1` route with the route's [`Policy`] (`api::routes` installs it):
//!
//! ```text
//! identify (401) ─▶ refused unread: rate limit (429), declared size (413)
//!   ─▶ read the body (413, 408) ─▶ authorize: tags (400), permission (403), subscription (2200)
//!   ─▶ handler (408 past the deadline) ─▶ record: append [events..., AuditRecorded]
//! ```
//!
//! Every refusal after `identify` is itself recorded as the tenant's entry. A request that
//! changed nothing is answered once its entry is durable, before it is folded; the requests
//! after it that read the folded state wait for that fold first (`reads_memories_only`).
//!
//! What the entry records is bounded (`wire::audit::bounds`): the user agent truncated with a
//! marker, the tags refused over their size, every detail field within the audit body limit;
//! the entry's `detail_hash` commits its tenant chain to the detail as stored. A response a
//! handler recorded by reference (`AuditDetail::response_ref`: audit lists and detail reads)
//! is sent as it is and not copied into the entry.
//!
//! **Sealed.** The entry's personal fields (peer address, user agent, tags, error message, the
//! whole detail) are sealed ([`AuditRecorded::sealed_for`]) under the keys of its subjects: the
//! request's own scope (each `user_id`, `agent_id`, `session_id` its query, its body or its
//! body's `filters` names), or the tenant when it names none, plus whatever the handler says
//! the answer showed ([`PendingOps::subjects`]). Erasing any of them erases the entry's personal fields;
//! a keyring that fails is a 500 and nothing of the operation is stored.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use auditmem_projections::seal::Subject;
use auditmem_projections::tenants::{ApiKey, Tenant};
use auditmem_projections::{
    AuditDetail, AuditEntry, AuditRecorded, Event, KeyScope, Named, Permission,
};
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::{error_body, ApiError, ErrorInfo};
use super::position::with_position;
use super::rate_limit;
use super::state::AppState;
use crate::command::Decision;
use crate::log::appender::{AppendError, Precondition};
use crate::registry::ErrorCode;
use crate::wire::audit::bounds;
use crate::wire::memory::json_of;

/// What a `/v1` route's calls are: the action their audit entries carry and the permission they
/// need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub action: &'static str,
    pub permission: Permission,
}

/// The gate's state on one route: the service's and the route's policy.
#[derive(Clone)]
pub struct Gate {
    pub state: AppState,
    pub policy: Policy,
}

/// The authenticated caller, for handlers.
#[derive(Clone, Debug)]
pub struct Caller {
    pub tenant: Tenant,
    pub key: ApiKey,
    /// The scope the caller is bound to (`api::scope`): its key's, narrowed by an MCP
    /// connection's binding; none for a tenant-wide caller.
    pub scope: Option<KeyScope>,
}

/// A request another transport made in process (`api::inprocess`: an MCP tool call, a mem0
/// compatibility call), as a request extension: no HTTP client can set one, so only those
/// layers mark a request as theirs. Its audit entry's `metadata` gains `"transport"` and the
/// transport's call tag ([`Transport::call_tag`]), over any tag of those names the caller sent.
#[derive(Clone, Debug)]
pub struct Via {
    pub transport: Transport,
    /// The tool or method called, e.g. `add_memory` (MCP), `search` (mem0).
    pub call: &'static str,
    /// The scope the connection is bound to (an MCP host's headers); none for mem0.
    pub binding: Option<KeyScope>,
}

/// The transports that call the `/v1` routes in process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `crate::mcp`.
    Mcp,
    /// `crate::compat::mem0`.
    Mem0,
}

impl Transport {
    /// The entry's `transport` tag.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Mcp => "mcp",
            Transport::Mem0 => "mem0",
        }
    }

    /// The tag naming the call: `mcp_tool`, `mem0_call`.
    pub fn call_tag(self) -> &'static str {
        match self {
            Transport::Mcp => "mcp_tool",
            Transport::Mem0 => "mem0_call",
        }
    }
}

/// What a handler hands to the gate besides its response: the operation's events, the
/// precondition the appender checks before committing them, and the audit entry's detail and
/// charges.
#[derive(Default)]
pub struct PendingOps {
    pub events: Vec<Event>,
    pub check: Option<Precondition>,
    pub detail: AuditDetail,
    pub credits: f64,
    pub usd: f64,
    /// The response body is a file stream: do not buffer or record it.
    pub streamed: bool,
    /// `command::Audit::subjects`: whose data the entry shows beyond the request's scope.
    pub subjects: Vec<auditmem_projections::seal::Subject>,
}

/// A handler's answer with what the gate records and commits with it.
pub struct Recorded<R> {
    pub response: R,
    pub ops: PendingOps,
}

impl<R> Recorded<R> {
    pub fn new(response: R, ops: PendingOps) -> Self {
        Recorded { response, ops }
    }

    /// A command's decision, its answer as the route answers it (`wrap`).
    pub fn decided<A>(decision: Decision<A>, wrap: impl FnOnce(A) -> R) -> Self {
        let Decision {
            answer,
            events,
            check,
            audit,
        } = decision;
        let ops = PendingOps {
            events,
            check,
            detail: audit.detail,
            credits: audit.credits,
            usd: audit.usd,
            streamed: false,
            subjects: audit.subjects,
        };
        Recorded::new(wrap(answer), ops)
    }
}

/// Response extension carrying [`PendingOps`] to the gate (extensions must be `Clone`).
#[derive(Clone, Default)]
struct Pending(Arc<Mutex<Option<PendingOps>>>);

impl<R: IntoResponse> IntoResponse for Recorded<R> {
    fn into_response(self) -> Response {
        let mut resp = self.response.into_response();
        resp.extensions_mut()
            .insert(Pending(Arc::new(Mutex::new(Some(self.ops)))));
        resp
    }
}

impl Pending {
    fn take(&self) -> Option<PendingOps> {
        self.0.lock().ok().and_then(|mut g| g.take())
    }
}

/// Bodies over the limit are kept as a marked prefix, never silently dropped
/// (`bounds::truncation_marker`). The interface types `request_body` and `response_body` as
/// objects, so JSON of another kind (an array, a string: a body the route refuses) is kept
/// inside a marker object, and text that is not JSON as `_unparsed`; what that makes of a body
/// within the limit is held to it as JSON too (`bounds::bounded_value`).
pub fn bounded_json(bytes: &[u8], limit: usize) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    if bytes.len() > limit {
        let head = String::from_utf8_lossy(&bytes[..limit]);
        return Some(bounds::truncation_marker(&head, bytes.len(), limit));
    }
    let v = match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => v,
        Ok(v) => json!({ "_non_object": v }),
        Err(_) => json!({"_unparsed": String::from_utf8_lossy(bytes)}),
    };
    Some(bounds::bounded_value(v, limit))
}

/// The request as its audit entry records it, gathered as the gate goes.
struct Entry {
    started: Instant,
    action: &'static str,
    tenant: Tenant,
    ip: Option<String>,
    user_agent: Option<String>,
    metadata: Option<Value>,
    request_body: Option<Value>,
    /// The scope ids the request's query names (its body's are added once it is read).
    scope: Vec<Subject>,
}

/// The caller's `X-Audit-Metadata` tags, read once: `Err` (the refusal's message) when the
/// header is there but not a JSON object, or larger than `bounds::METADATA_MAX`.
type Tags = Result<Option<Value>, String>;

pub async fn v1_gate(State(gate): State<Gate>, req: Request, next: Next) -> Response {
    let Gate { state, policy } = gate;
    let started = Instant::now();
    let (tenant, key) = match identify(&state, req.headers()) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(action = policy.action, reason = %e.message, ip = ?client_ip(&state, &req), "unauthenticated request refused");
            return e.into_response();
        }
    };
    let tags = tags(req.headers());
    let via = req.extensions().get::<Via>().cloned();
    let mut entry = Entry {
        started,
        action: policy.action,
        tenant: tenant.clone(),
        ip: client_ip(&state, &req),
        // An empty header is no user agent, as ingestion treats empty text: a CSV export
        // cannot tell an empty cell from a null one. A long one is kept truncated, marked: the
        // request happened, so it is recorded, but its header does not get to weigh on every
        // list page that shows the entry.
        user_agent: req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .filter(|s| !s.is_empty())
            .map(|s| bounds::truncate_text(s, bounds::USER_AGENT_MAX).into_owned()),
        metadata: None,
        request_body: None,
        scope: crate::wire::audit::scope_of(tenant.id, req.uri().query(), None),
    };
    if let Some(refused) = refused_unread(&state, &key, req.headers()) {
        // Refused before the body is read, so a throttled key costs as little as possible; the
        // entry is kept small: no body, only the caller's tags when they are valid.
        entry.metadata = tags.ok().flatten();
        return record(&state, entry, refused).await;
    }
    // The request's time runs from its arrival through its body and its handler; the
    // recording is outside it, so a timeout answers 408 with nothing of the operation stored
    // (its events are appended only when recorded) and is itself recorded.
    let deadline = tokio::time::Instant::from_std(started) + state.settings.request_timeout;
    let (parts, body) = req.into_parts();
    let bytes = match read_body(&state, body, deadline).await {
        Ok(b) => b,
        Err(refused) => return record(&state, entry, refused).await,
    };
    entry.request_body = bounded_json(&bytes, state.settings.audit_body_limit);
    // The body as sent, not as bounded: a scope id past the audit body limit still names whom
    // the request is about (a body within it is the value just parsed).
    let parsed;
    let body_json = if bytes.len() <= state.settings.audit_body_limit {
        entry.request_body.as_ref()
    } else {
        parsed = serde_json::from_slice::<Value>(&bytes).ok();
        parsed.as_ref()
    };
    entry
        .scope
        .extend(crate::wire::audit::scope_of(tenant.id, None, body_json));
    entry.scope.sort();
    entry.scope.dedup();
    // An erasure's own entry is the tenant's record that it happened: sealed under the
    // scope it names, it would be erased by itself, and a scope erased already would get a
    // new key just to seal it.
    if policy.permission == Permission::MemoryErase {
        entry.scope.clear();
    }
    let scope = match authorize(policy, &tenant, &key, tags, via.as_ref(), &mut entry) {
        Ok(scope) => scope,
        Err(refused) => return record(&state, entry, refused.into_response()).await,
    };
    // A bound caller's request is about its scope whether or not it names it.
    if let Some(s) = &scope {
        entry
            .scope
            .push(Subject::User(tenant.id, s.user_id.clone()));
        entry
            .scope
            .extend(s.agent_id.clone().map(|a| Subject::Agent(tenant.id, a)));
        entry
            .scope
            .extend(s.session_id.clone().map(|v| Subject::Session(tenant.id, v)));
        entry.scope.sort();
        entry.scope.dedup();
    }
    // A caller sees its own entries: what reads the folded state waits for the entries answered
    // before their fold (`Appender::append_read`). A read of memories alone does not: those
    // entries change no memory.
    if !reads_memories_only(policy, parts.uri.query(), &bytes) {
        state.appender.caught_up().await;
    }
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(Caller { tenant, key, scope });
    let resp = match tokio::time::timeout_at(deadline, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => timed_out(&state),
    };
    record(&state, entry, resp).await
}

/// Whether a call reads the memories projection alone, as it stands: a memory get, list or
/// search without `as_of` (which reads the log up to a position). Over-cautious on purpose: any
/// `as_of` in the query or the body counts.
fn reads_memories_only(policy: Policy, query: Option<&str>, body: &[u8]) -> bool {
    const AS_OF: &[u8] = b"as_of";
    matches!(
        policy.action,
        "memory.read" | "memory.list" | "memory.search"
    ) && !query.is_some_and(|q| q.contains("as_of"))
        && !body.windows(AS_OF.len()).any(|w| w == AS_OF)
}

/// The tenant and key of the key presented in `Authorization: Bearer <key>`.
pub(crate) fn identify(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Tenant, ApiKey), ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthorized("missing Authorization: Bearer <API key> header"))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::unauthorized("the Authorization header must be 'Bearer <API key>'")
        })?;
    let hash = *blake3::hash(token.as_bytes()).as_bytes();
    let key = state
        .projections
        .tenants
        .key_by_hash(&hash)?
        .ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
    if key.revoked_at.is_some() {
        return Err(ApiError::unauthorized("this API key has been revoked"));
    }
    let tenant = state
        .projections
        .tenants
        .tenant(&key.tenant_id)?
        .ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
    Ok((tenant, key))
}

/// The client address as audited.
fn client_ip(state: &AppState, req: &Request) -> Option<String> {
    // The peer, or under --trust-proxy the forwarded client (`api::client_ip`).
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    state
        .settings
        .proxy_trust
        .client(peer, req.headers())
        .map(|ip| ip.to_string())
}

fn tags(headers: &HeaderMap) -> Tags {
    let Some(h) = headers.get("x-audit-metadata") else {
        return Ok(None);
    };
    let max = bounds::METADATA_MAX;
    if h.len() > max {
        return Err(bounds::too_long("X-Audit-Metadata", h.len(), max).0);
    }
    let tags = h
        .to_str()
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .filter(Value::is_object)
        .ok_or_else(|| "X-Audit-Metadata must be a JSON object".to_string())?;
    // Stored compact, which can be longer than sent (`1E2` is stored as `100.0`).
    match bounds::json_len(&tags) {
        n if n > max => Err(format!(
            "X-Audit-Metadata is {n} bytes as stored (compact JSON); at most {max} are allowed"
        )),
        _ => Ok(Some(tags)),
    }
}

/// The refusals decided before the body is read: the key's rate (429) and a body announced
/// over the limit (413, refused without reading a byte of it).
fn refused_unread(state: &AppState, key: &ApiKey, headers: &HeaderMap) -> Option<Response> {
    if let Err(wait) = state.rate_limiter.check(key.key_id) {
        return Some(rate_limited(wait));
    }
    if declared_length(headers).is_some_and(|n| n > state.settings.max_body_bytes as u64) {
        return Some(too_large(state));
    }
    None
}

/// The body, read within the deadline: 413 when it streams past the limit, 408 past the time.
async fn read_body(
    state: &AppState,
    body: Body,
    deadline: tokio::time::Instant,
) -> Result<Bytes, Response> {
    let read = axum::body::to_bytes(body, state.settings.max_body_bytes);
    match tokio::time::timeout_at(deadline, read).await {
        Ok(Ok(b)) => Ok(b),
        // Streamed without a length (or longer than announced): noticed while reading.
        Ok(Err(_)) => Err(too_large(state)),
        Err(_) => Err(timed_out(state)),
    }
}

/// The refusals decided once the body is read: the tags' shape, the key's permission, the
/// caller's scope (`api::scope`) and, on audit routes, the subscription. Valid tags go into
/// the entry, with the transport of an in-process call. The caller's scope when it may go on.
fn authorize(
    policy: Policy,
    tenant: &Tenant,
    key: &ApiKey,
    tags: Tags,
    via: Option<&Via>,
    entry: &mut Entry,
) -> Result<Option<KeyScope>, ApiError> {
    entry.metadata = tags.map_err(ApiError::bad_request)?;
    if let Some(via) = via {
        let mut tags = match entry.metadata.take() {
            Some(Value::Object(tags)) => tags,
            _ => serde_json::Map::new(),
        };
        tags.insert("transport".into(), json!(via.transport.name()));
        tags.insert(via.transport.call_tag().into(), json!(via.call));
        entry.metadata = Some(Value::Object(tags));
    }
    if !key.has(policy.permission) {
        return Err(ApiError::forbidden(format!(
            "this API key lacks the '{}' permission",
            policy.permission.as_str()
        )));
    }
    if policy.action.starts_with("audit.") && !tenant.subscription_active {
        return Err(ApiError::new(
            ErrorCode::SubscriptionInactive,
            ErrorCode::SubscriptionInactive.label(),
        ));
    }
    let scope = super::scope::merge(key.scope.as_ref(), via.and_then(|v| v.binding.as_ref()))?;
    match &scope {
        Some(s) if !super::scope::allows(policy.action) => Err(super::scope::refused_route(s)),
        _ => Ok(scope),
    }
}

/// 408 naming the configured timeout.
fn timed_out(state: &AppState) -> Response {
    ApiError::new(
        ErrorCode::RequestTimeout,
        format!(
            "the request took longer than {} s",
            state.settings.request_timeout.as_secs()
        ),
    )
    .into_response()
}

/// The request's `Content-Length`, when it names a number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// 413 naming the configured limit.
fn too_large(state: &AppState) -> Response {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!(
            "the request body exceeds {} bytes",
            state.settings.max_body_bytes
        ),
    )
    .into_response()
}

/// 429 with `Retry-After` in whole seconds.
fn rate_limited(wait: std::time::Duration) -> Response {
    let secs = rate_limit::retry_after_secs(wait);
    let mut resp = ApiError::new(
        ErrorCode::RateLimited,
        format!("too many requests for this API key; retry after {secs} s"),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

/// Appends the operation's events with the request's audit entry and returns the response the
/// caller gets: the handler's, or the refusal of a precondition, or the failure of the log.
async fn record(state: &AppState, entry: Entry, resp: Response) -> Response {
    let pending = resp
        .extensions()
        .get::<Pending>()
        .and_then(Pending::take)
        .unwrap_or_default();
    // A file stream is not buffered; a response recorded by reference is rendered again from
    // its reference when the entry's detail is read, so it is not copied into the entry.
    let by_reference = pending.detail.response_ref.is_some();
    let (resp, response_body, response_json) = if pending.streamed || by_reference {
        (resp, None, None)
    } else {
        match recorded_body(state, resp).await {
            Ok(v) => v,
            Err(e) => return e.into_response(),
        }
    };
    let PendingOps {
        mut events,
        check,
        mut detail,
        credits,
        usd,
        subjects,
        ..
    } = pending;
    detail.request_body = entry.request_body.clone();
    detail.response_body = response_body;
    detail.response_json = response_json;
    // The handlers' detail fields (memory results, extraction input and output) within the
    // limit the bodies already keep.
    bounds::bound_detail(&mut detail, state.settings.audit_body_limit);
    match audit_event(state, &entry, &resp, detail, credits, usd, &subjects) {
        Ok(audit) => events.push(audit),
        Err(e) => return e.into_response(),
    }
    // A request that changed nothing (a read, a refusal) is answered while the cluster's log
    // cannot take writes: its audit entry waits on this node's disk and joins the log when the
    // cluster is back (`Appender::defer`). Anything that changes state is refused.
    let deferred = (events.len() == 1 && check.is_none() && state.appender.defers())
        .then(|| events[0].clone());
    // A request the handler already refused because the cluster (its log or its key store)
    // did not answer is not made to wait for the stream a second time: its entry is deferred
    // at once, so the caller has its 503 within one `--nats-timeout-ms`.
    let refused_unreachable = resp
        .extensions()
        .get::<ErrorInfo>()
        .is_some_and(|i| i.code == ErrorCode::Unavailable.code());
    let outcome = match (check, &deferred) {
        (None, Some(_)) if refused_unreachable || state.appender.cluster_down() => Err(
            AppendError::ClusterUnavailable("the log cluster is not taking writes".into()),
        ),
        (Some(check), _) => state.appender.append_checked(events, check).await,
        // Only its own entry: answered once durable, not folded (see `Appender::append_read`).
        (None, _) if events.len() == 1 => state.appender.append_read(events).await,
        (None, _) => state.appender.append(events).await,
    };
    match outcome {
        Ok(c) => with_position(resp, c.last_seq),
        Err(AppendError::ClusterUnavailable(_)) if deferred.is_some() => {
            match deferred.map(|e| state.appender.defer(&e)) {
                Some(Ok(())) => resp,
                Some(Err(e)) => ApiError::from(e).into_response(),
                None => resp,
            }
        }
        Err(AppendError::Rejected(r)) => {
            // The precondition refused the operation: record the refusal alone.
            let refused = r.response();
            let detail = AuditDetail {
                request_body: entry.request_body.clone(),
                response_body: Some(json_of(&error_body(r.code, &r.message))),
                ..Default::default()
            };
            let audit = match audit_event(state, &entry, &refused, detail, 0.0, 0.0, &[]) {
                Ok(audit) => audit,
                Err(e) => return e.into_response(),
            };
            match state.appender.append(vec![audit]).await {
                Ok(c) => with_position(refused, c.last_seq),
                Err(e) => ApiError::from(e).into_response(),
            }
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The response, buffered, with its body as the entry records it: within the audit body limit
/// the text as sent (see `AuditDetail::response_json`), beyond it a marked prefix.
#[allow(clippy::type_complexity)]
async fn recorded_body(
    state: &AppState,
    resp: Response,
) -> Result<(Response, Option<Value>, Option<String>), ApiError> {
    let (parts, body) = resp.into_parts();
    let b = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ApiError::internal(format!("response body: {e}")))?;
    let limit = state.settings.audit_body_limit;
    let (value, text) = match std::str::from_utf8(&b) {
        Ok(text) if !text.is_empty() && text.len() <= limit => (None, Some(text.to_string())),
        _ => (bounded_json(&b, limit), None),
    };
    Ok((Response::from_parts(parts, Body::from(b)), value, text))
}

/// The request's `AuditRecorded`, sealed under the request's scope (or the tenant) and
/// `shown`, its entry committing to `detail` as given (bounded already).
fn audit_event(
    state: &AppState,
    entry: &Entry,
    resp: &Response,
    detail: AuditDetail,
    credits: f64,
    usd: f64,
    shown: &[Subject],
) -> Result<Event, ApiError> {
    let status = resp.status().as_u16();
    let info = resp.extensions().get::<ErrorInfo>();
    let mut subjects = if entry.scope.is_empty() {
        vec![Subject::Tenant(entry.tenant.id)]
    } else {
        entry.scope.clone()
    };
    subjects.extend(shown.iter().cloned());
    subjects.sort();
    subjects.dedup();
    let audit = AuditEntry {
        id: Uuid::now_v7(),
        action: entry.action.to_string(),
        model_id: None,
        project_id: None,
        gateway_id: None,
        ip_address: entry.ip.clone(),
        user_agent: entry.user_agent.clone(),
        http_status: status,
        is_success: (200..300).contains(&status),
        is_cache_hit: false,
        error_code: info.map(|i| i.code),
        error_msg: info.map(|i| i.message.clone()),
        duration: Some((entry.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0),
        credits_consumed: credits,
        balance_consumed_usd: usd,
        tokens: None,
        metadata: entry.metadata.clone(),
        created_at: crate::wire::time::now_stored(),
        detail_hash: None,
    };
    let sealed = AuditRecorded::sealed_for(
        entry.tenant.id,
        audit,
        detail,
        &*state.projections.keys,
        &subjects,
    )
    .map_err(|e| ApiError::from(crate::command::Refusal::from(e)))?;
    Ok(Event::AuditRecorded(Box::new(sealed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_memory_reads_without_as_of_skip_waiting_for_the_tenants_entries() {
        let policy = |action| Policy {
            action,
            permission: Permission::MemoryRead,
        };
        let body = br#"{"query":"tea","filters":{"user_id":"alice"}}"#;
        for action in ["memory.read", "memory.list", "memory.search"] {
            assert!(reads_memories_only(policy(action), None, body), "{action}");
            assert!(reads_memories_only(policy(action), Some("limit=5"), b""));
            assert!(!reads_memories_only(policy(action), Some("as_of=12"), b""));
            assert!(!reads_memories_only(
                policy(action),
                None,
                br#"{"query":"tea","as_of":"12"}"#
            ));
        }
        for action in ["audit.list", "audit.read", "memory.history", "memory.write"] {
            assert!(!reads_memories_only(policy(action), None, body), "{action}");
        }
    }
}
