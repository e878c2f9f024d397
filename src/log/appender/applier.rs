//! The applier: the second stage of the appender's pipeline. It folds each stored group into
//! the projections and the Merkle tree, moves the head, and only then answers the group's
//! callers, so a caller's next request sees its own write.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use auditmem_projections::{Applied, Projections};
use tokio::sync::watch;

use super::seam::Failure;
use super::{AppenderStats, Committed, Submission};
use crate::log::Head;
use crate::tlog::MerkleTree;

/// Why the applier failed (the writer then refuses every write: [`Failure::Apply`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    #[error(transparent)]
    Projection(#[from] auditmem_projections::ProjectionError),
    #[error(transparent)]
    Tlog(#[from] crate::tlog::TlogError),
}

/// How far the applier got; the writer waits on it before checking a precondition.
pub(crate) struct ApplyProgress {
    pub(super) seq: std::sync::Mutex<u64>,
    pub(super) moved: std::sync::Condvar,
    pub(super) failed: std::sync::Mutex<Option<Failure>>,
    /// Held by the applier while it folds a batch and answers it; a test holds it to stall
    /// the applier (uncontended otherwise: one lock a batch).
    pub(super) folding: std::sync::Mutex<()>,
}

impl ApplyProgress {
    /// Everything up to `seq` applied.
    pub(super) fn at(seq: u64) -> ApplyProgress {
        ApplyProgress {
            seq: std::sync::Mutex::new(seq),
            moved: std::sync::Condvar::new(),
            failed: std::sync::Mutex::new(None),
            folding: std::sync::Mutex::new(()),
        }
    }

    /// The applier's failure, if it failed.
    pub(super) fn failure(&self) -> Option<Failure> {
        self.failed.lock().ok().and_then(|f| f.clone())
    }
}

/// A stored group on its way to the applier.
pub(crate) struct ApplyJob {
    pub(super) group: Vec<Submission>,
    pub(super) outcomes: Vec<Committed>,
    pub(super) head: Head,
    /// The blake3 hashes of the records this job stored, the last one `head`'s: their leaves
    /// join the Merkle tree before anyone hears back (empty when they are in it already).
    pub(super) leaves: Vec<[u8; 32]>,
}

/// The applier's loop: folds each stored group into the projections, then answers its callers.
pub(super) fn apply_loop(
    jobs: std::sync::mpsc::Receiver<ApplyJob>,
    projections: Arc<Projections>,
    tlog: Arc<MerkleTree>,
    progress: Arc<ApplyProgress>,
    head_tx: watch::Sender<Head>,
    stats: Arc<AppenderStats>,
) {
    let mut applied_to = 0u64;
    while let Ok(first) = jobs.recv() {
        // Jobs that queued up while the last ones were applied are folded together: one
        // projection batch for all of them, so the applier keeps pace with the writer.
        let mut batch = vec![first];
        while let Ok(more) = jobs.try_recv() {
            batch.push(more);
        }
        let folding = progress
            .folding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let started = Instant::now();
        let mut applied = Vec::new();
        for job in &batch {
            for (sub, outcome) in job.group.iter().zip(&job.outcomes) {
                for (seq, (event, _, prepared)) in (outcome.first_seq..).zip(&sub.events) {
                    applied.push(Applied {
                        seq,
                        ts_micros: outcome.ts_micros,
                        event,
                        prepared: Some(prepared),
                    });
                }
            }
        }
        let result = projections.apply(&applied).map_err(ApplyError::from);
        drop(applied);
        // The tree's leaves, before the head moves: a checkpoint signed at the head, or a
        // proof asked for by a caller who just heard back, finds them.
        let result = result.and_then(|()| {
            batch.iter().try_for_each(|job| {
                let first = (job.head.seq + 1).saturating_sub(job.leaves.len() as u64);
                if job.leaves.is_empty() {
                    return Ok(());
                }
                tlog.append(first, &job.leaves).map_err(ApplyError::from)
            })
        });
        stats
            .apply_micros_total
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match result {
            Ok(()) => {
                applied_to = batch.last().map_or(applied_to, |j| j.head.seq);
            }
            Err(e) => {
                // The events are durable, so their callers are told they landed; the
                // projections catch up from their checkpoints at the next start. Writing more
                // on top of stale projections would decide against the wrong state, so later
                // writes are refused.
                tracing::error!(error = %e, "projection or Merkle tree apply failed; the appender refuses further writes");
                stats.failed.store(true, Ordering::Relaxed);
                if let Ok(mut f) = progress.failed.lock() {
                    *f = Some(Failure::Apply(Arc::new(e)));
                }
            }
        }
        // The head moves before any caller hears back: a caller's next request must see its
        // own write in the head (a list's cursor snapshot is taken from it).
        if let Some(head) = batch.last().map(|j| j.head) {
            let _ = head_tx.send(head);
            if let Ok(mut s) = progress.seq.lock() {
                *s = head.seq;
            }
        }
        for job in batch {
            for (sub, outcome) in job.group.into_iter().zip(job.outcomes) {
                sub.answer(Ok(outcome));
            }
        }
        progress.moved.notify_all();
        drop(folding);
    }
    // Stopping with everything applied: move the checkpoints that trail (see `Overlay::commit`)
    // up to the head, so the next start has nothing to catch up.
    let failed = progress.failed.lock().map_or(true, |f| f.is_some());
    if applied_to > 0 && !failed {
        if let Err(e) = projections.settle(applied_to) {
            tracing::warn!(error = %e, "could not settle projection checkpoints at stop");
        }
    }
}
