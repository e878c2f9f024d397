//! The transparency log at 1,000,000 and 10,000,000 leaves (docs/PERFORMANCE.md,
//! "Transparency proofs"): appending leaves, the tree's storage per record, inclusion and
//! consistency proof generation (p50/p99 over random leaves), offline verification, and proof
//! sizes. A plain program, not criterion: the targets are tail latencies at sizes that take a
//! while to build, measured once per size.
//!
//! `cargo bench --bench tlog` (sizes: `AUDITMEM_TLOG_SIZES=1000000,10000000`, the default).

use std::time::{Duration, Instant};

use auditmem::tlog::{leaf_hash, note, MerkleTree};
use ed25519_dalek::SigningKey;
use rand::{Rng, SeedableRng};

const BATCH: usize = 4096;
const SAMPLES: usize = 20_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(name: &str, mut times: Vec<Duration>) {
    times.sort_unstable();
    println!(
        "  {name:<34} p50 {:>8.1} µs   p99 {:>8.1} µs   max {:>8.1} µs",
        percentile(&times, 0.50).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e6,
    );
}

fn record_hash(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let sizes: Vec<u64> = std::env::var("AUDITMEM_TLOG_SIZES")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(6962);
    for n in sizes {
        println!("tree of {n} leaves");
        let dir = tempfile::tempdir().expect("tempdir");
        let db = auditmem::log::open_db(dir.path()).expect("open");
        let tree = MerkleTree::open(&db, dir.path()).expect("tree");
        let started = Instant::now();
        let mut at = 1u64;
        while at <= n {
            let count = BATCH.min((n - at + 1) as usize);
            let hashes: Vec<[u8; 32]> = (at..at + count as u64).map(record_hash).collect();
            tree.append(at, &hashes).expect("append");
            at += count as u64;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "  append (batches of {BATCH})           {:.2} s, {:.0} leaves/s, {:.2} µs a leaf",
            secs,
            n as f64 / secs,
            secs * 1e6 / n as f64
        );
        tree.sync().expect("sync");
        let files = std::fs::read_dir(dir.path().join(auditmem::tlog::DIR)).expect("tiles");
        let disk: u64 = files
            .map(|f| f.expect("entry").metadata().expect("metadata").len())
            .sum();
        println!(
            "  storage                            {} stored tiles, {:.1} bytes a record on disk (the tile files)",
            disk / 8192,
            disk as f64 / n as f64
        );

        let root = tree.root(n).expect("root");
        let key = SigningKey::from_bytes(&[7; 32]);
        let signer = note::signer("bench.example/log", &key).expect("signer");
        let signed = note::sign(&signer, n, &root).expect("sign");
        let vkey = note::verifier_key("bench.example/log", &key.verifying_key());

        let mut gen = Vec::with_capacity(SAMPLES);
        let mut check = Vec::with_capacity(SAMPLES);
        let mut open = Vec::with_capacity(SAMPLES / 10);
        let mut longest = 0usize;
        for i in 0..SAMPLES {
            let leaf = rng.gen_range(0..n);
            let t = Instant::now();
            let proof = tree.inclusion(leaf, n).expect("proof");
            gen.push(t.elapsed());
            longest = longest.max(proof.len());
            let h = leaf_hash(leaf + 1, &record_hash(leaf + 1));
            let t = Instant::now();
            tlog_tiles::check_record(&proof, n, root, leaf, h).expect("verifies");
            check.push(t.elapsed());
            if i % 10 == 0 {
                let t = Instant::now();
                let opened = note::open(signed.as_bytes(), &vkey, Vec::new(), 0).expect("note");
                open.push(t.elapsed());
                assert_eq!(opened.root, root);
            }
        }
        report("inclusion proof (generate)", gen);
        report("inclusion proof (check path)", check);
        report("checkpoint note (check signature)", open);
        println!(
            "  inclusion proof size               {longest} hashes, {} bytes at most",
            longest * 32
        );
        let mut cons = Vec::with_capacity(SAMPLES / 4);
        let mut longest = 0usize;
        for _ in 0..SAMPLES / 4 {
            let from = rng.gen_range(1..n);
            let t = Instant::now();
            let proof = tree.consistency(from, n).expect("consistency");
            cons.push(t.elapsed());
            longest = longest.max(proof.len());
        }
        report("consistency proof (generate)", cons);
        println!(
            "  consistency proof size             {longest} hashes, {} bytes at most",
            longest * 32
        );
        let t = Instant::now();
        let again = tree.root(n).expect("root");
        println!(
            "  root of the whole tree             {:.1} µs",
            t.elapsed().as_secs_f64() * 1e6
        );
        assert_eq!(again, root);
    }
}
