//! The conflict rules' and the chat judge's tests: the brief's examples, each table's
//! cases, the judge against a fake provider, and the measured precision and recall.

use super::*;

fn conflict(kind: ConflictKind) -> Relation {
    Relation::Conflict { kind }
}

#[test]
fn the_briefs_examples_hold() {
    use ConflictKind::*;
    let cases = [
        ("I moved to Porto", "I live in Lisbon", conflict(Home)),
        ("I work at Acme", "The user works at Globex", conflict(Work)),
        ("I'm vegan", "The user is vegetarian", conflict(Diet)),
        ("My name is Dana", "The user's name is Dana", Relation::Same),
        ("Vivo en Lisboa", "The user lives in Lisbon", Relation::Same),
        (
            "I'm allergic to peanuts",
            "I'm allergic to shellfish",
            Relation::Unrelated,
        ),
        (
            "I'm no longer allergic to peanuts",
            "I'm allergic to peanuts",
            conflict(Allergy),
        ),
        (
            "My sister lives in Lisbon",
            "I live in Porto",
            Relation::Unrelated,
        ),
        ("I prefer tea", "I prefer coffee", conflict(Preference)),
        (
            "I prefer tabs",
            "The user prefers spaces",
            conflict(Preference),
        ),
        (
            "Always answer in Spanish",
            "The user wants answers in French",
            conflict(AnswerLanguage),
        ),
        ("I like tea", "I like coffee", Relation::Unrelated),
        (
            "The weather is nice",
            "I live in Porto",
            Relation::Unrelated,
        ),
        (
            "The user is responsible for the German team",
            "The user wants answers in English",
            Relation::Unrelated,
        ),
        (
            "The user writes in German at work",
            "The user wants answers in English",
            Relation::Unrelated,
        ),
        (
            "Don't use tabs",
            "The user prefers spaces",
            Relation::Unrelated,
        ),
        (
            "Antworte bitte immer auf Deutsch",
            "The user wants answers in English",
            conflict(AnswerLanguage),
        ),
    ];
    for (new, old, want) in cases {
        assert_eq!(relate(new, old), want, "{new:?} vs {old:?}");
    }
}

#[test]
fn resolve_names_the_contradicted_or_the_duplicate() {
    let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
    let existing = [
        (a, "The user lives in Lisbon"),
        (b, "The user works at Globex"),
        (c, "Ich wohne in Lissabon"),
    ];
    assert_eq!(
        resolve("I moved to Porto", &existing),
        Resolution {
            supersedes: vec![a, c],
            duplicate_of: None
        }
    );
    assert_eq!(
        resolve("Moro em Lisboa", &existing),
        Resolution {
            supersedes: vec![],
            duplicate_of: Some(a)
        }
    );
    assert_eq!(resolve("I like jazz", &existing), Resolution::default());
    assert_eq!(resolve("I moved to Porto", &[]), Resolution::default());
}

#[test]
fn a_compound_memory_is_superseded_only_when_covered() {
    assert_eq!(
        relate("I moved to Porto", "My name is Dana and I live in Lisbon"),
        Relation::Unrelated
    );
    assert_eq!(
        relate(
            "My name is Dana and I live in Porto",
            "My name is Dana and I live in Lisbon"
        ),
        conflict(ConflictKind::Home)
    );
}

#[test]
fn odd_text_never_panics() {
    let texts = [
        "The user ís not allergic to peanuts",
        "The user is nót allergic to Straße",
        "Ich wohne nicht mehr in Köln",
        "The user works for a Ærø",
        "The user ",
        "the user is a",
        "I prefer",
        "",
        "ß",
        "The user is no longer ",
    ];
    for t in texts {
        // Every char boundary of each text, with a multi-byte letter inserted there.
        let mut cuts: Vec<usize> = t.char_indices().map(|(i, _)| i).collect();
        cuts.push(t.len());
        for at in cuts {
            let odd = format!("{}ẞí{}", &t[..at], &t[at..]);
            let _ = relate(&odd, "The user lives in Lisbon");
            let _ = relate(t, &odd);
        }
    }
    assert_eq!(
        relate(
            "The user ís not allergic to peanuts",
            "The user is allergic to peanuts"
        ),
        conflict(ConflictKind::Allergy)
    );
}

