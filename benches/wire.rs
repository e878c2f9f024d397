//! The hot serialisation paths of the HTTP edge, in process: a page of the audit list, a
//! chunk of export rows (CSV and JSON) and an ingestion body read and checked.
//!
//! ```text
//! cargo bench --bench wire
//! ```

mod fixtures;

use auditmem::api::extract::read;
use auditmem::export::rows;
use auditmem::projections::audit_index::AuditRef;
use auditmem::projections::{AuditEntry, Event};
use auditmem::wire::audit::{AuditLogEntry, AuditLogPage, IngestRequest, ListedEntry};
use auditmem::wire::envelope::AuditOk;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use uuid::Uuid;

/// `n` typical gateway entries with their refs, as the list and the export read them.
fn entries(n: u64) -> Vec<(AuditEntry, AuditRef)> {
    let tenant = fixtures::tenant_ids()[0];
    (0..n)
        .map(|i| {
            let Event::AuditRecorded(rec) = fixtures::audit_event(tenant, i) else {
                unreachable!("the fixture is an audit event")
            };
            let r = AuditRef {
                id: rec.entry.id,
                seq: i + 1,
                tenant_id: tenant,
                created_at: rec.entry.created_at,
                action_key: 1,
                chain_index: i,
                hash: [7; 32],
                prev_hash: [9; 32],
            };
            (rec.entry, r)
        })
        .collect()
}

fn list(c: &mut Criterion) {
    let page: Vec<(AuditEntry, AuditRef)> = entries(100);
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(100));
    // From entries as the handler has them, read from the log (owned), to the answer's bytes.
    g.bench_function("list_page_100", |b| {
        b.iter_batched(
            || page.clone(),
            |page| {
                let logs = page
                    .into_iter()
                    .map(|(e, r)| ListedEntry::new(e, &r, true))
                    .collect();
                serde_json::to_vec(&AuditOk(AuditLogPage {
                    logs,
                    total: 1_000_000,
                    page: 1,
                    page_size: 100,
                    next_cursor: None,
                }))
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn export(c: &mut Criterion) {
    let chunk = entries(4096);
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(chunk.len() as u64));
    g.bench_function("export_csv_4096", |b| {
        b.iter(|| {
            let mut w = rows::csv_writer(Vec::with_capacity(chunk.len() * 400));
            let mut cell = Vec::new();
            for (e, r) in &chunk {
                rows::write_csv_row(&mut w, e, r, true, &mut cell).expect("row");
            }
            w.into_inner().expect("flush")
        })
    });
    g.bench_function("export_json_4096", |b| {
        b.iter(|| {
            let mut buf = Vec::with_capacity(chunk.len() * 400);
            for (i, (e, r)) in chunk.iter().enumerate() {
                if i > 0 {
                    buf.extend_from_slice(b",\n");
                }
                serde_json::to_writer(&mut buf, &AuditLogEntry::exported(e, r, true)).expect("row");
            }
            buf
        })
    });
    g.finish();
}

fn ingest(c: &mut Criterion) {
    let tenant = Uuid::from_u128(1);
    let body: Vec<serde_json::Value> = (0..100)
        .map(|i| {
            serde_json::json!({
                "tenant_id": tenant, "action": "gateway.chat", "http_status": 200,
                "model_id": "gpt-4o-mini", "gateway_id": "gw-eu-1", "ip_address": "10.1.2.3",
                "duration": 812.0, "credits_consumed": 2.0, "balance_consumed_usd": 0.004,
                "tokens": {"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200},
                "metadata": {"team": "search", "i": i},
                "request_body": {"messages": [{"role": "user", "content": "hello"}]},
            })
        })
        .collect();
    let bytes = serde_json::to_vec(&serde_json::json!({ "entries": body })).expect("json");
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Elements(100));
    g.bench_function("ingest_body_100", |b| {
        b.iter(|| {
            let entries = read::<IngestRequest>(true, &bytes).expect("valid");
            entries
                .into_iter()
                .enumerate()
                .map(|(i, e)| {
                    // The service's default --audit-body-limit.
                    e.check(i, Uuid::nil(), 1_800_000_000_000_000, 64 * 1024)
                        .expect("valid")
                })
                .collect::<Vec<_>>()
        })
    });
    g.finish();
}

criterion_group!(benches, list, export, ingest);
criterion_main!(benches);
