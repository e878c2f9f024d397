//! Running workers for a scenario's time and what they measured: latency percentiles,
//! throughput, errors, and the per-interval lines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use serde_json::{json, Value};

use crate::ops::{perform, Ctx, Op};
use crate::target::rss_of;
use crate::Scenario;

#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) micros: Vec<u32>,
    pub(crate) units: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

/// Appends `more` to `into`, label by label.
pub(crate) fn merge(
    into: &mut BTreeMap<&'static str, Samples>,
    more: BTreeMap<&'static str, Samples>,
) {
    for (label, s) in more {
        let t = into.entry(label).or_default();
        t.micros.extend(s.micros);
        t.units += s.units;
        t.errors += s.errors;
        if t.first_error.is_none() {
            t.first_error = s.first_error;
        }
    }
}

#[derive(Serialize)]
pub(crate) struct OpResult {
    pub(crate) op: &'static str,
    pub(crate) requests: u64,
    pub(crate) units: u64,
    pub(crate) units_per_sec: f64,
    pub(crate) requests_per_sec: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct Rss {
    pub(crate) rss_mib: f64,
    pub(crate) peak_mib: f64,
}

#[derive(Serialize)]
pub(crate) struct ScenarioResult {
    pub(crate) scenario: Scenario,
    pub(crate) concurrency: usize,
    pub(crate) secs: f64,
    pub(crate) ops: Vec<OpResult>,
    /// Extra figures of one-shot scenarios (export).
    pub(crate) extra: Option<Value>,
    pub(crate) rss: Option<Rss>,
}

pub(crate) fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

pub(crate) fn summarise(op: &'static str, mut s: Samples, secs: f64) -> OpResult {
    s.micros.sort_unstable();
    let requests = s.micros.len() as u64;
    OpResult {
        op,
        requests,
        units: s.units,
        units_per_sec: s.units as f64 / secs,
        requests_per_sec: requests as f64 / secs,
        p50_ms: percentile(&s.micros, 0.50),
        p90_ms: percentile(&s.micros, 0.90),
        p99_ms: percentile(&s.micros, 0.99),
        max_ms: s.micros.last().map(|&m| m as f64 / 1000.0).unwrap_or(0.0),
        errors: s.errors,
        first_error: s.first_error,
    }
}

/// How requests are sent and watched during a run.
#[derive(Clone, Default)]
pub(crate) struct Pace {
    /// Requests/s over all workers (open loop); 0: closed loop.
    pub(crate) rate: f64,
    /// Seconds between progress lines; 0: none.
    pub(crate) interval_secs: u64,
    /// The server's pid, for RSS in the progress lines.
    pub(crate) server_pid: Option<u32>,
    /// The server's `/metrics`: its RSS when it is not our child, and its live heap when it
    /// was built with the `heap-stats` feature.
    pub(crate) metrics_url: Option<String>,
}

/// What the workers finished in the current progress interval.
#[derive(Default)]
pub(crate) struct Window {
    pub(crate) micros: Vec<u32>,
    pub(crate) errors: u64,
}

/// Runs `concurrency` workers, each calling `request(n)` for its `n`th turn until the time is
/// up; requests finishing in the warm-up or after the end are not counted. `request` names the
/// operation it performed and returns the units it carried. With a rate, turns are handed out
/// from one counter and each waits for its due time; with an interval, a progress line per
/// interval is printed and returned.
pub(crate) async fn run_workers<F, Fut>(
    concurrency: usize,
    warmup: Duration,
    measure: Duration,
    pace: Pace,
    request: F,
) -> Result<(BTreeMap<&'static str, Samples>, Vec<Value>)>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (&'static str, Result<u64>)> + Send,
{
    let start = Instant::now();
    let (from, until) = (start + warmup, start + warmup + measure);
    let next = Arc::new(AtomicU64::new(0));
    let window = Arc::new(std::sync::Mutex::new(Window::default()));
    // What the workers need of `pace`, copied: the reporter takes the rest.
    let (rate, interval_secs) = (pace.rate, pace.interval_secs);
    let reporter = (interval_secs > 0).then(|| {
        let window = window.clone();
        tokio::spawn(report_intervals(window, from, until, pace))
    });
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (request, next, window) = (request.clone(), next.clone(), window.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples: BTreeMap<&'static str, Samples> = BTreeMap::new();
            let mut n;
            loop {
                // Turns come from one counter: a scenario's mix (`Op::pick`) then holds over all
                // requests. Per-worker strides would alias with the mix's period of ten: with 16
                // or 32 workers each worker would see only the odd or the even half of `mixed`.
                n = next.fetch_add(1, Ordering::Relaxed);
                let t0 = if rate > 0.0 {
                    let due = start + Duration::from_secs_f64(n as f64 / rate);
                    if due >= until {
                        break;
                    }
                    tokio::time::sleep_until(due.into()).await;
                    due
                } else {
                    Instant::now()
                };
                if t0 >= until {
                    break;
                }
                let (op, r) = request(n).await;
                let t1 = Instant::now();
                if t0 < from || t1 > until {
                    continue;
                }
                let s = samples.entry(op).or_default();
                let micros = t1.duration_since(t0).as_micros() as u32;
                let ok = r.is_ok();
                match r {
                    Ok(units) => {
                        s.micros.push(micros);
                        s.units += units;
                    }
                    Err(e) => {
                        s.errors += 1;
                        s.first_error.get_or_insert_with(|| e.to_string());
                    }
                }
                if interval_secs > 0 {
                    if let Ok(mut w) = window.lock() {
                        if ok {
                            w.micros.push(micros);
                        } else {
                            w.errors += 1;
                        }
                    }
                }
            }
            samples
        }));
    }
    let mut merged: BTreeMap<&'static str, Samples> = BTreeMap::new();
    for t in tasks {
        merge(&mut merged, t.await?);
    }
    let intervals = match reporter {
        Some(r) => r.await?,
        None => Vec::new(),
    };
    Ok((merged, intervals))
}

