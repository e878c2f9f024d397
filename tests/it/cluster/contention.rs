//! Contention: three API nodes and many clients writing to the same tenant at once (admin
//! ingestion and memory creates), for `AUDITMEM_CONTENTION_SECS` (default 15; the minute
//! on demand). At the end every node counts exactly the acknowledged entries, the global chain
//! verifies from the stream and from each stopped node's mirror, and the tenant's own hash
//! chain links every one of its entries, the same on every node.

use super::harness::{
    api_node, clean_report, env_u64, poll, request, tenant_with_key, verify_mirror, verify_nats,
    wait_same_head, NatsCluster,
};
use crate::common::{blake3_hex, chain_fields, now_end_time, Server, ADMIN_TOKEN};

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

/// Writers per node: ingesters (1 to 5 entries a call) and memory creators.
const INGESTERS: usize = 2;
const CREATORS: usize = 1;

#[derive(Default)]
struct Tally {
    /// Ingested entries acknowledged (each is one audit entry of the tenant).
    ingested: u64,
    /// Memory creates acknowledged (each is one memory and one `memory.write` audit entry).
    created: u64,
    last_pos: u64,
    audit_ids: Vec<String>,
    errors: Vec<String>,
}

fn write_until(
    node: &Server,
    tenant: &str,
    key: &str,
    key_pos: u64,
    who: String,
    ingest: bool,
    until: Instant,
) -> Tally {
    let mut t = Tally::default();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let r = if ingest {
            let entries: Vec<Value> = (0..=(n % 5))
                .map(|i| {
                    json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200,
                        "model_id": "gpt-4o-mini", "metadata": {"writer": who, "n": n, "i": i}})
                })
                .collect();
            request(
                node,
                Method::POST,
                "/admin/v1/audit/logs",
                ADMIN_TOKEN,
                Some(&json!({ "entries": entries })),
                Some(key_pos),
            )
        } else {
            request(
                node,
                Method::POST,
                "/v1/memories",
                key,
                Some(
                    &json!({"content": format!("{who} note {n}: standup moved to 9:30"),
                    "memory_type": "context"}),
                ),
                Some(key_pos),
            )
        };
        if r.status != 200 {
            t.errors.push(format!("{who}: {} {}", r.status, r.body));
            return t;
        }
        t.last_pos = t.last_pos.max(r.pos());
        if ingest {
            for id in r.body["data"]["ids"].as_array().expect("ids") {
                t.audit_ids.push(id.as_str().expect("id").to_string());
                t.ingested += 1;
            }
        } else {
            t.created += 1;
        }
    }
    t
}

/// Every audit entry of the key's tenant up to `end`, as listed (newest first), following the
/// cursor.
fn audit_items(s: &Server, key: &str, end: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            None => format!("/v1/audit/logs?end_time={end}&page_size=100"),
            Some(c) => format!("/v1/audit/logs?end_time={end}&page_size=100&cursor={c}"),
        };
        let r = request(s, Method::GET, &path, key, None, None);
        assert_eq!(r.status, 200, "{}", r.body);
        out.extend(
            r.body["data"]["logs"]
                .as_array()
                .expect("logs")
                .iter()
                .cloned(),
        );
        match r.body["data"]["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// Links the tenant chain (docs/API.md, "Per-tenant chain", rule v2) through every listed item:
/// from 32 zero bytes, each entry's `hash` must be `blake3(v3 || prev || canonical item)` of
/// exactly one unused item. The list is in `created_at` order, which follows log order only
/// approximately when several nodes commit, so the next link is searched among the oldest
/// unused items. Returns the number of links.
fn link_tenant_chain(listed: &[Value]) -> usize {
    /// How far past the oldest unused item the next link may be.
    const WINDOW: usize = 2_000;
    let mut items: Vec<Option<(String, Vec<u8>)>> = listed
        .iter()
        .rev()
        .map(|item| {
            assert!(
                item["detail_hash"].is_string(),
                "a new entry without detail_hash: {item}"
            );
            let hash = item["hash"]
                .as_str()
                .expect("a business tenant sees hashes")
                .to_string();
            let (rule, canonical) = chain_fields(item);
            assert_eq!(rule, "v3", "every new entry is sealed: {item}");
            Some((hash, canonical.into_bytes()))
        })
        .collect();
    let mut prev = vec![0u8; 32];
    let mut first_unused = 0;
    for link in 0..items.len() {
        while items[first_unused].is_none() {
            first_unused += 1;
        }
        let end = (first_unused + WINDOW).min(items.len());
        let found = (first_unused..end).find(|&i| {
            items[i].as_ref().is_some_and(|(hash, canonical)| {
                blake3_hex(&[b"auditmem/tenant-chain/v3", &prev, canonical]) == *hash
            })
        });
        let Some(i) = found else {
            panic!(
                "the tenant chain breaks after {link} links: no entry links to {}",
                hex::encode(&prev)
            );
        };
        let (hash, _) = items[i].take().expect("unused");
        prev = hex::decode(&hash).expect("hex");
    }
    items.len()
}

/// Rounds of three export requests for the tenant at the same moment, one to each node: each
/// node decides "another export is processing" (2203) on its own folded log, so exactly one
/// starts and the others are refused, whichever node's turn came first. The tenant's thousands
/// of entries keep the started export processing well past the round.
fn exports_one_at_a_time_across_nodes(nodes: &[Server], key: &str, after: u64) {
    const ROUNDS: usize = 4;
    let mut min = after;
    for round in 0..ROUNDS {
        let barrier = std::sync::Barrier::new(nodes.len());
        let answers: Vec<(u16, Value, u64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = nodes
                .iter()
                .map(|n| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        let r = request(
                            n,
                            Method::POST,
                            "/v1/audit/logs/export",
                            key,
                            Some(&json!({"format": "csv"})),
                            Some(min),
                        );
                        (r.status, r.body.clone(), r.pos())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("export thread"))
                .collect()
        });
        let started: Vec<&(u16, Value, u64)> = answers
            .iter()
            .filter(|(status, _, _)| *status == 200)
            .collect();
        let busy = answers
            .iter()
            .filter(|(status, body, _)| *status == 409 && body["code"] == json!(2203))
            .count();
        assert_eq!(
            (started.len(), busy),
            (1, nodes.len() - 1),
            "round {round}: one export starts, the others are 2203: {answers:?}"
        );
        let (_, body, pos) = started[0];
        let id = body["data"]["export_id"].as_str().expect("export_id");
        min = answers.iter().map(|(_, _, p)| *p).max().unwrap_or(*pos);
        for (i, n) in nodes.iter().enumerate() {
            poll(Duration::from_secs(60), "the export completed", || {
                let r = request(
                    n,
                    Method::GET,
                    &format!("/v1/audit/logs/export/{id}"),
                    key,
                    None,
                    Some(*pos),
                );
                match (r.status, r.body["data"]["status"].as_str()) {
                    (200, Some("completed")) => Ok(()),
                    (200, Some("processing")) => Err(format!("node {i}: still processing")),
                    _ => panic!("node {i}: export {id}: {} {}", r.status, r.body),
                }
            });
        }
    }
}

