//! The `/v1` gate: authentication, the per-key rate limit, permissions, and the audit entry of
//! every request.
//!
//! Handlers decide; the gate commits. A handler returns its response together with the events
//! of the operation ([`Pending`]); the gate adds the request's `AuditRecorded` and appends them
//! all as one atomic submission, so an operation never lands without its audit entry nor an
//! audit entry without its operation. Requests refused before a tenant is known (401) are not
//! tenant entries; they are traced.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use auditmem_projections::audit_view::format_time;
use auditmem_projections::tenants::{ApiKey, Tenant};
use auditmem_projections::{AuditDetail, AuditEntry, AuditRecorded, Event, Permission};
use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::{error_body, error_response, ApiError, ErrorInfo};
use super::rate_limit;
use crate::log::appender::{AppendError, Precondition};
use crate::registry::ErrorCode;
use crate::state::AppState;

/// The authenticated caller, for handlers.
#[derive(Clone, Debug)]
pub struct Caller {
    pub tenant: Tenant,
    pub key: ApiKey,
}

/// What a handler hands back to the gate besides its response.
#[derive(Default)]
pub struct PendingOps {
    pub events: Vec<Event>,
    pub check: Option<Precondition>,
    pub detail: AuditDetail,
    pub credits: f64,
    pub usd: f64,
    /// The response body is a file stream: do not buffer or record it.
    pub streamed: bool,
}

/// Response extension carrying [`PendingOps`] (extensions must be `Clone`).
#[derive(Clone, Default)]
pub struct Pending(Arc<Mutex<Option<PendingOps>>>);

impl Pending {
    pub fn attach(resp: impl IntoResponse, ops: PendingOps) -> Response {
        let mut resp = resp.into_response();
        resp.extensions_mut()
            .insert(Pending(Arc::new(Mutex::new(Some(ops)))));
        resp
    }

    fn take(&self) -> Option<PendingOps> {
        self.0.lock().ok().and_then(|mut g| g.take())
    }
}

/// The action name and permission of each `/v1` route.
pub fn route_policy(method: &Method, path: &str) -> Option<(&'static str, Permission)> {
    use Permission::*;
    let p = match (method.as_str(), path) {
        ("GET", "/v1/audit/logs") => ("audit.list", AuditRead),
        ("GET", "/v1/audit/logs/{audit_id}") => ("audit.read", AuditRead),
        ("POST", "/v1/audit/logs/export") => ("audit.export", AuditExport),
        ("GET", "/v1/audit/logs/export/{export_id}") => ("audit.export_status", AuditExport),
        ("GET", "/v1/audit/logs/export/{export_id}/download") => {
            ("audit.export_download", AuditExport)
        }
        ("POST", "/v1/memories") => ("memory.write", MemoryWrite),
        ("GET", "/v1/memories") => ("memory.list", MemoryRead),
        ("DELETE", "/v1/memories") => ("memory.batch_delete", MemoryWrite),
        ("GET", "/v1/memories/{id}") => ("memory.read", MemoryRead),
        ("PATCH", "/v1/memories/{id}") => ("memory.update", MemoryWrite),
        ("DELETE", "/v1/memories/{id}") => ("memory.delete", MemoryWrite),
        ("GET", "/v1/memories/{id}/history") => ("memory.history", MemoryRead),
        ("POST", "/v1/memories/search") => ("memory.search", MemoryRead),
        ("POST", "/v1/memories/extract") => ("memory.extract", MemoryWrite),
        _ => return None,
    };
    Some(p)
}

/// Looks up the key presented in `Authorization: Bearer <key>`.
fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<(Tenant, ApiKey), ApiError> {
    let value = headers
        .get("authorization")
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
    if state.settings.trust_proxy {
        if let Some(xff) = req
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
        {
            if let Some(first) = xff.split(',').map(str::trim).find(|s| !s.is_empty()) {
                return Some(first.to_string());
            }
        }
    }
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
}

