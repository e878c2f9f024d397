//! The answers of the API as HTTP responses: the success envelopes with their status, and the
//! JSON writer every answer goes through.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::error::ApiError;
use crate::wire::envelope::{AuditOk, Data};

impl<T: Serialize> IntoResponse for AuditOk<T> {
    fn into_response(self) -> Response {
        json_response(StatusCode::OK, &self)
    }
}

impl<T: Serialize> IntoResponse for Data<T> {
    fn into_response(self) -> Response {
        json_response(StatusCode::OK, &self)
    }
}

/// `{"success": true, "data": T}` with 201: what created it.
pub struct Created<T>(pub T);

impl<T: Serialize> IntoResponse for Created<T> {
    fn into_response(self) -> Response {
        json_response(StatusCode::CREATED, &Data(self.0))
    }
}

/// Serialises straight to bytes: going through a `serde_json::Value` first (what `json!`
/// does) would build, walk and free a tree of every list item.
pub fn json_response<B: Serialize>(status: StatusCode, body: &B) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => ApiError::internal(format!("serialising the response: {e}")).into_response(),
    }
}
