//! The appender: the only writer of the `log` tree, and the handle callers append through.
//!
//! ```text
//!  callers ─▶ queue ─▶ writer thread ─────────────────────────▶ applier thread ─▶ answers
//!                      gathers a group, checks preconditions,   folds it into the
//!                      seals it on the head, has it stored      projections and the Merkle
//!                                  │ store(sealed)               tree, moves the head
//!                                  ▼
//!                      LogOfRecord (seam.rs): where a record is of record
//!                      ├─ LocalLog (log/local.rs): one sled batch into the `log` tree,
//!                      │  flush + fdatasync (or a sync every interval)
//!                      └─ StreamLog (log/cluster/): one JetStream message on the head it was
//!                         sealed on, then mirrored into the `log` tree; folds the other
//!                         nodes' messages into the chain, takes turns, catches up
//! ```
//!
//! One OS thread, the writer ([`writer`]), owns the chain head. Callers submit the events of
//! one request and await the outcome. The writer takes what is queued (up to a bounded group),
//! checks each submission's precondition, seals the records and has the log of record store
//! them; a second thread, the applier ([`applier`]), folds each stored group into the
//! projections and only then answers its callers (a read's entry is answered once stored:
//! [`Appender::append_read`]). The two form a pipeline: while group N is applied, group N+1 is
//! sealed and stored, so both cores work.
//!
//! A submission may carry a precondition, checked against the projections right before its
//! events are sealed, with everything before it already applied: that is how "one export in
//! progress per tenant" or "enough credits" are decided without races. When the log of record
//! moved under a group (on a cluster: another node stored first), the group's precondition is
//! checked again on the state it will now be sealed on.
//!
//! The writer is one future, run by its own thread from start to stop: the thread's one
//! `block_on` ([`Driver`]). On one node it runs on a runtime of its own with neither I/O nor
//! timers (the sled commit needs neither); on a cluster on the service's runtime, whose workers
//! run the NATS client's I/O and timers while the writer awaits them. Blocking inside that
//! future (the sled batch and its fdatasync, waiting for the applier, folding on rayon) blocks
//! the writer's own thread only, never a runtime worker: waiting is the writer's job.

mod applier;
mod seam;
mod space;
mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use auditmem_projections::{Event, Prepared, Projections};
use tokio::sync::{mpsc, oneshot, watch};

use super::{Head, LogReader};
use crate::registry::ErrorCode;
use crate::tlog::MerkleTree;

pub use super::cluster::{mirror_position, ClusterLog};
pub use space::SpaceGuard;

pub(crate) use seam::{Chain, Failure, Folded, LogOfRecord, Sealed, StoreError, Stored};

/// How often the Merkle tree's new tiles are synced: a crash costs at most this much of
/// ingestion refolded from the log at the next start.
const TLOG_SYNC_EVERY: Duration = Duration::from_secs(1);

/// Queue depth before submitters wait (backpressure instead of unbounded memory).
const QUEUE_DEPTH: usize = 8192;

/// What an acknowledged append has survived on one node, where the `log` tree is the log of
/// record (`--log sled`, [`crate::log::local`]). On a cluster the stream is the log of record
/// and decides instead: see [`ClusterLog`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged once the group's sled batch was written, sled's `flush()` returned (it
    /// writes sled's buffers into its `db` file and ends in `sync_file_range`) and a real
    /// `fdatasync` of that file returned. An acknowledged append survives a crash of the
    /// process and of the machine (power loss, kernel crash), on disks and filesystems that
    /// honour a flush of their write cache (docs/OPERATIONS.md, "Durability modes").
    Fsync,
    /// Acknowledged once the group's sled batch was written and applied, without a sync. sled
    /// hands its buffer to its `db` file (the operating system's page cache) as batches go in,
    /// the write itself on sled's own threads, and a sidecar thread `fdatasync`s the file every
    /// interval. An acknowledged append survives a crash of the process, short of a buffer
    /// sled was still writing at that instant; a power loss or kernel crash can lose the last
    /// interval of acknowledged appends. A group holding an erasure is the exception: it is
    /// synced as with `Fsync` before it is folded, since folding it destroys keys.
    BatchInterval(Duration),
}

/// Why a precondition refused a submission.
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: String,
    /// Whole seconds after which the same request can pass (`Retry-After`), when known.
    pub retry_after: Option<u64>,
}

