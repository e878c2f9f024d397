//! Audit entries that are bounded, whose tenant hash covers their detail, and reads of the
//! audit log that are recorded by reference and rendered again byte for byte.

use crate::common;

use base64::Engine;
use common::{
    assert_error, blake3_hex, chain_fields, detail_digest, get_text, replayed_copy, Server,
};
use reqwest::Method;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

/// The `response_body` of a detail answer exactly as it was written.
fn response_body_text(detail: &str) -> String {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        data: Inner<'a>,
    }
    #[derive(Deserialize)]
    struct Inner<'a> {
        #[serde(borrow)]
        response_body: &'a RawValue,
    }
    let e: Envelope = serde_json::from_str(detail).expect("a detail answer");
    e.data.response_body.get().to_string()
}

fn ingest(s: &Server, entries: Value) -> (u16, Value) {
    s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    )
}

/// The newest entry of `action` of the key's tenant.
fn newest(s: &Server, key: &str, action: &str) -> Value {
    let (status, v) = s.get(&format!("/v1/audit/logs?action={action}&page_size=1"), key);
    assert_eq!(status, 200, "{v}");
    v["data"]["logs"][0].clone()
}

#[test]
fn caller_supplied_fields_are_bounded_refused_or_stored_with_a_marker() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    // A long User-Agent is recorded truncated, with its length.
    let ua = "u".repeat(4000);
    let r = s
        .raw()
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("user-agent", &ua)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let e = newest(&s, &key, "memory.list");
    assert_eq!(
        e["user_agent"],
        json!(format!("{}...[truncated: 4000 bytes]", "u".repeat(512)))
    );
    // X-Audit-Metadata over 4096 bytes is refused naming it; the refusal is recorded without it.
    let tags = json!({ "t": "m".repeat(5000) }).to_string();
    let r = s
        .raw()
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("x-audit-metadata", &tags)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().expect("json");
    let msg = format!(
        "X-Audit-Metadata is {} bytes; at most 4096 are allowed",
        tags.len()
    );
    assert_eq!(
        v,
        json!({"success": false, "code": 4000, "message": msg, "data": null})
    );
    let e = newest(&s, &key, "memory.list");
    assert_eq!(
        (e["error_msg"].clone(), e["metadata"].clone()),
        (json!(msg), Value::Null)
    );
    // A 400 echoing 900 KB of input echoes a few hundred bytes of it, and stores no more.
    let resp = s.post(
        "/v1/memories",
        &key,
        json!({"content": "x", "memory_type": "q".repeat(900_000)}),
    );
    assert_error(&resp, 400, 4000);
    let m = resp.1["message"].as_str().expect("message").to_string();
    assert!(m.len() <= 540, "{}", m.len());
    assert!(m.starts_with("unknown memory_type 'qqq"), "{m}");
    assert!(m.ends_with("qqq' (expected rule, fact or context)"), "{m}");
    assert!(m.contains("bytes cut]..."), "{m}");
    let e = newest(&s, &key, "memory.write");
    assert_eq!(e["error_msg"], json!(m));
    let (_, d) = s.get(
        &format!("/v1/audit/logs/{}", e["id"].as_str().expect("id")),
        &key,
    );
    let body = &d["data"]["request_body"];
    assert_eq!(body["_truncated"], json!(true), "{body}");
    assert!(serde_json::to_string(body).expect("json").len() <= 64 * 1024);
    // Ingested fields over their bounds are refused naming the entry and the field; at their
    // bounds they pass.
    let base = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200});
    let with = |field: &str, value: Value| {
        let mut e = base.clone();
        e[field] = value;
        json!([e])
    };
    for (field, max) in [
        ("model_id", 256),
        ("project_id", 256),
        ("gateway_id", 256),
        ("user_agent", 512),
        ("error_msg", 1024),
    ] {
        let (status, v) = ingest(&s, with(field, json!("a".repeat(max + 1))));
        assert_eq!(status, 400, "{v}");
        assert_eq!(
            v["message"],
            json!(format!(
                "entries[0]: {field} is {} bytes; at most {max} are allowed",
                max + 1
            ))
        );
        assert_eq!(ingest(&s, with(field, json!("a".repeat(max)))).0, 200);
    }
    let (status, v) = ingest(&s, with("metadata", json!({ "k": "v".repeat(5000) })));
    assert_eq!(status, 400, "{v}");
    assert_eq!(
        v["message"],
        json!("entries[0]: metadata is 5008 bytes; at most 4096 are allowed")
    );
    for bad in ["not-an-ip", "10.0.0.256", "1.2.3.4:80"] {
        let (status, v) = ingest(&s, with("ip_address", json!(bad)));
        assert_eq!(status, 400, "{v}");
        assert_eq!(
            v["message"],
            json!("entries[0]: ip_address must be an IPv4 or IPv6 address (such as 203.0.113.7 or 2001:db8::1)")
        );
    }
    for good in ["10.0.0.7", "2001:db8::1"] {
        assert_eq!(ingest(&s, with("ip_address", json!(good))).0, 200);
    }
    // Ingested detail fields over the audit body limit are stored with a marker.
    let big = "r".repeat(100_000);
    let mut e = base.clone();
    e["request_body"] = json!({ "prompt": big });
    e["rag_query"] = json!([big]);
    e["rag_results"] = json!([{"content": big, "similarity": 0.5, "source": {}}]);
    let (status, v) = ingest(&s, json!([e]));
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["ids"][0].as_str().expect("id");
    let (_, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    let d = &d["data"];
    assert_eq!(d["request_body"]["_truncated"], json!(true));
    assert_eq!(d["request_body"]["_original_bytes"], json!(100_013));
    assert_eq!(d["rag_results"][0]["_truncated"], json!(true));
    let q = d["rag_query"][0].as_str().expect("marked string");
    assert!(
        q.ends_with("...[truncated: 100004 bytes]"),
        "{}",
        &q[q.len() - 40..]
    );
    for f in ["request_body", "rag_query", "rag_results"] {
        assert!(
            serde_json::to_string(&d[f]).expect("json").len() <= 64 * 1024,
            "{f}"
        );
    }
}