/// Bodies over the limit are kept as a marked prefix, never silently dropped. The interface
/// types `request_body` and `response_body` as objects, so JSON of another kind (an array, a
/// string: a body the route refuses) is kept whole inside a marker object.
pub fn bounded_json(bytes: &[u8], limit: usize) -> Option<Value> {
    if bytes.is_empty() {
        return None;
    }
    if bytes.len() > limit {
        let cut = String::from_utf8_lossy(&bytes[..limit]).to_string();
        return Some(json!({"_truncated": true, "_original_bytes": bytes.len(), "_prefix": cut}));
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => Some(v),
        Ok(v) => Some(json!({ "_non_object": v })),
        Err(_) => Some(json!({"_unparsed": String::from_utf8_lossy(bytes)})),
    }
}

struct Ctx {
    started: Instant,
    action: &'static str,
    tenant: Tenant,
    ip: Option<String>,
    user_agent: Option<String>,
    metadata: Option<Value>,
    request_body: Option<Value>,
}

pub async fn v1_gate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let Some((action, permission)) = route_policy(req.method(), &path) else {
        // The path matched but not with this method: let the router answer 405 (no tenant
        // operation happened, so nothing is recorded).
        return next.run(req).await;
    };
    let (tenant, key) = match authenticate(&state, req.headers()) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(action, reason = %e.message, ip = ?client_ip(&state, &req), "unauthenticated request refused");
            return e.into_response();
        }
    };
    let ip = client_ip(&state, &req);
    // An empty header is no user agent, as ingestion treats empty text: a CSV export cannot
    // tell an empty cell from a null one, so an entry holding "" failed `verify --export`.
    let user_agent = req
        .headers()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    // The caller's tags, read once: `Err` when the header is there but not a JSON object.
    let tags: Result<Option<Value>, ()> = match req.headers().get("x-audit-metadata") {
        None => Ok(None),
        Some(h) => h
            .to_str()
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .filter(Value::is_object)
            .map(Some)
            .ok_or(()),
    };
    let mut ctx = Ctx {
        started,
        action,
        tenant: tenant.clone(),
        ip,
        user_agent,
        metadata: None,
        request_body: None,
    };
    // Before the body is read: a throttled key must cost as little as possible. The refusal
    // is still the tenant's audit entry (every authenticated call is; see docs/API.md), kept
    // small: no body, only the caller's tags when they are valid.
    if let Err(wait) = state.rate_limiter.check(key.key_id) {
        ctx.metadata = tags.ok().flatten();
        return finish(&state, ctx, rate_limited(wait)).await;
    }
    // A body announced over the limit is refused without reading a byte of it, and, like the
    // 429 above, recorded small: the key is known, so the refusal is the tenant's operation.
    if declared_length(req.headers()).is_some_and(|n| n > state.settings.max_body_bytes as u64) {
        ctx.metadata = tags.ok().flatten();
        return finish(&state, ctx, too_large(&state)).await;
    }
    // The request's time runs from its arrival through its body and its handler; the
    // recording in `finish` is outside it, so a timeout answers 408 with nothing of the
    // operation stored (its events are appended only there) and is itself recorded.
    let deadline = tokio::time::Instant::from_std(started) + state.settings.request_timeout;
    let (parts, body) = req.into_parts();
    let body_result = tokio::time::timeout_at(
        deadline,
        axum::body::to_bytes(body, state.settings.max_body_bytes),
    )
    .await;

    let bytes = match body_result {
        Ok(Ok(b)) => b,
        // Streamed without a length (or longer than announced): noticed while reading.
        Ok(Err(_)) => return finish(&state, ctx, too_large(&state)).await,
        Err(_) => return finish(&state, ctx, timed_out(&state)).await,
    };
    ctx.request_body = bounded_json(&bytes, state.settings.audit_body_limit);
    match tags {
        Ok(t) => ctx.metadata = t,
        Err(()) => {
            let e = ApiError::bad_request("X-Audit-Metadata must be a JSON object");
            return finish(&state, ctx, e.into_response()).await;
        }
    }
    if !key.has(permission) {
        let e = ApiError::forbidden(format!(
            "this API key lacks the '{}' permission",
            permission.as_str()
        ));
        return finish(&state, ctx, e.into_response()).await;
    }
    if action.starts_with("audit.") && !tenant.subscription_active {
        let e = ApiError::new(
            ErrorCode::SubscriptionInactive,
            ErrorCode::SubscriptionInactive.label(),
        );
        return finish(&state, ctx, e.into_response()).await;
    }
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(Caller { tenant, key });
    let resp = match tokio::time::timeout_at(deadline, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => timed_out(&state),
    };
    finish(&state, ctx, resp).await
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

