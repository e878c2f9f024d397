//! Request limits against a real server: the body size limit (default 1 MiB), and the exact
//! boundaries of memory content and search `top_k`. (Ingestion batches of 1,000/1,001 entries
//! are covered in `audit_api.rs`, the other validation errors in `memory_api.rs`.)

mod common;

use std::io::Cursor;

use common::{assert_error, Server};
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

fn post_raw(s: &Server, key: &str, body: reqwest::blocking::Body) -> (u16, Value) {
    let resp = s
        .raw()
        .post(format!("{}/v1/memories", s.url))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().expect("json"))
}

#[test]
fn bodies_over_one_mebibyte_are_refused_with_413_by_default() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");

    // One byte over, announced by Content-Length: refused before the body is read.
    let over = post_raw(&s, &key, body_of(MIB + 1).into());
    assert_error(&over, 413, 4130);

    // Exactly 1 MiB passes the limit and reaches validation (the content is too long).
    let at = post_raw(&s, &key, body_of(MIB).into());
    assert_error(&at, 400, 4000);
    assert!(
        at.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("content")),
        "{}",
        at.1
    );

    // Streamed without a length (chunked), the gate notices while reading.
    let chunked = reqwest::blocking::Body::new(Cursor::new(body_of(MIB + 1).into_bytes()));
    assert_error(&post_raw(&s, &key, chunked), 413, 4130);

    // As documented: the Content-Length refusal happens before the key is looked at and is
    // not recorded; the chunked one was authenticated first and is the tenant's entry.
    let (status, v) = s.get("/v1/audit/logs?action=memory.write", &key);
    assert_eq!(status, 200, "{v}");
    let statuses: Vec<&Value> = v["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|e| &e["http_status"])
        .collect();
    assert_eq!(statuses, [&json!(413), &json!(400)], "{v}");
    assert_eq!(v["data"]["logs"][0]["error_code"], json!(4130));
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
    assert_eq!(v["data"]["content"].as_str().map(|c| c.chars().count()), Some(10_000));
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
