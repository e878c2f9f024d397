//! The rule extractor measured on the labelled turns of `tests/data/extraction/*.jsonl`:
//! precision and recall per kind and per language, printed as the tables of
//! docs/EXTRACTION.md (`cargo test --lib extract::eval -- --nocapture`), with the overall
//! floors asserted so that a regression fails the build.
//!
//! A turn is `{"lang", "role"? (default "user"), "text", "expect": [{"kind", "contains"}]}`.
//! A stored statement is a true positive when it has the expected kind and contains the
//! expected words (case-insensitive), each expectation matched at most once; every other
//! stored statement is a false positive.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::cues::{Kind, Lang};
use super::rules::{user_texts, RuleExtractor};
use super::{ChatMessage, ExtractInput};

#[derive(Deserialize)]
struct Turn {
    lang: String,
    #[serde(default = "user")]
    role: String,
    text: String,
    expect: Vec<Expected>,
}

fn user() -> String {
    "user".into()
}

#[derive(Deserialize)]
struct Expected {
    kind: String,
    contains: String,
}

/// True positives, statements stored and statements expected.
#[derive(Default, Clone, Copy)]
struct Tally {
    tp: usize,
    stored: usize,
    expected: usize,
}

impl Tally {
    fn precision(&self) -> f64 {
        if self.stored == 0 {
            1.0
        } else {
            self.tp as f64 / self.stored as f64
        }
    }
    fn recall(&self) -> f64 {
        if self.expected == 0 {
            1.0
        } else {
            self.tp as f64 / self.expected as f64
        }
    }
    fn add(&mut self, o: Tally) {
        self.tp += o.tp;
        self.stored += o.stored;
        self.expected += o.expected;
    }
    fn row(&self, name: &str) -> String {
        format!(
            "| {name} | {} | {} | {} | {:.2} | {:.2} |",
            self.expected,
            self.stored,
            self.tp,
            self.precision(),
            self.recall()
        )
    }
}

fn turns() -> Vec<Turn> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/extraction");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("tests/data/extraction is readable")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a data file is readable");
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            out.push(
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{}:{}: {e}", f.display(), i + 1)),
            );
        }
    }
    out
}

#[test]
fn rules_meet_the_precision_and_recall_floors() {
    let turns = turns();
    assert!(turns.len() >= 200, "{} turns", turns.len());
    let mut by_kind: BTreeMap<Kind, Tally> = BTreeMap::new();
    let mut by_lang: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut misses = Vec::new();
    for turn in &turns {
        let label = |k: &str| {
            Kind::ALL
                .into_iter()
                .find(|x| x.label() == k)
                .unwrap_or_else(|| panic!("unknown kind {k:?}"))
        };
        assert!(
            Lang::ALL.iter().any(|l| l.code() == turn.lang),
            "unknown language {:?}",
            turn.lang
        );
        let input = ExtractInput::Messages(vec![ChatMessage {
            role: turn.role.clone(),
            content: turn.text.clone(),
        }]);
        let stored: Vec<_> = user_texts(&input).flat_map(RuleExtractor::found).collect();
        if std::env::var_os("EXTRACT_EVAL_SHOW").is_some() {
            for f in &stored {
                println!(
                    "{:?} -> {} {:?}",
                    turn.text,
                    f.kind.label(),
                    f.candidate.content
                );
            }
        }
        let mut matched = vec![false; stored.len()];
        let lang = by_lang.entry(turn.lang.as_str()).or_default();
        for e in &turn.expect {
            let kind = label(&e.kind);
            let hit = stored.iter().enumerate().position(|(i, f)| {
                !matched[i]
                    && f.kind == kind
                    && f.candidate
                        .content
                        .to_lowercase()
                        .contains(&e.contains.to_lowercase())
            });
            let t = by_kind.entry(kind).or_default();
            t.expected += 1;
            lang.expected += 1;
            match hit {
                Some(i) => {
                    matched[i] = true;
                    t.tp += 1;
                    lang.tp += 1;
                }
                None => misses.push(format!("missed {} in {:?}", e.kind, turn.text)),
            }
        }
        for (f, m) in stored.iter().zip(&matched) {
            by_kind.entry(f.kind).or_default().stored += 1;
            lang.stored += 1;
            if !*m {
                misses.push(format!(
                    "wrongly stored {} {:?} from {:?}",
                    f.kind.label(),
                    f.candidate.content,
                    turn.text
                ));
            }
        }
    }
    let mut all = Tally::default();
    println!("| kind | expected | stored | correct | precision | recall |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (k, t) in &by_kind {
        println!("{}", t.row(k.label()));
        all.add(*t);
    }
    println!("{}", all.row("**all**"));
    println!();
    println!("| language | expected | stored | correct | precision | recall |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (l, t) in &by_lang {
        println!("{}", t.row(l));
    }
    println!();
    println!("{} turns", turns.len());
    for m in &misses {
        println!("{m}");
    }
    assert!(
        all.precision() >= 0.9 && all.recall() >= 0.7,
        "precision {:.3}, recall {:.3}",
        all.precision(),
        all.recall()
    );
}
