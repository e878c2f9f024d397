//! The HTTP surface: `app(state)` builds the whole router.
//!
//! Layers, outermost first: request id (set, propagate), tracing, the envelope guard (every
//! error becomes our envelope), the timeout, the body limit. `/v1` routes sit behind the gate
//! (auth, the per-key rate limit, audit recording); `/admin/v1` routes behind the admin token.

pub mod admin;
pub mod audit;
pub mod envelope;
pub mod error;
pub mod export;
pub mod gate;
pub mod memory;
pub mod metrics;
pub mod openapi;
pub mod rate_limit;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::state::AppState;
use error::ApiError;

/// The whole number a JSON number stands for, if it is one: an integer, or a float with no
/// fraction (`5.0`, as encoders of floats write it and JSON Schema's "integer" admits) below
/// 2^63 in magnitude, where the conversion is exact. Fields the interface calls numbers that
/// hold counts or codes (`top_k`, `http_status`, ...) read through this.
pub(crate) fn whole_number(n: &serde_json::Number) -> Option<i128> {
    n.as_i128().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i128)
    })
}

pub fn app(state: AppState) -> Router {
    let v1 = Router::new()
        .merge(audit::router())
        .merge(export::router())
        .merge(memory::router())
        .route_layer(from_fn_with_state(state.clone(), gate::v1_gate));
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(openapi::serve_document));
    if state.settings.admin_token.is_some() {
        router = router.merge(
            admin::router().route_layer(from_fn_with_state(state.clone(), admin::require_admin)),
        );
    }
    // Outside `/v1`: refused by Content-Length before a byte of the body is read, and 408
    // after the timeout. `/v1` is under neither layer: its gate refuses the same bodies once the
    // key is known and times out the same requests itself, so that each refusal is recorded in
    // the tenant's audit log (every operation is), and so that a timeout never cuts off the
    // recording of an operation that was done.
    let router = router
        .layer(RequestBodyLimitLayer::new(state.settings.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.settings.request_timeout,
        ))
        .merge(v1);
    let request_id = HeaderName::from_static("x-request-id");
    router
        .route_layer(from_fn(metrics::track))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(from_fn(error::envelope_guard))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

async fn healthz(axum::extract::State(state): axum::extract::State<AppState>) -> Response {
    let head = state.appender.head();
    if state
        .appender
        .stats
        .failed
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return ApiError::new(
            crate::registry::ErrorCode::Unavailable,
            "the log refuses writes after a storage failure",
        )
        .into_response();
    }
    axum::Json(json!({"success": true, "data": {"status": "ok", "head_seq": head.seq}}))
        .into_response()
}

async fn fallback() -> ApiError {
    ApiError::not_found("no such route")
}
