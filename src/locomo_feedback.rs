//! The ablation of second passes on LoCoMo's development half, in process: `cargo test --lib
//! locomo_feedback -- --ignored --nocapture` (needs the model, `bash .ci/setup`, and the data
//! at `../shared/data/locomo/locomo-dev.json` or `AUDITMEM_LOCOMO_DATA`).
//!
//! Starting from the service's hybrid search as `locomo_ablation` measures it (exact cosine
//! order, [`KeywordIndex::default`], [`Fusion::default`], the neighbours' lift), it measures
//! what a second pass adds without embedding anything more: the query's vector moved towards
//! the first pass's best results (Rocchio's pseudo-relevance feedback) and searched again; the
//! keyword query expanded by the first pass's best results' terms (RM3-style) and searched
//! again; a second keyword index whose documents hold their stream neighbours' text. Each
//! second list is fused with the first two by reciprocal rank. `AUDITMEM_LOCOMO_VECTORS` names
//! a file the turns' and questions' vectors are kept in between runs (written if absent).
//! Ignored by default: it measures, it checks nothing the other tests do not.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use auditmem_projections::keyword::tokenize::{analyze, Analyzer};
use auditmem_projections::keyword::{fuse, Fusion, KeywordIndex};
use auditmem_projections::memories::{neighbours, HYBRID_DEPTH};
use uuid::Uuid;

use crate::embed::{cosine, l2_normalize, Embedder, MiniLm};
use crate::locomo::{Conversation, Question, Tally};
use crate::locomo_ablation::{line, loaded, turn_texts, uuid};

fn index(u: &Uuid) -> usize {
    u.as_u128() as usize - 1
}

/// Every turn's vector, then every question's, in the data's order.
fn vectors(texts: &[String]) -> Vec<Vec<f32>> {
    let cache = std::env::var_os("AUDITMEM_LOCOMO_VECTORS").map(PathBuf::from);
    vectors_kept(texts, cache)
}

/// The vectors of `texts`, read from `cache` if it is there, else embedded (and written to
/// `cache` if it is given).
pub(crate) fn vectors_kept(texts: &[String], cache: Option<PathBuf>) -> Vec<Vec<f32>> {
    if let Some(bytes) = cache.as_ref().and_then(|p| std::fs::read(p).ok()) {
        let floats: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let dim = floats.len() / texts.len();
        assert_eq!(
            dim * texts.len(),
            floats.len(),
            "{} holds vectors of other texts: delete it",
            cache.as_deref().unwrap_or(Path::new("")).display()
        );
        return floats.chunks(dim).map(|c| c.to_vec()).collect();
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let model = MiniLm::load(&dir).unwrap_or_else(|e| panic!("{e} (run bash .ci/setup)"));
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(256) {
        out.extend(model.embed_batch(chunk).expect("embedding"));
    }
    if let Some(p) = cache {
        let bytes: Vec<u8> = out.iter().flatten().flat_map(|f| f.to_le_bytes()).collect();
        std::fs::write(p, bytes).expect("writing the vectors");
    }
    out
}

/// A question's semantic and (gated) keyword lists and the fused, lifted ranking of both.
type FirstPass = (Vec<Uuid>, Vec<Uuid>, Vec<(Uuid, f32)>);

/// One question with what its lists are drawn from.
pub(crate) struct Q<'a> {
    pub(crate) question: &'a Question,
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) vector: &'a [f32],
    /// Its place in the list of questions.
    pub(crate) at: usize,
}

pub(crate) struct World<'a> {
    turns: Vec<String>,
    texts: Vec<String>,
    pub(crate) vectors: &'a [Vec<f32>],
    pub(crate) conversation_of: Vec<usize>,
    pub(crate) keyword: KeywordIndex,
    /// Each turn with its neighbours' text.
    pub(crate) with_neighbours: KeywordIndex,
}

