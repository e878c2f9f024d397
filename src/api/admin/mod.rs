//! The admin API under `/admin/v1`: tenants ([`tenants`]), keys ([`keys`]), the gateway's audit
//! ingestion ([`ingest`]), and the raw log with its head, checkpoints and key ([`log`]).
//!
//! Off unless `AUDITMEM_ADMIN_TOKEN` is set (every admin route then answers 404 saying so and how
//! to turn it on, [`ADMIN_OFF`]); on its own listener with `--admin-listen`
//! (`api::Surface`). Two tokens open it, both compared in constant time: the admin token opens
//! every route; the ingest token (`AUDITMEM_INGEST_TOKEN`) only `POST /admin/v1/audit/logs`, so
//! the gateway that forwards entries does not hold the key that mints API keys and reads every
//! tenant's raw log. Failed authentication is throttled per source ([`throttle`]). Admin calls
//! are operator actions, not tenant operations: they append their own events (tenants, keys,
//! ingested entries, decided by `crate::command::admin`) but no tenant audit entry.

pub mod erasures;
pub mod ingest;
pub mod keys;
pub mod log;
pub mod tenants;
pub mod throttle;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::position::Position;
use super::state::AppState;
use crate::command::{Context, Decision};
use crate::registry::ErrorCode;

/// The answer of every admin route while the admin API is off (404, 4040), saying how to turn
/// it on.
pub const ADMIN_OFF: &str = "the admin API is off: start the server with AUDITMEM_ADMIN_TOKEN (or --admin-token) set to a token of at least 32 bytes to turn it on";

/// The answer of an admin route on the public listener when `--admin-listen` serves the admin
/// API (404, 4040).
pub const ADMIN_ELSEWHERE: &str =
    "the admin API is served on the admin listener (--admin-listen), not on this one";

/// The answer of a non-admin route on the admin listener (404, 4040).
pub const ADMIN_ONLY: &str =
    "this listener serves the admin API only (--admin-listen); the rest of the API is on --listen";

/// The one route the ingest token opens.
pub const INGEST_ROUTE: &str = "/admin/v1/audit/logs";

/// Shortest admin or ingest token `serve` accepts without `--insecure-short-admin-token`: 32
/// bytes, the size of a 256-bit key, which no rate of guessing reaches.
pub const MIN_TOKEN_BYTES: usize = 32;

pub async fn require_admin(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(admin_token) = state.settings.admin_token.as_deref() else {
        return ApiError::not_found(ADMIN_OFF).into_response();
    };
    let source = super::client_ip::of_request(&state.settings.proxy_trust, &req)
        .map(super::client_ip::source);
    // A throttled source is refused before its token is looked at: see `throttle`.
    if let Some(source) = source {
        if let Err(wait) = state.admin_throttle.check(source) {
            tracing::debug!(%source, "admin authentication throttled");
            return throttled(wait);
        }
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Both comparisons run whatever the first says, so the time taken tells nothing either.
    let is_admin = token_matches(presented, admin_token);
    let is_ingest = state
        .settings
        .ingest_token
        .as_deref()
        .is_some_and(|t| token_matches(presented, t));
    if is_admin {
        // What the admin reads includes every tenant's entries answered before their fold.
        state.appender.caught_up().await;
        return next.run(req).await;
    }
    if is_ingest {
        if is_ingest_route(&req) {
            return next.run(req).await;
        }
        return ApiError::forbidden(format!(
            "the ingest token may only call POST {INGEST_ROUTE}"
        ))
        .into_response();
    }
    // A missing token is no guess; only a wrong one counts against its source.
    if !presented.is_empty() {
        if let Some(source) = source {
            state.admin_throttle.failed(source);
        }
        tracing::warn!(source = ?source, "wrong admin token refused");
    }
    ApiError::unauthorized("missing or wrong admin token").into_response()
}

/// The service's context for an admin command.
fn context(state: &AppState) -> Context<'_> {
    Context::service(&state.projections)
}

/// Appends an admin command's events (nothing when it has none) and gives its answer with the
/// log position it stands at.
async fn record<A>(state: &AppState, decision: Decision<A>) -> Result<(Position, A), ApiError> {
    let Decision {
        answer,
        events,
        check,
        ..
    } = decision;
    let position = match (events.is_empty(), check) {
        (true, _) => state.appender.head().seq,
        (false, Some(check)) => state.appender.append_checked(events, check).await?.last_seq,
        (false, None) => state.appender.append(events).await?.last_seq,
    };
    Ok((Position(position), answer))
}

fn is_ingest_route(req: &Request) -> bool {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map_or(req.uri().path(), MatchedPath::as_str);
    req.method() == Method::POST && path == INGEST_ROUTE
}

/// 429 (4290) with `Retry-After` in whole seconds.
fn throttled(wait: std::time::Duration) -> Response {
    let secs = super::rate_limit::retry_after_secs(wait);
    let mut resp = ApiError::new(
        ErrorCode::RateLimited,
        format!("too many failed admin authentications from this address; retry after {secs} s"),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
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
