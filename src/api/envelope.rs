//! Success envelopes and our JSON extractor.
//!
//! Audit endpoints answer `{"success": true, "code": 1000, "message": "ok", "data": ...}`;
//! memory and admin endpoints `{"success": true, "data": ...}` (the interface's two shapes).

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ApiError;
use crate::registry::ErrorCode;

pub const SUCCESS_CODE: i64 = 1000;

/// `{"success": true, "code": 1000, "message": "ok", "data": T}`.
pub struct AuditOk<T>(pub T);

impl<T: Serialize> IntoResponse for AuditOk<T> {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Envelope<T> {
            success: bool,
            code: i64,
            message: &'static str,
            data: T,
        }
        json_response(
            StatusCode::OK,
            &Envelope {
                success: true,
                code: SUCCESS_CODE,
                message: "ok",
                data: self.0,
            },
        )
    }
}

/// `{"success": true, "data": T}`, with a status (200 unless said otherwise).
pub struct Data<T>(pub T);
pub struct Created<T>(pub T);

#[derive(Serialize)]
struct DataEnvelope<T> {
    success: bool,
    data: T,
}

impl<T: Serialize> IntoResponse for Data<T> {
    fn into_response(self) -> Response {
        data_response(StatusCode::OK, self.0)
    }
}

impl<T: Serialize> IntoResponse for Created<T> {
    fn into_response(self) -> Response {
        data_response(StatusCode::CREATED, self.0)
    }
}

fn data_response<T: Serialize>(status: StatusCode, data: T) -> Response {
    json_response(
        status,
        &DataEnvelope {
            success: true,
            data,
        },
    )
}

/// Serialises straight to bytes: going through a `serde_json::Value` first (what `json!`
/// does) built, walked and freed a tree of every list item.
fn json_response<B: Serialize>(status: StatusCode, body: &B) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => ApiError::internal(format!("serialising the response: {e}")).into_response(),
    }
}

/// JSON body extractor whose every rejection is our error envelope.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // The checks of `axum::Json`, in its order (media type before the body is read), with
        // the object check of `require_object` between reading and deserialising.
        require_json(req.headers())?;
        let body = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorCode::PayloadTooLarge, "the request body is too large")
            } else {
                ApiError::bad_request(format!("reading the request body: {}", r.body_text()))
            }
        })?;
        require_object(&body)?;
        match axum::Json::<T>::from_bytes(&body) {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// 400 unless the body is a JSON object. Every request body of the API is one, and serde's
/// derived structs also read a JSON array as their fields in order, so without this
/// `[null, null]` passed as an export request and `["acme", "pro"]` created a tenant.
pub fn require_object(body: &[u8]) -> Result<(), ApiError> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ))
    }
}

/// Parses a body taken as bytes with the same checks and messages as [`ApiJson`].
pub fn parse_json_body<T: DeserializeOwned>(
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<T, ApiError> {
    require_json(headers)?;
    require_object(body)?;
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// 415 unless the request says its body is JSON.
pub fn require_json(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let is_json = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|ct| {
            let ct = ct.trim();
            ct == "application/json" || (ct.starts_with("application/") && ct.ends_with("+json"))
        });
    if !is_json {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "the body must be JSON sent with Content-Type: application/json",
        ));
    }
    Ok(())
}

fn json_rejection(r: JsonRejection) -> ApiError {
    let status = r.status();
    let code = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        _ => ErrorCode::BadRequest,
    };
    let message = match code {
        ErrorCode::UnsupportedMediaType => {
            "the body must be JSON sent with Content-Type: application/json".to_string()
        }
        ErrorCode::PayloadTooLarge => "the request body is too large".to_string(),
        _ => {
            let text = r.body_text();
            // axum prefixes serde's message; keep serde's part, which names the field.
            let detail = text
                .split_once(": ")
                .map(|(_, rest)| rest.to_string())
                .unwrap_or(text);
            format!("invalid JSON body: {detail}")
        }
    };
    ApiError::new(code, message)
}
