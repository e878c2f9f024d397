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

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use serde::Serialize;
use serde_json::{json, Value};

mod as_of;
mod erasure;
mod measure;
mod ops;
mod scenarios;
mod seed;
mod stream;
mod target;

use measure::{drive, Pace, ScenarioResult};
use ops::Ctx;
use scenarios::{embed_limit, export, fairness, hello, limits};
use seed::{gateway_entry, seed_audit, seed_memories, Seeded};
use target::{Admin, Target};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scenario {
    /// Admin audit ingestion, batches of `--batch` entries, into a tenant of its own.
    Ingest,
    /// `POST /v1/memories` with distinct content (every request embeds).
    Create,
    /// `POST /v1/memories/batch` of 100 memories with distinct content (units: memories).
    BatchCreate,
    /// `POST /v1/memories/search` over the seeded memories, `search_mode: semantic`.
    Search,
    /// The same searches with `search_mode: hybrid`, the default (the query embedded,
    /// semantic and BM25 lists of 50 each fused by reciprocal rank).
    HybridSearch,
    /// The same searches with `search_mode: keyword` (BM25 alone: no embedding).
    KeywordSearch,
    /// The `search` scenario's requests as MCP `search_memories` tool calls (JSON-RPC
    /// `tools/call` POSTed to `/mcp`, stateless, JSON answers): MCP's cost over REST.
    McpSearch,
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
    /// One tenant's user with `--erase-memories` memories and `--erase-entries` audit entries
    /// that show it, erased (`POST /v1/erasures`) while another tenant searches (one client):
    /// the erasure's time and the searches' p99 beside it against idle (target ≤ 2×). Needs
    /// no seeded data (`--audit-entries 0`).
    Erasure,
    /// One tenant's `--as-of-memories` memories and a recorded search, searched again `as_of`
    /// its position (one client), then by two clients while another tenant searches (one
    /// client): the replay's latency, and the other tenant's p99 beside it against idle.
    /// Needs no seeded data (`--audit-entries 0 --memories 0`).
    AsOf,
    /// One tenant's entries ingested at `--stream-rate` entries/s (batches of 10, open loop),
    /// in blocks alone and blocks while `--streams` SSE tails of that tenant read them
    /// (`--stream-pairs`, alternating order; the tails on a thread of their own at
    /// `--tail-nice`): the writes' p99 in both and their ratio (target ≤ 1.1), and the tails'
    /// lag. Every tail must read every entry written while it is open, once, in order. Needs
    /// `--serve-arg=--max-streams-per-tenant=N` for N ≥ `--streams` and no seeded data
    /// (`--audit-entries 0`).
    Stream,
}

impl Scenario {
    pub(crate) fn needs_memories(self) -> bool {
        matches!(
            self,
            Scenario::Search
                | Scenario::HybridSearch
                | Scenario::KeywordSearch
                | Scenario::McpSearch
                | Scenario::Mixed
        )
    }
}

#[derive(Parser, Debug)]
#[command(about = "auditmem load driver")]
pub(crate) struct Args {
    /// Scenarios to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ingest,list")]
    pub(crate) scenarios: Vec<Scenario>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Measured seconds per scenario (after the warm-up).
    #[arg(long, default_value_t = 20)]
    pub(crate) secs: u64,
    /// Warm-up seconds per scenario, not measured.
    #[arg(long, default_value_t = 2)]
    pub(crate) warmup_secs: u64,
    /// Entries per ingestion call in the `ingest` scenario.
    #[arg(long, default_value_t = 100)]
    pub(crate) batch: usize,
    /// Sentences per model call in the `embed` scenario (the server's embedding worker runs
    /// slices of at most 16 texts or 2 KiB).
    #[arg(long, default_value_t = 32)]
    pub(crate) embed_batch: u64,
    /// Working dir: data, keys and driver.json (the seeded tenants). Reused across runs.
    #[arg(long, default_value = "target/load")]
    pub(crate) dir: PathBuf,
    /// Target a running server instead of starting one (its admin token in --admin-token).
    #[arg(long)]
    pub(crate) url: Option<String>,
    /// Other nodes of the same cluster (`--log nats://...`): each worker sends its requests to
    /// `--url` and these in turn. Seeding goes to `--url`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) also_url: Vec<String>,
    #[arg(
        long,
        env = "AUDITMEM_ADMIN_TOKEN",
        default_value = "load-admin-token-2c41e9f07a3d5b86"
    )]
    pub(crate) admin_token: String,
    /// Audit entries to seed in the list tenant.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) audit_entries: u64,
    /// Memories to seed in the memory tenant (for search and mixed).
    #[arg(long, default_value_t = 100_000)]
    pub(crate) memories: u64,
    /// The `erasure` scenario's user: its memories.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) erase_memories: u64,
    /// The `erasure` scenario's user: audit entries that show it.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) erase_entries: u64,
    /// The `as-of` scenario's tenant: its memories (each one event of its history).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) as_of_memories: u64,
    /// The `stream` scenario's open tails.
    #[arg(long, default_value_t = 50)]
    pub(crate) streams: usize,
    /// The `stream` scenario's ingestion rate, entries/s.
    #[arg(long, default_value_t = 1000.0)]
    pub(crate) stream_rate: f64,
    /// The `stream` scenario's pairs of blocks (one alone, one beside the tails, in alternating
    /// order): `--secs` is split evenly between them.
    #[arg(long, default_value_t = 3)]
    pub(crate) stream_pairs: u32,
    /// How much the `stream` scenario's tail readers' thread lowers its priority (nice value),
    /// standing in for readers on other machines; 0 keeps the driver's.
    #[arg(long, default_value_t = 10)]
    pub(crate) tail_nice: i32,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Extra flags for `auditmem serve` (e.g. `--durability=batch-interval`).
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) serve_arg: Vec<String>,
    /// Offered load in requests/s over all clients (open loop: the nth request is due at
    /// n / rate, and its latency counts from then, so a server falling behind shows as
    /// latency, not as a lower offered rate). 0: each client sends as soon as it has its
    /// answer (closed loop).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) rate: f64,
    /// Print a line every this many seconds (requests/s, p50/p99, errors, server RSS, and its
    /// live heap when built with `--features heap-stats`) and put the lines in the JSON; 0:
    /// only the totals.
    #[arg(long, default_value_t = 0)]
    pub(crate) interval_secs: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub(crate) bench: bool,
}

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
            Scenario::Erasure => erasure::erasure(&ctx, &admin, &args).await?,
            Scenario::AsOf => as_of::as_of(&ctx, &admin, &args).await?,
            Scenario::Stream => stream::stream(&ctx, &admin, &args).await?,
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
