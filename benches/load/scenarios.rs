//! The one-shot scenarios and the limits every figure is compared with: export, hello,
//! embed, fairness and this machine's limits.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};

use crate::measure::{run_workers, scenario_result, summarise, Pace, Samples, ScenarioResult};
use crate::ops::Ctx;
use crate::seed::memory_text;
use crate::target::{post_data, Admin};
use crate::{Args, Scenario};

/// One CSV export of the whole seeded tenant, polled to completion.
pub(crate) async fn export(ctx: &Ctx) -> Result<ScenarioResult> {
    let key = &ctx.seeded.audit.as_ref().context("audit tenant")?.key;
    let t0 = Instant::now();
    let url = format!("{}/v1/audit/logs/export", ctx.url);
    let v = post_data(&ctx.client, url, key, &json!({"format": "csv"})).await?;
    let id = v["export_id"].as_str().context("export_id")?.to_string();
    let done = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let v: Value = ctx
            .client
            .get(format!("{}/v1/audit/logs/export/{id}", ctx.url))
            .bearer_auth(key)
            .send()
            .await?
            .json()
            .await?;
        match v["data"]["status"].as_str() {
            Some("processing") => continue,
            Some("completed") => break v["data"].clone(),
            _ => return Err(anyhow!("export ended as {v}")),
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    let records = done["records"].as_u64().unwrap_or(0);
    let bytes = done["file_size"].as_u64().unwrap_or(0);
    Ok(ScenarioResult {
        scenario: Scenario::Export,
        concurrency: 1,
        secs,
        ops: Vec::new(),
        extra: Some(json!({
            "records": records,
            "file_bytes": bytes,
            "rows_per_sec": records as f64 / secs,
            "mib_per_sec": bytes as f64 / secs / 1_048_576.0,
        })),
        rss: None,
    })
}

/// The HTTP limit: axum answering "hello" on its own 2-thread runtime, driven like the server.
pub(crate) async fn hello(args: &Args) -> Result<ScenarioResult> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build();
        if let Ok(rt) = rt {
            rt.block_on(async move {
                let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
                if let Ok(l) = tokio::net::TcpListener::from_std(listener) {
                    let _ = axum::serve(l, app).await;
                }
            });
        }
    });
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/");
    let measure = Duration::from_secs(args.secs);
    let (samples, _) = run_workers(
        args.concurrency,
        Duration::from_secs(args.warmup_secs),
        measure,
        Pace::default(),
        move |_| {
            let (client, url) = (client.clone(), url.clone());
            async move {
                let r = async {
                    let resp = client.get(&url).send().await?.error_for_status()?;
                    resp.bytes().await?;
                    Ok(1)
                };
                ("GET / (axum hello)", r.await)
            }
        },
    )
    .await?;
    Ok(scenario_result(
        Scenario::Hello,
        args.concurrency,
        measure,
        samples,
    ))
}

/// The model's own throughput on `create`'s sentences, batches of `--embed-batch`, for `--secs`.
pub(crate) async fn embed_limit(args: &Args, seeded: u64) -> Result<ScenarioResult> {
    use auditmem::embed::{Embedder, MiniLm};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let secs = args.secs;
    let n = args.embed_batch.max(1);
    tokio::task::spawn_blocking(move || {
        let model = MiniLm::load(&dir).context("loading the model (bash .ci/setup)")?;
        let mut s = Samples::default();
        let until = Instant::now() + Duration::from_secs(secs);
        let mut i = 0u64;
        let started = Instant::now();
        while Instant::now() < until {
            let batch: Vec<String> = (i..i + n)
                .map(|j| format!("{} (load {j})", memory_text(seeded + j)))
                .collect();
            i += n;
            let t0 = Instant::now();
            model.embed_batch(&batch)?;
            s.micros.push(t0.elapsed().as_micros() as u32);
            s.units += n;
        }
        let elapsed = started.elapsed().as_secs_f64();
        Ok(ScenarioResult {
            scenario: Scenario::Embed,
            concurrency: 1,
            secs: elapsed,
            ops: vec![summarise(
                "embed, --embed-batch a call (sentences/s)",
                s,
                elapsed,
            )],
            extra: None,
            rss: None,
        })
    })
    .await?
}

