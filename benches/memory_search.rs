//! Filtered and hybrid memory search through the real projection: a [`Memories`] on a temp
//! sled db, fed `MemoryCreated` events (random unit 384-d vectors, every memory with a
//! `user_id`), searched with no filter and with a `user_id` filter matching exactly 1% and 50%
//! of a tenant's memories: 100,000 memories in one tenant (the int8 first pass, f32 rows
//! spilled as the server keeps them) and 10,000 in another (the exact scan). Criterion's means,
//! then each case timed alone per query over [`QUERIES`] random queries for p50/p99, and the
//! hybrid search's in-process part (semantic top 50 + BM25 top 50, fused; no embedding).
//!
//! ```text
//! cargo bench --bench memory_search
//! ```

use std::time::{Duration, Instant};

use auditmem::projections::keyword::Fusion;
use auditmem::projections::memories::filter::{Filter, FilterField, FilterOp, Operand};
use auditmem::projections::memories::{Memories, MemoryQuery, SearchMode};
use auditmem::projections::vector_table::Spill;
use auditmem::projections::{
    vector_to_bytes, Applied, Event, MemoryCreated, MemoryExtra, MemoryType, Projection,
};
use criterion::{criterion_group, criterion_main, Criterion};
use uuid::Uuid;

const DIM: usize = 384;
const QUERIES: usize = 300;

struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..DIM)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / n).collect()
    }
}

/// `rare` for every 100th memory (1%), `half` for the odd ones (50%), `other` else.
fn user_of(i: usize) -> &'static str {
    if i.is_multiple_of(100) {
        "rare"
    } else if i % 2 == 1 {
        "half"
    } else {
        "other"
    }
}

/// Plausible sentences, as the load driver seeds (a BM25 index over them).
fn text_of(i: usize) -> String {
    const WHO: [&str; 4] = ["The user", "Our customer", "The analyst", "The designer"];
    const WHAT: [&str; 6] = [
        "prefers concise answers with code examples",
        "works mostly with Rust and PostgreSQL",
        "wants weekly summaries of open incidents",
        "is based in Berlin and works in CET",
        "needs invoices in EUR with VAT shown",
        "likes hiking in the Alps on weekends",
    ];
    format!("{} {} for project {}.", WHO[i % 4], WHAT[i / 4 % 6], i / 24)
}

fn user_filter(user: &str) -> Filter {
    Filter::Cond {
        field: FilterField::UserId,
        op: FilterOp::Eq,
        operand: Operand::One(serde_json::Value::String(user.into())),
    }
}

/// The same memories as [`user_filter`] by their metadata `team`, under `importance >= 0`
/// (which every memory passes but no index answers), so the filter is indexed only by its
/// metadata part.
fn team_filter(team: &str) -> Filter {
    Filter::And(vec![
        Filter::Cond {
            field: FilterField::Importance,
            op: FilterOp::Gte,
            operand: Operand::One(0.into()),
        },
        Filter::Cond {
            field: FilterField::Metadata("team".into()),
            op: FilterOp::Eq,
            operand: Operand::One(serde_json::Value::String(team.into())),
        },
    ])
}

/// A filter no index narrows (`NOT` of the other teams), matching the same 1% of memories:
/// the scan asking the filter about every row that would enter its best.
fn unindexed_filter() -> Filter {
    Filter::Not(Box::new(Filter::Cond {
        field: FilterField::Metadata("team".into()),
        op: FilterOp::In,
        operand: Operand::Many(vec!["half".into(), "other".into()]),
    }))
}

