//! Read-your-writes across nodes: a write's answer names the log position it was committed at,
//! and another node asked for that position answers once it has folded that far, or 503 (5030)
//! after `--consistency-wait-ms`.

use super::harness::{api_node, request, tenant_with_key, NatsCluster, MIN_POSITION};
use crate::common::{assert_error, ADMIN_TOKEN};

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

/// The line `GET /admin/v1/log?from=SEQ` gives for `seq`: the record as stored, base64.
fn record_at(s: &crate::common::Server, seq: u64) -> Value {
    let r = s
        .raw()
        .get(format!("{}/admin/v1/log?from={seq}", s.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().expect("text");
    let first = text.lines().next().expect("a record at seq");
    serde_json::from_str(first).expect("a JSON line")
}

#[test]
fn a_write_on_one_node_is_read_on_another_at_its_position_and_a_position_ahead_is_503() {
    let nats = NatsCluster::start();
    let a = api_node(&nats, &[]);
    let b = api_node(&nats, &["--consistency-wait-ms", "400"]);

    // Admin writes carry their position too; B, asked for it, knows the key at once.
    let (_, key, key_pos) = tenant_with_key(&a, "business");
    let r = request(&b, Method::GET, "/v1/memories", &key, None, Some(key_pos));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"]["total"], json!(0), "{}", r.body);

    let content = "prefers the window seat on morning flights";
    let created = request(
        &a,
        Method::POST,
        "/v1/memories",
        &key,
        Some(&json!({"content": content, "memory_type": "fact", "importance": 0.7})),
        None,
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let pos = created.pos();
    assert!(pos > key_pos, "create at {pos}, key at {key_pos}");
    let id = created.body["data"]["id"].as_str().expect("id").to_string();

    let read = request(
        &b,
        Method::GET,
        &format!("/v1/memories/{id}"),
        &key,
        None,
        Some(pos),
    );
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body["data"], created.body["data"]);
    assert_eq!(read.body["data"]["content"], json!(content));
    assert_eq!(read.body["data"]["importance"], json!(0.7));
    // The read appended its own audit entry, after the create's.
    assert!(read.pos() > pos, "read at {}, create at {pos}", read.pos());
    // One numbering: the record at the create's position is the same bytes on both nodes.
    assert_eq!(record_at(&a, pos), record_at(&b, pos));
    assert_eq!(record_at(&a, pos)["seq"], json!(pos));

    // A position far ahead: 503 (5030) once the wait is up, not before and not much after.
    let r = request(
        &b,
        Method::GET,
        &format!("/v1/memories/{id}"),
        &key,
        None,
        Some(pos + 1_000_000),
    );
    assert_error(&r.pair(), 503, 5030);
    assert!(
        r.elapsed >= Duration::from_millis(400) && r.elapsed < Duration::from_millis(2_400),
        "answered after {:?}",
        r.elapsed
    );
    // A position that is not a number is refused, not waited for.
    let r = b
        .raw()
        .get(format!("{}/v1/memories/{id}", b.url))
        .bearer_auth(&key)
        .header(MIN_POSITION, "soon")
        .send()
        .expect("send");
    let status = r.status().as_u16();
    assert_error(&(status, r.json().expect("json")), 400, 4000);
    // Health is as on one machine.
    for n in [&a, &b] {
        let r = n
            .raw()
            .get(format!("{}/healthz", n.url))
            .send()
            .expect("send");
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().expect("json");
        assert_eq!(v["success"], json!(true), "{v}");
        assert_eq!(v["data"]["status"], json!("ok"), "{v}");
    }
}
