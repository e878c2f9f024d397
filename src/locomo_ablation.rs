//! The ablation of keyword search and fusion on LoCoMo's development half, in process:
//! `cargo test --lib locomo_ablation -- --ignored --nocapture` (needs the model, `bash
//! .ci/setup`, and the data at `../shared/data/locomo/locomo-dev.json` or
//! `AUDITMEM_LOCOMO_DATA`; about two minutes, most of it embedding the turns).
//!
//! It ranks every question of categories 1-4 as the service's modes do, with the service's
//! parts (MiniLM, [`KeywordIndex`] under each [`Analyzer`], [`fuse`]), but without a server,
//! so that each variant costs no new embedding: the semantic list is the exact cosine order
//! (what `POST /v1/memories/search` returns: `auditmem eval locomo` gives the same figures),
//! the keyword list is BM25 over the conversation's turns, hybrid fuses the top
//! [`HYBRID_DEPTH`] of each. It prints recall@5/@10 per variant and the fusion grid the
//! service's [`Fusion::default`] was chosen from, and the hybrid search with each candidate's
//! neighbours lifted by a sweep of shares ([`neighbours::lift`], the service's
//! [`neighbours::NEIGHBOUR_SHARE`] among them) (docs/SEARCH.md, "LoCoMo"). Ignored by
//! default: it measures, it checks nothing the other tests do not.

use std::path::{Path, PathBuf};

use auditmem_projections::keyword::tokenize::{Analyzer, Stemmer, StopWords};
use auditmem_projections::keyword::{fuse, Bm25, Fusion, KeywordIndex, SERVICE_BM25};
use auditmem_projections::memories::{neighbours, HYBRID_DEPTH};
use uuid::Uuid;

use crate::embed::{cosine, Embedder, MiniLm};
use crate::locomo::{self, Conversation, Question, Recall, Tally};

/// One question and its two lists (turn indexes as uuids, best first).
struct Ranked<'a> {
    question: &'a Question,
    /// Every turn id, by the uuid index `i + 1`.
    turns: &'a [String],
    semantic: Vec<Uuid>,
    /// Per analyzer: the keyword hits and the query's weight (the gate's yardstick).
    keyword: Vec<(Vec<(Uuid, f32)>, f32)>,
}

/// The development half's file, if it is beside the repository (never copied into it).
pub(crate) fn data() -> Option<PathBuf> {
    let path = std::env::var_os("AUDITMEM_LOCOMO_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/locomo/locomo-dev.json")
        });
    path.is_file().then_some(path)
}

/// The development half's conversations, or `None` (said on stderr) when the data is not
/// beside the repository: the measuring tests then pass without measuring.
pub(crate) fn loaded() -> Option<Vec<Conversation>> {
    let Some(path) = data() else {
        eprintln!("skipped: no LoCoMo data beside the repository (or AUDITMEM_LOCOMO_DATA)");
        return None;
    };
    Some(locomo::load(&path).expect("the data"))
}

/// Every turn's text, conversation after conversation, in the data's order.
pub(crate) fn turn_texts(conversations: &[Conversation]) -> Vec<String> {
    conversations
        .iter()
        .flat_map(|c| c.turns.iter().map(|t| t.content.clone()))
        .collect()
}

/// The keyword indexes measured: (name, analyzer, BM25's parameters).
const ANALYZERS: [(&str, Analyzer, Bm25); 5] = [
    (
        "plural stemmer, 55 stop words, BM25 1.2/0.75",
        PLURAL,
        LUCENE,
    ),
    ("Snowball, 55 stop words, BM25 1.2/0.75", SNOWBALL, LUCENE),
    (
        "Snowball, NLTK stop list, BM25 1.2/0.75",
        SNOWBALL_NLTK,
        LUCENE,
    ),
    (
        "Snowball, 55 stop words, BM25 0.6/0",
        SNOWBALL,
        SERVICE_BM25,
    ),
    (
        "Snowball, NLTK stop list, BM25 0.6/0",
        SNOWBALL_NLTK,
        SERVICE_BM25,
    ),
];

const LUCENE: Bm25 = Bm25 { k1: 1.2, b: 0.75 };
const PLURAL: Analyzer = Analyzer {
    stemmer: Stemmer::Plural,
    stop_words: StopWords::Short,
};
const SNOWBALL: Analyzer = Analyzer {
    stemmer: Stemmer::Snowball,
    stop_words: StopWords::Short,
};
const SNOWBALL_NLTK: Analyzer = Analyzer {
    stemmer: Stemmer::Snowball,
    stop_words: StopWords::English,
};

/// A turn's memory id: its index in the data, plus one.
pub(crate) fn uuid(i: usize) -> Uuid {
    Uuid::from_u128(i as u128 + 1)
}

