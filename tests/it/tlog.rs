//! The transparency log end to end (docs/VERIFYING.md): a tenant's inclusion proofs,
//! consistency proofs between signed checkpoints, the C2SP hash tiles, and `verify`'s checks of
//! the Merkle roots, each checked by our CLI and by an independent implementation, Go's
//! `golang.org/x/mod/sumdb/{note,tlog}` (tests/go/tlogcheck), and each tampered copy refused
//! by both.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use auditmem::log::record::{seq_key, Record};
use auditmem::log::{open_db, LOG_TREE};
use auditmem::tlog::proof::{check_inclusion, InclusionProof};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use common::{assert_error, cli, copy_dir, get_text, path_str, Server};
use reqwest::Method;
use serde_json::{json, Value};

const ORIGIN: &str = "auditmem.localhost/log";

/// The Go checker, built once per test binary in GOPATH mode against Debian's x/mod.
fn go_checker() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let out = tmp.join("tlogcheck");
        let status = Command::new("go")
            .args(["build", "-o", path_str(&out), "."])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/go/tlogcheck"))
            .env("GO111MODULE", "off")
            .env("GOPATH", "/usr/share/gocode")
            .env("GOCACHE", tmp.join("gocache"))
            .env("GOFLAGS", "")
            .status()
            .expect(
                "running go: install golang-go and golang-golang-x-mod-dev (.ci/setup-tests does)",
            );
        assert!(status.success(), "building tests/go/tlogcheck failed");
        out
    })
}

/// Runs the Go checker: (exit code, its stdout).
fn go(args: &[&str]) -> (i32, String) {
    let out = Command::new(go_checker())
        .args(args)
        .output()
        .expect("run tlogcheck");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn verifier_key(s: &Server) -> String {
    let (status, v) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["origin"], json!(ORIGIN));
    let key = v["data"]["verifier_key"].as_str().expect("verifier_key");
    assert!(key.starts_with(&format!("{ORIGIN}+")), "{key}");
    key.to_string()
}

/// `GET /log/checkpoint`, unauthenticated: the latest signed note.
fn checkpoint_note(s: &Server) -> String {
    let r = s
        .raw()
        .get(format!("{}/log/checkpoint", s.url))
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().expect("ct"),
        "text/plain; charset=utf-8"
    );
    r.text().expect("text")
}

fn note_size(note: &str) -> u64 {
    note.lines()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .expect("size line")
}

/// Signs a checkpoint now (admin) and returns its note.
fn sign_now(s: &Server) -> String {
    let (status, v) = s.admin(Method::POST, "/admin/v1/log/checkpoint", None);
    assert_eq!(status, 200, "{v}");
    let note = v["data"]["note"].as_str().expect("note").to_string();
    assert_eq!(note_size(&note), v["data"]["seq"].as_u64().expect("seq"));
    // Published with whatever cosignatures witnesses returned after the log's own line.
    assert!(checkpoint_note(s).starts_with(&note));
    note
}

/// Ingests `n` entries for `tenant`, one call (and so one log record) each.
fn ingest_one_by_one(s: &Server, tenant: &str, n: usize) {
    for i in 0..n {
        let (status, v) = s.admin(
            Method::POST,
            "/admin/v1/audit/logs",
            Some(json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"i": i}}]})),
        );
        assert_eq!(status, 200, "{v}");
    }
}

