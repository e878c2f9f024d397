//! Async front for a blocking [`Embedder`]: one dedicated OS thread owns the
//! model, concurrent requests are merged into dynamic batches there, and
//! repeated texts are answered from an LRU cache without touching the model.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use tokio::sync::oneshot;

use super::{EmbedError, Embedder};

#[derive(Debug, Clone)]
pub struct EmbedServiceConfig {
    /// Most texts per `embed_batch` call; a single request with more texts is
    /// run alone in slices of this size.
    pub max_batch: usize,
    /// Cached texts; 0 disables the cache.
    pub cache_entries: usize,
    /// Longer texts are not cached: keys are full texts and a few huge ones
    /// would dominate memory while rarely repeating.
    pub max_cached_text_bytes: usize,
}

impl Default for EmbedServiceConfig {
    fn default() -> Self {
        Self {
            max_batch: 64,
            cache_entries: 1024,
            max_cached_text_bytes: 8 * 1024,
        }
    }
}

type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

struct Job {
    texts: Vec<String>,
    reply: Reply,
}

struct Inner {
    /// `None` after `shutdown`. Dropping the last sender ends the worker's
    /// `recv` loop; the thread is detached and exits on its own.
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    embedder: Arc<dyn Embedder>,
    model_id: String,
    cache: Option<Mutex<LruCache<String, Arc<[f32]>>>>,
    max_cached_text_bytes: usize,
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
        let (tx, rx) = mpsc::channel::<Job>();
        let worker_embedder = Arc::clone(&embedder);
        let max_batch = config.max_batch.max(1);
        std::thread::Builder::new()
            .name("embed-worker".into())
            .spawn(move || worker(worker_embedder.as_ref(), rx, max_batch))
            .map_err(|e| {
                EmbedError::WorkerUnavailable(format!("cannot spawn embed worker thread: {e}"))
            })?;
        let cache = NonZeroUsize::new(config.cache_entries).map(|n| Mutex::new(LruCache::new(n)));
        Ok(Self {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
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

    /// One L2-normalised vector per text, in order.
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
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
            let vectors = self.submit(misses.clone()).await?;
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
        self.inner
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Convenience for a single text.
    pub async fn embed_one(&self, text: String) -> Result<Vec<f32>, EmbedError> {
        self.embed(vec![text])
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

    async fn submit(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let (reply, answer) = oneshot::channel();
        {
            let tx = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
            let tx = tx
                .as_ref()
                .ok_or_else(|| EmbedError::WorkerUnavailable("service shut down".into()))?;
            tx.send(Job { texts, reply })
                .map_err(|_| EmbedError::WorkerUnavailable("embed worker has stopped".into()))?;
        }
        answer.await.map_err(|_| {
            EmbedError::WorkerUnavailable("embed worker stopped before answering".into())
        })?
    }
}

/// Blocks for one job, then takes whatever else is already queued up to
/// `max_batch` texts, so batching adds no latency when the service is idle.
fn worker(embedder: &dyn Embedder, rx: mpsc::Receiver<Job>, max_batch: usize) {
    let mut carried: Option<Job> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut batch = vec![first];
        let mut n: usize = batch[0].texts.len();
        while n < max_batch {
            match rx.try_recv() {
                Ok(job) if n + job.texts.len() <= max_batch => {
                    n += job.texts.len();
                    batch.push(job);
                }
                Ok(job) => {
                    carried = Some(job);
                    break;
                }
                Err(_) => break,
            }
        }
        run_batch(embedder, batch, max_batch);
    }
}

fn run_batch(embedder: &dyn Embedder, mut batch: Vec<Job>, max_batch: usize) {
    // Callers that gave up (dropped their future) need no work.
    batch.retain(|j| !j.reply.is_closed());
    if batch.is_empty() {
        return;
    }
    if batch.len() == 1 {
        let job = batch.remove(0);
        let result = embed_sliced(embedder, &job.texts, max_batch);
        let _ = job.reply.send(result);
        return;
    }
    let all: Vec<String> = batch.iter().flat_map(|j| j.texts.iter().cloned()).collect();
    match guarded(embedder, &all) {
        Ok(mut vectors) => {
            for job in batch.into_iter().rev() {
                let tail = vectors.split_off(vectors.len() - job.texts.len());
                let _ = job.reply.send(Ok(tail));
            }
        }
        Err(_) => {
            // One bad input must not fail the strangers it was batched with:
            // retry each request alone so only the culprit sees the error.
            for job in batch {
                let result = guarded(embedder, &job.texts);
                let _ = job.reply.send(result);
            }
        }
    }
}

fn embed_sliced(
    embedder: &dyn Embedder,
    texts: &[String],
    max_batch: usize,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut out = Vec::with_capacity(texts.len());
    for slice in texts.chunks(max_batch) {
        out.extend(guarded(embedder, slice)?);
    }
    Ok(out)
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
        delay_ms: u64,
    }

    impl Fake {
        fn new(delay_ms: u64) -> Self {
            Self {
                calls: AtomicUsize::new(0),
                texts_seen: AtomicUsize::new(0),
                max_seen_batch: AtomicUsize::new(0),
                delay_ms,
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
            std::thread::sleep(std::time::Duration::from_millis(self.delay_ms));
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
        // A worker that takes the job and then dies without answering.
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            let _job = rx.recv();
        });
        let svc = EmbedService {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
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
}
