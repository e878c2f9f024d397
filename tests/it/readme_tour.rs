//! The README's 60-second tour, run as written: its shell blocks, taken from README.md itself,
//! in bash against the real binary. `bash .ci/serve` becomes this build's `serve` on a free
//! port, `cargo run --release -q --` this build's binary, and the tour's address the port the
//! server printed; nothing else of the text changes. A tour that stops working, or whose
//! examples stop showing what they say, fails here.

use std::process::Command;

use serde_json::{json, Value};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README")
}

/// The ```sh blocks between `## 60-second tour` and the next `## ` heading.
fn tour_blocks(readme: &str) -> Vec<String> {
    let start = readme
        .find("## 60-second tour")
        .expect("the tour's heading");
    let rest = &readme[start + 3..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b[..b.find("```").expect("a closed block")].to_string())
        .collect()
}

/// The tour as one bash script: the server started in the background from the first block,
/// the blocks that talk to it, a Ctrl-C (SIGINT) where the README says to stop it, then the
/// offline block.
fn script(blocks: &[String]) -> String {
    let [start, tour, position, offline] = blocks else {
        panic!("the tour has four shell blocks, found {}", blocks.len());
    };
    let start = start.trim();
    assert_eq!(
        start,
        "AUDITMEM_ADMIN_TOKEN=dev-secret bash .ci/serve --insecure-short-admin-token"
    );
    let serve = start.replace(
        "bash .ci/serve",
        r#""$AUDITMEM_BIN" serve --listen 127.0.0.1:0"#,
    );
    let at_url = |block: &str| block.replace("http://127.0.0.1:8080", "$URL");
    format!(
        r#"set -euo pipefail
# `cargo run --release -q -- ARGS` is this build's binary with ARGS.
cargo() {{
  [ "$1 $2 $3 $4" = "run --release -q --" ] || {{ echo "unexpected: cargo $*" >&2; return 1; }}
  shift 4
  "$AUDITMEM_BIN" "$@"
}}
# One answer a line, so the test reads each.
curl() {{ command curl "$@"; echo; }}
{serve} > serve.out 2> serve.err &
SERVER=$!
until grep -q '^auditmem listening on ' serve.out; do kill -0 $SERVER; sleep 0.1; done
URL=$(sed -n 's/^auditmem listening on //p' serve.out)
echo "== tour"
{tour}
echo "== position"
{position}
echo "== stop"
kill -INT $SERVER
wait $SERVER
echo "== offline"
{offline}
echo "== done"
"#,
        tour = at_url(tour),
        position = at_url(position),
    )
}

/// The JSON answers printed between two `== ` markers.
fn answers(out: &str, section: &str) -> Vec<Value> {
    let from = out
        .find(&format!("== {section}\n"))
        .unwrap_or_else(|| panic!("no section {section}: {out}"));
    let rest = &out[from + section.len() + 4..];
    let section_text = &rest[..rest.find("\n== ").unwrap_or(rest.len())];
    section_text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

#[test]
fn the_readme_tour_runs_as_written() {
    let blocks = tour_blocks(&readme());
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new("bash")
        .arg("-c")
        .arg(script(&blocks))
        .current_dir(tmp.path())
        .env("AUDITMEM_BIN", crate::common::bin())
        .env(
            "AUDITMEM_MODEL_DIR",
            concat!(env!("CARGO_MANIFEST_DIR"), "/models/all-MiniLM-L6-v2"),
        )
        .env("AUDITMEM_LOG", "warn")
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let serve_err = std::fs::read_to_string(tmp.path().join("serve.err")).unwrap_or_default();
    assert!(
        out.status.success(),
        "the tour failed ({}):\n{stdout}\n{stderr}\nserver:\n{serve_err}",
        out.status
    );
    assert!(stdout.ends_with("== done\n"), "{stdout}");

    let tour = answers(&stdout, "tour");
    // Every answer is a success envelope but the one error the tour shows on purpose.
    let failures: Vec<&Value> = tour
        .iter()
        .filter(|v| v["success"] == json!(false))
        .collect();
    assert_eq!(
        failures,
        vec![
            &json!({"success": false, "code": 4000, "message": "page must be an integer of at least 1, got '0'", "data": null})
        ],
        "{stdout}"
    );
    // The move to Porto supersedes Lisbon, whose history shows both versions.
    let moved = tour
        .iter()
        .find(|v| v["data"]["content"] == json!("I moved to Porto"))
        .unwrap_or_else(|| panic!("no Porto memory: {stdout}"));
    let lisbon = moved["data"]["resolution"]["superseded"][0]
        .as_str()
        .unwrap_or_else(|| panic!("Porto supersedes nothing: {moved}"));
    let history = tour
        .iter()
        .find(|v| v["data"]["id"] == json!(lisbon) && v["data"]["versions"].is_array())
        .unwrap_or_else(|| panic!("no history of {lisbon}: {stdout}"));
    let versions = history["data"]["versions"]
        .as_array()
        .unwrap_or_else(|| panic!("{history}"));
    assert_eq!(versions.len(), 2, "{history}");
    assert_eq!(versions[0]["change"], json!("created"), "{history}");
    assert_eq!(
        versions[0]["content"],
        json!("I live in Lisbon"),
        "{history}"
    );
    assert_eq!(versions[1]["change"], json!("superseded"), "{history}");
    assert_eq!(
        versions[1]["superseded_by"], moved["data"]["id"],
        "{history}"
    );
    // The hybrid search finds the error code by keyword, first.
    let search = tour
        .iter()
        .find(|v| v["data"]["results"][0]["explain"]["search_mode"] == json!("hybrid"))
        .unwrap_or_else(|| panic!("no hybrid search: {stdout}"));
    let first = &search["data"]["results"][0];
    assert_eq!(
        first["content"],
        json!("My router shows error E1243"),
        "{search}"
    );
    assert_eq!(first["explain"]["keyword_rank"], json!(1), "{search}");
    assert!(
        first["explain"]["keyword_score"]
            .as_f64()
            .is_some_and(|s| s > 0.0),
        "{search}"
    );
    // Bob's erasure: its receipt verifies against the signed log, and his secret is found
    // no more (the last search of the tour answers nothing).
    assert!(stdout.contains("OK: erasure "), "{stdout}");
    let last_search = tour
        .iter()
        .rev()
        .find(|v| v["data"]["results"].is_array())
        .unwrap_or_else(|| panic!("no search: {stdout}"));
    assert_eq!(last_search["data"]["results"], json!([]), "{last_search}");
    // The proofs and the export verified, live and offline.
    for line in [
        "OK: the export is complete and exactly as the service wrote it",
        "OK: the chain is intact",
        "is record ",
        " checkpoint(s) checked",
        "replayed ",
    ] {
        assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    }
    assert!(!stdout.contains("NOTE: no --pubkey"), "{stdout}");
}
