//! The raw log for auditors: its records as a stream, its head, its signed checkpoints and the
//! key that signs them.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use base64::Engine;

use crate::api::error::ApiError;
use crate::api::extract::Query;
use crate::api::state::AppState;
use crate::log::checkpoint::Checkpoint;
use crate::wire::admin::{LogHead, LogLine, LogQuery, PublicKey};
use crate::wire::envelope::{Data, ErrorEnvelope};

type LogHeadEnvelope = Data<LogHead>;
type CheckpointEnvelope = Data<Checkpoint>;
type PublicKeyEnvelope = Data<PublicKey>;

/// The bytes gathered before each write to a streamed answer (the raw log, an export's proofs).
pub(crate) const STREAM_CHUNK: usize = 256 * 1024;

#[utoipa::path(get, path = "/admin/v1/log/head", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "{seq, hash}", body = LogHeadEnvelope)))]
pub(crate) async fn log_head(State(state): State<AppState>) -> Data<LogHead> {
    let head = state.appender.head();
    Data(LogHead {
        seq: head.seq,
        hash: hex::encode(head.hash),
    })
}

#[utoipa::path(get, path = "/admin/v1/log/checkpoint", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "the latest signed checkpoint", body = CheckpointEnvelope), (status = 404, description = "the log is empty (4040)", body = ErrorEnvelope)))]
pub(crate) async fn latest_checkpoint(
    State(state): State<AppState>,
) -> Result<Data<Checkpoint>, ApiError> {
    if let Some(cp) = state.signer.latest() {
        return Ok(Data(cp));
    }
    let head = state.appender.head();
    if head.seq == 0 {
        return Err(ApiError::not_found("no checkpoint yet: the log is empty"));
    }
    Ok(Data(state.signer.sign(head).map_err(ApiError::internal)?))
}

#[utoipa::path(post, path = "/admin/v1/log/checkpoint", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "a checkpoint signed now", body = CheckpointEnvelope)))]
pub(crate) async fn sign_checkpoint(
    State(state): State<AppState>,
) -> Result<Data<Checkpoint>, ApiError> {
    let head = state.appender.head();
    if head.seq == 0 {
        return Err(ApiError::bad_request("the log is empty: nothing to sign"));
    }
    Ok(Data(state.signer.sign(head).map_err(ApiError::internal)?))
}

#[utoipa::path(get, path = "/admin/v1/log/pubkey", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "the ed25519 public key", body = PublicKeyEnvelope)))]
pub(crate) async fn public_key(State(state): State<AppState>) -> Data<PublicKey> {
    Data(PublicKey {
        public_key: state.signer.public_key_hex(),
        algorithm: "ed25519",
        origin: state.signer.origin().map(str::to_string),
        verifier_key: state.signer.verifier_key(),
    })
}

/// `GET /admin/v1/log?from=SEQ`: every stored record from `from` on as NDJSON lines
/// `{"seq": N, "record": "<base64 of the stored bytes>"}`, for client-side verification.
#[utoipa::path(get, path = "/admin/v1/log", tag = "admin", security(("admin_token" = [])), params(LogQuery),
    responses((status = 200, description = "NDJSON lines {seq, record (base64)}", content_type = "application/x-ndjson")))]
pub(crate) async fn stream_log(
    State(state): State<AppState>,
    Query(from): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let log = state.log.clone();
    tokio::task::spawn_blocking(move || {
        let mut buf = Vec::with_capacity(STREAM_CHUNK);
        for item in log.records_from(from) {
            match item {
                Ok((seq, value)) => {
                    let line = LogLine {
                        seq,
                        record: base64::engine::general_purpose::STANDARD.encode(&value),
                    };
                    // Writing JSON of a struct of a number and a string into a Vec cannot fail.
                    let _ = serde_json::to_writer(&mut buf, &line);
                    buf.push(b'\n');
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            }
            if buf.len() >= STREAM_CHUNK && tx.blocking_send(Ok(std::mem::take(&mut buf))).is_err()
            {
                return;
            }
        }
        if !buf.is_empty() {
            let _ = tx.blocking_send(Ok(buf));
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(Body::from_stream(stream))
        .map_err(ApiError::internal)
}