#[test]
fn the_tenant_hash_covers_the_detail_and_a_detail_read_checks_against_it() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let (status, v) = ingest(
        &s,
        json!([{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200,
                "request_body": {"messages": [{"role": "user", "content": "hi"}]},
                "output_content": "hello", "rag_query": ["q", "q2"]}]),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "likes tea", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.get("/v1/audit/logs?page_size=3", &key).0, 200);
    let (status, v) = s.get("/v1/audit/logs?page_size=100", &key);
    assert_eq!(status, 200, "{v}");
    let mut items = v["data"]["logs"].as_array().expect("logs").clone();
    assert_eq!(items.len(), 3, "{v}");
    // Oldest first is chain order here (no entry is dated in the past): recompute the chain
    // from the list items alone under rule v3 (every new entry is sealed), and each detail
    // read against its digest.
    items.reverse();
    let mut prev = "0".repeat(64);
    for item in &items {
        let digest = item["detail_hash"]
            .as_str()
            .expect("every new entry has one");
        let hash = item["hash"].clone();
        let (rule, canonical) = chain_fields(item);
        assert_eq!(rule, "v3", "{item}");
        let prev_bytes = hex::decode(&prev).expect("hex");
        let want = blake3_hex(&[
            b"auditmem/tenant-chain/v3",
            &prev_bytes,
            canonical.as_bytes(),
        ]);
        assert_eq!(hash, json!(want), "{item}");
        prev = want;
        let (status, d) = s.get(
            &format!("/v1/audit/logs/{}", item["id"].as_str().expect("id")),
            &key,
        );
        assert_eq!(status, 200, "{d}");
        assert_eq!(detail_digest(&d["data"]), digest, "{d}");
    }
    // The digest is of the detail as stored: one changed field gives another.
    let (_, d) = s.get(
        &format!("/v1/audit/logs/{}", items[0]["id"].as_str().expect("id")),
        &key,
    );
    let mut changed = d["data"].clone();
    changed["output_content"] = json!("hello!");
    assert_ne!(
        detail_digest(&changed),
        items[0]["detail_hash"].as_str().expect("digest")
    );
}

/// The stored bytes of each record from `from` on.
fn record_sizes(s: &Server, from: u64) -> Vec<usize> {
    let r = s
        .raw()
        .get(format!("{}/admin/v1/log?from={from}", s.url))
        .bearer_auth(common::ADMIN_TOKEN)
        .send()
        .expect("send");
    r.text()
        .expect("text")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("line");
            base64::engine::general_purpose::STANDARD
                .decode(v["record"].as_str().expect("record"))
                .expect("base64")
                .len()
        })
        .collect()
}

