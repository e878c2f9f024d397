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