/// Records the audit entry with the operation's events and returns the final response.
async fn finish(state: &AppState, ctx: Ctx, resp: Response) -> Response {
    let pending = resp
        .extensions()
        .get::<Pending>()
        .and_then(Pending::take)
        .unwrap_or_default();
    let (resp, response_body, response_json) = if pending.streamed {
        (resp, None, None)
    } else {
        let (parts, body) = resp.into_parts();
        match axum::body::to_bytes(body, usize::MAX).await {
            Ok(b) => {
                // Within the limit the text is kept as sent (see `AuditDetail::response_json`).
                let limit = state.settings.audit_body_limit;
                let (value, text) = match std::str::from_utf8(&b) {
                    Ok(text) if !text.is_empty() && text.len() <= limit => {
                        (None, Some(text.to_string()))
                    }
                    _ => (bounded_json(&b, limit), None),
                };
                (Response::from_parts(parts, Body::from(b)), value, text)
            }
            Err(e) => return ApiError::internal(format!("response body: {e}")).into_response(),
        }
    };
    let PendingOps {
        mut events,
        check,
        mut detail,
        credits,
        usd,
        ..
    } = pending;
    detail.request_body = ctx.request_body.clone();
    detail.response_body = response_body;
    detail.response_json = response_json;
    let audit = audit_event(&ctx, &resp, detail.clone(), credits, usd);
    events.push(audit);
    let outcome = match check {
        Some(check) => state.appender.append_checked(events, check).await,
        None => state.appender.append(events).await,
    };
    match outcome {
        Ok(_) => resp,
        Err(AppendError::Rejected(r)) => {
            // The precondition refused the operation: record the refusal alone.
            let refused = error_response(r.code, &r.message);
            let detail = AuditDetail {
                request_body: ctx.request_body.clone(),
                response_body: Some(error_body(r.code, &r.message)),
                ..Default::default()
            };
            let audit = audit_event(&ctx, &refused, detail, 0.0, 0.0);
            match state.appender.append(vec![audit]).await {
                Ok(_) => refused,
                Err(e) => ApiError::from(e).into_response(),
            }
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

fn audit_event(ctx: &Ctx, resp: &Response, detail: AuditDetail, credits: f64, usd: f64) -> Event {
    let status = resp.status().as_u16();
    let info = resp.extensions().get::<ErrorInfo>();
    let now = chrono::Utc::now().timestamp_micros();
    Event::AuditRecorded(Box::new(AuditRecorded {
        tenant_id: ctx.tenant.id,
        entry: AuditEntry {
            id: Uuid::now_v7(),
            action: ctx.action.to_string(),
            model_id: None,
            project_id: None,
            gateway_id: None,
            ip_address: ctx.ip.clone(),
            user_agent: ctx.user_agent.clone(),
            http_status: status,
            is_success: (200..300).contains(&status),
            is_cache_hit: false,
            error_code: info.map(|i| i.code),
            error_msg: info.map(|i| i.message.clone()),
            duration: Some(
                (ctx.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
            ),
            credits_consumed: credits,
            balance_consumed_usd: usd,
            tokens: None,
            metadata: ctx.metadata.clone(),
            created_at: auditmem_projections::audit_view::millis_floor(now),
        },
        detail,
    }))
}

/// Used by handlers that need "now" in the same form as audit entries.
pub fn now_string() -> String {
    format_time(chrono::Utc::now().timestamp_micros())
}
