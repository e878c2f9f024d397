//! The seam between the writer and its log of record.
//!
//! The writer ([`super::writer`]) groups submissions, checks their preconditions, seals them on
//! the head and hands what is stored to the applier. Where a record is *of record* is not its
//! business: a [`LogOfRecord`] stores a sealed group, or says why it did not. Two implement
//! it: [`crate::log::local::LocalLog`] (the `log` tree itself, one node) and
//! [`crate::log::cluster::StreamLog`] (a JetStream stream, the `log` tree its mirror).
//!
//! The invariant every log of record keeps, and the writer builds on:
//!
//! ```text
//!  group sealed on chain.head() ─▶ store ─┬─▶ Ok(Appended): its records follow that head in
//!                                         │   the log of record; the writer moves the head
//!                                         ├─▶ Ok(Found): an earlier attempt of it is in the
//!                                         │   log, folded into the chain already
//!                                         ├─▶ Err(Moved): the log holds records after that
//!                                         │   head that are not the group's; they are folded
//!                                         │   into the chain (Chain::extend), the head moved:
//!                                         │   check the precondition again, seal anew, store
//!                                         └─▶ Err(..): not stored (or, Failed, no head to
//!                                             build on: every later write is refused)
//! ```
//!
//! A log never stores a group on another head than the one it was sealed on, and never answers
//! `Ok` for a group it does not hold: callers are answered from that.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use auditmem_projections::{Event, Prepared};
use tokio::sync::mpsc;

use super::applier::{ApplyError, ApplyJob, ApplyProgress};
use super::{AppenderStats, Committed, Msg, Submission};
use crate::log::record::Chunker;
use crate::log::Head;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the writer's records are of record. Its methods run on the writer's thread, inside
/// the writer's future (see the appender's module documentation).
pub(crate) trait LogOfRecord: Send + 'static {
    /// The next message of the writer's queue (`None`: closed and empty), once this log is
    /// ready to take a group for it. Meanwhile it folds into `chain` what other writers
    /// stored.
    async fn next(&mut self, queue: &mut mpsc::Receiver<Msg>, chain: &mut Chain) -> Option<Msg>;

    /// The most record bytes one [`store`](Self::store) takes: a larger group is stored in
    /// parts of whole submissions (one larger submission goes alone).
    fn max_group_bytes(&self) -> usize;

    /// When the writer stops waiting for this log on a group whose oldest submission arrived
    /// at `oldest` (a log that never waits ignores it).
    fn deadline(&self, oldest: Instant) -> Instant;

    /// Waits until storing the next group is this writer's to do, folding into `chain`
    /// meanwhile (on a cluster: the turn order).
    async fn ready(&mut self, chain: &mut Chain, deadline: Instant);

    /// Stores `sealed`, sealed on `chain.head()`, as the log's next records.
    async fn store(
        &mut self,
        sealed: &mut Sealed,
        chain: &mut Chain,
        deadline: Instant,
    ) -> Result<Stored, StoreError>;

    /// The writer's queue ran empty after a group.
    async fn idle(&mut self);

    /// The writer stops: what was stored is made as durable as this log makes it.
    fn close(&mut self);
}

/// A group's records sealed on a head, not yet stored.
pub(crate) struct Sealed {
    pub(crate) outcomes: Vec<Committed>,
    /// The records as the `log` tree stores them.
    pub(crate) chunks: Chunker,
    /// The last record's seq and hash.
    pub(crate) head: Head,
    pub(crate) ts: i64,
    /// How many records.
    pub(crate) count: usize,
    /// Each record's hash, in order (the Merkle tree's leaves).
    pub(crate) leaves: Vec<[u8; 32]>,
    /// The group holds an erasure (`SubjectsErased`), whose keys are destroyed when the group
    /// is folded: it must be durable before that, whatever the durability mode, so that the
    /// erasure is never lost while its keys are gone.
    pub(crate) erasure: bool,
}

impl Sealed {
    /// The first and last seq of the records.
    pub(crate) fn seqs(&self) -> (u64, u64) {
        (
            (self.head.seq + 1).saturating_sub(self.count as u64),
            self.head.seq,
        )
    }
}

/// A group the log of record holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    /// Stored by this call; `micros` is what storing took (the sync, or the publish).
    Appended { micros: u64 },
    /// Found stored by an earlier attempt whose acknowledgement was lost, and folded into the
    /// chain like another writer's records: only the answers are left.
    Found,
}

