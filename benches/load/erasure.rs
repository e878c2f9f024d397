//! The `erasure` scenario: what erasing a large subject costs, and what it costs everyone else.
//!
//! One tenant's user gets `--erase-memories` memories (batches of 100) and `--erase-entries`
//! audit entries that show the user (memory lists filtered on it, each an entry sealed under
//! the user's key). Another tenant's single-sentence searches (one client, closed loop) are
//! timed alone for `--secs`, then while `POST /v1/erasures {"user_id": ...}` runs: the
//! erasure's wall time, and the searches' p99 in both and their ratio (target ≤ 2×).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::measure::{run_workers, scenario_result, Pace, Samples, ScenarioResult};
use crate::ops::Ctx;
use crate::scenarios::{bystander, bystander_search, seed_memories};
use crate::target::{post_data, Admin};
use crate::{Args, Scenario};

const USER: &str = "erase-me";
const SEARCH_IDLE: &str = "other tenant's memory search, idle";
const SEARCH_BUSY: &str = "other tenant's memory search, during the erasure";

/// The `erasure` scenario (see [`Scenario::Erasure`]).
pub(crate) async fn erasure(ctx: &Arc<Ctx>, admin: &Admin, args: &Args) -> Result<ScenarioResult> {
    let stamp = chrono::Utc::now().timestamp_micros();
    let erased = admin
        .tenant(
            &format!("erase-{stamp}"),
            "business",
            &["memory.read", "memory.write", "memory.erase"],
        )
        .await?;
    let searcher = bystander(ctx, admin, &format!("erase-bystander-{stamp}"), "business").await?;
    seed_user(ctx, &erased.key, args).await?;

    let search = |label: &'static str| bystander_search(ctx, &searcher.key, label);
    let measure = Duration::from_secs(args.secs);
    let (mut samples, _) = run_workers(
        1,
        Duration::from_secs(args.warmup_secs),
        measure,
        Pace::default(),
        search(SEARCH_IDLE),
    )
    .await?;

    // The erasure in its own task; the searches run from its start to its answer.
    let started = Instant::now();
    let eraser = {
        let (client, url, key) = (ctx.client.clone(), ctx.url.clone(), erased.key.clone());
        tokio::spawn(async move {
            post_data(
                &client,
                format!("{url}/v1/erasures"),
                &key,
                &json!({ "user_id": USER }),
            )
            .await
        })
    };
    let one = search(SEARCH_BUSY);
    let mut busy = Samples::default();
    let mut n = 0;
    while !eraser.is_finished() {
        let t0 = Instant::now();
        let (_, r) = one(n).await;
        n += 1;
        match r {
            Ok(units) => {
                busy.micros.push(t0.elapsed().as_micros() as u32);
                busy.units += units;
            }
            Err(e) => {
                busy.errors += 1;
                busy.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let receipt = eraser.await??;
    let took = started.elapsed();
    eprintln!(
        "erasure: {:.2} s, erased {}",
        took.as_secs_f64(),
        receipt["erased"]
    );
    if receipt["erased"]["memories"].as_u64() != Some(args.erase_memories) {
        bail!("the erasure erased other than the seeded memories: {receipt}");
    }
    samples.insert(SEARCH_BUSY, busy);
    let mut r = scenario_result(Scenario::Erasure, 1, measure, samples);
    // The busy searches ran for the erasure's time, not `--secs`.
    if let Some(op) = r.ops.iter_mut().find(|o| o.op == SEARCH_BUSY) {
        op.requests_per_sec = op.requests as f64 / took.as_secs_f64();
        op.units_per_sec = op.units as f64 / took.as_secs_f64();
    }
    let p99 = |label: &str| r.ops.iter().find(|o| o.op == label).map(|o| o.p99_ms);
    let (idle, during) = (
        p99(SEARCH_IDLE).context("idle searches")?,
        p99(SEARCH_BUSY).context("searches during the erasure")?,
    );
    r.extra = Some(json!({
        "erased": receipt["erased"],
        "erasure_secs": took.as_secs_f64(),
        "search_p99_idle_ms": idle,
        "search_p99_during_erasure_ms": during,
        "p99_ratio": during / idle,
        "target_ratio": 2.0,
    }));
    Ok(r)
}

/// The user's memories (batches of 100, four at a time) and the audit entries that show it.
async fn seed_user(ctx: &Arc<Ctx>, key: &str, args: &Args) -> Result<()> {
    seed_memories(
        ctx,
        key,
        args.erase_memories,
        1_000_000,
        Some(USER),
        "the erased user's memories",
    )
    .await?;

    // Entries that show the user: the cheapest request naming it.
    let pb = indicatif::ProgressBar::new(args.erase_entries);
    pb.set_message("seeding audit entries that show the erased user");
    let next = Arc::new(AtomicU64::new(0));
    let want = args.erase_entries;
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (next, pb, key) = (next.clone(), pb.clone(), key.to_string());
        let (client, url) = (ctx.client.clone(), ctx.url.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < want {
                let resp = client
                    .get(format!("{url}/v1/memories?user_id={USER}&page_size=1"))
                    .bearer_auth(&key)
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    bail!("a memory list of the erased user: {}", resp.status());
                }
                pb.inc(1);
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    pb.finish_and_clear();
    Ok(())
}
