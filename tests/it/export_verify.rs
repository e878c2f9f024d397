//! `auditmem verify --export FILE --manifest M --pubkey K` against the attacks a chain alone
//! cannot see (rows cut from either end, a row rewritten with the chain recomputed, a row
//! removed with the rest renumbered, a file made up whole, a manifest signed by another key),
//! each named, and the options `verify` refuses rather than ignores.

use crate::common;

use std::path::{Path, PathBuf};

use auditmem::export::manifest::Manifest;
use auditmem_projections::audit_view::chain_hash_fields;
use common::{cli, path_str, Server};
use reqwest::Method;
use serde_json::{json, Map, Value};

/// A business tenant with 30 entries of assorted actions (some `memory.delete`), one CSV
/// export of them: (server, key, export id, the file, its manifest as served, the public key).
fn exported(format: &str) -> (Server, String, String, Vec<u8>, Vec<u8>, String) {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let actions = ["gateway.chat", "memory.delete", "rag.query"];
    let entries: Vec<Value> = (0..30)
        .map(|i| {
            json!({"tenant_id": tenant, "action": actions[i % 3], "http_status": 200,
                   "user_agent": format!("agent/{i}"), "metadata": {"i": i}})
        })
        .collect();
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({ "format": format }));
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["export_id"].as_str().expect("id").to_string();
    s.wait_export_status(&key, &id, "completed");
    let (status, _, _, file) = s.download_export(&key, &id);
    assert_eq!(status, 200);
    let manifest = download_manifest(&s, &key, &id);
    let (_, v) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    let pubkey = v["data"]["public_key"].as_str().expect("key").to_string();
    (s, key, id, file, manifest, pubkey)
}

/// `GET .../manifest`: (status, body).
fn manifest_call(s: &Server, key: &str, id: &str) -> (u16, String, Vec<u8>) {
    let r = s
        .raw()
        .get(format!("{}/v1/audit/logs/export/{id}/manifest", s.url))
        .bearer_auth(key)
        .send()
        .expect("send");
    let status = r.status().as_u16();
    let cd = r
        .headers()
        .get("content-disposition")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    (status, cd, r.bytes().expect("bytes").to_vec())
}

pub fn download_manifest(s: &Server, key: &str, id: &str) -> Vec<u8> {
    let (status, _, body) = manifest_call(s, key, id);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    body
}

struct Files(tempfile::TempDir);

impl Files {
    fn new() -> Self {
        Files(tempfile::tempdir().expect("tempdir"))
    }
    fn put(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, bytes).expect("write");
        p
    }
}

/// `verify --export FILE --manifest M [--pubkey K] --json`: (exit code, report, text output).
fn verify(file: &Path, manifest: &Path, pubkey: Option<&str>) -> (i32, Value, String) {
    let mut args = vec![
        "verify",
        "--export",
        path_str(file),
        "--manifest",
        path_str(manifest),
    ];
    if let Some(k) = pubkey {
        args.extend(["--pubkey", k]);
    }
    let (code, text, err) = cli(&args, &[]);
    args.push("--json");
    let (json_code, out, _) = cli(&args, &[]);
    assert_eq!(code, json_code, "{text}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{text}{err}"));
    (code, v, text)
}

fn kinds(report: &Value) -> Vec<String> {
    report["report"]["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["kind"].as_str().expect("kind").to_string())
        .collect()
}

/// The rows of an export file, as `verify` reads them.
fn rows_of(file: &[u8]) -> Vec<Map<String, Value>> {
    auditmem::export::rows::parse(file).expect("parse")
}

/// Writes rows back as an export CSV: the same header, cells as the export writes them (text
/// with the formula guard, null empty, other values as JSON).
fn to_csv(original: &[u8], rows: &[Map<String, Value>]) -> Vec<u8> {
    let mut reader = csv::Reader::from_reader(original);
    let header: Vec<String> = reader
        .headers()
        .expect("header")
        .iter()
        .map(str::to_string)
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).expect("header");
    for row in rows {
        let cells: Vec<String> = header
            .iter()
            .map(|h| match &row[h] {
                Value::Null => String::new(),
                Value::String(s) if s.starts_with(['=', '+', '-', '@', '\t', '\r', '\'']) => {
                    format!("'{s}")
                }
                Value::String(s) => s.clone(),
                v => v.to_string(),
            })
            .collect();
        w.write_record(&cells).expect("row");
    }
    w.into_inner().expect("flush")
}

