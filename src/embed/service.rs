//! Async front for a blocking [`Embedder`]: dedicated OS threads own the model's work and serve
//! the callers' texts in fair turns, and repeated texts are answered from an LRU cache without
//! touching the model.
//!
//! **Fair turns.** Each owner (the API passes the tenant: [`EmbedService::embed_for`]) has a
//! queue of its requests, and the workers serve the owners with texts waiting round-robin. An
//! owner's **turn** is its next texts, oldest request first, up to one batch: `max_batch`
//! texts and `max_batch_bytes` bytes of text (a longer text is a turn of its own). A batch is
//! the next owner's turn, followed by the turns after it as long as each fits whole in what is
//! left of the batch. An owner leaves the turns while its batch runs and goes to their back
//! when it ends, behind every owner that came meanwhile. A large request is so cut into
//! batches, and another owner's short request never waits behind the large request's next
//! slice; concurrent short requests still share batches.
//!
//! **Lanes.** `workers` batches run at once, never two of the same owner, each worker with
//! its own thread pool for the model's kernels. With more than one, the first worker is the
//! **prompt lane**: it takes only short turns (a query, a single memory: at most
//! [`SHORT_TEXTS`] texts and [`SHORT_BYTES`] bytes), and the others take any turn with their
//! threads' nice value raised by `bulk_nice`. While one owner's large request holds a bulk
//! worker, another owner's query so starts at once, and the scheduler gives its threads most
//! of the cores until it is done, rather than an even share with the batch, or none until the
//! batch ends. One owner runs one batch at a time, as with a single worker.
//!
//! ```text
//! embed_for(A, 200 texts) ─┐                         ┌─▶ bulk:   [A: 16] [A: 16] ...  (niced)
//! embed_for(B, 1 text)  ───┼─▶ turns A, B, C, A... ──┤
//! embed_for(C, 3 texts) ───┘   (one queue per owner) └─▶ prompt: [B: 1, C: 3] (short turns)
//! ```
//!
//! **Abandoned work.** A caller whose future is dropped (its request timed out, its client went
//! away) closes its reply channel; the workers drop such a request from its queue before
//! running any more of it, so at most the batch already running is spent on it.
//!
//! Counters: `auditmem_embed_texts_total` (texts run through the model) and
//! `auditmem_embed_abandoned_texts_total` (texts dropped because their caller had gone).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use lru::LruCache;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{EmbedError, Embedder};

#[derive(Debug, Clone)]
pub struct EmbedServiceConfig {
    /// Most texts per `embed_batch` call.
    pub max_batch: usize,
    /// Most bytes of text per `embed_batch` call (a longer text runs alone). The model's time
    /// grows with the text it reads, so this bounds how long one batch holds the worker, which
    /// is how long another owner's short request may wait for it.
    pub max_batch_bytes: usize,
    /// Cached texts; 0 disables the cache.
    pub cache_entries: usize,
    /// Longer texts are not cached: keys are full texts and a few huge ones
    /// would dominate memory while rarely repeating.
    pub max_cached_text_bytes: usize,
    /// Batches run at once, each of another owner (module doc, "Lanes").
    pub workers: usize,
    /// How much the bulk lanes' threads' nice value is raised (0-19), with more than one worker.
    pub bulk_nice: i32,
}

/// A turn of at most this many texts ...
pub const SHORT_TEXTS: usize = 4;
/// ... and bytes of text is short: the prompt lane takes it (module doc, "Lanes").
pub const SHORT_BYTES: usize = 1024;

impl EmbedServiceConfig {
    /// For a remote provider: batches of up to 64 texts or 64 KiB. A provider's time is mostly
    /// its round trip, whatever the batch holds, so fewer, larger calls serve everyone sooner.
    pub fn remote() -> Self {
        Self {
            max_batch: 64,
            max_batch_bytes: 64 * 1024,
            ..Self::default()
        }
    }
}

/// For the in-process model: batches of up to 16 texts or 2 KiB of text (docs/EMBEDDINGS.md,
/// "Fair turns", has the measurements). The model's time grows nearly linearly with the tokens
/// it reads, so larger batches buy little throughput, while a short request queued behind a
/// batch waits for all of it. Two workers: a prompt lane lets one owner's query run beside
/// another's batch instead of after it, and a bulk lane at nice +10 (about a tenth of a core's
/// share against the prompt lane's threads) lets it take nearly the whole machine while it
/// runs; more lanes would only split the same cores between more batches.
impl Default for EmbedServiceConfig {
    fn default() -> Self {
        Self {
            max_batch: 16,
            max_batch_bytes: 2 * 1024,
            cache_entries: 1024,
            max_cached_text_bytes: 8 * 1024,
            workers: 2,
            bulk_nice: 10,
        }
    }
}

type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

