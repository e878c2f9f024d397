//! `auditmem eval locomo` on a slice of LoCoMo's development half: one conversation's turns
//! (conv-30: 369 turns, 81 questions of categories 1, 2 and 4) stored through a real server,
//! its questions asked in every search mode, and the recall figures it prints pinned (the data,
//! the model and the search are deterministic).
//!
//! A second slice, conv-41 (663 turns, 152 questions; 25 name a date), is stored with each turn's
//! session date as `occurred_at` (`--occurred-at`), and its default search's figures pinned
//! above the same slice's without dates: what a query naming a date gains from them.
//!
//! The data is licensed CC BY-NC 4.0 and lives outside the repository, beside it:
//! `../shared/data/locomo/locomo-dev.json` from the repository root, or the file
//! `AUDITMEM_LOCOMO_DATA` names. A clone without it (a fresh clone in an empty directory)
//! skips this test with a message on stderr and passes: there is nothing to measure.

use std::path::PathBuf;

use serde_json::Value;

use crate::common::cli;

fn data() -> Option<PathBuf> {
    let path = std::env::var_os("AUDITMEM_LOCOMO_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/locomo/locomo-dev.json")
        });
    path.is_file().then_some(path)
}

/// (mode, category or "overall", questions, recall@5, recall@10) of the report.
fn rows(report: &Value) -> Vec<(String, String, u64, f64, f64)> {
    let mut out = Vec::new();
    for mode in report["modes"].as_array().expect("modes") {
        let name = mode[0].as_str().expect("mode name");
        for row in mode[1].as_array().expect("rows") {
            let r = &row[1];
            out.push((
                name.to_string(),
                row[0].as_str().expect("category").to_string(),
                r["questions"].as_u64().expect("questions"),
                r["recall@5"].as_f64().expect("recall@5"),
                r["recall@10"].as_f64().expect("recall@10"),
            ));
        }
    }
    out
}

#[test]
fn locomo_slice_recall_per_mode_is_what_the_search_gives() {
    let Some(path) = data() else {
        eprintln!(
            "skipped: no LoCoMo data at ../shared/data/locomo/locomo-dev.json beside the \
             repository (or AUDITMEM_LOCOMO_DATA): nothing to measure"
        );
        return;
    };
    let path = path.to_string_lossy().to_string();
    let (code, out, err) = cli(
        &[
            "eval",
            "locomo",
            "--data",
            &path,
            "--conversation",
            "conv-30",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("[locomo] stored 369 turns"), "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(report["conversations"], serde_json::json!(["conv-30"]));
    assert_eq!(report["memories"], 369);
    assert_eq!(report["unscored"], 0);
    let got = rows(&report);
    let want = EXPECTED;
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(want) {
        let close = |a: f64, b: f64| (a - b).abs() < 5e-4;
        assert!(
            g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && close(g.3, w.3) && close(g.4, w.4),
            "got {g:?}, want {w:?}; all: {got:?}"
        );
    }
}

#[test]
fn locomo_slice_with_session_dates_lifts_the_questions_naming_a_date() {
    let Some(path) = data() else {
        eprintln!("skipped: no LoCoMo data beside the repository: nothing to measure");
        return;
    };
    let path = path.to_string_lossy().to_string();
    let (code, out, err) = cli(
        &[
            "eval",
            "locomo",
            "--data",
            &path,
            "--conversation",
            "conv-41",
            "--modes",
            "default",
            "--occurred-at",
            "--json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("[locomo] stored 663 turns"), "{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON report");
    let got = rows(&report);
    assert_eq!(got.len(), DATED.len(), "{got:?}");
    for (g, w) in got.iter().zip(DATED) {
        let close = |a: f64, b: f64| (a - b).abs() < 5e-4;
        assert!(
            g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && close(g.3, w.3) && close(g.4, w.4),
            "got {g:?}, want {w:?}; all: {got:?}"
        );
    }
    // Without `--occurred-at` (measured once, the same command without the flag) the default
    // search's overall figures on this slice are lower.
    let overall = got.iter().find(|r| r.1 == "overall").expect("overall");
    assert!(
        overall.3 > UNDATED_OVERALL.0 && overall.4 > UNDATED_OVERALL.1,
        "{overall:?}"
    );
}

/// conv-41 with dates, default search (mode, category, questions, r@5, r@10).
const DATED: [(&str, &str, u64, f64, f64); 5] = [
    ("default", "1 multi-hop", 31, 0.4204, 0.5452),
    ("default", "2 temporal", 27, 0.7407, 0.8519),
    ("default", "3 open-domain", 8, 0.1250, 0.1563),
    ("default", "4 single-hop", 86, 0.7674, 0.8488),
    ("default", "overall", 152, 0.6581, 0.7510),
];

/// conv-41 without dates, default search: overall (r@5, r@10).
const UNDATED_OVERALL: (f64, f64) = (0.6450, 0.7181);

/// The figures of conv-30 (mode, category, questions, r@5, r@10).
const EXPECTED: [(&str, &str, u64, f64, f64); 16] = [
    ("default", "1 multi-hop", 11, 0.2909, 0.3364),
    ("default", "2 temporal", 26, 0.9615, 0.9615),
    ("default", "4 single-hop", 44, 0.4773, 0.6250),
    ("default", "overall", 81, 0.6074, 0.6938),
    ("semantic", "1 multi-hop", 11, 0.0455, 0.1212),
    ("semantic", "2 temporal", 26, 0.4615, 0.6154),
    ("semantic", "4 single-hop", 44, 0.3523, 0.4659),
    ("semantic", "overall", 81, 0.3457, 0.4671),
    ("keyword", "1 multi-hop", 11, 0.2909, 0.3667),
    ("keyword", "2 temporal", 26, 0.9231, 0.9615),
    ("keyword", "4 single-hop", 44, 0.5000, 0.5909),
    ("keyword", "overall", 81, 0.6074, 0.6794),
    ("hybrid", "1 multi-hop", 11, 0.2909, 0.3364),
    ("hybrid", "2 temporal", 26, 0.9615, 0.9615),
    ("hybrid", "4 single-hop", 44, 0.4773, 0.6250),
    ("hybrid", "overall", 81, 0.6074, 0.6938),
];
