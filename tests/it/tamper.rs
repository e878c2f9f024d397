//! Tampering with a stopped server's data dir is caught by `auditmem verify`, which names the
//! first bad seq and the kind of tampering; a clean log exits 0.

use crate::common;

use std::path::Path;

use auditmem::log::record::{pieces, seq_from_key, seq_key, Record};
use auditmem::log::{open_db, LOG_TREE};
use common::{cli, copy_dir, path_str, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// A stopped server's data dir holding tenants, keys and audit entries.
fn populated() -> Server {
    let mut s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    for i in 0..20 {
        let (status, _) = s.admin(
            Method::POST,
            "/admin/v1/audit/logs",
            Some(json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"i": i}}]})),
        );
        assert_eq!(status, 200);
    }
    assert_eq!(s.get("/v1/audit/logs", &key).0, 200);
    let (status, _) = s.admin(Method::POST, "/admin/v1/log/checkpoint", None);
    assert_eq!(status, 200);
    s.stop();
    s
}

fn verify_json(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["verify", "--data-dir", path_str(dir), "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = cli(&args, &[]);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|_| panic!("verify printed no JSON (exit {code}): {out}\n{err}"));
    (code, v)
}

fn first_failure(v: &Value) -> (u64, String) {
    let f = &v["report"]["failures"][0];
    (
        f["seq"].as_u64().expect("seq"),
        f["kind"].as_str().expect("kind").to_string(),
    )
}

/// Applies `tamper` to the `log` tree of a copy of the data dir.
fn tampered(base: &Path, name: &str, tamper: impl FnOnce(&sled::Tree)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join(name);
    copy_dir(base, &dir);
    let db = open_db(&dir).expect("open");
    let tree = db.open_tree(LOG_TREE).expect("tree");
    tamper(&tree);
    db.flush().expect("flush");
    drop(tree);
    drop(db);
    tmp
}

fn get(tree: &sled::Tree, seq: u64) -> Vec<u8> {
    tree.get(seq_key(seq))
        .expect("get")
        .expect("present")
        .to_vec()
}

#[test]
fn tampering_is_named_by_kind_and_seq() {
    let s = populated();
    let base = s.data_dir.clone();

    let (code, v) = verify_json(&base, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["clean"], json!(true));
    let records = v["report"]["records"].as_u64().expect("records");
    assert_eq!(records, 23, "{v}");
    assert_eq!(v["report"]["valid"], json!(records));

    // Flip one byte inside the event bytes of seq 10 (the end of the stored value).
    let t = tampered(&base, "flip", |tree| {
        let mut bytes = get(tree, 10);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x20;
        tree.insert(seq_key(10), bytes).expect("insert");
    });
    let (code, v) = verify_json(&t.path().join("flip"), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(first_failure(&v), (10, "hash_mismatch".into()));
    assert_eq!(v["report"]["valid"], json!(records - 1));

    let t = tampered(&base, "delete", |tree| {
        tree.remove(seq_key(7)).expect("remove");
    });
    let (code, v) = verify_json(&t.path().join("delete"), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_failure(&v), (7, "missing".into()));

    let t = tampered(&base, "swap", |tree| {
        let (a, b) = (get(tree, 5), get(tree, 12));
        tree.insert(seq_key(5), b).expect("insert");
        tree.insert(seq_key(12), a).expect("insert");
    });
    let (code, v) = verify_json(&t.path().join("swap"), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_failure(&v), (5, "out_of_order".into()));

    // A forged record sealed as seq 9 with a recomputed hash over the real seq 8; the genuine
    // records from 9 on are moved one seq later to make room.
    let t = tampered(&base, "insert", |tree| {
        let head = tree
            .last()
            .expect("last")
            .map(|(k, _)| u64::from_be_bytes(k.as_ref().try_into().expect("key")))
            .expect("head");
        for seq in (9..=head).rev() {
            tree.insert(seq_key(seq + 1), get(tree, seq))
                .expect("shift");
        }
        let prev = Record::decode(&get(tree, 8)).expect("decode");
        let forged = Record::seal(9, prev.ts_micros + 1, prev.hash, prev.event.clone());
        tree.insert(seq_key(9), forged.encode()).expect("insert");
    });
    let (code, v) = verify_json(&t.path().join("insert"), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(first_failure(&v), (9, "inserted".into()));

    let t = tampered(&base, "garbage", |tree| {
        tree.insert(seq_key(3), b"\xc1\xc1 definitely not a record".to_vec())
            .expect("insert");
    });
    let (code, v) = verify_json(&t.path().join("garbage"), &[]);
    assert_eq!(code, 1);
    assert_eq!(first_failure(&v), (3, "undecodable".into()));

    // Truncating the tail leaves a self-consistent chain: only the signed checkpoint sees it.
    let t = tampered(&base, "truncate", |tree| {
        let head = tree
            .last()
            .expect("last")
            .map(|(k, _)| u64::from_be_bytes(k.as_ref().try_into().expect("key")))
            .expect("head");
        for seq in head - 2..=head {
            tree.remove(seq_key(seq)).expect("remove");
        }
    });
    let dir = t.path().join("truncate");
    let (code, v) = verify_json(&dir, &[]);
    assert_eq!(
        code, 0,
        "without an anchor a truncated chain still links: {v}"
    );
    let cps = path_str(&s.checkpoints_file()).to_string();
    let (code, v) = verify_json(&dir, &["--checkpoints", &cps]);
    assert_eq!(code, 1, "{v}");
    let (seq, kind) = first_failure(&v);
    assert_eq!(kind, "truncated");
    assert_eq!(seq, records, "the checkpoint was signed at the head");
    assert_eq!(v["report"]["requested_to"], json!(records));
    assert_eq!(v["report"]["found_to"], json!(records - 3));

    // The clean log passes against the same checkpoints, pinned to the server's public key.
    let (code, pubkey, _) = cli(
        &[
            "admin",
            "pubkey",
            "--signing-key",
            path_str(&s.signing_key()),
        ],
        &[],
    );
    assert_eq!(code, 0);
    let (code, v) = verify_json(&base, &["--checkpoints", &cps, "--pubkey", pubkey.trim()]);
    assert_eq!(code, 0, "{v}");
    // ... and a checkpoint with a forged signature is named.
    let forged_cps = dir.with_file_name("forged.ndjson");
    let text = std::fs::read_to_string(&cps).expect("read");
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("cp"))
        .collect();
    let last = lines.last_mut().expect("a checkpoint");
    last["seq"] = json!(last["seq"].as_u64().expect("seq") - 1);
    std::fs::write(
        &forged_cps,
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>(),
    )
    .expect("write");
    let (code, v) = verify_json(&base, &["--checkpoints", path_str(&forged_cps)]);
    assert_eq!(code, 1);
    assert!(
        v["report"]["failures"]
            .as_array()
            .expect("failures")
            .iter()
            .any(|f| f["kind"] == json!("bad_signature")),
        "{v}"
    );

    // Text output names the first bad seq and the summary.
    let (code, out, _) = cli(
        &[
            "verify",
            "--data-dir",
            path_str(&t.path().join("truncate")),
            "--checkpoints",
            &cps,
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("FIRST BAD SEQ {records}: truncated tail")),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}/{} records valid", records - 3, records - 3)),
        "{out}"
    );
}

#[test]
fn verify_refuses_what_it_cannot_check_and_never_writes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("nothing-here");
    let (code, _, err) = cli(&["verify", "--data-dir", path_str(&missing)], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("not an auditmem data dir"), "{err}");
    assert!(!missing.exists(), "verify must not create the data dir");

    let s = Server::start();
    let (code, _, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--url"), "{err}");

    let (code, _, err) = cli(
        &[
            "verify",
            "--data-dir",
            path_str(&s.data_dir),
            "--expect-head",
            "nonsense",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
}

#[test]
fn live_verify_checks_streamed_records_and_the_expected_head() {
    let s = Server::start();
    let (tenant, _) = s.tenant_with_key("free");
    for _ in 0..5 {
        s.admin(Method::POST, "/admin/v1/audit/logs", Some(json!({"entries": [{"tenant_id": tenant, "action": "rag.query", "http_status": 200}]})));
    }
    let (seq, hash) = s.head();
    let env = [("AUDITMEM_ADMIN_TOKEN", common::ADMIN_TOKEN)];
    let head = format!("{seq}:{hash}");
    let (code, out, err) = cli(&["verify", "--url", &s.url, "--expect-head", &head], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{seq}/{seq} records valid")), "{out}");
    let wrong = format!("{seq}:{}", "ab".repeat(32));
    let (code, out, _) = cli(&["verify", "--url", &s.url, "--expect-head", &wrong], &env);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("head mismatch"), "{out}");
    let ahead = format!("{}:{hash}", seq + 5);
    let (code, out, _) = cli(&["verify", "--url", &s.url, "--expect-head", &ahead], &env);
    assert_eq!(code, 1);
    assert!(out.contains("truncated tail"), "{out}");
    let (code, _, err) = cli(
        &["verify", "--url", &s.url],
        &[("AUDITMEM_ADMIN_TOKEN", "wrong")],
    );
    assert_eq!(code, 2, "{err}");
}

/// One ingestion call of 100 entries is one group commit: its records are stored several to a
/// sled key. Verify, offline and live, counts and checks every record in them, and names a
/// record changed inside a chunk, or a chunk removed, by seq.
#[test]
fn records_stored_in_chunks_verify_and_their_tampering_is_named() {
    let mut s = Server::start();
    let (tenant, _) = s.tenant_with_key("business");
    let entries: Vec<Value> = (0..100)
        .map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"i": i}}))
        .collect();
    let (status, _) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(status, 200);
    let (head, _) = s.head();
    assert!(head > 100, "head {head}");
    let env = [("AUDITMEM_ADMIN_TOKEN", common::ADMIN_TOKEN)];
    let (code, out, err) = cli(&["verify", "--url", &s.url], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{head}/{head} records valid")),
        "{out}"
    );
    s.stop();
    let base = s.data_dir.clone();

    // The chunk layout is on disk: fewer keys than records, one key holding several.
    let chunk = {
        let db = open_db(&base).expect("open");
        let tree = db.open_tree(LOG_TREE).expect("tree");
        assert!((tree.len() as u64) < head - 90, "{} keys", tree.len());
        let (k, v) = tree
            .iter()
            .filter_map(Result::ok)
            .find(|(_, v)| pieces(v).count() >= 3)
            .expect("a chunk of several records");
        let key = seq_from_key(&k).expect("key");
        let second = pieces(&v).nth(1).expect("second").range;
        (key, second)
    };
    let (key, second) = chunk;

    let (code, v) = verify_json(&base, &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["report"]["records"], json!(head));
    assert_eq!(v["report"]["valid"], json!(head));

    let t = tampered(&base, "flip", |tree| {
        let mut bytes = get(tree, key);
        bytes[second.end - 1] ^= 0x20;
        tree.insert(seq_key(key), bytes).expect("insert");
    });
    let (code, v) = verify_json(&t.path().join("flip"), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(first_failure(&v), (key + 1, "hash_mismatch".into()));
    assert_eq!(v["report"]["valid"], json!(head - 1));

    let t = tampered(&base, "drop", |tree| {
        tree.remove(seq_key(key)).expect("remove");
    });
    let (code, v) = verify_json(&t.path().join("drop"), &[]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(first_failure(&v), (key, "missing".into()));
}
