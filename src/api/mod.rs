//! The HTTP surface: [`app`] builds the whole router from the route table ([`routes`]).
//!
//! Layers, outermost first: request id (set, propagate), tracing, the envelope guard (every
//! error becomes our envelope), the metrics of each route; then per route what `routes`
//! installs (the `/v1` gate, or the admin token with the body limit and the timeout).
//!
//! A handler takes typed extractors ([`extract::Json`], [`extract::Query`]: the wire shapes of
//! `crate::wire`, checked) and returns a typed answer: a success envelope, wrapped in
//! [`gate::Recorded`] on `/v1` routes when it carries the operation's events.

pub mod admin;
pub mod audit;
pub mod envelope;
pub mod error;
pub mod export;
pub mod extract;
pub mod gate;
pub mod memory;
pub mod metrics;
pub mod openapi;
pub mod rate_limit;
pub mod routes;
pub mod state;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::from_fn;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::registry::ErrorCode;
use crate::wire::admin::Health;
use crate::wire::envelope::Data;
use error::ApiError;
use state::AppState;

pub fn app(state: AppState) -> Router {
    // The operational routes, outside the API document.
    let operations = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(openapi::serve_document))
        .layer(RequestBodyLimitLayer::new(state.settings.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.settings.request_timeout,
        ));
    let request_id = HeaderName::from_static("x-request-id");
    operations
        .merge(routes::router(&state))
        .route_layer(from_fn(metrics::track))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(from_fn(error::envelope_guard))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

/// `200 ok` while the log takes appends; `503` (5030) "degraded: ..." with the reason while
/// it refuses them (after a storage failure, on a read-only or full data disk): every `/v1`
/// request appends its audit entry, so such an instance can answer none of them, and a load
/// balancer should send them elsewhere. The reason is looked up on each call (a `statvfs`),
/// so the answer turns back to ok as soon as space returns.
async fn healthz(State(state): State<AppState>) -> Response {
    if let Some(why) = state.appender.refusing() {
        return ApiError::new(
            ErrorCode::Unavailable,
            format!("degraded: {why}; every append, and so every audited request, is refused"),
        )
        .into_response();
    }
    Data(Health {
        status: "ok",
        head_seq: state.appender.head().seq,
    })
    .into_response()
}

async fn fallback() -> ApiError {
    ApiError::not_found("no such route")
}
