//! Threads niced: work that no request's answer waits on at once (an erasure's unindexing)
//! runs below the requests beside it, so that on a few cores it takes
//! what they leave rather than an even share.

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
