//! A data dir written by the release before tenant hash v2 keeps working: its audit entries
//! (no `detail_hash`, chained under rule v1, responses stored by value) verify, list, read and
//! replay beside the v2 entries appended after them, one tenant chain across the boundary.
//!
//! CI has no old binary, so the old entries are written here as that release wrote them: the
//! same record envelope and event format version (2), with the `AuditRecorded` of that
//! release, whose entry array ends at `created_at` (no `detail_hash`) and whose detail array
//! ends at `response_json` (no `response_ref`). Its tenants, keys and projection trees are in
//! the formats of today, which that release already wrote, so they are made by the real
//! binary.

use crate::common;

use std::path::Path;

use auditmem::log::record::{seq_key, Record};
use auditmem::log::{open_db, LogReader};
use auditmem::projections::Tokens;
use common::{
    answers, assert_same_answers, blake3_hex, chain_fields, cli, copy_dir, detail_digest, get_text,
    now_end_time, path_str, replayed_copy, Server,
};
use reqwest::Method;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

/// `AuditEntry` as the release before `detail_hash` wrote it.
#[derive(Serialize)]
struct OldEntry {
    id: Uuid,
    action: String,
    model_id: Option<String>,
    project_id: Option<String>,
    gateway_id: Option<String>,
    ip_address: Option<String>,
    user_agent: Option<String>,
    http_status: u16,
    is_success: bool,
    is_cache_hit: bool,
    error_code: Option<i64>,
    error_msg: Option<String>,
    duration: Option<f64>,
    credits_consumed: f64,
    balance_consumed_usd: f64,
    tokens: Option<Tokens>,
    metadata: Option<Value>,
    created_at: i64,
}

/// `AuditDetail` as that release wrote it (before `response_ref`).
#[derive(Default, Serialize)]
struct OldDetail {
    request_body: Option<Value>,
    response_body: Option<Value>,
    input_content: Option<Value>,
    output_content: Option<Value>,
    rag_query: Option<Vec<String>>,
    rag_results: Option<Vec<Value>>,
    memory_query: Option<Vec<String>>,
    memory_results: Option<Vec<Value>>,
    response_json: Option<String>,
}

#[derive(Serialize)]
struct OldRecorded {
    tenant_id: Uuid,
    entry: OldEntry,
    detail: OldDetail,
}

#[derive(Serialize)]
enum OldEvent {
    AuditRecorded(OldRecorded),
}

/// An old entry of `tenant` with the fields every one of them sets.
fn old_entry(action: &str, created_at: i64) -> OldEntry {
    OldEntry {
        id: Uuid::now_v7(),
        action: action.into(),
        model_id: None,
        project_id: None,
        gateway_id: None,
        ip_address: Some("127.0.0.1".into()),
        user_agent: Some("old-client/1".into()),
        http_status: 200,
        is_success: true,
        is_cache_hit: false,
        error_code: None,
        error_msg: None,
        duration: Some(1.5),
        credits_consumed: 0.0,
        balance_consumed_usd: 0.0,
        tokens: None,
        metadata: None,
        created_at,
    }
}

/// Appends `events` to the stopped server's log as that release sealed them: each record after
/// the head, one record a key (a lightly loaded server's group commits), stamped with its
/// entry's time.
fn append_old(dir: &Path, events: Vec<OldRecorded>) {
    let db = open_db(dir).expect("open the data dir");
    let log = LogReader::open(&db).expect("log");
    let head = log.head().expect("head");
    let (mut seq, mut prev) = (head.seq, head.hash);
    for e in events {
        seq += 1;
        let ts = e.entry.created_at;
        let event = rmp_serde::to_vec(&(2u16, OldEvent::AuditRecorded(e))).expect("encode");
        let (hash, record) = Record::seal_encoded(seq, ts, &prev, &event);
        log.tree().insert(seq_key(seq), record).expect("insert");
        prev = hash;
    }
    db.flush().expect("flush");
}

