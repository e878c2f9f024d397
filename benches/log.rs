//! The log's hot paths: group-commit append with a real fdatasync per group at 1, 16 and 128
//! concurrent submitters; record encode/decode and chain hashing; verify and replay over
//! 1,000,000 records (and the Merkle tree's rebuild, replay's share for it), and the audit
//! index's page-with-total query over them.

mod fixtures;

use std::time::{Duration, Instant};

use auditmem::log::appender::{Appender, Durability};
use auditmem::log::catch_up::catch_up;
use auditmem::log::record::Record;
use auditmem::log::verify::verify_tree;
use auditmem::log::{open_db, LogReader, LOG_TREE};
use auditmem::projections::audit_index::Filter;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fixtures::mem_keys;

const BIG: u64 = 1_000_000;

fn append(c: &mut Criterion) {
    // As the server runs (src/lib.rs, `disable_transparent_huge_pages`); process-wide, so for
    // every group of this bench.
    auditmem::disable_transparent_huge_pages();
    let mut g = c.benchmark_group("append_fsync");
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for submitters in [1usize, 16, 128] {
        let per = if submitters == 1 {
            200
        } else {
            20_000 / submitters
        };
        let events = (submitters * per) as u64;
        g.throughput(Throughput::Elements(events));
        g.bench_with_input(
            BenchmarkId::from_parameter(submitters),
            &submitters,
            |b, &submitters| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let dir = tempfile::tempdir().expect("tempdir");
                        let db = open_db(dir.path()).expect("open");
                        let projections = fixtures::projections(&db);
                        let (appender, thread) = rt.block_on(async {
                            Appender::start(
                                db.clone(),
                                dir.path(),
                                projections,
                                Durability::Fsync,
                                0,
                            )
                            .expect("start")
                        });
                        let tenants = fixtures::tenant_ids();
                        rt.block_on(
                            appender.append(
                                tenants
                                    .iter()
                                    .map(|t| fixtures::tenant_created(*t))
                                    .collect(),
                            ),
                        )
                        .expect("tenants");
                        let started = Instant::now();
                        rt.block_on(async {
                            let mut tasks = Vec::new();
                            for s in 0..submitters {
                                let a = appender.clone();
                                let t = tenants[s % tenants.len()];
                                tasks.push(tokio::spawn(async move {
                                    for i in 0..per {
                                        a.append(vec![fixtures::audit_event(t, i as u64)])
                                            .await
                                            .expect("append");
                                    }
                                }));
                            }
                            for t in tasks {
                                t.await.expect("task");
                            }
                        });
                        total += started.elapsed();
                        drop(appender);
                        rt.block_on(thread.stop());
                    }
                    total
                });
            },
        );
    }
    g.finish();
}

fn record_codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("record");
    let event = fixtures::audit_event(fixtures::tenant_ids()[0], 1)
        .encode()
        .expect("encode");
    let r = Record::seal(1, 1, [0; 32], event.clone());
    let bytes = r.encode();
    g.throughput(Throughput::Elements(1));
    g.bench_function("seal_and_encode", |b| {
        b.iter(|| Record::seal(7, 1, [1; 32], event.clone()).encode())
    });
    g.bench_function("decode_and_hash", |b| {
        b.iter(|| {
            auditmem::log::record::RecordRef::decode(&bytes)
                .expect("decode")
                .computed_hash()
        })
    });
    g.bench_function("event_encode", |b| {
        b.iter(|| fixtures::audit_event(fixtures::tenant_ids()[0], 1).encode())
    });
    g.finish();
}

