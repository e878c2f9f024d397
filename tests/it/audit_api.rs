//! The audit read API and ingestion, to the letter of the interface.

use crate::common;

use std::collections::HashSet;

use common::{assert_error, metrics_text, Server};
use reqwest::Method;
use serde_json::{json, Value};

fn ingest(s: &Server, entries: Vec<Value>) -> (u16, Value) {
    s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": entries})),
    )
}

fn ago(days: f64) -> String {
    (chrono::Utc::now() - chrono::Duration::milliseconds((days * 86_400_000.0) as i64)).to_rfc3339()
}

#[test]
fn retention_is_per_plan_and_old_start_times_are_clamped() {
    let s = Server::start();
    for (plan, days) in [
        ("free", 7.0),
        ("basic", 30.0),
        ("pro", 90.0),
        ("business", 365.0),
    ] {
        let (tenant, key) = s.tenant_with_key(plan);
        let (status, v) = ingest(
            &s,
            vec![
                json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "created_at": ago(days - 1.0)}),
                json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "created_at": ago(days + 1.0)}),
            ],
        );
        assert_eq!(status, 200, "{v}");
        let (inside, outside) = (
            v["data"]["ids"][0].as_str().expect("id"),
            v["data"]["ids"][1].as_str().expect("id"),
        );
        let (status, list) = s.get("/v1/audit/logs", &key);
        assert_eq!(status, 200);
        assert_eq!(list["data"]["total"], json!(1), "{plan}: {list}");
        assert_eq!(list["data"]["logs"][0]["id"], json!(inside));
        // A start older than the window is clamped silently, never an error.
        let (status, clamped) = s.get("/v1/audit/logs?start_time=2000-01-01T00:00:00Z", &key);
        assert_eq!(status, 200);
        assert_eq!(
            clamped["data"]["total"],
            json!(2),
            "{plan}: the list call above counts too: {clamped}"
        );
        assert_eq!(s.get(&format!("/v1/audit/logs/{inside}"), &key).0, 200);
        assert_error(
            &s.get(&format!("/v1/audit/logs/{outside}"), &key),
            404,
            4040,
        );
    }
}

