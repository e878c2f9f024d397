//! The requests the scenarios send: one operation of each kind against the target.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::seed::{memory_text, Seeded, TenantKey, ACTIONS, DAY_MICROS, MEMORY_TYPES};
use crate::Scenario;

pub(crate) struct Ctx {
    pub(crate) client: reqwest::Client,
    pub(crate) url: String,
    /// `url` and the `--also-url` nodes, which `perform` takes in turn.
    pub(crate) urls: Vec<String>,
    pub(crate) admin_token: String,
    pub(crate) seeded: Seeded,
    pub(crate) batch: usize,
    /// Makes every created memory and search query distinct across workers.
    pub(crate) counter: AtomicU64,
    /// Ingestion bodies built once: the driver shares the server's two cores, and building
    /// 100 entries of JSON per request would take CPU from the server it measures (the server
    /// gives every entry its own id and time whatever the body).
    pub(crate) ingest_bodies: Vec<axum::body::Bytes>,
    pub(crate) started_micros: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Ingest,
    Create,
    BatchCreate,
    Search,
    HybridSearch,
    KeywordSearch,
    McpSearch,
    List,
    ListAction,
    ListRange,
    ListActionRange,
    MemoryList,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Ingest => "ingest",
            Op::Create => "memory create",
            Op::BatchCreate => "memory batch create of 100 (memories/s)",
            Op::Search => "memory search, semantic",
            Op::HybridSearch => "memory search, hybrid",
            Op::KeywordSearch => "memory search, keyword",
            Op::McpSearch => "MCP search_memories, semantic",
            Op::List => "audit list",
            Op::ListAction => "audit list ?action",
            Op::ListRange => "audit list ?start_time&end_time",
            Op::ListActionRange => "audit list ?action&start_time&end_time",
            Op::MemoryList => "memory list",
        }
    }

    /// The op a worker performs for its `n`th request in `scenario`.
    pub(crate) fn pick(scenario: Scenario, n: u64) -> Op {
        match scenario {
            Scenario::Ingest => Op::Ingest,
            Scenario::Create => Op::Create,
            Scenario::BatchCreate => Op::BatchCreate,
            Scenario::Search => Op::Search,
            Scenario::HybridSearch => Op::HybridSearch,
            Scenario::KeywordSearch => Op::KeywordSearch,
            Scenario::McpSearch => Op::McpSearch,
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

pub(crate) fn time_param(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Performs one request; returns the units it carried (entries for ingestion, else 1).
pub(crate) async fn perform(ctx: &Ctx, op: Op, n: u64) -> Result<u64> {
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
        Op::McpSearch => {
            // The `Search` op's queries, as the tool's arguments.
            let i = ctx.counter.fetch_add(1, Ordering::Relaxed);
            let q = format!(
                "what does {} like? ({i})",
                memory_text(i * 31).to_lowercase()
            );
            let call = json!({
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "search_memories",
                    "arguments": {"query": q, "top_k": 5, "mode": "semantic"}},
            });
            let req = c
                .post(format!("{url}/mcp"))
                .bearer_auth(key(&ctx.seeded.memory)?)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .json(&call);
            let resp = req.send().await?;
            let status = resp.status();
            let body: Value = resp.json().await?;
            let refused = body.get("error").is_some()
                || body.pointer("/result/isError") == Some(&Value::Bool(true));
            if !status.is_success() || refused {
                bail!("{} -> {status}: {body}", op.name());
            }
            return Ok(1);
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
                // Semantic, named: the mode the `search` figures (docs/PERFORMANCE.md) were
                // taken with, when it was the default (the default is hybrid now).
                _ => body["search_mode"] = json!("semantic"),
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
