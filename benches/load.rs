//! The load driver: real HTTP against a real `auditmem serve`, named scenarios at a given
//! concurrency for a given time, throughput and latency percentiles per operation.
//!
//! ```text
//! cargo bench --bench load -- --scenarios ingest,list,export --concurrency 64 --secs 20
//! ```
//!
//! It starts the release binary on a data dir under `--dir` (default `target/load`), or targets
//! `--url`. The first run seeds that dir through the admin and public APIs (1,000,000 audit
//! entries in one business tenant; memories with real embeddings when a memory scenario asks
//! for them) and records the tenants and keys in `driver.json`, so later runs skip seeding.
//! Results are printed as a table and, with `--json FILE`, written as JSON. `hello` measures
//! the limit every HTTP figure is compared with: an axum hello-world at the same concurrency.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Scenario {
    /// Admin audit ingestion, batches of `--batch` entries, into a tenant of its own.
    Ingest,
    /// `POST /v1/memories` with distinct content (every request embeds).
    Create,
    /// `POST /v1/memories/batch` of 100 memories with distinct content (units: memories).
    BatchCreate,
    /// `POST /v1/memories/search` over the seeded memories.
    Search,
    /// The same searches with `search_mode: hybrid` (the query embedded, semantic and BM25
    /// lists of 50 each fused by reciprocal rank).
    HybridSearch,
    /// The same searches with `search_mode: keyword` (BM25 alone: no embedding).
    KeywordSearch,
    /// `GET /v1/audit/logs` on the 1,000,000-entry tenant: no filter, action, time range, both.
    List,
    /// 70% reads (audit list, memory list, search) / 30% writes (memory create, ingestion).
    Mixed,
    /// One CSV export of the whole 1,000,000-entry tenant, timed to completion.
    Export,
    /// An axum hello-world in this process at the same concurrency: the HTTP limit.
    Hello,
    /// The embedding model alone, in this process, on the sentences `create` sends, in
    /// batches of 32 (while the server idles): the limit memory creation is held to.
    Embed,
    /// This machine's limits, in this process: synced 4 KiB writes in the data dir's
    /// filesystem, blake3, sled inserts and iteration, a memory scan.
    Limits,
    /// One tenant's single-sentence searches (one client, closed loop), first alone, then while
    /// another tenant runs three concurrent max-size extractions (20,000 characters, 50
    /// memories each, in a loop): the search's p99 in both and their ratio (target ≤ 3×).
    /// Needs no seeded data (`--audit-entries 0`).
    Fairness,
}

impl Scenario {
    fn needs_memories(self) -> bool {
        matches!(
            self,
            Scenario::Search | Scenario::HybridSearch | Scenario::KeywordSearch | Scenario::Mixed
        )
    }
}

#[derive(Parser, Debug)]
#[command(about = "auditmem load driver")]
struct Args {
    /// Scenarios to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ingest,list")]
    scenarios: Vec<Scenario>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Measured seconds per scenario (after the warm-up).
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// Warm-up seconds per scenario, not measured.
    #[arg(long, default_value_t = 2)]
    warmup_secs: u64,
    /// Entries per ingestion call in the `ingest` scenario.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Sentences per model call in the `embed` scenario (the server's embedding worker runs
    /// slices of at most 16 texts or 2 KiB).
    #[arg(long, default_value_t = 32)]
    embed_batch: u64,
    /// Working dir: data, keys and driver.json (the seeded tenants). Reused across runs.
    #[arg(long, default_value = "target/load")]
    dir: PathBuf,
    /// Target a running server instead of starting one (its admin token in --admin-token).
    #[arg(long)]
    url: Option<String>,
    /// Other nodes of the same cluster (`--log nats://...`): each worker sends its requests to
    /// `--url` and these in turn. Seeding goes to `--url`.
    #[arg(long, value_delimiter = ',')]
    also_url: Vec<String>,
    #[arg(
        long,
        env = "AUDITMEM_ADMIN_TOKEN",
        default_value = "load-admin-token-2c41e9f07a3d5b86"
    )]
    admin_token: String,
    /// Audit entries to seed in the list tenant.
    #[arg(long, default_value_t = 1_000_000)]
    audit_entries: u64,
    /// Memories to seed in the memory tenant (for search and mixed).
    #[arg(long, default_value_t = 100_000)]
    memories: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Extra flags for `auditmem serve` (e.g. `--durability=batch-interval`).
    #[arg(long, allow_hyphen_values = true)]
    serve_arg: Vec<String>,
    /// Offered load in requests/s over all clients (open loop: the nth request is due at
    /// n / rate, and its latency counts from then, so a server falling behind shows as
    /// latency, not as a lower offered rate). 0: each client sends as soon as it has its
    /// answer (closed loop).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Print a line every this many seconds (requests/s, p50/p99, errors, server RSS, and its
    /// live heap when built with `--features heap-stats`) and put the lines in the JSON; 0:
    /// only the totals.
    #[arg(long, default_value_t = 0)]
    interval_secs: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Tenants and keys of a seeded dir.
