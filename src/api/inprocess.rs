//! The `/v1` routes called in process by the other transports: MCP's tools (`crate::mcp`) and
//! the mem0 compatibility API (`crate::compat::mem0`).
//!
//! [`InProcess::call`] makes the REST call a transport's operation is and sends it through the
//! same router the listener serves, so the gate authenticates it with the key the outer request
//! presented, checks its permission, rate limit and credits, runs the same handler and command,
//! and appends its audit entry. The request carries a [`Via`] extension naming the transport
//! and the call, which the gate adds to the entry's `metadata`; no HTTP client can set one.
//! What a transport owns is the translation of its arguments into the request and of the
//! answer's envelope into its own shape; nothing about memories or the log is decided here.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::middleware::from_fn;
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::gate::Via;
use super::state::AppState;
use super::{error, routes};

/// The headers of the outer request a call's `/v1` request carries: the credentials, the
/// caller's own tags and user agent, and the request id the outer layer gave it.
const FORWARDED: [&str; 4] = [
    "authorization",
    "user-agent",
    "x-audit-metadata",
    "x-request-id",
];

/// The `/v1` routes with their gate and the envelope every error gets, as `api::app` serves
/// them; the outer layers (request id, trace, head limits) run on the outer request.
#[derive(Clone)]
pub struct InProcess {
    api: Arc<Router>,
}

/// A call's answer: its HTTP status and its envelope (`{"success": true, "data": ...}` or the
/// error envelope), with the `Retry-After` of a refusal that has one (429, an export quota).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub envelope: Value,
    pub retry_after: Option<HeaderValue>,
}

impl Answer {
    /// The answer's `data`, when it is a success.
    pub fn data(&self) -> Option<&Value> {
        match self.envelope.get("success") {
            Some(Value::Bool(true)) => Some(self.envelope.get("data").unwrap_or(&Value::Null)),
            _ => None,
        }
    }

    /// The error envelope's code and message (a success has none).
    pub fn refusal(&self) -> (i64, String) {
        let code = self
            .envelope
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(5000);
        let message = self
            .envelope
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the service failed")
            .to_string();
        (code, message)
    }

    /// An answer the transport itself gives, in the error envelope.
    pub fn refused(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        Answer {
            status,
            envelope: json!({"success": false, "code": code, "message": message.into(), "data": null}),
            retry_after: None,
        }
    }
}

impl InProcess {
    pub fn new(state: &AppState) -> Self {
        let api: Router = routes::router(state)
            .layer(from_fn(error::envelope_guard))
            .with_state(state.clone());
        InProcess { api: Arc::new(api) }
    }

    /// Calls `method target` with `body` (JSON), as the outer request with `headers` (of which
    /// [`FORWARDED`] are carried) from `peer` asks it, marked `via`.
    pub async fn call(
        &self,
        headers: &HeaderMap,
        peer: Option<ConnectInfo<SocketAddr>>,
        via: Via,
        method: Method,
        target: &str,
        body: Option<&Value>,
    ) -> Answer {
        let bytes = match body.map(serde_json::to_vec).transpose() {
            Ok(b) => b.unwrap_or_default(),
            Err(e) => return Answer::refused(StatusCode::BAD_REQUEST, 4000, e.to_string()),
        };
        let mut req = match Request::builder()
            .method(method)
            .uri(target)
            .body(Body::from(bytes))
        {
            Ok(req) => req,
            Err(e) => {
                return Answer::refused(StatusCode::BAD_REQUEST, 4000, format!("{target}: {e}"))
            }
        };
        for name in FORWARDED {
            if let Some(v) = headers.get(name) {
                req.headers_mut().insert(name, v.clone());
            }
        }
        if body.is_some() {
            req.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some(peer) = peer {
            req.extensions_mut().insert(peer);
        }
        req.extensions_mut().insert(via);
        let resp = match Router::clone(&self.api).oneshot(req).await {
            Ok(resp) => resp,
            Err(never) => match never {},
        };
        let status = resp.status();
        let retry_after = resp.headers().get(header::RETRY_AFTER).cloned();
        let internal = |what: String| {
            tracing::error!(detail = %what, "an in-process call's answer");
            Answer::refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                5000,
                "internal error; the x-request-id header identifies it in the server log",
            )
        };
        let bytes = match axum::body::to_bytes(resp.into_body(), usize::MAX).await {
            Ok(b) => b,
            Err(e) => return internal(format!("reading the answer: {e}")),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(envelope) => Answer {
                status,
                envelope,
                retry_after,
            },
            Err(e) => internal(format!("the answer is not JSON: {e}")),
        }
    }
}

/// A path segment from an id a caller gave (a tool's argument, a mem0 path): it stays one
/// segment (`../audit` is no way to another route).
pub fn segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
