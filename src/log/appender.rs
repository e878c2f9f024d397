//! The appender: the only writer of the `log` tree.
//!
//! One OS thread, the writer, owns the chain head. Callers submit the events of one request and
//! await the outcome. The writer takes what is queued (up to a bounded group), seals the
//! records, writes them as one atomic sled batch and makes the batch durable (in `fsync` mode:
//! sled's `flush()`, which on Linux ends in `sync_file_range`, followed by a real `fdatasync` of
//! sled's `db` file). A second thread, the applier, folds each durable group into the
//! projections and only then answers its callers. The two form a pipeline: while group N is
//! applied, group N+1 is written and synced, so both cores work.
//!
//! A submission may carry a precondition, checked against the projections right before its
//! events are sealed, with everything before it already applied: that is how "one export in
//! progress per tenant" or "enough credits" are decided without races.
//!
//! With the log on a NATS JetStream stream (`--log nats://...`, [`super::nats`]) the writer
//! publishes each sealed group as one message on the stream sequence it last folded, and only a
//! stored message is written to the local `log` tree (the mirror) and applied. When another
//! node published first, the writer folds what it missed, checks the group's precondition again
//! on the new state, seals the group on the new head and publishes again. Between groups it
//! folds the other nodes' messages as they arrive.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use auditmem_projections::{Applied, Event, Prepared, Projections};
use tokio::sync::{mpsc, oneshot, watch};

use super::nats::{self, Feed, NatsLog, Published};
use super::record::{Chunker, Record};
use super::{Head, LogReader};
use crate::registry::ErrorCode;
use crate::tlog::MerkleTree;

/// How often the Merkle tree's new tiles are synced: a crash costs at most this much of
/// ingestion refolded from the log at the next start.
const TLOG_SYNC_EVERY: Duration = Duration::from_secs(1);

/// How many events one group commit takes at most.
const MAX_GROUP_EVENTS: usize = 4096;
/// Queue depth before submitters wait (backpressure instead of unbounded memory).
const QUEUE_DEPTH: usize = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged = on disk: flush + fdatasync before answering.
    Fsync,
    /// Acknowledged = in sled's page cache; flushed + fdatasynced every interval. A power loss
    /// can lose the last interval of acknowledged appends.
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

struct Submission {
    /// Each event with its stored bytes and its state-independent folding work.
    events: Vec<(Event, Vec<u8>, Prepared)>,
    check: Option<Precondition>,
    reply: oneshot::Sender<Result<Committed, AppendError>>,
    /// When it was submitted: a cluster's write is answered within `--nats-timeout-ms` of it,
    /// however long it queued behind groups that waited for the stream.
    at: Instant,
}

enum Msg {
    Append(Submission),
    Stop,
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
    /// them, each an event's bytes, waiting to be appended (`drain_outbox`).
    outbox: Option<sled::Tree>,
    /// The Merkle tree over the log, holding every record up to the head.
    tlog: Arc<MerkleTree>,
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
}

/// How far the applier got; the writer waits on it before checking a precondition.
#[derive(Default)]
struct ApplyProgress {
    seq: std::sync::Mutex<u64>,
    moved: std::sync::Condvar,
    failed: std::sync::Mutex<Option<String>>,
}

/// A durable group on its way to the applier.
struct ApplyJob {
    group: Vec<Submission>,
    outcomes: Vec<Committed>,
    head: Head,
    /// The blake3 hashes of the records this job stored, the last one `head`'s: their leaves
    /// join the Merkle tree before anyone hears back (empty when they are in it already).
    leaves: Vec<[u8; 32]>,
}

/// Refuses appends before they touch the disk when its filesystem has less than a reserve
/// free or is mounted read-only. sled turns a failed write into a permanent error of the
/// whole database (and our appender then refuses everything until a restart), so running
/// out of space must be caught before sled meets it: the reserve leaves room for the group
/// being written, a new 8 MiB segment and sled's snapshot.
#[derive(Clone, Debug)]
pub struct SpaceGuard {
    dir: PathBuf,
    min_free_bytes: u64,
}

impl SpaceGuard {
    pub fn new(dir: &Path, min_free_bytes: u64) -> Self {
        Self {
            dir: dir.to_path_buf(),
            min_free_bytes,
        }
    }

    /// Whether the filesystem of `dir` is mounted read-only.
    pub fn read_only(dir: &Path) -> std::io::Result<bool> {
        let st = rustix::fs::statvfs(dir)?;
        Ok(st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
    }

    /// The free space the log keeps, bytes (`--min-free-mb`).
    pub fn min_free_bytes(&self) -> u64 {
        self.min_free_bytes
    }

    /// Why appends are refused now, if they are: the filesystem is read-only, below the
    /// reserve, or cannot be asked.
    pub fn refusal(&self) -> Option<String> {
        let st = match rustix::fs::statvfs(&self.dir) {
            Ok(st) => st,
            Err(e) => return Some(format!("cannot check the data dir's free space: {e}")),
        };
        if st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
            return Some("the data dir is on a read-only filesystem".into());
        }
        let free = st.f_bavail.saturating_mul(st.f_frsize);
        (free < self.min_free_bytes).then(|| {
            format!(
                "the data disk is full ({} MiB free, writes need {} MiB)",
                free >> 20,
                self.min_free_bytes.div_ceil(1 << 20)
            )
        })
    }