/// Recomputes the chain of `rows` from row `from` on, each linking to the one before, as a
/// forger who knows the chain's rule does.
fn rechain(rows: &mut [Map<String, Value>], from: usize) {
    for i in from..rows.len() {
        let prev: [u8; 32] = if i == 0 {
            hex::decode(rows[0]["prev_hash"].as_str().expect("prev"))
                .expect("hex")
                .try_into()
                .expect("32")
        } else {
            hex::decode(rows[i - 1]["hash"].as_str().expect("hash"))
                .expect("hex")
                .try_into()
                .expect("32")
        };
        let mut fields = rows[i].clone();
        for f in ["hash", "prev_hash", "chain_index"] {
            fields.remove(f);
        }
        let hash = chain_hash_fields(&prev, &fields);
        rows[i].insert("prev_hash".into(), json!(hex::encode(prev)));
        rows[i].insert("hash".into(), json!(hex::encode(hash)));
    }
}

#[test]
fn verify_export_names_each_attack_and_passes_the_genuine_file() {
    let (s, _key, id, file, manifest, pubkey) = exported("csv");
    let files = Files::new();
    let m = files.put("manifest.json", &manifest);
    let genuine = rows_of(&file);
    assert_eq!(genuine.len(), 30);

    // The genuine file: exit 0, complete and as written, against the pinned key.
    let (code, v, text) = verify(&files.put("genuine.csv", &file), &m, Some(&pubkey));
    assert_eq!(code, 0, "{text}");
    assert_eq!(kinds(&v), Vec::<String>::new());
    assert!(
        text.ends_with("OK: the export is complete and exactly as the service wrote it\n"),
        "{text}"
    );
    assert_eq!(v["report"]["manifest"]["export_id"], json!(id));
    assert_eq!(v["report"]["manifest"]["key_pinned"], json!(true));

    let attack = |name: &str, rows: &[Map<String, Value>]| {
        let p = files.put(name, &to_csv(&file, rows));
        verify(&p, &m, Some(&pubkey))
    };

    // 1. The last five rows deleted.
    let (code, v, text) = attack("tail.csv", &genuine[..25]);
    assert_eq!(code, 1, "{text}");
    let k = kinds(&v);
    for want in [
        "digest_mismatch",
        "row_count_mismatch",
        "rows_missing_at_end",
    ] {
        assert!(k.contains(&want.to_string()), "{want}: {text}");
    }
    assert!(
        text.contains("the file ends at chain position 25; the manifest's last row"),
        "{text}"
    );
    assert!(text.contains("5 rows missing at the end"), "{text}");
    assert!(text.trim_end().ends_with("TAMPERED"), "{text}");

    // 2. The first five rows deleted.
    let (code, v, text) = attack("head.csv", &genuine[5..]);
    assert_eq!(code, 1, "{text}");
    assert!(
        kinds(&v).contains(&"rows_missing_at_start".to_string()),
        "{text}"
    );
    assert!(text.contains("5 rows missing at the start"), "{text}");

    // 3. A memory.delete rewritten into memory.read, and the chain recomputed after it: the
    // rows chain again, only the manifest sees it.
    let mut rewritten = genuine.clone();
    let at = rewritten
        .iter()
        .position(|r| r["action"] == json!("memory.delete"))
        .expect("a delete");
    rewritten[at].insert("action".into(), json!("memory.read"));
    rechain(&mut rewritten, at);
    let (code, v, text) = attack("rewritten.csv", &rewritten);
    assert_eq!(code, 1, "{text}");
    let k = kinds(&v);
    assert!(k.contains(&"manifest_hash_mismatch".to_string()), "{text}");
    assert!(k.contains(&"digest_mismatch".to_string()), "{text}");
    assert!(
        !k.contains(&"hash_mismatch".to_string()),
        "the chain was recomputed: {text}"
    );
    assert_eq!(v["report"]["valid"], json!(30), "{text}");
    assert!(
        text.contains("rows were rewritten and the chain recomputed"),
        "{text}"
    );

    // 4. A row deleted and the rest renumbered (and rechained).
    let mut renumbered = genuine.clone();
    renumbered.remove(10);
    for r in renumbered.iter_mut().skip(10) {
        let i = r["chain_index"].as_u64().expect("index");
        r.insert("chain_index".into(), json!(i - 1));
    }
    rechain(&mut renumbered, 10);
    let (code, v, text) = attack("renumbered.csv", &renumbered);
    assert_eq!(code, 1, "{text}");
    let k = kinds(&v);
    assert!(k.contains(&"renumbered".to_string()), "{text}");
    assert!(k.contains(&"row_count_mismatch".to_string()), "{text}");
    assert!(
        !k.contains(&"missing".to_string()),
        "no gap left in the chain: {text}"
    );

    // 5. A file made up whole: three rows of its own, chained from scratch.
    let mut made_up: Vec<Map<String, Value>> = genuine[..3].to_vec();
    for (i, r) in made_up.iter_mut().enumerate() {
        r.insert("id".into(), json!(uuid::Uuid::now_v7().to_string()));
        r.insert("action".into(), json!("gateway.chat"));
        r.insert("chain_index".into(), json!(i + 1));
    }
    made_up[0].insert("prev_hash".into(), json!(hex::encode([0u8; 32])));
    rechain(&mut made_up, 0);
    let fake = files.put("made-up.csv", &to_csv(&file, &made_up));
    let (code, v, text) = verify(&fake, &m, Some(&pubkey));
    assert_eq!(code, 1, "{text}");
    let k = kinds(&v);
    for want in ["digest_mismatch", "row_count_mismatch", "manifest_mismatch"] {
        assert!(k.contains(&want.to_string()), "{want}: {text}");
    }
    assert!(text.contains("is not the manifest's first row"), "{text}");

    // ... with a manifest of its own, signed by another key: refused when the service's key is
    // pinned; trusted, and said so, when it is not.
    let mut forged: Manifest = Manifest::parse(&manifest).expect("manifest");
    forged.records = 3;
    forged.file_bytes = std::fs::metadata(&fake).expect("meta").len();
    forged.file_blake3 = blake3::hash(&std::fs::read(&fake).expect("read"))
        .to_hex()
        .to_string();
    let ends = |r: &Map<String, Value>| {
        (
            r["id"].as_str().and_then(|s| uuid::Uuid::parse_str(s).ok()),
            r["chain_index"].as_u64(),
            r["hash"].as_str().map(str::to_string),
        )
    };
    (forged.first_id, forged.first_chain_index, forged.first_hash) = ends(&made_up[0]);
    (forged.last_id, forged.last_chain_index, forged.last_hash) = ends(&made_up[2]);
    let signer = auditmem::log::checkpoint::CheckpointSigner::new(
        ed25519_dalek::SigningKey::from_bytes(&[42; 32]),
        files.0.path().join("unused.ndjson"),
    );
    forged.public_key = signer.public_key_hex();
    forged.signature = signer.sign_message(&forged.message());
    let fm = files.put("forged.json", &serde_json::to_vec(&forged).expect("json"));
    let (code, v, text) = verify(&fake, &fm, Some(&pubkey));
    assert_eq!(code, 1, "{text}");
    assert_eq!(kinds(&v), vec!["bad_signature".to_string()], "{text}");
    assert!(
        text.contains("not by the key given with --pubkey: refused"),
        "{text}"
    );
    let (code, v, text) = verify(&fake, &fm, None);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["report"]["manifest"]["key_pinned"], json!(false));
    assert!(
        text.contains(&format!(
            "no --pubkey given, so the manifest's own key {} was trusted",
            signer.public_key_hex()
        )),
        "{text}"
    );
    assert!(
        text.trim_end().ends_with(
            "OK, BUT UNPINNED: the file matches a manifest signed by the key the manifest names"
        ),
        "{text}"
    );
    // A field of the genuine manifest changed without its key: the signature breaks.
    let mut edited: Value = serde_json::from_slice(&manifest).expect("json");
    edited["records"] = json!(25);
    let em = files.put("edited.json", &serde_json::to_vec(&edited).expect("json"));
    let tail = files.put("tail2.csv", &to_csv(&file, &genuine[..25]));
    let (code, v, text) = verify(&tail, &em, Some(&pubkey));
    assert_eq!(code, 1, "{text}");
    assert!(kinds(&v).contains(&"bad_signature".to_string()), "{text}");
    drop(s);
}

