//! Audit entries' personal fields at rest: shown by lists, details and export downloads, held
//! by no log record and no export file, and gone for good once their subject's key is
//! destroyed, while the log still verifies.

use crate::common;

use std::path::Path;

use auditmem::log::{open_db, LogReader};
use auditmem::projections::seal::{Keyring, Subject};
use common::{cli, path_str, Server};
use serde_json::{json, Value};
use uuid::Uuid;

/// Distinctive texts of the caller: in a search's body, its User-Agent and its tags.
const BODY_SECRET: &str = "ssn 078-05-1120 of alice";
const AGENT_SECRET: &str = "alice-phone/078-05-1120";
const TAG_SECRET: &str = "ticket-078-05-1120";
/// A substring every secret holds.
const CORE: &[u8] = b"078-05-1120";

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every stored log record of the stopped server at `dir`, as its bytes.
fn log_records(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let db = open_db(dir).expect("open the data dir");
    let log = LogReader::open(&db).expect("log");
    log.records_from(1)
        .map(|r| {
            let (seq, bytes) = r.expect("record");
            (seq, bytes.to_vec())
        })
        .collect()
}

/// The newest `memory.search` entry of the tenant's list, as the list shows it.
fn search_item(s: &Server, key: &str) -> Value {
    let (status, v) = s.get("/v1/audit/logs?action=memory.search&page_size=1", key);
    assert_eq!(status, 200, "{v}");
    v["data"]["logs"][0].clone()
}