    /// `Err` with the message for the caller when an append must not be tried now.
    pub fn check(&self) -> Result<(), String> {
        match self.refusal() {
            Some(why) => Err(format!("{why}; nothing was written")),
            None => Ok(()),
        }
    }
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// The tree holding the stream sequence of the last message folded into the mirror.
const CLUSTER_TREE: &str = "cluster";
const OUTBOX_TREE: &str = "cluster_outbox";
const POSITION_KEY: &[u8] = b"stream_seq";

/// The cluster's log, for [`Appender::start_on`].
pub struct ClusterLog {
    pub log: NatsLog,
    /// The runtime the NATS client runs on; the writer thread blocks on its futures.
    pub handle: tokio::runtime::Handle,
}

/// The stream sequence of the last message a data dir's mirror folded (0: none).
pub fn mirror_position(db: &sled::Db) -> Result<u64, super::LogError> {
    let tree = db.open_tree(CLUSTER_TREE)?;
    Ok(tree
        .get(POSITION_KEY)?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map_or(0, u64::from_be_bytes))
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
        let log = LogReader::open(&db)?;
        let head = log.head()?;
        // The tree is a projection: whatever it lacks (a data dir from before it, a tail lost
        // in a crash since it is written without a sync) is folded from the log here.
        let tlog = Arc::new(MerkleTree::open(&db, data_dir).map_err(tlog_error)?);
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
        let cluster = match cluster {
            None => None,
            Some(c) => {
                let meta = db.open_tree(CLUSTER_TREE)?;
                let stream_seq = mirror_position(&db)?;
                if stream_seq == 0 && head.seq > 0 {
                    return Err(super::LogError::Io(std::io::Error::other(format!(
                        "this data dir holds a log of {} records that is not a mirror of the stream: start a cluster node on an empty data dir",
                        head.seq
                    ))));
                }
                Some(Cluster {
                    timeout: c.log.config.timeout,
                    log: c.log,
                    handle: c.handle,
                    feed: None,
                    stream_seq,
                    meta,
                })
            }
        };
        // sled keeps its pages in the file `db`; a second handle lets us fdatasync it, which
        // sled 0.34's own flush (sync_file_range) does not do.
        let db_file = File::open(data_dir.join("db"))?;
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        let (head_tx, head_rx) = watch::channel(head);
        let stats = Arc::new(AppenderStats::default());
        let progress = Arc::new(ApplyProgress::default());
        if let Ok(mut seq) = progress.seq.lock() {
            *seq = head.seq;
        }
        let (job_tx, job_rx) = std::sync::mpsc::sync_channel::<ApplyJob>(4);
        let space = SpaceGuard::new(data_dir, min_free_bytes);
        let clustered = cluster.is_some();
        let outbox = if clustered {
            Some(db.open_tree(OUTBOX_TREE)?)
        } else {
            None
        };
        let mut writer = Worker {
            db,
            log,
            db_file,
            durability,
            head,
            last_ts: 0,
            stats: stats.clone(),
            failed: None,
            progress: progress.clone(),
            jobs: job_tx,
            projections: projections.clone(),
            space: space.clone(),
            cluster,
        };
        let applier_stats = stats.clone();
        let applier_tlog = tlog.clone();
        let applier = std::thread::Builder::new()
            .name("appender-apply".into())
            .spawn(move || {
                apply_loop(
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
            .spawn(move || writer.run(rx))?;
        if let (Durability::BatchInterval(every), false) = (durability, clustered) {
            spawn_interval_syncer(data_dir, every, tx.clone())?;
        }
        Ok((
            Appender {
                tx: tx.clone(),
                head: head_rx,
                stats,
                space,
                outbox,
                tlog,
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
        let Some(outbox) = &self.outbox else {
            return Err(AppendError::Closed);
        };
        let bytes = event
            .encode()
            .map_err(|e| AppendError::Encode(e.to_string()))?;
        // Time-ordered keys: the entries join the log in the order they were answered.
        let key = uuid::Uuid::now_v7();
        outbox
            .insert(key.as_bytes(), bytes)
            .and_then(|_| outbox.flush())
            .map(|_| ())
            .map_err(|e| AppendError::Storage(e.to_string()))
    }

    /// Appends the deferred audit entries, oldest first, whenever the cluster takes writes;
    /// ends when the appender stops.
    pub async fn drain_outbox(self) {
        let Some(outbox) = self.outbox.clone() else {
            return;
        };
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if self.tx.is_closed() {
                return;
            }
            let mut keys = Vec::new();
            let mut events = Vec::new();
            for kv in outbox.iter().take(256) {
                let Ok((k, v)) = kv else { break };
                match Event::decode(&v) {
                    Ok(e) => {
                        keys.push(k);
                        events.push(e);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "an undecodable deferred audit entry; dropped");
                        let _ = outbox.remove(k);
                    }
                }
            }
            if events.is_empty() {
                continue;
            }
            let n = events.len();
            match self.append(events).await {
                Ok(_) => {
                    for k in keys {
                        let _ = outbox.remove(k);
                    }
                    let _ = outbox.flush_async().await;
                    tracing::info!(entries = n, "deferred audit entries appended");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "deferred audit entries wait for the cluster");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Appends the events of one request atomically; resolves once durable and applied.
    pub async fn append(&self, events: Vec<Event>) -> Result<Committed, AppendError> {
        self.submit(events, None).await
    }

    /// Like [`append`](Self::append), after `check` accepted the current state.
    pub async fn append_checked(
        &self,
        events: Vec<Event>,
        check: Precondition,
    ) -> Result<Committed, AppendError> {
        self.submit(events, Some(check)).await
    }

    async fn submit(
        &self,
        events: Vec<Event>,
        check: Option<Precondition>,
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
                reply,
            }))
            .await
            .map_err(|_| AppendError::Closed)?;
        rx.await.map_err(|_| AppendError::Closed)?
    }
}

/// In batch-interval mode a sidecar thread makes sled durable on a timer.
fn spawn_interval_syncer(
    data_dir: &Path,
    every: Duration,
    tx: mpsc::Sender<Msg>,
) -> std::io::Result<()> {
    let file = File::open(data_dir.join("db"))?;
    std::thread::Builder::new()
        .name("log-syncer".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            if tx.is_closed() {
                let _ = file.sync_data();
                return;
            }
            if let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "periodic fdatasync failed");
            }
        })?;
    Ok(())
}

struct Worker {
    db: sled::Db,
    log: LogReader,
    db_file: File,
    durability: Durability,
    head: Head,
    last_ts: i64,
    stats: Arc<AppenderStats>,
    failed: Option<String>,
    progress: Arc<ApplyProgress>,
    jobs: std::sync::mpsc::SyncSender<ApplyJob>,
    projections: Arc<Projections>,
    space: SpaceGuard,
    cluster: Option<Cluster>,
}

/// The writer's side of a clustered log.
struct Cluster {
    log: NatsLog,
    handle: tokio::runtime::Handle,
    /// The stream from the message after `stream_seq` on; `None` until (re)created.
    feed: Option<Feed>,
    /// The stream sequence of the last message folded into the mirror.
    stream_seq: u64,
    meta: sled::Tree,
    timeout: Duration,
}

/// A record of another node's message, checked against its own hash and decoded.
struct Folded<'a> {
    seq: u64,
    ts_micros: i64,
    prev: &'a [u8],
    hash: [u8; 32],
    /// Its bytes in the message.
    range: std::ops::Range<usize>,
    event: Event,
    prepared: Prepared,
}