#[test]
fn three_nodes_writing_one_tenant_agree_on_its_total_and_its_chains() {
    let secs = env_u64("AUDITMEM_CONTENTION_SECS").unwrap_or(15).max(1);
    let nats = NatsCluster::start();
    let mut nodes: Vec<Server> = (0..3).map(|_| api_node(&nats, &[])).collect();
    let (tenant, key, key_pos) = tenant_with_key(&nodes[0], "business");

    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            for w in 0..INGESTERS + CREATORS {
                let (tenant, key) = (tenant.as_str(), key.as_str());
                let who = format!("node {i} writer {w}");
                handles.push(scope.spawn(move || {
                    write_until(node, tenant, key, key_pos, who, w < INGESTERS, until)
                }));
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect()
    });
    let errors: Vec<&String> = tallies.iter().flat_map(|t| &t.errors).collect();
    assert!(
        errors.is_empty(),
        "writes refused under contention: {errors:?}"
    );
    let ingested: u64 = tallies.iter().map(|t| t.ingested).sum();
    let created: u64 = tallies.iter().map(|t| t.created).sum();
    let last = tallies.iter().map(|t| t.last_pos).max().unwrap_or(key_pos);
    assert!(
        ingested > 0 && created > 0,
        "{ingested} ingested, {created} created"
    );
    let end = now_end_time();

    let refs: Vec<&Server> = nodes.iter().collect();
    let head = wait_same_head(&refs, last, Duration::from_secs(60));
    let want = ingested + created;
    let mut listed: Vec<Vec<Value>> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let r = request(
            n,
            Method::GET,
            &format!("/v1/audit/logs?end_time={end}&page_size=1"),
            &key,
            None,
            Some(head),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body["data"]["total"],
            json!(want),
            "node {i}: audit total"
        );
        let r = request(n, Method::GET, "/v1/memories?page_size=1", &key, None, None);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body["data"]["total"],
            json!(created),
            "node {i}: memory total"
        );
        listed.push(audit_items(n, &key, &end));
    }
    // The same entries with the same hashes everywhere, every acknowledged id among them.
    for (i, items) in listed.iter().enumerate() {
        assert_eq!(items.len() as u64, want, "node {i}: listed entries");
        assert!(
            *items == listed[0],
            "node {i} lists other entries than node 0"
        );
    }
    let ids: HashMap<&str, &Value> = listed[0]
        .iter()
        .map(|e| (e["id"].as_str().expect("id"), e))
        .collect();
    for id in tallies.iter().flat_map(|t| &t.audit_ids) {
        let e = ids
            .get(id.as_str())
            .unwrap_or_else(|| panic!("{id} is not listed"));
        assert_eq!(e["action"], json!("gateway.chat"));
    }
    assert_eq!(link_tenant_chain(&listed[0]) as u64, want);
    exports_one_at_a_time_across_nodes(&nodes, &key, head);

    let (code, out, err) = verify_nats(&nats, None);
    assert_eq!(code, 0, "{out}{err}");
    clean_report(&out);
    // Stopped, each node's mirror verifies alone and reports what the stream does.
    for n in &mut nodes {
        n.stop();
    }
    let (code, out, err) = verify_nats(&nats, None);
    assert_eq!(code, 0, "{out}{err}");
    let from_stream = clean_report(&out);
    for (i, n) in nodes.iter().enumerate() {
        let (code, out, err) = verify_mirror(&n.data_dir);
        assert_eq!(code, 0, "node {i}: {out}{err}");
        assert_eq!(
            clean_report(&out),
            from_stream,
            "node {i}'s mirror and the stream"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "contention: {secs} s, 3 nodes, {} writers: {ingested} entries ingested, {created} memories created, {} records in the log, {:.1} s in all",
        3 * (INGESTERS + CREATORS),
        from_stream["records"],
        started.elapsed().as_secs_f64()
    );
}
