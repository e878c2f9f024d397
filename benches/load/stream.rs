//! The `stream` scenario: what open audit tails cost the writers, and how far behind they run.
//!
//! One tenant's entries are ingested at `--stream-rate` entries/s (admin ingestion, batches of
//! 10, open loop over 16 clients), in blocks with no stream open and blocks while `--streams`
//! Server-Sent Events tails of that tenant read everything written. The blocks alternate in
//! `--stream-pairs` pairs, each pair in the other order than the one before (alone then beside,
//! beside then alone, ...), so a stall that comes with the run's first seconds or with a later
//! moment of the host weighs on both sides alike. Measured: the ingestion calls' p99 alone and
//! beside the tails and their ratio (target ≤ 1.1), and each streamed entry's lag, from its
//! `created_at` (the server's time when it took the entry) to the moment the reader parsed it.
//! Each block's tails open at the head and must receive every entry written while they were
//! open, in increasing position order, once: the scenario fails otherwise.
//!
//! The tails stand in for readers on other machines (a SIEM's collectors): they run on a
//! runtime of their own, on one thread whose nice value is raised by `--tail-nice`, so that
//! parsing 50 copies of every entry on the server's two cores does not delay the writers'
//! timers and sends in the driver (the service's own [`TailRuntime`], whose threads are named
//! `auditmem-tails` here too). What the server spends per tail (its follower, a wake-up, a copy
//! and a socket write per batch) runs on the server's tails' threads (`--stream-nice`). With
//! `--tail-nice 0` the readers run at the driver's priority, still on their own thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use auditmem::api::stream::TailRuntime;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::measure::{merge, run_workers, scenario_result, Pace, Samples, ScenarioResult};
use crate::ops::Ctx;
use crate::scenarios::Timed;
use crate::seed::{gateway_entry, ACTIONS};
use crate::target::Admin;
use crate::{Args, Scenario};

const WRITE_IDLE: &str = "ingest of 10, no stream open";
const WRITE_BUSY: &str = "ingest of 10, beside the streams";
const LAG: &str = "stream lag (entry taken -> read by a tail)";
/// Entries per ingestion call.
const BATCH: u64 = 10;
/// Clients sharing the open-loop ingestion rate.
const WRITERS: usize = 16;
/// Unmeasured seconds at the start of each block after the first (whose warm-up is
/// `--warmup-secs`): the tails' connections and the writers' pace settle.
const SETTLE: Duration = Duration::from_secs(1);

/// What one tail read: the scenario's entries, their lag samples (µs) once past the warm-up,
/// and the last position seen.
#[derive(Default)]
struct TailRead {
    lag_micros: Vec<u32>,
    entries: u64,
    last: u64,
}

/// A block's tails, open at the head: what they must read and how they are told it is all.
struct Tails {
    tasks: Vec<tokio::task::JoinHandle<Result<TailRead>>>,
    /// Entries acknowledged before they opened.
    before: u64,
    expect: watch::Sender<u64>,
}

impl Tails {
    /// Opens `args.streams` tails of the tenant whose key is `key` on `rt`, each reading from
    /// the head; returns once every one is open. Lag counts once the writers' `warmup` is past.
    async fn open(
        rt: &TailRuntime,
        client: &reqwest::Client,
        url: &str,
        key: &str,
        args: &Args,
        acked: &AtomicU64,
        warmup: Duration,
    ) -> Result<Tails> {
        // The tails open at the head, so each must get exactly what is written from here on;
        // the pause lets the head pass the last acknowledged entry first.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = acked.load(Ordering::Relaxed);
        let lag_from = chrono::Utc::now() + chrono::Duration::from_std(warmup)?;
        let (expect, expect_rx) = watch::channel(u64::MAX);
        let mut tasks = Vec::new();
        let mut opened = Vec::new();
        for _ in 0..args.streams {
            let (client, url, key, expect) = (
                client.clone(),
                url.to_string(),
                key.to_string(),
                expect_rx.clone(),
            );
            let streams = args.streams;
            let (open_tx, open_rx) = tokio::sync::oneshot::channel();
            opened.push(open_rx);
            tasks.push(rt.handle().spawn(async move {
                let resp = match open_tail(&client, &url, &key, streams).await {
                    Ok(resp) => resp,
                    Err(e) => {
                        let _ = open_tx.send(Err(e.to_string()));
                        return Err(e);
                    }
                };
                let _ = open_tx.send(Ok(()));
                read_tail(resp, lag_from, expect).await
            }));
        }
        for o in opened {
            o.await
                .context("a tail's task ended before it opened")?
                .map_err(anyhow::Error::msg)?;
        }
        Ok(Tails {
            tasks,
            before,
            expect,
        })
    }

