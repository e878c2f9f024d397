//! Exact top-k search over 100,000 stored 384-dimension vectors (one tenant), and the
//! in-process embedder's batched throughput when the model is installed.

use std::time::Duration;

use auditmem::projections::vector_table::VectorTable;
use auditmem::projections::MemoryType;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use uuid::Uuid;

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
    let mut t = VectorTable::default();
    let mut x = 42u64;
    for i in 0..N {
        let ty = [MemoryType::Rule, MemoryType::Fact, MemoryType::Context][i % 3];
        t.upsert(
            Uuid::from_u128(i as u128),
            &random_unit(&mut x),
            ty,
            (i % 10) as f32 / 10.0,
        );
    }
    let q = random_unit(&mut x);
    let mut g = c.benchmark_group("vector_search_100k");
    g.throughput(Throughput::Bytes((N * DIM * 4) as u64));
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("exact_top5", |b| b.iter(|| t.search(&q, None, 0.0, 5)));
    g.bench_function("exact_top5_type_filter", |b| {
        b.iter(|| t.search(&q, Some(MemoryType::Fact), 0.0, 5))
    });
    g.finish();
}

fn embed(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let Ok(model) = auditmem::embed::MiniLm::load(&dir) else {
        eprintln!("model not installed (bash .ci/setup): skipping the embedder bench");
        return;
    };
    use auditmem::embed::Embedder;
    let sentences: Vec<String> = (0..64)
        .map(|i| format!("The quick brown fox number {i} jumps over the lazy dog today"))
        .collect();
    let mut g = c.benchmark_group("embed");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(64));
    g.bench_function("minilm_batch_64", |b| {
        b.iter(|| model.embed_batch(&sentences))
    });
    g.finish();
}

criterion_group!(benches, search, embed);
criterion_main!(benches);
