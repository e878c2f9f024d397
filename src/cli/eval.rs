//! `auditmem eval locomo`: retrieval quality on LoCoMo through the real service.
//!
//! It starts this binary's `serve` as a child process on a temporary data dir and a loopback
//! port, creates a tenant and a key through the admin API, stores every turn of the chosen
//! conversations with `POST /v1/memories/batch` (100 a batch, the conversation's `sample_id` as
//! `user_id`), then asks each question with `POST /v1/memories/search` (`top_k` 10, that
//! `user_id` as filter) once per search mode, and prints turn-level recall@5 and @10 per
//! category and overall (`crate::locomo` scores). What it measures is what a client of the HTTP
//! API gets: the same handlers, embedder and indexes. Progress goes to stderr, figures to
//! stdout (a table, or JSON with `--json`). The data dir is removed when it ends.
//!
//! `--tune` also fetches each question's semantic and keyword lists (50 deep, as hybrid search
//! fuses them) and prints the recall of reciprocal rank fusion over a grid of its constant and
//! the keyword list's weight: how the service's fusion was chosen (docs/SEARCH.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use auditmem_projections::keyword::{fuse, Fusion};
use auditmem_projections::memories::HYBRID_DEPTH;
use clap::{Args, Subcommand, ValueEnum};
use reqwest::blocking::Client;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::locomo::{self, category_name, Conversation, Recall, Tally, KS};

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub benchmark: Benchmark,
}

#[derive(Subcommand, Debug)]
pub enum Benchmark {
    /// Turn-level recall@5/@10 on LoCoMo, per question category and search mode.
    Locomo(LocomoArgs),
}

/// A search as the eval asks it: the default (no `search_mode`) or one mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Default,
    Semantic,
    Keyword,
    Hybrid,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Semantic => "semantic",
            Mode::Keyword => "keyword",
            Mode::Hybrid => "hybrid",
        }
    }
}

#[derive(Args, Debug)]
pub struct LocomoArgs {
    /// The dataset: LoCoMo's JSON (e.g. ../shared/data/locomo/locomo-dev.json from the
    /// repository root).
    #[arg(long, env = "AUDITMEM_LOCOMO_DATA")]
    pub data: PathBuf,
    /// Only these conversations (their sample_id, repeatable); all by default.
    #[arg(long = "conversation")]
    pub conversations: Vec<String>,
    /// Only the first N questions (categories 1-4) of each conversation.
    #[arg(long)]
    pub questions: Option<usize>,
    /// The searches to measure, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Mode::Default, Mode::Semantic, Mode::Keyword, Mode::Hybrid])]
    pub modes: Vec<Mode>,
    /// The server's embedding model directory (`serve --model-dir`).
    #[arg(long)]
    pub model_dir: Option<PathBuf>,
    /// One more argument for the server's `serve` (repeatable), e.g. `--serve-arg=--embedder`.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    pub serve_args: Vec<String>,
    /// Also print the fusion grid (recall of reciprocal rank fusion over its constant and the
    /// keyword list's weight).
    #[arg(long)]
    pub tune: bool,
    /// Give each turn its session's date as `occurred_at` (the README's measure does not:
    /// this measures what a caller who gives the date gets).
    #[arg(long)]
    pub occurred_at: bool,
    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: EvalArgs) -> Result<ExitCode> {
    match args.benchmark {
        Benchmark::Locomo(a) => locomo_run(a),
    }
}

/// The figures of one run, as `--json` prints them.
#[derive(Serialize)]
struct Report {
    conversations: Vec<String>,
    memories: usize,
    /// Questions left out of every figure: their evidence names no turn.
    unscored: usize,
    /// mode -> category name (and "overall") -> recall.
    modes: Vec<(String, Vec<(String, Recall)>)>,
}

