//! Webhooks on a cluster: endpoints are folded from the log by every node, and the nodes take
//! turns delivering by a lease recorded in the log, so while the cluster is steady each event
//! goes out once, from one node, in log order; when the delivering node is killed another
//! takes the lease over and goes on from the cursor every node agrees on, losing nothing.

use super::harness::{admin, api_node, request, NatsCluster};
use crate::common::Server;
use crate::webhooks::{position_of, Receiver};

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

/// A tenant call on `node`, retried while the node has not folded the key (401) or the
/// cluster elects a leader (503): its position.
fn audited(node: &Server, key: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = request(node, Method::GET, "/v1/webhooks", key, None, None);
        if r.status == 200 {
            return r.pos();
        }
        assert!(
            [401, 503].contains(&r.status) && Instant::now() < deadline,
            "answered {}: {}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_node_delivers_each_event_once_and_another_takes_over() {
    let receiver = Receiver::start();
    let nats = NatsCluster::start();
    let args = [
        "--webhooks-allow-private-targets",
        "--webhook-retry-base-ms",
        "100",
    ];
    let mut nodes = [api_node(&nats, &args), api_node(&nats, &args)];
    let r = admin(
        &nodes[0],
        Method::POST,
        "/admin/v1/tenants",
        Some(&json!({"name": "hooks", "plan": "pro"})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let tenant = r.body["data"]["id"].as_str().expect("id").to_owned();
    let r = admin(
        &nodes[0],
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(&json!({"permissions": ["webhooks.manage"]})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["data"]["api_key"].as_str().expect("key").to_owned();
    let r = request(
        &nodes[0],
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(&json!({"url": receiver.url("/ok/cluster"), "event_types": ["audit.entry"]})),
        None,
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let first = r.pos();

    let mut positions = vec![first];
    for i in 0..20 {
        positions.push(audited(&nodes[i % 2], &key));
    }
    let last = *positions.last().expect("a position");
    let got = receiver.wait("/ok/cluster", Duration::from_secs(60), |r| {
        r.iter().any(|x| position_of(x) == last)
    });
    let seen: Vec<u64> = got.iter().map(position_of).collect();
    // Steady: each event once, in log order, all of them.
    for w in seen.windows(2) {
        assert!(w[0] < w[1], "a duplicate or out of order: {seen:?}");
    }
    for p in &positions {
        assert!(seen.contains(p), "position {p} never delivered: {seen:?}");
    }

    // Whichever node delivered, kill the first: the other one delivers what follows (after
    // the lease of a killed holder runs out), from the cursor, in order.
    nodes[0].kill();
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(audited(&nodes[1], &key));
    }
    let last = *after.last().expect("a position");
    let got = receiver.wait("/ok/cluster", Duration::from_secs(90), |r| {
        r.iter().any(|x| position_of(x) == last)
    });
    let seen: Vec<u64> = got.iter().map(position_of).collect();
    for w in seen.windows(2) {
        assert!(w[0] <= w[1], "out of order: {seen:?}");
    }
    for p in positions.iter().chain(&after) {
        assert!(seen.contains(p), "position {p} never delivered: {seen:?}");
    }
    let ids: Vec<&Value> = got.iter().map(|r| &r["id"]).collect();
    let mut distinct = ids.clone();
    distinct.dedup();
    // A duplicate is only the event in flight when the holder died, sent again with its id.
    assert!(ids.len() - distinct.len() <= 1, "{ids:?}");
}