fn verify_and_replay(c: &mut Criterion) {
    // The 1,000,000-record log is written lazily, inside the first benchmark that runs, so
    // a filtered run of another group (or a profile of one) neither waits for nor includes it.
    let fixture: std::sync::OnceLock<(tempfile::TempDir, sled::Db)> = std::sync::OnceLock::new();
    let log = || {
        fixture.get_or_init(|| {
            let dir = tempfile::tempdir().expect("tempdir");
            let db = fixtures::write_log(dir.path(), BIG);
            (dir, db)
        })
    };

    let mut g = c.benchmark_group("log_1m");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(BIG + fixtures::TENANTS as u64));
    g.bench_function("verify", |b| {
        let tree = log().1.open_tree(LOG_TREE).expect("tree");
        let head = LogReader::open(&log().1)
            .expect("log")
            .head()
            .expect("head");
        assert_eq!(head.seq, BIG + fixtures::TENANTS as u64);
        // The head expected: verify builds the Merkle tree up to it and checks its hash, as
        // `verify --expect-head` does (without an anchor no root is checked, nor the tree built).
        b.iter(|| {
            let report = verify_tree(&tree, Some(head), &[], None, &|_| {});
            assert!(report.clean());
            report.valid
        })
    });
    // The Merkle tree's share of replay: the tree alone rebuilt from the same records.
    g.bench_function("tlog_rebuild", |b| {
        let (dir, db) = log();
        let dir = dir.path();
        let reader = LogReader::open(db).expect("log");
        b.iter(|| {
            auditmem::tlog::MerkleTree::drop_in(db, dir).expect("drop");
            let tree = auditmem::tlog::MerkleTree::open(db, dir).expect("open");
            tree.catch_up(&reader, None).expect("rebuild")
        })
    });
    g.bench_function("replay", |b| {
        let (dir, db) = log();
        b.iter(|| {
            auditmem::cli::replay::replay(db, dir.path(), spill(dir.path()), mem_keys())
                .expect("replay")
        });
        // Catch-up from a checkpoint is incremental: nothing to do right after a replay.
        let projections = fixtures::projections(db);
        let reader = LogReader::open(db).expect("log");
        assert_eq!(catch_up(&reader, &projections, None).expect("catch up"), 0);
    });
    g.finish();

    // The audit index's answer to a list call: the first page of 20 newest refs and `total`,
    // over one tenant's share of the 1,000,000 entries (without reading the entries, which
    // the log bench and the load driver's `list` cover).
    let db = &log().1;
    if auditmem::projections::Projection::checkpoint(&fixtures::projections(db).audit)
        .expect("checkpoint")
        == 0
    {
        auditmem::cli::replay::replay(db, log().0.path(), spill(log().0.path()), mem_keys())
            .expect("replay");
    }
    let projections = fixtures::projections(db);
    let tenant = fixtures::tenant_ids()[0];
    let all = Filter {
        tenant_id: tenant,
        action: None,
        from: i64::MIN,
        to: i64::MAX,
    };
    let filters = [
        ("page_total", all),
        (
            "page_total_action",
            Filter {
                action: Some("rag.query"),
                ..all
            },
        ),
        (
            "page_total_time_range",
            Filter {
                from: 1_700_000_000_000_000 + 100_000_000,
                to: 1_700_000_000_000_000 + 600_000_000,
                ..all
            },
        ),
    ];
    // As the service opens it: sealed blocks in a file in the data dir, read per query.
    let filed = auditmem::log::open_projections(db, spill(log().0.path()), mem_keys())
        .expect("projections");
    let mut g = c.benchmark_group("audit_index_1m");
    g.throughput(Throughput::Elements(1));
    for (suffix, projections) in [("", &*projections), ("_file", &filed)] {
        for (name, f) in filters {
            let page = projections.audit.page(&f, 0, 20).expect("page");
            assert_eq!(page.items.len(), 20, "{name}{suffix}");
            assert!(page.total > 20, "{name}{suffix}");
            g.bench_function(format!("{name}{suffix}"), |b| {
                b.iter(|| projections.audit.page(&f, 0, 20))
            });
        }
    }
    g.finish();
}

/// Replay's spill settings for a bench dir: the server's defaults.
fn spill(dir: &std::path::Path) -> Option<auditmem::projections::vector_table::Spill> {
    auditmem::log::spill_in(dir, auditmem::projections::vector_table::SPILL_ROWS)
}

/// Memory events carry their 384-dimension vectors, so replay folds them without a model.
const MEMORIES: u64 = 100_000;

fn replay_memories(c: &mut Criterion) {
    let mut g = c.benchmark_group("memories_100k");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(MEMORIES + fixtures::TENANTS as u64));
    g.bench_function("replay", |b| {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = fixtures::write_events(dir.path(), MEMORIES, fixtures::memory_created);
        b.iter(|| {
            auditmem::cli::replay::replay(&db, dir.path(), spill(dir.path()), mem_keys())
                .expect("replay")
        });
        let projections = fixtures::projections(&db);
        let live: usize = fixtures::tenant_ids()
            .iter()
            .map(|t| projections.memories.count(t))
            .sum();
        assert_eq!(live as u64, MEMORIES);
    });
    // The same 100,000 memories in one tenant: its vector table passes the spill size, so the
    // replay also writes its f32 rows to the spill file, as the server's does.
    g.bench_function("replay_one_tenant", |b| {
        let dir = tempfile::tempdir().expect("tempdir");
        let tenant = fixtures::tenant_ids()[0];
        let db = fixtures::write_events(dir.path(), MEMORIES, |_, i| {
            fixtures::memory_created(tenant, i)
        });
        b.iter(|| {
            auditmem::cli::replay::replay(&db, dir.path(), spill(dir.path()), mem_keys())
                .expect("replay")
        });
        let projections = fixtures::projections(&db);
        assert_eq!(projections.memories.count(&tenant) as u64, MEMORIES);
    });
    g.finish();
}

criterion_group!(
    benches,
    append,
    record_codec,
    verify_and_replay,
    replay_memories
);
criterion_main!(benches);