#[test]
fn filters_paging_and_validation() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("pro");
    let entries: Vec<Value> = (0..30)
        .map(|i| {
            json!({"tenant_id": tenant, "action": if i % 3 == 0 { "rag.query" } else { "gateway.chat" },
                   "http_status": 200, "created_at": ago(2.0 - i as f64 * 0.01)})
        })
        .collect();
    let (status, v) = ingest(&s, entries);
    assert_eq!(status, 200, "{v}");
    let ids: Vec<String> = v["data"]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|i| i.as_str().expect("id").to_string())
        .collect();

    let (status, v) = s.get("/v1/audit/logs?action=rag.query", &key);
    assert_eq!(status, 200);
    assert_eq!(
        (
            v["success"].clone(),
            v["code"].clone(),
            v["message"].clone()
        ),
        (json!(true), json!(1000), json!("ok"))
    );
    let d = &v["data"];
    assert_eq!(
        (
            d["total"].clone(),
            d["page"].clone(),
            d["page_size"].clone()
        ),
        (json!(10), json!(1), json!(50))
    );
    // Newest first: the last ingested rag.query (i = 27) leads.
    assert_eq!(d["logs"][0]["id"], json!(ids[27]));
    assert!(d["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .all(|e| e["action"] == json!("rag.query")));

    let (_, v) = s.get(
        "/v1/audit/logs?action=gateway.chat&page=2&page_size=7",
        &key,
    );
    assert_eq!(v["data"]["total"], json!(20));
    assert_eq!(v["data"]["logs"].as_array().map(Vec::len), Some(7));
    let (_, v) = s.get(
        "/v1/audit/logs?action=gateway.chat&page=9&page_size=7",
        &key,
    );
    assert_eq!(
        (v["data"]["total"].clone(), v["data"]["logs"].clone()),
        (json!(20), json!([]))
    );
    let (_, v) = s.get("/v1/audit/logs?page_size=1000", &key);
    assert_eq!(v["data"]["page_size"], json!(100));

    // An inclusive time range around i = 10..=19 holds the rag.query entries 12, 15 and 18.
    let (status, v) = s.get(
        &format!(
            "/v1/audit/logs?start_time={}&end_time={}&action=rag.query",
            urlencode(&ago(2.0 - 0.095)),
            urlencode(&ago(2.0 - 0.195))
        ),
        &key,
    );
    assert_eq!(status, 200);
    assert_eq!(v["data"]["total"], json!(3), "{v}");
    let got: Vec<Value> = v["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(got, vec![json!(ids[18]), json!(ids[15]), json!(ids[12])]);

    for bad in [
        "/v1/audit/logs?page=0",
        "/v1/audit/logs?page=-1",
        "/v1/audit/logs?page=abc",
        "/v1/audit/logs?page_size=0",
        "/v1/audit/logs?start_time=yesterday",
        "/v1/audit/logs?end_time=2026-13-45",
        "/v1/audit/logs?start_time=2026-02-01T00:00:00Z&end_time=2026-01-01T00:00:00Z",
        "/v1/audit/logs?cursor=garbage!",
    ] {
        assert_error(&s.get(bad, &key), 400, 4000);
    }
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

#[test]
fn cursor_paging_is_stable_under_concurrent_appends() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let entries: Vec<Value> = (0..45).map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"i": i}})).collect();
    assert_eq!(ingest(&s, entries).0, 200);
    let (_, first) = s.get("/v1/audit/logs?action=gateway.chat&page_size=10", &key);
    let mut seen: Vec<String> = first["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect();
    let mut cursor = first["data"]["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_string();
    loop {
        // New entries keep arriving, one of them backdated into the middle of the range.
        let backdated = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "created_at": ago(0.5)});
        let fresh = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200});
        assert_eq!(ingest(&s, vec![backdated, fresh]).0, 200);
        let (status, page) = s.get(
            &format!("/v1/audit/logs?action=gateway.chat&page_size=10&cursor={cursor}"),
            &key,
        );
        assert_eq!(status, 200, "{page}");
        seen.extend(
            page["data"]["logs"]
                .as_array()
                .expect("logs")
                .iter()
                .map(|e| e["id"].as_str().expect("id").to_string()),
        );
        match page["data"]["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(
        seen.len(),
        45,
        "exactly the entries of the first page's snapshot"
    );
    assert_eq!(unique.len(), 45, "no entry twice");
}

#[test]
fn ingestion_validates_each_entry_and_is_atomic() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let good = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200});
    let cases = [
        (
            json!({"tenant_id": "00000000-0000-0000-0000-000000000000", "action": "gateway.chat", "http_status": 200}),
            "unknown tenant_id",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": "200"}),
            "http_status",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "created_at": ago(-0.01)}),
            "future",
        ),
        (
            json!({"tenant_id": tenant, "action": "", "http_status": 200}),
            "action",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "tokens": {"prompt_tokens": "x"}}),
            "prompt_tokens",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": [1]}),
            "metadata",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "surprise": 1}),
            "surprise",
        ),
        // The detail fields hold the interface's types.
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "request_body": "text"}),
            "request_body must be a JSON object or null",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "response_body": [1]}),
            "response_body must be a JSON object or null",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "input_content": "hi"}),
            "input_content must be a JSON object, array or null",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "output_content": 7}),
            "output_content must be a string, a JSON object or null",
        ),
        (
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "rag_results": [
                {"content": "doc", "similarity": 0.9, "source": {}},
                {"content": "doc", "similarity": "high", "source": {}}]}),
            "rag_results[1] must be an object with content (string), similarity (number) and source (object)",
        ),
    ];
    for (bad, needle) in cases {
        let resp = ingest(&s, vec![good.clone(), good.clone(), bad]);
        assert_error(&resp, 400, 4000);
        let msg = resp.1["message"].as_str().expect("message");
        assert!(
            msg.starts_with("entries[2]: ") && msg.contains(needle),
            "{msg}"
        );
    }
    // Nothing of the refused calls landed; a late entry four minutes ahead is accepted.
    let (_, v) = s.get("/v1/audit/logs", &key);
    assert_eq!(v["data"]["total"], json!(0));
    let skewed = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "created_at": ago(-4.0 / 1440.0)});
    assert_eq!(ingest(&s, vec![skewed]).0, 200);
    let nulls = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "request_body": null,
        "response_body": null, "input_content": null, "output_content": null, "rag_results": null});
    assert_eq!(ingest(&s, vec![nulls]).0, 200);
    assert_error(&ingest(&s, vec![]), 400, 4000);
    let too_many: Vec<Value> = (0..1001).map(|_| good.clone()).collect();
    assert_error(&ingest(&s, too_many), 400, 4000);
    let (status, v) = ingest(&s, (0..1000).map(|_| good.clone()).collect());
    assert_eq!(status, 200);
    assert_eq!(v["data"]["ids"].as_array().map(Vec::len), Some(1000));
}