/// Recomputes the tenant chain from list items, oldest first, under each entry's own rule (v1
/// without `detail_hash`, v2 with it, v3 for a sealed entry), and asserts every item's `hash`;
/// returns the rules seen.
fn assert_chain(oldest_first: &[Value]) -> Vec<&'static str> {
    let mut prev = [0u8; 32];
    let mut rules = Vec::new();
    for item in oldest_first {
        let hash = item["hash"].clone();
        // Every item has the field; entries of rule v1 show it null.
        assert!(
            item.get("detail_hash").is_some(),
            "no detail_hash in {item}"
        );
        let (rule, canonical) = chain_fields(item);
        let domain = format!("auditmem/tenant-chain/{rule}");
        let want = blake3_hex(&[domain.as_bytes(), &prev, canonical.as_bytes()]);
        assert_eq!(hash, json!(want), "{item}");
        prev.copy_from_slice(&hex::decode(want).expect("hex"));
        rules.push(rule);
    }
    rules
}

/// `auditmem verify` on a stopped data dir: exit 0, `records` records, every one valid.
fn assert_verifies(dir: &Path, records: u64) {
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(dir), "--json"], &[]);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|_| panic!("verify printed no JSON (exit {code}): {out}\n{err}"));
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["clean"], json!(true), "{v}");
    assert_eq!(
        (
            &v["report"]["records"],
            &v["report"]["valid"],
            &v["report"]["head_seq"]
        ),
        (&json!(records), &json!(records), &json!(records)),
        "{v}"
    );
}

