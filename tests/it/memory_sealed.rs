//! Memories sealed at rest, against the real binary: a live memory reads as it always did
//! (get, list, search in every mode, history), while its records in the log and its state in
//! the memories projection hold none of its content or metadata in the clear.
//!
//! Only the log's memory events and the memories tree are scanned here: the audit entries of
//! the same requests are sealed by their own part of the service.

use crate::common;

use auditmem_projections::Event;
use common::Server;
use reqwest::Method;
use serde_json::{json, Value};

const SECRET: &str = "quokka-ssn-078-05-1120";
const META_SECRET: &str = "marmoset-card-4111";
const NEW_SECRET: &str = "ocelot-pin-7781";

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn ids(results: &Value) -> Vec<String> {
    results
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_live_memory_reads_as_before_while_its_log_records_and_state_are_sealed() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let content = format!("The user's social security number is {SECRET}");
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": content, "memory_type": "fact", "user_id": "alice", "metadata": {"card": META_SECRET}}),
    );
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["id"].as_str().expect("id").to_string();
    let (status, other) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Bob likes green tea in the morning", "memory_type": "fact", "user_id": "bob"}),
    );
    assert_eq!(status, 200, "{other}");

    // Get, list and search (every mode) show it as it was written.
    let (status, got) = s.get(&format!("/v1/memories/{id}"), &key);
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"]["content"], json!(content));
    assert_eq!(got["data"]["metadata"], json!({"card": META_SECRET}));
    assert_eq!(got["data"]["user_id"], json!("alice"));
    let (_, list) = s.get("/v1/memories?user_id=alice", &key);
    assert_eq!(list["data"]["total"], json!(1), "{list}");
    assert_eq!(list["data"]["memories"][0]["content"], json!(content));
    for mode in ["semantic", "keyword", "hybrid"] {
        let (status, found) = s.post(
            "/v1/memories/search",
            &key,
            json!({"query": format!("social security number {SECRET}"), "search_mode": mode, "top_k": 1}),
        );
        assert_eq!(status, 200, "{found}");
        assert_eq!(ids(&found["data"]["results"]), vec![id.clone()], "{mode}");
        assert_eq!(found["data"]["results"][0]["content"], json!(content));
        assert_eq!(
            found["data"]["results"][0]["metadata"],
            json!({"card": META_SECRET})
        );
    }

    // An update: the new content reads back, and the history shows every version in the clear.
    let new_content = format!("The user's PIN is {NEW_SECRET}");
    let (status, updated) = s.call(
        Method::PATCH,
        &format!("/v1/memories/{id}"),
        Some(&key),
        Some(&json!({"content": new_content})),
    );
    assert_eq!(status, 200, "{updated}");
    let (status, got) = s.get(&format!("/v1/memories/{id}"), &key);
    assert_eq!(status, 200);
    assert_eq!(got["data"]["content"], json!(new_content));
    assert_eq!(got["data"]["metadata"], json!({"card": META_SECRET}));
    let (status, h) = s.get(&format!("/v1/memories/{id}/history"), &key);
    assert_eq!(status, 200, "{h}");
    let versions = h["data"]["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 2, "{h}");
    assert_eq!(
        (
            versions[0]["change"].clone(),
            versions[0]["content"].clone(),
            versions[0]["metadata"].clone()
        ),
        (
            json!("created"),
            json!(content),
            json!({"card": META_SECRET})
        )
    );
    assert_eq!(
        (
            versions[1]["change"].clone(),
            versions[1]["content"].clone()
        ),
        (json!("updated"), json!(new_content))
    );
    assert!(
        h["data"].get("erased").is_none() && versions.iter().all(|v| v.get("erased").is_none()),
        "{h}"
    );
    // Restarted, it still reads (the keyword index, filters and vectors rebuilt from sealed
    // state).
    s.restart();
    let (_, found) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": NEW_SECRET, "search_mode": "keyword"}),
    );
    assert_eq!(ids(&found["data"]["results"]), vec![id.clone()], "{found}");
    let (_, got) = s.get(&format!("/v1/memories/{id}"), &key);
    assert_eq!(got["data"]["content"], json!(new_content));
    assert_eq!(got["data"]["metadata"], json!({"card": META_SECRET}));
    s.stop();

    // On disk: the memory events in the log carry the personal fields only sealed, and the
    // memories projection's tree holds none of them.
    let db = auditmem::log::open_db(&s.data_dir).expect("open the data dir");
    let log = auditmem::log::LogReader::open(&db).expect("log");
    let head = log.head().expect("head").seq;
    let mut memory_events = 0;
    for seq in 1..=head {
        let (record, event) = log.event(seq).expect("read").expect("record");
        let sealed = match &event {
            Event::MemoryCreated(e) => {
                assert_eq!((e.content.as_str(), e.vector.len()), ("", 0));
                e.sealed.is_some()
            }
            Event::MemoryUpdated(e) => {
                assert_eq!((e.content.as_deref(), e.vector.as_deref()), (None, None));
                e.sealed.is_some()
            }
            _ => continue,
        };
        memory_events += 1;
        assert!(sealed, "memory event at {seq} is not sealed");
        for secret in [SECRET, META_SECRET, NEW_SECRET, "social security"] {
            assert!(
                !contains(&record.event, secret),
                "{secret} at log seq {seq}"
            );
        }
    }
    assert_eq!(memory_events, 3, "two created, one updated");
    let tree = db.open_tree("proj_memories").expect("tree");
    let mut states = 0;
    for kv in tree.iter() {
        let (k, v) = kv.expect("read");
        states += 1;
        for secret in [
            SECRET,
            META_SECRET,
            NEW_SECRET,
            "social security",
            "green tea",
        ] {
            assert!(
                !contains(&k, secret) && !contains(&v, secret),
                "{secret} in the tree"
            );
        }
    }
    assert!(states > 1, "the tree holds the memories' states");
}