/// `GET /v1/audit/logs/{id}/proof{query}`'s data.
/// The verifier key of a new signing key under `origin`, made by `admin pubkey` in `dir`.
fn new_log_key(dir: &Path, origin: &str) -> String {
    let key = dir.join(format!("{}.key", origin.replace('/', "_")));
    let (code, out, err) = cli(
        &[
            "admin",
            "pubkey",
            "--signing-key",
            path_str(&key),
            "--origin",
            origin,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

fn proof_of(s: &Server, key: &str, id: &str, query: &str) -> Value {
    let (status, v) = s.get(&format!("/v1/audit/logs/{id}/proof{query}"), key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["success"], json!(true));
    v["data"].clone()
}

fn cli_verify(args: &[&str]) -> (i32, String) {
    let mut all = vec!["verify"];
    all.extend_from_slice(args);
    let (code, out, err) = cli(&all, &[]);
    (code, format!("{out}{err}"))
}

/// Flips the low bit of the first byte of a base64 hash.
fn flip_b64(h: &str) -> String {
    let mut b = B64.decode(h).expect("b64");
    b[0] ^= 1;
    B64.encode(b)
}

#[test]
fn tenant_proofs_consistency_and_tiles_verify_here_and_in_go() {
    let s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ta, ka) = s.tenant_with_key("business");
    let (tb, kb) = s.tenant_with_key("business");
    let vkey = verifier_key(&s);
    common::ingest_filler(&s, &ta, 600);
    common::ingest_filler(&s, &tb, 50);

    // Every entry of tenant A verifies against the signed checkpoint it comes with.
    let entries = common::all_audit_entries(&s, &ka);
    assert!(entries.len() >= 600, "{}", entries.len());
    let mut some_proof = None;
    for e in &entries {
        let id = e["id"].as_str().expect("id");
        let p = proof_of(&s, &ka, id, "");
        let parsed: InclusionProof = serde_json::from_value(p.clone()).expect("proof shape");
        assert_eq!(parsed.audit_id.to_string(), id);
        assert_eq!(parsed.leaf_index, parsed.seq - 1);
        // ceil(log2(n)) hashes at most: 32 bytes each.
        assert!(parsed.inclusion.len() <= 64 - (parsed.tree_size - 1).leading_zeros() as usize);
        let ok = check_inclusion(&parsed, &vkey, Vec::new(), 0)
            .unwrap_or_else(|e| panic!("proof of {id}: {e}"));
        assert_eq!(ok.origin, ORIGIN);
        some_proof = Some(p);
    }
    let p = some_proof.expect("a proof");
    let file = write(dir.path(), "proof.json", &p.to_string());
    let (code, out) = cli_verify(&["--proof", path_str(&file), "--pubkey", &vkey]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("OK: audit entry "), "{out}");
    // The hex key works too: the note's origin names it.
    let (status, v) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    assert_eq!(status, 200);
    let hex_key = v["data"]["public_key"].as_str().expect("hex").to_string();
    let (code, out) = cli_verify(&["--proof", path_str(&file), "--pubkey", &hex_key]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        go(&["inclusion", path_str(&file), &vkey]),
        (0, "ok\n".into())
    );

    // Each tampered copy is refused by both, ours naming what is wrong.
    let tampered = |field: &str, value: Value, expect: &str| {
        let mut t = p.clone();
        t[field] = value;
        let f = write(dir.path(), "tampered.json", &t.to_string());
        let (code, out) = cli_verify(&["--proof", path_str(&f), "--pubkey", &vkey]);
        assert_eq!(code, 1, "{field}: {out}");
        assert!(out.contains(expect), "{field}: {out}");
        let (code, out) = go(&["inclusion", path_str(&f), &vkey]);
        (code, out)
    };
    let mut hash = p["record_hash"].as_str().expect("hash").to_string();
    hash.replace_range(0..1, if hash.starts_with('0') { "1" } else { "0" });
    let (code, _) = tampered(
        "record_hash",
        json!(hash),
        "the leaf does not match its record",
    );
    assert_eq!(code, 1);
    let mut path: Vec<Value> = p["inclusion"].as_array().expect("path").clone();
    path[0] = json!(flip_b64(path[0].as_str().expect("hash")));
    let (code, _) = tampered("inclusion", json!(path), "wrong root");
    assert_eq!(code, 1);
    let cp = p["checkpoint"].as_str().expect("checkpoint");
    let size = note_size(cp);
    let forged = cp.replacen(&format!("\n{size}\n"), &format!("\n{}\n", size + 1), 1);
    let (code, _) = tampered("checkpoint", json!(forged), "bad signature");
    assert_eq!(code, 1);
    // The record's bytes: changed, they no longer hash to what they say (Go checks the leaf,
    // which does not include the bytes; ours starts from them).
    let mut rec = B64
        .decode(p["record"].as_str().expect("record"))
        .expect("b64");
    let last = rec.len() - 1;
    rec[last] ^= 0x20;
    let f = {
        let mut t = p.clone();
        t["record"] = json!(B64.encode(&rec));
        write(dir.path(), "record.json", &t.to_string())
    };
    let (code, out) = cli_verify(&["--proof", path_str(&f), "--pubkey", &vkey]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the record does not match its hash"), "{out}");
    // A checkpoint signed by another key than the pinned one.
    let other = new_log_key(dir.path(), ORIGIN);
    let other = other.as_str();
    let (code, out) = cli_verify(&["--proof", path_str(&file), "--pubkey", other]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not signed by the pinned key"), "{out}");
    assert_eq!(go(&["inclusion", path_str(&file), other]).0, 1);
    // Missing the pinned key: refused before anything is checked.
    assert_eq!(cli_verify(&["--proof", path_str(&file)]).0, 2);

    // Another tenant's entry, an unknown one, a malformed id: all the same 404.
    let b_entry = common::all_audit_entries(&s, &kb)
        .into_iter()
        .next()
        .expect("entry of B");
    let b_id = b_entry["id"].as_str().expect("id");
    assert_error(
        &s.get(&format!("/v1/audit/logs/{b_id}/proof"), &ka),
        404,
        4040,
    );
    assert_error(
        &s.get(
            "/v1/audit/logs/6f1c0d4e-1111-4222-8333-944455556666/proof",
            &ka,
        ),
        404,
        4040,
    );
    assert_error(&s.get("/v1/audit/logs/not-a-uuid/proof", &ka), 404, 4040);
    // tree_size: below the entry, beyond the tree, malformed.
    let seq = p["seq"].as_u64().expect("seq");
    let id = p["audit_id"].as_str().expect("id");
    assert_error(
        &s.get(
            &format!("/v1/audit/logs/{id}/proof?tree_size={}", seq - 1),
            &ka,
        ),
        400,
        4000,
    );
    assert_error(
        &s.get(
            &format!("/v1/audit/logs/{id}/proof?tree_size=999999999"),
            &ka,
        ),
        400,
        4000,
    );
    assert_error(
        &s.get(&format!("/v1/audit/logs/{id}/proof?tree_size=ten"), &ka),
        400,
        4000,
    );
    // At a signed size, that checkpoint comes with the proof.
    let old = sign_now(&s);
    let n1 = note_size(&old);
    let at = proof_of(&s, &ka, id, &format!("?tree_size={n1}"));
    assert_eq!(at["tree_size"], json!(n1));
    assert_eq!(at["checkpoint"], json!(old));

    // Consistency between two signed checkpoints.
    common::ingest_filler(&s, &ta, 300);
    let new = sign_now(&s);
    let n2 = note_size(&new);
    assert!(n2 > n1 + 300);
    let (status, c) = s.get(&format!("/v1/audit/consistency?from={n1}&to={n2}"), &kb);
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["data"]["from"], json!(n1));
    assert_eq!(c["data"]["to"], json!(n2));
    assert_eq!(c["data"]["checkpoint"], json!(new));
    let (status, admin_c) = s.admin(
        Method::GET,
        &format!("/admin/v1/log/consistency?from={n1}&to={n2}"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(admin_c["data"], c["data"]);
    let (old_f, new_f) = (
        write(dir.path(), "old.note", &old),
        write(dir.path(), "new.note", &new),
    );
    let proof_f = write(dir.path(), "consistency.json", &c.to_string());
    let consistency = |proof: &Path, old: &Path, new: &Path| {
        cli_verify(&[
            "--consistency",
            path_str(old),
            path_str(new),
            "--consistency-proof",
            path_str(proof),
            "--pubkey",
            &vkey,
        ])
    };
    let (code, out) = consistency(&proof_f, &old_f, &new_f);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("is a prefix of the tree of size"), "{out}");
    let go_consistency = |proof: &Path, old: &Path, new: &Path| {
        go(&[
            "consistency",
            path_str(old),
            path_str(new),
            path_str(proof),
            &vkey,
        ])
    };
    assert_eq!(go_consistency(&proof_f, &old_f, &new_f), (0, "ok\n".into()));
    // A tampered proof, and a fork: a checkpoint of the same size as `new` signed by the same
    // key over another root (a log showing two views), are refused by both.
    let mut bad = c.clone();
    let h = bad["data"]["proof"][0].as_str().expect("hash").to_string();
    bad["data"]["proof"][0] = json!(flip_b64(&h));
    let bad_f = write(dir.path(), "bad.json", &bad.to_string());
    let (code, out) = consistency(&bad_f, &old_f, &new_f);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("inconsistent checkpoints"), "{out}");
    assert_eq!(go_consistency(&bad_f, &old_f, &new_f).0, 1);
    let key = auditmem::log::checkpoint::load_or_create_key(&s.signing_key()).expect("key");
    let signer = auditmem::tlog::note::signer(ORIGIN, &key).expect("signer");
    let fork =
        auditmem::tlog::note::sign(&signer, n2, &tlog_tiles::Hash([9; 32])).expect("sign fork");
    let fork_f = write(dir.path(), "fork.note", &fork);
    let (code, out) = consistency(&proof_f, &old_f, &fork_f);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("inconsistent checkpoints"), "{out}");
    assert_eq!(go_consistency(&proof_f, &old_f, &fork_f).0, 1);
    // Bad queries.
    for q in [
        "".to_string(),
        "from=x".to_string(),
        format!("from={n2}&to={n1}"),
        "from=1&to=99999999".to_string(),
    ] {
        assert_error(
            &s.get(&format!("/v1/audit/consistency?{q}"), &ka),
            400,
            4000,
        );
    }

    // The tiles: Go's tlog follows the log from them and checks each against the note.
    let base = format!("{}/log", s.url);
    assert_eq!(
        go(&["tiles", &base, path_str(&new_f), &vkey]),
        (0, "ok\n".into())
    );
    let r = s
        .raw()
        .get(format!("{base}/tile/0/000"))
        .send()
        .expect("tile");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["cache-control"].to_str().expect("cc"),
        "public, max-age=31536000, immutable"
    );
    assert_eq!(r.bytes().expect("bytes").len(), 256 * 32);
    for path in [
        "tile/0/000.p/0",
        "tile/0/000.p/256",
        "tile/entries/000",
        "tile/0/x999/000",
        "tile/9/000",
        "tile/zero/000",
    ] {
        let (status, v) = get_text(&s, &format!("/log/{path}"), "");
        assert_eq!(status, 404, "{path}: {v}");
    }
}

#[test]
fn verify_checks_roots_and_a_record_changed_on_disk_fails_its_proof() {
    let mut s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ta, ka) = s.tenant_with_key("business");
    ingest_one_by_one(&s, &ta, 12);
    let vkey = verifier_key(&s);
    let note = sign_now(&s);
    let entries = common::all_audit_entries(&s, &ka);
    let id = entries
        .iter()
        .find(|e| e["action"] == json!("gateway.chat"))
        .and_then(|e| e["id"].as_str())
        .expect("an ingested entry")
        .to_string();
    let seq = proof_of(&s, &ka, &id, "")["seq"].as_u64().expect("seq");
    let (status, before) = s.admin(
        Method::GET,
        &format!("/admin/v1/log/consistency?from=0&to={}", note_size(&note)),
        None,
    );
    assert_eq!(status, 200);
    s.stop();
    let cps = s.checkpoints_file();
    let (_, hex_key, _) = cli(
        &[
            "admin",
            "pubkey",
            "--signing-key",
            path_str(&s.signing_key()),
        ],
        &[],
    );
    let hex_key = hex_key.trim().to_string();
    let verify_dir = |data: &Path, cps: &Path| {
        let (code, out, err) = cli(
            &[
                "verify",
                "--data-dir",
                path_str(data),
                "--checkpoints",
                path_str(cps),
                "--pubkey",
                &hex_key,
                "--json",
            ],
            &[],
        );
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
        (code, v)
    };
    let (code, v) = verify_dir(&s.data_dir, &cps);
    assert_eq!(code, 0, "{v}");

    // A checkpoint whose Merkle root is not the records': named as a wrong root.
    let text = std::fs::read_to_string(&cps).expect("checkpoints");
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect();
    let last = lines.last_mut().expect("a checkpoint");
    let root = last["root"].as_str().expect("root").to_string();
    last["root"] = json!(flip_b64(&root));
    let bad_cps = write(
        dir.path(),
        "cps.ndjson",
        &lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    );
    let (code, v) = verify_dir(&s.data_dir, &bad_cps);
    assert_eq!(code, 1, "{v}");
    let kinds: Vec<&str> = v["report"]["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert_eq!(kinds, vec!["root_mismatch"], "{v}");

    // `replay` rebuilds the same tree.
    let replayed = dir.path().join("replayed");
    common::replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on(&replayed);
    let (status, after) = r.admin(
        Method::GET,
        &format!("/admin/v1/log/consistency?from=0&to={}", note_size(&note)),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(after["data"]["to_root"], before["data"]["to_root"]);
    drop(r);

    // The entry's record re-sealed over other content (its own hash recomputed): the chain
    // breaks after it, and its proof no longer reaches the signed root.
    let changed = dir.path().join("changed");
    copy_dir(&s.data_dir, &changed);
    {
        let db = open_db(&changed).expect("open");
        let tree = db.open_tree(LOG_TREE).expect("tree");
        let bytes = tree
            .get(seq_key(seq))
            .expect("get")
            .expect("one record a key");
        let r = Record::decode(&bytes).expect("decode");
        let mut event = r.event.clone();
        let last = event.len() - 1;
        event[last] ^= 0x01;
        let forged = Record::seal(r.seq, r.ts_micros, r.prev, event);
        tree.insert(seq_key(seq), forged.encode()).expect("insert");
        db.flush().expect("flush");
    }
    let (code, v) = verify_dir(&changed, &cps);
    assert_eq!(code, 1, "{v}");
    let failures: Vec<(String, u64)> = v["report"]["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().expect("kind").to_string(),
                f["seq"].as_u64().expect("seq"),
            )
        })
        .collect();
    assert!(failures.contains(&("broken_link".into(), seq + 1)), "{v}");
    // Every checkpoint from the changed record on signs another root than the records give.
    let roots: Vec<u64> = failures
        .iter()
        .filter(|(k, _)| k == "root_mismatch")
        .map(|(_, s)| *s)
        .collect();
    assert!(!roots.is_empty() && roots.iter().all(|s| *s >= seq), "{v}");
    let t = Server::start_on(&changed);
    let mut p = proof_of(&t, &ka, &id, &format!("?tree_size={}", note_size(&note)));
    p["checkpoint"] = json!(note);
    let f = write(dir.path(), "changed.json", &p.to_string());
    let (code, out) = cli_verify(&["--proof", path_str(&f), "--pubkey", &vkey]);
    assert_eq!(code, 1, "{out}");
    // The tree's tail past its last complete tile is rebuilt from the (changed) log at start,
    // so the served root differs from the signed one; either way the proof is refused.
    assert!(out.contains("FAILED: wrong root"), "{out}");
    assert_eq!(go(&["inclusion", path_str(&f), &vkey]).0, 1);
}