/// A rule checked right before sealing; `Fn`, not `FnOnce`: in a cluster a group that lost the
/// race for the stream's next sequence is checked again on the state it will be sealed on.
pub type Precondition = Box<dyn Fn(&Projections) -> Result<(), Rejection> + Send>;

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("{}", .0.message)]
    Rejected(Rejection),
    #[error("event could not be encoded: {0}")]
    Encode(String),
    #[error("log storage failed: {0}")]
    Storage(String),
    /// The data dir's filesystem is (nearly) full or read-only: nothing was written, and
    /// appends resume by themselves once it has room and is writable again.
    #[error("{0}")]
    NoSpace(String),
    #[error("the log is closed")]
    Closed,
    /// The cluster's log did not acknowledge the write in time (no quorum, no leader, no
    /// connection): it was not acknowledged; it may still land once the cluster recovers.
    #[error("{0}")]
    ClusterUnavailable(String),
}

/// Where a submission landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    pub first_seq: u64,
    pub last_seq: u64,
    pub ts_micros: i64,
}

/// The events of one request, on their way through the writer and the applier.
pub(crate) struct Submission {
    /// Each event with its stored bytes and its state-independent folding work.
    events: Vec<(Event, Vec<u8>, Prepared)>,
    check: Option<Precondition>,
    /// Who waits for the outcome (`None`: another node's records, nobody here waits).
    reply: Option<oneshot::Sender<Answer>>,
    /// Answered once stored, before the applier folds it ([`Appender::append_read`]).
    early: bool,
    /// When it was submitted: a cluster's write is answered within `--nats-timeout-ms` of it,
    /// however long it queued behind groups that waited for the stream.
    at: Instant,
}

/// A submission's outcome, and its events handed back to be freed by the caller: on the
/// thread that allocated them, mimalloc frees them locally, where the applier's frees of
/// another thread's blocks cost it ~4% of ingestion's CPU, purges included.
type Answer = (
    Result<Committed, AppendError>,
    Vec<(Event, Vec<u8>, Prepared)>,
);

impl Submission {
    fn answer(self, outcome: Result<Committed, AppendError>) {
        let Submission { reply, events, .. } = self;
        if let Some(reply) = reply {
            let _ = reply.send((outcome, events));
        }
    }
}

pub(crate) enum Msg {
    Append(Submission),
    Stop,
}

impl Msg {
    /// When the submission arrived (`None`: a stop).
    pub(crate) fn submitted_at(&self) -> Option<Instant> {
        match self {
            Msg::Append(s) => Some(s.at),
            Msg::Stop => None,
        }
    }
}

/// Counters exported as metrics.
#[derive(Default, Debug)]
pub struct AppenderStats {
    pub groups: AtomicU64,
    pub events: AtomicU64,
    pub last_group_events: AtomicU64,
    pub sync_micros_total: AtomicU64,
    pub last_sync_micros: AtomicU64,
    pub apply_micros_total: AtomicU64,
    pub failed: AtomicBool,
    /// The cluster's log did not acknowledge this node's last publish (cleared by the next
    /// acknowledged one).
    pub cluster_down: AtomicBool,
}

#[derive(Clone)]
pub struct Appender {
    tx: mpsc::Sender<Msg>,
    head: watch::Receiver<Head>,
    pub stats: Arc<AppenderStats>,
    space: SpaceGuard,
    /// In a cluster: the audit entries of requests answered while the stream could not take
    /// them, waiting to be appended (`drain_outbox`).
    outbox: Option<super::cluster::Outbox>,
    /// The Merkle tree over the log, holding every record up to the head.
    tlog: Arc<MerkleTree>,
    /// The highest seq answered before the applier folded it ([`Appender::caught_up`]).
    owed: Arc<AtomicU64>,
    #[cfg(test)]
    progress: Arc<applier::ApplyProgress>,
}

pub struct AppenderThread {
    writer: std::thread::JoinHandle<()>,
    applier: std::thread::JoinHandle<()>,
    tx: mpsc::Sender<Msg>,
}

impl AppenderThread {
    /// Asks the appender to finish what is queued and stop, and waits for both threads.
    pub async fn stop(self) {
        let _ = self.tx.send(Msg::Stop).await;
        let (writer, applier) = (self.writer, self.applier);
        let _ = tokio::task::spawn_blocking(move || {
            let _ = writer.join();
            let _ = applier.join();
        })
        .await;
    }

    /// A sender of the writer's queue, for a sidecar that ends when the writer does.
    pub(crate) fn queue(&self) -> mpsc::Sender<Msg> {
        self.tx.clone()
    }
}

/// How the writer's thread runs the writer's future: the one place it blocks on async code.
pub(crate) enum Driver {
    /// A runtime of the writer's own, without I/O or timers: for a log of record that needs
    /// neither (the local sled commit).
    Own(tokio::runtime::Runtime),
    /// The service's runtime, whose workers run the I/O and timers the writer awaits.
    On(tokio::runtime::Handle),
}

