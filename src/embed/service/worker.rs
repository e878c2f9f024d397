//! The service's workers: the owners' queues, how a worker takes its turns (module doc of
//! [`super`]: fair turns, lanes), and running a batch through the embedder.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};

use tokio::sync::oneshot;
use uuid::Uuid;

use super::{SHORT_BYTES, SHORT_TEXTS};
use crate::embed::{EmbedError, Embedder};

pub(super) type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

/// One caller's request: its texts and the vectors of those run so far.
pub(super) struct Job {
    pub(super) texts: Vec<String>,
    pub(super) done: Vec<Vec<f32>>,
    pub(super) reply: Reply,
}

impl Job {
    /// The texts not run yet.
    pub(super) fn left(&self) -> &[String] {
        &self.texts[self.done.len()..]
    }

    /// The caller dropped its future: nothing more is to be done for it.
    pub(super) fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The owners' queues. An owner with a request in `waiting` is in `turns`, or in `busy` while
/// a batch of its runs (it may be in both: a request came during its batch).
#[derive(Default)]
pub(super) struct Queues {
    /// Owners with requests waiting, in the order they are served.
    pub(super) turns: VecDeque<Uuid>,
    /// Owners with a batch running: no worker takes another turn of theirs meanwhile.
    pub(super) busy: HashSet<Uuid>,
    /// Workers still running; the last one to end drops what is left queued.
    pub(super) workers: usize,
    /// Each waiting owner's requests, oldest first. A request partly run is out of its queue
    /// while its slice runs, and back at the front after.
    pub(super) waiting: HashMap<Uuid, VecDeque<Job>>,
    /// False once the service is shut down or dropped: the worker finishes what is queued and
    /// exits, and new requests are refused.
    pub(super) open: bool,
}

impl Queues {
    pub(super) fn push(&mut self, owner: Uuid, job: Job) {
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
pub(super) struct Shared {
    pub(super) queues: Mutex<Queues>,
    /// Signalled when a request is queued or the service closes.
    pub(super) work: Condvar,
}

impl Shared {
    /// The queues stay consistent whatever panicked while they were locked (every change is a
    /// single push or pop), so a poisoned lock is used as is.
    pub(super) fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn close(&self) {
        self.lock().open = false;
        self.work.notify_all();
    }
}

/// How much one batch holds.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) texts: usize,
    pub(super) bytes: usize,
}

/// A request's texts in a batch: `count` texts from its first one not run yet.
pub(super) struct Slice {
    owner: Uuid,
    job: Job,
    count: usize,
}

/// Closes the queues when the last worker ends, however it ends, dropping what is queued: the
/// callers then get [`EmbedError::WorkerUnavailable`] instead of waiting forever.
pub(super) struct OnExit<'a>(pub(super) &'a Shared);

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
pub(super) enum Lane {
    /// The only worker: every turn.
    Any,
    /// Short turns only, at the process's priority.
    Prompt,
    /// Every turn, its threads niced.
    Bulk,
}

/// Whether a turn of `n` texts and `bytes` bytes is short.
pub(super) fn short((n, bytes): (usize, usize)) -> bool {
    n <= SHORT_TEXTS && bytes <= SHORT_BYTES
}

/// Sets the calling thread's nice value to the process's plus `nice`
/// ([`auditmem_projections::niced::lower_priority`]), a failure logged. Failing leaves the
/// thread at its priority: the bulk lanes still work, the prompt lane gets an even share; an
/// `as_of` replay still answers, sharing the cores evenly with other requests. Public for the
/// load driver, whose stand-ins for remote readers run niced the same way.
pub fn lower_priority(nice: i32) {
    if let Err(e) = auditmem_projections::niced::lower_priority(nice) {
        tracing::warn!(
            error = %e,
            thread = std::thread::current().name().unwrap_or("unnamed"),
            "a thread meant to run niced keeps the process's priority"
        );
    }
}

/// Starts `job` on a new thread named `name`, niced by `nice` (see [`lower_priority`]): work
/// of a request's that other tenants' requests should take the cores from. When no thread can
/// be started the job is dropped unrun, here.
pub(crate) fn spawn_niced(
    name: &str,
    nice: i32,
    job: impl FnOnce() + Send + 'static,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            lower_priority(nice);
            job()
        })
        .map(drop)
}

/// Runs `job` on a thread of its own named `name` in the idle scheduling class
/// ([`auditmem_projections::niced::idle_priority`]; a failure logged, the thread then keeps
/// the process's priority) and returns what it returns: work that only its own request waits
/// for and that takes no lock other requests take (a thread of that class gets a core only
/// when nothing else wants it, and may wait long for one while holding such a lock). An error
/// when no thread can be started, or the job panicked.
pub(crate) fn run_idle<T: Send>(name: &str, job: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, move || {
                if let Err(e) = auditmem_projections::niced::idle_priority() {
                    tracing::warn!(
                        error = %e,
                        thread = std::thread::current().name().unwrap_or("unnamed"),
                        "a thread meant to run idle keeps the process's priority"
                    );
                }
                job()
            })?;
        thread
            .join()
            .map_err(|_| std::io::Error::other(format!("the thread {name} panicked")))
    })
}

/// Waits for work, takes a batch of `lane`'s (see [`take`]), runs it in `pool`, answers the
/// requests it finished and puts the rest back; exits once the service is closed and nothing
/// it could take is queued (another worker finishes what its batch leaves).
pub(super) fn worker(
    embedder: &dyn Embedder,
    shared: &Shared,
    limits: Limits,
    lane: Lane,
    pool: &rayon::ThreadPool,
) {
    let _exit = OnExit(shared);
    loop {
        let (batch, size) = {
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
        // A short batch is a request's prompt work (a query, a memory's text): background
        // work gives way to it while it runs on this host's cores (`niced::give_way`).
        let _prompt =
            (embedder.uses_cores() && short(size)).then(auditmem_projections::niced::Prompt::begin);
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
/// whose callers have gone are dropped. With the batch, how many texts it holds and their bytes.
pub(super) fn take(q: &mut Queues, limits: Limits, lane: Lane) -> (Vec<Slice>, (usize, usize)) {
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
    (batch, (texts, bytes))
}

/// How many of `jobs`' next texts make one turn, and their bytes.
pub(super) fn turn(jobs: &VecDeque<Job>, limits: Limits) -> (usize, usize) {
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
