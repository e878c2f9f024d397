//! Sends each newly signed checkpoint to the configured witnesses (C2SP tlog-witness
//! `add-checkpoint`) and publishes the cosignatures they return with it (`GET /log/checkpoint`,
//! and the notes proofs carry).
//!
//! Each witness is told the size it cosigned last (0 at first, or what its 409 said) with the
//! consistency proof from there. A witness that is down or refuses is logged and counted, and
//! tried again with the next checkpoint; the log never waits for witnesses.

use std::sync::Arc;
use std::time::Duration;

use crate::log::checkpoint::CheckpointSigner;
use crate::witness::client::{add_checkpoint, WitnessError};

/// How long one witness gets to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

struct Target {
    url: String,
    /// The size the witness last cosigned, as far as we know.
    size: u64,
}

/// Runs until the signer is dropped: pushes each new note to every witness in `urls`.
pub async fn run(signer: Arc<CheckpointSigner>, urls: Vec<String>) {
    if urls.is_empty() {
        return;
    }
    let http = match reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the witnesses' HTTP client; checkpoints go uncosigned");
            return;
        }
    };
    let mut targets: Vec<Target> = urls
        .into_iter()
        .map(|url| Target { url, size: 0 })
        .collect();
    let mut rx = signer.subscribe_notes();
    // The latest note when this task starts (read back from the checkpoints file after a
    // restart) goes out first: the signer does not sign the same head twice.
    let mut next = signer.latest_note().map(|(size, _)| size);
    loop {
        let size = match next.take() {
            Some(size) => size,
            None => {
                if rx.changed().await.is_err() {
                    return;
                }
                *rx.borrow_and_update()
            }
        };
        let Some(note) = signer.note_at(size) else {
            continue;
        };
        let pushes = targets
            .iter_mut()
            .map(|t| push(&http, &signer, t, size, note.as_bytes()));
        let lines: Vec<String> = futures_util::future::join_all(pushes)
            .await
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        signer.add_cosignatures(size, &lines);
    }
}

/// Sends the note of `size` to one witness; the cosignature lines it answered with.
async fn push(
    http: &reqwest::Client,
    signer: &CheckpointSigner,
    t: &mut Target,
    size: u64,
    note: &[u8],
) -> Option<Vec<String>> {
    let tlog = signer.tlog()?;
    // A 409 names the witness's size: one retry from there.
    for _ in 0..2 {
        if t.size > size {
            // The witness has cosigned a later checkpoint (another node's, in a cluster).
            return None;
        }
        let proof = match tlog.consistency(t.size, size) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(witness = %t.url, error = %e, "no consistency proof for a witness");
                return None;
            }
        };
        match add_checkpoint(http, &t.url, t.size, &proof, note).await {
            Ok(sigs) => {
                t.size = size;
                metrics::counter!("auditmem_witness_cosignatures_total").increment(1);
                return Some(
                    sigs.iter()
                        .map(|s| String::from_utf8_lossy(&s.to_bytes()).into_owned())
                        .collect(),
                );
            }
            Err(WitnessError::Conflict(theirs)) => t.size = theirs,
            Err(e) => {
                metrics::counter!("auditmem_witness_failures_total").increment(1);
                tracing::warn!(witness = %t.url, size, error = %e, "a witness did not cosign the checkpoint");
                return None;
            }
        }
    }
    metrics::counter!("auditmem_witness_failures_total").increment(1);
    tracing::warn!(witness = %t.url, size, "a witness's size kept changing; trying again with the next checkpoint");
    None
}