/// Polls `GET /log/checkpoint` until the note of `size` carries `lines` signature lines.
fn wait_cosigned(s: &Server, size: u64, lines: usize) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let note = checkpoint_note(s);
        let sigs = note.split("\n\n").nth(1).map_or(0, |b| b.lines().count());
        if note_size(&note) == size && sigs >= lines {
            return note;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not cosigned in time: {note}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_service_pushes_checkpoints_to_witnesses_and_publishes_their_cosignatures() {
    let mut s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ta, ka) = s.tenant_with_key("business");
    ingest_one_by_one(&s, &ta, 3);
    let vkey = verifier_key(&s);
    // One witness of this log, and one that witnesses another log only (it answers 404).
    let w = crate::witness::Witness::start(&dir.path().join("w1"), &[format!("{ORIGIN}={vkey}")]);
    let other = new_log_key(dir.path(), "other.example/log");
    let stranger = crate::witness::Witness::start(
        &dir.path().join("w2"),
        &[format!("other.example/log={other}")],
    );
    s.extra.extend([
        "--witness".to_string(),
        w.url.clone(),
        "--witness".to_string(),
        stranger.url.clone(),
    ]);
    s.restart();

    let first = sign_now(&s);
    let cosigned = wait_cosigned(&s, note_size(&first), 2);
    assert!(cosigned.starts_with(&first), "{cosigned}");
    assert!(
        cosigned.contains("\n\u{2014} witness.test/w1 "),
        "{cosigned}"
    );
    let note_f = write(dir.path(), "cosigned.note", &cosigned);
    assert_eq!(
        go(&["cosignature", path_str(&note_f), &w.vkey]),
        (0, "ok\n".into())
    );
    assert_eq!(go(&["cosignature", path_str(&note_f), &stranger.vkey]).0, 1);

    // The log grows: the witness cosigns again, from the size it cosigned (a consistency proof).
    ingest_one_by_one(&s, &ta, 2);
    let second = sign_now(&s);
    assert!(note_size(&second) > note_size(&first));
    let cosigned = wait_cosigned(&s, note_size(&second), 2);

    // A proof of an entry carries the cosigned checkpoint; a quorum of the witness verifies.
    let id = common::all_audit_entries(&s, &ka)
        .iter()
        .find(|e| e["action"] == json!("gateway.chat"))
        .and_then(|e| e["id"].as_str())
        .expect("an entry")
        .to_string();
    let p = proof_of(&s, &ka, &id, &format!("?tree_size={}", note_size(&second)));
    assert_eq!(p["checkpoint"], json!(cosigned));
    // verify --proof FILE with these witness keys and this quorum.
    let with_witnesses = |f: &Path, keys: &[&str], quorum: &str| {
        let mut args = vec!["--proof", path_str(f), "--pubkey", vkey.as_str()];
        for k in keys {
            args.extend(["--witness-key", k]);
        }
        args.extend(["--witnesses", quorum]);
        cli_verify(&args)
    };
    let f = write(dir.path(), "proof.json", &p.to_string());
    let (code, out) = with_witnesses(&f, &[&w.vkey], "1");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("; cosigned by witness.test/w1"), "{out}");
    // Two required, one there: refused, saying so.
    let (code, out) = with_witnesses(&f, &[&w.vkey, &stranger.vkey], "2");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("missing cosignatures: 1 valid witness cosignature(s), 2 required"),
        "{out}"
    );
    // A cosignature's signature bytes altered (its key ID kept): named as a bad cosignature.
    let line = cosigned
        .lines()
        .find(|l| l.starts_with("\u{2014} witness.test/w1 "))
        .expect("the witness's line");
    let mut sig = B64
        .decode(line.rsplit(' ').next().expect("base64"))
        .expect("b64");
    let last = sig.len() - 1;
    sig[last] ^= 1;
    let altered = format!("\u{2014} witness.test/w1 {}", B64.encode(&sig));
    let mut forged = p.clone();
    forged["checkpoint"] = json!(cosigned.replace(line, &altered));
    let f = write(dir.path(), "forged.json", &forged.to_string());
    let (code, out) = with_witnesses(&f, &[&w.vkey], "1");
    assert!(
        out.contains("bad cosignature: the cosignature by witness.test/w1 does not verify"),
        "{out}"
    );
    assert_eq!(code, 1, "{out}");
}

