//! Loss of quorum: with 2 of the 3 NATS servers down, writes answer 503 (5030) within
//! `--nats-timeout-ms` and some slack, reads keep answering from each node's local projections,
//! and writes resume by themselves once a server returns; nothing acknowledged is lost and the
//! nodes agree on everything the stream holds.

use super::harness::{
    admin, api_node, clean_report, outbox_entries, poll, request, tenant_with_key, verify_nats,
    wait_same_head, NatsCluster, Reply,
};
use crate::common::{assert_error, Server, ADMIN_TOKEN};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

const NATS_TIMEOUT_MS: u64 = 2_000;
/// Beyond `--nats-timeout-ms`: the node's own work and a loaded 2-core machine. Less than a
/// second timeout, so that a write waiting for the stream twice (a key lookup, then the log)
/// fails the test.
const SLACK: Duration = Duration::from_millis(1_500);

fn create(s: &Server, key: &str, content: &str, min: Option<u64>) -> Reply {
    request(
        s,
        Method::POST,
        "/v1/memories",
        key,
        Some(&json!({"content": content, "memory_type": "fact"})),
        min,
    )
}

fn ingest(s: &Server, tenant: &str, tag: &str) -> Reply {
    admin(
        s,
        Method::POST,
        "/admin/v1/audit/logs",
        Some(
            &json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat",
            "http_status": 200, "metadata": {"tag": tag}}]}),
        ),
    )
}

/// Every memory of the key's tenant on `s`: content by id.
fn memories(s: &Server, key: &str, min: u64) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for page in 1.. {
        let r = request(
            s,
            Method::GET,
            &format!("/v1/memories?page_size=100&page={page}"),
            key,
            None,
            Some(min),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let items = r.body["data"]["memories"].as_array().expect("memories");
        for m in items {
            out.insert(
                m["id"].as_str().expect("id").to_string(),
                m["content"].as_str().expect("content").to_string(),
            );
        }
        if items.len() < 100 {
            return out;
        }
    }
    unreachable!()
}