/// One caller's request: its texts and the vectors of those run so far.
struct Job {
    texts: Vec<String>,
    done: Vec<Vec<f32>>,
    reply: Reply,
}

impl Job {
    /// The texts not run yet.
    fn left(&self) -> &[String] {
        &self.texts[self.done.len()..]
    }

    /// The caller dropped its future: nothing more is to be done for it.
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The owners' queues. An owner with a request in `waiting` is in `turns`, or in `busy` while
/// a batch of its runs (it may be in both: a request came during its batch).
#[derive(Default)]
struct Queues {
    /// Owners with requests waiting, in the order they are served.
    turns: VecDeque<Uuid>,
    /// Owners with a batch running: no worker takes another turn of theirs meanwhile.
    busy: HashSet<Uuid>,
    /// Workers still running; the last one to end drops what is left queued.
    workers: usize,
    /// Each waiting owner's requests, oldest first. A request partly run is out of its queue
    /// while its slice runs, and back at the front after.
    waiting: HashMap<Uuid, VecDeque<Job>>,
    /// False once the service is shut down or dropped: the worker finishes what is queued and
    /// exits, and new requests are refused.
    open: bool,
}

impl Queues {
    fn push(&mut self, owner: Uuid, job: Job) {
        match self.waiting.entry(owner) {
            Entry::Occupied(mut e) => e.get_mut().push_back(job),
            Entry::Vacant(e) => {
                e.insert(VecDeque::from([job]));
                self.turns.push_back(owner);
            }
        }
    }

    /// Puts a request partly run back at the front of its owner's queue.
    fn put_back(&mut self, owner: Uuid, job: Job) {
        self.waiting.entry(owner).or_default().push_front(job);
    }

    /// A batch of `owners` ended: each goes to the back of the turns if it has requests
    /// waiting, behind the owners that came while it ran.
    fn release(&mut self, owners: &[Uuid]) {
        for owner in owners {
            self.busy.remove(owner);
            self.turns.retain(|o| o != owner);
            if self.waiting.contains_key(owner) {
                self.turns.push_back(*owner);
            }
        }
    }

    /// Whether a worker of `lane` has a turn to take: an owner waiting with no batch running
    /// (and, for the prompt lane, whose next turn is short).
    fn has_eligible(&self, lane: Lane, limits: Limits) -> bool {
        self.turns.iter().any(|o| {
            !self.busy.contains(o)
                && (lane != Lane::Prompt
                    || self
                        .waiting
                        .get(o)
                        .is_some_and(|jobs| short(turn(jobs, limits))))
        })
    }
}

/// What the callers and the worker share.
struct Shared {
    queues: Mutex<Queues>,
    /// Signalled when a request is queued or the service closes.
    work: Condvar,
}

impl Shared {
    /// The queues stay consistent whatever panicked while they were locked (every change is a
    /// single push or pop), so a poisoned lock is used as is.
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self) {
        self.lock().open = false;
        self.work.notify_all();
    }
}

struct Inner {
    shared: Arc<Shared>,
    embedder: Arc<dyn Embedder>,
    model_id: String,
    cache: Option<Mutex<LruCache<String, Arc<[f32]>>>>,
    max_cached_text_bytes: usize,
}

impl Drop for Inner {
    /// The last clone of the service is gone: the worker finishes and exits.
    fn drop(&mut self) {
        self.shared.close();
    }
}

/// Cheap to clone; all clones share the worker and the cache.
#[derive(Clone)]
pub struct EmbedService {
    inner: Arc<Inner>,
}

impl EmbedService {
    pub fn new(embedder: Arc<dyn Embedder>) -> Result<Self, EmbedError> {
        Self::with_config(embedder, EmbedServiceConfig::default())
    }