/// A group's records sealed on a head, not yet stored.
struct Sealed {
    outcomes: Vec<Committed>,
    chunks: Chunker,
    /// The records back to back: the message published to the cluster's stream.
    message: Vec<u8>,
    head: Head,
    ts: i64,
    count: usize,
    /// Each record's hash, in order (the Merkle tree's leaves).
    leaves: Vec<[u8; 32]>,
}

/// What the writer does next in a cluster.
enum Next {
    Submitted(Option<Msg>),
    /// Nothing arrived for `FEED_CHECK`.
    Idle,
    Fed(Option<Result<Box<async_nats::jetstream::Message>, String>>),
}

/// How long an idle writer waits before checking that its feed has not stalled.
const FEED_CHECK: Duration = Duration::from_secs(2);

/// The applier: folds each durable group into the projections, then answers its callers.
fn apply_loop(
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
        let result = projections.apply(&applied).map_err(|e| e.to_string());
        drop(applied);
        // The tree's leaves, before the head moves: a checkpoint signed at the head, or a
        // proof asked for by a caller who just heard back, finds them.
        let result = result.and_then(|()| {
            batch.iter().try_for_each(|job| {
                let first = (job.head.seq + 1).saturating_sub(job.leaves.len() as u64);
                if job.leaves.is_empty() {
                    return Ok(());
                }
                tlog.append(first, &job.leaves).map_err(|e| e.to_string())
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
                    *f = Some(format!("projection apply failed: {e}"));
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
                let _ = sub.reply.send(Ok(outcome));
            }
        }
        progress.moved.notify_all();
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

impl Worker {
    fn run(&mut self, mut rx: mpsc::Receiver<Msg>) {
        if self.cluster.is_some() {
            return self.run_clustered(rx);
        }
        while let Some(first) = rx.blocking_recv() {
            if self.take(first, &mut rx) {
                break;
            }
        }
        let _ = self.db.flush();
        let _ = self.db_file.sync_data();
    }

    /// Commits `first` and what is queued after it; on a stop, everything queued. Whether the
    /// writer stops.
    fn take(&mut self, first: Msg, rx: &mut mpsc::Receiver<Msg>) -> bool {
        let (group, stopping) = gather(first, rx);
        self.process(group);
        if stopping {
            self.drain(rx);
        }
        stopping
    }

    /// After a stop: commits what is still queued, one submission at a time.
    fn drain(&mut self, rx: &mut mpsc::Receiver<Msg>) {
        rx.close();
        while let Ok(m) = rx.try_recv() {
            if let Msg::Append(s) = m {
                self.process(vec![s]);
            }
        }
    }

    /// The writer with the log on the cluster's stream: it takes whichever comes first, a
    /// message another node published (folded into the mirror) or submissions (published).
    fn run_clustered(&mut self, mut rx: mpsc::Receiver<Msg>) {
        let Some(handle) = self.cluster.as_ref().map(|c| c.handle.clone()) else {
            return;
        };
        loop {
            self.ensure_feed();
            let next = {
                let feed = self.cluster.as_mut().and_then(|c| c.feed.as_mut());
                handle.block_on(async {
                    tokio::select! {
                        biased;
                        m = async {
                            match feed {
                                Some(f) => nats::next_message(f).await.map(|r| r.map(Box::new)),
                                None => {
                                    // No feed (the cluster is unreachable): try again shortly.
                                    tokio::time::sleep(Duration::from_millis(250)).await;
                                    Some(Err("no feed".into()))
                                }
                            }
                        } => Next::Fed(m),
                        s = rx.recv() => Next::Submitted(s),
                        _ = tokio::time::sleep(FEED_CHECK) => Next::Idle,
                    }
                })
            };
            match next {
                Next::Fed(Some(Ok(message))) => self.fold_message(&message),
                Next::Fed(Some(Err(e))) => {
                    if e != "no feed" {
                        tracing::warn!(error = %e, "following the log stream; following it anew");
                        self.drop_feed();
                    }
                }
                Next::Idle => self.check_feed(),
                Next::Fed(None) => {
                    if let Some(c) = self.cluster.as_mut() {
                        c.feed = None;
                    }
                }
                Next::Submitted(None) => break,
                Next::Submitted(Some(first)) => {
                    // Waiting for the turn before gathering: what arrives meanwhile joins
                    // this group rather than waiting a whole round for the next.
                    let deadline = match (&first, self.cluster.as_ref()) {
                        (Msg::Append(sub), Some(c)) => {
                            handle.block_on(c.log.say_idle(false));
                            Some(sub.at + c.timeout)
                        }
                        _ => None,
                    };
                    if let Some(deadline) = deadline {
                        self.await_turn(deadline);
                    }
                    if self.take(first, &mut rx) {
                        break;
                    }
                    // With nothing queued, the others need not wait for this node's turn.
                    if rx.is_empty() {
                        if let Some(c) = self.cluster.as_ref() {
                            handle.block_on(c.log.say_idle(true));
                        }
                    }
                }
            }
        }
        let _ = self.db.flush();
    }

    /// Forgets the feed; the next [`ensure_feed`](Self::ensure_feed) follows the stream anew
    /// from the message after the mirror's position (nothing is skipped or folded twice).
    fn drop_feed(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.feed = None;
        }
    }

    /// After `FEED_CHECK` without a message or a submission: if the stream holds messages the
    /// feed has not delivered, the feed stalled (seen after a loss of quorum); follow it anew.
    fn check_feed(&mut self) {
        let Some(c) = self.cluster.as_ref() else {
            return;
        };
        let last = c
            .handle
            .block_on(async { tokio::time::timeout(c.timeout, c.log.last_sequence()).await });
        if let Ok(Ok(last)) = last {
            if last > c.stream_seq {
                tracing::warn!(
                    stream_last = last,
                    folded = c.stream_seq,
                    "the log stream's feed stalled; following it anew"
                );
                self.drop_feed();
            }
        }
    }

    /// (Re)creates the stream's feed from the message after the last one folded.
    fn ensure_feed(&mut self) {
        let Some(c) = self.cluster.as_mut() else {
            return;
        };
        if c.feed.is_some() {
            return;
        }
        let from = c.stream_seq + 1;
        match c.handle.block_on(async {
            tokio::time::timeout(c.timeout, c.log.follow(from))
                .await
                .unwrap_or_else(|_| Err("timed out creating the consumer".into()))
        }) {
            Ok(feed) => c.feed = Some(feed),
            Err(e) => tracing::warn!(error = %e, from, "cannot follow the log stream yet"),
        }
    }

    /// Folds a message of the stream into the mirror and the projections, unless it is one
    /// this node already folded (its own, acknowledged). Records the mirror already holds
    /// (a restart between writing the mirror and its position) are checked and skipped.
    fn fold_message(&mut self, message: &async_nats::jetstream::Message) {
        let stream_seq = match message.info() {
            Ok(info) => info.stream_sequence,
            Err(e) => {
                tracing::warn!(error = %e, "a log stream message without its metadata");
                return;
            }
        };
        let Some(done) = self.cluster.as_ref().map(|c| c.stream_seq) else {
            return;
        };
        if stream_seq <= done || self.failed.is_some() {
            return;
        }
        if let Err(why) = self.fold_records(stream_seq, &message.payload) {
            tracing::error!(error = %why, stream_seq, "the log stream does not continue this node's chain; the appender refuses further writes");
            self.fail(why, Vec::new());
            return;
        }
        if let Some(c) = self.cluster.as_ref() {
            c.log.published(stream_seq, NatsLog::publisher(message));
        }
    }

    fn fold_records(&mut self, stream_seq: u64, payload: &[u8]) -> Result<(), String> {
        use rayon::prelude::*;
        let mut chunks = Chunker::default();
        let mut subs = Vec::new();
        let mut outcomes: Vec<Committed> = Vec::new();
        let mut leaves = Vec::new();
        let mut head = self.head;
        let mut last_ts = self.last_ts;
        let pieces: Vec<_> = if payload.is_empty() {
            Vec::new()
        } else {
            super::record::pieces(payload).collect()
        };
        // Each record's own checks and decoding on every core: the next node to publish waits
        // for this fold (the turn order), while the others mostly wait for their turn. Only
        // the linking below is sequential.
        let decoded: Vec<Result<Folded, String>> = pieces
            .into_par_iter()
            .with_min_len(32)
            .map(|piece| {
                let r = piece
                    .record
                    .map_err(|e| format!("stream message {stream_seq}: {e}"))?;
                let hash = r.computed_hash();
                if r.hash != hash.as_slice() {
                    return Err(format!(
                        "stream message {stream_seq}: record {} does not match its hash",
                        r.seq
                    ));
                }
                // Also for a record the mirror holds already (after a restart between the
                // mirror's write and its position): rare, and its bytes are the mirror's.
                let event = Event::decode(r.event)
                    .map_err(|e| format!("stream message {stream_seq}: record {}: {e}", r.seq))?;
                Ok(Folded {
                    seq: r.seq,
                    ts_micros: r.ts_micros,
                    prev: r.prev,
                    hash,
                    range: piece.range,
                    prepared: Projections::prepare(&event),
                    event,
                })
            })
            .collect();
        for f in decoded {
            let f = f?;
            if f.seq <= head.seq {
                // Already in the mirror: it must be the same record.
                let mine = self.log.get(f.seq).map_err(|e| e.to_string())?;
                if mine.map(|m| m.hash) != Some(f.hash) {
                    return Err(format!(
                        "stream message {stream_seq}: record {} differs from the mirror's",
                        f.seq
                    ));
                }
                continue;
            }
            if f.seq != head.seq + 1 || f.prev != head.hash.as_slice() {
                return Err(format!(
                    "stream message {stream_seq}: record {} does not follow record {}",
                    f.seq, head.seq
                ));
            }
            chunks.push(f.seq, payload[f.range].to_vec());
            let (reply, _) = oneshot::channel();
            subs.push(Submission {
                at: Instant::now(),
                events: vec![(f.event, Vec::new(), f.prepared)],
                check: None,
                // Nobody on this node waits for another node's records.
                reply,
            });
            outcomes.push(Committed {
                first_seq: f.seq,
                last_seq: f.seq,
                ts_micros: f.ts_micros,
            });
            head = Head {
                seq: f.seq,
                hash: f.hash,
            };
            leaves.push(f.hash);
            last_ts = last_ts.max(f.ts_micros);
        }
        self.mirror(chunks, stream_seq)?;
        self.head = head;
        self.last_ts = last_ts;
        if subs.is_empty() {
            return Ok(());
        }
        let job = ApplyJob {
            group: subs,
            outcomes,
            head,
            leaves,
        };
        self.jobs
            .send(job)
            .map_err(|_| "the projection applier stopped".to_string())
    }

    /// Writes stored records into the mirror and moves its stream position. Not synced: the
    /// stream is the durable copy, and a mirror that lost its tail folds it again.
    fn mirror(&mut self, chunks: Chunker, stream_seq: u64) -> Result<(), String> {
        let Some(c) = self.cluster.as_mut() else {
            return Err("not clustered".into());
        };
        self.log
            .tree()
            .apply_batch(chunks.into_batch())
            .map_err(|e| e.to_string())?;
        c.meta
            .insert(POSITION_KEY, &stream_seq.to_be_bytes())
            .map_err(|e| e.to_string())?;
        c.stream_seq = stream_seq;
        Ok(())
    }

    /// Commits a group, evaluating preconditions with everything before them applied.
    fn process(&mut self, group: Vec<Submission>) {
        let mut pending: Vec<Submission> = Vec::new();
        for s in group {
            if let Some(check) = &s.check {
                self.commit(std::mem::take(&mut pending));
                self.wait_applied();
                if let Some(why) = &self.failed {
                    let _ = s.reply.send(Err(AppendError::Storage(why.clone())));
                    continue;
                }
                if let Err(r) = check(&self.projections) {
                    let _ = s.reply.send(Err(AppendError::Rejected(r)));
                    continue;
                }
            }
            pending.push(s);
        }
        self.commit(pending);
    }

    /// Blocks until the applier has folded everything written so far.
    fn wait_applied(&mut self) {
        let target = self.head.seq;
        let mut seq = self.progress.seq.lock().unwrap_or_else(|p| p.into_inner());
        while *seq < target {
            seq = self
                .progress
                .moved
                .wait(seq)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(seq);
        if let Some(why) = self.progress.failed.lock().ok().and_then(|f| f.clone()) {
            self.failed.get_or_insert(why);
        }
    }

    fn commit(&mut self, group: Vec<Submission>) {
        if group.is_empty() {
            return;
        }
        if self.failed.is_none() {
            if let Some(why) = self.progress.failed.lock().ok().and_then(|f| f.clone()) {
                self.failed = Some(why);
            }
        }
        if let Some(why) = &self.failed {
            for s in group {
                let _ = s.reply.send(Err(AppendError::Storage(why.clone())));
            }
            return;
        }
        if let Err(why) = self.space.check() {
            metrics::counter!("auditmem_appender_refused_total").increment(group.len() as u64);
            tracing::warn!(reason = %why, "append refused before writing");
            for s in group {
                let _ = s.reply.send(Err(AppendError::NoSpace(why.clone())));
            }
            return;
        }
        if self.cluster.is_some() {
            return self.commit_clustered(group);
        }
        let mut sealed = self.seal(&group);
        let started = Instant::now();
        let result = self
            .log
            .tree()
            .apply_batch(sealed.chunks_batch())
            .map_err(|e| e.to_string())
            .and_then(|_| match self.durability {
                Durability::Fsync => self
                    .db
                    .flush()
                    .map_err(|e| e.to_string())
                    .and_then(|_| self.db_file.sync_data().map_err(|e| e.to_string())),
                Durability::BatchInterval(_) => Ok(()),
            });
        let sync_us = started.elapsed().as_micros() as u64;
        if let Err(why) = result {
            // The batch may or may not be on disk; nothing more can be appended safely on top
            // of an unknown head. Refuse writes until a restart re-reads the head.
            tracing::error!(error = %why, "log write failed; the appender refuses further writes");
            self.fail(why, group);
            return;
        }
        self.committed(group, sealed, sync_us);
    }

    /// Seals `group` on the current head, one timestamp for all of it.
    fn seal(&self, group: &[Submission]) -> Sealed {
        let ts = now_micros().max(self.last_ts);
        let mut seq = self.head.seq;
        let mut prev = self.head.hash;
        let mut outcomes = Vec::with_capacity(group.len());
        let mut count = 0usize;
        let mut chunks = Chunker::default();
        let mut message = Vec::new();
        let mut leaves = Vec::new();
        let clustered = self.cluster.is_some();
        for s in group {
            let first = seq + 1;
            for (_, bytes, _) in &s.events {
                seq += 1;
                let (hash, encoded) = Record::seal_encoded(seq, ts, &prev, bytes);
                prev = hash;
                leaves.push(hash);
                if clustered {
                    message.extend_from_slice(&encoded);
                }
                chunks.push(seq, encoded);
                count += 1;
            }
            outcomes.push(Committed {
                first_seq: first,
                last_seq: seq,
                ts_micros: ts,
            });
        }
        Sealed {
            outcomes,
            chunks,
            message,
            head: Head { seq, hash: prev },
            ts,
            count,
            leaves,
        }
    }

    /// A stored group: the head moves, and the applier folds it and answers its callers.
    fn committed(&mut self, group: Vec<Submission>, sealed: Sealed, sync_us: u64) {
        let Sealed {
            outcomes,
            head,
            ts,
            count,
            leaves,
            ..
        } = sealed;
        self.head = head;
        self.last_ts = self.last_ts.max(ts);
        metrics::histogram!("auditmem_appender_group_events").record(count as f64);
        metrics::histogram!("auditmem_appender_sync_seconds").record(sync_us as f64 / 1e6);
        metrics::counter!("auditmem_appender_events_total").increment(count as u64);
        self.stats.groups.fetch_add(1, Ordering::Relaxed);
        self.stats.events.fetch_add(count as u64, Ordering::Relaxed);
        self.stats
            .last_group_events
            .store(count as u64, Ordering::Relaxed);
        self.stats
            .sync_micros_total
            .fetch_add(sync_us, Ordering::Relaxed);
        self.stats
            .last_sync_micros
            .store(sync_us, Ordering::Relaxed);
        self.hand_to_applier(group, outcomes, leaves);
    }

    /// Hands a stored group to the applier, which folds it and answers its callers.
    fn hand_to_applier(
        &mut self,
        group: Vec<Submission>,
        outcomes: Vec<Committed>,
        leaves: Vec<[u8; 32]>,
    ) {
        let job = ApplyJob {
            group,
            outcomes,
            head: self.head,
            leaves,
        };
        if let Err(std::sync::mpsc::SendError(job)) = self.jobs.send(job) {
            // The applier is gone (it only stops with us): the group is durable but cannot be
            // applied in this process; the next start catches the projections up.
            self.fail("the projection applier stopped".into(), job.group);
        }
    }

    /// Publishes `group` to the cluster's stream in messages of whole submissions, each within
    /// the servers' `max_payload` (one larger submission goes alone, and is refused).
    fn commit_clustered(&mut self, group: Vec<Submission>) {
        let max = self
            .cluster
            .as_ref()
            .map_or(1 << 20, |c| c.log.max_message_bytes());
        let mut part = Vec::new();
        let mut bytes = 0usize;
        for s in group {
            // A record is its event plus ~90 bytes of seq, time and hashes.
            let size: usize = s.events.iter().map(|(_, b, _)| b.len() + 96).sum();
            if !part.is_empty() && bytes + size > max {
                self.publish_group(std::mem::take(&mut part));
                bytes = 0;
            }
            bytes += size;
            part.push(s);
        }
        self.publish_group(part);
    }

    /// Seals and publishes one message's submissions; on losing the race for the stream's next
    /// sequence, folds what the others stored, checks the precondition again and retries.
    fn publish_group(&mut self, mut group: Vec<Submission>) {
        let Some((handle, timeout)) = self.cluster.as_ref().map(|c| (c.handle.clone(), c.timeout))
        else {
            return;
        };
        // From the oldest submission's arrival, so that a write queued behind a group that
        // waited for the stream is not kept twice as long; at least one short attempt.
        let oldest = group
            .iter()
            .map(|s| s.at)
            .min()
            .unwrap_or_else(Instant::now);
        let deadline = (oldest + timeout).max(Instant::now() + Duration::from_millis(250));
        // The group's precondition (only its first submission can have one, see `process`)
        // was evaluated with everything up to here folded.
        let mut checked_at = self.cluster.as_ref().map_or(0, |c| c.stream_seq);
        loop {
            if group.is_empty() {
                return;
            }
            self.await_turn(deadline);
            if self.failed.is_some() {
                return self.commit(group);
            }
            // Other nodes' writes folded since (waiting for the turn, or after a lost race)
            // may have changed what the precondition decides (credits, one export at a time
            // across nodes: 2203): evaluate it again on the head the group is sealed on.
            let at = self.cluster.as_ref().map_or(0, |c| c.stream_seq);
            if at != checked_at {
                checked_at = at;
                if let Some(check) = group.first().and_then(|s| s.check.as_ref()) {
                    self.wait_applied();
                    if let Err(r) = check(&self.projections) {
                        let s = group.remove(0);
                        let _ = s.reply.send(Err(AppendError::Rejected(r)));
                        continue;
                    }
                }
            }
            let mut sealed = self.seal(&group);
            let Some(c) = self.cluster.as_ref() else {
                return;
            };
            let expected = c.stream_seq;
            let first = self.head.seq + 1;
            let started = Instant::now();
            let published = handle.block_on(c.log.publish(
                // The message is only published; a retry after a lost race seals anew.
                std::mem::take(&mut sealed.message),
                (first, sealed.head.seq),
                &sealed.head.hash,
                expected,
                deadline,
            ));
            let publish_us = started.elapsed().as_micros() as u64;
            match published {
                Published::Stored(stream_seq) => {
                    if stream_seq != expected + 1 {
                        // Acknowledged at another place than the one it was sealed for: the
                        // stream holds a message this node has not folded. Folding will find
                        // out; nothing is answered from a head that may be wrong.
                        let why = format!(
                            "the stream stored this node's message at {stream_seq}, expected {}",
                            expected + 1
                        );
                        tracing::error!(error = %why, "the appender refuses further writes");
                        self.fail(why, group);
                        return;
                    }
                    let chunks = std::mem::take(&mut sealed.chunks);
                    if let Err(why) = self.mirror(chunks, stream_seq) {
                        tracing::error!(error = %why, "mirror write failed; the appender refuses further writes");
                        self.fail(why, group);
                        return;
                    }
                    metrics::histogram!("auditmem_cluster_publish_seconds")
                        .record(publish_us as f64 / 1e6);
                    if let Some(c) = self.cluster.as_ref() {
                        c.log.stored_mine(stream_seq);
                    }
                    self.stats.cluster_down.store(false, Ordering::Relaxed);
                    self.committed(group, sealed, publish_us);
                    return;
                }
                Published::Conflict => {
                    metrics::counter!("auditmem_cluster_publish_conflicts_total").increment(1);
                    if let Err(why) = self.catch_up(deadline) {
                        return self.unavailable(why, group);
                    }
                    if self.failed.is_some() {
                        return self.commit(group);
                    }
                    if self.landed(&sealed.head) {
                        // A retried publish whose first attempt was stored after all: the
                        // group is in the stream (folded as if another node's); answer it.
                        return self.answer_landed(group, sealed.outcomes);
                    }
                }
                Published::Unavailable(why) => {
                    self.stats.cluster_down.store(true, Ordering::Relaxed);
                    return self.unavailable(why, group);
                }
                Published::Refused(why) => {
                    for s in group {
                        let _ = s.reply.send(Err(AppendError::Storage(why.clone())));
                    }
                    return;
                }
            }
        }
    }

    /// While the turn to publish is another node's ([`nats::Turn`]), folds what arrives,
    /// until the turn is this node's or open, that node says it is idle, or [`nats::TURN_WAIT`] (or
    /// `deadline`) ran out: then this node publishes anyway and at worst loses one race.
    fn await_turn(&mut self, deadline: Instant) {
        let Some(c) = self.cluster.as_ref() else {
            return;
        };
        let handle = c.handle.clone();
        let until = (Instant::now() + nats::TURN_WAIT).min(deadline);
        let mut signals = c.log.signals();
        loop {
            if self
                .cluster
                .as_ref()
                .is_none_or(|c| c.log.turn() != nats::Turn::Theirs)
            {
                return;
            }
            self.ensure_feed();
            let left = until.saturating_duration_since(Instant::now());
            let Some(feed) = self.cluster.as_mut().and_then(|c| c.feed.as_mut()) else {
                return;
            };
            if left.is_zero() {
                metrics::counter!("auditmem_cluster_turn_waits_expired_total").increment(1);
                return;
            }
            let next = handle.block_on(async {
                tokio::select! {
                    m = tokio::time::timeout(left, nats::next_message(feed)) => Some(m),
                    // Another node said it is idle or busy: whose turn it is may have changed.
                    _ = signals.changed() => None,
                }
            });
            match next {
                None => {}
                Some(Ok(Some(Ok(message)))) => self.fold_message(&message),
                Some(Ok(Some(Err(_)))) => {}
                Some(Ok(None)) => {
                    if let Some(c) = self.cluster.as_mut() {
                        c.feed = None;
                    }
                }
                Some(Err(_)) => {
                    metrics::counter!("auditmem_cluster_turn_waits_expired_total").increment(1);
                    return;
                }
            }
        }
    }

    fn unavailable(&mut self, why: String, group: Vec<Submission>) {
        metrics::counter!("auditmem_cluster_unavailable_total").increment(group.len() as u64);
        tracing::warn!(error = %why, "the log cluster did not acknowledge a write");
        let msg = format!("the log cluster did not acknowledge the write in time ({why}); it was not acknowledged and may still land once the cluster recovers");
        for s in group {
            let _ = s
                .reply
                .send(Err(AppendError::ClusterUnavailable(msg.clone())));
        }
    }

    /// Whether the mirror holds the record sealed as `head` (the group landed).
    fn landed(&self, head: &Head) -> bool {
        head.seq <= self.head.seq
            && matches!(self.log.get(head.seq), Ok(Some(r)) if r.hash == head.hash)
    }

    /// Answers a group found in the stream, once the applier has folded it.
    fn answer_landed(&mut self, mut group: Vec<Submission>, outcomes: Vec<Committed>) {
        for s in &mut group {
            // Folded already from the stream's copy: only the answers are left.
            s.events.clear();
        }
        self.hand_to_applier(group, outcomes, Vec::new());
    }

    /// Folds the stream up to its last sequence, or fails at `deadline`.
    fn catch_up(&mut self, deadline: Instant) -> Result<(), String> {
        let Some(c) = self.cluster.as_ref() else {
            return Ok(());
        };
        let handle = c.handle.clone();
        let left = deadline.saturating_duration_since(Instant::now());
        let last = handle
            .block_on(async { tokio::time::timeout(left, c.log.last_sequence()).await })
            .map_err(|_| "no answer for the stream's state".to_string())??;
        loop {
            let done = self.cluster.as_ref().map_or(last, |c| c.stream_seq);
            if done >= last || self.failed.is_some() {
                return Ok(());
            }
            self.ensure_feed();
            let left = deadline.saturating_duration_since(Instant::now());
            let next = {
                let Some(feed) = self.cluster.as_mut().and_then(|c| c.feed.as_mut()) else {
                    if left.is_zero() {
                        return Err("cannot follow the log stream".into());
                    }
                    std::thread::sleep(Duration::from_millis(100).min(left));
                    continue;
                };
                handle
                    .block_on(async { tokio::time::timeout(left, nats::next_message(feed)).await })
            };
            match next {
                Err(_) => {
                    // A consumer that went quiet across a loss of quorum may never resume:
                    // the next attempt follows the stream anew from the mirror's position.
                    self.drop_feed();
                    return Err(format!("the stream's messages up to {last} did not arrive"));
                }
                Ok(Some(Ok(message))) => self.fold_message(&message),
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "following the log stream; following it anew");
                    self.drop_feed();
                }
                Ok(None) => {
                    if let Some(c) = self.cluster.as_mut() {
                        c.feed = None;
                    }
                }
            }
        }
    }

    fn fail(&mut self, why: String, group: Vec<Submission>) {
        self.stats.failed.store(true, Ordering::Relaxed);
        self.failed = Some(why.clone());
        for s in group {
            let _ = s.reply.send(Err(AppendError::Storage(why.clone())));
        }
    }
}

impl Sealed {
    fn chunks_batch(&mut self) -> sled::Batch {
        std::mem::take(&mut self.chunks).into_batch()
    }
}

/// Takes `first` and what is already queued after it, bounded (everything on stop).
fn gather(first: Msg, rx: &mut mpsc::Receiver<Msg>) -> (Vec<Submission>, bool) {
    let mut stopping = false;
    let mut group = Vec::new();
    let mut n = 0;
    match first {
        Msg::Stop => stopping = true,
        Msg::Append(s) => {
            n += s.events.len();
            group.push(s);
        }
    }
    while stopping || n < MAX_GROUP_EVENTS {
        match rx.try_recv() {
            Ok(Msg::Append(s)) => {
                n += s.events.len();
                group.push(s);
            }
            Ok(Msg::Stop) => stopping = true,
            Err(_) => break,
        }
        if n >= MAX_GROUP_EVENTS && !stopping {
            break;
        }
    }
    (group, stopping)
}

fn tlog_error(e: crate::tlog::TlogError) -> super::LogError {
    match e {
        crate::tlog::TlogError::Log(e) => e,
        other => super::LogError::Io(std::io::Error::other(other.to_string())),
    }
}