/// Every turn's text, then every question's, in the data's order, and the number of turns.
pub(crate) fn texts(conversations: &[Conversation]) -> (Vec<String>, usize) {
    let texts = turn_texts(conversations);
    let n = texts.len();
    let questions = conversations
        .iter()
        .flat_map(|c| c.questions.iter().map(|q| q.question.clone()));
    (texts.into_iter().chain(questions).collect(), n)
}

/// The turns' indexes and the questions over `vs` (every turn's vector, then every
/// question's, as [`texts`] orders them).
pub(crate) fn world<'a>(
    conversations: &'a [Conversation],
    vs: &'a [Vec<f32>],
) -> (World<'a>, Vec<Q<'a>>) {
    let texts = turn_texts(conversations);
    let conversation_of: Vec<usize> = conversations
        .iter()
        .enumerate()
        .flat_map(|(c, conv)| std::iter::repeat_n(c, conv.turns.len()))
        .collect();
    let mut keyword = KeywordIndex::default();
    let mut with_neighbours = KeywordIndex::default();
    for (i, t) in texts.iter().enumerate() {
        keyword.upsert(uuid(i), t);
        let same = |j: usize| conversation_of.get(j) == Some(&conversation_of[i]);
        let mut doc = t.clone();
        for j in [i.checked_sub(1), Some(i + 1)].into_iter().flatten() {
            if same(j) {
                doc.push(' ');
                doc.push_str(&texts[j]);
            }
        }
        with_neighbours.upsert(uuid(i), &doc);
    }
    let w = World {
        turns: conversations
            .iter()
            .flat_map(|c| c.turns.iter().map(|t| t.dia_id.clone()))
            .collect(),
        texts,
        vectors: vs,
        conversation_of,
        keyword,
        with_neighbours,
    };
    let mut qs = Vec::new();
    let (mut first, mut qi) = (0, 0);
    for c in conversations {
        let range = first..first + c.turns.len();
        first = range.end;
        for q in &c.questions {
            qs.push(Q {
                question: q,
                range: range.clone(),
                vector: &vs[w.texts.len() + qi],
                at: qi,
            });
            qi += 1;
        }
    }
    (w, qs)
}

impl World<'_> {
    pub(crate) fn semantic(&self, q: &Q<'_>, v: &[f32]) -> Vec<Uuid> {
        let mut by: Vec<(f32, usize)> = q
            .range
            .clone()
            .map(|i| (cosine(v, &self.vectors[i]), i))
            .collect();
        by.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        by.iter().take(HYBRID_DEPTH).map(|x| uuid(x.1)).collect()
    }

    pub(crate) fn keyword(
        &self,
        ix: &KeywordIndex,
        q: &Q<'_>,
        text: &str,
        f: &Fusion,
    ) -> Vec<Uuid> {
        let r = q.range.clone();
        let hits = ix.search(text, HYBRID_DEPTH, |u| r.contains(&index(u)));
        f.keyword_ranking(&hits, ix.query_weight(text))
    }

    pub(crate) fn neighbours(&self, id: &Uuid) -> [Option<Uuid>; 2] {
        let i = index(id);
        let same = |j: usize| self.conversation_of.get(j) == Some(&self.conversation_of[i]);
        [
            i.checked_sub(1).filter(|j| same(*j)).map(uuid),
            Some(i + 1).filter(|j| same(*j)).map(uuid),
        ]
    }
}

/// Adds `weight / (k + rank)` of `list` to `ranked` (new ids appended), then sorts, ties
/// kept in order.
pub(crate) fn add_list(ranked: &mut Vec<(Uuid, f32)>, list: &[Uuid], weight: f32, k: f32) {
    let mut at: HashMap<Uuid, usize> = ranked.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    for (i, id) in list.iter().enumerate() {
        let j = *at.entry(*id).or_insert_with(|| {
            ranked.push((*id, 0.0));
            ranked.len() - 1
        });
        ranked[j].1 += weight / (k + (i + 1) as f32);
    }
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
}

