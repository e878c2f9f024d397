//! Exact and quantised-first-pass top-k search over 100,000 stored 384-dimension vectors (one
//! tenant), with the f32 rows on the heap and, as the service keeps a table this large, in the
//! spill file (only the first pass's candidates read back); the first pass's recall@5, and the
//! in-process embedder's batched throughput when the model is installed.

use std::time::Duration;

use auditmem::projections::vector_table::VectorTable;
use auditmem::projections::MemoryType;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use uuid::Uuid;

#[path = "../tests/it/candle_reference.rs"]
mod candle_reference;

const N: usize = 100_000;
const DIM: usize = 384;

fn random_unit(x: &mut u64) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM)
        .map(|_| {
            *x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.into_iter().map(|a| a / n).collect()
}

fn search(c: &mut Criterion) {
    // As the server runs (src/lib.rs, `disable_transparent_huge_pages`).
    auditmem::disable_transparent_huge_pages();
    let spill = tempfile::tempdir().expect("tempdir");
    let mut t = VectorTable::default();
    let mut spilled = VectorTable::spilling_to(spill.path());
    let mut x = 42u64;
    for i in 0..N {
        let ty = [MemoryType::Rule, MemoryType::Fact, MemoryType::Context][i % 3];
        let v = random_unit(&mut x);
        for table in [&mut t, &mut spilled] {
            table
                .upsert(Uuid::from_u128(i as u128), &v, ty, (i % 10) as f32 / 10.0)
                .expect("upsert");
        }
    }
    assert!(spilled.is_spilled());
    let q = random_unit(&mut x);
    let mut g = c.benchmark_group("vector_search_100k");
    g.throughput(Throughput::Bytes((N * DIM * 4) as u64));
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("exact_top5", |b| b.iter(|| t.search(&q, None, 0.0, 5)));
    g.bench_function("exact_top5_type_filter", |b| {
        b.iter(|| t.search(&q, Some(MemoryType::Fact), 0.0, 5))
    });
    g.bench_function("fast_top5", |b| b.iter(|| t.search_fast(&q, None, 0.0, 5)));
    g.bench_function("fast_top5_spilled", |b| {
        b.iter(|| spilled.search_fast(&q, None, 0.0, 5))
    });
    g.finish();

    // Recall@5 of the quantised first pass against exact search, on queries unrelated to the
    // rows (random: their top scores crowd together, the hard case for a first pass).
    // Then each kind timed alone per query, for the percentiles criterion does not give.
    let queries: Vec<Vec<f32>> = (0..200).map(|_| random_unit(&mut x)).collect();
    let (mut found, mut total) = (0usize, 0usize);
    for q in &queries {
        let exact = t.search(q, None, 0.0, 5).expect("search");
        let fast = t.search_fast(q, None, 0.0, 5).expect("search");
        // Rows read back from the spill file give the same hits and scores.
        assert_eq!(spilled.search_fast(q, None, 0.0, 5).expect("search"), fast);
        total += exact.len();
        found += exact.iter().filter(|h| fast.contains(h)).count();
    }
    let time = |f: &dyn Fn(&[f32])| -> Vec<f64> {
        queries
            .iter()
            .map(|q| {
                let t0 = std::time::Instant::now();
                f(q);
                t0.elapsed().as_secs_f64() * 1e3
            })
            .collect()
    };
    let mut fast_ms = time(&|q| {
        let _ = t.search_fast(q, None, 0.0, 5);
    });
    let mut spilled_ms = time(&|q| {
        let _ = spilled.search_fast(q, None, 0.0, 5);
    });
    let mut exact_ms = time(&|q| {
        let _ = t.search(q, None, 0.0, 5);
    });
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    };
    println!(
        "vector_search_100k over 200 random queries: fast recall@5 {found}/{total} = {:.4}; \
         fast p50 {:.2} ms p99 {:.2} ms; fast with spilled rows p50 {:.2} ms p99 {:.2} ms; \
         exact p50 {:.2} ms p99 {:.2} ms",
        found as f64 / total.max(1) as f64,
        pct(&mut fast_ms, 0.5),
        pct(&mut fast_ms, 0.99),
        pct(&mut spilled_ms, 0.5),
        pct(&mut spilled_ms, 0.99),
        pct(&mut exact_ms, 0.5),
        pct(&mut exact_ms, 0.99),
    );
}

/// The in-process embedder (our forward pass) next to candle's `BertModel` on the same
/// weights: a batch of 64 sentences, and one search-sized query.
fn embed(c: &mut Criterion) {
    use auditmem::embed::{Embedder, MiniLm};
    use candle_reference::CandleMiniLm;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let (Ok(ours), Ok(candle)) = (MiniLm::load(&dir), CandleMiniLm::load(&dir)) else {
        eprintln!("model not installed (bash .ci/setup): skipping the embedder bench");
        return;
    };
    let sentences: Vec<String> = (0..64)
        .map(|i| format!("The quick brown fox number {i} jumps over the lazy dog today"))
        .collect();
    let query =
        vec!["Which programming language does the user prefer for backend services?".to_string()];
    let models: [(&str, &dyn Embedder); 2] = [("minilm", &ours), ("candle", &candle)];
    let mut g = c.benchmark_group("embed");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(64));
    for (name, model) in models {
        g.bench_function(format!("{name}_batch_64"), |b| {
            b.iter(|| model.embed_batch(&sentences))
        });
    }
    g.throughput(Throughput::Elements(1));
    for (name, model) in models {
        g.bench_function(format!("{name}_query"), |b| {
            b.iter(|| model.embed_batch(&query))
        });
    }
    g.finish();
}

criterion_group!(benches, search, embed);
criterion_main!(benches);