#[test]
fn without_a_quorum_writes_are_503_reads_answer_and_writes_resume_when_a_server_returns() {
    let mut nats = NatsCluster::start();
    let timeout = NATS_TIMEOUT_MS.to_string();
    let nodes: Vec<Server> = (0..3)
        .map(|_| api_node(&nats, &["--nats-timeout-ms", &timeout]))
        .collect();
    let (tenant, key, key_pos) = tenant_with_key(&nodes[0], "business");

    // Acknowledged before the loss: two memories and an ingested entry through each node.
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    let mut audit_ids = Vec::new();
    let mut last = key_pos;
    for (i, n) in nodes.iter().enumerate() {
        for j in 0..2 {
            let content = format!("node {i} note {j}: the quarterly report is due on Friday");
            let r = create(n, &key, &content, Some(key_pos));
            assert_eq!(r.status, 200, "{}", r.body);
            last = last.max(r.pos());
            acked.insert(r.body["data"]["id"].as_str().expect("id").into(), content);
        }
        let r = ingest(n, &tenant, &format!("before {i}"));
        assert_eq!(r.status, 200, "{}", r.body);
        last = last.max(r.pos());
        audit_ids.push(r.body["data"]["ids"][0].as_str().expect("id").to_string());
    }
    let refs: Vec<&Server> = nodes.iter().collect();
    wait_same_head(&refs, last, Duration::from_secs(30));

    // Two of three down.
    nats.kill(1);
    nats.kill(2);
    let mut refused: BTreeSet<String> = BTreeSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let content = format!("node {i}: written while the quorum was lost");
        let r = create(n, &key, &content, None);
        assert_error(&r.pair(), 503, 5030);
        assert!(
            r.elapsed < Duration::from_millis(NATS_TIMEOUT_MS) + SLACK,
            "node {i}: a memory create answered 503 after {:?}",
            r.elapsed
        );
        refused.insert(content);
        let r = ingest(n, &tenant, &format!("during {i}"));
        assert_error(&r.pair(), 503, 5030);
        assert!(
            r.elapsed < Duration::from_millis(NATS_TIMEOUT_MS) + SLACK,
            "node {i}: an ingestion answered 503 after {:?}",
            r.elapsed
        );
    }
    // Reads answer from the local projections, without waiting for the stream. What they
    // answer instead is collected and asserted at the end, so that one run also shows whether
    // writes resume.
    let mut bad_reads: Vec<String> = Vec::new();
    let reads_tried = 3 * (acked.len() + 1 + audit_ids.len() + 1);
    for (i, n) in nodes.iter().enumerate() {
        let mut read = |path: &str, bearer: &str, check: &dyn Fn(&Value) -> bool| {
            let r = request(n, Method::GET, path, bearer, None, None);
            if r.status != 200 || !check(&r.body) {
                bad_reads.push(format!("node {i}: GET {path}: {} {}", r.status, r.body));
            } else if r.elapsed >= Duration::from_millis(NATS_TIMEOUT_MS) {
                bad_reads.push(format!("node {i}: GET {path} took {:?}", r.elapsed));
            }
        };
        for (id, content) in &acked {
            read(&format!("/v1/memories/{id}"), &key, &|v| {
                v["data"]["content"] == json!(content)
            });
        }
        read("/v1/memories?page_size=100", &key, &|v| {
            v["data"]["total"] == json!(acked.len())
        });
        for id in &audit_ids {
            read(&format!("/v1/audit/logs/{id}"), &key, &|v| {
                v["data"]["id"] == json!(id)
            });
        }
        read("/admin/v1/tenants", ADMIN_TOKEN, &|v| {
            v["data"]["total"] == json!(1)
        });
    }

    // Each node's refused create and its reads of memories and audit entries (one a memory, one
    // list, one an audit id) are audited: their entries wait in its outbox, counted in its
    // metrics. The ingestions and the tenant list are admin calls, not tenant entries.
    let audited = 1 + acked.len() as u64 + 1 + audit_ids.len() as u64;
    let waiting: Vec<u64> = nodes.iter().map(outbox_entries).collect();
    assert_eq!(
        waiting,
        vec![audited; 3],
        "entries waiting in the nodes' outboxes"
    );

    if !bad_reads.is_empty() {
        eprintln!(
            "quorum_loss: {} of {reads_tried} reads failed while the quorum was lost, e.g. {}",
            bad_reads.len(),
            bad_reads[0]
        );
    }

    // One server back: writes resume on every node without anyone restarting a node.
    nats.restart(1);
    for (i, n) in nodes.iter().enumerate() {
        let mut attempt = 0;
        let (id, content, pos) = poll(Duration::from_secs(60), "writes resume", || {
            attempt += 1;
            let content = format!("node {i}: after the quorum returned, attempt {attempt}");
            let r = create(n, &key, &content, None);
            match r.status {
                200 => Ok((
                    r.body["data"]["id"].as_str().expect("id").to_string(),
                    content,
                    r.pos(),
                )),
                _ => {
                    assert_error(&r.pair(), 503, 5030);
                    refused.insert(content);
                    // Whether the NATS side is back, to tell its delay from the node's.
                    let members: Vec<String> = [0, 1]
                        .iter()
                        .map(|&m| format!("n{}: {:?}", m + 1, nats.not_ready(m)))
                        .collect();
                    Err(format!("node {i}: {} (nats: {members:?})", r.body))
                }
            }
        });
        last = last.max(pos);
        acked.insert(id, content);
    }

    // Every acknowledged write on every node; a refused one landed everywhere or nowhere.
    let head = wait_same_head(&refs, last, Duration::from_secs(30));
    let seen: Vec<BTreeMap<String, String>> =
        nodes.iter().map(|n| memories(n, &key, head)).collect();
    for (i, m) in seen.iter().enumerate() {
        assert_eq!(*m, seen[0], "node {i} and node 0 hold other memories");
        for (id, content) in &acked {
            assert_eq!(m.get(id), Some(content), "node {i}: memory {id}");
        }
        for (id, content) in m {
            assert!(
                acked.contains_key(id) || refused.contains(content),
                "node {i}: memory {id} ({content:?}) was never written"
            );
        }
        for id in &audit_ids {
            let r = request(
                &nodes[i],
                Method::GET,
                &format!("/v1/audit/logs/{id}"),
                &key,
                None,
                None,
            );
            assert_eq!(r.status, 200, "node {i}: {}", r.body);
        }
    }
    assert!(
        bad_reads.is_empty(),
        "reads while the quorum was lost: {} of {} failed, e.g. {:#?}",
        bad_reads.len(),
        reads_tried,
        &bad_reads[..bad_reads.len().min(6)]
    );
    let landed = seen[0].len() - acked.len();
    eprintln!(
        "quorum_loss: {} writes acknowledged, {} refused with 503 of which {landed} landed later",
        acked.len(),
        refused.len()
    );
    let (code, out, err) = verify_nats(&nats, None);
    assert_eq!(code, 0, "{out}{err}");
    let report = clean_report(&out);
    assert!(report["head_seq"].as_u64() >= Some(head), "{report}");
}
