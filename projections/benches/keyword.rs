//! BM25 search at 100,000 memories in one tenant's index (docs/SEARCH.md):
//! `cargo bench -p auditmem-projections --bench keyword`.
//!
//! The corpus is synthetic: sentences of 8 to 20 words drawn from a 5,000-word vocabulary
//! with a Zipf-like skew (a few words in many memories, most in few, as in real text), a
//! third of them carrying a code (an order id, an error code, a ticket, a version). Queries
//! are 2 to 5 words of the same distribution, a quarter of them with a code. Before the
//! criterion groups it prints p50/p99 over 2,000 queries per filter, the build rate and the
//! heap bytes per memory, which criterion does not report.

use std::hint::black_box;
use std::time::Instant;

use auditmem_projections::keyword::KeywordIndex;
use criterion::{criterion_group, criterion_main, Criterion};
use uuid::Uuid;

const MEMORIES: usize = 100_000;
const VOCABULARY: usize = 5_000;

/// xorshift64*: deterministic and dependency-free; quality is irrelevant here.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A word index skewed to the small ones: the cube of a uniform draw puts 46% of the draws
    /// in the first tenth of the vocabulary.
    fn word(&mut self) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u * u) * VOCABULARY as f64) as usize
    }
}

/// Word `i` of the vocabulary: syllables, so words look like words and have plausible lengths.
fn word(i: usize) -> String {
    const SYL: [&str; 20] = [
        "ka", "lo", "mer", "tin", "sa", "vor", "pel", "di", "nu", "gra", "shi", "bo", "ten", "ra",
        "quo", "le", "fi", "ston", "mu", "ex",
    ];
    let mut w = String::new();
    let mut n = i + 1;
    while n > 0 {
        w.push_str(SYL[n % SYL.len()]);
        n /= SYL.len();
    }
    w
}

fn code(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => format!("ORD-{:05}", rng.below(100_000)),
        1 => format!("E{:04}", rng.below(10_000)),
        2 => format!("SUP-{:04}", rng.below(10_000)),
        _ => format!("v{}.{}.{}", rng.below(5), rng.below(20), rng.below(20)),
    }
}

fn text(rng: &mut Rng, words: usize, code_one_in: usize) -> String {
    let mut t: Vec<String> = (0..words).map(|_| word(rng.word())).collect();
    if rng.below(code_one_in) == 0 {
        let at = rng.below(t.len() + 1);
        t.insert(at, code(rng));
    }
    t.join(" ")
}

fn corpus() -> Vec<(Uuid, String)> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..MEMORIES)
        .map(|i| {
            let n = 8 + rng.below(13);
            (Uuid::from_u128(i as u128 + 1), text(&mut rng, n, 3))
        })
        .collect()
}

fn queries() -> Vec<String> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    (0..2_000)
        .map(|_| {
            let n = 2 + rng.below(4);
            text(&mut rng, n, 4)
        })
        .collect()
}

fn build(corpus: &[(Uuid, String)]) -> KeywordIndex {
    let mut ix = KeywordIndex::default();
    for (id, t) in corpus {
        ix.upsert(*id, t);
    }
    ix
}

/// The filters: every memory, half (50%), one in a hundred (1%).
fn allow(filter: u128) -> impl Fn(&Uuid) -> bool {
    move |u: &Uuid| u.as_u128().is_multiple_of(filter)
}

fn report(ix: &KeywordIndex, corpus: &[(Uuid, String)], queries: &[String]) {
    let start = Instant::now();
    let built = build(corpus);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "keyword: build {} memories in {:.2} s ({:.0} memories/s); heap {:.1} MiB, {} bytes/memory; {} chars/memory",
        MEMORIES,
        secs,
        MEMORIES as f64 / secs,
        built.heap_bytes() as f64 / (1 << 20) as f64,
        built.heap_bytes() / MEMORIES,
        corpus.iter().map(|c| c.1.len()).sum::<usize>() / MEMORIES,
    );
    // The plural stemmer's index beside it, in the same run: Snowball's cost on a build.
    let start = Instant::now();
    let mut plural = KeywordIndex::with_stemming(true);
    for (id, t) in corpus {
        plural.upsert(*id, t);
    }
    let plural_secs = start.elapsed().as_secs_f64();
    println!(
        "keyword: the same build with the plural stemmer in {plural_secs:.2} s (Snowball {:.2}x)",
        secs / plural_secs
    );
    for (name, filter) in [("all", 1u128), ("50%", 2), ("1%", 100)] {
        let mut times: Vec<f64> = queries
            .iter()
            .map(|q| {
                let t = Instant::now();
                black_box(ix.search(q, 10, allow(filter)));
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let at = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
        println!(
            "keyword: search top 10, allow {name}: p50 {:.0} us, p99 {:.0} us, max {:.0} us",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
}

fn bench(c: &mut Criterion) {
    let corpus = corpus();
    let queries = queries();
    let ix = build(&corpus);
    report(&ix, &corpus, &queries);

    let mut g = c.benchmark_group("keyword");
    g.sample_size(10);
    g.bench_function("build 100k", |b| b.iter(|| black_box(build(&corpus))));
    for (name, filter) in [("all", 1u128), ("50%", 2), ("1%", 100)] {
        let mut i = 0;
        g.bench_function(format!("search 100k top 10, allow {name}"), |b| {
            b.iter(|| {
                i = (i + 1) % queries.len();
                black_box(ix.search(&queries[i], 10, allow(filter)))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
