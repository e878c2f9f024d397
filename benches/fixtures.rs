//! Shared fixtures of the benches: realistic events and a populated log.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use auditmem::log::record::{Chunker, Record};
use auditmem::log::{open_db_with_cache, LOG_TREE};
use auditmem::projections::{AuditEntry, AuditRecorded, Event, Plan, Projections, TenantCreated};
use serde_json::json;
use uuid::Uuid;

pub const TENANTS: usize = 10;

pub fn tenant_ids() -> Vec<Uuid> {
    (0..TENANTS)
        .map(|i| Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i as u128))
        .collect()
}

pub fn tenant_created(id: Uuid) -> Event {
    Event::TenantCreated(TenantCreated {
        tenant_id: id,
        name: "bench".into(),
        plan: Plan::Business,
        subscription_active: true,
        credits: 0.0,
        created_at: 1_700_000_000_000_000,
    })
}

/// An audit event of a typical size (~250 bytes encoded, ~340 as a stored record), like a
/// gateway entry.
pub fn audit_event(tenant: Uuid, i: u64) -> Event {
    Event::AuditRecorded(Box::new(AuditRecorded {
        tenant_id: tenant,
        entry: AuditEntry {
            id: Uuid::now_v7(),
            action: if i.is_multiple_of(3) {
                "rag.query".into()
            } else {
                "gateway.chat".into()
            },
            model_id: Some("gpt-4o-mini".into()),
            project_id: Some("proj-42".into()),
            gateway_id: Some("gw-eu-1".into()),
            ip_address: Some("10.1.2.3".into()),
            user_agent: Some("auditmem-bench/1.0".into()),
            http_status: 200,
            is_success: true,
            is_cache_hit: false,
            error_code: None,
            error_msg: None,
            duration: Some(123.0),
            credits_consumed: 1.0,
            balance_consumed_usd: 0.002,
            tokens: None,
            metadata: Some(json!({"team": "search", "i": i})),
            created_at: 1_700_000_000_000_000 + i as i64 * 1000,
            detail_hash: Some([7; 32]),
        },
        detail: auditmem::projections::AuditDetail {
            request_body: Some(
                json!({"messages": [{"role": "user", "content": "What is the capital of France?"}]}),
            ),
            ..Default::default()
        },
        sealed: None,
        sealed_detail: None,
    }))
}

/// Writes `n` audit records (plus tenant creations) straight into a `log` tree.
pub fn write_log(dir: &Path, n: u64) -> sled::Db {
    write_events(dir, n, audit_event)
}

/// A `MemoryCreated` event with a normalised 384-dimension vector, as the API appends it.
pub fn memory_created(tenant: Uuid, i: u64) -> Event {
    use auditmem::projections::{vector_to_bytes, MemoryCreated, MemoryType};
    // A cheap deterministic pseudo-random vector (xorshift), normalised like an embedding.
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..384)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let norm = v
        .iter()
        .map(|a| a * a)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    v.iter_mut().for_each(|a| *a /= norm);
    Event::MemoryCreated(MemoryCreated {
        memory_id: Uuid::from_u128(0x0190_0000_0000_7000_9000_0000_0000_0000 + i as u128),
        tenant_id: tenant,
        content: format!("The user prefers short answers about topic number {i}."),
        memory_type: <MemoryType as strum::VariantArray>::VARIANTS[i as usize % 3],
        importance: 0.5,
        created_at: 1_700_000_000_000_000 + i as i64,
        model: "all-MiniLM-L6-v2".into(),
        vector: vector_to_bytes(&v),
        extra: None,
        sealed: None,
    })
}

/// Writes tenant creations and then `events(i)` for `i in 0..n` into a `log` tree, sealed and
/// chained exactly as the appender does, without folding projections.
pub fn write_events(dir: &Path, n: u64, events: impl Fn(Uuid, u64) -> Event) -> sled::Db {
    let db = open_db_with_cache(dir, 2 * 1024 * 1024 * 1024).expect("open");
    let tree = db.open_tree(LOG_TREE).expect("tree");
    let tenants = tenant_ids();
    let mut prev = [0u8; 32];
    let mut seq = 0u64;
    let mut chunks = Chunker::default();
    let mut push = |event: Event, chunks: &mut Chunker| {
        seq += 1;
        let r = Record::seal(
            seq,
            1_700_000_000_000_000 + seq as i64,
            prev,
            event.encode().expect("encode"),
        );
        prev = r.hash;
        chunks.push(seq, r.encode());
    };
    // Groups as the appender writes them under load: chunks of up to 32 records.
    let write = |chunks: Chunker| tree.apply_batch(chunks.into_batch()).expect("batch");
    for t in &tenants {
        push(tenant_created(*t), &mut chunks);
    }
    for i in 0..n {
        push(events(tenants[i as usize % TENANTS], i), &mut chunks);
        if i % 10_000 == 9_999 {
            write(std::mem::take(&mut chunks));
        }
    }
    write(chunks);
    db.flush().expect("flush");
    db
}

pub fn projections(db: &sled::Db) -> Arc<Projections> {
    Arc::new(auditmem::log::open_projections(db, None, mem_keys()).expect("projections"))
}

/// A keyring in memory: the benches measure the log and the projections, not key files.
pub fn mem_keys() -> Arc<dyn auditmem::projections::seal::Keyring> {
    Arc::new(auditmem::projections::seal::MemoryKeyring::default())
}
