//! The `as-of` scenario: what a search `as_of` a recorded search costs, and what replays cost
//! everyone else.
//!
//! One tenant gets `--as-of-memories` memories (batches of 100), then a search, whose
//! `X-Auditmem-Position` is the position replayed. Its searches `as_of` that position (one
//! client, closed loop) are timed for `--secs`; another tenant's single-sentence searches (one
//! client) are timed alone, then beside two clients replaying without pause: the replay's
//! latency, and the other tenant's p99 in both and their ratio.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::measure::{run_workers, scenario_result, Pace, ScenarioResult};
use crate::ops::Ctx;
use crate::scenarios::{bystander, bystander_search, seed_memories, Timed};
use crate::target::{post_data, Admin};
use crate::{Args, Scenario};

const REPLAY: &str = "search as_of a recorded search, alone";
const REPLAY_BUSY: &str = "search as_of a recorded search, 2 clients";
const SEARCH_IDLE: &str = "other tenant's memory search, idle";
const SEARCH_BUSY: &str = "other tenant's memory search, beside 2 replaying clients";

/// The `as-of` scenario (see [`Scenario::AsOf`]).
pub(crate) async fn as_of(ctx: &Arc<Ctx>, admin: &Admin, args: &Args) -> Result<ScenarioResult> {
    let stamp = chrono::Utc::now().timestamp_micros();
    let replayed = admin
        .tenant(
            &format!("as-of-{stamp}"),
            "business",
            &["memory.read", "memory.write"],
        )
        .await?;
    let searcher = bystander(ctx, admin, &format!("as-of-bystander-{stamp}"), "business").await?;
    seed_memories(
        ctx,
        &replayed.key,
        args.as_of_memories,
        2_000_000,
        None,
        "the replayed tenant's memories",
    )
    .await?;
    let query = json!({"query": "what does the user prefer?", "top_k": 5});
    let resp = ctx
        .client
        .post(format!("{}/v1/memories/search", ctx.url))
        .bearer_auth(&replayed.key)
        .json(&query)
        .send()
        .await?;
    let position: u64 = resp
        .headers()
        .get("x-auditmem-position")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .context("the recorded search's X-Auditmem-Position")?;
    let recorded: Value = resp.json().await?;
    let ids = |v: &Value| -> Vec<Value> {
        v["data"]["results"]
            .as_array()
            .map(|r| r.iter().map(|x| x["id"].clone()).collect())
            .unwrap_or_default()
    };
    let mut asked = query.clone();
    asked["as_of"] = json!(position);
    let first = post_data(
        &ctx.client,
        format!("{}/v1/memories/search", ctx.url),
        &replayed.key,
        &asked,
    )
    .await?;
    if ids(&json!({ "data": first })) != ids(&recorded) {
        bail!("the replay differs from the recorded search: {first} against {recorded}");
    }
    let events = first["as_of"]["events_replayed"].as_u64().unwrap_or(0);
    eprintln!("as-of: position {position}, {events} memory events replayed a search");

    let replay = |label: &'static str| {
        let (client, url, key, asked) = (
            ctx.client.clone(),
            ctx.url.clone(),
            replayed.key.clone(),
            asked.clone(),
        );
        move |_n: u64| -> Timed {
            let (client, url, key, asked) =
                (client.clone(), url.clone(), key.clone(), asked.clone());
            Box::pin(async move {
                let r = post_data(&client, format!("{url}/v1/memories/search"), &key, &asked)
                    .await
                    .map(|_| 1);
                (label, r)
            })
        }
    };
    let (warmup, measure) = (
        Duration::from_secs(args.warmup_secs),
        Duration::from_secs(args.secs),
    );
    let (mut samples, _) = run_workers(1, warmup, measure, Pace::default(), replay(REPLAY)).await?;
    let search = |label: &'static str| bystander_search(ctx, &searcher.key, label);
    let (idle, _) = run_workers(1, warmup, measure, Pace::default(), search(SEARCH_IDLE)).await?;
    samples.extend(idle);
    // Two replaying clients from the start of the warm-up to the end of the measured time.
    let replays = tokio::spawn(run_workers(
        2,
        warmup,
        measure,
        Pace::default(),
        replay(REPLAY_BUSY),
    ));
    let (busy, _) = run_workers(1, warmup, measure, Pace::default(), search(SEARCH_BUSY)).await?;
    samples.extend(busy);
    let (replayed_busy, _) = replays.await??;
    samples.extend(replayed_busy);

    let mut r = scenario_result(Scenario::AsOf, 1, measure, samples);
    let p = |label: &str, f: fn(&crate::measure::OpResult) -> f64| {
        r.ops.iter().find(|o| o.op == label).map(f)
    };
    let (idle, during) = (
        p(SEARCH_IDLE, |o| o.p99_ms).context("idle searches")?,
        p(SEARCH_BUSY, |o| o.p99_ms).context("searches beside the replays")?,
    );
    let extra = json!({
        "memory_events_replayed": events,
        "replay_p50_ms": p(REPLAY, |o| o.p50_ms),
        "replay_p99_ms": p(REPLAY, |o| o.p99_ms),
        "search_p99_idle_ms": idle,
        "search_p99_beside_replays_ms": during,
        "p99_ratio": during / idle,
    });
    r.extra = Some(extra);
    Ok(r)
}