#[derive(Serialize, Deserialize, Default, Clone)]
struct Seeded {
    audit: Option<TenantKey>,
    audit_entries: u64,
    ingest: Option<TenantKey>,
    memory: Option<TenantKey>,
    memories: u64,
}

#[derive(Serialize, Deserialize, Clone)]
struct TenantKey {
    id: String,
    key: String,
}

const ACTIONS: [&str; 5] = [
    "gateway.chat",
    "gateway.embeddings",
    "rag.query",
    "gateway.completion",
    "gateway.chat.stream",
];
const DAY_MICROS: i64 = 86_400_000_000;
/// Seeded entries span this many days before the seeding moment.
const SEED_SPAN_DAYS: i64 = 20;

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    std::fs::create_dir_all(&args.dir)?;
    let mut server = match &args.url {
        Some(url) => Target {
            url: url.trim_end_matches('/').to_string(),
            child: None,
        },
        None => Target::spawn(&args.dir, &args.admin_token, &args.serve_arg)?,
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency * 2)
        .timeout(Duration::from_secs(120))
        .build()?;
    let admin = Admin {
        client: client.clone(),
        url: server.url.clone(),
        token: args.admin_token.clone(),
    };
    let state_file = args.dir.join("driver.json");
    let mut seeded: Seeded = match std::fs::read(&state_file) {
        Ok(b) => serde_json::from_slice(&b).context("reading driver.json")?,
        Err(_) => Seeded::default(),
    };
    seed_audit(&admin, &mut seeded, args.audit_entries, &state_file).await?;
    if args.scenarios.iter().any(|s| s.needs_memories()) {
        seed_memories(&admin, &mut seeded, args.memories, &state_file).await?;
    } else if args.scenarios.contains(&Scenario::Create)
        || args.scenarios.contains(&Scenario::BatchCreate)
    {
        // Creating needs the memory tenant, not the seeded memories.
        seed_memories(&admin, &mut seeded, 0, &state_file).await?;
    }

    let ingest_bodies = match &seeded.ingest {
        Some(t) => (0..64u64)
            .map(|b| {
                let entries: Vec<Value> = (0..args.batch as u64)
                    .map(|i| gateway_entry(&t.id, b * 1000 + i, None))
                    .collect();
                serde_json::to_vec(&json!({ "entries": entries })).map(axum::body::Bytes::from)
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let ctx = Arc::new(Ctx {
        ingest_bodies,
        client,
        url: server.url.clone(),
        urls: std::iter::once(server.url.clone())
            .chain(
                args.also_url
                    .iter()
                    .map(|u| u.trim_end_matches('/').to_string()),
            )
            .collect(),
        admin_token: args.admin_token.clone(),
        seeded: seeded.clone(),
        batch: args.batch,
        counter: AtomicU64::new(0),
        started_micros: chrono::Utc::now().timestamp_micros(),
    });
    let mut results = Vec::new();
    for &scenario in &args.scenarios {
        let mut r = match scenario {
            Scenario::Export => export(&ctx).await?,
            Scenario::Hello => hello(&args).await?,
            Scenario::Embed => embed_limit(&args, seeded.memories).await?,
            Scenario::Limits => {
                let dir = args.dir.clone();
                tokio::task::spawn_blocking(move || limits(&dir)).await??
            }
            Scenario::Fairness => fairness(&ctx, &admin, &args).await?,
            _ => {
                drive(
                    &ctx,
                    scenario,
                    args.concurrency,
                    Duration::from_secs(args.warmup_secs),
                    Duration::from_secs(args.secs),
                    Pace {
                        rate: args.rate,
                        interval_secs: args.interval_secs,
                        server_pid: server.pid(),
                        metrics_url: Some(format!("{}/metrics", ctx.url)),
                    },
                )
                .await?
            }
        };
        r.rss = server.rss();
        print_result(&r);
        results.push(r);
    }
    if let Some(path) = &args.json {
        let doc = json!({
            "commit": git_commit(),
            "cpu": cpu_model(),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "concurrency": args.concurrency,
            "secs": args.secs,
            "audit_entries": seeded.audit_entries,
            "memories": seeded.memories,
            "results": results,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
    }
    server.stop();
    Ok(())
}

/// The server under load: a child process of ours, or one given by URL.
struct Target {
    url: String,
    child: Option<Child>,
}

impl Target {
    fn spawn(dir: &Path, admin_token: &str, extra: &[String]) -> Result<Target> {
        let keys = dir.join("keys");
        let mut child = Command::new(env!("CARGO_BIN_EXE_auditmem"))
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--signing-key")
            .arg(keys.join("signing.key"))
            .arg("--checkpoints-file")
            .arg(keys.join("checkpoints.ndjson"))
            .args(extra)
            .env("AUDITMEM_ADMIN_TOKEN", admin_token)
            .env("AUDITMEM_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting auditmem serve")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(u) = line.strip_prefix("auditmem listening on ") {
                        break u.trim().to_string();
                    }
                }
                _ => bail!("the server exited before listening"),
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(Target {
            url,
            child: Some(child),
        })
    }

    /// Resident and peak resident memory of the server, MiB (only for a child of ours).
    fn rss(&self) -> Option<Rss> {
        rss_of(self.pid()?)
    }

    fn pid(&self) -> Option<u32> {
        Some(self.child.as_ref()?.id())
    }
}

/// Resident and peak resident memory of a process, MiB.
fn rss_of(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some(Rss {
        rss_mib: field("VmRSS:")?,
        peak_mib: field("VmHWM:")?,
    })
}

impl Target {
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM: the server drains and signs a last checkpoint, so the dir stays reusable.
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Admin {
    client: reqwest::Client,
    url: String,
    token: String,
}

/// POSTs `body` and returns the `data` of a success envelope.
async fn post_data(
    client: &reqwest::Client,
    url: String,
    bearer: &str,
    body: &Value,
) -> Result<Value> {
    let resp = client
        .post(&url)
        .bearer_auth(bearer)
        .json(body)
        .send()
        .await?;
    let status = resp.status();
    let v: Value = resp.json().await?;
    if !status.is_success() {
        bail!("POST {url}: {status} {v}");
    }
    Ok(v["data"].clone())
}

impl Admin {
    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        post_data(
            &self.client,
            format!("{}{path}", self.url),
            &self.token,
            &body,
        )
        .await
    }

    async fn tenant(&self, name: &str, plan: &str, permissions: &[&str]) -> Result<TenantKey> {
        let t = self
            .post(
                "/admin/v1/tenants",
                json!({"name": name, "plan": plan, "credits": 1.0e9}),
            )
            .await?;
        let id = t["id"].as_str().context("tenant id")?.to_string();
        let k = self
            .post(
                &format!("/admin/v1/tenants/{id}/keys"),
                json!({"permissions": permissions}),
            )
            .await?;
        let key = k["api_key"].as_str().context("api key")?.to_string();
        Ok(TenantKey { id, key })
    }
}

fn save(state_file: &Path, seeded: &Seeded) -> Result<()> {
    std::fs::write(state_file, serde_json::to_vec_pretty(seeded)?)?;
    Ok(())
}

/// A gateway-style entry, as the platform would forward it (dated now without `created_at`).
fn gateway_entry(tenant: &str, i: u64, created_at: Option<i64>) -> Value {
    let prompt = 50 + (i * 7919) % 2000;
    let completion = 10 + (i * 104_729) % 800;
    let mut entry = json!({
        "tenant_id": tenant,
        "action": ACTIONS[(i % ACTIONS.len() as u64) as usize],
        "model_id": if i.is_multiple_of(3) { "gpt-4o-mini" } else { "claude-sonnet" },
        "project_id": format!("proj-{}", i % 17),
        "ip_address": format!("10.0.{}.{}", (i / 256) % 256, i % 256),
        "user_agent": "gateway/1.4",
        "http_status": if i.is_multiple_of(50) { 429 } else { 200 },
        "duration": (i % 900) as f64 + 12.5,
        "credits_consumed": ((prompt + completion) as f64) / 1000.0,
        "tokens": {"prompt_tokens": prompt, "completion_tokens": completion,
                   "total_tokens": prompt + completion},
    });
    if let Some(at) = created_at {
        entry["created_at"] = json!(time_param(at));
    }
    entry
}

async fn seed_audit(admin: &Admin, seeded: &mut Seeded, want: u64, file: &Path) -> Result<()> {
    if seeded.audit.is_none() {
        seeded.audit = Some(
            admin
                .tenant(
                    "load-audit",
                    "business",
                    &["audit.read", "audit.export", "memory.read", "memory.write"],
                )
                .await?,
        );
        seeded.ingest = Some(
            admin
                .tenant("load-ingest", "business", &["audit.read"])
                .await?,
        );
        save(file, seeded)?;
    }
    if seeded.audit_entries >= want {
        return Ok(());
    }
    let tenant = seeded.audit.as_ref().context("audit tenant")?.id.clone();
    let (from, n) = (seeded.audit_entries, want - seeded.audit_entries);
    let now = chrono::Utc::now().timestamp_micros();
    let step = (SEED_SPAN_DAYS * DAY_MICROS) / want.max(1) as i64;
    let pb = indicatif::ProgressBar::new(n);
    pb.set_message("seeding audit entries");
    const BATCH: u64 = 1000;
    let next = Arc::new(AtomicU64::new(from));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (next, pb, tenant) = (next.clone(), pb.clone(), tenant.clone());
        let admin = Admin {
            client: admin.client.clone(),
            url: admin.url.clone(),
            token: admin.token.clone(),
        };
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(BATCH, Ordering::Relaxed);
                if start >= want {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = (start + BATCH).min(want);
                let entries: Vec<Value> = (start..end)
                    .map(|i| {
                        let at = now - (want - i) as i64 * step;
                        gateway_entry(&tenant, i, Some(at))
                    })
                    .collect();
                admin
                    .post("/admin/v1/audit/logs", json!({"entries": entries}))
                    .await?;
                pb.inc(end - start);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    pb.finish_and_clear();
    seeded.audit_entries = want;
    save(file, seeded)
}

/// Distinct, plausible memory sentences: every index gives another one.
fn memory_text(i: u64) -> String {
    const WHO: [&str; 8] = [
        "The user",
        "Our customer",
        "The team lead",
        "The on-call engineer",
        "The analyst",
        "The project owner",
        "The designer",
        "The support agent",
    ];
    const WHAT: [&str; 12] = [
        "prefers concise answers with code examples",
        "works mostly with Rust and PostgreSQL",
        "wants weekly summaries of open incidents",
        "is based in Berlin and works in CET",
        "deploys to Kubernetes on Fridays only after review",
        "asked to never include personal data in reports",
        "uses dark mode and a large font",
        "is allergic to peanuts and avoids them at lunch",
        "tracks sprint velocity in a spreadsheet",
        "needs invoices in EUR with VAT shown",
        "reviews pull requests every morning",
        "likes hiking in the Alps on weekends",
    ];
    const WHEN: [&str; 6] = [
        "since last spring",
        "for project {}",
        "according to ticket {}",
        "as noted in meeting {}",
        "per the onboarding form {}",
        "as of release {}",
    ];
    let when = WHEN[(i / 96 % 6) as usize].replace("{}", &(i / 576).to_string());
    format!(
        "{} {} {}.",
        WHO[(i % 8) as usize],
        WHAT[(i / 8 % 12) as usize],
        when
    )
}

const MEMORY_TYPES: [&str; 3] = ["fact", "rule", "context"];

async fn seed_memories(admin: &Admin, seeded: &mut Seeded, want: u64, file: &Path) -> Result<()> {
    if seeded.memory.is_none() {
        seeded.memory = Some(
            admin
                .tenant(
                    "load-memory",
                    "business",
                    &["audit.read", "memory.read", "memory.write"],
                )
                .await?,
        );
        save(file, seeded)?;
    }
    if seeded.memories >= want {
        return Ok(());
    }
    let key = seeded.memory.as_ref().context("memory tenant")?.key.clone();
    let pb = indicatif::ProgressBar::new(want - seeded.memories);
    pb.set_message("seeding memories (embedding each, batches of 100)");
    let next = Arc::new(AtomicU64::new(seeded.memories));
    let done = Arc::new(AtomicU64::new(seeded.memories));
    // Seeding takes several minutes: record progress every 10 s, so an interrupted run resumes
    // about where it stopped (at most the requests in flight are sent twice).
    let ticker = {
        let (done, file, mut snapshot) = (done.clone(), file.to_path_buf(), seeded.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                snapshot.memories = done.load(Ordering::Relaxed);
                if let Err(e) = save(&file, &snapshot) {
                    eprintln!("recording seeding progress: {e}");
                }
            }
        })
    };
    let mut tasks = Vec::new();
    // Batches of 100 (`POST /v1/memories/batch`, the same memories as single creates would
    // make): the embedder runs full slices, about twice the single creates' rate.
    const SEED_BATCH: u64 = 100;
    for _ in 0..4 {
        let (next, done, pb, key) = (next.clone(), done.clone(), pb.clone(), key.clone());
        let (client, url) = (admin.client.clone(), admin.url.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(SEED_BATCH, Ordering::Relaxed);
                if first >= want {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = (first + SEED_BATCH).min(want);
                let memories: Vec<Value> = (first..end)
                    .map(|i| {
                        json!({"content": memory_text(i),
                            "memory_type": MEMORY_TYPES[(i % 3) as usize],
                            "importance": (i % 10) as f64 / 10.0})
                    })
                    .collect();
                let resp = client
                    .post(format!("{url}/v1/memories/batch"))
                    .bearer_auth(&key)
                    .json(&json!({ "memories": memories }))
                    .send()
                    .await?;
                if !resp.status().is_success() {
                    bail!("seeding memories {first}..{end}: {}", resp.status());
                }
                done.fetch_add(end - first, Ordering::Relaxed);
                pb.inc(end - first);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    ticker.abort();
    pb.finish_and_clear();
    seeded.memories = want;
    save(file, seeded)
}

struct Ctx {
    client: reqwest::Client,
    url: String,
    /// `url` and the `--also-url` nodes, which `perform` takes in turn.
    urls: Vec<String>,
    admin_token: String,
    seeded: Seeded,
    batch: usize,
    /// Makes every created memory and search query distinct across workers.
    counter: AtomicU64,
    /// Ingestion bodies built once: the driver shares the server's two cores, and building
    /// 100 entries of JSON per request would take CPU from the server it measures (the server
    /// gives every entry its own id and time whatever the body).
    ingest_bodies: Vec<axum::body::Bytes>,
    started_micros: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Ingest,
    Create,
    BatchCreate,
    Search,
    HybridSearch,
    KeywordSearch,
    List,
    ListAction,
    ListRange,
    ListActionRange,
    MemoryList,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Ingest => "ingest",
            Op::Create => "memory create",
            Op::BatchCreate => "memory batch create of 100 (memories/s)",
            Op::Search => "memory search",
            Op::HybridSearch => "memory search, hybrid",
            Op::KeywordSearch => "memory search, keyword",
            Op::List => "audit list",
            Op::ListAction => "audit list ?action",
            Op::ListRange => "audit list ?start_time&end_time",
            Op::ListActionRange => "audit list ?action&start_time&end_time",
            Op::MemoryList => "memory list",
        }
    }

    /// The op a worker performs for its `n`th request in `scenario`.
    fn pick(scenario: Scenario, n: u64) -> Op {
        match scenario {
            Scenario::Ingest => Op::Ingest,
            Scenario::Create => Op::Create,
            Scenario::BatchCreate => Op::BatchCreate,
            Scenario::Search => Op::Search,
            Scenario::HybridSearch => Op::HybridSearch,
            Scenario::KeywordSearch => Op::KeywordSearch,
            Scenario::List => {
                [Op::List, Op::ListAction, Op::ListRange, Op::ListActionRange][(n % 4) as usize]
            }
            // 70% reads / 30% writes, interleaved by a fixed pattern of ten.
            _ => [
                Op::List,
                Op::Search,
                Op::MemoryList,
                Op::Create,
                Op::ListAction,
                Op::Search,
                Op::Ingest,
                Op::MemoryList,
                Op::ListRange,
                Op::Create,
            ][(n % 10) as usize],
        }
    }
}

fn time_param(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Performs one request; returns the units it carried (entries for ingestion, else 1).
async fn perform(ctx: &Ctx, op: Op, n: u64) -> Result<u64> {
    let key = |t: &Option<TenantKey>| -> Result<String> {
        Ok(t.as_ref().context("tenant not seeded")?.key.clone())
    };
    let url = &ctx.urls[(n % ctx.urls.len() as u64) as usize];
    let c = &ctx.client;
    let (req, units) = match op {
        Op::Ingest => {
            let body = &ctx.ingest_bodies[(n % ctx.ingest_bodies.len() as u64) as usize];
            let req = c
                .post(format!("{url}/admin/v1/audit/logs"))
                .bearer_auth(&ctx.admin_token)
                .header("content-type", "application/json")
                .body(body.clone());
            (req, ctx.batch as u64)
        }
        Op::Create => {
            let i = ctx.counter.fetch_add(1, Ordering::Relaxed);
            // Past the seeded range, so the text (and its embedding) is new.
            let text = format!("{} (load {i})", memory_text(ctx.seeded.memories + i));
            let req = c
                .post(format!("{url}/v1/memories"))
                .bearer_auth(key(&ctx.seeded.memory)?)
                .json(&json!({"content": text, "memory_type": MEMORY_TYPES[(i % 3) as usize]}));
            (req, 1)
        }
        Op::BatchCreate => {
            let first = ctx.counter.fetch_add(100, Ordering::Relaxed);
            let memories: Vec<Value> = (first..first + 100)
                .map(|i| {
                    json!({
                        "content": format!("{} (load {i})", memory_text(ctx.seeded.memories + i)),
                        "memory_type": MEMORY_TYPES[(i % 3) as usize],
                    })
                })
                .collect();
            let req = c
                .post(format!("{url}/v1/memories/batch"))
                .bearer_auth(key(&ctx.seeded.memory)?)
                .json(&json!({ "memories": memories }));
            (req, 100)
        }
        Op::Search | Op::HybridSearch | Op::KeywordSearch => {
            // Queries vary so the embedder's cache does not answer them.
            let i = ctx.counter.fetch_add(1, Ordering::Relaxed);
            let q = format!(
                "what does {} like? ({i})",
                memory_text(i * 31).to_lowercase()
            );
            let mut body = json!({"query": q, "top_k": 5});
            match op {
                Op::HybridSearch => body["search_mode"] = json!("hybrid"),
                Op::KeywordSearch => body["search_mode"] = json!("keyword"),
                // The semantic default: the body earlier figures were taken with.
                _ => {}
            }
            let req = c
                .post(format!("{url}/v1/memories/search"))
                .bearer_auth(key(&ctx.seeded.memory)?)
                .json(&body);
            (req, 1)
        }
        Op::MemoryList => {
            let req = c
                .get(format!("{url}/v1/memories?page={}&page_size=20", 1 + n % 5))
                .bearer_auth(key(&ctx.seeded.memory)?);
            (req, 1)
        }
        Op::List | Op::ListAction | Op::ListRange | Op::ListActionRange => {
            let mut q: Vec<(&str, String)> = Vec::new();
            if matches!(op, Op::ListAction | Op::ListActionRange) {
                q.push(("action", ACTIONS[(n % 3) as usize].to_string()));
            }
            if matches!(op, Op::ListRange | Op::ListActionRange) {
                // A window in the middle of the seeded span: its first page is found by rank.
                let end = ctx.started_micros - 3 * DAY_MICROS;
                q.push(("start_time", time_param(end - 7 * DAY_MICROS)));
                q.push(("end_time", time_param(end)));
            }
            let req = c
                .get(format!("{url}/v1/audit/logs"))
                .query(&q)
                .bearer_auth(key(&ctx.seeded.audit)?);
            (req, 1)
        }
    };
    let resp = req.send().await?;
    let status = resp.status();
    let body = resp.bytes().await?;
    if !status.is_success() {
        bail!(
            "{} -> {status}: {}",
            op.name(),
            String::from_utf8_lossy(&body)
        );
    }
    Ok(units)
}

#[derive(Default)]
struct Samples {
    micros: Vec<u32>,
    units: u64,
    errors: u64,
    first_error: Option<String>,
}

#[derive(Serialize)]
struct OpResult {
    op: &'static str,
    requests: u64,
    units: u64,
    units_per_sec: f64,
    requests_per_sec: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    errors: u64,
    first_error: Option<String>,
}

#[derive(Serialize)]
struct Rss {
    rss_mib: f64,
    peak_mib: f64,
}

#[derive(Serialize)]
struct ScenarioResult {
    scenario: Scenario,
    concurrency: usize,
    secs: f64,
    ops: Vec<OpResult>,
    /// Extra figures of one-shot scenarios (export).
    extra: Option<Value>,
    rss: Option<Rss>,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

fn summarise(op: &'static str, mut s: Samples, secs: f64) -> OpResult {
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
struct Pace {
    /// Requests/s over all workers (open loop); 0: closed loop.
    rate: f64,
    /// Seconds between progress lines; 0: none.
    interval_secs: u64,
    /// The server's pid, for RSS in the progress lines.
    server_pid: Option<u32>,
    /// The server's `/metrics`: its RSS when it is not our child, and its live heap when it
    /// was built with the `heap-stats` feature.
    metrics_url: Option<String>,
}

/// What the workers finished in the current progress interval.
#[derive(Default)]
struct Window {
    micros: Vec<u32>,
    errors: u64,
}

/// Runs `concurrency` workers, each calling `request(n)` for its `n`th turn until the time is
/// up; requests finishing in the warm-up or after the end are not counted. `request` names the
/// operation it performed and returns the units it carried. With a rate, turns are handed out
/// from one counter and each waits for its due time; with an interval, a progress line per
/// interval is printed and returned.
async fn run_workers<F, Fut>(
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
        for (op, s) in t.await? {
            let m = merged.entry(op).or_default();
            m.micros.extend(s.micros);
            m.units += s.units;
            m.errors += s.errors;
            if m.first_error.is_none() {
                m.first_error = s.first_error;
            }
        }
    }
    let intervals = match reporter {
        Some(r) => r.await?,
        None => Vec::new(),
    };
    Ok((merged, intervals))
}

/// Every `pace.interval_secs` of the measured time: requests/s, p50/p99 and errors of the
/// requests finished in that interval, and the server's RSS.
async fn report_intervals(
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
async fn server_gauges(client: &reqwest::Client, url: &str) -> BTreeMap<String, f64> {
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

fn scenario_result(
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
async fn drive(
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

/// One CSV export of the whole seeded tenant, polled to completion.
async fn export(ctx: &Ctx) -> Result<ScenarioResult> {
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
async fn hello(args: &Args) -> Result<ScenarioResult> {
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
async fn embed_limit(args: &Args, seeded: u64) -> Result<ScenarioResult> {
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
fn max_size_extraction(n: u64) -> String {
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

/// The `fairness` scenario (see [`Scenario::Fairness`]).
async fn fairness(ctx: &Arc<Ctx>, admin: &Admin, args: &Args) -> Result<ScenarioResult> {
    let stamp = chrono::Utc::now().timestamp_micros();
    let searcher = admin
        .tenant(
            &format!("fair-search-{stamp}"),
            "pro",
            &["memory.read", "memory.write"],
        )
        .await?;
    let extractor = admin
        .tenant(
            &format!("fair-extract-{stamp}"),
            "pro",
            &["memory.read", "memory.write"],
        )
        .await?;
    // Something to find: 20 of the driver's sentences.
    for i in 0..20 {
        post_data(
            &ctx.client,
            format!("{}/v1/memories", ctx.url),
            &searcher.key,
            &json!({"content": memory_text(i * 37), "memory_type": "fact"}),
        )
        .await?;
    }
    let (warmup, measure) = (
        Duration::from_secs(args.warmup_secs),
        Duration::from_secs(args.secs),
    );
    let search = |label: &'static str| {
        let (client, url, key) = (ctx.client.clone(), ctx.url.clone(), searcher.key.clone());
        let counter = Arc::new(AtomicU64::new(0));
        move |_n: u64| {
            let (client, url, key, counter) =
                (client.clone(), url.clone(), key.clone(), counter.clone());
            async move {
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
            }
        }
    };
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
fn limits(dir: &Path) -> Result<ScenarioResult> {
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

fn print_result(r: &ScenarioResult) {
    println!(
        "\n## {:?}  (concurrency {}, {:.1} s)",
        r.scenario, r.concurrency, r.secs
    );
    if !r.ops.is_empty() {
        println!(
            "| {:<40} | {:>9} | {:>10} | {:>9} | {:>8} | {:>8} | {:>8} | {:>8} | {:>6} |",
            "op", "requests", "units/s", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
        );
        println!("|{}|", "-".repeat(130));
    }
    for o in &r.ops {
        println!(
            "| {:<40} | {:>9} | {:>10.0} | {:>9.0} | {:>8.2} | {:>8.2} | {:>8.2} | {:>8.2} | {:>6} |",
            o.op,
            o.requests,
            o.units_per_sec,
            o.requests_per_sec,
            o.p50_ms,
            o.p90_ms,
            o.p99_ms,
            o.max_ms,
            o.errors
        );
        if let Some(e) = &o.first_error {
            println!("  first error: {e}");
        }
    }
    if let Some(x) = &r.extra {
        println!("{x}");
    }
    if let Some(m) = &r.rss {
        println!(
            "server RSS {:.0} MiB, peak {:.0} MiB",
            m.rss_mib, m.peak_mib
        );
    }
}

fn git_commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}
