//! Webhook delivery (docs/WEBHOOKS.md): each endpoint a tenant registered is sent its events,
//! signed per Standard Webhooks, at least once and in log order.
//!
//! - `events.rs`: which log events an endpoint is sent, and their payloads.
//! - `sign.rs`: the `webhook-signature` header.
//! - `target.rs`: the SSRF guard (which addresses a delivery may reach).
//! - `worker.rs`: the delivery loop: one task per enabled endpoint, a bounded number of
//!   requests in flight, retries with backoff, every attempt recorded in the log.
//!
//! **The log is the outbox.** Nothing is queued beside the log: an endpoint's cursor (folded
//! from its `WebhookAttempted` events, `auditmem_projections::webhooks`) says how far its
//! deliveries went, and whatever of its tenant's events lies past the cursor is still to be
//! sent. A restart or a SIGKILL loses nothing: the worker starts again from the cursor, and
//! an event whose delivery was made but not yet recorded is sent again (at least once), with
//! the same `webhook-id`, for the receiver to deduplicate.

pub mod events;
pub mod sign;
pub mod target;
pub mod worker;

use std::time::Duration;

/// The operator's webhook settings.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Plain `http://` URLs and private, loopback or link-local targets are allowed
    /// (`--webhooks-allow-private-targets`; tests and closed networks).
    pub allow_private: bool,
    /// The wait before the second attempt; each later wait is four times the one before.
    pub retry_base: Duration,
    /// The longest wait between two attempts.
    pub retry_cap: Duration,
    /// Attempts of one delivery before it is given up (`failed`).
    pub max_attempts: u32,
    /// How long one attempt may take, connection and answer.
    pub timeout: Duration,
    /// Requests in flight at most, over every endpoint.
    pub concurrency: usize,
    /// Whether this process delivers at all (`--webhook-delivery`).
    pub deliver: bool,
    /// On a cluster the nodes take turns by a lease: one node delivers at a time.
    pub clustered: bool,
}

impl WebhookSettings {
    /// The wait after the `attempt`-th failed attempt, or `None` when it was the last.
    pub fn retry_after(&self, attempt: u32) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let factor = 4u32.saturating_pow(attempt.saturating_sub(1));
        Some(self.retry_base.saturating_mul(factor).min(self.retry_cap))
    }

    pub fn from_args(args: &crate::config::ServeArgs) -> Self {
        WebhookSettings {
            allow_private: args.webhooks_allow_private_targets,
            retry_base: Duration::from_millis(args.webhook_retry_base_ms),
            retry_cap: Duration::from_secs(args.webhook_retry_cap_secs),
            max_attempts: args.webhook_max_attempts,
            timeout: Duration::from_millis(args.webhook_timeout_ms),
            concurrency: args.webhook_concurrency as usize,
            deliver: args.webhook_delivery,
            clustered: args.cluster.backend() != crate::config::LogBackend::Sled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_spans_about_a_day() {
        let s = WebhookSettings {
            allow_private: false,
            retry_base: Duration::from_secs(5),
            retry_cap: Duration::from_secs(10 * 3600),
            max_attempts: 10,
            timeout: Duration::from_secs(10),
            concurrency: 64,
            deliver: true,
            clustered: false,
        };
        let waits: Vec<u64> = (1..=10)
            .map_while(|a| s.retry_after(a))
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(waits, vec![5, 20, 80, 320, 1280, 5120, 20480, 36000, 36000]);
        let total: u64 = waits.iter().sum();
        // 27.6 hours from the first attempt to the last.
        assert_eq!(total, 99_305);
        assert_eq!(s.retry_after(10), None);
    }
}
