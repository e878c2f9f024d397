//! The worst audit list page a tenant can make has a bounded size: every caller-supplied field
//! of an entry is bounded (docs/API.md, "Bounds on what an entry records"), so a page of 100 is
//! at most the bound docs/API.md derives from them.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{get_text, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// The largest list item (docs/API.md, "Bounds on what an entry records"): 861 bytes of keys,
/// punctuation and fixed-width values, plus the caller-supplied texts at their bounds made of
/// control characters, which JSON writes in six bytes each (`\u0001`), plus 4,096 bytes of
/// metadata (bounded as compact JSON, so as the list writes it).
const ITEM_MAX: usize = 861 + 6 * (3 * 256 + 512 + 1024) + 4096;
/// The largest page: 100 items, 99 commas between them, and 235 bytes of envelope (`total`
/// and `page` of 20 digits, a cursor of 83 characters).
const PAGE_MAX: usize = 235 + 100 * ITEM_MAX + 99;

/// One byte that JSON writes as six.
const CTRL: char = '\u{1}';

fn text(n: usize) -> String {
    std::iter::repeat_n(CTRL, n).collect()
}

/// A metadata object whose compact JSON is exactly 4,096 bytes, nearly all of it escapes.
fn max_metadata() -> Value {
    // `{"k":"` and `"}` around the value; 681 escapes of 6 bytes and 2 plain bytes fill 4,088.
    let m = json!({ "k": format!("{}ab", text(681)) });
    assert_eq!(serde_json::to_string(&m).expect("json").len(), 4096);
    m
}

/// An ingested entry with every field at its bound, and every number at its longest.
fn worst_entry(tenant: &str) -> Value {
    json!({
        "tenant_id": tenant,
        // A dotted name of 100 bytes: the longest action.
        "action": format!("gateway.{}", "x".repeat(92)),
        "model_id": text(256),
        "project_id": text(256),
        "gateway_id": text(256),
        // The longest text of an IP address: six groups and an IPv4 tail, 45 bytes.
        "ip_address": "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
        "user_agent": text(512),
        "http_status": 599,
        "error_code": i64::MIN,
        "error_msg": text(1024),
        // f64's longest shortest-round-trip form (23 bytes).
        "duration": f64::MIN_POSITIVE,
        "credits_consumed": f64::MIN_POSITIVE,
        "balance_consumed_usd": f64::MIN_POSITIVE,
        "is_cache_hit": false,
        "tokens": {"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX, "total_tokens": u64::MAX},
        "metadata": max_metadata(),
    })
}

#[test]
fn the_worst_list_page_stays_within_its_documented_bound() {
    assert_eq!((ITEM_MAX, PAGE_MAX), (18_781, 1_878_434), "docs/API.md");
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");

    // Audited requests with the largest User-Agent the edge lets through (headers are at most
    // 32 KiB) and a maximal X-Audit-Metadata: the agent is stored truncated with its length.
    let ua = "\"".repeat(27_000);
    let tags = serde_json::to_string(&max_metadata()).expect("json");
    assert_eq!(tags.len(), 4096);
    for _ in 0..10 {
        let r = s
            .raw()
            .get(format!("{}/v1/memories", s.url))
            .bearer_auth(&key)
            .header("user-agent", &ua)
            .header("x-audit-metadata", &tags)
            .send()
            .expect("send");
        assert_eq!(r.status().as_u16(), 200);
    }
    // A 300 KB User-Agent does not fit the HTTP stack's head buffer: answered 431 before any
    // route and closed, it is no entry at all (the count below holds that). The server closes
    // with the rest of the head unread, so the client may see a reset, while writing or in
    // place of the answer; whatever answer arrives is that 431.
    let mut conn = TcpStream::connect(s.url.trim_start_matches("http://")).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = write!(
        conn,
        "GET /v1/memories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nUser-Agent: {}\r\n\r\n",
        "u".repeat(300_000)
    );
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer);
    if !answer.is_empty() {
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
    }
    drop(conn);

    // 100 entries with every field at its bound, ingested after the requests (so newest).
    let entry = worst_entry(&tenant);
    for _ in 0..5 {
        let (status, v) = s.admin(
            Method::POST,
            "/admin/v1/audit/logs",
            Some(json!({ "entries": vec![entry.clone(); 20] })),
        );
        assert_eq!(status, 200, "{v}");
    }

    let (status, body) = get_text(&s, "/v1/audit/logs?page_size=100", &key);
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    let v: Value = serde_json::from_str(&body).expect("json");
    let logs = v["data"]["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), 100);
    assert_eq!(v["data"]["total"], json!(110));
    for item in logs {
        for (field, want) in entry.as_object().expect("object") {
            if field != "tenant_id" {
                assert_eq!(&item[field], want, "{field}");
            }
        }
    }
    assert!(
        body.len() <= PAGE_MAX,
        "a page of {} bytes, over the bound of {PAGE_MAX}",
        body.len()
    );
    // The page is the worst there is: within a few hundred bytes of the bound (f64s one byte
    // short of the bound's 24, short `total`, `page` and cursor).
    assert!(
        body.len() > PAGE_MAX - 500,
        "a page of {} bytes, not the worst",
        body.len()
    );

    // The requests' entries, on the next page: the agent cut at 512 bytes and marked, the
    // tags as sent.
    let cursor = v["data"]["next_cursor"].as_str().expect("a full page");
    let (status, body) = get_text(
        &s,
        &format!("/v1/audit/logs?page_size=100&cursor={cursor}"),
        &key,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.len() <= PAGE_MAX);
    let v: Value = serde_json::from_str(&body).expect("json");
    let logs = v["data"]["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), 10, "{v}");
    for item in logs {
        assert_eq!(item["action"], json!("memory.list"));
        assert_eq!(
            item["user_agent"],
            json!(format!("{}...[truncated: 27000 bytes]", "\"".repeat(512)))
        );
        assert_eq!(item["metadata"], max_metadata());
    }

    // A field over its bound is refused naming it, and nothing of the call is stored.
    let mut over = entry.clone();
    over["user_agent"] = json!("u".repeat(300_000));
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": [entry, over] })),
    );
    assert_eq!(
        (status, v),
        (
            400,
            json!({"success": false, "code": 4000, "message": "entries[1]: user_agent is 300000 bytes; at most 512 are allowed", "data": null})
        )
    );
    let (_, v) = s.get(
        &format!(
            "/v1/audit/logs?page_size=1&action=gateway.{}",
            "x".repeat(92)
        ),
        &key,
    );
    assert_eq!(v["data"]["total"], json!(100));
}
