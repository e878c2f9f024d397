//! Contextual vectors on LoCoMo's development half, in process: `cargo test --lib
//! locomo_context -- --ignored --nocapture` (needs the model, `bash .ci/setup`, and the data
//! at `../shared/data/locomo/locomo-dev.json` or `AUDITMEM_LOCOMO_DATA`).
//!
//! Each turn is embedded once more with some of its stream neighbours' text (the turn before
//! and after it in its conversation, the neighbours the service's lift uses), and the
//! questions are ranked as `locomo_feedback` ranks them (exact cosine order,
//! `KeywordIndex::default`, [`Fusion::default`], the neighbours' lift) with those vectors:
//! alone (the `semantic` mode), as a memory with two vectors (the better cosine of the plain
//! and the contextual one), and in the service's hybrid search in place of the plain vectors'
//! list or as a third list beside it; then with `locomo_feedback`'s neighbour-text index and
//! RM3 on top. It prints what the longer texts cost: word pieces a turn, the CPU time of each
//! embedding it does, and with `AUDITMEM_LOCOMO_CPU` set the CPU time of embedding 500 turns
//! plain and with their neighbours, in turn. `AUDITMEM_LOCOMO_VECTORS` names the file the plain
//! vectors are kept in between runs (the one `locomo_feedback` reads); each variant's vectors
//! are kept beside it, in that name plus `.<variant>`. Ignored by default: it measures, it
//! checks nothing the other tests do not.

use std::path::{Path, PathBuf};

use auditmem_projections::keyword::{fuse, Fusion};
use auditmem_projections::memories::{neighbours, HYBRID_DEPTH};
use uuid::Uuid;

use crate::embed::{cosine, Embedder, MiniLm};

use crate::locomo_ablation::{line, loaded, uuid};
use crate::locomo_feedback::{add_list, rm3, tally, texts, vectors_kept, world, World, Q};

/// Which of a turn's neighbours its contextual text takes, and how much of each.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    prev: bool,
    next: bool,
    /// The neighbour's first this many words (whitespace-separated), or all of it.
    words: Option<usize>,
}

const VARIANTS: [Variant; 6] = [
    Variant {
        name: "prev",
        prev: true,
        next: false,
        words: None,
    },
    Variant {
        name: "next",
        prev: false,
        next: true,
        words: None,
    },
    Variant {
        name: "both",
        prev: true,
        next: true,
        words: None,
    },
    Variant {
        name: "prev30",
        prev: true,
        next: false,
        words: Some(30),
    },
    Variant {
        name: "next30",
        prev: false,
        next: true,
        words: Some(30),
    },
    Variant {
        name: "both30",
        prev: true,
        next: true,
        words: Some(30),
    },
];

impl Variant {
    fn describe(&self) -> String {
        let part = match self.words {
            Some(n) => format!(" (first {n} words)"),
            None => String::new(),
        };
        match (self.prev, self.next) {
            (true, false) => format!("prev{part} + turn"),
            (false, true) => format!("turn + next{part}"),
            _ => format!("prev{part} + turn + next{part}"),
        }
    }

    /// Every turn's contextual text: the neighbours' text before and after the turn's, one
    /// line each, plain concatenation.
    fn texts(&self, turns: &[String], conversation_of: &[usize]) -> Vec<String> {
        let cut = |t: &str| match self.words {
            Some(n) => t.split_whitespace().take(n).collect::<Vec<_>>().join(" "),
            None => t.to_string(),
        };
        (0..turns.len())
            .map(|i| {
                let same = |j: &usize| conversation_of.get(*j) == Some(&conversation_of[i]);
                let mut parts = Vec::new();
                if let Some(j) = i.checked_sub(1).filter(same).filter(|_| self.prev) {
                    parts.push(cut(&turns[j]));
                }
                parts.push(turns[i].clone());
                if let Some(j) = Some(i + 1).filter(same).filter(|_| self.next) {
                    parts.push(cut(&turns[j]));
                }
                parts.join("\n")
            })
            .collect()
    }
}

/// The process's CPU time (user and system, every thread) in seconds, from `/proc/self/stat`
/// in clock ticks of 1/100 s (Linux's USER_HZ on the machines this runs on).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command's name, in parentheses, may hold spaces: count fields after it.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The top [`HYBRID_DEPTH`] of the question's conversation by `score` of a turn's index,
/// ties in creation order (the service's semantic order).
fn top(q: &Q<'_>, score: impl Fn(usize) -> f32) -> Vec<Uuid> {
    let mut by: Vec<(f32, usize)> = q.range.clone().map(|i| (score(i), i)).collect();
    by.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    by.iter().take(HYBRID_DEPTH).map(|x| uuid(x.1)).collect()
}

/// A ranking as `tally` takes it.
fn scored(ids: &[Uuid]) -> Vec<(Uuid, f32)> {
    ids.iter().map(|u| (*u, 0.0)).collect()
}

