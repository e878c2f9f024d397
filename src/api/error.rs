//! The error envelope: every failure on every route is
//! `{"success": false, "code": N, "message": "...", "data": null}` with the registry's status.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::envelope::json_response;
use crate::log::appender::{AppendError, Rejection};
use crate::registry::ErrorCode;
use crate::wire::audit::bounds::clip_message;
use crate::wire::envelope::ErrorEnvelope;
use crate::wire::Invalid;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Whole seconds the caller should wait before trying again, answered as `Retry-After`.
    pub retry_after: Option<u64>,
}

/// Attached to every enveloped error so the audit recorder and the guard need not parse bodies.
#[derive(Debug, Clone)]
pub struct ErrorInfo {
    pub code: i64,
    pub message: String,
}

/// Marks a response whose body already is one of our envelopes.
#[derive(Debug, Clone, Copy)]
pub struct Enveloped;

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// The same refusal, telling the caller to wait `secs` whole seconds before trying again.
    pub fn retry_after(self, secs: u64) -> Self {
        Self {
            retry_after: Some(secs),
            ..self
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }
    /// An internal failure: the detail goes to the server log, the client gets a generic text.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(detail = %detail, "internal error");
        Self::new(
            ErrorCode::Internal,
            "internal error; the x-request-id header identifies it in the server log",
        )
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        Self::bad_request(e.0)
    }
}

impl From<crate::command::Refusal> for ApiError {
    fn from(r: crate::command::Refusal) -> Self {
        match r {
            crate::command::Refusal::Rule { code, message } => Self::new(code, message),
            crate::command::Refusal::Internal(detail) => Self::internal(detail),
        }
    }
}

/// A refusal the edge decided (reading a body) handed to a command that decides first.
impl From<ApiError> for crate::command::Refusal {
    fn from(e: ApiError) -> Self {
        crate::command::Refusal::new(e.code, e.message)
    }
}

/// The refusal, with when to try again: a throttled request answered through this keeps its
/// `Retry-After`, as one answered by [`Rejection::response`] does.
impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        Self {
            code: r.code,
            message: r.message,
            retry_after: r.retry_after,
        }
    }
}

impl Rejection {
    /// The refusal as the caller gets it: the envelope, with `Retry-After` when the
    /// precondition knows when the request can pass.
    pub fn response(&self) -> Response {
        refusal_response(self.code, &self.message, self.retry_after)
    }
}

impl From<AppendError> for ApiError {
    fn from(e: AppendError) -> Self {
        match e {
            AppendError::Rejected(r) => r.into(),
            AppendError::Closed => {
                Self::new(ErrorCode::Unavailable, "the service is shutting down")
            }
            AppendError::Storage(why) => {
                tracing::error!(error = %why, "append failed");
                Self::new(
                    ErrorCode::Unavailable,
                    "a write to the log failed; the log accepts writes again once the service is restarted",
                )
            }
            AppendError::NoSpace(why) | AppendError::ClusterUnavailable(why) => {
                Self::new(ErrorCode::Unavailable, why)
            }
            AppendError::Encode(why) => Self::internal(why),
        }
    }
}

impl From<auditmem_projections::ProjectionError> for ApiError {
    fn from(e: auditmem_projections::ProjectionError) -> Self {
        Self::internal(e)
    }
}

impl From<crate::log::LogError> for ApiError {
    fn from(e: crate::log::LogError) -> Self {
        Self::internal(e)
    }
}

/// The error envelope of a registry row.
pub fn error_body(code: ErrorCode, message: &str) -> ErrorEnvelope {
    ErrorEnvelope::new(code.code(), message)
}

/// The response of an error: its envelope, and what its audit entry records. Every error answer
/// goes through here, so this is where a message quoting what the caller sent (a value, a key,
/// serde's echo of a string) is held to a few hundred bytes of it (`bounds::clip_message`): the
/// message is answered and stored in the audit entry as `error_msg`, for every later read.
pub fn error_response(code: ErrorCode, message: &str) -> Response {
    let message = clip_message(message);
    let mut resp = json_response(code.status(), &error_body(code, &message));
    resp.extensions_mut().insert(ErrorInfo {
        code: code.code(),
        message: message.into_owned(),
    });
    resp.extensions_mut().insert(Enveloped);
    if code == ErrorCode::Unauthorized {
        resp.headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
    }
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        refusal_response(self.code, &self.message, self.retry_after)
    }
}

/// The envelope of a refusal, with `Retry-After` when the refusal says when to try again.
pub fn refusal_response(code: ErrorCode, message: &str, retry_after: Option<u64>) -> Response {
    let mut resp = error_response(code, message);
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// Outermost layer: any error response that is not yet an envelope (router 404/405, timeouts,
/// layers' own rejections) becomes one, so no route ever answers with a bare status.
pub async fn envelope_guard(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if (status.is_client_error() || status.is_server_error())
        && resp.extensions().get::<Enveloped>().is_none()
    {
        let code = ErrorCode::for_status(status);
        let message = match status {
            StatusCode::NOT_FOUND => "no such route".to_string(),
            StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route".to_string(),
            StatusCode::REQUEST_TIMEOUT => "the request timed out".to_string(),
            StatusCode::PAYLOAD_TOO_LARGE => "the request body is too large".to_string(),
            _ => code.label().to_string(),
        };
        let mut out = error_response(code, &message);
        *out.status_mut() = if status == StatusCode::UNPROCESSABLE_ENTITY {
            StatusCode::BAD_REQUEST
        } else {
            status
        };
        if let Some(allow) = resp.headers().get("allow") {
            out.headers_mut().insert("allow", allow.clone());
        }
        return out;
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header::RETRY_AFTER;

    fn quota_refusal(retry_after: Option<u64>) -> AppendError {
        AppendError::Rejected(Rejection {
            code: ErrorCode::ExportQuotaExceeded,
            message: "the tenant's export quota is used up; retry in 1800 s".into(),
            retry_after,
        })
    }

    #[test]
    fn a_throttled_rejection_answered_as_an_api_error_keeps_its_retry_after() {
        let resp = ApiError::from(quota_refusal(Some(1800))).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            resp.headers().get(RETRY_AFTER),
            Some(&HeaderValue::from_static("1800"))
        );
        let info = resp.extensions().get::<ErrorInfo>().expect("error info");
        assert_eq!(info.code, 2204);
        assert_eq!(
            info.message,
            "the tenant's export quota is used up; retry in 1800 s"
        );
        // The same answer as the gate gives the rejection itself.
        let AppendError::Rejected(r) = quota_refusal(Some(1800)) else {
            unreachable!("quota_refusal makes a rejection")
        };
        assert_eq!(
            r.response().headers().get(RETRY_AFTER),
            resp.headers().get(RETRY_AFTER)
        );
        // A rejection that says nothing of when has no header.
        let resp = ApiError::from(quota_refusal(None)).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers().get(RETRY_AFTER), None);
    }
}
