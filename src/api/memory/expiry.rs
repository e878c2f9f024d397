//! The expiry sweeper's loop: every [`SWEEP_EVERY`] it asks the sweep command
//! (`crate::command::memory::expiry`) for each tenant's expired memories and appends each
//! tenant's `MemoriesExpired` with its precondition. Reads do not wait for it: from the instant
//! a memory expires, get, list, search and totals leave it out by the reader's clock (see the
//! memories projection).

use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::Projections;

use crate::command::memory::expiry::{self, SWEEP_MAX};
use crate::command::Context;
use crate::log::appender::{AppendError, Appender};

/// How often the sweeper looks for expired memories.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Appends one `MemoriesExpired` per tenant with expired memories; the number taken out.
pub async fn sweep(projections: &Projections, appender: &Appender) -> usize {
    let decisions = expiry::sweep(&Context::service(projections), SWEEP_MAX);
    let mut swept = 0;
    for d in decisions {
        let tenant_id = d.answer.tenant;
        let outcome = match d.check {
            Some(check) => appender.append_checked(d.events, check).await,
            None => appender.append(d.events).await,
        };
        match outcome {
            Ok(_) => swept += d.answer.memories,
            // Taken out or changed since they were read (on a cluster: by another node's
            // sweep); what is still expired is the next sweep's.
            Err(AppendError::Rejected(r)) => {
                tracing::debug!(reason = %r.message, %tenant_id, "expiry sweep refused")
            }
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