/// What a question's lists are, computed once.
struct Lists {
    plain: Vec<Uuid>,
    keyword: Vec<Uuid>,
    /// `locomo_feedback`'s neighbour-text index.
    neighbour_text: Vec<Uuid>,
    /// Per variant: the contextual vectors' list and the two-vector memories' list.
    contextual: Vec<(Vec<Uuid>, Vec<Uuid>)>,
}

/// How the semantic side of a hybrid search is made.
#[derive(Clone, Copy, PartialEq)]
enum Semantic {
    /// The plain vectors' list (the service).
    Plain,
    /// The variant's contextual list in place of the plain one.
    Replace(usize),
    /// The variant's two-vector list in place of the plain one.
    Max(usize),
    /// The variant's contextual list as a third list, weight 1, beside the plain one.
    Third(usize),
}

/// A hybrid search: the semantic side, the keyword list, optionally the neighbour-text list
/// (weight 1 × the keyword weight) and RM3 (the fused top 10's 5 best terms, weight 0.5 × the
/// keyword weight, drawn from the ranking without it), the neighbours lifted by `lift`.
fn hybrid(
    w: &World<'_>,
    q: &Q<'_>,
    l: &Lists,
    s: Semantic,
    text: bool,
    expand: bool,
    lift: f32,
) -> Vec<(Uuid, f32)> {
    let f = Fusion::default();
    let build = |extra: Option<&[Uuid]>| {
        let sem = match s {
            Semantic::Plain | Semantic::Third(_) => &l.plain,
            Semantic::Replace(v) => &l.contextual[v].0,
            Semantic::Max(v) => &l.contextual[v].1,
        };
        let mut r = fuse(sem, &l.keyword, &f);
        if let Semantic::Third(v) = s {
            add_list(&mut r, &l.contextual[v].0, f.semantic_weight, f.k);
        }
        if text {
            add_list(&mut r, &l.neighbour_text, f.keyword_weight, f.k);
        }
        if let Some(kw3) = extra {
            add_list(&mut r, kw3, 0.5 * f.keyword_weight, f.k);
        }
        neighbours::lift(&mut r, |id| w.neighbours(id), lift);
        r
    };
    let r = build(None);
    if !expand {
        return r;
    }
    let expanded = rm3(w, &q.question.question, &r[..10.min(r.len())], 5);
    let open = Fusion {
        keyword_min_share: 0.0,
        ..f
    };
    let kw3 = w.keyword(&w.keyword, q, &expanded, &open);
    build(Some(&kw3))
}