#[test]
fn whole_numbers_written_with_a_fraction_are_those_numbers() {
    // The interface calls http_status, error_code and the token counts numbers: 429.0 is 429
    // (as top_k 5.0 is 5 on search), a real fraction or a value out of range is refused.
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let entry = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 429.0, "error_code": -7.0,
        "tokens": {"prompt_tokens": 120.0, "completion_tokens": 80, "total_tokens": 2e2}});
    let (status, v) = ingest(&s, vec![entry]);
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["ids"][0].as_str().expect("id").to_string();
    let (status, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(status, 200);
    assert_eq!(d["data"]["http_status"], json!(429));
    assert_eq!(d["data"]["is_success"], json!(false));
    assert_eq!(d["data"]["error_code"], json!(-7));
    assert_eq!(
        d["data"]["tokens"],
        json!({"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200})
    );
    let good = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200});
    for (field, value, needle) in [
        (
            "http_status",
            json!(200.5),
            "expected a whole number, got 200.5",
        ),
        ("http_status", json!(70000), "70000 is out of range"),
        ("http_status", json!(-1.0), "-1.0 is out of range"),
        (
            "error_code",
            json!(1.25),
            "expected a whole number, got 1.25",
        ),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        let resp = ingest(&s, vec![good.clone(), bad]);
        assert_error(&resp, 400, 4000);
        let msg = resp.1["message"].as_str().expect("message");
        assert!(
            msg.starts_with(&format!("entries[1]: {field}: ")) && msg.contains(needle),
            "{msg}"
        );
    }
    let mut bad = good.clone();
    bad["tokens"] = json!({"prompt_tokens": 1.5, "completion_tokens": 0, "total_tokens": 1});
    let resp = ingest(&s, vec![bad]);
    assert_error(&resp, 400, 4000);
    let msg = resp.1["message"].as_str().expect("message");
    assert!(
        msg.starts_with("entries[0]: tokens.prompt_tokens: expected a whole number"),
        "{msg}"
    );
    // Of the gateway's entries only the first call's landed (the detail read above is in
    // the log too, as an entry of another action).
    let (_, v) = s.get("/v1/audit/logs?action=gateway.chat", &key);
    assert_eq!(v["data"]["total"], json!(1), "{v}");
}

