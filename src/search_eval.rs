//! The retrieval eval of hybrid search (docs/SEARCH.md): `cargo test --lib search_eval --
//! --nocapture`.
//!
//! On the labelled set in `tests/data/retrieval` (memories, and queries of kind `paraphrase`,
//! sharing no token with their memory, or `exact`, naming a code, id or name), it ranks every
//! query three ways and prints recall@1 and recall@5 per mode and kind:
//! - `semantic`: the in-process MiniLM embeddings in a [`VectorTable`] searched as
//!   `POST /v1/memories/search` does (`search_fast`, `min_similarity` 0, every memory at the
//!   default importance 0.5, so the order is the cosine's);
//! - `keyword`: [`KeywordIndex`] (BM25);
//! - `hybrid`: [`fuse`] of the top [`DEPTH`] of each, with the service's fusion and with the
//!   one this set alone would choose.
//!
//! Recall@k of a query is the share of its relevant memories in the top k, out of at most k
//! (so a query with two relevant memories scores 1 at k = 1 when either is first).
//!
//! The set was written knowing the tokenizer: the figures are optimistic for other data
//! (docs/SEARCH.md says so). The service's fusion is tuned on LoCoMo (`locomo_ablation`).

use std::collections::BTreeMap;
use std::path::Path;

use auditmem_projections::keyword::{fuse, tokenize, Fusion, KeywordIndex};
use auditmem_projections::vector_table::VectorTable;
use auditmem_projections::MemoryType;
use serde::Deserialize;
use uuid::Uuid;

use crate::embed::{Embedder, MiniLm};

/// How deep each ranking goes into the fusion: the lead's API should fuse the same depth.
pub(crate) const DEPTH: usize = 50;

/// The fusion this set alone would choose: the paper's k and equal weights, with keyword hits
/// covering under 70% of the query's weight left out. At that share k and the weights change
/// nothing on this set; lower shares let incidental matches through and cost paraphrases up
/// to 27 points of recall@1 (the grid printed below). The service's default is not this one
/// but [`Fusion::default`], chosen on LoCoMo's development half (`locomo_ablation`), which
/// keeps this set's recall@5 and not its paraphrases' recall@1 (docs/SEARCH.md).
const OWN_SET: Fusion = Fusion {
    k: 60.0,
    semantic_weight: 1.0,
    keyword_weight: 1.0,
    keyword_min_share: 0.7,
};

/// The service's fusion, as `locomo_ablation` chose it.
const SERVICE: Fusion = Fusion {
    k: 2.0,
    semantic_weight: 1.0,
    keyword_weight: 1.5,
    keyword_min_share: 0.3,
};

/// Reciprocal rank fusion as first proposed: every keyword hit fused.
const PLAIN: Fusion = Fusion {
    k: 60.0,
    semantic_weight: 1.0,
    keyword_weight: 1.0,
    keyword_min_share: 0.0,
};

#[derive(Deserialize)]
struct Memory {
    id: String,
    content: String,
}

#[derive(Deserialize)]
struct Query {
    id: String,
    kind: String,
    query: String,
    relevant: Vec<String>,
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1))
        })
        .collect()
}

fn token_set(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    tokenize::tokens(text, true, |t| {
        out.insert(t.to_string());
    });
    out
}

struct Set {
    memories: Vec<Memory>,
    queries: Vec<Query>,
    /// Memory id in the set -> its uuid in the indexes.
    uuids: BTreeMap<String, Uuid>,
}

fn load_set() -> Set {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/retrieval");
    let memories: Vec<Memory> = read_jsonl(&dir.join("memories.jsonl"));
    let queries: Vec<Query> = read_jsonl(&dir.join("queries.jsonl"));
    let uuids: BTreeMap<String, Uuid> = memories
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.clone(), Uuid::from_u128(i as u128 + 1)))
        .collect();
    assert_eq!(uuids.len(), memories.len(), "memory ids are unique");
    Set {
        memories,
        queries,
        uuids,
    }
}

/// Fails on a set that does not say what it claims: unknown ids, unknown kinds, and a
/// paraphrase sharing a token (under the index's own tokenizer, stop words excluded) with a
/// memory it is relevant to.
fn check_set(set: &Set) -> Vec<String> {
    let mut errors = Vec::new();
    let content: BTreeMap<&str, &str> = set
        .memories
        .iter()
        .map(|m| (m.id.as_str(), m.content.as_str()))
        .collect();
    for q in &set.queries {
        if q.kind != "paraphrase" && q.kind != "exact" {
            errors.push(format!("{}: unknown kind {:?}", q.id, q.kind));
        }
        if q.relevant.is_empty() {
            errors.push(format!("{}: no relevant memory", q.id));
        }
        for r in &q.relevant {
            let Some(text) = content.get(r.as_str()) else {
                errors.push(format!("{}: unknown memory {r}", q.id));
                continue;
            };
            if q.kind == "paraphrase" {
                let shared: Vec<String> = token_set(&q.query)
                    .intersection(&token_set(text))
                    .cloned()
                    .collect();
                if !shared.is_empty() {
                    errors.push(format!("{}: shares {shared:?} with {r}", q.id));
                }
            }
        }
    }
    errors
}