fn rank_all<'a>(conversations: &'a [Conversation], turn_ids: &'a [String]) -> Vec<Ranked<'a>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let model = MiniLm::load(&dir).unwrap_or_else(|e| panic!("{e} (run bash .ci/setup)"));
    // One index per analyzer over every conversation, as the service keeps one per tenant:
    // BM25's statistics are the tenant's, the user_id filter only hides the others' turns.
    let texts = turn_texts(conversations);
    let indexes: Vec<KeywordIndex> = ANALYZERS
        .iter()
        .map(|(_, a, bm25)| {
            let mut ix = KeywordIndex::with_analyzer(*a).with_bm25(*bm25);
            for (i, t) in texts.iter().enumerate() {
                ix.upsert(uuid(i), t);
            }
            ix
        })
        .collect();
    let mut out = Vec::new();
    let mut first = 0;
    for c in conversations {
        let range = first..first + c.turns.len();
        first = range.end;
        let vectors = model
            .embed_batch(&texts[range.clone()])
            .expect("embedding the turns");
        let questions: Vec<String> = c.questions.iter().map(|q| q.question.clone()).collect();
        let qvectors = model
            .embed_batch(&questions)
            .expect("embedding the questions");
        let mine = |u: &Uuid| range.contains(&(u.as_u128() as usize - 1));
        for (q, qv) in c.questions.iter().zip(&qvectors) {
            let mut by_cosine: Vec<(f32, usize)> = vectors
                .iter()
                .enumerate()
                .map(|(i, v)| (cosine(qv, v), range.start + i))
                .collect();
            // The service's order: similarity, then id (creation order) on a tie.
            by_cosine.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            out.push(Ranked {
                question: q,
                turns: turn_ids,
                semantic: by_cosine
                    .iter()
                    .take(HYBRID_DEPTH)
                    .map(|x| uuid(x.1))
                    .collect(),
                keyword: indexes
                    .iter()
                    .map(|ix| {
                        (
                            ix.search(&q.question, HYBRID_DEPTH, mine),
                            ix.query_weight(&q.question),
                        )
                    })
                    .collect(),
            });
        }
    }
    out
}

/// Recall of `rank` over every question.
fn score(all: &[Ranked<'_>], rank: impl Fn(&Ranked<'_>) -> Vec<Uuid>) -> Tally {
    let mut t = Tally::default();
    for r in all {
        let turns: Vec<String> = rank(r)
            .into_iter()
            .map(|u| r.turns[u.as_u128() as usize - 1].clone())
            .collect();
        t.add(r.question, &turns);
    }
    t
}

fn hybrid(r: &Ranked<'_>, analyzer: usize, f: &Fusion) -> Vec<Uuid> {
    let (hits, weight) = &r.keyword[analyzer];
    let keyword = f.keyword_ranking(hits, *weight);
    fuse(&r.semantic, &keyword, f)
        .into_iter()
        .map(|h| h.0)
        .collect()
}

/// One row of a table: the overall recall@5 and @10, then each category's.
pub(crate) fn line(name: &str, t: &Tally) {
    let cats: Vec<String> = t
        .categories()
        .iter()
        .map(|(_, r)| format!("{:.3}/{:.3}", r.at5, r.at10))
        .collect();
    let o: Recall = t.overall();
    println!(
        "{name:<64} {:.3}  {:.3}   {}",
        o.at5,
        o.at10,
        cats.join("  ")
    );
}

