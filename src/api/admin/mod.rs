//! The admin API under `/admin/v1`: tenants ([`tenants`]), keys ([`keys`]), the gateway's audit
//! ingestion ([`ingest`]), and the raw log with its head, checkpoints and key ([`log`]).
//!
//! Mounted only when `AUDITMEM_ADMIN_TOKEN` is set; the token is compared in constant time.
//! Admin calls are operator actions, not tenant operations: they append their own events
//! (tenants, keys, ingested entries) but no tenant audit entry.

pub mod ingest;
pub mod keys;
pub mod log;
pub mod tenants;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::state::AppState;

pub async fn require_admin(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = state.settings.admin_token.as_deref() else {
        return ApiError::not_found("no such route").into_response();
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
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
