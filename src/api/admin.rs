//! The admin API under `/admin/v1`: tenants, keys, platform audit ingestion, the raw log.
//!
//! Mounted only when `AUDITMEM_ADMIN_TOKEN` is set; the token is compared in constant time.
//! Admin calls are operator actions, not tenant operations: they append their own events
//! (tenants, keys, ingested entries) but no tenant audit entry.

use std::collections::HashMap;

use auditmem_projections::audit_view::format_time;
use auditmem_projections::tenants::Tenant;
use auditmem_projections::{
    AuditDetail, AuditEntry, AuditRecorded, Event, KeyIssued, KeyRevoked, Permission, Plan,
    TenantCreated, TenantUpdated, Tokens,
};
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use base64::Engine;
use rand::RngCore;
use serde::Deserialize;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::envelope::{ApiJson, Created, Data as Done};
use super::error::ApiError;
#[allow(unused_imports)]
use super::openapi::*;
use crate::state::AppState;

pub const MAX_INGEST_ENTRIES: usize = 1000;
/// Ingested entries may be dated at most this far in the future (clock skew of the gateway).
pub const MAX_FUTURE_MICROS: i64 = 5 * 60 * 1_000_000;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/admin/v1/tenants", post(create_tenant).get(list_tenants))
        .route(
            "/admin/v1/tenants/{id}",
            get(get_tenant).patch(update_tenant),
        )
        .route("/admin/v1/tenants/{id}/keys", post(create_key))
        .route("/admin/v1/keys/{key_id}", delete(revoke_key))
        .route("/admin/v1/audit/logs", post(ingest_audit))
        .route("/admin/v1/log", get(stream_log))
        .route("/admin/v1/log/head", get(log_head))
        .route(
            "/admin/v1/log/checkpoint",
            get(latest_checkpoint).post(sign_checkpoint),
        )
        .route("/admin/v1/log/pubkey", get(public_key))
}

pub async fn require_admin(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = state.settings.admin_token.as_deref() else {
        return ApiError::not_found("no such route").into_response();
    };
    let presented = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !token_matches(presented, expected) {
        return ApiError::unauthorized("missing or wrong admin token").into_response();
    }
    next.run(req).await
}

