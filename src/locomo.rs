//! LoCoMo (Maharana et al., ACL 2024) as a retrieval benchmark: the dataset's conversations
//! read into turns and questions, and turn-level recall@k tallied per category and mode.
//!
//! The measure is the one the development half's README fixes (docs/SEARCH.md, "LoCoMo"):
//! each dialogue turn is one memory (`"<speaker>: <text>"`, plus ` [shares a photo of
//! <caption>]` when the turn has a photo; memory_type `context`; metadata `{dia_id,
//! session}`), one `user_id` per conversation; every question of categories 1-4 is asked with
//! its conversation's `user_id` as filter; its recall@k is the share of its evidence turns
//! among the top k results. Category 5 (adversarial, no answer) is left out; so is a question
//! whose evidence names no turn (nothing to find), and [`Tally`] counts those apart.
//!
//! This module only reads and scores: `auditmem eval locomo` (`crate::cli::eval`) stores the
//! turns and asks the questions through a real server. The data is licensed CC BY-NC 4.0 and
//! is never part of the repository: it is read from the path the caller gives.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The depths recall is measured at.
pub const KS: [usize; 2] = [5, 10];

/// One dialogue turn, as the memory it becomes.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// `D<session>:<index>`, the id evidence names.
    pub dia_id: String,
    pub session: u32,
    /// The memory's content.
    pub content: String,
    /// Its session's date (`session_<n>_date_time`, read as UTC), as RFC 3339: the
    /// `occurred_at` the eval gives the memory when asked to (`--occurred-at`).
    pub occurred_at: Option<String>,
}

/// One question of categories 1-4.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub question: String,
    /// 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop (the dataset's own numbering).
    pub category: u8,
    /// The `dia_id`s of the turns that hold the answer, each once, in the order given.
    pub evidence: Vec<String>,
}

/// One conversation: its `sample_id` (the `user_id` of its memories), turns and questions.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    pub id: String,
    pub turns: Vec<Turn>,
    pub questions: Vec<Question>,
}

/// The category's name in the dataset's evaluation code.
pub fn category_name(category: u8) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}

/// The memory a turn becomes.
pub fn memory_content(speaker: &str, text: &str, caption: Option<&str>) -> String {
    match caption {
        Some(c) if !c.trim().is_empty() => format!("{speaker}: {text} [shares a photo of {c}]"),
        _ => format!("{speaker}: {text}"),
    }
}

/// A session's `date_time` (`"1:56 pm on 8 May, 2023"`) as RFC 3339 (UTC: the data names no
/// zone); `None` when it is not in that form.
pub fn session_time(raw: &str) -> Option<String> {
    let t = chrono::NaiveDateTime::parse_from_str(raw.trim(), "%I:%M %P on %d %B, %Y").ok()?;
    Some(t.and_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// The turn ids of a question's `evidence`: a few entries hold several (`"D8:6; D9:17"`), so
/// each is split on `;`, `,` and spaces, and what is not `D<n>:<i>` is dropped. Each id once.
pub fn parse_evidence(raw: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for entry in raw {
        for part in entry.split([';', ',', ' ']) {
            if is_dia_id(part) && !out.iter().any(|e| e == part) {
                out.push(part.to_string());
            }
        }
    }
    out
}

fn is_dia_id(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('D') else {
        return false;
    };
    let Some((session, index)) = rest.split_once(':') else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    digits(session) && digits(index)
}

#[derive(Deserialize)]
struct RawTurn {
    speaker: String,
    dia_id: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

#[derive(Deserialize)]
struct RawQa {
    question: String,
    #[serde(default)]
    evidence: Vec<String>,
    category: u8,
}

#[derive(Deserialize)]
struct RawSample {
    sample_id: String,
    conversation: serde_json::Map<String, Value>,
    qa: Vec<RawQa>,
}

/// Reads the dataset's JSON (a list of samples, `data/locomo10.json`'s format).
pub fn load(path: &Path) -> Result<Vec<Conversation>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("reading {}", path.display()))
}

/// [`load`] on the file's text.
pub fn parse(text: &str) -> Result<Vec<Conversation>> {
    let samples: Vec<RawSample> = serde_json::from_str(text).context("not LoCoMo's format")?;
    let mut out = Vec::with_capacity(samples.len());
    for s in samples {
        // Sessions in their number's order (`session_2` before `session_10`).
        let mut sessions: Vec<(u32, Vec<RawTurn>, Option<String>)> = Vec::new();
        for (key, value) in &s.conversation {
            let Some(n) = key
                .strip_prefix("session_")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let turns: Vec<RawTurn> = serde_json::from_value(value.clone())
                .with_context(|| format!("{}: {key}", s.sample_id))?;
            let date = s
                .conversation
                .get(&format!("session_{n}_date_time"))
                .and_then(Value::as_str)
                .and_then(session_time);
            sessions.push((n, turns, date));
        }
        sessions.sort_by_key(|(n, _, _)| *n);
        let turns = sessions
            .into_iter()
            .flat_map(|(n, turns, date)| {
                turns.into_iter().map(move |t| Turn {
                    content: memory_content(&t.speaker, &t.text, t.blip_caption.as_deref()),
                    dia_id: t.dia_id,
                    session: n,
                    occurred_at: date.clone(),
                })
            })
            .collect::<Vec<_>>();
        if turns.is_empty() {
            bail!("{}: no dialogue turn", s.sample_id);
        }
        let questions =
            s.qa.into_iter()
                .filter(|q| (1..=4).contains(&q.category))
                .map(|q| Question {
                    evidence: parse_evidence(&q.evidence),
                    question: q.question,
                    category: q.category,
                })
                .collect();
        out.push(Conversation {
            id: s.sample_id,
            turns,
            questions,
        });
    }
    Ok(out)
}

/// Recall@k of one ranking (turn ids, best first): the share of `evidence` among its first `k`.
pub fn recall_at(ranked: &[String], evidence: &[String], k: usize) -> f64 {
    if evidence.is_empty() {
        return 0.0;
    }
    let top = &ranked[..k.min(ranked.len())];
    let found = evidence.iter().filter(|e| top.contains(e)).count();
    found as f64 / evidence.len() as f64
}

/// Sums of recall@k per category, for one mode.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// category -> (questions scored, sum of recall@5, sum of recall@10).
    by_category: BTreeMap<u8, (usize, f64, f64)>,
    /// Questions left out: their evidence names no turn.
    pub unscored: usize,
}

