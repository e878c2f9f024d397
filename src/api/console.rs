//! The console (docs/CONSOLE.md): a static, build-free web front end under `/console/`, for
//! auditors, operators and developers. It owns no data and no logic of the service: its pages
//! are plain ES modules that call the same public and admin APIs a key or the admin token
//! reaches with curl, so the console can do nothing its caller's key cannot.
//!
//! The assets (`console/` at the repository's root) are compiled into the binary, so there is
//! nothing to deploy beside it and nothing read from disk at run time. Every answer under
//! `/console/` (a 404 included) carries a strict Content-Security-Policy: scripts, styles and
//! connections from this origin only, no inline script or style, no framing, no forms posted
//! elsewhere; and no cookie is ever set (the key lives in the tab's `sessionStorage`).
//!
//! The routes sit outside the route table and so outside the OpenAPI document, like
//! `/healthz`: they are not part of the API.

use axum::extract::Path;
use axum::http::{header, HeaderValue};
use axum::middleware::{from_fn, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::state::AppState;

/// The policy of every console answer. There is no inline script or style anywhere, so
/// neither `'unsafe-inline'` nor a nonce is needed; `img-src data:` admits inline images (never
/// a script), and the chart is SVG elements built in the page, which no `img-src` governs.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
form-action 'self'";

/// One embedded asset: its name under `/console/`, its content type and its bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $ct:expr) => {
        Asset {
            name: $name,
            content_type: $ct,
            body: include_bytes!(concat!("../../console/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the console serves. A file added to `console/` is served only once listed here,
/// so nothing lands in the binary by accident (tests/it/console.rs checks each one's type).
const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("qualifiers.js", JS),
    asset!("verify.js", JS),
    asset!("blake3.js", JS),
    asset!("msgpack.js", JS),
    asset!("audit.js", JS),
    asset!("exports.js", JS),
    asset!("memories.js", JS),
    asset!("operator.js", JS),
    asset!("metrics.js", JS),
];

/// Every served asset's name and content type (for the tests).
pub fn assets() -> impl Iterator<Item = (&'static str, &'static str)> {
    ASSETS.iter().map(|a| (a.name, a.content_type))
}

/// The console's routes, with its headers on each answer.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(|| async { serve("index.html") }))
        .route(
            "/console/{*file}",
            get(|Path(file): Path<String>| async move { serve(&file) }),
        )
        .layer(from_fn(headers))
}

fn serve(name: &str) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(asset) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response(),
        None => ApiError::not_found("no such console asset").into_response(),
    }
}

/// The security headers of every console answer. `no-cache` makes the browser revalidate, so
/// a new binary's console is what a reload shows (the assets are small).
async fn headers(req: axum::extract::Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_listed_once_and_has_a_body() {
        for (i, a) in ASSETS.iter().enumerate() {
            assert!(!a.body.is_empty(), "{} is empty", a.name);
            assert!(
                ASSETS[i + 1..].iter().all(|b| b.name != a.name),
                "{} listed twice",
                a.name
            );
        }
    }
}