/// Every `pace.interval_secs` of the measured time: requests/s, p50/p99 and errors of the
/// requests finished in that interval, and the server's RSS.
pub(crate) async fn report_intervals(
    window: Arc<std::sync::Mutex<Window>>,
    from: Instant,
    until: Instant,
    pace: Pace,
) -> Vec<Value> {
    let every = Duration::from_secs(pace.interval_secs);
    let client = reqwest::Client::new();
    tokio::time::sleep_until(from.into()).await;
    if let Ok(mut w) = window.lock() {
        *w = Window::default();
    }
    let mut lines = Vec::new();
    let mut at = from;
    while at + every <= until {
        at += every;
        tokio::time::sleep_until(at.into()).await;
        let mut w = match window.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(_) => break,
        };
        w.micros.sort_unstable();
        let gauges = match &pace.metrics_url {
            Some(url) => server_gauges(&client, url).await,
            None => BTreeMap::new(),
        };
        let mib = |name: &str| gauges.get(name).map(|b| b / (1024.0 * 1024.0));
        let rss = pace
            .server_pid
            .and_then(rss_of)
            .map(|r| r.rss_mib)
            .or_else(|| mib("auditmem_process_resident_bytes"));
        let heap = mib("auditmem_heap_live_bytes");
        let line = json!({
            "at_secs": at.duration_since(from).as_secs(),
            "requests_per_sec": w.micros.len() as f64 / every.as_secs_f64(),
            "p50_ms": percentile(&w.micros, 0.50),
            "p99_ms": percentile(&w.micros, 0.99),
            "errors": w.errors,
            "rss_mib": rss,
            "heap_live_mib": heap,
        });
        println!(
            "{:>6} s  {:>8.1} req/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}  RSS {}{}",
            line["at_secs"],
            line["requests_per_sec"].as_f64().unwrap_or(0.0),
            line["p50_ms"].as_f64().unwrap_or(0.0),
            line["p99_ms"].as_f64().unwrap_or(0.0),
            w.errors,
            rss.map_or("-".to_string(), |r| format!("{r:.0} MiB")),
            heap.map_or(String::new(), |h| format!("  heap {h:.0} MiB")),
        );
        lines.push(line);
    }
    lines
}

/// The server's unlabelled gauges by name (`name value` lines of its `/metrics`); empty when
/// it does not answer within two seconds, so a progress line is never held up by it.
pub(crate) async fn server_gauges(client: &reqwest::Client, url: &str) -> BTreeMap<String, f64> {
    let body = client
        .get(url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .and_then(|r| r.error_for_status());
    let text = match body {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => return BTreeMap::new(),
    };
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.contains('{'))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

pub(crate) fn scenario_result(
    scenario: Scenario,
    concurrency: usize,
    measure: Duration,
    samples: BTreeMap<&'static str, Samples>,
) -> ScenarioResult {
    let secs = measure.as_secs_f64();
    ScenarioResult {
        scenario,
        concurrency,
        secs,
        ops: samples
            .into_iter()
            .map(|(op, s)| summarise(op, s, secs))
            .collect(),
        extra: None,
        rss: None,
    }
}

/// Runs `scenario` against the server.
pub(crate) async fn drive(
    ctx: &Arc<Ctx>,
    scenario: Scenario,
    concurrency: usize,
    warmup: Duration,
    measure: Duration,
    pace: Pace,
) -> Result<ScenarioResult> {
    let ctx = ctx.clone();
    let rate = pace.rate;
    let (samples, intervals) = run_workers(concurrency, warmup, measure, pace, move |n| {
        let ctx = ctx.clone();
        async move {
            let op = Op::pick(scenario, n);
            (op.name(), perform(&ctx, op, n).await)
        }
    })
    .await?;
    let mut r = scenario_result(scenario, concurrency, measure, samples);
    if rate > 0.0 || !intervals.is_empty() {
        r.extra = Some(json!({"offered_requests_per_sec": rate, "intervals": intervals}));
    }
    Ok(r)
}