    /// Spawns the worker thread.
    pub fn with_config(
        embedder: Arc<dyn Embedder>,
        config: EmbedServiceConfig,
    ) -> Result<Self, EmbedError> {
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues {
                open: true,
                ..Queues::default()
            }),
            work: Condvar::new(),
        });
        let limits = Limits {
            texts: config.max_batch.max(1),
            bytes: config.max_batch_bytes.max(1),
        };
        let workers = config.workers.max(1);
        shared.lock().workers = workers;
        for n in 0..workers {
            let (worker_embedder, worker_shared) = (Arc::clone(&embedder), Arc::clone(&shared));
            let lane = match (workers, n) {
                (1, _) => Lane::Any,
                (_, 0) => Lane::Prompt,
                _ => Lane::Bulk,
            };
            let nice = if lane == Lane::Bulk {
                config.bulk_nice
            } else {
                0
            };
            // Each worker's kernels run in a pool of their own: in one shared pool a short
            // request's many small parallel steps would queue behind a large batch's long ones.
            let pool = rayon::ThreadPoolBuilder::new()
                .thread_name(move |i| format!("embed-{n}-{i}"))
                .start_handler(move |_| lower_priority(nice))
                .build()
                .map_err(|e| {
                    EmbedError::WorkerUnavailable(format!("cannot start the embed threads: {e}"))
                })?;
            let spawned = std::thread::Builder::new()
                .name(format!("embed-worker-{n}"))
                .spawn(move || {
                    worker(
                        worker_embedder.as_ref(),
                        &worker_shared,
                        limits,
                        lane,
                        &pool,
                    )
                });
            if let Err(e) = spawned {
                // The workers already running end once the queues close.
                shared.close();
                return Err(EmbedError::WorkerUnavailable(format!(
                    "cannot spawn embed worker thread: {e}"
                )));
            }
        }
        let cache = NonZeroUsize::new(config.cache_entries).map(|n| Mutex::new(LruCache::new(n)));
        Ok(Self {
            inner: Arc::new(Inner {
                shared,
                model_id: embedder.model_id().to_string(),
                embedder,
                cache,
                max_cached_text_bytes: config.max_cached_text_bytes,
            }),
        })
    }

    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    /// Asked of the embedder each time: a remote provider may only learn its
    /// dimension from its first answer.
    pub fn dim(&self) -> usize {
        self.inner.embedder.dim()
    }

    /// One L2-normalised vector per text, in order, for a caller that owns no queue of its own
    /// (all such callers share one).
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_for(Uuid::nil(), texts).await
    }

    /// One L2-normalised vector per text, in order, the model's work queued as `owner`'s, which
    /// takes its turns with the other owners' (module doc). Dropping the future abandons the
    /// work not yet started.
    pub async fn embed_for(
        &self,
        owner: Uuid,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        // Each distinct uncached text is embedded once, whatever its count.
        let mut misses: Vec<String> = Vec::new();
        let mut miss_slots: HashMap<&str, Vec<usize>> = HashMap::new();
        {
            let mut cache = self.lock_cache();
            for (i, text) in texts.iter().enumerate() {
                if let Some(v) = cache.as_mut().and_then(|c| c.get(text.as_str())) {
                    out[i] = Some(v.to_vec());
                    continue;
                }
                let slots = miss_slots.entry(text.as_str()).or_default();
                if slots.is_empty() {
                    misses.push(text.clone());
                }
                slots.push(i);
            }
        }
        if !misses.is_empty() {
            let vectors = self.submit(owner, misses.clone()).await?;
            if vectors.len() != misses.len() {
                return Err(EmbedError::Inference(format!(
                    "embedder returned {} vectors for {} texts",
                    vectors.len(),
                    misses.len()
                )));
            }
            let mut cache = self.lock_cache();
            for (text, v) in misses.iter().zip(vectors) {
                if let Some(c) = cache.as_mut() {
                    if text.len() <= self.inner.max_cached_text_bytes {
                        c.put(text.clone(), Arc::from(v.as_slice()));
                    }
                }
                for &i in miss_slots.get(text.as_str()).into_iter().flatten() {
                    out[i] = Some(v.clone());
                }
            }
        }
        // Every slot was filled from the cache or from the answer above.
        Ok(out.into_iter().flatten().collect())
    }

    /// Stops accepting work: requests already queued are still answered,
    /// later calls that need the model (cache misses) fail with
    /// [`EmbedError::WorkerUnavailable`], and the worker thread exits once the
    /// queue is empty.
    pub fn shutdown(&self) {
        self.inner.shared.close();
    }

    /// Convenience for a single text.
    pub async fn embed_one(&self, text: String) -> Result<Vec<f32>, EmbedError> {
        self.embed_one_for(Uuid::nil(), text).await
    }

    /// A single text, queued as `owner`'s.
    pub async fn embed_one_for(&self, owner: Uuid, text: String) -> Result<Vec<f32>, EmbedError> {
        self.embed_for(owner, vec![text])
            .await?
            .pop()
            .ok_or_else(|| EmbedError::Inference("no vector returned".into()))
    }

    /// Cache poisoning can only come from a panic while the lock was held;
    /// the LRU itself stays consistent, so keep using it.
    fn lock_cache(&self) -> Option<std::sync::MutexGuard<'_, LruCache<String, Arc<[f32]>>>> {
        self.inner
            .cache
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    async fn submit(&self, owner: Uuid, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (reply, answer) = oneshot::channel();
        {
            let mut q = self.inner.shared.lock();
            if !q.open {
                return Err(EmbedError::WorkerUnavailable("service shut down".into()));
            }
            q.push(
                owner,
                Job {
                    done: Vec::with_capacity(texts.len()),
                    texts,
                    reply,
                },
            );
        }
        // Every worker looks: the one waiting may be a lane that cannot take this turn.
        self.inner.shared.work.notify_all();
        answer.await.map_err(|_| {
            EmbedError::WorkerUnavailable("embed worker stopped before answering".into())
        })?
    }
}