fn locomo_run(a: LocomoArgs) -> Result<ExitCode> {
    let mut conversations = locomo::load(&a.data)?;
    if !a.conversations.is_empty() {
        for want in &a.conversations {
            if !conversations.iter().any(|c| &c.id == want) {
                bail!("no conversation {want} in {}", a.data.display());
            }
        }
        conversations.retain(|c| a.conversations.contains(&c.id));
    }
    if let Some(n) = a.questions {
        for c in &mut conversations {
            c.questions.truncate(n);
        }
    }
    let dir = tempfile::tempdir().context("a temporary data dir")?;
    let server = Server::start(dir.path(), &a)?;
    let client = Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .context("an HTTP client")?;
    let api = Api {
        key: server.key(&client)?,
        server: &server,
        client,
    };

    let memories: usize = conversations.iter().map(|c| c.turns.len()).sum();
    let started = Instant::now();
    let bar = super::progress(memories as u64, "storing turns");
    let mut turn_of: HashMap<Uuid, String> = HashMap::new();
    for c in &conversations {
        for chunk in c.turns.chunks(100) {
            let items: Vec<Value> = chunk
                .iter()
                .map(|t| {
                    let mut item = json!({"content": t.content, "memory_type": "context",
                        "user_id": c.id, "metadata": {"dia_id": t.dia_id, "session": t.session}});
                    if let (true, Some(at)) = (a.occurred_at, &t.occurred_at) {
                        item["occurred_at"] = json!(at);
                    }
                    item
                })
                .collect();
            let data = api.post("/v1/memories/batch", json!({ "memories": items }))?;
            let created = data["memories"].as_array().context("batch answer")?;
            if created.len() != chunk.len() {
                bail!(
                    "batch answered {} memories for {}",
                    created.len(),
                    chunk.len()
                );
            }
            for (m, t) in created.iter().zip(chunk) {
                turn_of.insert(id_of(m)?, t.dia_id.clone());
            }
            bar.inc(chunk.len() as u64);
        }
    }
    bar.finish_and_clear();
    eprintln!(
        "[locomo] stored {memories} turns of {} conversations in {:.1} s",
        conversations.len(),
        started.elapsed().as_secs_f64()
    );

    let asked: usize = conversations.iter().map(|c| c.questions.len()).sum();
    let mut report = Report {
        conversations: conversations.iter().map(|c| c.id.clone()).collect(),
        memories,
        unscored: 0,
        modes: Vec::new(),
    };
    for &mode in &a.modes {
        let bar = super::progress(asked as u64, &format!("searching ({})", mode.name()));
        let started = Instant::now();
        let mut tally = Tally::default();
        for c in &conversations {
            for q in &c.questions {
                let ranked = api.search(c, &q.question, mode, 10, &turn_of)?;
                tally.add(q, &ranked.iter().map(|h| h.0.clone()).collect::<Vec<_>>());
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        eprintln!(
            "[locomo] {}: {asked} questions in {:.1} s",
            mode.name(),
            started.elapsed().as_secs_f64()
        );
        report.unscored = tally.unscored;
        let mut rows: Vec<(String, Recall)> = tally
            .categories()
            .into_iter()
            .map(|(c, r)| (format!("{c} {}", category_name(c)), r))
            .collect();
        rows.push(("overall".to_string(), tally.overall()));
        report.modes.push((mode.name().to_string(), rows));
    }

    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    if a.tune {
        tune(&api, &conversations, &turn_of)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(r: &Report) {
    println!(
        "LoCoMo: {} conversations ({}), {} turns; turn-level recall@{}/@{}",
        r.conversations.len(),
        r.conversations.join(", "),
        r.memories,
        KS[0],
        KS[1]
    );
    if r.unscored > 0 {
        println!(
            "({} questions left out: their evidence names no turn)",
            r.unscored
        );
    }
    println!(
        "{:<10} {:<14} {:>9} {:>9} {:>9}",
        "search", "category", "questions", "r@5", "r@10"
    );
    for (mode, rows) in &r.modes {
        for (cat, rec) in rows {
            println!(
                "{mode:<10} {cat:<14} {:>9} {:>9.3} {:>9.3}",
                rec.questions, rec.at5, rec.at10
            );
        }
    }
}

/// The fusion grid: each question's semantic and keyword lists fetched once, fused here by the
/// service's own [`fuse`], scored over every pair of constant and keyword weight.
fn tune(
    api: &Api<'_>,
    conversations: &[Conversation],
    turn_of: &HashMap<Uuid, String>,
) -> Result<()> {
    let asked: usize = conversations.iter().map(|c| c.questions.len()).sum();
    let bar = super::progress(asked as u64, "fetching the lists to fuse");
    // (question, semantic list, keyword list), turn ids best first.
    let mut lists = Vec::new();
    for c in conversations {
        for q in &c.questions {
            let ids = |hits: Vec<(String, Uuid)>| hits.into_iter().map(|h| h.1).collect::<Vec<_>>();
            let sem = ids(api.search(c, &q.question, Mode::Semantic, HYBRID_DEPTH, turn_of)?);
            let kw = ids(api.search(c, &q.question, Mode::Keyword, HYBRID_DEPTH, turn_of)?);
            lists.push((q, sem, kw));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    println!("\nfusion grid: reciprocal rank fusion of the top {HYBRID_DEPTH} of each list, semantic weight 1");
    println!("{:>6} {:>8} {:>9} {:>9}", "rrf_k", "kw_wt", "r@5", "r@10");
    let mut best: Option<(f64, f32, f32)> = None;
    for k in [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 100.0] {
        for w in [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0] {
            let f = Fusion {
                k,
                semantic_weight: 1.0,
                keyword_weight: w,
                keyword_min_share: 0.0,
            };
            let mut tally = Tally::default();
            for (q, sem, kw) in &lists {
                let fused: Vec<String> = fuse(sem, kw, &f)
                    .into_iter()
                    .filter_map(|(id, _)| turn_of.get(&id).cloned())
                    .collect();
                tally.add(q, &fused);
            }
            let o = tally.overall();
            println!("{k:>6} {w:>8} {:>9.3} {:>9.3}", o.at5, o.at10);
            let score = o.at5 + o.at10;
            if best.is_none_or(|b| score > b.0) {
                best = Some((score, k, w));
            }
        }
    }
    if let Some((_, k, w)) = best {
        println!("best (r@5 + r@10): rrf_k {k}, keyword weight {w}");
    }
    Ok(())
}

fn id_of(v: &Value) -> Result<Uuid> {
    v["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no id in {v}"))
}

struct Api<'a> {
    server: &'a Server,
    client: Client,
    key: String,
}

impl Api<'_> {
    fn post(&self, path: &str, body: Value) -> Result<Value> {
        post(&self.client, &self.server.url, path, &self.key, &body)
    }

    /// The turn ids (and memory ids) `mode` ranks first for `question` in `c`'s memories.
    fn search(
        &self,
        c: &Conversation,
        question: &str,
        mode: Mode,
        top_k: usize,
        turn_of: &HashMap<Uuid, String>,
    ) -> Result<Vec<(String, Uuid)>> {
        let mut body = json!({"query": question, "top_k": top_k, "filters": {"user_id": c.id}});
        if mode != Mode::Default {
            body["search_mode"] = json!(mode.name());
        }
        let data = self.post("/v1/memories/search", body)?;
        let results = data["results"].as_array().context("search answer")?;
        results
            .iter()
            .map(|r| {
                let id = id_of(r)?;
                let turn = turn_of
                    .get(&id)
                    .with_context(|| format!("search returned {id}, no turn stored"))?;
                Ok((turn.clone(), id))
            })
            .collect()
    }
}

fn post(client: &Client, url: &str, path: &str, bearer: &str, body: &Value) -> Result<Value> {
    let resp = client
        .post(format!("{url}{path}"))
        .bearer_auth(bearer)
        .json(body)
        .send()
        .with_context(|| format!("POST {path}"))?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .with_context(|| format!("POST {path}: not JSON"))?;
    if !status.is_success() {
        bail!("POST {path}: {status} {v}");
    }
    Ok(v["data"].clone())
}

/// The server under measurement: this binary's `serve`, a child process.
struct Server {
    process: std::process::Child,
    url: String,
    admin_token: String,
}

impl Server {
    fn start(dir: &Path, a: &LocomoArgs) -> Result<Server> {
        let admin_token = hex::encode(rand::random::<[u8; 32]>());
        let exe = std::env::current_exe().context("this binary's path")?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--signing-key")
            .arg(dir.join("signing.key"))
            .arg("--checkpoints-file")
            .arg(dir.join("checkpoints.ndjson"));
        if let Some(m) = &a.model_dir {
            cmd.arg("--model-dir").arg(m);
        }
        let mut process = cmd
            .args(&a.serve_args)
            .env("AUDITMEM_ADMIN_TOKEN", &admin_token)
            .env("AUDITMEM_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting auditmem serve")?;
        let url = super::serve::wait_listening(&mut process)?;
        Ok(Server {
            process,
            url,
            admin_token,
        })
    }

    /// A key with memory permissions, of a new tenant on the business plan.
    fn key(&self, client: &Client) -> Result<String> {
        let tenant = post(
            client,
            &self.url,
            "/admin/v1/tenants",
            &self.admin_token,
            &json!({"name": "locomo", "plan": "business", "credits": 1.0e9}),
        )?;
        let id = tenant["id"].as_str().context("tenant id")?;
        let key = post(
            client,
            &self.url,
            &format!("/admin/v1/tenants/{id}/keys"),
            &self.admin_token,
            &json!({"permissions": ["memory.read", "memory.write"]}),
        )?;
        Ok(key["api_key"].as_str().context("api_key")?.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM: the server drains and stops before its data dir is removed.
        if let Some(pid) = rustix::process::Pid::from_raw(self.process.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.process.wait();
    }
}