fn recall_at(ranked: &[Uuid], relevant: &[Uuid], k: usize) -> f64 {
    let found = ranked
        .iter()
        .take(k)
        .filter(|u| relevant.contains(u))
        .count();
    found as f64 / relevant.len().min(k) as f64
}

/// Every query's three rankings (semantic, keyword with and without stemming) and relevant
/// uuids, and its kind.
struct Ranked {
    kind: String,
    relevant: Vec<Uuid>,
    semantic: Vec<Uuid>,
    keyword: Vec<Uuid>,
    keyword_unstemmed: Vec<Uuid>,
    /// The keyword hits with their scores, and the query's yardstick, for the gated fusion.
    keyword_hits: Vec<(Uuid, f32)>,
    query_weight: f32,
}

fn rank_all(set: &Set) -> Vec<Ranked> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let model = MiniLm::load(&dir).unwrap_or_else(|e| panic!("{e} (run bash .ci/setup)"));
    let texts: Vec<String> = set.memories.iter().map(|m| m.content.clone()).collect();
    let vectors = model.embed_batch(&texts).expect("embedding the memories");
    let mut table = VectorTable::default();
    let mut keyword = KeywordIndex::default();
    let mut unstemmed = KeywordIndex::with_stemming(false);
    for (m, v) in set.memories.iter().zip(&vectors) {
        let id = set.uuids[&m.id];
        assert!(table
            .upsert(
                id,
                v,
                MemoryType::Fact,
                crate::wire::memory::DEFAULT_IMPORTANCE as f32
            )
            .expect("an in-memory table"));
        keyword.upsert(id, &m.content);
        unstemmed.upsert(id, &m.content);
    }
    let qtexts: Vec<String> = set.queries.iter().map(|q| q.query.clone()).collect();
    let qvectors = model.embed_batch(&qtexts).expect("embedding the queries");
    set.queries
        .iter()
        .zip(&qvectors)
        .map(|(q, v)| {
            let keyword_hits = keyword.search(&q.query, DEPTH, |_| true);
            Ranked {
                kind: q.kind.clone(),
                relevant: q.relevant.iter().map(|r| set.uuids[r]).collect(),
                semantic: table
                    .search_fast(v, None, 0.0, DEPTH)
                    .expect("an in-memory table")
                    .into_iter()
                    .map(|h| h.id)
                    .collect(),
                keyword: ids(keyword_hits.clone()),
                keyword_unstemmed: ids(unstemmed.search(&q.query, DEPTH, |_| true)),
                query_weight: keyword.query_weight(&q.query),
                keyword_hits,
            }
        })
        .collect()
}

fn ids(hits: Vec<(Uuid, f32)>) -> Vec<Uuid> {
    hits.into_iter().map(|h| h.0).collect()
}

/// Mean recall@1 and @5 of `rank` over the queries of `kind`, in percent.
fn score(ranked: &[Ranked], kind: &str, rank: impl Fn(&Ranked) -> Vec<Uuid>) -> (f64, f64) {
    let of_kind: Vec<&Ranked> = ranked.iter().filter(|r| r.kind == kind).collect();
    let (mut r1, mut r5) = (0.0, 0.0);
    for r in &of_kind {
        let list = rank(r);
        r1 += recall_at(&list, &r.relevant, 1);
        r5 += recall_at(&list, &r.relevant, 5);
    }
    let n = of_kind.len() as f64;
    (100.0 * r1 / n, 100.0 * r5 / n)
}

/// What the service's hybrid mode does with the two rankings.
fn hybrid(r: &Ranked, f: &Fusion) -> Vec<Uuid> {
    let keyword = f.keyword_ranking(&r.keyword_hits, r.query_weight);
    ids(fuse(&r.semantic, &keyword, f))
}

#[test]
fn the_set_is_what_it_claims() {
    let set = load_set();
    assert_eq!(check_set(&set), Vec::<String>::new());
    let count = |kind: &str| set.queries.iter().filter(|q| q.kind == kind).count();
    assert!(set.memories.len() >= 300, "{}", set.memories.len());
    assert!(set.queries.len() >= 150, "{}", set.queries.len());
    assert!(count("paraphrase") >= 75 && count("exact") >= 75);
}