/// The query moved towards the mean of the vectors of `top`: `q + beta * mean`, normalised.
fn rocchio(w: &World<'_>, q: &[f32], top: &[Uuid], beta: f32) -> Vec<f32> {
    let mut out = q.to_vec();
    let n = top.len().max(1) as f32;
    for id in top {
        for (o, x) in out.iter_mut().zip(&w.vectors[index(id)]) {
            *o += beta * x / n;
        }
    }
    l2_normalize(&mut out);
    out
}

/// The query plus the `terms` best terms of `top`'s texts (weighted by the result's fused
/// score, a term's frequency in the text over its length), those not in the query.
pub(crate) fn rm3(w: &World<'_>, query: &str, top: &[(Uuid, f32)], terms: usize) -> String {
    let a = Analyzer::default();
    let mut mine: Vec<String> = Vec::new();
    analyze(query, &a, |t| mine.push(t.to_string()));
    let mut weight: HashMap<String, f32> = HashMap::new();
    for (id, s) in top {
        let mut toks: Vec<String> = Vec::new();
        analyze(&w.texts[index(id)], &a, |t| toks.push(t.to_string()));
        let len = toks.len().max(1) as f32;
        for t in toks {
            *weight.entry(t).or_default() += s / len;
        }
    }
    let mut all: Vec<(String, f32)> = weight
        .into_iter()
        .filter(|(t, _)| !mine.contains(t))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut out = query.to_string();
    for (t, _) in all.into_iter().take(terms) {
        out.push(' ');
        out.push_str(&t);
    }
    out
}

