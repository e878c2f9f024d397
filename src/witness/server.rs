//! `POST /add-checkpoint` (C2SP tlog-witness), checked in the spec's order:
//!
//! 1. A body over [`MAX_BODY_BYTES`]: 413. A body that is not `old <size>`, at most 63
//!    base64 hashes, an empty line and a signed note whose text is a C2SP checkpoint: 400.
//! 2. An origin the witness is not configured for: 404.
//! 3. No signature by a configured key of that origin verifies: 403. Signatures by other keys
//!    are ignored; one by a configured key that fails makes the whole note 403 (signed-note:
//!    "SHOULD reject the whole note").
//! 4. `old` above the checkpoint's size: 400.
//! 5. Under the origin's lock, held until the new record is written: `old` other than the
//!    recorded size (0 when nothing is recorded): 409, `Content-Type: text/x.tlog.size`, the
//!    recorded size and `\n`.
//! 6. `old` equal to the checkpoint's size: the root must be the recorded one (the empty
//!    tree's, RFC 6962, for size 0 with nothing recorded), or 409 (`text/plain`: no size, as
//!    the sizes agree), and the proof empty, or 422. Otherwise the proof must be a valid RFC
//!    6962 consistency proof from the recorded tree (empty when `old` is 0), or 422.
//! 7. The new size and root are persisted (atomically, synced), and only then the answer is
//!    200 with the cosignature line (`text/plain; charset=utf-8`).
//!
//! Other answers are `text/plain` with one line saying why. A fork at the recorded size and
//! a proof that does not verify may be evidence of a misbehaving log: they are logged at
//! `warn` with the checkpoint.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use signed_note::{
    Note, NoteError, Signature, Signer as _, StandardVerifier, Verifier, VerifierList,
};
use tlog_tiles::{Checkpoint, EMPTY_HASH};

use super::request;
use super::store::{self, Record};
use crate::tlog::cosignature::CosignatureSigner;

/// The largest request body taken (the spec's largest is ~3 KiB: 63 proof lines and a
/// checkpoint with a few signatures).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The media type of a 409's body: the recorded tree size in decimal and `\n`.
pub const TLOG_SIZE_TYPE: &str = "text/x.tlog.size";

/// One witnessed log: its keys and its latest cosigned tree.
struct Log {
    verifiers: Vec<StandardVerifier>,
    /// Held from the check of `old` until the new record is written, so requests for one
    /// origin are decided one at a time and no two are accepted from the same size.
    record: Arc<tokio::sync::Mutex<Option<Record>>>,
}

/// The witness: its cosigning key, the logs it follows and where it records them.
pub struct Witness {
    signer: CosignatureSigner,
    logs: HashMap<String, Log>,
    state_dir: PathBuf,
    _lock: store::StateLock,
}

impl Witness {
    /// A witness over `state_dir` (locked for this process) for `logs`: each origin with the
    /// verifier keys that may sign its checkpoints. Loads each origin's record.
    pub fn open(
        state_dir: PathBuf,
        signer: CosignatureSigner,
        logs: Vec<(String, StandardVerifier)>,
    ) -> anyhow::Result<Self> {
        let lock = store::lock(&state_dir)?;
        let mut by_origin: HashMap<String, Vec<StandardVerifier>> = HashMap::new();
        for (origin, v) in logs {
            let keys = by_origin.entry(origin.clone()).or_default();
            // `Note::verify` refuses every note when two known keys share a name and key ID.
            anyhow::ensure!(
                !keys
                    .iter()
                    .any(|k| k.name() == v.name() && k.key_id() == v.key_id()),
                "two keys of the log {origin:?} share the name {} and the key ID {:08x}",
                v.name(),
                v.key_id()
            );
            keys.push(v);
        }
        let mut out = HashMap::new();
        for (origin, verifiers) in by_origin {
            let record = store::load_record(&state_dir, &origin)?;
            out.insert(
                origin,
                Log {
                    verifiers,
                    record: Arc::new(tokio::sync::Mutex::new(record)),
                },
            );
        }
        Ok(Self {
            signer,
            logs: out,
            state_dir,
            _lock: lock,
        })
    }

    /// The witness's cosignature verifier key.
    pub fn verifier_key(&self) -> String {
        self.signer.verifier_key()
    }
}

/// The witness's routes.
pub fn app(witness: Arc<Witness>) -> Router {
    Router::new()
        .route("/add-checkpoint", post(add_checkpoint))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(witness)
}

