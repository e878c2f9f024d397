//! The audit tail across nodes: a reader that resumes with `Last-Event-ID` on whichever node
//! it reaches next gets the tenant's entries exactly once and in log order, while writers
//! write through both nodes (a position names the same entry on every node).

use super::harness::{api_node, tenant_with_key, NatsCluster};
use crate::stream::{open, position_of, read_events, Event};

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};

#[test]
fn a_tail_resumed_on_another_node_has_no_gap_and_no_duplicate() {
    let nats = NatsCluster::start();
    let nodes = [
        api_node(&nats, &["--stream-heartbeat-secs", "1"]),
        api_node(&nats, &["--stream-heartbeat-secs", "1"]),
    ];
    let (_, key, _) = tenant_with_key(&nodes[0], "business");
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let mut writes = Some({
        let (urls, key) = (urls.clone(), key.clone());
        std::thread::spawn(move || {
            let c = reqwest::blocking::Client::new();
            (0..60)
                .map(|i| {
                    // A node that has not yet folded the key answers 401 for a moment, and a
                    // cluster short of CPU 503 while JetStream elects a leader.
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    loop {
                        let resp = c
                            .get(format!("{}/v1/memories?page_size=1", urls[i % 2]))
                            .bearer_auth(&key)
                            .send()
                            .expect("request");
                        let status = resp.status().as_u16();
                        if status == 200 {
                            return position_of(&resp);
                        }
                        assert!(
                            [401, 503].contains(&status) && std::time::Instant::now() < deadline,
                            "a write answered {status}"
                        );
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                })
                .collect::<Vec<u64>>()
        })
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(crate::common::seed_or_clock("STREAM_SEED"));
    let (mut got, mut own) = (Vec::<Event>::new(), Vec::new());
    let mut written: Option<Vec<u64>> = None;
    let mut node = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the stream never reached the writers' last entry: {got:?}"
        );
        if writes.as_ref().is_some_and(|w| w.is_finished()) {
            let w = writes.take().expect("the writers");
            written = Some(w.join().expect("writer"));
        }
        let last = got.last().map_or(0, |e| e.position);
        let until = written.as_ref().and_then(|w| w.iter().max().copied());
        if until.is_some_and(|u| last >= u) {
            break;
        }
        node = (node + 1) % 2;
        let resp = open(&urls[node], &key, "", Some(last), rng.gen_bool(0.5));
        if resp.status().as_u16() != 200 {
            continue;
        }
        let ndjson = resp.headers()["content-type"] == "application/x-ndjson";
        own.push(position_of(&resp));
        let mut take = rng.gen_range(1..=10);
        let mut beats = 0;
        read_events(resp, ndjson, |e| match e {
            Some(e) => {
                got.push(e);
                take -= 1;
                take > 0 && !writes_done_past(&got, until)
            }
            // The first heartbeat opens the stream; another means a second idle: go round, to
            // the other node (this one may be behind).
            None => {
                beats += 1;
                beats < 2
            }
        });
    }
    let written = written.expect("the writes");
    let received: Vec<u64> = got.iter().map(|e| e.position).collect();
    let last = *received.last().expect("events");
    let expected: BTreeSet<u64> = written
        .iter()
        .chain(&own)
        .copied()
        .filter(|p| *p <= last)
        .collect();
    assert_eq!(received, expected.into_iter().collect::<Vec<_>>());
    assert!(written.iter().all(|p| *p <= last), "every write was read");
}

fn writes_done_past(got: &[Event], until: Option<u64>) -> bool {
    until.is_some_and(|u| got.last().is_some_and(|e| e.position >= u))
}