impl Driver {
    /// A runtime of the writer's own.
    pub(crate) fn own() -> std::io::Result<Driver> {
        Ok(Driver::Own(
            tokio::runtime::Builder::new_current_thread().build()?,
        ))
    }

    fn run<F: std::future::Future>(self, future: F) -> F::Output {
        match self {
            Driver::Own(runtime) => runtime.block_on(future),
            Driver::On(handle) => handle.block_on(future),
        }
    }
}

impl Appender {
    /// Starts the appender thread over an opened database whose projections are caught up.
    pub fn start(
        db: sled::Db,
        data_dir: &Path,
        projections: Arc<Projections>,
        durability: Durability,
        min_free_bytes: u64,
    ) -> Result<(Appender, AppenderThread), super::LogError> {
        Self::start_on(db, data_dir, projections, durability, min_free_bytes, None)
    }

    /// Like [`start`](Self::start); with `cluster`, the log of record is the stream and the
    /// `log` tree its mirror (see the module's documentation).
    pub fn start_on(
        db: sled::Db,
        data_dir: &Path,
        projections: Arc<Projections>,
        durability: Durability,
        min_free_bytes: u64,
        cluster: Option<ClusterLog>,
    ) -> Result<(Appender, AppenderThread), super::LogError> {
        match cluster {
            None => super::local::start(db, data_dir, projections, durability, min_free_bytes),
            Some(c) => super::cluster::start(db, data_dir, projections, min_free_bytes, c),
        }
    }

    /// Starts the writer over `of_record` (made by `open` from the `log` tree and its head)
    /// and the applier; what every log of record shares.
    pub(crate) fn launch<L: LogOfRecord>(
        db: &sled::Db,
        data_dir: &Path,
        projections: Arc<Projections>,
        min_free_bytes: u64,
        driver: Driver,
        outbox: Option<super::cluster::Outbox>,
        open: impl FnOnce(LogReader, Head) -> Result<L, super::LogError>,
    ) -> Result<(Appender, AppenderThread), super::LogError> {
        let log = LogReader::open(db)?;
        let head = log.head()?;
        // The tree is a projection: whatever it lacks (a data dir from before it, a tail lost
        // in a crash since it is written without a sync) is folded from the log here.
        let tlog = Arc::new(MerkleTree::open(db, data_dir).map_err(tlog_error)?);
        let missing = tlog.catch_up(&log, None).map_err(tlog_error)?;
        // The leaves past the last complete tile are folded again at every open: not news.
        // A larger gap was built by `serve` before, with its progress shown.
        if missing > crate::tlog::TILE_WIDTH as u64 {
            tracing::info!(records = missing, "Merkle tree caught up from the log");
        } else if missing > 0 {
            tracing::debug!(
                records = missing,
                "Merkle tree's unsynced tail folded again"
            );
        }
        // The applier writes tiles without a sync; a restart keeps what was synced.
        MerkleTree::sync_every(&tlog, TLOG_SYNC_EVERY)?;
        let of_record = open(log, head)?;
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (head_tx, head_rx) = watch::channel(head);
        let stats = Arc::new(AppenderStats::default());
        let progress = Arc::new(applier::ApplyProgress::at(head.seq));
        let (job_tx, job_rx) = std::sync::mpsc::sync_channel(4);
        let space = SpaceGuard::new(data_dir, min_free_bytes);
        let chain = Chain::new(head, job_tx, progress.clone(), stats.clone());
        #[cfg(test)]
        let held = progress.clone();
        let writer = writer::Writer::new(of_record, chain, projections.clone(), space.clone());
        let applier_stats = stats.clone();
        let applier_tlog = tlog.clone();
        let applier = std::thread::Builder::new()
            .name("appender-apply".into())
            .spawn(move || {
                applier::apply_loop(
                    job_rx,
                    projections,
                    applier_tlog,
                    progress,
                    head_tx,
                    applier_stats,
                )
            })?;
        let handle = std::thread::Builder::new()
            .name("appender".into())
            .spawn(move || driver.run(writer.run(rx)))?;
        Ok((
            Appender {
                tx: tx.clone(),
                head: head_rx,
                stats,
                space,
                outbox,
                tlog,
                owed: Arc::default(),
                #[cfg(test)]
                progress: held,
            },
            AppenderThread {
                writer: handle,
                applier,
                tx,
            },
        ))
    }