fn text(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{msg}\n"),
    )
        .into_response()
}

async fn add_checkpoint(State(w): State<Arc<Witness>>, body: Bytes) -> Response {
    let req = match request::parse(&body) {
        Ok(r) => r,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    let note = match Note::from_bytes(&req.checkpoint) {
        Ok(n) => n,
        Err(_) => {
            return text(
                StatusCode::BAD_REQUEST,
                "the checkpoint is not a signed note",
            )
        }
    };
    let Ok(cp) = Checkpoint::from_bytes(note.text()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "the note is not a checkpoint (origin, size, base64 root hash, extension lines)",
        );
    };
    let Some(log) = w.logs.get(cp.origin()) else {
        return text(StatusCode::NOT_FOUND, "unknown log origin");
    };
    // A block of its own: the verifiers are not `Send`, and must be gone before any await.
    let verified = {
        let known = VerifierList::new(
            log.verifiers
                .iter()
                .map(|v| Box::new(v.clone()) as Box<dyn Verifier>)
                .collect(),
        );
        note.verify(&known).map(|_| ())
    };
    match verified {
        Ok(()) => {}
        Err(NoteError::UnverifiedNote) => {
            return text(
                StatusCode::FORBIDDEN,
                "no signature by a key of this log verifies",
            )
        }
        Err(e) => return text(StatusCode::FORBIDDEN, e),
    }
    let (size, root) = (cp.size(), *cp.hash());
    if req.old_size > size {
        return text(
            StatusCode::BAD_REQUEST,
            "the old size is above the checkpoint's size",
        );
    }

    let mut record = log.record.clone().lock_owned().await;
    let recorded = record.unwrap_or(Record {
        size: 0,
        root: EMPTY_HASH,
    });
    if req.old_size != recorded.size {
        return (
            StatusCode::CONFLICT,
            [(header::CONTENT_TYPE, TLOG_SIZE_TYPE)],
            format!("{}\n", recorded.size),
        )
            .into_response();
    }
    if size == recorded.size {
        if root != recorded.root {
            tracing::warn!(origin = cp.origin(), size, checkpoint = %String::from_utf8_lossy(note.text()), "a checkpoint of the recorded size with another root: the log may have forked");
            return text(
                StatusCode::CONFLICT,
                "the checkpoint has the recorded size and another root hash",
            );
        }
        if !req.proof.is_empty() {
            return text(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the consistency proof between equal sizes must be empty",
            );
        }
    } else if recorded.size == 0 {
        if !req.proof.is_empty() {
            return text(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the consistency proof from size 0 must be empty",
            );
        }
    } else if tlog_tiles::check_tree(&req.proof, size, root, recorded.size, recorded.root).is_err()
    {
        tracing::warn!(origin = cp.origin(), old = recorded.size, size, checkpoint = %String::from_utf8_lossy(note.text()), "a consistency proof that does not verify");
        return text(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the consistency proof does not verify",
        );
    }

    let cosignature = w
        .signer
        .sign(note.text())
        .map_err(|e| e.to_string())
        .and_then(|sig| {
            Signature::new(w.signer.name().to_string(), w.signer.key_id(), sig)
                .map_err(|e| e.to_string())
        });
    let line = match cosignature {
        Ok(sig) => sig.to_bytes(),
        Err(e) => {
            tracing::error!(error = %e, "cosigning failed");
            return text(StatusCode::INTERNAL_SERVER_ERROR, "cosigning failed");
        }
    };

    let new = Record { size, root };
    let (dir, origin, checkpoint) = (
        w.state_dir.clone(),
        cp.origin().to_string(),
        req.checkpoint.clone(),
    );
    // The lock goes with the write: were this request dropped (the client gone, the timeout)
    // while the file is written, the next one still waits for the write, and the record in
    // memory changes only with the file.
    let saved = tokio::task::spawn_blocking(move || {
        store::save_record(&dir, &origin, new, &checkpoint)?;
        *record = Some(new);
        Ok::<_, std::io::Error>(())
    })
    .await;
    match saved {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, origin = cp.origin(), "recording the checkpoint failed");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "recording the checkpoint failed",
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "the recording task failed");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "recording the checkpoint failed",
            );
        }
    }
    tracing::info!(
        origin = cp.origin(),
        old = req.old_size,
        size,
        key_id = format_args!("{:08x}", w.signer.key_id()),
        "cosigned"
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        line,
    )
        .into_response()
}
