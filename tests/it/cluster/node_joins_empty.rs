//! A node started on an empty data dir catches up from the stream by itself and then answers
//! exactly as the nodes that wrote: lists, details, memories, search, history, an export's
//! status and bytes.

use super::harness::{
    admin, api_node, request, tenant_with_key, wait_same_head, without_cursor_snapshots,
    NatsCluster,
};
use crate::common::{answers, assert_same_answers, now_end_time, Server};

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

const NOTES: [(&str, &str); 6] = [
    ("rule", "never book flights before 8 am"),
    ("fact", "is allergic to peanuts"),
    ("context", "is preparing the quarterly report for Berlin"),
    ("fact", "speaks Spanish at home"),
    ("rule", "answers in formal English to customers"),
    ("context", "is moving office over the weekend"),
];

/// The reads a joined node must answer exactly as a writer: search, history, export status
/// and download.
fn more_answers(s: &Server, key: &str, memory_ids: &[String], export_id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for q in [
        "flights in the morning",
        "food allergy",
        "where is the report going",
    ] {
        let r = request(
            s,
            Method::POST,
            "/v1/memories/search",
            key,
            Some(&json!({"query": q, "top_k": 4})),
            None,
        );
        out.push(json!([r.status, r.body["data"]]));
    }
    for id in memory_ids {
        let r = request(
            s,
            Method::GET,
            &format!("/v1/memories/{id}/history"),
            key,
            None,
            None,
        );
        out.push(json!([r.status, r.body]));
    }
    let r = request(
        s,
        Method::GET,
        &format!("/v1/audit/logs/export/{export_id}"),
        key,
        None,
        None,
    );
    // The manifest is signed by each node's own key; the rest is the log's.
    let mut status = r.body["data"].clone();
    status["manifest"]["signature"] = Value::Null;
    status["manifest"]["public_key"] = Value::Null;
    out.push(json!([r.status, status]));
    let (code, ct, cd, bytes) = s.download_cluster_export(key, export_id);
    out.push(json!([
        code,
        ct,
        cd,
        blake3::hash(&bytes).to_hex().to_string(),
        bytes.len()
    ]));
    out
}

#[test]
fn a_node_on_an_empty_data_dir_catches_up_and_answers_as_the_others() {
    let nats = NatsCluster::start();
    let nodes: Vec<Server> = (0..3).map(|_| api_node(&nats, &[])).collect();
    let (tenant, key, key_pos) = tenant_with_key(&nodes[0], "business");

    // Memories through every node; one updated, one deleted (their histories have three and
    // two versions); ingested entries through every node.
    let mut memory_ids = Vec::new();
    let mut audit_ids = Vec::new();
    let mut last = key_pos;
    for (i, (kind, content)) in NOTES.iter().enumerate() {
        let r = request(
            &nodes[i % 3],
            Method::POST,
            "/v1/memories",
            &key,
            Some(&json!({"content": content, "memory_type": kind, "importance": 0.1 * i as f64})),
            Some(last),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        last = r.pos();
        memory_ids.push(r.body["data"]["id"].as_str().expect("id").to_string());
    }
    let r = request(
        &nodes[1],
        Method::PATCH,
        &format!("/v1/memories/{}", memory_ids[0]),
        &key,
        Some(&json!({"content": "never books flights before 9 am"})),
        Some(last),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(
        &nodes[2],
        Method::PATCH,
        &format!("/v1/memories/{}", memory_ids[0]),
        &key,
        Some(&json!({"importance": 0.9})),
        Some(r.pos()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(
        &nodes[0],
        Method::DELETE,
        &format!("/v1/memories/{}", memory_ids[3]),
        &key,
        None,
        Some(r.pos()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    last = r.pos();
    for (i, n) in nodes.iter().enumerate() {
        let entries: Vec<Value> = (0..5)
            .map(|j| json!({"tenant_id": tenant, "action": if j % 2 == 0 { "gateway.chat" } else { "rag.query" },
                "http_status": 200, "model_id": "gpt-4o-mini", "metadata": {"node": i, "j": j},
                "request_body": {"messages": [{"role": "user", "content": format!("question {i}.{j}")}]},
                "output_content": format!("answer {i}.{j}")}))
            .collect();
        let r = admin(
            n,
            Method::POST,
            "/admin/v1/audit/logs",
            Some(&json!({ "entries": entries })),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        last = last.max(r.pos());
        audit_ids.extend(
            r.body["data"]["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|v| v.as_str().expect("id").to_string()),
        );
    }
    // An export through node 1, completed, downloadable from every node alike.
    let r = request(
        &nodes[1],
        Method::POST,
        "/v1/audit/logs/export",
        &key,
        Some(&json!({"format": "json"})),
        Some(last),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let export_id = r.body["data"]["export_id"]
        .as_str()
        .expect("export_id")
        .to_string();
    nodes[1].wait_export_status(&key, &export_id, "completed");
    let end = now_end_time();
    let refs: Vec<&Server> = nodes.iter().collect();
    let head = wait_same_head(&refs, last, Duration::from_secs(30));
    let (status, _, _, file) = nodes[1].download_cluster_export(&key, &export_id);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&file));
    let last_id = audit_ids.last().expect("ingested");
    assert!(
        String::from_utf8_lossy(&file).contains(last_id.as_str()),
        "the export holds the entries"
    );

    // The fourth node, on an empty data dir, reaches the others' head by itself.
    let joined = api_node(&nats, &[]);
    let mut all: Vec<&Server> = nodes.iter().collect();
    all.push(&joined);
    wait_same_head(&all, head, Duration::from_secs(60));

    let keys = [key.clone()];
    let reference =
        without_cursor_snapshots(&answers(&nodes[0], &keys, &audit_ids, &memory_ids, &end));
    let fresh = without_cursor_snapshots(&answers(&joined, &keys, &audit_ids, &memory_ids, &end));
    // Element 0 is the head, which node 0's own (audited) reads have just moved on.
    assert_same_answers(&reference[1..], &fresh[1..]);
    let reference = more_answers(&nodes[0], &key, &memory_ids, &export_id);
    for (i, n) in [&nodes[1], &nodes[2], &joined].into_iter().enumerate() {
        let got = more_answers(n, &key, &memory_ids, &export_id);
        assert_same_answers(&reference, &got);
        let (code, _, _, bytes) = n.download_cluster_export(&key, &export_id);
        assert_eq!((code, bytes == file), (200, true), "node {}", i + 1);
    }
    // What was compared is what was written: searches found, histories hold every version.
    assert_eq!(reference[0][0], json!(200), "{}", reference[0]);
    assert_eq!(
        reference[0][1]["results"][0]["id"],
        json!(memory_ids[0]),
        "{}",
        reference[0]
    );
    assert_eq!(
        reference[3][1]["data"]["versions"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        reference[3 + 3][1]["data"]["deleted"],
        json!(true),
        "{}",
        reference[6]
    );
    assert_eq!(reference.last().expect("download")[0], json!(200));
}
