//! The expiry sweeper: memories whose `expires_at` has passed are taken out of the store by
//! an appended [`MemoriesExpired`] event, so that their history says when and `replay` gives
//! the same store. Reads do not wait for it: from the instant a memory expires, get, list,
//! search and totals leave it out by the reader's clock (see the memories projection).

use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::{Event, MemoriesExpired, Projections};

use crate::log::appender::Appender;
use crate::wire::time::{now, now_stored};

/// How often the sweeper looks for expired memories.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Memories one sweep takes out at most (the rest wait for the next).
const SWEEP_MAX: usize = 10_000;

/// Appends one `MemoriesExpired` per tenant with expired memories; the number taken out.
pub async fn sweep(projections: &Projections, appender: &Appender) -> usize {
    let due = projections.memories.expired(now(), SWEEP_MAX);
    let mut swept = 0;
    for (tenant_id, memory_ids) in due {
        let n = memory_ids.len();
        let event = Event::MemoriesExpired(MemoriesExpired {
            tenant_id,
            memory_ids,
            expired_at: now_stored(),
        });
        match appender.append(vec![event]).await {
            Ok(_) => swept += n,
            // Still hidden from every read; the next sweep tries again.
            Err(e) => tracing::warn!(error = %e, %tenant_id, "expiring memories"),
        }
    }
    swept
}

/// Sweeps every [`SWEEP_EVERY`] until the task is aborted at shutdown.
pub async fn run(projections: Arc<Projections>, appender: Appender) {
    let mut ticks = tokio::time::interval(SWEEP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let n = sweep(&projections, &appender).await;
        if n > 0 {
            tracing::info!(memories = n, "expired memories taken out");
        }
    }
}
