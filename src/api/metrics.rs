//! `GET /metrics` in the Prometheus text format.
//!
//! Requests by route template and status, latency histograms, the appender's group sizes and
//! sync latency (recorded by the appender itself), the log head, the export queue, and what
//! holds memory (the in-memory indexes' heap bytes, the resident set). Labels
//! carry route templates only, never ids or tenant data.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::state::AppState;

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const SIZE_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// Installs the process-wide recorder; call once per process.
pub fn install() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full("auditmem_appender_group_events".into()),
            SIZE_BUCKETS,
        )?
        .install_recorder()?;
    Ok(handle)
}

pub async fn track(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("auditmem_http_requests_total", "route" => route.clone(), "method" => method, "status" => status).increment(1);
    metrics::histogram!("auditmem_http_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// The process's resident set (`VmRSS`), on Linux.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

pub async fn render(State(state): State<AppState>) -> Response {
    let head = state.appender.head();
    metrics::gauge!("auditmem_log_head_seq").set(head.seq as f64);
    // A clustered node's audit entries of reads answered while the stream took no writes, not
    // yet in the log (`cluster_outbox`): what a loss of quorum has left to append.
    if let Some(n) = state.appender.outbox_len() {
        metrics::gauge!("auditmem_cluster_outbox_entries").set(n as f64);
    }
    let queued = state
        .projections
        .exports
        .processing()
        .map(|v| v.len())
        .unwrap_or(0);
    metrics::gauge!("auditmem_exports_processing").set(queued as f64);
    // What holds memory: the in-memory indexes by name, and the process's resident set.
    let p = &state.projections;
    metrics::gauge!("auditmem_index_heap_bytes", "index" => "audit_time")
        .set(p.audit.index_heap_bytes() as f64);
    // Written, not resident: the sealed blocks are read back through the page cache.
    metrics::gauge!("auditmem_index_file_bytes", "index" => "audit_time")
        .set(p.audit.index_file_bytes() as f64);
    metrics::gauge!("auditmem_index_heap_bytes", "index" => "tenant_events")
        .set(p.events.heap_bytes() as f64);
    metrics::gauge!("auditmem_index_file_bytes", "index" => "tenant_events")
        .set(p.events.file_bytes() as f64);
    let (memories, vector_bytes) = p.memories.footprint();
    metrics::gauge!("auditmem_index_heap_bytes", "index" => "vectors").set(vector_bytes as f64);
    metrics::gauge!("auditmem_memories_held").set(memories as f64);
    if let Some(live) = crate::heap_live_bytes() {
        metrics::gauge!("auditmem_heap_live_bytes").set(live as f64);
    }
    if let Some(rss) = resident_bytes() {
        metrics::gauge!("auditmem_process_resident_bytes").set(rss as f64);
    }
    match &state.metrics {
        Some(h) => ([("content-type", "text/plain; version=0.0.4")], h.render()).into_response(),
        None => super::error::ApiError::not_found("metrics are not enabled in this process")
            .into_response(),
    }
}
