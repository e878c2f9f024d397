//! The expiry sweep on a cluster: every node sweeps, and a node may read its projections
//! before it folded another node's sweep of the same memories. Each memory must still be
//! expired by exactly one `MemoriesExpired`, and its expiry (the history's version, the
//! event's `expired_at`) must never move.
//!
//! The race is made certain rather than hoped for: two nodes are stopped (SIGSTOP) before the
//! memories expire, the third publishes a backlog and then sweeps them, and the two are
//! continued. Their sweep timers are overdue and fire at once, reading projections that have
//! not yet folded the backlog, let alone the sweep behind it; only the precondition, checked
//! again on the state a sweep is sealed on, keeps their sweeps out of the log.

use super::harness::{admin, api_node, request, tenant_with_key, wait_same_head, NatsCluster};
use crate::common::{Server, ADMIN_TOKEN};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use auditmem::log::record::Record;
use auditmem::projections::Event;
use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};

const MEMORIES: usize = 5;

/// Sends `signal` to a node's process.
fn signal(node: &Server, signal: rustix::process::Signal) {
    let pid = node.pid().expect("a running node");
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a child's pid");
    rustix::process::kill_process(pid, signal).expect("signal");
}

/// Continues the stopped nodes when dropped, so that a failing assertion does not leave them
/// stopped (their `Drop` kills them either way).
struct Stopped<'a>(Vec<&'a Server>);

impl<'a> Stopped<'a> {
    fn stop(nodes: &[&'a Server]) -> Self {
        for n in nodes {
            signal(n, rustix::process::Signal::STOP);
        }
        Stopped(nodes.to_vec())
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        for n in &self.0 {
            signal(n, rustix::process::Signal::CONT);
        }
    }
}

/// Every `MemoriesExpired` in a node's log, read through `GET /admin/v1/log`: (seq, record
/// time, memory ids, `expired_at`).
fn expiries(node: &Server) -> Vec<(u64, i64, Vec<String>, i64)> {
    let r = node
        .raw()
        .get(format!("{}/admin/v1/log?from=1", node.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().expect("text");
    let mut out = Vec::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["record"].as_str().expect("record"))
            .expect("base64");
        let record = Record::decode(&bytes).expect("a record");
        if let Event::MemoriesExpired(e) = Event::decode(&record.event).expect("an event") {
            let ids = e.memory_ids.iter().map(|id| id.to_string()).collect();
            out.push((record.seq, record.ts_micros, ids, e.expired_at));
        }
    }
    out
}

/// Each memory's history on `node`: whether it is deleted, and each version's change, seq and
/// time. (A version's `audit_id` is the first audit entry after it, and a sweep has none of
/// its own: a later request's entry would be named, so it is left out here.)
fn histories(node: &Server, key: &str, ids: &[String]) -> BTreeMap<String, (Value, Vec<Value>)> {
    ids.iter()
        .map(|id| {
            let r = request(
                node,
                Method::GET,
                &format!("/v1/memories/{id}/history"),
                key,
                None,
                None,
            );
            assert_eq!(r.status, 200, "{}", r.body);
            let versions = r.body["data"]["versions"]
                .as_array()
                .expect("versions")
                .iter()
                .map(|v| json!([v["change"], v["seq"], v["at"]]))
                .collect();
            (id.clone(), (r.body["data"]["deleted"].clone(), versions))
        })
        .collect()
}

#[test]
fn every_node_sweeps_but_each_memory_is_expired_by_one_event_and_its_expiry_never_moves() {
    let nats = NatsCluster::start();
    let a = api_node(&nats, &[]);
    let b = api_node(&nats, &[]);
    let c = api_node(&nats, &[]);
    let (tenant, key, _) = tenant_with_key(&a, "business");

    // Memories that expire a few seconds from now, known to every node.
    let expires_at = (chrono::Utc::now() + chrono::Duration::seconds(4))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let items: Vec<Value> = (0..MEMORIES)
        .map(|i| json!({"content": format!("in the office on floor {i} this week"), "memory_type": "context", "expires_at": expires_at}))
        .collect();
    let created = request(
        &a,
        Method::POST,
        "/v1/memories/batch",
        &key,
        Some(&json!({ "memories": items })),
        None,
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let ids: Vec<String> = created.body["data"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect();
    wait_same_head(&[&a, &b, &c], created.pos(), Duration::from_secs(30));

    let stopped = Stopped::stop(&[&b, &c]);
    // A backlog ahead of the sweep, for the stopped nodes to fold before they see it.
    let entries: Vec<Value> = (0..200)
        .map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "user_agent": format!("agent/{i:04}")}))
        .collect();
    for _ in 0..20 {
        let r = admin(
            &a,
            Method::POST,
            "/admin/v1/audit/logs",
            Some(&json!({ "entries": entries })),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // A sweeps them once they expire: each history ends "expired".
    let deadline = Instant::now() + Duration::from_secs(30);
    let swept = loop {
        let h = histories(&a, &key, &ids);
        let done = h
            .values()
            .all(|(_, vs)| vs.last().is_some_and(|l| l[0] == "expired"));
        if done {
            break h;
        }
        assert!(Instant::now() < deadline, "not swept on A: {h:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let once = expiries(&a);
    drop(stopped);

    // The continued nodes' sweeps come at once, and any that lands is sealed within a sweep
    // period or two; nothing announces that a refused sweep was decided, so the nodes are
    // given three periods (the sweep runs every second) before the log is read.
    std::thread::sleep(Duration::from_secs(3));
    let head = a.head().0;
    let head = wait_same_head(&[&a, &b, &c], head, Duration::from_secs(30));

    // Exactly one event expired each memory, the one A's history showed, on every node.
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    for n in [&a, &b, &c] {
        let all = expiries(n);
        assert_eq!(all, once, "the expiries in a node's log at head {head}");
        for (_, _, memory_ids, _) in &all {
            for id in memory_ids {
                *named.entry(id.clone()).or_default() += 1;
            }
        }
    }
    let want: BTreeMap<String, usize> = ids.iter().map(|id| (id.clone(), 3)).collect();
    assert_eq!(
        named, want,
        "each memory named by one expiry in each of 3 logs"
    );
    assert_eq!(once.len(), 1, "{once:?}");
    let (seq, ts, _, expired_at) = once[0].clone();
    assert!(expired_at <= ts, "expired at {expired_at}, sealed at {ts}");

    // Every node's history of each memory is A's, unchanged: created, then expired at that
    // event's seq and time, deleted.
    let at = serde_json::to_value(auditmem::wire::time::Time(ts)).expect("time");
    for n in [&a, &b, &c] {
        let h = histories(n, &key, &ids);
        assert_eq!(h, swept);
        for (deleted, versions) in h.values() {
            assert_eq!(deleted, &json!(true));
            assert_eq!(versions.len(), 2, "{versions:?}");
            assert_eq!(versions[0][0], json!("created"));
            assert_eq!(versions[1], json!(["expired", seq, at]));
        }
    }
}
