//! Tests of the in-process all-MiniLM-L6-v2 embedder against the real model.
//! The model comes from `bash .ci/setup`; its dir is AUDITMEM_MODEL_DIR or
//! `models/all-MiniLM-L6-v2` under the crate root.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use auditmem::embed::{cosine, EmbedService, Embedder, MiniLm};

use crate::candle_reference::CandleMiniLm;

fn model() -> Arc<MiniLm> {
    static MODEL: OnceLock<Arc<MiniLm>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = std::env::var_os("AUDITMEM_MODEL_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("models/all-MiniLM-L6-v2"));
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
            match MiniLm::load(&dir) {
                Ok(m) => Arc::new(m),
                Err(e) => panic!("{e}"),
            }
        })
        .clone()
}

fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
    let texts: Vec<String> = texts.iter().map(|s| s.to_string()).collect();
    model().embed_batch(&texts).unwrap()
}

#[test]
fn cosine_matches_sentence_transformers() {
    let v = embed(&[
        "The cat sits on the mat",
        "A cat is sitting on a rug",
        "Quarterly revenue grew 5%",
    ]);
    let similar = cosine(&v[0], &v[1]);
    let unrelated = cosine(&v[0], &v[2]);
    println!("cosine(cat/mat, cat/rug) = {similar:.6}; cosine(cat/mat, revenue) = {unrelated:.6}");
    assert!((similar - 0.7695).abs() < 1e-3, "similar = {similar}");
    assert!(
        (unrelated - -0.0179).abs() < 1e-3,
        "unrelated = {unrelated}"
    );
}

#[test]
fn vectors_have_384_dims_and_unit_norm() {
    let m = model();
    assert_eq!(m.dim(), 384);
    assert_eq!(m.model_id(), "all-MiniLM-L6-v2");
    for v in embed(&["hello", "", "A somewhat longer sentence about nothing."]) {
        assert_eq!(v.len(), 384);
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm = {norm}");
    }
}

#[test]
fn batching_does_not_leak_padding_into_the_mean() {
    let texts = [
        "Hi",
        "The cat sits on the mat",
        "I prefer dark mode in every editor I use, and I never want light themes.",
        "ok",
        "Deployment deadlines for the migration of the billing system to the new \
         cluster are set for Friday, and the on-call team must be told in advance.",
    ];
    let batched = embed(&texts);
    for (text, b) in texts.iter().zip(&batched) {
        let alone = embed(&[text]).remove(0);
        let max_diff = alone
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(max_diff < 1e-4, "{text:?}: max diff {max_diff}");
    }
}

#[test]
fn input_is_truncated_at_256_tokens() {
    let long = "word ".repeat(300);
    let v = embed(&[&long, &format!("{long} completely different ending")]);
    assert!((cosine(&v[0], &v[1]) - 1.0).abs() < 1e-5);
    let short = "word ".repeat(50);
    let w = embed(&[&short, &format!("{short} completely different ending")]);
    assert!(cosine(&w[0], &w[1]) < 0.999);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_batches_32_concurrent_callers_without_changing_vectors() {
    let svc = EmbedService::new(model()).unwrap();
    assert_eq!(svc.dim(), 384);
    assert_eq!(svc.model_id(), "all-MiniLM-L6-v2");
    let texts: Vec<String> = (0..32)
        .map(|i| format!("Caller number {i} says {}", "something ".repeat(i % 7)))
        .collect();
    let direct = model().embed_batch(&texts).unwrap();
    let mut handles = Vec::new();
    for t in texts.clone() {
        let svc = svc.clone();
        handles.push(tokio::spawn(async move { svc.embed(vec![t]).await }));
    }
    for (h, want) in handles.into_iter().zip(&direct) {
        let got = h.await.unwrap().unwrap().remove(0);
        let max_diff = got
            .iter()
            .zip(want)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(max_diff < 1e-4, "max diff {max_diff}");
    }
}

#[tokio::test]
async fn service_cache_returns_identical_vectors() {
    let svc = EmbedService::new(model()).unwrap();
    let t = "I am allergic to peanuts".to_string();
    let first = svc.embed_one(t.clone()).await.unwrap();
    let second = svc.embed(vec![t.clone(), t]).await.unwrap();
    assert_eq!(second[0], first);
    assert_eq!(second[1], first);
}

/// Prints throughput; run with
/// `cargo test --release --test it embed_model::throughput_report -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput_report() {
    let m = model();
    let texts: Vec<String> = (0..64)
        .map(|i| format!("The team reviewed item {i} and agreed to ship it next week"))
        .collect();
    m.embed_batch(&texts).unwrap();
    let rounds = 5;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        m.embed_batch(&texts).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "throughput: {:.1} sentences/s (batch of 64, {rounds} rounds, {secs:.2}s)",
        (64 * rounds) as f64 / secs
    );
}

/// The service's forward pass (our kernels, unpadded) against candle's
/// `BertModel` (padded, masked) on the same weights: every component of every
/// vector within 1e-5, alone and in a mixed-length batch, including a text
/// past the 256-token truncation.
#[test]
fn own_forward_pass_equals_candles() {
    let dir = std::env::var_os("AUDITMEM_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("models/all-MiniLM-L6-v2"));
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    let reference = match CandleMiniLm::load(&dir) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    };
    let long = "the audit log keeps every call and its answer ".repeat(40);
    let texts: Vec<String> = [
        "The cat sits on the mat",
        "",
        "I prefer dark mode in every editor I use, and I never want light themes.",
        "ok",
        long.as_str(),
        "Ünïcödé, emoji 🚀 and numbers 12345 mixed together.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let ours = model().embed_batch(&texts).unwrap();
    let theirs = reference.embed_batch(&texts).unwrap();
    assert_eq!(ours.len(), texts.len());
    for ((text, a), b) in texts.iter().zip(&ours).zip(&theirs) {
        assert_eq!(a.len(), 384);
        let max_diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(max_diff < 1e-5, "{:.40}: max diff {max_diff}", text);
    }
}
