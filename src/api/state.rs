//! What every handler shares: the log, the projections, the appender, the providers and the
//! settings.

use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::{Plan, Projections};

use crate::log::appender::Appender;
use crate::log::checkpoint::CheckpointSigner;
use crate::log::LogReader;

/// Settings the handlers consult.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Opens every admin route; without it the admin API is off (404, `admin::ADMIN_OFF`).
    pub admin_token: Option<String>,
    /// Opens `POST /admin/v1/audit/logs` only: the gateway's token (`api::admin`).
    pub ingest_token: Option<String>,
    /// Whose `X-Forwarded-For` is believed for the client address (`api::client_ip`).
    pub proxy_trust: super::client_ip::ProxyTrust,
    pub max_body_bytes: usize,
    pub audit_body_limit: usize,
    pub custom_retention_days: i64,
    /// How long a request may take, its body read and its handler included (408 beyond).
    pub request_timeout: Duration,
    /// How long a request carrying `X-Auditmem-Min-Position` waits for it (`api::position`).
    pub consistency_wait: Duration,
}

impl Settings {
    pub fn retention_days(&self, plan: Plan) -> i64 {
        match plan {
            Plan::Free => 7,
            Plan::Basic => 30,
            Plan::Pro => 90,
            Plan::Business => 365,
            Plan::Custom => self.custom_retention_days,
        }
    }

    /// Where a plan's readable window starts, now.
    pub fn retention_start(&self, plan: Plan) -> i64 {
        crate::wire::time::now() - self.retention_days(plan) * 86_400 * 1_000_000
    }
}

pub struct Inner {
    pub log: LogReader,
    pub projections: Arc<Projections>,
    pub appender: Appender,
    pub signer: Arc<CheckpointSigner>,
    pub settings: Settings,
    pub exports: crate::export::ExportSettings,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    pub embed: crate::embed::EmbedService,
    pub extractor: Arc<dyn crate::extract::Extractor>,
    /// Decides what a new memory supersedes (`resolve: true`): the rules, or the chat model
    /// when extraction uses one.
    pub resolver: Arc<dyn crate::extract::Resolver>,
    pub memory: MemorySettings,
    pub rate_limiter: super::rate_limit::RateLimiter,
    /// Per source on the public transparency routes (`/log/*`).
    pub log_rate_limiter: super::rate_limit::RateLimiter<std::net::IpAddr>,
    /// Failed admin authentication per source.
    pub admin_throttle: super::admin::throttle::AuthThrottle,
    /// The open audit streams and their limits.
    pub streams: super::stream::Streams,
    /// The operator's webhook settings (targets allowed, retries, timeouts).
    pub webhooks: crate::webhooks::WebhookSettings,
    /// What reads `as_of` a log position share: their turns, places and kept stores.
    pub as_of: super::memory::as_of::Replays,
}

/// Settings of the memory endpoints, and the credits their extractions in flight hold.
#[derive(Clone, Debug)]
pub struct MemorySettings {
    pub credits_per_call: f64,
    pub credits_per_1k_chars: f64,
    pub usd_per_credit: f64,
    pub dedup_threshold: f32,
    /// Longest extraction input, characters (more: 400).
    pub max_extract_chars: usize,
    /// Most memories one extraction stores (more found: 400, nothing stored or charged).
    pub max_extract_memories: usize,
    /// The credits reserved by extractions in flight (shared by every clone).
    pub reservations: super::memory::credits::Reservations,
}

impl MemorySettings {
    /// What extraction costs, as the extraction command prices it.
    pub fn pricing(&self) -> crate::command::memory::extract::Pricing {
        crate::command::memory::extract::Pricing {
            credits_per_call: self.credits_per_call,
            credits_per_1k_chars: self.credits_per_1k_chars,
            usd_per_credit: self.usd_per_credit,
        }
    }
}

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