/// Whether the presented admin token is the configured one, in time independent of both.
///
/// Comparing fixed-length digests in constant time (`subtle`) leaks neither how much of a
/// guess is right (a `==` on the strings stops at the first differing byte) nor the token's
/// length. An empty token never matches, whatever is configured.
pub fn token_matches(presented: &str, expected: &str) -> bool {
    let same: bool = blake3::hash(presented.as_bytes())
        .as_bytes()
        .ct_eq(blake3::hash(expected.as_bytes()).as_bytes())
        .into();
    same && !presented.is_empty()
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

fn tenant_json(t: &Tenant) -> Value {
    json!({
        "id": t.id,
        "name": t.name,
        "plan": t.plan,
        "subscription_active": t.subscription_active,
        "credits": t.credits,
        "created_at": format_time(t.created_at),
        "updated_at": format_time(t.updated_at),
    })
}

fn parse_plan(s: &str) -> Result<Plan, ApiError> {
    s.parse()
        .map_err(|e: String| ApiError::bad_request(format!("plan: {e}")))
}

fn check_credits(c: f64) -> Result<f64, ApiError> {
    if c.is_finite() && c >= 0.0 {
        Ok(c)
    } else {
        Err(ApiError::bad_request(
            "credits must be a number of at least 0",
        ))
    }
}

fn check_name(name: &str) -> Result<String, ApiError> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > 200 {
        return Err(ApiError::bad_request("name must be 1 to 200 characters"));
    }
    Ok(n.to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTenant {
    name: String,
    plan: String,
    #[serde(default)]
    subscription_active: Option<bool>,
    #[serde(default)]
    credits: Option<f64>,
}

impl CreateTenant {
    /// The event a valid body appends; every refusal is a 400 naming the field. Split from the
    /// handler so the fuzz targets (`crate::fuzzing`) run exactly this.
    pub(crate) fn checked(
        self,
        tenant_id: Uuid,
        created_at: i64,
    ) -> Result<TenantCreated, ApiError> {
        Ok(TenantCreated {
            tenant_id,
            name: check_name(&self.name)?,
            plan: parse_plan(&self.plan)?,
            subscription_active: self.subscription_active.unwrap_or(true),
            credits: check_credits(self.credits.unwrap_or(0.0))?,
            created_at,
        })
    }
}

#[utoipa::path(post, path = "/admin/v1/tenants", tag = "admin", security(("admin_token" = [])), request_body = CreateTenantRequest,
    responses((status = 201, description = "the tenant", body = TenantEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn create_tenant(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateTenant>,
) -> Result<Created<Value>, ApiError> {
    let id = Uuid::now_v7();
    let created_at = auditmem_projections::audit_view::millis_floor(now());
    let event = body.checked(id, created_at)?;
    state
        .appender
        .append(vec![Event::TenantCreated(event)])
        .await?;
    let t = state
        .projections
        .tenants
        .tenant(&id)?
        .ok_or_else(|| ApiError::internal("tenant missing after create"))?;
    Ok(Created(tenant_json(&t)))
}

#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin", security(("admin_token" = [])), 
    responses((status = 200, description = "every tenant", body = TenantListEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn list_tenants(State(state): State<AppState>) -> Result<Done<Value>, ApiError> {
    let tenants: Vec<Value> = state
        .projections
        .tenants
        .tenants()?
        .iter()
        .map(tenant_json)
        .collect();
    Ok(Done(json!({"tenants": tenants, "total": tenants.len()})))
}

fn tenant_by_path(state: &AppState, id: &str) -> Result<Tenant, ApiError> {
    let not_found = || ApiError::not_found("tenant not found");
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    state.projections.tenants.tenant(&id)?.ok_or_else(not_found)
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")), 
    responses((status = 200, description = "the tenant", body = TenantEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_tenant(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Done<Value>, ApiError> {
    Ok(Done(tenant_json(&tenant_by_path(&state, &id)?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTenant {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    plan: Option<String>,
    #[serde(default)]
    subscription_active: Option<bool>,
    #[serde(default)]
    credits: Option<f64>,
}

impl UpdateTenant {
    /// The event a valid body appends for the tenant `tenant_id` (an empty change is refused).
    /// Split from the handler so the fuzz targets (`crate::fuzzing`) run exactly this.
    pub(crate) fn checked(
        self,
        tenant_id: Uuid,
        updated_at: i64,
    ) -> Result<TenantUpdated, ApiError> {
        if self.name.is_none()
            && self.plan.is_none()
            && self.subscription_active.is_none()
            && self.credits.is_none()
        {
            return Err(ApiError::bad_request(
                "give at least one of name, plan, subscription_active, credits",
            ));
        }
        Ok(TenantUpdated {
            tenant_id,
            name: self.name.as_deref().map(check_name).transpose()?,
            plan: self.plan.as_deref().map(parse_plan).transpose()?,
            subscription_active: self.subscription_active,
            credits: self.credits.map(check_credits).transpose()?,
            updated_at,
        })
    }
}

#[utoipa::path(patch, path = "/admin/v1/tenants/{id}", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")), request_body = UpdateTenantRequest,
    responses((status = 200, description = "the tenant", body = TenantEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn update_tenant(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateTenant>,
) -> Result<Done<Value>, ApiError> {
    let t = tenant_by_path(&state, &id)?;
    let event = body.checked(t.id, auditmem_projections::audit_view::millis_floor(now()))?;
    state
        .appender
        .append(vec![Event::TenantUpdated(event)])
        .await?;
    Ok(Done(tenant_json(&tenant_by_path(&state, &id)?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKey {
    permissions: Vec<String>,
    #[serde(default)]
    name: Option<String>,
}

impl CreateKey {
    /// The event a valid body appends (permissions deduplicated and sorted). Split from the
    /// handler so the fuzz targets (`crate::fuzzing`) run exactly this.
    pub(crate) fn checked(
        self,
        key_id: Uuid,
        tenant_id: Uuid,
        key_hash: [u8; 32],
        created_at: i64,
    ) -> Result<KeyIssued, ApiError> {
        if self.permissions.is_empty() {
            return Err(ApiError::bad_request("permissions must name at least one of audit.read, audit.export, memory.read, memory.write"));
        }
        let mut permissions = Vec::new();
        for p in &self.permissions {
            let p: Permission = p
                .parse()
                .map_err(|e: String| ApiError::bad_request(format!("permissions: {e}")))?;
            if !permissions.contains(&p) {
                permissions.push(p);
            }
        }
        permissions.sort();
        Ok(KeyIssued {
            key_id,
            tenant_id,
            key_hash,
            permissions,
            name: self.name.as_deref().map(check_name).transpose()?,
            created_at,
        })
    }
}

/// A new API key: 32 random bytes, shown once, stored only as its blake3 hash.
pub fn new_api_key() -> (String, [u8; 32]) {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let key = format!(
        "amk_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    let hash = *blake3::hash(key.as_bytes()).as_bytes();
    (key, hash)
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/keys", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")), request_body = CreateKeyRequest,
    responses((status = 201, description = "the key, shown once", body = IssuedKeyEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CreateKey>,
) -> Result<Created<Value>, ApiError> {
    let t = tenant_by_path(&state, &id)?;
    // The key is drawn before the body is checked; a refused body just discards it.
    let (api_key, key_hash) = new_api_key();
    let key_id = Uuid::now_v7();
    let created_at = auditmem_projections::audit_view::millis_floor(now());
    let event = body.checked(key_id, t.id, key_hash, created_at)?;
    let (name, permissions) = (event.name.clone(), event.permissions.clone());
    state.appender.append(vec![Event::KeyIssued(event)]).await?;
    Ok(Created(json!({
        "id": key_id,
        "tenant_id": t.id,
        "name": name,
        "api_key": api_key,
        "permissions": permissions,
        "created_at": format_time(created_at),
    })))
}

#[utoipa::path(delete, path = "/admin/v1/keys/{key_id}", tag = "admin", security(("admin_token" = [])), params(("key_id" = String, Path, description = "key_id")), 
    responses((status = 200, description = "revoked", body = RevokedKeyEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope), (status = 404, description = "key not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn revoke_key(
    State(state): State<AppState>,
    Path(key_id): Path<String>,
) -> Result<Done<Value>, ApiError> {
    let not_found = || ApiError::not_found("key not found");
    let id = Uuid::parse_str(&key_id).map_err(|_| not_found())?;
    let key = state
        .projections
        .tenants
        .key_by_id(&id)?
        .ok_or_else(not_found)?;
    let revoked_at = match key.revoked_at {
        Some(at) => at,
        None => {
            let at = auditmem_projections::audit_view::millis_floor(now());
            state
                .appender
                .append(vec![Event::KeyRevoked(KeyRevoked {
                    key_id: id,
                    tenant_id: key.tenant_id,
                    revoked_at: at,
                })])
                .await?;
            at
        }
    };
    Ok(Done(
        json!({"id": id, "revoked": true, "revoked_at": format_time(revoked_at)}),
    ))
}

#[utoipa::path(get, path = "/admin/v1/log/head", tag = "admin", security(("admin_token" = [])), 
    responses((status = 200, description = "{seq, hash}", body = AdminEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn log_head(State(state): State<AppState>) -> Done<Value> {
    let head = state.appender.head();
    Done(json!({"seq": head.seq, "hash": hex::encode(head.hash)}))
}

#[utoipa::path(get, path = "/admin/v1/log/checkpoint", tag = "admin", security(("admin_token" = [])), 
    responses((status = 200, description = "the latest signed checkpoint", body = AdminEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn latest_checkpoint(
    State(state): State<AppState>,
) -> Result<Done<Value>, ApiError> {
    match state.signer.latest() {
        Some(cp) => Ok(Done(json!(cp))),
        None => {
            let head = state.appender.head();
            if head.seq == 0 {
                return Err(ApiError::not_found("no checkpoint yet: the log is empty"));
            }
            let cp = state.signer.sign(head).map_err(ApiError::internal)?;
            Ok(Done(json!(cp)))
        }
    }
}

#[utoipa::path(post, path = "/admin/v1/log/checkpoint", tag = "admin", security(("admin_token" = [])), 
    responses((status = 200, description = "a checkpoint signed now", body = AdminEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn sign_checkpoint(
    State(state): State<AppState>,
) -> Result<Done<Value>, ApiError> {
    let head = state.appender.head();
    if head.seq == 0 {
        return Err(ApiError::bad_request("the log is empty: nothing to sign"));
    }
    let cp = state.signer.sign(head).map_err(ApiError::internal)?;
    Ok(Done(json!(cp)))
}

#[utoipa::path(get, path = "/admin/v1/log/pubkey", tag = "admin", security(("admin_token" = [])), 
    responses((status = 200, description = "the ed25519 public key", body = AdminEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn public_key(State(state): State<AppState>) -> Done<Value> {
    Done(json!({"public_key": state.signer.public_key_hex(), "algorithm": "ed25519"}))
}

/// `GET /admin/v1/log?from=SEQ`: every stored record from `from` on as NDJSON lines
/// `{"seq": N, "record": "<base64 of the stored bytes>"}`, for client-side verification.
#[utoipa::path(get, path = "/admin/v1/log", tag = "admin", security(("admin_token" = [])), params(("from" = Option<u64>, Query, minimum = 1, description = "first seq, default 1")), 
    responses((status = 200, description = "NDJSON lines {seq, record (base64)}", content_type = "application/x-ndjson"), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn stream_log(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let from = match q.get("from") {
        None => 1,
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| ApiError::bad_request("from must be a seq of at least 1"))?,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let log = state.log.clone();
    tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(256 * 1024);
        for item in log.records_from(from) {
            match item {
                Ok((seq, value)) => {
                    let line = json!({"seq": seq, "record": base64::engine::general_purpose::STANDARD.encode(&value)});
                    let _ = serde_json::to_writer(&mut buf, &line);
                    buf.push(b'\n');
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            }
            if buf.len() >= 256 * 1024 && tx.blocking_send(Ok(std::mem::take(&mut buf))).is_err() {
                return;
            }
        }
        if !buf.is_empty() {
            let _ = tx.blocking_send(Ok(buf));
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(Body::from_stream(stream))
        .map_err(ApiError::internal)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IngestBody {
    pub(crate) entries: Vec<IngestEntry>,
}

/// A parse error of an ingestion body, naming the entry as validation errors do
/// (`entries[3]: http_status: invalid type ...`).
fn ingest_parse_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if let Some((index, field)) = path
        .strip_prefix("entries[")
        .and_then(|rest| rest.split_once(']'))
    {
        let field = field.trim_start_matches('.');
        let field = if field.is_empty() {
            String::new()
        } else {
            format!("{field}: ")
        };
        return ApiError::bad_request(format!("entries[{index}]: {field}{inner}"));
    }
    ApiError::bad_request(format!("invalid JSON body: {inner}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IngestEntry {
    tenant_id: Uuid,
    action: String,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    model_id: Option<String>,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    gateway_id: Option<String>,
    #[serde(default)]
    ip_address: Option<String>,
    #[serde(default)]
    user_agent: Option<String>,
    #[serde(deserialize_with = "whole::number")]
    http_status: u16,
    #[serde(default, deserialize_with = "whole::optional")]
    error_code: Option<i64>,
    #[serde(default)]
    error_msg: Option<String>,
    #[serde(default)]
    duration: Option<f64>,
    #[serde(default)]
    credits_consumed: Option<f64>,
    #[serde(default)]
    balance_consumed_usd: Option<f64>,
    #[serde(default)]
    is_cache_hit: Option<bool>,
    #[serde(default)]
    tokens: Option<IngestTokens>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    request_body: Option<Value>,
    #[serde(default)]
    response_body: Option<Value>,
    #[serde(default)]
    input_content: Option<Value>,
    #[serde(default)]
    output_content: Option<Value>,
    #[serde(default)]
    rag_query: Option<Vec<String>>,
    #[serde(default)]
    rag_results: Option<Vec<Value>>,
}

/// A RAG hit as the interface describes it: `content` a string, `similarity` a number,
/// `source` an object; other keys are the gateway's and kept.
fn rag_result_shape(r: &Value) -> bool {
    r.get("content").is_some_and(Value::is_string)
        && r.get("similarity").is_some_and(Value::is_number)
        && r.get("source").is_some_and(Value::is_object)
}

/// Token usage as ingested: the counts are whole numbers (see [`whole`]).
#[derive(Deserialize)]
struct IngestTokens {
    #[serde(deserialize_with = "whole::number")]
    prompt_tokens: u64,
    #[serde(deserialize_with = "whole::number")]
    completion_tokens: u64,
    #[serde(deserialize_with = "whole::number")]
    total_tokens: u64,
}

impl From<IngestTokens> for Tokens {
    fn from(t: IngestTokens) -> Self {
        Tokens {
            prompt_tokens: t.prompt_tokens,
            completion_tokens: t.completion_tokens,
            total_tokens: t.total_tokens,
        }
    }
}

/// Fields the interface calls numbers that hold whole numbers (`http_status`, `error_code`,
/// token counts). A whole number written with a fraction, `200.0`, is that number: encoders of
/// floats send it, JSON Schema's "integer" admits it, and search's `top_k` takes it too. A
/// fraction (`200.5`) or a value out of the field's range is refused, naming the field.
mod whole {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer};

    fn of<E: Error, T: TryFrom<i128>>(n: serde_json::Number) -> Result<T, E> {
        let v = crate::api::whole_number(&n)
            .ok_or_else(|| E::custom(format!("expected a whole number, got {n}")))?;
        T::try_from(v).map_err(|_| E::custom(format!("{n} is out of range")))
    }

    pub(super) fn number<'de, D: Deserializer<'de>, T: TryFrom<i128>>(d: D) -> Result<T, D::Error> {
        of(serde_json::Number::deserialize(d)?)
    }

    pub(super) fn optional<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Option::<serde_json::Number>::deserialize(d)?
            .map(of)
            .transpose()
    }
}

fn valid_action(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= 100
        && a.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// `POST /admin/v1/audit/logs`: entries the gateway reports (gateway.chat, rag.query, ...),
/// validated one by one, appended as one atomic group.
#[utoipa::path(post, path = "/admin/v1/audit/logs", tag = "admin", security(("admin_token" = [])), request_body = super::openapi::IngestRequest,
    responses((status = 200, description = "the ids of the entries", body = AdminEnvelope), (status = 400, description = "invalid request (4000)", body = ErrorEnvelope), (status = 401, description = "missing or wrong admin token (4010)", body = ErrorEnvelope)))]
pub(crate) async fn ingest_audit(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<Done<Value>, ApiError> {
    let body = parse_ingest(&headers, &body)?;
    let now = now();
    let mut tenants: HashMap<Uuid, bool> = HashMap::new();
    let mut events = Vec::with_capacity(body.entries.len());
    let mut ids = Vec::with_capacity(body.entries.len());
    for (i, e) in body.entries.into_iter().enumerate() {
        let known = match tenants.get(&e.tenant_id) {
            Some(k) => *k,
            None => {
                let k = state.projections.tenants.tenant(&e.tenant_id)?.is_some();
                tenants.insert(e.tenant_id, k);
                k
            }
        };
        if !known {
            return Err(ApiError::bad_request(format!(
                "entries[{i}]: unknown tenant_id {}",
                e.tenant_id
            )));
        }
        let id = Uuid::now_v7();
        ids.push(id);
        events.push(Event::AuditRecorded(Box::new(e.checked(i, id, now)?)));
    }
    state.appender.append(events).await?;
    Ok(Done(json!({"ids": ids})))
}

/// An ingestion body parsed and its entry count checked; the entries themselves are checked by
/// [`IngestEntry::checked`]. Split from the handler so the fuzz targets run exactly this.
pub(crate) fn parse_ingest(
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<IngestBody, ApiError> {
    // Parsed straight into typed entries (never a JSON tree first: that was a quarter of the
    // ingestion CPU). Only a body that fails is parsed again with its path tracked, to name
    // the entry: tracking costs a string per key.
    super::envelope::require_json(headers)?;
    let body: IngestBody = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(plain) => {
            let tracked = serde_path_to_error::deserialize::<_, IngestBody>(
                &mut serde_json::Deserializer::from_slice(body),
            );
            return Err(match tracked {
                Err(e) => ingest_parse_error(e),
                Ok(_) => ApiError::bad_request(format!("invalid JSON body: {plain}")),
            });
        }
    };
    if body.entries.is_empty() || body.entries.len() > MAX_INGEST_ENTRIES {
        return Err(ApiError::bad_request(format!(
            "entries must hold 1 to {MAX_INGEST_ENTRIES} entries"
        )));
    }
    Ok(body)
}

impl IngestEntry {
    /// The event entry `i` of a body appends as audit entry `id`, received at `now`; every
    /// refusal is a 400 naming `entries[i]` and the field. Whether the tenant exists is the
    /// caller's check (it needs the state). Split from the handler so the fuzz targets run
    /// exactly this.
    pub(crate) fn checked(self, i: usize, id: Uuid, now: i64) -> Result<AuditRecorded, ApiError> {
        let e = self;
        let bad = |msg: String| ApiError::bad_request(format!("entries[{i}]: {msg}"));
        if !valid_action(&e.action) {
            return Err(bad(
                "action must be a dotted name such as gateway.chat".into()
            ));
        }
        if !(100..=599).contains(&e.http_status) {
            return Err(bad(
                "http_status must be an HTTP status code (100 to 599)".into()
            ));
        }
        let created_at = match &e.created_at {
            None => now,
            Some(s) => super::audit::parse_time("created_at", s).map_err(|err| bad(err.message))?,
        };
        if created_at > now + MAX_FUTURE_MICROS {
            return Err(bad("created_at is more than 5 minutes in the future".into()));
        }
        for (field, v) in [
            ("duration", e.duration),
            ("credits_consumed", e.credits_consumed),
            ("balance_consumed_usd", e.balance_consumed_usd),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    return Err(bad(format!("{field} must be a number of at least 0")));
                }
            }
        }
        if let Some(m) = &e.metadata {
            if !m.is_object() {
                return Err(bad("metadata must be a JSON object".into()));
            }
        }
        // The interface's types for the detail fields (null is always allowed, and is `None`).
        let object = Value::is_object as fn(&Value) -> bool;
        for (field, v, fits, kinds) in [
            ("request_body", &e.request_body, object, "a JSON object"),
            ("response_body", &e.response_body, object, "a JSON object"),
            (
                "input_content",
                &e.input_content,
                |v: &Value| v.is_object() || v.is_array(),
                "a JSON object, array",
            ),
            (
                "output_content",
                &e.output_content,
                |v: &Value| v.is_object() || v.is_string(),
                "a string, a JSON object",
            ),
        ] {
            if v.as_ref().is_some_and(|v| !fits(v)) {
                return Err(bad(format!("{field} must be {kinds} or null")));
            }
        }
        if let Some(i) = e
            .rag_results
            .iter()
            .flatten()
            .position(|r| !rag_result_shape(r))
        {
            return Err(bad(format!(
                "rag_results[{i}] must be an object with content (string), similarity (number) and source (object)"
            )));
        }
        // Empty strings are stored as null: an export cell cannot tell the two apart.
        let text = |v: Option<String>| v.filter(|s| !s.is_empty());
        Ok(AuditRecorded {
            tenant_id: e.tenant_id,
            entry: AuditEntry {
                id,
                action: e.action,
                model_id: text(e.model_id),
                project_id: text(e.project_id),
                gateway_id: text(e.gateway_id),
                ip_address: text(e.ip_address),
                user_agent: text(e.user_agent),
                http_status: e.http_status,
                is_success: (200..300).contains(&e.http_status),
                is_cache_hit: e.is_cache_hit.unwrap_or(false),
                error_code: e.error_code,
                error_msg: text(e.error_msg),
                duration: e.duration,
                credits_consumed: e.credits_consumed.unwrap_or(0.0),
                balance_consumed_usd: e.balance_consumed_usd.unwrap_or(0.0),
                tokens: e.tokens.map(Tokens::from),
                metadata: e.metadata,
                created_at: auditmem_projections::audit_view::millis_floor(created_at),
            },
            detail: AuditDetail {
                request_body: e.request_body,
                response_body: e.response_body,
                input_content: e.input_content,
                output_content: e.output_content,
                rag_query: e.rag_query,
                rag_results: e.rag_results,
                memory_query: None,
                memory_results: None,
                response_json: None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn admin_token_matches_only_itself() {
        let expected = "s3cret-admin-token";
        assert!(token_matches(expected, expected));
        for wrong in [
            "",
            "s3cret-admin-toke",
            "s3cret-admin-token ",
            "S3cret-admin-token",
            "s3cret-admin-tokem",
            "x",
        ] {
            assert!(!token_matches(wrong, expected), "{wrong:?} matched");
        }
        // An empty presented token is refused even against an empty configuration (the
        // server never mounts the admin API with one, but the helper must not rely on that).
        assert!(!token_matches("", ""));
    }
}