#[test]
fn the_manifest_is_served_with_the_status_and_on_its_own_route() {
    let (s, key, id, file, manifest, pubkey) = exported("json");
    let (status, v) = s.get(&format!("/v1/audit/logs/export/{id}"), &key);
    assert_eq!(status, 200, "{v}");
    let served: Value = serde_json::from_slice(&manifest).expect("json");
    assert_eq!(v["data"]["manifest"], served);
    let m: Manifest = Manifest::parse(&manifest).expect("manifest");
    assert_eq!(
        m.check_signature(Some(
            &auditmem::log::checkpoint::parse_public_key(&pubkey).expect("key")
        )),
        Ok(())
    );
    let rows = rows_of(&file);
    assert_eq!(
        (
            m.version.as_str(),
            m.export_id.to_string(),
            m.format.as_str(),
            m.records,
            m.with_chain,
            m.file_bytes,
            m.file_blake3.clone(),
            m.formula_guard,
        ),
        (
            "auditmem/export-manifest/v1",
            id.clone(),
            "json",
            rows.len() as u64,
            true,
            file.len() as u64,
            blake3::hash(&file).to_hex().to_string(),
            false,
        )
    );
    assert_eq!(v["data"]["file_blake3"], json!(m.file_blake3));
    let last = &rows[rows.len() - 1];
    assert_eq!(
        (
            m.first_chain_index,
            m.last_chain_index,
            m.last_hash.as_deref()
        ),
        (Some(1), last["chain_index"].as_u64(), last["hash"].as_str())
    );
    assert_eq!(
        m.last_id.map(|u| u.to_string()).as_deref(),
        last["id"].as_str()
    );
    // The status answer itself is accepted as the manifest.
    let files = Files::new();
    let f = files.put("e.json", &file);
    let st = files.put("status.json", &serde_json::to_vec(&v).expect("json"));
    let (code, _, text) = verify(&f, &st, Some(&pubkey));
    assert_eq!(code, 0, "{text}");
    // Its route: an attachment, audited as its own action.
    let (status, cd, _) = manifest_call(&s, &key, &id);
    assert_eq!(status, 200);
    assert_eq!(
        cd,
        format!("attachment; filename=\"audit-export-{id}.manifest.json\"")
    );
    let (_, list) = s.get("/v1/audit/logs?action=audit.export_manifest", &key);
    assert_eq!(list["data"]["total"], json!(2), "{list}");

    // A pro export has a manifest too: no chain, its rows and digest.
    let (tenant, pro) = s.tenant_with_key("pro");
    let (status, _) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}]})),
    );
    assert_eq!(status, 200);
    let (_, v) = s.post("/v1/audit/logs/export", &pro, json!({}));
    let pid = v["data"]["export_id"].as_str().expect("id").to_string();
    s.wait_export_status(&pro, &pid, "completed");
    let (_, _, _, pfile) = s.download_export(&pro, &pid);
    let pm = download_manifest(&s, &pro, &pid);
    let m: Manifest = Manifest::parse(&pm).expect("manifest");
    assert_eq!(
        (
            m.with_chain,
            m.records,
            m.first_chain_index,
            m.formula_guard
        ),
        (false, 1, None, true)
    );
    let (pf, pmf) = (files.put("p.csv", &pfile), files.put("pm.json", &pm));
    let (code, _, text) = verify(&pf, &pmf, Some(&pubkey));
    assert_eq!(code, 0, "{text}");
    // Cut its only row: the count and digest say so.
    let header_only: Vec<u8> = pfile
        .split(|b| *b == b'\n')
        .next()
        .expect("header")
        .to_vec();
    let cut = files.put("p-cut.csv", &[header_only, b"\n".to_vec()].concat());
    let (code, v, text) = verify(&cut, &pmf, Some(&pubkey));
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        kinds(&v),
        vec![
            "digest_mismatch".to_string(),
            "row_count_mismatch".to_string()
        ]
    );

    // While processing: 409, and the status has no manifest; another tenant: 404.
    let slow = Server::start_with(&["--export-start-delay-ms", "60000"]);
    let (_, k2) = slow.tenant_with_key("business");
    let (_, v) = slow.post("/v1/audit/logs/export", &k2, json!({}));
    let sid = v["data"]["export_id"].as_str().expect("id").to_string();
    let (status, _, body) = manifest_call(&slow, &k2, &sid);
    let body: Value = serde_json::from_slice(&body).expect("json");
    common::assert_error(&(status, body), 409, 4090);
    let (_, st) = slow.get(&format!("/v1/audit/logs/export/{sid}"), &k2);
    assert_eq!(st["data"]["manifest"], Value::Null, "{st}");
    let (status, _, body) = manifest_call(&s, &pro, &id);
    let body: Value = serde_json::from_slice(&body).expect("json");
    common::assert_error(&(status, body), 404, 4040);
}