/// Creates `n` memories in `tenant`, seqs from `*seq + 1` on.
fn feed(m: &Memories, tenant: Uuid, n: usize, seq: &mut u64, rng: &mut Rng) {
    let base = tenant.as_u128() << 32;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let events: Vec<Event> = chunk
            .iter()
            .map(|&i| {
                Event::MemoryCreated(MemoryCreated {
                    memory_id: Uuid::from_u128(base + i as u128),
                    tenant_id: tenant,
                    content: text_of(i),
                    memory_type: [MemoryType::Fact, MemoryType::Rule, MemoryType::Context][i % 3],
                    importance: (i % 10) as f64 / 10.0,
                    created_at: 1_700_000_000_000_000 + i as i64,
                    model: "all-MiniLM-L6-v2".into(),
                    vector: vector_to_bytes(&rng.unit()),
                    extra: Some(MemoryExtra {
                        user_id: Some(user_of(i).into()),
                        metadata: Some(format!(r#"{{"team":"{}"}}"#, user_of(i))),
                        ..MemoryExtra::default()
                    }),
                    sealed: None,
                })
            })
            .collect();
        let applied: Vec<Applied<'_>> = events
            .iter()
            .map(|event| {
                *seq += 1;
                Applied {
                    seq: *seq,
                    ts_micros: 0,
                    event,
                    prepared: None,
                }
            })
            .collect();
        m.apply(&applied).expect("apply");
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

fn search(c: &mut Criterion) {
    // As the server runs (src/lib.rs, `disable_transparent_huge_pages`).
    auditmem::disable_transparent_huge_pages();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path().join("db")).expect("open");
    // The server's default: a tenant's f32 rows go to a file from 20,000 rows on.
    let spill = Spill {
        dir: dir.path().to_path_buf(),
        rows: 20_000,
    };
    let m = Memories::open(&db, &|_| Ok(None), Some(spill), ring()).expect("open");
    let (big, small) = (Uuid::from_u128(0x100), Uuid::from_u128(0x200));
    let mut rng = Rng(42);
    let mut seq = 0;
    let t0 = Instant::now();
    feed(&m, big, 100_000, &mut seq, &mut rng);
    feed(&m, small, 10_000, &mut seq, &mut rng);
    eprintln!(
        "fed 110,000 memories in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!((m.count(&big), m.count(&small)), (100_000, 10_000));

    let (rare, half) = (user_filter("rare"), user_filter("half"));
    let (rare_team, unindexed) = (team_filter("rare"), unindexed_filter());
    // Name, filter, memories it matches of 100,000, the user of every one of them.
    let cases: [(&str, Option<&Filter>, usize, Option<&str>); 5] = [
        ("no_filter", None, 100_000, None),
        ("filter_1pct", Some(&rare), 1_000, Some("rare")),
        ("filter_50pct", Some(&half), 50_000, Some("half")),
        (
            "filter_1pct_metadata",
            Some(&rare_team),
            1_000,
            Some("rare"),
        ),
        (
            "filter_1pct_unindexed",
            Some(&unindexed),
            1_000,
            Some("rare"),
        ),
    ];
    fn query(filter: Option<&Filter>) -> MemoryQuery<'_> {
        MemoryQuery {
            memory_type: None,
            filter,
            include_superseded: false,
        }
    }
    // The filters match what they should, and every hit of a filtered search is one of them.
    let q = rng.unit();
    for (tenant, n) in [(big, 100_000), (small, 10_000)] {
        for (name, filter, matching, user) in cases {
            let (total, _) = m.list(&tenant, query(filter), 0, 1).expect("list");
            assert_eq!(total, matching * n / 100_000, "{name}");
            let hits = m
                .search(&tenant, &q, query(filter), 0.0, 5)
                .expect("search");
            assert_eq!(hits.len(), 5, "{name}");
            if let Some(user) = user {
                for (v, _) in &hits {
                    assert_eq!(
                        v.extra.as_ref().and_then(|x| x.user_id.as_deref()),
                        Some(user),
                        "{name}"
                    );
                }
            }
        }
    }

    for (tenant, group) in [(big, "memory_search_100k"), (small, "memory_search_10k")] {
        let mut g = c.benchmark_group(group);
        g.measurement_time(Duration::from_secs(3));
        g.warm_up_time(Duration::from_secs(1));
        for (name, filter, _, _) in cases {
            g.bench_function(format!("top5_{name}"), |b| {
                b.iter(|| m.search(&tenant, &q, query(filter), 0.0, 5))
            });
        }
        g.finish();
    }

    // Each case timed alone per query, for the percentiles criterion does not give.
    let queries: Vec<Vec<f32>> = (0..QUERIES).map(|_| rng.unit()).collect();
    let texts: Vec<String> = (0..QUERIES)
        .map(|i| {
            format!(
                "what does {} like?",
                text_of(i * 31).to_lowercase().trim_end_matches('.')
            )
        })
        .collect();
    for (tenant, label) in [(big, "100k"), (small, "10k")] {
        for (name, filter, _, _) in cases {
            let mut ms: Vec<f64> = queries
                .iter()
                .map(|q| {
                    let t0 = Instant::now();
                    let hits = m.search(&tenant, q, query(filter), 0.0, 5).expect("search");
                    let e = t0.elapsed().as_secs_f64() * 1e3;
                    assert_eq!(hits.len(), 5);
                    e
                })
                .collect();
            println!(
                "memory_search_{label} top5_{name} over {QUERIES} random queries: p50 {:.2} ms \
                 p99 {:.2} ms",
                pct(&mut ms, 0.5),
                pct(&mut ms, 0.99)
            );
        }
        for (mode, mode_name) in [
            (SearchMode::Hybrid, "hybrid"),
            (SearchMode::Keyword, "keyword"),
        ] {
            let mut ms: Vec<f64> = queries
                .iter()
                .zip(&texts)
                .map(|(q, text)| {
                    let t0 = Instant::now();
                    let found = m
                        .search_in_mode(
                            &tenant,
                            text,
                            q,
                            query(None),
                            0.0,
                            5,
                            mode,
                            &Fusion::default(),
                        )
                        .expect("search");
                    let e = t0.elapsed().as_secs_f64() * 1e3;
                    assert!(!found.is_empty() || mode == SearchMode::Keyword);
                    e
                })
                .collect();
            println!(
                "memory_search_{label} {mode_name} top5 (no embedding) over {QUERIES} queries: \
                 p50 {:.2} ms p99 {:.2} ms",
                pct(&mut ms, 0.5),
                pct(&mut ms, 0.99)
            );
        }
    }
}

criterion_group!(benches, search);
criterion_main!(benches);

/// Memories sealed by these benches' events: none (they are built in the clear).
fn ring() -> std::sync::Arc<dyn auditmem_projections::seal::Keyring> {
    std::sync::Arc::new(auditmem_projections::seal::MemoryKeyring::default())
}