#[test]
fn an_exports_row_proofs_verify_offline_against_one_checkpoint() {
    let s = Server::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ta, ka) = s.tenant_with_key("business");
    let (_, kb) = s.tenant_with_key("business");
    common::ingest_filler(&s, &ta, 500);
    let vkey = verifier_key(&s);
    let mut files = Vec::new();
    for format in ["csv", "json"] {
        let (status, v) = s.post("/v1/audit/logs/export", &ka, json!({ "format": format }));
        assert_eq!(status, 200, "{v}");
        let id = v["data"]["export_id"]
            .as_str()
            .expect("export_id")
            .to_string();
        let done = s.wait_export_status(&ka, &id, "completed");
        let rows = done["records"].as_u64().expect("records");
        assert!(rows >= 500, "{done}");
        let (status, _, _, body) = s.download_export(&ka, &id);
        assert_eq!(status, 200);
        let export = dir.path().join(format!("export.{format}"));
        std::fs::write(&export, &body).expect("write");
        let r = s
            .raw()
            .get(format!("{}/v1/audit/logs/export/{id}/proofs", s.url))
            .bearer_auth(&ka)
            .send()
            .expect("send");
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            r.headers()["content-type"].to_str().expect("ct"),
            "application/x-ndjson"
        );
        let text = r.text().expect("text");
        assert_eq!(text.lines().count() as u64, rows + 1);
        let proofs = write(dir.path(), &format!("proofs.{format}.ndjson"), &text);
        let (code, out) = cli_verify(&[
            "--export-proofs",
            path_str(&proofs),
            "--export",
            path_str(&export),
            "--pubkey",
            &vkey,
        ]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.starts_with(&format!("OK: {rows} rows of export {id}, the rows of ")),
            "{out}"
        );
        // Another tenant cannot read them.
        assert_error(
            &s.get(&format!("/v1/audit/logs/export/{id}/proofs"), &kb),
            404,
            4040,
        );
        files.push((export, text, rows));
    }

    let (export, text, rows) = &files[0];
    let lines: Vec<&str> = text.lines().collect();
    // One row's proof with the head's checkpoint is an ordinary inclusion proof: Go checks it.
    let head: Value = serde_json::from_str(lines[0]).expect("head");
    let mut one: Value = serde_json::from_str(lines[7]).expect("row");
    one["checkpoint"] = head["checkpoint"].clone();
    let one_f = write(dir.path(), "one.json", &one.to_string());
    assert_eq!(
        go(&["inclusion", path_str(&one_f), &vkey]),
        (0, "ok\n".into())
    );

    let check = |proofs: &str, export: &Path| {
        let f = write(dir.path(), "tampered.ndjson", proofs);
        cli_verify(&[
            "--export-proofs",
            path_str(&f),
            "--export",
            path_str(export),
            "--pubkey",
            &vkey,
        ])
    };
    // A row's proof dropped.
    let dropped: String = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let (code, out) = check(&dropped, export);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "the head says {rows} rows, {} proofs follow",
            rows - 1
        )),
        "{out}"
    );
    // A row's record hash changed.
    let mut row: Value = serde_json::from_str(lines[5]).expect("row");
    let hash = row["record_hash"].as_str().expect("hash").to_string();
    let flipped = format!(
        "{}{}",
        if hash.starts_with('0') { "1" } else { "0" },
        &hash[1..]
    );
    row["record_hash"] = json!(flipped);
    let mut changed: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    changed[5] = row.to_string();
    let (code, out) = check(&(changed.join("\n") + "\n"), export);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("row 5 (audit entry "), "{out}");
    assert!(out.contains("the leaf does not match its record"), "{out}");
    // A file that lost a row is not the file the proofs are for.
    let csv = std::fs::read_to_string(export).expect("csv");
    let short: String = csv
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let short_f = write(dir.path(), "short.csv", &short);
    let (code, out) = check(text, &short_f);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the proofs are not the export file's rows: row 2 of"),
        "{out}"
    );
}