/// The chat judge against a real local HTTP server speaking the chat completions protocol.
mod judge {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use serde_json::Value;

    use super::super::*;
    use crate::extract::OpenAiChatConfig;

    /// What the server answers to its n-th request: after a pause, a status and a body.
    type Script = dyn Fn(usize) -> (Duration, u16, String) + Send + Sync;

    /// The bodies of the requests received, in order.
    type Seen = Arc<Mutex<Vec<String>>>;

    fn serve(script: Arc<Script>) -> (SocketAddr, Seen) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let seen: Seen = Arc::default();
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (script, log) = (script.clone(), log.clone());
                // One thread per connection: a slow answer must not hold up the retry.
                std::thread::spawn(move || answer(stream, &*script, &log));
            }
        });
        (addr, seen)
    }

    fn answer(mut stream: TcpStream, script: &Script, log: &Seen) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let Ok(n) = stream.read(&mut chunk) else {
                return;
            };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let Ok(n) = stream.read(&mut chunk) else {
                return;
            };
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
        let n = {
            let mut log = log.lock().expect("log");
            log.push(body);
            log.len() - 1
        };
        let (pause, status, reply) = script(n);
        std::thread::sleep(pause);
        let _ = write!(
            stream,
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        );
    }

    fn completion(content: &str) -> String {
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
            .to_string()
    }

    fn judge(addr: SocketAddr) -> ChatConflictJudge {
        let mut config = OpenAiChatConfig::new(format!("http://{addr}"), "judge-model");
        config.timeout = Duration::from_millis(400);
        config.retry_backoff = Duration::from_millis(10);
        ChatConflictJudge::new(config).expect("client")
    }

    fn always(status: u16, body: String) -> Arc<Script> {
        Arc::new(move |_| (Duration::ZERO, status, body.clone()))
    }

    const A: Uuid = Uuid::from_u128(0xa);
    const B: Uuid = Uuid::from_u128(0xb);

    fn batch() -> [(Uuid, &'static str); 2] {
        [
            (A, "The user lives in Lisbon"),
            (B, "The user works at Globex"),
        ]
    }

    #[test]
    fn the_model_decides_and_ids_outside_the_batch_are_ignored() {
        let content = format!(
            r#"{{"contradicts": ["{B}", "{}", "not-an-id", "{A}"], "duplicates": []}}"#,
            Uuid::from_u128(0xc)
        );
        let (addr, seen) = serve(always(200, completion(&content)));
        let got = judge(addr)
            .resolve("I moved to Porto", &batch(), &|| false)
            .expect("answer");
        assert_eq!(
            got,
            Resolution {
                supersedes: vec![A, B],
                duplicate_of: None
            }
        );
        let seen = seen.lock().expect("log");
        assert_eq!(seen.len(), 1);
        let sent: Value = serde_json::from_str(&seen[0]).expect("request is JSON");
        assert_eq!(sent["model"], "judge-model");
        assert_eq!(sent["response_format"]["type"], "json_object");
        assert_eq!(sent["messages"][0]["content"], CONFLICT_PROMPT);
        let user: Value = serde_json::from_str(
            sent["messages"][1]["content"]
                .as_str()
                .expect("user content"),
        )
        .expect("user content is JSON");
        assert_eq!(
            user,
            serde_json::json!({"new": "I moved to Porto", "existing": [
                {"id": A.to_string(), "content": "The user lives in Lisbon"},
                {"id": B.to_string(), "content": "The user works at Globex"}
            ]})
        );
    }

    #[test]
    fn a_duplicate_wins_and_supersedes_nothing() {
        let content =
            format!("```json\n{{\"contradicts\": [\"{A}\"], \"duplicates\": [\"{B}\"]}}\n```");
        let (addr, _) = serve(always(200, completion(&content)));
        let got = judge(addr)
            .resolve("I work at Globex", &batch(), &|| false)
            .expect("answer");
        assert_eq!(
            got,
            Resolution {
                supersedes: vec![],
                duplicate_of: Some(B)
            }
        );
    }

    #[test]
    fn malformed_answers_are_provider_errors_without_retry() {
        for content in [
            "A contradicts it".to_string(),
            r#"{"contradicts": []}"#.to_string(),
            r#"{"contradicts": "all", "duplicates": []}"#.to_string(),
            r#"{"contradicts": [1], "duplicates": []}"#.to_string(),
        ] {
            let (addr, seen) = serve(always(200, completion(&content)));
            let got = judge(addr).resolve("I moved to Porto", &batch(), &|| false);
            assert!(
                matches!(got, Err(ExtractError::Provider(_))),
                "{content}: {got:?}"
            );
            assert_eq!(seen.lock().expect("log").len(), 1, "{content}");
        }
        let (addr, _) = serve(always(200, "<html>".into()));
        let got = judge(addr).resolve("I moved to Porto", &batch(), &|| false);
        assert!(matches!(got, Err(ExtractError::Provider(_))), "{got:?}");
    }

    #[test]
    fn a_timeout_is_retried_once_then_a_provider_error() {
        let ok = completion(r#"{"contradicts": [], "duplicates": []}"#);
        let (addr, seen) = serve(Arc::new(move |_| (Duration::from_secs(3), 200, ok.clone())));
        let got = judge(addr).resolve("I moved to Porto", &batch(), &|| false);
        match got {
            Err(ExtractError::Provider(e)) => assert!(e.contains("after retry"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.lock().expect("log").len(), 2);
    }

    #[test]
    fn a_slow_first_answer_then_a_good_one_succeeds() {
        let content = format!(r#"{{"contradicts": ["{A}"], "duplicates": []}}"#);
        let ok = completion(&content);
        let (addr, seen) = serve(Arc::new(move |n| {
            let pause = if n == 0 {
                Duration::from_secs(3)
            } else {
                Duration::ZERO
            };
            (pause, 200, ok.clone())
        }));
        let got = judge(addr)
            .resolve("I moved to Porto", &batch(), &|| false)
            .expect("answer");
        assert_eq!(got.supersedes, vec![A]);
        assert_eq!(seen.lock().expect("log").len(), 2);
    }

    #[test]
    fn no_candidates_no_call_and_a_caller_gone_gets_no_retry() {
        let (addr, seen) = serve(always(500, "down".into()));
        let j = judge(addr);
        assert_eq!(
            j.resolve("I moved to Porto", &[], &|| false)
                .expect("no call"),
            Resolution::default()
        );
        assert_eq!(seen.lock().expect("log").len(), 0);
        let got = j.resolve("I moved to Porto", &batch(), &|| true);
        assert!(matches!(got, Err(ExtractError::Gone)), "{got:?}");
        assert_eq!(seen.lock().expect("log").len(), 1);
    }

    #[test]
    fn the_rule_resolver_is_resolve() {
        assert_eq!(
            RuleResolver
                .resolve("I moved to Porto", &batch(), &|| false)
                .expect("rules never fail"),
            Resolution {
                supersedes: vec![A],
                duplicate_of: None
            }
        );
    }
}

/// The rules measured on `tests/data/conflicts/pairs.jsonl` (docs/EXTRACTION.md,
/// "Contradictions and duplicates"): precision and recall of `conflict` and `same`,
/// overall, per kind and per language. Each line is `{"lang", "kind", "label", "new",
/// "old"}`, `label` one of `conflict`, `same`, `unrelated`.
mod eval {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::super::*;

    #[derive(Deserialize)]
    struct Pair {
        lang: String,
        kind: String,
        label: String,
        new: String,
        old: String,
    }

    /// Per label: pairs with that gold label, pairs predicted so, and both.
    #[derive(Default, Clone, Copy)]
    struct Tally {
        gold: usize,
        predicted: usize,
        correct: usize,
    }

    impl Tally {
        fn precision(&self) -> f64 {
            if self.predicted == 0 {
                1.0
            } else {
                self.correct as f64 / self.predicted as f64
            }
        }
        fn recall(&self) -> f64 {
            if self.gold == 0 {
                1.0
            } else {
                self.correct as f64 / self.gold as f64
            }
        }
        fn cells(&self) -> String {
            format!(
                "{} | {} | {} | {:.2} | {:.2}",
                self.gold,
                self.predicted,
                self.correct,
                self.precision(),
                self.recall()
            )
        }
    }

    #[derive(Default, Clone, Copy)]
    struct Row {
        pairs: usize,
        conflict: Tally,
        same: Tally,
    }

    impl Row {
        fn add(&mut self, gold: &str, predicted: &str) {
            self.pairs += 1;
            for (label, t) in [("conflict", &mut self.conflict), ("same", &mut self.same)] {
                t.gold += usize::from(gold == label);
                t.predicted += usize::from(predicted == label);
                t.correct += usize::from(gold == label && predicted == label);
            }
        }
        fn line(&self, name: &str) -> String {
            format!(
                "| {name} | {} | {} | {} |",
                self.pairs,
                self.conflict.cells(),
                self.same.cells()
            )
        }
    }

    fn label(r: Relation) -> &'static str {
        match r {
            Relation::Conflict { .. } => "conflict",
            Relation::Same => "same",
            Relation::Unrelated => "unrelated",
        }
    }

    fn pairs() -> Vec<Pair> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/conflicts/pairs.jsonl"
        );
        let text = std::fs::read_to_string(path).expect("the labelled set is readable");
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("each line is a labelled pair"))
            .collect()
    }

    const HEADER: &str = "| {} | pairs | conflict gold | predicted | correct | precision | recall | same gold | predicted | correct | precision | recall |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |";

    #[test]
    fn rules_on_the_labelled_pairs() {
        let pairs = pairs();
        let mut all = Row::default();
        let mut by_kind: BTreeMap<&str, Row> = BTreeMap::new();
        let mut by_lang: BTreeMap<&str, Row> = BTreeMap::new();
        let mut wrong_kind = 0;
        for p in &pairs {
            assert!(
                ["conflict", "same", "unrelated"].contains(&p.label.as_str()),
                "label {:?}",
                p.label
            );
            let got = relate(&p.new, &p.old);
            let predicted = label(got);
            if let Relation::Conflict { kind } = got {
                if p.label == "conflict" && kind.label() != p.kind {
                    wrong_kind += 1;
                }
            }
            if predicted != p.label {
                println!(
                    "MISS [{} {}] gold {} got {predicted}: {:?} vs {:?}",
                    p.lang, p.kind, p.label, p.new, p.old
                );
            }
            all.add(&p.label, predicted);
            by_kind.entry(&p.kind).or_default().add(&p.label, predicted);
            by_lang.entry(&p.lang).or_default().add(&p.label, predicted);
        }
        println!("{}", HEADER.replace("{}", "kind"));
        for (k, r) in &by_kind {
            println!("{}", r.line(k));
        }
        println!("{}", all.line("**all**"));
        println!();
        println!("{}", HEADER.replace("{}", "language"));
        for (l, r) in &by_lang {
            println!("{}", r.line(l));
        }
        println!(
            "{} pairs; conflicts found with another kind than labelled: {wrong_kind}",
            pairs.len()
        );
        assert!(pairs.len() >= 120, "{} pairs", pairs.len());
        assert_eq!(wrong_kind, 0);
        // The issue's floor, and recall floors at what the rules reach less a margin, so
        // that a regression fails the build.
        assert!(all.conflict.precision() >= 0.9, "{}", all.line("all"));
        assert!(all.same.precision() >= 0.9, "{}", all.line("all"));
        assert!(all.conflict.recall() >= 0.85, "{}", all.line("all"));
        assert!(all.same.recall() >= 0.9, "{}", all.line("all"));
        // Per kind and language too: a rule that breaks one kind must not hide behind the
        // others.
        for (name, r) in by_kind.iter().chain(&by_lang) {
            assert!(r.conflict.precision() >= 0.9, "{}", r.line(name));
            assert!(r.same.precision() >= 0.9, "{}", r.line(name));
        }
    }
}