#[test]
fn entries_record_the_request_faithfully() {
    let s = Server::start_with(&["--audit-body-limit", "200"]);
    let (tenant, key) = s.tenant_with_key("business");
    let full = json!({
        "tenant_id": tenant, "action": "gateway.chat", "model_id": "gpt-4o-mini", "project_id": "p1", "gateway_id": "gw",
        "ip_address": "10.0.0.7", "user_agent": "gateway/2", "http_status": 429, "error_code": 42, "error_msg": "slow down",
        "duration": 812.5, "credits_consumed": 2, "balance_consumed_usd": 0.004, "is_cache_hit": true,
        "tokens": {"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200}, "metadata": {"team": "search"},
        "request_body": {"messages": [{"role": "user", "content": "hi"}]}, "response_body": {"ok": false},
        "input_content": [{"role": "user", "content": "hi"}], "output_content": "hello",
        "rag_query": ["q", "q expanded"], "rag_results": [{"content": "doc", "similarity": 0.9, "source": {"document_id": "d1", "name": "a.pdf", "mime_type": "application/pdf", "file_size": 10}}]
    });
    let (_, v) = ingest(&s, vec![full]);
    let id = v["data"]["ids"][0].as_str().expect("id").to_string();
    let (status, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(status, 200);
    let d = &d["data"];
    for (k, want) in [
        ("action", json!("gateway.chat")),
        ("http_status", json!(429)),
        ("is_success", json!(false)),
        ("is_cache_hit", json!(true)),
        ("error_code", json!(42)),
        ("duration", json!(812.5)),
        ("credits_consumed", json!(2.0)),
        (
            "tokens",
            json!({"prompt_tokens": 120, "completion_tokens": 80, "total_tokens": 200}),
        ),
        ("rag_query", json!(["q", "q expanded"])),
        ("output_content", json!("hello")),
        ("memory_query", Value::Null),
        ("memory_results", Value::Null),
    ] {
        assert_eq!(d[k], want, "{k}: {d}");
    }
    assert_eq!(d["rag_results"][0]["source"]["file_size"], json!(10));
    assert_eq!(d["hash"].as_str().map(str::len), Some(64));
    // The interface's 28 fields, `detail_hash`, and on a sealed entry `sealed` and the
    // `detail_salt` its digest is keyed with.
    assert_eq!(d.as_object().map(|o| o.len()), Some(31), "{d}");

    // The tenant's own call: peer address, user agent, metadata header, measured duration,
    // the response recorded, no Authorization anywhere, a large body truncated with a marker.
    let resp = s
        .raw()
        .get(format!("{}/v1/audit/logs?page_size=1", s.url))
        .bearer_auth(&key)
        .header("user-agent", "tour/1.0")
        .header("x-audit-metadata", r#"{"ticket":"SEC-42"}"#)
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let (_, list) = s.get("/v1/audit/logs?action=audit.list", &key);
    let e = &list["data"]["logs"][0];
    assert_eq!(
        (
            e["ip_address"].clone(),
            e["user_agent"].clone(),
            e["metadata"].clone()
        ),
        (
            json!("127.0.0.1"),
            json!("tour/1.0"),
            json!({"ticket": "SEC-42"})
        )
    );
    assert!(e["duration"].as_f64().is_some_and(|d| d > 0.0), "{e}");
    assert_eq!(
        (
            e["model_id"].clone(),
            e["tokens"].clone(),
            e["credits_consumed"].clone()
        ),
        (Value::Null, Value::Null, json!(0.0))
    );
    let (_, detail) = s.get(
        &format!("/v1/audit/logs/{}", e["id"].as_str().expect("id")),
        &key,
    );
    // A list's answer is recorded by reference and rendered whole, whatever the body limit.
    let rb = &detail["data"]["response_body"];
    assert_eq!(rb["data"]["page_size"], json!(1), "{rb}");
    assert!(
        detail["data"]["response_ref"]["audit.list"].is_object(),
        "{detail}"
    );
    assert!(
        !detail.to_string().contains(&key),
        "the API key leaked into an entry"
    );
    let bad_meta = s
        .raw()
        .get(format!("{}/v1/audit/logs", s.url))
        .bearer_auth(&key)
        .header("x-audit-metadata", "[1]")
        .send()
        .expect("send");
    let status = bad_meta.status().as_u16();
    let body: Value = bad_meta.json().expect("json");
    assert_error(&(status, body.clone()), 400, 4000);
    // A response within the limit is recorded whole, exactly as it was sent.
    let (_, list) = s.get("/v1/audit/logs?action=audit.list&page_size=1", &key);
    let refused = &list["data"]["logs"][0];
    assert_eq!(refused["http_status"], json!(400), "{refused}");
    let (_, detail) = s.get(
        &format!("/v1/audit/logs/{}", refused["id"].as_str().expect("id")),
        &key,
    );
    assert_eq!(detail["data"]["response_body"], body);
}

#[test]
fn metrics_are_exposed() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("free");
    assert_eq!(s.get("/v1/audit/logs", &key).0, 200);
    // The head the metrics give is the folded one: the read's own entry (seq 3) folded.
    s.wait_head(3);
    let text = metrics_text(&s);
    for needle in [
        "auditmem_http_requests_total{route=\"/v1/audit/logs\",method=\"GET\",status=\"200\"} 1",
        "auditmem_http_request_duration_seconds_bucket{route=\"/v1/audit/logs\"",
        "auditmem_appender_group_events_bucket",
        "auditmem_appender_sync_seconds_bucket",
        "auditmem_log_head_seq 3",
        "auditmem_exports_processing 0",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

/// Found by the Schemathesis run: a page number so large that its offset saturates overflowed
/// `1 + offset` in the audit index, which panicked (the connection closed without an answer)
/// in a debug build and wrapped to a wrong start in a release one. Such a page is past the end:
/// 200 and no entries, with the total still counted.
#[test]
fn a_page_far_past_the_end_is_empty() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("pro");
    let entries: Vec<Value> = (0..3)
        .map(|_| json!({"tenant_id": tenant, "action": "rag.query", "http_status": 200, "created_at": ago(1.0)}))
        .collect();
    let (status, v) = ingest(&s, entries);
    assert_eq!(status, 200, "{v}");
    for (page, page_size) in [(i64::MAX, 100), (1 << 62, 4), (i64::MAX, 1)] {
        let (status, v) = s.get(
            &format!("/v1/audit/logs?action=rag.query&page={page}&page_size={page_size}"),
            &key,
        );
        assert_eq!(status, 200, "page {page}: {v}");
        assert_eq!(
            v["data"],
            json!({"logs": [], "total": 3, "page": page, "page_size": page_size, "next_cursor": null}),
            "page {page}"
        );
    }
}

/// A tenant with more entries than a sealed block of its time index (2,048 pairs) has them
/// answered from the block file the server writes sealed blocks to: totals, time ranges and
/// deep pages as the entries' times say, with most entries arriving out of time order (each
/// one landing in a block sealed before it).
#[test]
fn a_tenant_past_a_sealed_block_is_answered_from_the_block_file() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("pro");
    // Whole seconds: an entry's time and a query's bound then mean the same instant whatever
    // precision each is kept at.
    let base =
        chrono::DateTime::from_timestamp(chrono::Utc::now().timestamp() - 10, 0).expect("a time");
    let at = |secs_ago: i64| {
        (base - chrono::Duration::seconds(secs_ago))
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    };
    // Entry i is (i * 7919) % 5000 + 1 seconds old: every age from 1 to 5,000 once, scrambled.
    let age = |i: i64| (i * 7919) % 5000 + 1;
    let mut by_age: Vec<(i64, String)> = Vec::new();
    for batch in 0..5i64 {
        let entries: Vec<Value> = (batch * 1000..(batch + 1) * 1000)
            .map(|i| json!({"tenant_id": tenant, "action": "rag.query", "http_status": 200, "created_at": at(age(i))}))
            .collect();
        let (status, v) = ingest(&s, entries);
        assert_eq!(status, 200, "{v}");
        let ids = v["data"]["ids"].as_array().expect("ids");
        for (j, id) in ids.iter().enumerate() {
            by_age.push((
                age(batch * 1000 + j as i64),
                id.as_str().expect("id").to_string(),
            ));
        }
    }
    // Newest first is youngest first.
    by_age.sort();
    let ids_of = |v: &Value| -> Vec<String> {
        v["data"]["logs"]
            .as_array()
            .expect("logs")
            .iter()
            .map(|e| e["id"].as_str().expect("id").to_string())
            .collect()
    };
    for page in [1usize, 21, 50] {
        let (status, v) = s.get(
            &format!("/v1/audit/logs?action=rag.query&page={page}&page_size=100"),
            &key,
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["data"]["total"], 5000);
        let want: Vec<String> = by_age[(page - 1) * 100..page * 100]
            .iter()
            .map(|(_, id)| id.clone())
            .collect();
        assert_eq!(ids_of(&v), want, "page {page}");
    }
    // Ages 1,001 to 3,000 s, both ends inclusive: 2,000 entries, the oldest of them last.
    let (status, v) = s.get(
        &format!(
            "/v1/audit/logs?action=rag.query&page=20&page_size=100&start_time={}&end_time={}",
            urlencode(&at(3000)),
            urlencode(&at(1001))
        ),
        &key,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["total"], 2000);
    let want: Vec<String> = by_age[2900..3000]
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(ids_of(&v), want);
    // The sealed blocks went to the file: its gauge counts their bytes.
    let text = metrics_text(&s);
    let file_bytes: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("auditmem_index_file_bytes{index=\"audit_time\"} "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the block file gauge");
    assert!(file_bytes >= 1000.0, "{file_bytes} bytes in the block file");
}