#[test]
fn verify_refuses_options_that_do_not_apply_to_its_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("f.csv");
    std::fs::write(&f, b"id\n").expect("write");
    let f = path_str(&f);
    let head = format!("1:{}", "0".repeat(64));
    let cases: [(&[&str], &str); 8] = [
        (
            &[
                "verify",
                "--export",
                f,
                "--manifest",
                f,
                "--expect-head",
                &head,
            ],
            "--expect-head do not apply to --export",
        ),
        (
            &["verify", "--export", f, "--manifest", f, "--checkpoints", f],
            "--checkpoints do not apply to --export",
        ),
        (
            &[
                "verify",
                "--export",
                f,
                "--chain-only",
                "--expect-head",
                &head,
                "--checkpoints",
                f,
            ],
            "--expect-head and --checkpoints do not apply to --export",
        ),
        (&["verify", "--export", f], "--export needs --manifest FILE"),
        (
            &["verify", "--export", f, "--manifest", f, "--chain-only"],
            "--chain-only and --manifest exclude each other",
        ),
        (
            &["verify", "--export", f, "--chain-only", "--pubkey", "00"],
            "--pubkey has nothing to check with --chain-only",
        ),
        (
            &["verify", "--data-dir", f, "--manifest", f],
            "--manifest applies only to --export FILE",
        ),
        (
            &["verify", "--url", "http://127.0.0.1:9", "--chain-only"],
            "--chain-only applies only to --export FILE",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = cli(args, &[]);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} checked something: {out}");
    }
}

#[test]
fn offline_verify_says_when_it_trusted_the_checkpoints_own_key() {
    let mut s = Server::start();
    let (tenant, _) = s.tenant_with_key("pro");
    let (status, _) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}]})),
    );
    assert_eq!(status, 200);
    let (_, v) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    let pubkey = v["data"]["public_key"].as_str().expect("key").to_string();
    s.stop();
    let (data, cps) = (s.data_dir.clone(), s.checkpoints_file());
    let args = [
        "verify",
        "--data-dir",
        path_str(&data),
        "--checkpoints",
        path_str(&cps),
    ];
    let (code, out, err) = cli(&args, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let note = format!(
        "NOTE: no --pubkey given: the checkpoints were checked against the public key the checkpoints file names ({pubkey})"
    );
    assert!(out.starts_with(&note), "{out}");
    let (code, out, err) = cli(&[&args[..], &["--json"]].concat(), &[]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert!(
        v["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("pin the service's key")),
        "{v}"
    );
    // Pinned: no note.
    let (code, out, err) = cli(&[&args[..], &["--pubkey", &pubkey]].concat(), &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("NOTE"), "{out}");
}
