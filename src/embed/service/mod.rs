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

mod worker;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Condvar, Mutex};

use lru::LruCache;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::{EmbedError, Embedder};
pub use worker::lower_priority;
pub(crate) use worker::{run_idle, spawn_niced};
use worker::{worker, Job, Lane, Limits, Queues, Shared};

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

#[cfg(test)]
mod tests;
