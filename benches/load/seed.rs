//! Seeding a working dir: the tenants, the audit entries and the memories the scenarios read,
//! recorded in `driver.json` so that later runs skip it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::ops::time_param;
use crate::target::Admin;

/// Tenants and keys of a seeded dir.
#[derive(Serialize, Deserialize, Default, Clone)]
pub(crate) struct Seeded {
    pub(crate) audit: Option<TenantKey>,
    pub(crate) audit_entries: u64,
    pub(crate) ingest: Option<TenantKey>,
    pub(crate) memory: Option<TenantKey>,
    pub(crate) memories: u64,
}

#[derive(Serialize, Deserialize, Clone)]
pub(crate) struct TenantKey {
    pub(crate) id: String,
    pub(crate) key: String,
}

pub(crate) const ACTIONS: [&str; 5] = [
    "gateway.chat",
    "gateway.embeddings",
    "rag.query",
    "gateway.completion",
    "gateway.chat.stream",
];
pub(crate) const DAY_MICROS: i64 = 86_400_000_000;
/// Seeded entries span this many days before the seeding moment.
pub(crate) const SEED_SPAN_DAYS: i64 = 20;

pub(crate) fn save(state_file: &Path, seeded: &Seeded) -> Result<()> {
    std::fs::write(state_file, serde_json::to_vec_pretty(seeded)?)?;
    Ok(())
}

/// A gateway-style entry, as the platform would forward it (dated now without `created_at`).
pub(crate) fn gateway_entry(tenant: &str, i: u64, created_at: Option<i64>) -> Value {
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

pub(crate) async fn seed_audit(
    admin: &Admin,
    seeded: &mut Seeded,
    want: u64,
    file: &Path,
) -> Result<()> {
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
pub(crate) fn memory_text(i: u64) -> String {
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

pub(crate) const MEMORY_TYPES: [&str; 3] = ["fact", "rule", "context"];

pub(crate) async fn seed_memories(
    admin: &Admin,
    seeded: &mut Seeded,
    want: u64,
    file: &Path,
) -> Result<()> {
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
