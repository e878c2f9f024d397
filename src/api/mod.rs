//! The HTTP surface: [`app`] builds the whole router from the route table ([`routes`]) and
//! the console's static pages ([`console`], outside the API document); [`listener`] serves
//! it (connection caps, the header-read timeout, graceful shutdown).
//!
//! Layers, outermost first: request id (set, propagate), tracing, the limits of the request
//! target and the headers ([`head_limits`]: 414, 431), the listener's [`Surface`] (the admin
//! API alone, or everything else, with `--admin-listen`), the envelope guard (every error
//! becomes our envelope), a cluster's read-your-writes wait ([`position`]), the metrics of each
//! route; then per route what `routes` installs (the
//! `/v1` gate, or the admin token with the body limit and the timeout).
//!
//! A handler takes typed extractors ([`extract::Json`], [`extract::Query`]: the wire shapes of
//! `crate::wire`, checked) and returns a typed answer: a success envelope, wrapped in
//! [`gate::Recorded`] on `/v1` routes when it carries the operation's events.

pub mod admin;
pub mod audit;
pub mod client_ip;
pub mod console;
pub mod envelope;
pub mod erasure;
pub mod error;
pub mod export;
pub mod extract;
pub mod gate;
pub mod inprocess;
pub mod listener;
pub mod memory;
pub mod metrics;
pub mod openapi;
pub mod position;
pub mod rate_limit;
pub mod routes;
pub mod scope;
pub mod state;
pub mod stream;
pub mod transparency;
pub mod webhooks;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state, Next};
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

/// Longest request target (path and query) served, bytes; longer: 414 (4140). The longest
/// the API needs (an audit list with both times, an action and a cursor) is under 300.
pub const MAX_TARGET_BYTES: usize = 8 * 1024;

/// Most header bytes served (names and values, 4 bytes a line for `: ` and CRLF); more: 431
/// (4310). Generous for tokens, cookies, `X-Audit-Metadata` and proxies' headers.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// What a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// Every route: one listener.
    All,
    /// Every route but the admin API, which is 404 here (`--admin-listen` serves it).
    Public,
    /// The admin API, with the console and `/metrics` that its operator view reads; every
    /// other route is 404.
    Admin,
}

/// Every route on one listener.
pub fn app(state: AppState) -> Router {
    app_on(state, Surface::All)
}

/// The routes of `surface`.
pub fn app_on(state: AppState, surface: Surface) -> Router {
    // The C2SP tlog-tiles read API: hashes and signed tree heads, nobody's data, and no key
    // to limit by: limited per source instead.
    let tlog = Router::new()
        .route("/log/checkpoint", get(transparency::checkpoint))
        .route("/log/tile/{*path}", get(transparency::tile))
        .route_layer(from_fn_with_state(
            state.clone(),
            transparency::limit_per_source,
        ));
    // The operational routes, outside the API document.
    let operations = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(openapi::serve_document))
        .merge(tlog)
        .layer(RequestBodyLimitLayer::new(state.settings.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.settings.request_timeout,
        ));
    let request_id = HeaderName::from_static("x-request-id");
    operations
        // The console's static pages (docs/CONSOLE.md), outside the API document too.
        .merge(console::router())
        .merge(routes::router(&state))
        // MCP's streamable HTTP (`crate::mcp`): every request needs a key; each tool call
        // then goes through the `/v1` gate like a REST call.
        .nest_service(
            "/mcp",
            tower::ServiceBuilder::new()
                .layer(from_fn_with_state(state.clone(), require_key))
                .service(crate::mcp::service(&state)),
        )
        // mem0's platform API (`crate::compat::mem0`): each call goes through the `/v1`
        // gate as the REST call it maps to.
        .nest_service(
            crate::compat::mem0::PREFIX,
            crate::compat::mem0::router(&state),
        )
        .route_layer(from_fn(metrics::track))
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(from_fn_with_state(state.clone(), position::await_position))
        .layer(from_fn(error::envelope_guard))
        .layer(from_fn_with_state(surface, surface_guard))
        .layer(from_fn(head_limits))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

/// 414 for a request target over [`MAX_TARGET_BYTES`], 431 for headers over
/// [`MAX_HEADER_BYTES`], in the envelope, before any route (a `/v1` request refused here is no
/// tenant's entry: its key is not looked at). Heads beyond hyper's own limits never get here:
/// hyper answers those itself, without a body (docs/API.md, "Limits of the HTTP stack").
async fn head_limits(req: Request, next: Next) -> Response {
    let uri = req.uri();
    let target = uri.path_and_query().map_or(0, |pq| pq.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    if target > MAX_TARGET_BYTES {
        return ApiError::new(
            ErrorCode::UriTooLong,
            format!("the request target is {target} bytes; at most {MAX_TARGET_BYTES} are served"),
        )
        .into_response();
    }
    let headers: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if headers > MAX_HEADER_BYTES {
        return ApiError::new(
            ErrorCode::HeadersTooLarge,
            format!(
                "the request's headers are {headers} bytes; at most {MAX_HEADER_BYTES} are served"
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// 404 for a route of the other surface, saying which listener serves it. Decided by the
/// route the router matched, not by the path's text, so no spelling of a path reaches a route
/// of the other listener.
async fn surface_guard(State(surface): State<Surface>, req: Request, next: Next) -> Response {
    if let Some(route) = req.extensions().get::<MatchedPath>() {
        let route = route.as_str();
        let admin = route.starts_with("/admin/");
        // The console's operator view calls the admin API and `/metrics` on its own origin:
        // served on the admin listener too, it reaches them there.
        let operator = admin || route.starts_with("/console") || route == "/metrics";
        let refused = match surface {
            Surface::All => None,
            Surface::Public => admin.then_some(admin::ADMIN_ELSEWHERE),
            Surface::Admin => (!operator).then_some(admin::ADMIN_ONLY),
        };
        if let Some(why) = refused {
            return ApiError::not_found(why).into_response();
        }
    }
    next.run(req).await
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

/// 401 in the envelope for an `/mcp` request without a valid API key, as the `/v1` gate
/// answers one: the tools are listed to tenants only.
async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match gate::identify(&state, req.headers()) {
        Ok(_) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn fallback() -> ApiError {
    ApiError::not_found("no such route")
}