    /// Tells the tails what was written while they were open and waits for them: each must
    /// have read exactly that. Returns how many that was and their lag samples.
    async fn finish(self, acked: &AtomicU64) -> Result<(u64, Vec<u32>)> {
        let expected = acked.load(Ordering::Relaxed) - self.before;
        self.expect.send_replace(expected);
        let mut lags = Vec::new();
        for t in self.tasks {
            let read = t.await??;
            if read.entries != expected {
                bail!(
                    "a tail read {} of the {expected} entries written while it was open",
                    read.entries
                );
            }
            lags.extend(read.lag_micros);
        }
        Ok((expected, lags))
    }
}

/// The `stream` scenario (see [`Scenario::Stream`]).
pub(crate) async fn stream(ctx: &Arc<Ctx>, admin: &Admin, args: &Args) -> Result<ScenarioResult> {
    if args.stream_pairs == 0 {
        bail!("--stream-pairs must be at least 1");
    }
    let stamp = chrono::Utc::now().timestamp_micros();
    let tenant = admin
        .tenant(&format!("stream-{stamp}"), "business", &["audit.read"])
        .await?;
    let bodies: Arc<Vec<axum::body::Bytes>> = Arc::new(
        (0..64u64)
            .map(|b| {
                let entries: Vec<Value> = (0..BATCH)
                    .map(|i| gateway_entry(&tenant.id, b * 1000 + i, None))
                    .collect();
                serde_json::to_vec(&json!({ "entries": entries })).map(axum::body::Bytes::from)
            })
            .collect::<Result<Vec<_>, _>>()?,
    );
    // Every acknowledged entry is counted in `acked`, warm-up included: the tails must read
    // all of them, not only the timed ones.
    let write = |label: &'static str, acked: Arc<AtomicU64>| {
        let (client, url, token, bodies) = (
            ctx.client.clone(),
            ctx.url.clone(),
            ctx.admin_token.clone(),
            bodies.clone(),
        );
        move |n: u64| -> Timed {
            let (client, url, token, acked) =
                (client.clone(), url.clone(), token.clone(), acked.clone());
            let body = bodies[(n % bodies.len() as u64) as usize].clone();
            Box::pin(async move {
                let r = async {
                    let resp = client
                        .post(format!("{url}/admin/v1/audit/logs"))
                        .bearer_auth(&token)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await?;
                    let status = resp.status();
                    if !status.is_success() {
                        bail!("ingest: {status} {}", resp.text().await.unwrap_or_default());
                    }
                    acked.fetch_add(BATCH, Ordering::Relaxed);
                    Ok(BATCH)
                }
                .await;
                (label, r)
            })
        }
    };
    let pace = Pace {
        rate: args.stream_rate / BATCH as f64,
        ..Pace::default()
    };
    let block = Duration::from_secs(args.secs) / args.stream_pairs;
    let tails_rt = TailRuntime::start(args.tail_nice)?;
    // The tails' own client: its connections live on the tails' runtime.
    let tail_client = reqwest::Client::builder().build()?;
    let acked = Arc::new(AtomicU64::new(0));
    let mut samples: BTreeMap<&'static str, Samples> = BTreeMap::new();
    let mut lags = Samples::default();
    let mut each_tail_read = Vec::new();
    let mut warmup = Duration::from_secs(args.warmup_secs);
    for pair in 0..args.stream_pairs {
        let order = if pair % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for beside in order {
            let tails = if beside {
                let (url, key) = (&ctx.url, &tenant.key);
                let open = Tails::open(&tails_rt, &tail_client, url, key, args, &acked, warmup);
                Some(open.await?)
            } else {
                None
            };
            let label = if beside { WRITE_BUSY } else { WRITE_IDLE };
            let (s, _) = run_workers(
                WRITERS,
                warmup,
                block,
                pace.clone(),
                write(label, acked.clone()),
            )
            .await?;
            merge(&mut samples, s);
            warmup = SETTLE;
            if let Some(tails) = tails {
                let (read, lag) = tails.finish(&acked).await?;
                each_tail_read.push(read);
                lags.micros.extend(lag);
            }
        }
    }
    lags.units = lags.micros.len() as u64;
    samples.insert(LAG, lags);
    let measure = block * args.stream_pairs;
    let mut r = scenario_result(Scenario::Stream, args.streams, measure, samples);
    let p = |label: &str, f: fn(&crate::measure::OpResult) -> f64| {
        r.ops.iter().find(|o| o.op == label).map(f)
    };
    let (idle, during) = (
        p(WRITE_IDLE, |o| o.p99_ms).context("writes alone")?,
        p(WRITE_BUSY, |o| o.p99_ms).context("writes beside the streams")?,
    );
    r.extra = Some(json!({
        "streams": args.streams,
        "entries_per_sec": args.stream_rate,
        "pairs": args.stream_pairs,
        "block_secs": block.as_secs_f64(),
        "tail_nice": args.tail_nice,
        "entries_each_tail_read": each_tail_read,
        "lag_p50_ms": p(LAG, |o| o.p50_ms),
        "lag_p99_ms": p(LAG, |o| o.p99_ms),
        "write_p99_idle_ms": idle,
        "write_p99_beside_streams_ms": during,
        "write_p99_ratio": during / idle,
    }));
    Ok(r)
}