#[test]
fn personal_fields_are_shown_sealed_at_rest_and_erased_with_their_key() {
    let mut s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let r = s
        .raw()
        .post(format!("{}/v1/memories/search", s.url))
        .bearer_auth(&key)
        .header("user-agent", AGENT_SECRET)
        .header(
            "x-audit-metadata",
            json!({ "ticket": TAG_SECRET }).to_string(),
        )
        .json(&json!({ "query": BODY_SECRET, "filters": { "user_id": "alice" } }))
        .send()
        .expect("send");
    let status = r.status().as_u16();
    assert_eq!(status, 200, "{}", r.text().unwrap_or_default());

    // The list and the detail show every personal field, opened.
    let item = search_item(&s, &key);
    assert_eq!(item["user_agent"], json!(AGENT_SECRET), "{item}");
    assert_eq!(item["metadata"], json!({ "ticket": TAG_SECRET }), "{item}");
    assert_eq!(item["ip_address"], json!("127.0.0.1"), "{item}");
    assert_eq!(item["sealed"], json!(true), "{item}");
    assert_eq!(item.get("erased"), None, "{item}");
    let id = item["id"].as_str().expect("id").to_string();
    let (status, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(status, 200, "{d}");
    let d = d["data"].clone();
    assert_eq!(d["request_body"]["query"], json!(BODY_SECRET), "{d}");
    assert_eq!(d["memory_query"], json!([BODY_SECRET]), "{d}");
    assert_eq!(d["user_agent"], json!(AGENT_SECRET), "{d}");
    assert_eq!(
        d["detail_salt"].as_str().map(str::len),
        Some(64),
        "the salt of a sealed entry's digest: {d}"
    );
    // The read checks against the chain's digest with its salt, and with no other salt.
    assert_eq!(json!(common::detail_digest(&d)), d["detail_hash"], "{d}");
    let mut wrong = d.clone();
    wrong["detail_salt"] = json!("00".repeat(32));
    assert_ne!(json!(common::detail_digest(&wrong)), d["detail_hash"]);

    // An export shows them when downloaded; its file on disk holds none of them.
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({"format": "json"}));
    assert_eq!(status, 200, "{v}");
    let export_id = v["data"]["export_id"].as_str().expect("id").to_string();
    s.wait_export_status(&key, &export_id, "completed");
    let (status, _, _, download) = s.download_export(&key, &export_id);
    assert_eq!(status, 200);
    assert!(holds(&download, AGENT_SECRET.as_bytes()));
    assert!(holds(&download, TAG_SECRET.as_bytes()));
    let file = s.data_dir.join("exports").join(format!("{export_id}.json"));
    let stored = std::fs::read(&file).expect("the export file");
    assert!(!holds(&stored, CORE), "the export file holds a secret");

    // No record of the log holds any of them.
    s.stop();
    let records = log_records(&s.data_dir);
    assert!(records.len() > 3, "{}", records.len());
    for (seq, bytes) in &records {
        assert!(!holds(bytes, CORE), "record {seq} holds a secret");
    }

    // Alice's key destroyed (as an erasure does): the entry's personal fields are gone.
    let tenant_id: Uuid = tenant.parse().expect("uuid");
    {
        let ring = auditmem::keys::open_in(&s.data_dir, &s.data_dir.join("master.key"))
            .expect("the keyring");
        let alice = ring
            .find(&Subject::User(tenant_id, "alice".into()))
            .expect("find")
            .expect("alice has a key");
        assert_eq!(ring.destroy(&[alice]).expect("destroy"), 1);
    }
    s.spawn();
    let item = search_item(&s, &key);
    assert_eq!(item["id"], json!(id));
    assert_eq!(item["erased"], json!(true), "{item}");
    assert_eq!(item["sealed"], json!(true), "{item}");
    for f in ["user_agent", "metadata", "ip_address", "error_msg"] {
        assert_eq!(item[f], Value::Null, "{f}: {item}");
    }
    let (status, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(status, 200, "{d}");
    let d = &d["data"];
    assert_eq!(d["erased"], json!(true), "{d}");
    for f in [
        "request_body",
        "response_body",
        "memory_query",
        "memory_results",
        "user_agent",
        "metadata",
        "ip_address",
    ] {
        assert_eq!(d[f], Value::Null, "{f}: {d}");
    }
    assert_eq!(d.get("detail_salt"), None, "{d}");
    // The chain is unchanged: the item's hash still recomputes from the item alone.
    let (status, v) = s.get("/v1/audit/logs?page_size=100", &key);
    assert_eq!(status, 200);
    let mut items = v["data"]["logs"].as_array().expect("logs").clone();
    items.reverse();
    let mut prev = [0u8; 32];
    for item in &items {
        let (rule, canonical) = common::chain_fields(item);
        let domain = format!("auditmem/tenant-chain/{rule}");
        let want = common::blake3_hex(&[domain.as_bytes(), &prev, canonical.as_bytes()]);
        assert_eq!(item["hash"], json!(want), "{item}");
        prev.copy_from_slice(&hex::decode(want).expect("hex"));
    }
    // The export made before downloads the row erased, with no rewrite of its file.
    let (status, _, _, download) = s.download_export(&key, &export_id);
    assert_eq!(status, 200);
    assert!(
        !holds(&download, CORE),
        "an erased row downloads its secret"
    );
    let rows: Vec<Value> = serde_json::from_slice(&download).expect("json");
    let row = rows
        .iter()
        .find(|r| r["id"] == json!(id))
        .expect("the entry's row");
    assert_eq!(
        (&row["erased"], &row["user_agent"], &row["metadata"]),
        (&json!(true), &Value::Null, &Value::Null),
        "{row}"
    );
    assert_eq!(std::fs::read(&file).expect("the export file"), stored);
    // Its chain still verifies: a sealed row's hash covers only what stays clear.
    let downloaded = s
        .data_dir
        .join("..")
        .join(format!("download-{export_id}.json"));
    std::fs::write(&downloaded, &download).expect("write");
    let (code, out, err) = cli(
        &[
            "verify",
            "--export",
            path_str(&downloaded),
            "--chain-only",
            "--json",
        ],
        &[],
    );
    let _ = std::fs::remove_file(&downloaded);
    assert_eq!(code, 0, "{out}\n{err}");

    // The log verifies offline, and counts what it holds sealed and erased.
    s.stop();
    let (code, out, err) = cli(
        &["verify", "--data-dir", path_str(&s.data_dir), "--json"],
        &[],
    );
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}\n{err}"));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["clean"], json!(true), "{v}");
    let report = &v["report"];
    assert_eq!(report["plaintext"], json!(0), "{v}");
    let sealed = report["sealed"].as_u64().expect("sealed");
    assert!(sealed >= 5, "{v}");
    // The search and the reads of its own entry (their scope: the tenant) are not alice's.
    assert_eq!(report["erased"], json!(1), "{v}");
    // Without the key-encryption key verify still passes; it cannot count the erased.
    let kek = s.data_dir.join("master.key");
    let aside = s.data_dir.join("..").join(format!("kek-{export_id}"));
    std::fs::rename(&kek, &aside).expect("move the KEK");
    let (code, out, _) = cli(
        &["verify", "--data-dir", path_str(&s.data_dir), "--json"],
        &[],
    );
    std::fs::rename(&aside, &kek).expect("put the KEK back");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["report"]["erased"], Value::Null, "{v}");
    assert_eq!(v["report"]["sealed"], json!(sealed), "{v}");
}