/// How much one batch holds.
#[derive(Clone, Copy, Debug)]
struct Limits {
    texts: usize,
    bytes: usize,
}

/// A request's texts in a batch: `count` texts from its first one not run yet.
struct Slice {
    owner: Uuid,
    job: Job,
    count: usize,
}

/// Closes the queues when the last worker ends, however it ends, dropping what is queued: the
/// callers then get [`EmbedError::WorkerUnavailable`] instead of waiting forever.
struct OnExit<'a>(&'a Shared);

impl Drop for OnExit<'_> {
    fn drop(&mut self) {
        let mut q = self.0.lock();
        q.workers = q.workers.saturating_sub(1);
        if q.workers == 0 {
            q.open = false;
            q.turns.clear();
            q.waiting.clear();
        }
    }
}

/// Which turns a worker takes (module doc, "Lanes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// The only worker: every turn.
    Any,
    /// Short turns only, at the process's priority.
    Prompt,
    /// Every turn, its threads niced.
    Bulk,
}

/// Whether a turn of `n` texts and `bytes` bytes is short.
fn short((n, bytes): (usize, usize)) -> bool {
    n <= SHORT_TEXTS && bytes <= SHORT_BYTES
}

/// Raises the calling thread's nice value by `nice` (Linux: per thread). Failing leaves the
/// thread at the process's priority: the lanes still work, the prompt lane gets an even share.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // The calling thread's own value: a nice value is per thread on Linux.
        let now = rustix::process::getpriority_process(None).unwrap_or(0);
        if let Err(e) = rustix::process::setpriority_process(None, (now + nice).min(19)) {
            tracing::warn!(error = %e, "the bulk embedding threads keep the process's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Waits for work, takes a batch of `lane`'s (see [`take`]), runs it in `pool`, answers the
/// requests it finished and puts the rest back; exits once the service is closed and nothing
/// it could take is queued (another worker finishes what its batch leaves).
fn worker(
    embedder: &dyn Embedder,
    shared: &Shared,
    limits: Limits,
    lane: Lane,
    pool: &rayon::ThreadPool,
) {
    let _exit = OnExit(shared);
    loop {
        let batch = {
            let mut q = shared.lock();
            while !q.has_eligible(lane, limits) {
                if !q.open {
                    return;
                }
                q = shared.work.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            take(&mut q, limits, lane)
        };
        if batch.is_empty() {
            continue;
        }
        let mut owners: Vec<Uuid> = batch.iter().map(|s| s.owner).collect();
        owners.dedup();
        let unfinished = pool.install(|| run_batch(embedder, batch));
        let mut q = shared.lock();
        for s in unfinished {
            q.put_back(s.owner, s.job);
        }
        q.release(&owners);
        drop(q);
        // Another worker may be waiting for what this batch's owners have left.
        shared.work.notify_all();
    }
}

/// The next batch: the next owner's turn, then the following owners' turns while each fits
/// whole in what is left, skipping owners with a batch running (and, for the prompt lane,
/// owners whose next turn is not short). A turn is the owner's next
/// texts, oldest request first, up to the limits (at least one text, however long). The owners
/// served leave the turns and are busy until the batch ends ([`Queues::release`]). Requests
/// whose callers have gone are dropped.
fn take(q: &mut Queues, limits: Limits, lane: Lane) -> Vec<Slice> {
    let mut batch = Vec::new();
    let (mut texts, mut bytes) = (0usize, 0usize);
    let mut abandoned = 0usize;
    let mut i = 0;
    while let Some(&owner) = q.turns.get(i) {
        if q.busy.contains(&owner) {
            i += 1;
            continue;
        }
        let Some(jobs) = q.waiting.get_mut(&owner) else {
            q.turns.remove(i);
            continue;
        };
        jobs.retain(|j| {
            let gone = j.abandoned();
            if gone {
                abandoned += j.left().len();
            }
            !gone
        });
        let (n, b) = turn(jobs, limits);
        if n == 0 {
            q.waiting.remove(&owner);
            q.turns.remove(i);
            continue;
        }
        if lane == Lane::Prompt && !short((n, b)) {
            i += 1;
            continue;
        }
        if !batch.is_empty() && (texts + n > limits.texts || bytes + b > limits.bytes) {
            break;
        }
        texts += n;
        bytes += b;
        let mut want = n;
        while want > 0 {
            let Some(job) = jobs.pop_front() else {
                break;
            };
            let count = job.left().len().min(want);
            want -= count;
            batch.push(Slice { owner, job, count });
        }
        if jobs.is_empty() {
            q.waiting.remove(&owner);
        }
        q.turns.remove(i);
        q.busy.insert(owner);
    }
    if abandoned > 0 {
        metrics::counter!("auditmem_embed_abandoned_texts_total").increment(abandoned as u64);
    }
    batch
}

/// How many of `jobs`' next texts make one turn, and their bytes.
fn turn(jobs: &VecDeque<Job>, limits: Limits) -> (usize, usize) {
    let (mut n, mut bytes) = (0usize, 0usize);
    for text in jobs.iter().flat_map(Job::left) {
        if n == limits.texts || (n > 0 && bytes + text.len() > limits.bytes) {
            break;
        }
        n += 1;
        bytes += text.len();
    }
    (n, bytes)
}

/// Runs the batch's texts in one `embed_batch`, answers every request it finished or failed,
/// and returns the requests with texts still to run (those whose callers have gone are dropped
/// here too).
fn run_batch(embedder: &dyn Embedder, mut batch: Vec<Slice>) -> Vec<Slice> {
    let all: Vec<String> = batch
        .iter()
        .flat_map(|s| s.job.left()[..s.count].iter().cloned())
        .collect();
    metrics::counter!("auditmem_embed_texts_total").increment(all.len() as u64);
    let mut failed: Vec<Option<EmbedError>> = vec![None; batch.len()];
    match guarded(embedder, &all) {
        Ok(vectors) => {
            let mut vectors = vectors.into_iter();
            for s in &mut batch {
                s.job.done.extend(vectors.by_ref().take(s.count));
            }
        }
        Err(e) if batch.len() == 1 => failed[0] = Some(e),
        Err(_) => {
            // One bad input must not fail the strangers it was batched with:
            // retry each slice alone so only the culprit sees the error.
            for (s, f) in batch.iter_mut().zip(&mut failed) {
                let texts = s.job.left()[..s.count].to_vec();
                metrics::counter!("auditmem_embed_texts_total").increment(texts.len() as u64);
                match guarded(embedder, &texts) {
                    Ok(v) => s.job.done.extend(v),
                    Err(e) => *f = Some(e),
                }
            }
        }
    }
    let mut unfinished = Vec::new();
    let mut abandoned = 0usize;
    for (s, f) in batch.into_iter().zip(failed) {
        if let Some(e) = f {
            let _ = s.job.reply.send(Err(e));
        } else if s.job.left().is_empty() {
            let _ = s.job.reply.send(Ok(s.job.done));
        } else if s.job.abandoned() {
            abandoned += s.job.left().len();
        } else {
            unfinished.push(s);
        }
    }
    if abandoned > 0 {
        metrics::counter!("auditmem_embed_abandoned_texts_total").increment(abandoned as u64);
    }
    unfinished
}

/// Runs the embedder, turning a panic into an error so that one poisoned
/// input cannot take the worker (and every later request) down, and checking
/// the count so that splitting results back to callers cannot misalign.
fn guarded(embedder: &dyn Embedder, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let result = catch_unwind(AssertUnwindSafe(|| embedder.embed_batch(texts)))
        .map_err(|_| EmbedError::Inference("embedder panicked".into()))??;
    if result.len() != texts.len() {
        return Err(EmbedError::Inference(format!(
            "embedder returned {} vectors for {} texts",
            result.len(),
            texts.len()
        )));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Deterministic fake: vector derived from the text bytes; records batch
    /// sizes so batching can be observed.
    struct Fake {
        calls: AtomicUsize,
        texts_seen: AtomicUsize,
        max_seen_batch: AtomicUsize,
        /// Every batch's texts, in the order they started.
        batches: Mutex<Vec<Vec<String>>>,
        /// The first texts of the batches running now.
        running: Mutex<Vec<String>>,
        /// (first text of a batch running, first text of a batch starting beside it).
        overlaps: Mutex<Vec<(String, String)>>,
        delay_ms: u64,
    }

    impl Fake {
        fn new(delay_ms: u64) -> Self {
            Self {
                calls: AtomicUsize::new(0),
                texts_seen: AtomicUsize::new(0),
                max_seen_batch: AtomicUsize::new(0),
                batches: Mutex::new(Vec::new()),
                running: Mutex::new(Vec::new()),
                overlaps: Mutex::new(Vec::new()),
                delay_ms,
            }
        }

        fn batches(&self) -> Vec<Vec<String>> {
            self.batches.lock().unwrap().clone()
        }

        /// Polls until `n` batches have started.
        async fn started(&self, n: usize) {
            while self.calls.load(Ordering::SeqCst) < n {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
    }

    fn fake_vec(t: &str) -> Vec<f32> {
        let mut v = vec![0.0f32; 4];
        for (i, b) in t.bytes().enumerate() {
            v[i % 4] += b as f32;
        }
        v[3] += 1.0;
        crate::embed::l2_normalize(&mut v);
        v
    }

    impl Embedder for Fake {
        fn model_id(&self) -> &str {
            "fake"
        }
        fn dim(&self) -> usize {
            4
        }
        fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.texts_seen.fetch_add(texts.len(), Ordering::SeqCst);
            self.max_seen_batch.fetch_max(texts.len(), Ordering::SeqCst);
            self.batches.lock().unwrap().push(texts.to_vec());
            let first = texts.first().cloned().unwrap_or_default();
            {
                let mut running = self.running.lock().unwrap();
                let mut overlaps = self.overlaps.lock().unwrap();
                overlaps.extend(running.iter().map(|r| (r.clone(), first.clone())));
                running.push(first.clone());
            }
            std::thread::sleep(std::time::Duration::from_millis(self.delay_ms));
            self.running.lock().unwrap().retain(|r| *r != first);
            if texts.iter().any(|t| t == "panic") {
                panic!("fake embedder asked to panic");
            }
            if texts.iter().any(|t| t == "fail") {
                return Err(EmbedError::Inference("fake failure".into()));
            }
            Ok(texts.iter().map(|t| fake_vec(t)).collect())
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_are_batched_and_answered_in_order() {
        let fake = Arc::new(Fake::new(20));
        let svc = EmbedService::with_config(
            fake.clone(),
            EmbedServiceConfig {
                max_batch: 16,
                cache_entries: 0,
                ..Default::default()
            },
        )
        .unwrap();
        let mut handles = Vec::new();
        for i in 0..40 {
            let svc = svc.clone();
            handles.push(tokio::spawn(async move {
                let texts = vec![format!("text {i}"), format!("other {i}")];
                let got = svc.embed(texts.clone()).await;
                (texts, got)
            }));
        }
        for h in handles {
            let (texts, got) = h.await.unwrap();
            let got = got.unwrap();
            assert_eq!(got, texts.iter().map(|t| fake_vec(t)).collect::<Vec<_>>());
        }
        assert!(
            fake.calls.load(Ordering::SeqCst) < 40,
            "no batching happened"
        );
        assert!(fake.max_seen_batch.load(Ordering::SeqCst) <= 16);
    }

    #[tokio::test]
    async fn cache_answers_repeats_without_the_model() {
        let fake = Arc::new(Fake::new(0));
        let svc = EmbedService::new(fake.clone()).unwrap();
        let a = svc.embed(strings(&["x", "y", "x"])).await.unwrap();
        assert_eq!(fake.texts_seen.load(Ordering::SeqCst), 2, "duplicate sent");
        let b = svc.embed(strings(&["y", "x"])).await.unwrap();
        assert_eq!(fake.texts_seen.load(Ordering::SeqCst), 2, "cache missed");
        assert_eq!(a[0], a[2]);
        assert_eq!(b, vec![a[1].clone(), a[0].clone()]);
    }

    #[tokio::test]
    async fn oversized_request_is_sliced() {
        let fake = Arc::new(Fake::new(0));
        let svc = EmbedService::with_config(
            fake.clone(),
            EmbedServiceConfig {
                max_batch: 3,
                ..Default::default()
            },
        )
        .unwrap();
        let texts: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
        let got = svc.embed(texts.clone()).await.unwrap();
        assert_eq!(got.len(), 10);
        assert_eq!(got[7], fake_vec("t7"));
        assert_eq!(fake.max_seen_batch.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn errors_and_panics_reach_the_caller_and_the_worker_survives() {
        let svc = EmbedService::new(Arc::new(Fake::new(0))).unwrap();
        assert!(matches!(
            svc.embed(strings(&["fail"])).await,
            Err(EmbedError::Inference(_))
        ));
        match svc.embed(strings(&["panic"])).await {
            Err(EmbedError::Inference(m)) => assert!(m.contains("panicked")),
            other => panic!("unexpected {other:?}"),
        }
        assert!(svc.embed(strings(&["fine"])).await.is_ok());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_request_does_not_fail_its_batch_mates() {
        let svc = EmbedService::with_config(
            Arc::new(Fake::new(30)),
            EmbedServiceConfig {
                cache_entries: 0,
                ..Default::default()
            },
        )
        .unwrap();
        // The first request occupies the worker so the next two queue up and
        // are batched together.
        let s0 = svc.clone();
        let warm = tokio::spawn(async move { s0.embed(strings(&["warm"])).await });
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let (s1, s2) = (svc.clone(), svc.clone());
        let bad = tokio::spawn(async move { s1.embed(strings(&["fail"])).await });
        let good = tokio::spawn(async move { s2.embed(strings(&["good"])).await });
        assert!(warm.await.unwrap().is_ok());
        assert!(bad.await.unwrap().is_err());
        assert_eq!(good.await.unwrap().unwrap(), vec![fake_vec("good")]);
    }

    #[tokio::test]
    async fn calls_after_shutdown_fail_fast() {
        let svc = EmbedService::new(Arc::new(Fake::new(0))).unwrap();
        svc.clone().shutdown();
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            svc.embed(strings(&["x"])),
        )
        .await
        .expect("embed hung");
        assert!(matches!(r, Err(EmbedError::WorkerUnavailable(_))));
    }

    #[tokio::test]
    async fn worker_exiting_mid_request_is_an_error_not_a_hang() {
        // A worker that sees the request and then ends without answering it.
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues {
                open: true,
                ..Queues::default()
            }),
            work: Condvar::new(),
        });
        let worker_shared = shared.clone();
        std::thread::spawn(move || {
            let _exit = OnExit(&worker_shared);
            let mut q = worker_shared.lock();
            while q.turns.is_empty() {
                q = worker_shared.work.wait(q).unwrap();
            }
        });
        let svc = EmbedService {
            inner: Arc::new(Inner {
                shared,
                embedder: Arc::new(Fake::new(0)),
                model_id: "fake".into(),
                cache: None,
                max_cached_text_bytes: 0,
            }),
        };
        let r = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            svc.embed(strings(&["x"])),
        )
        .await
        .expect("embed hung");
        assert!(matches!(r, Err(EmbedError::WorkerUnavailable(_))));
        // The queue is closed now too; later calls fail fast.
        let r2 = svc.embed(strings(&["y"])).await;
        assert!(matches!(r2, Err(EmbedError::WorkerUnavailable(_))));
    }

    /// A service over `fake` with batches of `max_batch` texts, `workers` lanes and no cache.
    fn service(fake: &Arc<Fake>, max_batch: usize, workers: usize) -> EmbedService {
        EmbedService::with_config(
            fake.clone(),
            EmbedServiceConfig {
                max_batch,
                cache_entries: 0,
                workers,
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_request_waits_for_one_batch_of_another_owners_large_one() {
        let fake = Arc::new(Fake::new(20));
        let svc = service(&fake, 10, 1);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let large: Vec<String> = (0..200).map(|i| format!("a{i}")).collect();
        let s = svc.clone();
        let expected = large.clone();
        let big = tokio::spawn(async move { s.embed_for(a, large).await });
        fake.started(1).await;
        let got = svc.embed_for(b, strings(&["b"])).await.unwrap();
        assert_eq!(got, vec![fake_vec("b")]);
        let batches = fake.batches();
        let at = batches
            .iter()
            .position(|t| t.contains(&"b".to_string()))
            .unwrap();
        // The batch running when it came, then its own: A went behind B when its batch ended.
        assert_eq!(at, 1, "waited for {at} batches: {batches:?}");
        assert_eq!(batches[at], vec!["b".to_string()], "{batches:?}");
        let got = big.await.unwrap().unwrap();
        assert_eq!(
            got,
            expected.iter().map(|t| fake_vec(t)).collect::<Vec<_>>()
        );
        assert_eq!(fake.max_seen_batch.load(Ordering::SeqCst), 10);
        assert_eq!(fake.calls.load(Ordering::SeqCst), 21, "A was not cut in 20");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_lane_starts_a_short_request_beside_a_large_ones_batch() {
        let fake = Arc::new(Fake::new(30));
        let svc = service(&fake, 10, 2);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let s = svc.clone();
        let large: Vec<String> = (0..60).map(|i| format!("a{i}")).collect();
        let big = tokio::spawn(async move { s.embed_for(a, large).await });
        fake.started(1).await;
        let got = svc.embed_for(b, strings(&["b"])).await.unwrap();
        assert_eq!(got, vec![fake_vec("b")]);
        assert_eq!(big.await.unwrap().unwrap().len(), 60);
        let batches = fake.batches();
        // B started while A's first batch ran, not after it ...
        assert_eq!(batches[1], strings(&["b"]), "{batches:?}");
        let overlaps = fake.overlaps.lock().unwrap().clone();
        assert!(
            overlaps.contains(&("a0".to_string(), "b".to_string())),
            "{overlaps:?}"
        );
        // ... and A alone never ran two batches at once, though a lane was free.
        assert!(
            overlaps
                .iter()
                .all(|(x, y)| !(x.starts_with('a') && y.starts_with('a'))),
            "{overlaps:?}"
        );
        assert_eq!(batches.len(), 7, "{batches:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_prompt_lane_takes_no_large_turn() {
        let fake = Arc::new(Fake::new(10));
        let svc = service(&fake, 10, 2);
        let (a, c) = (Uuid::from_u128(1), Uuid::from_u128(3));
        let texts = |p: &str| (0..40).map(|i| format!("{p}{i}")).collect::<Vec<_>>();
        let (s1, s2) = (svc.clone(), svc.clone());
        let (ta, tc) = (texts("a"), texts("c"));
        let one = tokio::spawn(async move { s1.embed_for(a, ta).await });
        let two = tokio::spawn(async move { s2.embed_for(c, tc).await });
        assert_eq!(one.await.unwrap().unwrap().len(), 40);
        assert_eq!(two.await.unwrap().unwrap().len(), 40);
        // Two owners' large requests, one bulk lane: their batches ran one after the other.
        let overlaps = fake.overlaps.lock().unwrap().clone();
        assert_eq!(overlaps, Vec::<(String, String)>::new());
        assert_eq!(fake.calls.load(Ordering::SeqCst), 8);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_bulk_lanes_threads_are_niced() {
        let base = rustix::process::getpriority_process(None).unwrap();
        let _svc = EmbedService::with_config(
            Arc::new(Fake::new(0)),
            EmbedServiceConfig {
                workers: 3,
                bulk_nice: 7,
                ..Default::default()
            },
        )
        .unwrap();
        // (thread name, nice) of this process's embedding pool threads.
        let niced = || {
            let mut out = Vec::new();
            for task in std::fs::read_dir("/proc/self/task").unwrap() {
                let dir = task.unwrap().path();
                let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
                // Field 19 is the nice value; fields counted after the ")" closing the name.
                let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
                let nice: i32 = after
                    .split_whitespace()
                    .nth(16)
                    .and_then(|f| f.parse().ok())
                    .unwrap_or(i32::MIN);
                if name.starts_with("embed-") && !name.starts_with("embed-worker") {
                    out.push((name.trim().to_string(), nice));
                }
            }
            out.sort();
            out
        };
        let threads = rayon::current_num_threads();
        let mut seen = niced();
        for _ in 0..200 {
            if seen.len() == 3 * threads && seen.iter().all(|(_, n)| *n != base) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            seen = niced();
        }
        assert_eq!(seen.len(), 3 * threads, "{seen:?}");
        for (name, nice) in &seen {
            let want = if name.starts_with("embed-0-") {
                base
            } else {
                (base + 7).min(19)
            };
            assert_eq!(*nice, want, "{seen:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn owners_take_turns_and_short_turns_share_a_batch() {
        let fake = Arc::new(Fake::new(20));
        let svc = service(&fake, 4, 1);
        let owner = |i: u128| Uuid::from_u128(i);
        // Owner 1 holds the worker; 2 and 3 queue large requests, 4 and 5 single texts.
        let mut tasks = Vec::new();
        for (o, n) in [(1u128, 4usize), (2, 8), (3, 8), (4, 1), (5, 1)] {
            let s = svc.clone();
            let texts: Vec<String> = (0..n).map(|i| format!("{o}-{i}")).collect();
            tasks.push(tokio::spawn(
                async move { s.embed_for(owner(o), texts).await },
            ));
            if o == 1 {
                fake.started(1).await;
            } else {
                // Queued in this order: each request is in its queue before the next is sent.
                while !svc.inner.shared.lock().waiting.contains_key(&owner(o)) {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let owners: Vec<Vec<String>> = fake
            .batches()
            .iter()
            .map(|b| {
                let mut o: Vec<String> = b
                    .iter()
                    .map(|t| t.split('-').next().unwrap().to_string())
                    .collect();
                o.dedup();
                o
            })
            .collect();
        let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            owners,
            vec![
                strs(&["1"]),
                strs(&["2"]),
                strs(&["3"]),
                strs(&["4", "5"]),
                strs(&["2"]),
                strs(&["3"]),
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_request_stops_after_the_batch_running() {
        let fake = Arc::new(Fake::new(20));
        let svc = service(&fake, 10, 1);
        let s = svc.clone();
        let texts: Vec<String> = (0..100).map(|i| format!("gone {i}")).collect();
        let gone = tokio::spawn(async move { s.embed_for(Uuid::from_u128(7), texts).await });
        fake.started(1).await;
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        // Another owner's text runs once the running batch ends, and nothing more of the
        // abandoned request runs after it.
        svc.embed_for(Uuid::from_u128(8), strings(&["next"]))
            .await
            .unwrap();
        let seen = fake.texts_seen.load(Ordering::SeqCst);
        assert!(seen <= 21, "{seen} texts run for an abandoned request");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(fake.texts_seen.load(Ordering::SeqCst), seen);
    }

    #[tokio::test]
    async fn a_long_text_runs_alone_and_bytes_bound_a_batch() {
        let fake = Arc::new(Fake::new(0));
        let svc = EmbedService::with_config(
            fake.clone(),
            EmbedServiceConfig {
                max_batch: 64,
                max_batch_bytes: 10,
                cache_entries: 0,
                ..Default::default()
            },
        )
        .unwrap();
        let texts = strings(&["aaaa", "bbbb", "a text longer than the limit", "cccc"]);
        let got = svc.embed(texts.clone()).await.unwrap();
        assert_eq!(got, texts.iter().map(|t| fake_vec(t)).collect::<Vec<_>>());
        assert_eq!(
            fake.batches(),
            vec![
                strings(&["aaaa", "bbbb"]),
                strings(&["a text longer than the limit"]),
                strings(&["cccc"]),
            ]
        );
    }
}
