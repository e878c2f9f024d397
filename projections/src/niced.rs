//! Threads niced: work that no request's answer waits on at once (an erasure's unindexing)
//! runs below the requests beside it, so that on a few cores it takes
//! what they leave rather than an even share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Sets the calling thread's nice value to the process's plus `nice` (Linux: per thread),
/// unless it is that low already. Relative to the process, not to the thread: a thread
/// inherits its creator's value, so a niced thread's helpers would otherwise be niced twice.
/// An error when the kernel refused: the thread keeps its priority (the work still runs,
/// sharing the cores evenly).
pub fn lower_priority(nice: i32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // The main thread's value is the process's: its id is the process's.
        let process =
            rustix::process::getpriority_process(Some(rustix::process::getpid())).unwrap_or(0);
        let target = (process + nice).min(19);
        let now = rustix::process::getpriority_process(None).unwrap_or(0);
        if now < target {
            rustix::process::setpriority_process(None, target)?;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
    Ok(())
}

/// Puts the calling thread in Linux's idle scheduling class (`SCHED_IDLE`): it runs on a core
/// only while no other thread wants it, and a thread that wakes takes the core from it at once.
/// A nice value does not give that: under the kernel's EEVDF scheduler a thread at nice 19
/// keeps its core until its slice ends, and a request whose work is split over the cores (the
/// embedder's matrix products, a few dozen splits a query) waits for it at each split: beside
/// an erasure's receipt at nice 19 another tenant's query took 13-22 ms to embed against ~10.
/// For work that only its own request waits on and that takes no lock a request takes. An
/// error when the kernel refused: the thread keeps its priority.
pub fn idle_priority() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` only reads `param`, a valid `sched_param` that outlives
        // the call; pid 0 is the calling thread.
        let done = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        if done != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Background work stepping aside while a request's prompt work runs (a query's embedding):
/// the process's count of such work in flight, and what wakes the work waiting on it.
///
/// No scheduling class does this: on two cores a query's embedding splits its matrix products
/// over both, and any thread beside it, even one of the idle class, slows it (the cores'
/// caches and memory are shared: beside an erasure's receipt in the idle class an embedding
/// still took 1.7× its time). So work whose answer no request is waiting on at once (an
/// erasure's count of its entries, its unindexing) waits, between two steps of a millisecond
/// or so, until no prompt work runs, for a bounded time so that it still gets done under a
/// steady stream of queries. Process-wide, as the cores are.
static PROMPT: AtomicUsize = AtomicUsize::new(0);
static PROMPT_LOCK: Mutex<()> = Mutex::new(());
static PROMPT_DONE: Condvar = Condvar::new();

/// Prompt work running, from [`Prompt::begin`] until dropped.
#[must_use = "the work counts as running until the guard is dropped"]
pub struct Prompt(());

impl Prompt {
    pub fn begin() -> Prompt {
        PROMPT.fetch_add(1, Ordering::SeqCst);
        Prompt(())
    }
}

impl Drop for Prompt {
    fn drop(&mut self) {
        if PROMPT.fetch_sub(1, Ordering::SeqCst) == 1 {
            // Taken so that a waiter between its check and its wait hears this.
            let _held = PROMPT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
            PROMPT_DONE.notify_all();
        }
    }
}

/// Whether prompt work runs ([`Prompt`]).
pub fn prompt_running() -> bool {
    PROMPT.load(Ordering::SeqCst) > 0
}

/// Waits while prompt work runs ([`Prompt`]), at most `most`; returns how long it waited
/// (zero at once when none runs).
pub fn give_way(most: Duration) -> Duration {
    if !prompt_running() {
        return Duration::ZERO;
    }
    let start = Instant::now();
    // A unit lock: nothing it guards can be left inconsistent by a panic.
    let mut held = PROMPT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    while PROMPT.load(Ordering::SeqCst) > 0 {
        let Some(left) = most.checked_sub(start.elapsed()).filter(|l| !l.is_zero()) else {
            break;
        };
        held = PROMPT_DONE
            .wait_timeout(held, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    start.elapsed()
}

/// Background work's steps giving way to prompt work ([`give_way`]), within a budget: each
/// wait at most `each`, and all of them at most `total`, after which the work runs as if no
/// prompt work ran (so a steady stream of queries delays it by `total` at most).
pub struct GiveWay {
    each: Duration,
    left: Duration,
}

impl GiveWay {
    pub fn new(each: Duration, total: Duration) -> GiveWay {
        GiveWay { each, left: total }
    }

    /// One step's wait: see [`GiveWay`].
    pub fn step(&mut self) {
        if self.left.is_zero() {
            return;
        }
        let waited = give_way(self.each.min(self.left));
        self.left = self.left.saturating_sub(waited);
    }
}

/// Held by the tests that begin prompt work: the count is the process's, and tests run side
/// by side.
#[cfg(test)]
pub(crate) static PROMPT_TESTS: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_work_gives_way_while_prompt_work_runs_within_its_budget() {
        let _alone = PROMPT_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        assert!(!prompt_running());
        assert_eq!(give_way(Duration::from_secs(10)), Duration::ZERO);

        // Held: a wait lasts its bound.
        let prompt = Prompt::begin();
        assert!(prompt_running());
        let waited = give_way(Duration::from_millis(30));
        assert!(waited >= Duration::from_millis(30), "{waited:?}");

        // Each step at most `each`, all of them at most `total`; then no wait at all.
        let mut steps = GiveWay::new(Duration::from_millis(20), Duration::from_millis(30));
        let start = Instant::now();
        steps.step();
        let first = start.elapsed();
        assert!(first >= Duration::from_millis(20), "{first:?}");
        steps.step();
        let both = start.elapsed();
        assert!(both >= Duration::from_millis(30), "{both:?}");
        assert_eq!(steps.left, Duration::ZERO);
        // A budget spent: no wait, however long one could be.
        let mut spent = GiveWay::new(Duration::from_secs(20), Duration::ZERO);
        let at = Instant::now();
        spent.step();
        steps.step();
        assert!(at.elapsed() < Duration::from_secs(10), "{:?}", at.elapsed());

        // Two held: the wait goes on until the last one ends, and ends then, not at its bound.
        let second_prompt = Prompt::begin();
        let ender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(prompt);
            std::thread::sleep(Duration::from_millis(20));
            drop(second_prompt);
        });
        let waited = give_way(Duration::from_secs(30));
        ender.join().expect("the thread ending the prompt work");
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        assert!(!prompt_running());
    }
}