pub(crate) fn tally(
    w: &World<'_>,
    qs: &[Q<'_>],
    rank: impl Fn(&Q<'_>) -> Vec<(Uuid, f32)>,
) -> Tally {
    let mut t = Tally::default();
    for q in qs {
        let turns: Vec<String> = rank(q)
            .into_iter()
            .take(10)
            .map(|(u, _)| w.turns[index(&u)].clone())
            .collect();
        t.add(q.question, &turns);
    }
    t
}

#[test]
#[ignore]
fn locomo_feedback() {
    let Some(conversations) = loaded() else {
        return;
    };
    let (all, _) = texts(&conversations);
    let vs = vectors(&all);
    let (w, qs) = world(&conversations, &vs);
    println!(
        "keyword index heap: turns alone {} bytes, turns with their neighbours' text {} bytes",
        w.keyword.heap_bytes(),
        w.with_neighbours.heap_bytes()
    );
    let f = Fusion::default();
    let share = neighbours::NEIGHBOUR_SHARE;
    // The service's hybrid search, once per question: both lists fused, the neighbours lifted.
    let firsts: Vec<FirstPass> = qs
        .iter()
        .map(|q| {
            let sem = w.semantic(q, q.vector);
            let kw = w.keyword(&w.keyword, q, &q.question.question, &f);
            let mut ranked = fuse(&sem, &kw, &f);
            neighbours::lift(&mut ranked, |id| w.neighbours(id), share);
            (sem, kw, ranked)
        })
        .collect();
    let first = |q: &Q<'_>| &firsts[q.at];
    println!(
        "\n{:<64} {:<5}  {:<5}   per category r@5/r@10: multi-hop, temporal, open-domain, single-hop",
        "ranking", "r@5", "r@10"
    );
    line(
        "service hybrid (fused, lifted 0.2)",
        &tally(&w, &qs, |q| first(q).2.clone()),
    );

    // Rocchio: the query moved towards the first pass's top m, searched again.
    for from in ["fused", "semantic"] {
        for m in [3usize, 5, 10] {
            for beta in [0.5f32, 1.0] {
                for w2 in [0.5f32, 1.0, 0.0] {
                    let t = tally(&w, &qs, |q| {
                        let (sem, kw, lifted) = first(q);
                        let top: Vec<Uuid> = match from {
                            "fused" => lifted.iter().take(m).map(|r| r.0).collect(),
                            _ => sem.iter().take(m).copied().collect(),
                        };
                        let q2 = rocchio(&w, q.vector, &top, beta);
                        let sem2 = w.semantic(q, &q2);
                        // w2 0: the moved query's list replaces the first.
                        let mut ranked = if w2 == 0.0 {
                            fuse(&sem2, kw, &f)
                        } else {
                            let mut r = fuse(sem, kw, &f);
                            add_list(&mut r, &sem2, w2, f.k);
                            r
                        };
                        neighbours::lift(&mut ranked, |id| w.neighbours(id), share);
                        ranked
                    });
                    let name = format!(
                        "rocchio from {from} top {m}, beta {beta}, {}",
                        if w2 == 0.0 {
                            "replacing".to_string()
                        } else {
                            format!("third list w {w2}")
                        }
                    );
                    line(&name, &t);
                }
            }
        }
    }

    // RM3-style: the keyword query expanded by the fused top m's terms, searched again.
    for m in [3usize, 10] {
        for terms in [5usize, 10] {
            for w2 in [0.5f32, 1.0] {
                let t = tally(&w, &qs, |q| {
                    let (sem, kw, lifted) = first(q);
                    let expanded = rm3(
                        &w,
                        &q.question.question,
                        &lifted[..m.min(lifted.len())],
                        terms,
                    );
                    let open = Fusion {
                        keyword_min_share: 0.0,
                        ..f
                    };
                    let kw2 = w.keyword(&w.keyword, q, &expanded, &open);
                    let mut r = fuse(sem, kw, &f);
                    add_list(&mut r, &kw2, w2 * f.keyword_weight, f.k);
                    neighbours::lift(&mut r, |id| w.neighbours(id), share);
                    r
                });
                line(&format!("rm3 top {m}, {terms} terms, w {w2}"), &t);
            }
        }
    }

    // A second keyword index whose documents hold their neighbours' text, its list fused as a
    // third (w2 times the keyword weight) or in place of the keyword list (w2 0), the lift's
    // share tuned with it.
    for w2 in [0.5f32, 1.0, 1.5, 0.0] {
        for lift in [0.0, 0.1, share, 0.3] {
            let t = tally(&w, &qs, |q| {
                let (sem, kw, _) = first(q);
                let kw2 = w.keyword(&w.with_neighbours, q, &q.question.question, &f);
                let mut ranked = if w2 == 0.0 {
                    fuse(sem, &kw2, &f)
                } else {
                    let mut r = fuse(sem, kw, &f);
                    add_list(&mut r, &kw2, w2 * f.keyword_weight, f.k);
                    r
                };
                neighbours::lift(&mut ranked, |id| w.neighbours(id), lift);
                ranked
            });
            line(&format!("neighbour-text index, w {w2}, lift {lift}"), &t);
        }
    }

    // The two that pay, together: the neighbour-text list (w 1) and RM3 (fused top 10, 5
    // terms, w 0.5), the expansion drawn from the first pass with the neighbour-text list.
    let t = tally(&w, &qs, |q| {
        let (sem, kw, _) = first(q);
        let kw2 = w.keyword(&w.with_neighbours, q, &q.question.question, &f);
        let mut r = fuse(sem, kw, &f);
        add_list(&mut r, &kw2, f.keyword_weight, f.k);
        neighbours::lift(&mut r, |id| w.neighbours(id), share);
        let expanded = rm3(&w, &q.question.question, &r[..10.min(r.len())], 5);
        let open = Fusion {
            keyword_min_share: 0.0,
            ..f
        };
        let kw3 = w.keyword(&w.keyword, q, &expanded, &open);
        let mut r = fuse(sem, kw, &f);
        add_list(&mut r, &kw2, f.keyword_weight, f.k);
        add_list(&mut r, &kw3, 0.5 * f.keyword_weight, f.k);
        neighbours::lift(&mut r, |id| w.neighbours(id), share);
        r
    });
    line(
        "neighbour-text index w 1 and rm3 top 10, 5 terms, w 0.5",
        &t,
    );
}