#[test]
fn a_data_dir_of_the_release_before_tenant_hash_v2_verifies_lists_reads_and_replays() {
    // The tenant and its key, as that release made them (their events are unchanged).
    let mut s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    s.stop();
    let tenant_id: Uuid = tenant.parse().expect("uuid");

    // Three entries as that release recorded them: an ingested gateway call (detail by
    // value), an audited memory write and an audited list, their answers kept as the text sent.
    let t0 = chrono::Utc::now().timestamp_micros() - 3_600_000_000;
    let mut gateway = old_entry("gateway.chat", t0);
    gateway.model_id = Some("gpt-4o-mini".into());
    gateway.gateway_id = Some("gw-1".into());
    gateway.ip_address = Some("10.0.0.7".into());
    gateway.tokens = Some(Tokens {
        prompt_tokens: 12,
        completion_tokens: 8,
        total_tokens: 20,
    });
    gateway.metadata = Some(json!({"team": "a"}));
    let gateway_detail = OldDetail {
        request_body: Some(json!({"messages": [{"role": "user", "content": "hi"}]})),
        response_body: Some(json!({"choices": [{"text": "hello"}]})),
        rag_query: Some(vec!["q".into()]),
        ..OldDetail::default()
    };
    let mut write = old_entry("memory.write", t0 + 1_000_000);
    write.credits_consumed = 0.0;
    let write_answer = r#"{"success":true,"data":{"id":"0193a1b2-0000-7000-8000-000000000001","content":"likes tea","memory_type":"fact","importance":0.5,"created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z"}}"#;
    let write_detail = OldDetail {
        request_body: Some(json!({"content": "likes tea", "memory_type": "fact"})),
        memory_query: Some(vec!["likes tea".into()]),
        response_json: Some(write_answer.into()),
        ..OldDetail::default()
    };
    let list = old_entry("audit.list", t0 + 2_000_000);
    let list_answer = r#"{"success":true,"code":1000,"message":"ok","data":{"logs":[],"total":2,"page":5,"page_size":50,"next_cursor":null}}"#;
    let list_detail = OldDetail {
        response_json: Some(list_answer.into()),
        ..OldDetail::default()
    };
    let old_ids = [gateway.id, write.id, list.id].map(|id| id.to_string());
    append_old(
        &s.data_dir,
        vec![
            OldRecorded {
                tenant_id,
                entry: gateway,
                detail: gateway_detail,
            },
            OldRecorded {
                tenant_id,
                entry: write,
                detail: write_detail,
            },
            OldRecorded {
                tenant_id,
                entry: list,
                detail: list_detail,
            },
        ],
    );

    // This release on that dir: new entries, chained after the old ones.
    s.spawn();
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "output_content": "new"}]})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.get("/v1/memories", &key).0, 200);
    let (status, v) = s.get("/v1/audit/logs?page_size=100", &key);
    assert_eq!(status, 200, "{v}");
    let mut items = v["data"]["logs"].as_array().expect("logs").clone();
    // Newest first: the list itself is not in its own answer.
    items.reverse();
    assert_eq!(items.len(), 5, "{v}");
    let ids: Vec<String> = items
        .iter()
        .map(|i| i["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids[..3], old_ids);
    assert_eq!(assert_chain(&items), ["v1", "v1", "v1", "v3", "v3"]);
    let old_gateway = &items[0];
    assert_eq!(
        (
            &old_gateway["model_id"],
            &old_gateway["tokens"],
            &old_gateway["metadata"],
            &old_gateway["detail_hash"]
        ),
        (
            &json!("gpt-4o-mini"),
            &json!({"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20}),
            &json!({"team": "a"}),
            &Value::Null
        )
    );

    // Detail reads of both kinds: the old ones show what was stored, the answers byte for
    // byte; the new ones check against their digest.
    let detail = |id: &str| {
        let (status, text) = get_text(&s, &format!("/v1/audit/logs/{id}"), &key);
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).expect("json");
        (text, v["data"].clone())
    };
    let (_, d) = detail(&ids[0]);
    assert_eq!(
        (&d["request_body"], &d["response_body"], &d["rag_query"]),
        (
            &json!({"messages": [{"role": "user", "content": "hi"}]}),
            &json!({"choices": [{"text": "hello"}]}),
            &json!(["q"])
        )
    );
    assert_eq!(d["response_ref"], Value::Null);
    let (text, d) = detail(&ids[1]);
    assert!(
        text.contains(&format!(",\"response_body\":{write_answer},")),
        "{text}"
    );
    assert_eq!(d["memory_query"], json!(["likes tea"]));
    let (text, _) = detail(&ids[2]);
    assert!(
        text.contains(&format!(",\"response_body\":{list_answer},")),
        "{text}"
    );
    for (i, item) in items.iter().enumerate().skip(3) {
        let (_, d) = detail(&ids[i]);
        assert_eq!(
            json!(detail_digest(&d)),
            item["detail_hash"],
            "{d} against {item}"
        );
    }

    // The same answers after a stop, from the dir as it is and from a replayed copy; both
    // verify.
    let end = now_end_time();
    s.stop();
    // The tenant and its key, 3 old entries, 3 new ones and the 5 detail reads.
    assert_verifies(&s.data_dir, 13);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (plain, replayed) = (tmp.path().join("plain"), tmp.path().join("replayed"));
    copy_dir(&s.data_dir, &plain);
    replayed_copy(&s.data_dir, &replayed);
    assert_verifies(&replayed, 13);
    let keys = [key.clone()];
    let a = Server::start_on(&plain);
    let before = answers(&a, &keys, &ids, &[], &end);
    drop(a);
    let b = Server::start_on(&replayed);
    let after = answers(&b, &keys, &ids, &[], &end);
    assert_same_answers(&before, &after);
    // What was compared holds both kinds, and the detail of each.
    let (_, v) = b.get(
        &format!("/v1/audit/logs?page_size=100&end_time={end}"),
        &key,
    );
    let mut replayed_items = v["data"]["logs"].as_array().expect("logs").clone();
    replayed_items.reverse();
    assert_eq!(replayed_items.len(), 11, "{v}");
    assert_eq!(replayed_items[..5], items[..]);
    let flat = serde_json::to_string(&before).expect("json");
    for part in [
        "\"detail_hash\":null",
        "\"response_body\":{\"data\":{\"content\":\"likes tea\"",
        "\"output_content\":\"new\"",
    ] {
        assert!(flat.contains(part), "{part} not in {flat}");
    }
}