#[test]
fn the_check_catches_a_paraphrase_sharing_a_word() {
    let mut set = load_set();
    let Some(q) = set.queries.iter_mut().find(|q| q.kind == "paraphrase") else {
        panic!("no paraphrase in the set");
    };
    let relevant = q.relevant[0].clone();
    let id = q.id.clone();
    // One of its memory's words in capitals still counts as that word (lowercasing).
    let Some(m) = set.memories.iter().find(|m| m.id == relevant) else {
        panic!("{relevant} missing");
    };
    let word = m
        .content
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_string();
    q.query.push_str(&format!(" {}", word.to_uppercase()));
    let errors = check_set(&set);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("{id}: shares")),
        "{errors:?}"
    );
}

#[test]
fn hybrid_beats_semantic_on_exact_terms_and_keeps_paraphrases() {
    let set = load_set();
    assert_eq!(check_set(&set), Vec::<String>::new());
    let ranked = rank_all(&set);

    println!("\nmode                           kind        recall@1  recall@5");
    let mut table: BTreeMap<(&str, &str), (f64, f64)> = BTreeMap::new();
    for kind in ["paraphrase", "exact"] {
        let rows: [(&str, (f64, f64)); 6] = [
            ("semantic", score(&ranked, kind, |r| r.semantic.clone())),
            ("keyword", score(&ranked, kind, |r| r.keyword.clone())),
            (
                "keyword (no stemming)",
                score(&ranked, kind, |r| r.keyword_unstemmed.clone()),
            ),
            (
                "hybrid (plain RRF k=60, 1:1)",
                score(&ranked, kind, |r| hybrid(r, &PLAIN)),
            ),
            (
                "hybrid (gate 0.7, k 60, 1:1)",
                score(&ranked, kind, |r| hybrid(r, &OWN_SET)),
            ),
            (
                "hybrid (service: k 2, 1:1.5, 0.3)",
                score(&ranked, kind, |r| hybrid(r, &SERVICE)),
            ),
        ];
        for (mode, (r1, r5)) in rows {
            println!("{mode:<30} {kind:<11} {r1:>8.1}  {r5:>8.1}");
            table.insert((mode, kind), (r1, r5));
        }
    }

    // The grid OWN_SET was chosen from (the same set, so optimistic).
    println!("\nfusion grid (semantic weight 1): paraphrase r@1 r@5 | exact r@1 r@5");
    for share in [0.0, 0.1, 0.2, 0.3, 0.5, 0.7] {
        for k in [1.0, 2.0, 5.0, 10.0, 20.0, 60.0] {
            for w in [1.0, 1.25, 1.5, 2.0, 3.0] {
                let f = Fusion {
                    k,
                    semantic_weight: 1.0,
                    keyword_weight: w,
                    keyword_min_share: share,
                };
                let p = score(&ranked, "paraphrase", |r| hybrid(r, &f));
                let e = score(&ranked, "exact", |r| hybrid(r, &f));
                println!(
                    "k={k:<4} w={w:<4} share={share:<4} {:>6.1} {:>6.1} | {:>6.1} {:>6.1}",
                    p.0, p.1, e.0, e.1
                );
            }
        }
    }

    // The service's default is the fusion measured here.
    assert_eq!(Fusion::default(), SERVICE);
    let sem = |kind| table[&("semantic", kind)];
    for fusion in [
        "hybrid (gate 0.7, k 60, 1:1)",
        "hybrid (service: k 2, 1:1.5, 0.3)",
    ] {
        let hyb = |kind| table[&(fusion, kind)];
        // The bar: hybrid beats semantic on exact terms, at both depths...
        assert!(
            hyb("exact").0 > sem("exact").0,
            "{fusion}: {:?} vs {:?}",
            hyb("exact"),
            sem("exact")
        );
        assert!(
            hyb("exact").1 > sem("exact").1,
            "{fusion}: {:?} vs {:?}",
            hyb("exact"),
            sem("exact")
        );
        // ...and loses at most 2 points of recall@5 on paraphrases.
        assert!(hyb("paraphrase").1 >= sem("paraphrase").1 - 2.0, "{fusion}");
    }
    // At recall@1 only the gate at 0.7 keeps the paraphrases: the service's fusion trades
    // them for LoCoMo's questions (docs/SEARCH.md).
    let own = table[&("hybrid (gate 0.7, k 60, 1:1)", "paraphrase")];
    assert!(own.0 >= sem("paraphrase").0 - 2.0);
}