/// Mean recall over some questions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Recall {
    pub questions: usize,
    #[serde(rename = "recall@5")]
    pub at5: f64,
    #[serde(rename = "recall@10")]
    pub at10: f64,
}

impl Tally {
    /// Adds one question's ranking.
    pub fn add(&mut self, q: &Question, ranked: &[String]) {
        if q.evidence.is_empty() {
            self.unscored += 1;
            return;
        }
        let e = self.by_category.entry(q.category).or_default();
        e.0 += 1;
        e.1 += recall_at(ranked, &q.evidence, KS[0]);
        e.2 += recall_at(ranked, &q.evidence, KS[1]);
    }

    /// Mean recall per category, in the category's order.
    pub fn categories(&self) -> Vec<(u8, Recall)> {
        self.by_category
            .iter()
            .map(|(&c, &(n, a, b))| (c, mean(n, a, b)))
            .collect()
    }

    /// Mean recall over every scored question (each question weighs the same).
    pub fn overall(&self) -> Recall {
        let (n, a, b) = self.by_category.values().fold((0, 0.0, 0.0), |acc, v| {
            (acc.0 + v.0, acc.1 + v.1, acc.2 + v.2)
        });
        mean(n, a, b)
    }
}

fn mean(n: usize, a: f64, b: f64) -> Recall {
    let d = n.max(1) as f64;
    Recall {
        questions: n,
        at5: a / d,
        at10: b / d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_split_and_what_is_no_turn_id_dropped() {
        let raw = vec![
            "D8:6; D9:17".to_string(),
            "D1:3".to_string(),
            "D1:3".to_string(),
            "D2".to_string(),
            "D:4, D10:11".to_string(),
            "d3:1".to_string(),
        ];
        assert_eq!(parse_evidence(&raw), ["D8:6", "D9:17", "D1:3", "D10:11"]);
    }

    #[test]
    fn a_turn_with_a_photo_names_its_caption() {
        assert_eq!(memory_content("Jon", "Look!", None), "Jon: Look!");
        assert_eq!(
            memory_content("Jon", "Look!", Some("a dog on a beach")),
            "Jon: Look! [shares a photo of a dog on a beach]"
        );
    }

    #[test]
    fn recall_is_the_share_of_the_evidence_in_the_top_k() {
        let ranked: Vec<String> = (1..=12).map(|i| format!("D1:{i}")).collect();
        let ev = vec!["D1:2".to_string(), "D1:7".to_string(), "D9:9".to_string()];
        assert!((recall_at(&ranked, &ev, 5) - 1.0 / 3.0).abs() < 1e-12);
        assert!((recall_at(&ranked, &ev, 10) - 2.0 / 3.0).abs() < 1e-12);
        // Fewer results than k: what is there counts.
        assert!((recall_at(&ranked[..1], &ev, 5)).abs() < 1e-12);
    }

    #[test]
    fn a_sample_reads_into_ordered_turns_and_scored_questions() {
        let text = r#"[{"sample_id": "conv-x",
            "conversation": {"speaker_a": "A", "speaker_b": "B",
                "session_10": [{"speaker": "B", "dia_id": "D10:1", "text": "late"}],
                "session_2": [{"speaker": "A", "dia_id": "D2:1", "text": "hi",
                               "blip_caption": "a cat"}],
                "session_2_date_time": "1:56 pm on 8 May, 2023"},
            "qa": [{"question": "q1", "answer": "a", "evidence": ["D2:1"], "category": 2},
                   {"question": "q5", "evidence": ["D2:1"], "category": 5},
                   {"question": "q3", "answer": 3, "evidence": [], "category": 3}]}]"#;
        let c = parse(text).expect("parsed");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].id, "conv-x");
        assert_eq!(
            c[0].turns,
            [
                Turn {
                    dia_id: "D2:1".into(),
                    session: 2,
                    content: "A: hi [shares a photo of a cat]".into(),
                    occurred_at: Some("2023-05-08T13:56:00Z".into()),
                },
                Turn {
                    dia_id: "D10:1".into(),
                    session: 10,
                    content: "B: late".into(),
                    occurred_at: None,
                }
            ]
        );
        assert_eq!(c[0].questions.len(), 2);
        let mut t = Tally::default();
        for q in &c[0].questions {
            t.add(q, &["D2:1".to_string()]);
        }
        assert_eq!(t.unscored, 1);
        assert_eq!(
            t.overall(),
            Recall {
                questions: 1,
                at5: 1.0,
                at10: 1.0
            }
        );
    }
}
