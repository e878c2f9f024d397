//! The service's tests: fair turns, lanes, abandoned work, the cache and shutdown, on fake
//! embedders.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::worker::*;
use super::*;

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

/// A job run by `run_idle` runs in the idle scheduling class on a thread of its own; the thread
/// that ran it keeps its own class.
#[cfg(target_os = "linux")]
#[test]
fn run_idle_runs_its_job_in_the_idle_class() {
    // SAFETY: `sched_getscheduler` takes a thread id (0: the calling thread) and reads nothing.
    let policy = || unsafe { libc::sched_getscheduler(0) };
    let before = policy();
    let (name, inside) = run_idle("idle-test", || {
        let name = std::thread::current().name().map(str::to_string);
        (name, policy())
    })
    .unwrap();
    assert_eq!(name.as_deref(), Some("idle-test"));
    assert_eq!(inside, libc::SCHED_IDLE);
    assert_eq!(policy(), before);
    assert!(run_idle("idle-test", || panic!("a job that fails")).is_err());
}

/// Records, for each batch, whether it ran as prompt work (`niced::prompt_running`).
struct Observer(Mutex<Vec<(usize, bool)>>);

impl Embedder for Observer {
    fn model_id(&self) -> &str {
        "observer"
    }
    fn dim(&self) -> usize {
        4
    }
    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prompt = auditmem_projections::niced::prompt_running();
        self.0.lock().unwrap().push((texts.len(), prompt));
        Ok(texts.iter().map(|t| fake_vec(t)).collect())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_batch_runs_as_prompt_work_that_background_work_gives_way_to() {
    let observer = Arc::new(Observer(Mutex::new(Vec::new())));
    let svc = EmbedService::with_config(
        observer.clone(),
        EmbedServiceConfig {
            max_batch: 64,
            cache_entries: 0,
            workers: 1,
            ..Default::default()
        },
    )
    .unwrap();
    svc.embed(strings(&["a query"])).await.unwrap();
    // Whether another test's prompt work ran beside a large batch is not this test's to
    // know (the count is the process's): only the short batch's own is asserted.
    assert_eq!(observer.0.lock().unwrap().clone(), vec![(1, true)]);
}