#[test]
#[ignore]
fn locomo_context() {
    let Some(conversations) = loaded() else {
        return;
    };
    let (all, n) = texts(&conversations);
    let cache = std::env::var_os("AUDITMEM_LOCOMO_VECTORS").map(PathBuf::from);
    let kept = |suffix: &str| {
        cache.as_ref().map(|p| {
            let mut s = p.clone().into_os_string();
            s.push(suffix);
            PathBuf::from(s)
        })
    };
    let embed = |texts: &[String], file: Option<PathBuf>| {
        let fresh = !file.as_ref().is_some_and(|p| p.is_file());
        let t0 = cpu_seconds();
        let vs = vectors_kept(texts, file);
        if fresh {
            println!("  embedded in {:.1} s of CPU", cpu_seconds() - t0);
        }
        vs
    };
    println!("plain turns and questions ({} texts)", all.len());
    let vs = embed(&all, kept(""));
    let (w, qs) = world(&conversations, &vs);
    let turns = &all[..n];

    // Word pieces a turn as the model sees them (with [CLS] and [SEP]); the embedder cuts at
    // 256.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let mut tok = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
        .unwrap_or_else(|e| panic!("{e} (run bash .ci/setup)"));
    tok.with_padding(None);
    tok.with_truncation(None).expect("no truncation");
    let pieces = |texts: &[String]| -> (f64, usize, usize) {
        let lens: Vec<usize> = texts
            .iter()
            .map(|t| tok.encode(t.as_str(), true).expect("tokenizing").len())
            .collect();
        let sum: usize = lens.iter().sum();
        let cut = lens.iter().filter(|l| **l > 256).count();
        (
            sum as f64 / lens.len() as f64,
            cut,
            lens.iter().copied().max().unwrap_or(0),
        )
    };
    let (plain_mean, plain_cut, plain_max) = pieces(turns);
    println!(
        "plain turn: {plain_mean:.1} word pieces on average, max {plain_max}, {plain_cut} over 256"
    );

    let mut contextual: Vec<Vec<Vec<f32>>> = Vec::new();
    for v in VARIANTS {
        let ctx = v.texts(turns, &w.conversation_of);
        let (mean, cut, max) = pieces(&ctx);
        println!(
            "{}: {mean:.1} word pieces on average ({:.2}x the plain turn), max {max}, {cut} over 256",
            v.describe(),
            mean / plain_mean
        );
        contextual.push(embed(&ctx, kept(&format!(".{}", v.name))));
    }

    if std::env::var_os("AUDITMEM_LOCOMO_CPU").is_some() {
        let prev = VARIANTS[0].texts(turns, &w.conversation_of);
        let both = VARIANTS[2].texts(turns, &w.conversation_of);
        embedding_cpu([
            ("plain", turns),
            (VARIANTS[0].name, &prev),
            (VARIANTS[2].name, &both),
        ]);
    }

    let f = Fusion::default();
    let lists: Vec<Lists> = qs
        .iter()
        .map(|q| Lists {
            plain: w.semantic(q, q.vector),
            keyword: w.keyword(&w.keyword, q, &q.question.question, &f),
            neighbour_text: w.keyword(&w.with_neighbours, q, &q.question.question, &f),
            contextual: contextual
                .iter()
                .map(|c| {
                    (
                        top(q, |i| cosine(q.vector, &c[i])),
                        top(q, |i| {
                            cosine(q.vector, &c[i]).max(cosine(q.vector, &w.vectors[i]))
                        }),
                    )
                })
                .collect(),
        })
        .collect();
    let l = |q: &Q<'_>| &lists[q.at];

    println!(
        "\n{:<64} {:<5}  {:<5}   per category r@5/r@10: multi-hop, temporal, open-domain, single-hop",
        "semantic mode", "r@5", "r@10"
    );
    line(
        "plain vectors (the service)",
        &tally(&w, &qs, |q| scored(&l(q).plain)),
    );
    for (i, v) in VARIANTS.iter().enumerate() {
        line(
            &format!("contextual: {}", v.describe()),
            &tally(&w, &qs, |q| scored(&l(q).contextual[i].0)),
        );
        line(
            &format!("two vectors, max cosine: {}", v.describe()),
            &tally(&w, &qs, |q| scored(&l(q).contextual[i].1)),
        );
    }

    let share = neighbours::NEIGHBOUR_SHARE;
    println!("\nhybrid (Fusion::default(), the neighbours lifted)");
    line(
        "plain vectors, lift 0.2 (the service)",
        &tally(&w, &qs, |q| {
            hybrid(&w, q, l(q), Semantic::Plain, false, false, share)
        }),
    );
    let mut modes = Vec::new();
    for i in 0..VARIANTS.len() {
        modes.push(Semantic::Replace(i));
        modes.push(Semantic::Max(i));
        modes.push(Semantic::Third(i));
    }
    let name = |s: Semantic| match s {
        Semantic::Plain => "plain vectors".to_string(),
        Semantic::Replace(i) => format!("contextual: {}", VARIANTS[i].describe()),
        Semantic::Max(i) => format!("two vectors: {}", VARIANTS[i].describe()),
        Semantic::Third(i) => format!("third list: {}", VARIANTS[i].describe()),
    };
    for &s in &modes {
        for lift in [0.0, 0.1, share, 0.3] {
            let t = tally(&w, &qs, |q| hybrid(&w, q, l(q), s, false, false, lift));
            line(&format!("{}, lift {lift}", name(s)), &t);
        }
    }

    println!("\nwith the neighbour-text index (w 1) and RM3 (top 10, 5 terms, w 0.5), lift 0.2");
    for s in std::iter::once(Semantic::Plain).chain(modes.iter().copied()) {
        let t = tally(&w, &qs, |q| hybrid(&w, q, l(q), s, true, false, share));
        line(&format!("{} + neighbour text", name(s)), &t);
        let t = tally(&w, &qs, |q| hybrid(&w, q, l(q), s, true, true, share));
        line(&format!("{} + neighbour text + rm3", name(s)), &t);
    }
}

/// The CPU time of embedding the first 500 plain turns, the same turns with the turn before
/// and with both neighbours, twice, in turn (`AUDITMEM_LOCOMO_CPU` set): the ratios are what
/// the longer texts cost ingestion.
fn embedding_cpu(texts: [(&str, &[String]); 3]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let model = MiniLm::load(&dir).unwrap_or_else(|e| panic!("{e} (run bash .ci/setup)"));
    for round in 1..=2 {
        let mut cpu = [0.0; 3];
        // The second round in the other order, so that no text always runs first.
        let order = if round == 1 { [0, 1, 2] } else { [2, 1, 0] };
        for k in order {
            let t = texts[k].1;
            let t0 = cpu_seconds();
            for chunk in t[..500.min(t.len())].chunks(256) {
                model.embed_batch(chunk).expect("embedding");
            }
            cpu[k] = cpu_seconds() - t0;
        }
        let each: Vec<String> = (0..3)
            .map(|k| format!("{} {:.1} s ({:.2}x)", texts[k].0, cpu[k], cpu[k] / cpu[0]))
            .collect();
        println!("CPU of 500 turns, round {round}: {}", each.join(", "));
    }
}
