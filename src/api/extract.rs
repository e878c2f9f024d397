//! The one way a request's body and query string are read: into a typed wire shape
//! (`crate::wire`) by serde, then checked into what the handler takes, every refusal a 400 in
//! the error envelope whose message names the field.
//!
//! A body goes through these steps, in this order: its media type (415 unless JSON; a body type
//! may first take an empty body its own way), a JSON object (a derived struct would also read an
//! array as its fields in order), serde (syntax, missing fields and JSON kinds, named by their
//! path: `invalid JSON body: entries[3].http_status: ...`; a top-level key the type does not
//! name is found by `wire::known` as a value the type words), then the type's `check` (the
//! values, each with its own message). A query string is read the same way from its
//! parameters: a parameter the type does not name is refused, naming it.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};

use super::error::ApiError;
use crate::registry::ErrorCode;
use crate::wire::{known, query, Body, Invalid, Params};

/// A request body, read and checked; the handler gets [`Body::Checked`].
pub struct Json<T: Body>(pub T::Checked);

/// A query string, read and checked; the handler gets [`Params::Checked`].
pub struct Query<T: Params>(pub T::Checked);

impl<S: Send + Sync, T: Body> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let json = is_json(req.headers());
        // Refused before a byte is read, unless the type may take an empty body.
        if !json && T::when_empty().is_none() {
            return Err(not_json());
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorCode::PayloadTooLarge, "the request body is too large")
            } else {
                ApiError::bad_request(format!("reading the request body: {}", r.body_text()))
            }
        })?;
        read::<T>(json, &bytes).map(Json)
    }
}

/// The body `T` from a request's bytes, sent as JSON or not, checked: what [`Json`] does once
/// it has read the body, for a handler that decides something before it looks at its body.
pub fn read<T: Body>(json: bool, bytes: &[u8]) -> Result<T::Checked, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if let Some(taken) = T::when_empty() {
            return Ok(taken?.check()?);
        }
    }
    if !json {
        return Err(not_json());
    }
    Ok(body::<T>(bytes)?.check()?)
}

/// `bytes` as the body `T`, refused as [`Json`] refuses it; not yet checked.
fn body<T: Body>(bytes: &[u8]) -> Result<T, Invalid> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Invalid::new("the request body must be a JSON object"));
    }
    // Parsed without tracking the path first (tracking costs a string per key, and ingestion
    // bodies hold thousands); only a body that fails is parsed again to name what failed.
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(plain) => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            match known::read::<T, _>(&mut de) {
                Err(e) => Err(T::refused(e)),
                // The value parsed but something follows it.
                Ok(_) => Err(Invalid(format!("invalid JSON body: {plain}"))),
            }
        }
    }
}

impl<S: Send + Sync, T: Params> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let axum::extract::Query(given) =
            axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
                .map_err(|_| ApiError::bad_request(ErrorCode::BadRequest.label()))?;
        params::<T>(&given).map(Query)
    }
}

/// The query `T` from the request's parameters, checked, refused as [`Query`] refuses it.
pub fn params<T: Params>(params: &HashMap<String, String>) -> Result<T::Checked, ApiError> {
    Ok(query::from_map::<T>(params)?.check()?)
}

/// Whether the request says its body is JSON (`application/json` or `application/*+json`).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|ct| {
            let ct = ct.trim();
            ct == "application/json" || (ct.starts_with("application/") && ct.ends_with("+json"))
        })
}

fn not_json() -> ApiError {
    ApiError::new(
        ErrorCode::UnsupportedMediaType,
        "the body must be JSON sent with Content-Type: application/json",
    )
}