/// A max-size extraction input at the default caps: 50 statements the rule extractor keeps (a
/// fact each), 399 characters each, 19,999 characters in all. `n` makes every call's
/// statements new, so the embedder's cache answers none of them.
pub(crate) fn max_size_extraction(n: u64) -> String {
    (0..50)
        .map(|i| {
            let mut s = format!("I work at company {n}-{i} where");
            let filler = " the team builds careful tools for customers in many regions";
            while s.len() + filler.len() < 398 {
                s.push_str(filler);
            }
            while s.len() < 398 {
                s.push('x');
            }
            s.push('.');
            s
        })
        .collect::<Vec<_>>()
        .join(" ")
}
/// `n` memories through the batch route (batches of 100, four at a time), their texts
/// `memory_text(text_from + i)`, all of `user_id` when given; `what` names them in the
/// progress bar and in errors.
pub(crate) async fn seed_memories(
    ctx: &Arc<Ctx>,
    key: &str,
    n: u64,
    text_from: u64,
    user_id: Option<&'static str>,
    what: &'static str,
) -> Result<()> {
    let pb = indicatif::ProgressBar::new(n);
    pb.set_message(format!("seeding {what} (batches of 100)"));
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (next, pb, key) = (next.clone(), pb.clone(), key.to_string());
        let (client, url) = (ctx.client.clone(), ctx.url.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(100, Ordering::Relaxed);
                if first >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = (first + 100).min(n);
                let memories: Vec<_> = (first..end)
                    .map(|i| {
                        let mut m =
                            json!({"content": memory_text(text_from + i), "memory_type": "fact"});
                        if let Some(user) = user_id {
                            m["user_id"] = json!(user);
                        }
                        m
                    })
                    .collect();
                post_data(
                    &client,
                    format!("{url}/v1/memories/batch"),
                    &key,
                    &json!({ "memories": memories }),
                )
                .await
                .with_context(|| format!("seeding {what} {first}..{end}"))?;
                pb.inc(end - first);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    pb.finish_and_clear();
    Ok(())
}

/// A tenant `name` whose searches [`bystander_search`] times, with something to find: 20 of
/// the driver's sentences.
pub(crate) async fn bystander(
    ctx: &Ctx,
    admin: &Admin,
    name: &str,
    plan: &str,
) -> Result<crate::seed::TenantKey> {
    let t = admin
        .tenant(name, plan, &["memory.read", "memory.write"])
        .await?;
    for i in 0..20 {
        post_data(
            &ctx.client,
            format!("{}/v1/memories", ctx.url),
            &t.key,
            &json!({"content": memory_text(i * 37), "memory_type": "fact"}),
        )
        .await?;
    }
    Ok(t)
}

/// A request of a scenario: the operation it names and the units it carried.
pub(crate) type Timed =
    std::pin::Pin<Box<dyn std::future::Future<Output = (&'static str, Result<u64>)> + Send>>;

/// One tenant's single-sentence searches, each distinct (no cache answers them), named
/// `label`: what `fairness` and `erasure` time beside their heavy work.
pub(crate) fn bystander_search(
    ctx: &Ctx,
    key: &str,
    label: &'static str,
) -> impl Fn(u64) -> Timed + Clone + Send + 'static {
    let (client, url, key) = (ctx.client.clone(), ctx.url.clone(), key.to_string());
    let counter = Arc::new(AtomicU64::new(0));
    move |_n: u64| {
        let (client, url, key, counter) =
            (client.clone(), url.clone(), key.clone(), counter.clone());
        Box::pin(async move {
            let i = counter.fetch_add(1, Ordering::Relaxed);
            let q = format!("what does the user prefer? ({label} {i})");
            let r = post_data(
                &client,
                format!("{url}/v1/memories/search"),
                &key,
                &json!({"query": q, "top_k": 5}),
            )
            .await
            .map(|_| 1);
            (label, r)
        })
    }
}

/// The `fairness` scenario (see [`Scenario::Fairness`]).
pub(crate) async fn fairness(ctx: &Arc<Ctx>, admin: &Admin, args: &Args) -> Result<ScenarioResult> {
    let stamp = chrono::Utc::now().timestamp_micros();
    let searcher = bystander(ctx, admin, &format!("fair-search-{stamp}"), "pro").await?;
    let extractor = admin
        .tenant(
            &format!("fair-extract-{stamp}"),
            "pro",
            &["memory.read", "memory.write"],
        )
        .await?;
    let (warmup, measure) = (
        Duration::from_secs(args.warmup_secs),
        Duration::from_secs(args.secs),
    );
    let search = |label: &'static str| bystander_search(ctx, &searcher.key, label);
    let (mut samples, _) = run_workers(
        1,
        warmup,
        measure,
        Pace::default(),
        search("memory search, idle"),
    )
    .await?;

    // Three extraction loops from the start of the warm-up to the end of the measured time.
    let until = Instant::now() + warmup + measure;
    let next = Arc::new(AtomicU64::new(0));
    let loops: Vec<_> = (0..3)
        .map(|_| {
            let (client, url, key, next) = (
                ctx.client.clone(),
                ctx.url.clone(),
                extractor.key.clone(),
                next.clone(),
            );
            tokio::spawn(async move {
                let mut s = Samples::default();
                while Instant::now() < until {
                    let text = max_size_extraction(next.fetch_add(1, Ordering::Relaxed));
                    let t0 = Instant::now();
                    let r = post_data(
                        &client,
                        format!("{url}/v1/memories/extract"),
                        &key,
                        &json!({ "text": text }),
                    )
                    .await;
                    match r {
                        Ok(_) => {
                            s.micros.push(t0.elapsed().as_micros() as u32);
                            s.units += 50;
                        }
                        Err(e) => {
                            s.errors += 1;
                            s.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
                s
            })
        })
        .collect();
    let (loaded, _) = run_workers(
        1,
        warmup,
        measure,
        Pace::default(),
        search("memory search, beside 3 max-size extractions"),
    )
    .await?;
    samples.extend(loaded);
    let mut extractions = Samples::default();
    for l in loops {
        let s = l.await?;
        extractions.micros.extend(s.micros);
        extractions.units += s.units;
        extractions.errors += s.errors;
        if extractions.first_error.is_none() {
            extractions.first_error = s.first_error;
        }
    }
    let wall = (warmup + measure).as_secs_f64();
    let mut r = scenario_result(Scenario::Fairness, 1, measure, samples);
    // Over the warm-up and the measured time: the loops ran through both.
    r.ops.push(summarise(
        "extraction, max size (units: memories; whole run)",
        extractions,
        wall,
    ));
    let p99 = |label: &str| r.ops.iter().find(|o| o.op == label).map(|o| o.p99_ms);
    if let (Some(idle), Some(busy)) = (
        p99("memory search, idle"),
        p99("memory search, beside 3 max-size extractions"),
    ) {
        r.extra = Some(json!({
            "search_p99_idle_ms": idle,
            "search_p99_beside_extractions_ms": busy,
            "p99_ratio": busy / idle,
            "target_ratio": 3.0,
        }));
    }
    Ok(r)
}

/// The physical limits every figure is compared with, measured here and now.
pub(crate) fn limits(dir: &Path) -> Result<ScenarioResult> {
    use std::io::Write;
    let scratch = tempfile::tempdir_in(dir)?;
    // Synced 4 KiB appends: what one durable group commit costs at least.
    let mut f = std::fs::File::create(scratch.path().join("fsync"))?;
    let page = [7u8; 4096];
    let mut sync = Samples::default();
    let t = Instant::now();
    for _ in 0..2000 {
        let t0 = Instant::now();
        f.write_all(&page)?;
        f.sync_data()?;
        sync.micros.push(t0.elapsed().as_micros() as u32);
        sync.units += 1;
    }
    let sync_secs = t.elapsed().as_secs_f64();
    // blake3 over 256 MiB, one thread (the appender hashes on one).
    let buf = vec![1u8; 256 << 20];
    let t = Instant::now();
    let h = blake3::hash(&buf);
    let blake3_gib = 0.25 / t.elapsed().as_secs_f64();
    // A single-pass f32 scan with independent accumulators: the bandwidth a vector scan gets.
    let floats: Vec<f32> = buf.chunks_exact(4).map(|c| f32::from(c[0])).collect();
    let t = Instant::now();
    let mut acc = [0f32; 8];
    for c in floats.chunks_exact(8) {
        for i in 0..8 {
            acc[i] += c[i];
        }
    }
    let scan_gib = 0.25 / t.elapsed().as_secs_f64();
    drop(buf);
    // sled: 200,000 values of 342 bytes (an audit record) in batches of 128, then one scan.
    let db = auditmem::log::open_db(&scratch.path().join("sled"))?;
    let tree = db.open_tree("limits")?;
    let value = vec![3u8; 342];
    let t = Instant::now();
    for chunk in (0..200_000u64).collect::<Vec<_>>().chunks(128) {
        let mut batch = sled::Batch::default();
        for k in chunk {
            batch.insert(&k.to_be_bytes(), value.clone());
        }
        tree.apply_batch(batch)?;
    }
    let insert_per_sec = 200_000.0 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let n = tree.iter().count();
    let iter_per_sec = n as f64 / t.elapsed().as_secs_f64();
    let ops = vec![summarise(
        "synced 4 KiB write (write + fdatasync)",
        sync,
        sync_secs,
    )];
    Ok(ScenarioResult {
        scenario: Scenario::Limits,
        concurrency: 1,
        secs: sync_secs,
        ops,
        extra: Some(json!({
            "blake3_gib_per_sec_one_thread": blake3_gib,
            "f32_scan_gib_per_sec_one_thread": scan_gib,
            "sled_batched_inserts_per_sec": insert_per_sec,
            "sled_iterated_records_per_sec": iter_per_sec,
            // Printed so the work above cannot be optimised away.
            "checksum": format!("{}/{}", &h.to_hex()[..8], acc.iter().sum::<f32>()),
        })),
        rss: None,
    })
}