    pub fn head(&self) -> Head {
        *self.head.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Head> {
        self.head.clone()
    }

    /// The Merkle tree over the log; it holds every record up to [`head`](Self::head).
    pub fn tlog(&self) -> &Arc<MerkleTree> {
        &self.tlog
    }

    /// The guard of the data dir's free space, which refuses appends below the log's reserve.
    pub fn space(&self) -> &SpaceGuard {
        &self.space
    }

    /// Why every append is refused now, if it is: after a storage or projection failure (until
    /// a restart), or while the data dir is read-only or below its reserve (until that ends).
    pub fn refusing(&self) -> Option<String> {
        // The failure's detail is in the server log; what failed is not the caller's business.
        if self.stats.failed.load(Ordering::Relaxed) {
            return Some("the log refuses writes after a storage failure, until a restart".into());
        }
        self.space.refusal()
    }

    /// Whether the cluster's log failed to acknowledge this node's last publish.
    pub fn cluster_down(&self) -> bool {
        self.stats.cluster_down.load(Ordering::Relaxed)
    }

    /// Whether [`defer`](Self::defer) can keep an event (a clustered node).
    pub fn defers(&self) -> bool {
        self.outbox.is_some()
    }

    /// Keeps `event` on this node's disk, to be appended once the cluster takes writes again
    /// ([`drain_outbox`](Self::drain_outbox)): how a read answered during a loss of quorum keeps
    /// its audit entry.
    pub fn defer(&self, event: &Event) -> Result<(), AppendError> {
        match &self.outbox {
            Some(outbox) => outbox.defer(event),
            None => Err(AppendError::Closed),
        }
    }

    /// How many deferred audit entries wait in this node's outbox (`None`: not a clustered node).
    pub fn outbox_len(&self) -> Option<usize> {
        self.outbox.as_ref().map(super::cluster::Outbox::len)
    }

    /// Appends the deferred audit entries, oldest first, whenever the cluster takes writes;
    /// ends when the appender stops.
    pub async fn drain_outbox(self) {
        if let Some(outbox) = self.outbox.clone() {
            outbox.drain(self).await;
        }
    }

    /// Whether the writer has stopped taking submissions.
    pub(crate) fn closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Appends the events of one request atomically; resolves once durable and applied.
    pub async fn append(&self, events: Vec<Event>) -> Result<Committed, AppendError> {
        self.submit(events, None, false).await
    }

    /// Appends the audit entry of a request that changed nothing (a read, a refusal); resolves
    /// once durable, without waiting for the applier to fold it: a read answered while the
    /// applier folds another tenant's large group (an erasure of thousands of memories) does
    /// not wait for that fold. Whatever reads the folded state waits first, in
    /// [`caught_up`](Self::caught_up), for every entry answered so.
    pub async fn append_read(&self, events: Vec<Event>) -> Result<Committed, AppendError> {
        let c = self.submit(events, None, true).await?;
        self.owed.fetch_max(c.last_seq, Ordering::SeqCst);
        Ok(c)
    }

    /// Resolves once the applier has folded every entry that
    /// [`append_read`](Self::append_read) answered before its fold, or the appender stopped:
    /// what a request reads of the folded state then holds every entry answered before it
    /// came, as if each had been answered after its fold.
    pub async fn caught_up(&self) {
        let owed = self.owed.load(Ordering::SeqCst);
        if self.head().seq >= owed {
            return;
        }
        let mut head = self.subscribe();
        let _ = head.wait_for(|h| h.seq >= owed).await;
    }

    /// Like [`append`](Self::append), after `check` accepted the current state.
    pub async fn append_checked(
        &self,
        events: Vec<Event>,
        check: Precondition,
    ) -> Result<Committed, AppendError> {
        self.submit(events, Some(check), false).await
    }

    async fn submit(
        &self,
        events: Vec<Event>,
        check: Option<Precondition>,
        early: bool,
    ) -> Result<Committed, AppendError> {
        // Encode and prepare on the caller's thread (many run at once): the writer only hashes
        // and writes, the applier only links and indexes.
        let mut encoded = Vec::with_capacity(events.len());
        for e in events {
            let bytes = e.encode().map_err(|e| AppendError::Encode(e.to_string()))?;
            let prepared = Projections::prepare(&e);
            encoded.push((e, bytes, prepared));
        }
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Append(Submission {
                at: Instant::now(),
                events: encoded,
                check,
                reply: Some(reply),
                early,
            }))
            .await
            .map_err(|_| AppendError::Closed)?;
        let (outcome, events) = rx.await.map_err(|_| AppendError::Closed)?;
        drop(events);
        outcome
    }
}

#[cfg(test)]
impl Appender {
    /// Stalls the applier (before its next batch, or once the one it folds is answered) until
    /// the guard is dropped.
    pub(crate) fn hold_applier(&self) -> std::sync::MutexGuard<'_, ()> {
        self.progress
            .folding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn tlog_error(e: crate::tlog::TlogError) -> super::LogError {
    match e {
        crate::tlog::TlogError::Log(e) => e,
        other => super::LogError::Io(std::io::Error::other(other.to_string())),
    }
}

#[cfg(test)]
mod tests;