#[test]
fn audit_reads_are_recorded_by_reference_and_render_byte_for_byte() {
    let mut s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let past = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339();
    let entries: Vec<Value> = (0..120)
        .map(|i| {
            let mut e = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200,
                "model_id": "gpt-4o-mini", "duration": 12.5 + i as f64 / 7.0,
                "balance_consumed_usd": 1e-7 * i as f64, "metadata": {"i": i, "team": "a"}});
            if i % 10 == 3 {
                e["created_at"] = json!(past);
            }
            e
        })
        .collect();
    let (status, v) = ingest(&s, json!(entries));
    assert_eq!(status, 200, "{v}");
    let ingested = v["data"]["ids"][7].as_str().expect("id").to_string();
    // A full page of 100: its entry in the log holds a reference, not the page.
    let (head, _) = s.head();
    let (status, page) = get_text(&s, "/v1/audit/logs?page_size=100", &key);
    assert_eq!(status, 200, "{page}");
    assert!(page.len() > 20_000, "{}", page.len());
    let sizes = record_sizes(&s, head + 1);
    assert_eq!(sizes.len(), 1, "{sizes:?}");
    assert!(
        sizes[0] < 2_000,
        "the list call appended {} bytes",
        sizes[0]
    );
    // A cursor page, a detail read of an ingested entry and one of a list call's entry.
    let cursor = serde_json::from_str::<Value>(&page).expect("json")["data"]["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_string();
    let (_, cursor_page) = get_text(
        &s,
        &format!("/v1/audit/logs?page_size=30&cursor={cursor}"),
        &key,
    );
    let (_, read) = get_text(&s, &format!("/v1/audit/logs/{ingested}"), &key);
    let lists = s
        .get("/v1/audit/logs?action=audit.list&page_size=10", &key)
        .1;
    let first_list = lists["data"]["logs"][1]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (_, read_of_list) = get_text(&s, &format!("/v1/audit/logs/{first_list}"), &key);
    // A read of that read nests it; a later read of this one names it instead of nesting.
    let read_id = newest(&s, &key, "audit.read")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (_, read_of_read) = get_text(&s, &format!("/v1/audit/logs/{read_id}"), &key);
    let reads = s
        .get("/v1/audit/logs?action=audit.read&page_size=10", &key)
        .1;
    let read_ids: Vec<String> = reads["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect();
    // Newest first: the read of the read, the read of the list, the read of the ingested entry.
    assert_eq!(read_ids.len(), 3, "{reads}");
    let list_ids: Vec<String> = s
        .get("/v1/audit/logs?action=audit.list&page_size=10", &key)
        .1["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect();
    // Newest first: three filtered lists, the cursor page, the full page.
    assert_eq!(list_ids.len(), 5, "{list_ids:?}");
    assert_eq!(list_ids[4], first_list);
    let want = [
        (list_ids[4].clone(), page.clone()),
        (list_ids[3].clone(), cursor_page.clone()),
        (read_ids[2].clone(), read.clone()),
        (read_ids[1].clone(), read_of_list.clone()),
    ];
    let check = |s: &Server, when: &str| {
        for (id, sent) in &want {
            let (status, detail) = get_text(s, &format!("/v1/audit/logs/{id}"), &key);
            assert_eq!(status, 200, "{detail}");
            assert_eq!(&response_body_text(&detail), sent, "{when}: entry {id}");
        }
        let (_, detail) = get_text(s, &format!("/v1/audit/logs/{}", read_ids[0]), &key);
        let shown: Value = serde_json::from_str(&response_body_text(&detail)).expect("json");
        assert_eq!(shown, json!({ "_detail_of": read_id }), "{when}");
    };
    // The read of the read did answer the nested read in full.
    let nested: Value = serde_json::from_str(&read_of_read).expect("json");
    assert_eq!(
        nested["data"]["response_body"]["data"]["id"],
        json!(first_list)
    );
    check(&s, "at once");
    // The plan changes (hashes hidden now, a shorter retention): answers render as they were.
    s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"plan": "free"})),
    );
    check(&s, "after a plan change");
    s.restart();
    check(&s, "after a restart");
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on(&replayed);
    check(&r, "after a replay");
}
