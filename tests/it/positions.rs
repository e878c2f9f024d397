//! Log positions on one node (docs/API.md, "Log positions"): every response whose request
//! appended says where (`X-Auditmem-Position`), and a request carrying
//! `X-Auditmem-Min-Position` waits for that position, then 503. The cluster's own tests
//! (`cluster::`) hold the same headers across nodes.

use crate::common::{self, Server, ADMIN_TOKEN};
use reqwest::blocking::Response;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn position(resp: &Response) -> Option<u64> {
    resp.headers()
        .get("x-auditmem-position")
        .map(|v| v.to_str().expect("ascii").parse().expect("a number"))
}

fn body(resp: Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    (status, resp.json().expect("JSON"))
}

#[test]
fn every_write_says_its_position_and_a_later_position_is_waited_for() {
    let s = Server::start_with(&["--consistency-wait-ms", "300"]);
    let c = s.raw();

    // Admin writes carry the seq of their record: the tenant is the log's first record.
    let resp = c
        .post(format!("{}/admin/v1/tenants", s.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": "acme", "plan": "business"}))
        .send()
        .expect("request");
    assert_eq!(position(&resp), Some(1));
    let (status, v) = body(resp);
    assert_eq!(status, 201, "{v}");
    let tenant = v["data"]["id"].as_str().expect("id").to_string();
    let key = s.create_key(&tenant, &["memory.read", "memory.write", "audit.read"]);

    // A tenant's write: its memory event and its audit entry, the position is the last.
    let resp = c
        .post(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .json(&json!({"content": "Dana prefers tea", "memory_type": "fact"}))
        .send()
        .expect("request");
    let p = position(&resp).expect("a position");
    let (status, v) = body(resp);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        p,
        s.head().0,
        "the write's position is the head right after it"
    );

    // A read is audited too, so it has a position; a refusal as well.
    let resp = c
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("X-Auditmem-Min-Position", p.to_string())
        .send()
        .expect("request");
    assert_eq!(position(&resp), Some(p + 1));
    let (status, v) = body(resp);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["memories"][0]["content"], "Dana prefers tea",
        "{v}"
    );
    let resp = c
        .get(format!("{}/v1/audit/logs?page=0", s.url))
        .bearer_auth(&key)
        .send()
        .expect("request");
    assert_eq!(position(&resp), Some(p + 2));
    common::assert_error(&body(resp), 400, 4000);

    // A position this node has not reached: 503 after the configured wait, nothing recorded.
    // The head a request waits against is the folded one: the refusal's entry folded.
    let head = p + 2;
    s.wait_head(head);
    let started = Instant::now();
    let resp = c
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("X-Auditmem-Min-Position", (head + 1000).to_string())
        .send()
        .expect("request");
    let waited = started.elapsed();
    assert_eq!(position(&resp), None);
    let answer = body(resp);
    common::assert_error(&answer, 503, 5030);
    let message = answer.1["message"].as_str().expect("message");
    assert!(
        message.contains(&format!("up to position {head}"))
            && message.contains(&format!(
                "position {} did not arrive within 300 ms",
                head + 1000
            )),
        "{message}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(s.head().0, head, "the refused request appended nothing");

    // Not a number: 400 in the envelope.
    let resp = c
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("X-Auditmem-Min-Position", "soon")
        .send()
        .expect("request");
    common::assert_error(&body(resp), 400, 4000);

    // Admin reads append nothing and carry no position.
    let resp = c
        .request(Method::GET, format!("{}/admin/v1/tenants", s.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .expect("request");
    assert_eq!(position(&resp), None);
    assert_eq!(resp.status().as_u16(), 200);
}