#[test]
#[ignore]
fn locomo_ablation() {
    let Some(conversations) = loaded() else {
        return;
    };
    let turn_ids: Vec<String> = conversations
        .iter()
        .flat_map(|c| c.turns.iter().map(|t| t.dia_id.clone()))
        .collect();
    let all = rank_all(&conversations, &turn_ids);
    let gated = Fusion {
        k: 60.0,
        semantic_weight: 1.0,
        keyword_weight: 1.0,
        keyword_min_share: 0.7,
    };
    let plain = Fusion {
        keyword_min_share: 0.0,
        ..gated
    };

    println!(
        "\n{:<58} {:<5}  {:<5}   per category r@5/r@10: multi-hop, temporal, open-domain, single-hop",
        "ranking", "r@5", "r@10"
    );
    line("semantic (MiniLM)", &score(&all, |r| r.semantic.clone()));
    for (i, (name, _, _)) in ANALYZERS.iter().enumerate() {
        let kw = |r: &Ranked<'_>| r.keyword[i].0.iter().map(|h| h.0).collect::<Vec<_>>();
        line(&format!("keyword: {name}"), &score(&all, kw));
        line(
            &format!("hybrid gate 0.7, k 60: {name}"),
            &score(&all, |r| hybrid(r, i, &gated)),
        );
        line(
            &format!("hybrid plain RRF, k 60: {name}"),
            &score(&all, |r| hybrid(r, i, &plain)),
        );
    }

    // The grid the service's fusion is chosen from, on each analyzer with the service's BM25.
    let mut best: Option<(f64, usize, Fusion)> = None;
    for (i, (name, _, bm25)) in ANALYZERS.iter().enumerate() {
        if *bm25 != SERVICE_BM25 {
            continue;
        }
        println!("\nfusion grid ({name}), semantic weight 1:");
        println!(
            "{:>6} {:>6} {:>6}  {:>6} {:>6}",
            "k", "kw_w", "gate", "r@5", "r@10"
        );
        for gate in [0.0, 0.1, 0.2, 0.3, 0.5, 0.7] {
            for k in [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 100.0] {
                for w in [0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0] {
                    let f = Fusion {
                        k,
                        semantic_weight: 1.0,
                        keyword_weight: w,
                        keyword_min_share: gate,
                    };
                    let o = score(&all, |r| hybrid(r, i, &f)).overall();
                    println!("{k:>6} {w:>6} {gate:>6}  {:>6.3} {:>6.3}", o.at5, o.at10);
                    if best.as_ref().is_none_or(|b| o.at5 + o.at10 > b.0) {
                        best = Some((o.at5 + o.at10, i, f));
                    }
                }
            }
        }
    }
    let Some((_, i, f)) = best else {
        return;
    };
    println!("best by r@5 + r@10: {}, {f:?}", ANALYZERS[i].0);
    line(
        "hybrid, best of the grid",
        &score(&all, |r| hybrid(r, i, &f)),
    );
    let service = ANALYZERS
        .iter()
        .position(|(_, a, bm25)| *a == Analyzer::default() && *bm25 == SERVICE_BM25)
        .expect("the service's analyzer is measured");
    bm25_sweep(&conversations, &turn_ids, &all);
    line(
        "hybrid, Fusion::default()",
        &score(&all, |r| hybrid(r, service, &Fusion::default())),
    );
    // The service's hybrid lifts each candidate's neighbours in its stream: here a turn's
    // neighbours are the turns before and after it in its conversation (one user_id, all of
    // type context, stored in order, as `auditmem eval locomo` stores them).
    let conversation_of: Vec<usize> = conversations
        .iter()
        .enumerate()
        .flat_map(|(c, conv)| std::iter::repeat_n(c, conv.turns.len()))
        .collect();
    let neighbours = |id: &Uuid| -> [Option<Uuid>; 2] {
        let i = id.as_u128() as usize - 1;
        let same = |j: usize| conversation_of.get(j) == Some(&conversation_of[i]);
        [
            i.checked_sub(1).filter(|j| same(*j)).map(uuid),
            Some(i + 1).filter(|j| same(*j)).map(uuid),
        ]
    };
    for share in [0.1, 0.2, 0.3, 0.5] {
        let lifted = |r: &Ranked<'_>| {
            let f = Fusion::default();
            let (hits, weight) = &r.keyword[service];
            let mut ranked = fuse(&r.semantic, &f.keyword_ranking(hits, *weight), &f);
            neighbours::lift(&mut ranked, neighbours, share);
            ranked.into_iter().map(|h| h.0).collect()
        };
        let name = format!("hybrid, Fusion::default(), neighbours lifted by {share}");
        line(&name, &score(&all, lifted));
    }
}

/// Keyword search and the service's hybrid under other BM25 parameters (service analyzer).
fn bm25_sweep(conversations: &[Conversation], turn_ids: &[String], all: &[Ranked<'_>]) {
    let texts = turn_texts(conversations);
    println!("\nBM25 parameters (service analyzer): keyword r@5 r@10 | hybrid (Fusion::default()) r@5 r@10");
    for k1 in [0.6, 0.9, 1.2, 1.5, 2.0] {
        for b in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let mut ix = KeywordIndex::with_analyzer(Analyzer::default()).with_bm25(Bm25 { k1, b });
            for (i, t) in texts.iter().enumerate() {
                ix.upsert(uuid(i), t);
            }
            let mut first = 0;
            let mut lists: Vec<(Vec<(Uuid, f32)>, f32)> = Vec::new();
            for c in conversations {
                let range = first..first + c.turns.len();
                first = range.end;
                let mine = |u: &Uuid| range.contains(&(u.as_u128() as usize - 1));
                for q in &c.questions {
                    lists.push((
                        ix.search(&q.question, HYBRID_DEPTH, mine),
                        ix.query_weight(&q.question),
                    ));
                }
            }
            let mut kw = Tally::default();
            let mut hy = Tally::default();
            for (r, (hits, weight)) in all.iter().zip(&lists) {
                let f = Fusion::default();
                let to_turns = |ids: Vec<Uuid>| -> Vec<String> {
                    ids.into_iter()
                        .map(|u| turn_ids[u.as_u128() as usize - 1].clone())
                        .collect()
                };
                kw.add(r.question, &to_turns(hits.iter().map(|h| h.0).collect()));
                let fused = fuse(&r.semantic, &f.keyword_ranking(hits, *weight), &f);
                hy.add(
                    r.question,
                    &to_turns(fused.into_iter().map(|h| h.0).collect()),
                );
            }
            let (k, h) = (kw.overall(), hy.overall());
            println!(
                "k1 {k1:<4} b {b:<5} {:.3} {:.3} | {:.3} {:.3}",
                k.at5, k.at10, h.at5, h.at10
            );
        }
    }
}
