//! Request limits against a real server: the body size limit (default 1 MiB), the per-key rate
//! limit, and the exact boundaries of memory content and search `top_k`. (Ingestion batches of 1,000/1,001 entries
//! are covered in `audit_api.rs`, the other validation errors in `memory_api.rs`.)

use crate::common;

use std::io::Cursor;
use std::time::Duration;

use common::{assert_error, cli, Server};
use reqwest::Method;
use serde_json::{json, Value};

const MIB: usize = 1024 * 1024;

/// A memory-create body of exactly `len` bytes (its content far over 10,000 characters).
fn body_of(len: usize) -> String {
    let shell = r#"{"content":"","memory_type":"fact"}"#;
    let body = format!(
        r#"{{"content":"{}","memory_type":"fact"}}"#,
        "x".repeat(len - shell.len())
    );
    assert_eq!(body.len(), len);
    body
}

/// Posts a raw body to `/v1/memories`. An over-limit body is answered (413) and the connection
/// closed before the server reads the rest, so a client still writing may see the connection
/// end before the answer (hyper: `IncompleteMessage`): such transport errors are retried a few
/// times with a fresh body; the answer itself is what the tests assert.
fn post_raw(s: &Server, key: &str, body: impl Fn() -> reqwest::blocking::Body) -> (u16, Value) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let sent = s
            .raw()
            .post(format!("{}/v1/memories", s.url))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body())
            .send();
        match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                return (status, resp.json().expect("json"));
            }
            Err(e) if attempt < 5 => eprintln!("attempt {attempt}: {e}; retrying"),
            Err(e) => panic!("send, {attempt} attempts: {e}"),
        }
    }
}

#[test]
fn bodies_over_one_mebibyte_are_refused_with_413_by_default() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");

    // A key that does not exist, with a body one byte over announced by Content-Length: the
    // key is looked at first (401), and no byte of the body is read for it either.
    assert_error(
        &post_raw(&s, "amk_no-such-key", || body_of(MIB + 1).into()),
        401,
        4010,
    );

    // One byte over, announced by Content-Length: refused before the body is read.
    let over = post_raw(&s, &key, || body_of(MIB + 1).into());
    assert_error(&over, 413, 4130);

    // Exactly 1 MiB passes the limit and reaches validation (the content is too long).
    let at = post_raw(&s, &key, || body_of(MIB).into());
    assert_error(&at, 400, 4000);
    assert!(
        at.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("content")),
        "{}",
        at.1
    );

    // Streamed without a length (chunked), the gate notices while reading.
    let chunked = || reqwest::blocking::Body::new(Cursor::new(body_of(MIB + 1).into_bytes()));
    assert_error(&post_raw(&s, &key, chunked), 413, 4130);

    // Both refusals are the tenant's audit entries, recorded without the body: the
    // Content-Length one, then the 400 of the exact-limit body, then the chunked one (once per
    // attempt if a retry was needed), newest first.
    let (status, v) = s.get("/v1/audit/logs?action=memory.write", &key);
    assert_eq!(status, 200, "{v}");
    let logs = v["data"]["logs"].as_array().expect("logs");
    let mut statuses: Vec<&Value> = logs.iter().map(|e| &e["http_status"]).collect();
    statuses.dedup();
    assert_eq!(statuses, [&json!(413), &json!(400), &json!(413)], "{v}");
    let first = logs.last().expect("entries");
    assert_eq!(first["error_code"], json!(4130), "{v}");
    assert_eq!(logs[0]["error_code"], json!(4130), "{v}");
    for entry in [first, &logs[0]] {
        let id = entry["id"].as_str().expect("id");
        let (status, detail) = s.get(&format!("/v1/audit/logs/{id}"), &key);
        assert_eq!(status, 200, "{detail}");
        assert_eq!(detail["data"]["request_body"], Value::Null, "{detail}");
        assert_eq!(detail["data"]["http_status"], json!(413), "{detail}");
    }
}