/// Why a group was not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The log of record holds records after the head the group was sealed on (another writer
    /// stored first): they are folded into the chain now. Nothing of the group was stored.
    #[error("the log of record moved past the head the group was sealed on")]
    Moved,
    /// No acknowledgement in time: not stored now; it may still be, and is then folded like
    /// another writer's records.
    #[error("{0}")]
    Unacknowledged(BoxError),
    /// What the log of record holds past the head could not be folded in time: the group was
    /// not stored.
    #[error("{0}")]
    Behind(BoxError),
    /// The log of record refused the group for good (e.g. too large); the writer goes on.
    #[error("{0}")]
    Refused(BoxError),
    /// Stored or not, the log's state is not one to build on: every later write is refused.
    #[error("{0}")]
    Failed(Failure),
}

/// Why the writer refuses every write until a restart: sealing on a head it cannot trust would
/// fork the chain, and deciding on projections that missed records would decide against the
/// wrong state.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The log of record failed to store, or holds what does not continue the chain.
    #[error("{0}")]
    Log(Arc<dyn std::error::Error + Send + Sync>),
    #[error("the projection applier stopped")]
    ApplierStopped,
    #[error("projection apply failed: {0}")]
    Apply(Arc<ApplyError>),
}

impl Failure {
    pub(crate) fn log(e: impl std::error::Error + Send + Sync + 'static) -> Failure {
        Failure::Log(Arc::new(e))
    }
}

/// A record another writer stored in the log of record, checked and decoded: what
/// [`Chain::extend`] takes.
pub(crate) struct Folded {
    pub(crate) seq: u64,
    pub(crate) ts_micros: i64,
    pub(crate) hash: [u8; 32],
    pub(crate) event: Event,
    pub(crate) prepared: Prepared,
}

/// The chain as the writer holds it: its head, the way to the applier, and whether it can
/// still be built on. The writer appends its own groups; a log of record folds in what other
/// writers stored ([`extend`](Self::extend)).
pub(crate) struct Chain {
    pub(super) head: Head,
    /// The latest record time: a record is never sealed with an earlier one.
    pub(super) last_ts: i64,
    jobs: std::sync::mpsc::SyncSender<ApplyJob>,
    pub(super) progress: Arc<ApplyProgress>,
    pub(super) stats: Arc<AppenderStats>,
    pub(super) failed: Option<Failure>,
}

impl Chain {
    pub(super) fn new(
        head: Head,
        jobs: std::sync::mpsc::SyncSender<ApplyJob>,
        progress: Arc<ApplyProgress>,
        stats: Arc<AppenderStats>,
    ) -> Chain {
        Chain {
            head,
            last_ts: 0,
            jobs,
            progress,
            stats,
            failed: None,
        }
    }

    pub(crate) fn head(&self) -> Head {
        self.head
    }

    /// Whether the writer refuses every write (see [`Failure`]).
    pub(crate) fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// From now on every write is refused, for `why`.
    pub(crate) fn fail(&mut self, why: Failure) {
        self.stats.failed.store(true, Ordering::Relaxed);
        self.failed = Some(why);
    }

    /// Moves the head past `records`, which the caller checked to follow it one by one, and
    /// hands them to the applier; nobody on this node waits for them.
    pub(crate) fn extend(&mut self, records: Vec<Folded>) -> Result<(), Failure> {
        let Some(last) = records.last() else {
            return Ok(());
        };
        let head = Head {
            seq: last.seq,
            hash: last.hash,
        };
        let at = Instant::now();
        let mut group = Vec::with_capacity(records.len());
        let mut outcomes = Vec::with_capacity(records.len());
        let mut leaves = Vec::with_capacity(records.len());
        for r in records {
            self.last_ts = self.last_ts.max(r.ts_micros);
            outcomes.push(Committed {
                first_seq: r.seq,
                last_seq: r.seq,
                ts_micros: r.ts_micros,
            });
            leaves.push(r.hash);
            group.push(Submission {
                events: vec![(r.event, Vec::new(), r.prepared)],
                check: None,
                reply: None,
                early: false,
                at,
            });
        }
        self.head = head;
        self.hand(ApplyJob {
            group,
            outcomes,
            head,
            leaves,
        })
        .map_err(|_| Failure::ApplierStopped)
    }

    /// Hands a stored group to the applier; the job back if the applier is gone.
    pub(super) fn hand(&mut self, job: ApplyJob) -> Result<(), ApplyJob> {
        self.jobs.send(job).map_err(|e| e.0)
    }
}
