//! mem0's platform REST API, the subset `mem0ai`'s `MemoryClient` calls, under
//! `/compat/mem0` (docs/COMPAT.md has the table).
//!
//! **Same gate.** A handler here reads mem0's request, makes the `/v1` call (or calls) it is
//! through `api::inprocess`, and writes our answer in mem0's shape. The call carries the key
//! the client sent (`Authorization: Token <key>`, mem0's scheme, accepted on this prefix only
//! and passed on as `Bearer`), so the gate decides permission, rate limit, credits and the
//! key's scope, and the audit entry's `metadata` names `"transport": "mem0"` and
//! `"mem0_call"` (`add`, `search`, ...). Nothing here reads or writes memories itself.
//!
//! **Scope.** mem0's `user_id`, `agent_id` and `run_id` are our `user_id`, `agent_id` and
//! `session_id`, given in mem0's v2 `filters` (or at the top level of an add); a scoped key
//! is confined by the gate as on `/v1`.
//!
//! **Errors** are what the client turns into its exceptions: the HTTP status of our envelope
//! (401 → `AuthenticationError`, 404 → `MemoryNotFoundError`, 400 → `ValidationError`, ...)
//! with `{"detail": <our message>, "code": <our code>}`, `detail` being what the client shows.
//! `GET /v1/ping/` (the key check the client makes when it is built) authenticates only: it
//! reads no data and is not an audit entry, as a request refused for its key is not.

mod routes;
mod shape;

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::api::error::{Enveloped, ErrorInfo};
use crate::api::gate::{identify, Transport, Via};
use crate::api::inprocess::{Answer, InProcess};
use crate::api::state::AppState;

/// The prefix the API is served under.
pub const PREFIX: &str = "/compat/mem0";

/// What the handlers share: the `/v1` routes in process, and the service's state for the
/// key check of `ping` and the body limit.
#[derive(Clone)]
struct Mem0 {
    api: InProcess,
    state: AppState,
}

/// The mem0 routes, as `api::app` nests them under [`PREFIX`].
pub fn router(state: &AppState) -> Router {
    let m = Mem0 {
        api: InProcess::new(state),
        state: state.clone(),
    };
    Router::new()
        .route("/v1/ping/", get(ping))
        .route("/v3/memories/add/", post(routes::add))
        .route("/v3/memories/", post(routes::get_all))
        .route("/v3/memories/search/", post(routes::search))
        .route(
            "/v1/memories/{memory_id}/",
            get(routes::get)
                .put(routes::update)
                .delete(routes::delete_one),
        )
        .route("/v1/memories/{memory_id}/history/", get(routes::history))
        .route("/v1/memories/", delete(routes::delete_all))
        .route("/v1/entities/", get(routes::users))
        .route(
            "/v2/entities/{entity_type}/{entity_name}/",
            delete(routes::delete_user),
        )
        .fallback(|| async { Refused::new(StatusCode::NOT_FOUND, 4040, "no such route") })
        .method_not_allowed_fallback(|| async {
            Refused::new(
                StatusCode::METHOD_NOT_ALLOWED,
                4050,
                "method not allowed on this route",
            )
        })
        .with_state(m)
}

/// A refusal in mem0's error shape, carrying our envelope's code and message.
#[derive(Debug)]
struct Refused {
    status: StatusCode,
    code: i64,
    message: String,
    retry_after: Option<HeaderValue>,
}

impl Refused {
    fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Refused {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Refused::new(StatusCode::BAD_REQUEST, 4000, message)
    }

    /// A field of mem0's request that this API does not map (docs/COMPAT.md).
    fn unsupported(what: &str) -> Self {
        Refused::bad_request(format!(
            "{what} is not supported by auditmem's mem0 compatibility API (docs/COMPAT.md)"
        ))
    }

    /// The refusal of a `/v1` call, as it answered.
    fn of(answer: &Answer) -> Self {
        let (code, message) = answer.refusal();
        Refused {
            retry_after: answer.retry_after.clone(),
            ..Refused::new(answer.status, code, message)
        }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let body = json!({ "detail": self.message, "code": self.code });
        let mut resp = (self.status, Json(body)).into_response();
        // Already the answer's final shape: the outer envelope guard leaves it as it is.
        resp.extensions_mut().insert(Enveloped);
        resp.extensions_mut().insert(ErrorInfo {
            code: self.code,
            message: self.message,
        });
        if let Some(wait) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, wait);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Token"));
        }
        resp
    }
}

type Answered = Result<Response, Refused>;

/// One mem0 request: its headers as the `/v1` call carries them (the key as `Bearer`) and its
/// peer, for the audit entry's address.
struct Call {
    headers: HeaderMap,
    peer: Option<ConnectInfo<SocketAddr>>,
}

impl<S: Send + Sync> FromRequestParts<S> for Call {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Refused> {
        let mut headers = parts.headers.clone();
        let key = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Token ")
                    .or_else(|| v.strip_prefix("token "))
                    .or_else(|| v.strip_prefix("Bearer "))
            })
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                Refused::new(
                    StatusCode::UNAUTHORIZED,
                    4010,
                    "missing Authorization: Token <API key> header",
                )
            })?;
        let bearer = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            Refused::new(
                StatusCode::UNAUTHORIZED,
                4010,
                "the Authorization header must be 'Token <API key>'",
            )
        })?;
        headers.insert(header::AUTHORIZATION, bearer);
        Ok(Call {
            headers,
            peer: parts.extensions.get::<ConnectInfo<SocketAddr>>().cloned(),
        })
    }
}

impl Mem0 {
    /// Calls `method target` with `body` for the mem0 call `call`; the `data` of a success,
    /// the refusal otherwise.
    async fn v1(
        &self,
        c: &Call,
        call: &'static str,
        method: Method,
        target: &str,
        body: Option<Value>,
    ) -> Result<Value, Refused> {
        let via = Via {
            transport: Transport::Mem0,
            call,
            binding: None,
        };
        let answer = self
            .api
            .call(&c.headers, c.peer, via, method, target, body.as_ref())
            .await;
        match answer.data() {
            Some(data) => Ok(data.clone()),
            None => Err(Refused::of(&answer)),
        }
    }
}

/// A JSON object body (mem0 sends one on every write): empty is `{}`.
fn object(body: &Bytes) -> Result<serde_json::Map<String, Value>, Refused> {
    if body.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Refused::bad_request("the body must be a JSON object")),
        Err(e) => Err(Refused::bad_request(format!("invalid JSON body: {e}"))),
    }
}

/// The client's key check: the key's tenant, read only (see the module doc).
async fn ping(State(m): State<Mem0>, c: Call) -> Answered {
    let (tenant, _) = identify(&m.state, &c.headers)
        .map_err(|e| Refused::new(e.code.status(), e.code.code(), e.message))?;
    let id = tenant.id.to_string();
    Ok(Json(json!({
        "status": "ok",
        "message": "API key is valid",
        "org_id": id,
        "project_id": id,
        "user_email": null,
    }))
    .into_response())
}

/// The body of a request, read within the service's body limit.
async fn body_of(m: &Mem0, req: Request) -> Result<Bytes, Refused> {
    axum::body::to_bytes(req.into_body(), m.state.settings.max_body_bytes)
        .await
        .map_err(|_| {
            Refused::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                4130,
                format!(
                    "the request body is larger than {} bytes",
                    m.state.settings.max_body_bytes
                ),
            )
        })
}
