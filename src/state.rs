//! What every handler shares: the log, the projections, the appender and the settings.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem_projections::{Plan, Projections};
use ed25519_dalek::SigningKey;

use crate::log::appender::Appender;
use crate::log::checkpoint::{self, Checkpoint};
use crate::log::{Head, LogReader};

/// Settings the handlers consult.
#[derive(Clone, Debug)]
pub struct Settings {
    pub admin_token: Option<String>,
    pub trust_proxy: bool,
    pub max_body_bytes: usize,
    pub audit_body_limit: usize,
    pub custom_retention_days: i64,
    /// How long a request may take, its body read and its handler included (408 beyond).
    pub request_timeout: Duration,
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
}

pub struct Inner {
    pub log: LogReader,
    pub projections: Arc<Projections>,
    pub appender: Appender,
    pub signer: Arc<Signer>,
    pub settings: Settings,
    pub exports: crate::export::ExportSettings,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    pub embed: crate::embed::EmbedService,
    pub extractor: Arc<dyn crate::extract::Extractor>,
    pub memory: MemorySettings,
    pub rate_limiter: crate::api::rate_limit::RateLimiter,
}

/// Settings of the memory endpoints.
#[derive(Clone, Debug)]
pub struct MemorySettings {
    pub credits_per_call: f64,
    pub credits_per_1k_chars: f64,
    pub usd_per_credit: f64,
    pub dedup_threshold: f32,
    pub max_extract_chars: usize,
}

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// Signs checkpoints and keeps the latest.
pub struct Signer {
    key: SigningKey,
    file: PathBuf,
    latest: Mutex<Option<Checkpoint>>,
}

impl Signer {
    pub fn new(key: SigningKey, file: PathBuf) -> Self {
        let latest = checkpoint::read_file(&file)
            .ok()
            .and_then(|v| v.into_iter().last());
        Self {
            key,
            file,
            latest: Mutex::new(latest),
        }
    }

    pub fn public_key_hex(&self) -> String {
        hex::encode(self.key.verifying_key().as_bytes())
    }

    pub fn latest(&self) -> Option<Checkpoint> {
        self.latest
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn last_seq(&self) -> u64 {
        self.latest().map(|c| c.seq).unwrap_or(0)
    }

    /// Signs `head` (unless it is already the latest checkpoint) and appends it to the file.
    pub fn sign(&self, head: Head) -> std::io::Result<Checkpoint> {
        let mut guard = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cp) = guard.as_ref() {
            if cp.seq == head.seq && cp.hash == hex::encode(head.hash) {
                return Ok(cp.clone());
            }
        }
        let time =
            auditmem_projections::audit_view::format_time(chrono::Utc::now().timestamp_micros());
        let cp = Checkpoint::sign(&self.key, head, &time);
        checkpoint::append_to_file(&self.file, &cp)?;
        *guard = Some(cp.clone());
        Ok(cp)
    }

    /// Signs every `every` records or `interval` while the head moves; stops with the appender.
    pub async fn run(self: Arc<Self>, appender: Appender, every: u64, interval: Duration) {
        let mut rx = appender.subscribe();
        drop(appender);
        let mut deadline = tokio::time::Instant::now() + interval;
        loop {
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let head = *rx.borrow_and_update();
                    if head.seq >= self.last_seq() + every.max(1) {
                        self.sign_logged(head);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let head = *rx.borrow();
                    if head.seq > self.last_seq() {
                        self.sign_logged(head);
                    }
                    deadline = tokio::time::Instant::now() + interval;
                }
            }
        }
    }

    pub fn sign_logged(&self, head: Head) {
        match self.sign(head) {
            Ok(cp) => tracing::info!(seq = cp.seq, hash = %cp.hash, "signed checkpoint"),
            Err(e) => tracing::error!(error = %e, "could not write checkpoint"),
        }
    }
}
