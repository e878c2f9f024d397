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

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use auditmem_projections::{Applied, Event, Prepared, Projections};
use tokio::sync::{mpsc, oneshot, watch};

use super::record::{Chunker, Record};
use super::{Head, LogReader};
use crate::registry::ErrorCode;

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

pub type Precondition = Box<dyn FnOnce(&Projections) -> Result<(), Rejection> + Send>;

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
}

#[derive(Clone)]
pub struct Appender {
    tx: mpsc::Sender<Msg>,
    head: watch::Receiver<Head>,
    pub stats: Arc<AppenderStats>,
    space: SpaceGuard,
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
    first_seq: u64,
    head: Head,
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

impl Appender {
    /// Starts the appender thread over an opened database whose projections are caught up.
    pub fn start(
        db: sled::Db,
        data_dir: &Path,
        projections: Arc<Projections>,
        durability: Durability,
        min_free_bytes: u64,
    ) -> Result<(Appender, AppenderThread), super::LogError> {
        let log = LogReader::open(&db)?;
        let head = log.head()?;
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
        };
        let applier_stats = stats.clone();
        let applier = std::thread::Builder::new()
            .name("appender-apply".into())
            .spawn(move || apply_loop(job_rx, projections, progress, head_tx, applier_stats))?;
        let handle = std::thread::Builder::new()
            .name("appender".into())
            .spawn(move || writer.run(rx))?;
        if let Durability::BatchInterval(every) = durability {
            spawn_interval_syncer(data_dir, every, tx.clone())?;
        }
        Ok((
            Appender {
                tx: tx.clone(),
                head: head_rx,
                stats,
                space,
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
}

/// The applier: folds each durable group into the projections, then answers its callers.
fn apply_loop(
    jobs: std::sync::mpsc::Receiver<ApplyJob>,
    projections: Arc<Projections>,
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
            let ts = job.outcomes.first().map_or(0, |o| o.ts_micros);
            let mut seq = job.first_seq;
            for sub in &job.group {
                for (event, _, prepared) in &sub.events {
                    applied.push(Applied {
                        seq,
                        ts_micros: ts,
                        event,
                        prepared: Some(prepared),
                    });
                    seq += 1;
                }
            }
        }
        let result = projections.apply(&applied);
        drop(applied);
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
                tracing::error!(error = %e, "projection apply failed; the appender refuses further writes");
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
        let mut stopping = false;
        while let Some(first) = rx.blocking_recv() {
            let mut group = Vec::new();
            let mut n = 0;
            match first {
                Msg::Stop => stopping = true,
                Msg::Append(s) => {
                    n += s.events.len();
                    group.push(s);
                }
            }
            // Drain what is already queued, bounded; on stop, drain everything.
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
            self.process(group);
            if stopping {
                rx.close();
                while let Ok(m) = rx.try_recv() {
                    if let Msg::Append(s) = m {
                        self.process(vec![s]);
                    }
                }
                break;
            }
        }
        let _ = self.db.flush();
        let _ = self.db_file.sync_data();
    }

    /// Commits a group, evaluating preconditions with everything before them applied.
    fn process(&mut self, group: Vec<Submission>) {
        let mut pending: Vec<Submission> = Vec::new();
        for mut s in group {
            if let Some(check) = s.check.take() {
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
        let ts = now_micros().max(self.last_ts);
        let mut seq = self.head.seq;
        let mut prev = self.head.hash;
        let mut outcomes = Vec::with_capacity(group.len());
        let mut count = 0usize;
        let mut chunks = Chunker::default();
        for s in &group {
            let first = seq + 1;
            for (_, bytes, _) in &s.events {
                seq += 1;
                let (hash, encoded) = Record::seal_encoded(seq, ts, &prev, bytes);
                prev = hash;
                chunks.push(seq, encoded);
                count += 1;
            }
            outcomes.push(Committed {
                first_seq: first,
                last_seq: seq,
                ts_micros: ts,
            });
        }
        let batch = chunks.into_batch();
        let started = Instant::now();
        let result = self
            .log
            .tree()
            .apply_batch(batch)
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
        let first_seq = self.head.seq + 1;
        self.head = Head { seq, hash: prev };
        self.last_ts = ts;
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
        let job = ApplyJob {
            group,
            outcomes,
            first_seq,
            head: self.head,
        };
        if let Err(std::sync::mpsc::SendError(job)) = self.jobs.send(job) {
            // The applier is gone (it only stops with us): the group is durable but cannot be
            // applied in this process; the next start catches the projections up.
            self.fail("the projection applier stopped".into(), job.group);
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