#[test]
fn memory_content_is_limited_in_characters_and_top_k_to_100() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("free");
    // Two bytes per character: the limit counts characters, not bytes.
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "é".repeat(10_000), "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["content"].as_str().map(|c| c.chars().count()),
        Some(10_000)
    );
    let id = v["data"]["id"].as_str().expect("id").to_string();
    assert_error(
        &s.post(
            "/v1/memories",
            &key,
            json!({"content": "é".repeat(10_001), "memory_type": "fact"}),
        ),
        400,
        4000,
    );
    // The same limit on update.
    let patch = |content: String| {
        s.call(
            Method::PATCH,
            &format!("/v1/memories/{id}"),
            Some(&key),
            Some(&json!({"content": content})),
        )
    };
    assert_error(&patch("z".repeat(10_001)), 400, 4000);
    assert_eq!(patch("z".repeat(10_000)).0, 200);

    let search = |top_k: u64| {
        s.post(
            "/v1/memories/search",
            &key,
            json!({"query": "z", "top_k": top_k}),
        )
    };
    let (status, v) = search(100);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["results"].as_array().map(Vec::len), Some(1));
    let over = search(101);
    assert_error(&over, 400, 4000);
    assert!(
        over.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("top_k")),
        "{}",
        over.1
    );
}

/// A GET with the headers kept: (status, Retry-After, body).
fn get_with_headers(s: &Server, path: &str, key: &str) -> (u16, Option<String>, Value) {
    let resp = s
        .raw()
        .get(format!("{}{path}", s.url))
        .bearer_auth(key)
        .send()
        .expect("send");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, retry_after, resp.json().expect("json"))
}

#[test]
fn each_key_has_a_token_bucket_and_429_says_when_to_retry() {
    // A bucket of 3 refilled every 2 s: a burst of 3 passes, the 4th is refused.
    let s = Server::start_with(&["--rate-limit-per-sec", "0.5", "--rate-limit-burst", "3"]);
    let tenant = s.create_tenant("business");
    let all = ["audit.read", "audit.export", "memory.read", "memory.write"];
    let (k1, k2) = (s.create_key(&tenant, &all), s.create_key(&tenant, &all));
    let (_, other) = s.tenant_with_key("free");

    for i in 0..3 {
        let (status, retry, v) = get_with_headers(&s, "/v1/memories", &k1);
        assert_eq!((status, retry), (200, None), "request {i}: {v}");
    }
    let (status, retry, v) = get_with_headers(&s, "/v1/memories", &k1);
    assert_error(&(status, v.clone()), 429, 4290);
    let retry: u64 = retry
        .expect("Retry-After header")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    // Refused before the body is read or the permission checked: a POST is refused alike.
    assert_error(
        &s.post("/v1/memories/search", &k1, json!({"query": "x"})),
        429,
        4290,
    );

    // Another key of the same tenant, and another tenant's key, have buckets of their own.
    assert_eq!(s.get("/v1/memories", &k2).0, 200);
    assert_eq!(s.get("/v1/memories", &other).0, 200);

    // The refusals are the tenant's audit entries (every authenticated call is), without a body.
    let (status, v) = s.get("/v1/audit/logs?page_size=100", &k2);
    assert_eq!(status, 200, "{v}");
    let refused: Vec<&Value> = v["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .filter(|e| e["http_status"] == json!(429))
        .collect();
    assert_eq!(refused.len(), 2, "{v}");
    for e in &refused {
        assert_eq!(e["is_success"], json!(false));
        assert_eq!(e["error_code"], json!(4290));
    }
    let search = refused
        .iter()
        .find(|e| e["action"] == json!("memory.search"))
        .expect("the refused search is recorded");
    let id = search["id"].as_str().expect("id");
    let (_, detail) = s.get(&format!("/v1/audit/logs/{id}"), &k2);
    assert_eq!(detail["data"]["request_body"], Value::Null, "{detail}");
    assert_eq!(
        detail["data"]["response_body"]["code"],
        json!(4290),
        "{detail}"
    );

    // Waiting as told is enough.
    std::thread::sleep(Duration::from_secs(retry));
    assert_eq!(s.get("/v1/memories", &k1).0, 200);
}

#[test]
fn a_rate_of_zero_disables_the_limit_and_bad_rates_are_refused_at_start() {
    let s = Server::start_with(&["--rate-limit-per-sec", "0", "--rate-limit-burst", "1"]);
    let (_, key) = s.tenant_with_key("free");
    for i in 0..20 {
        let (status, v) = s.get("/v1/memories", &key);
        assert_eq!(status, 200, "request {i}: {v}");
    }
    for (flag, value) in [
        ("--rate-limit-per-sec", "-1"),
        ("--rate-limit-per-sec", "fast"),
        ("--rate-limit-per-sec", "inf"),
        ("--rate-limit-burst", "0"),
    ] {
        let (code, _, stderr) = cli(&["serve", &format!("{flag}={value}")], &[]);
        assert_eq!(code, 2, "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}
