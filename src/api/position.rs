//! Read-your-writes across the nodes of a cluster (docs/SCALING.md): every response whose
//! request appended to the log says where (`X-Auditmem-Position`, the global seq of its last
//! record, numbered alike on every node), and a request carrying `X-Auditmem-Min-Position` is
//! answered only once this node has folded at least that far, or 503 after
//! `--consistency-wait-ms`. On one node the position is always folded already.

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};

use super::error::ApiError;
use super::state::AppState;
use crate::registry::ErrorCode;

pub const POSITION: HeaderName = HeaderName::from_static("x-auditmem-position");
pub const MIN_POSITION: HeaderName = HeaderName::from_static("x-auditmem-min-position");

/// The log position a response's write was committed at, as its `X-Auditmem-Position` header.
#[derive(Clone, Copy, Debug)]
pub struct Position(pub u64);

impl IntoResponseParts for Position {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut res: ResponseParts) -> Result<ResponseParts, Self::Error> {
        res.headers_mut()
            .insert(POSITION, HeaderValue::from(self.0));
        Ok(res)
    }
}

/// `resp` with its `X-Auditmem-Position` header.
pub fn with_position(mut resp: Response, seq: u64) -> Response {
    resp.headers_mut().insert(POSITION, HeaderValue::from(seq));
    resp
}

/// Holds a request carrying `X-Auditmem-Min-Position` until this node has folded that far.
pub async fn await_position(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(value) = req.headers().get(&MIN_POSITION) else {
        return next.run(req).await;
    };
    let wanted = match value.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(n) => n,
        None => {
            return ApiError::new(
                ErrorCode::BadRequest,
                "X-Auditmem-Min-Position must be a log position: an unsigned integer, as X-Auditmem-Position gives it",
            )
            .into_response()
        }
    };
    let mut head = state.appender.subscribe();
    let wait = state.settings.consistency_wait;
    // The watch's borrow is dropped at once: it must not live across the handler's await.
    let reached = matches!(
        tokio::time::timeout(wait, async {
            head.wait_for(|h| h.seq >= wanted).await.is_ok()
        })
        .await,
        Ok(true)
    );
    match reached {
        true => next.run(req).await,
        false => ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "this node has folded the log up to position {} and position {wanted} did not arrive within {} ms; retry, or ask another node",
                state.appender.head().seq,
                wait.as_millis()
            ),
        )
        .into_response(),
    }
}