/// Opens one tail of the tenant whose key is `key`, at the head.
async fn open_tail(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    streams: usize,
) -> Result<reqwest::Response> {
    let resp = client
        .get(format!("{url}/v1/audit/logs/stream"))
        .bearer_auth(key)
        .header("accept", "text/event-stream")
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!(
            "opening a tail: {} {} (raise the server's limit: \
             --serve-arg=--max-streams-per-tenant={streams})",
            resp.status(),
            resp.text().await.unwrap_or_default(),
        );
    }
    Ok(resp)
}

/// The part of a streamed entry a tail looks at.
#[derive(Deserialize)]
struct Seen<'a> {
    action: &'a str,
    created_at: &'a str,
}

/// Reads one tail's Server-Sent Events until it has `expect` of the scenario's entries (sent
/// once the writers stop), or 30 s after that: how many, in order, and each one's lag once
/// past `lag_from`. Other entries of the tenant (the tails' own `GET`s are audited) are skipped.
async fn read_tail(
    mut resp: reqwest::Response,
    lag_from: chrono::DateTime<chrono::Utc>,
    mut expect: watch::Receiver<u64>,
) -> Result<TailRead> {
    let mut read = TailRead::default();
    let mut buf: Vec<u8> = Vec::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let want = *expect.borrow();
        if read.entries >= want {
            return Ok(read);
        }
        if want != u64::MAX && deadline.is_none() {
            deadline = Some(tokio::time::Instant::now() + Duration::from_secs(30));
        }
        let chunk = tokio::select! {
            c = resp.chunk() => c?,
            _ = expect.changed(), if want == u64::MAX => continue,
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(far_future)) => return Ok(read),
        };
        let Some(chunk) = chunk else {
            bail!("a tail ended after {} entries", read.entries);
        };
        buf.extend_from_slice(&chunk);
        let now = chrono::Utc::now();
        let mut used = 0;
        while let Some(end) = find(&buf[used..], b"\n\n") {
            let event = &buf[used..used + end];
            used += end + 2;
            let (mut id, mut data) = (None, None);
            for line in event.split(|&b| b == b'\n') {
                if let Some(v) = line.strip_prefix(b"id: ") {
                    id = std::str::from_utf8(v)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok());
                } else if let Some(v) = line.strip_prefix(b"data: ") {
                    data = Some(v);
                }
            }
            let (Some(id), Some(data)) = (id, data) else {
                continue; // a heartbeat comment
            };
            if id <= read.last {
                bail!("position {id} came after {}", read.last);
            }
            read.last = id;
            let seen: Seen = serde_json::from_slice(data).context("a streamed entry")?;
            if !ACTIONS.contains(&seen.action) {
                continue;
            }
            read.entries += 1;
            let at = chrono::DateTime::parse_from_rfc3339(seen.created_at)?;
            if at >= lag_from {
                let lag = (now - at.with_timezone(&chrono::Utc)).num_microseconds();
                read.lag_micros.push(lag.unwrap_or(0).max(0) as u32);
            }
        }
        buf.drain(..used);
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
