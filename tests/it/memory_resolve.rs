//! `resolve: true` on create and extract: contradictions supersede, duplicates are not stored,
//! scopes are respected, history and replay show it.

use serde_json::{json, Value};

use crate::common::{assert_error, replayed_copy, Server};

fn create(s: &Server, key: &str, body: Value) -> Value {
    let (status, v) = s.post("/v1/memories", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"].clone()
}

fn id(m: &Value) -> String {
    m["id"].as_str().expect("id").to_string()
}

fn listed(s: &Server, key: &str, body: Value) -> Vec<String> {
    let (status, v) = s.post("/v1/memories/query", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn searched(s: &Server, key: &str, include_superseded: bool) -> Vec<String> {
    let (status, v) = s.post(
        "/v1/memories/search",
        key,
        json!({"query": "which city does the user live in", "top_k": 10, "min_similarity": 0.2,
               "filters": {"user_id": "alice"}, "include_superseded": include_superseded}),
    );
    assert_eq!(status, 200, "{v}");
    v["data"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_contradicting_memory_supersedes_the_old_one_within_its_scope() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("pro");

    // Given where Alice lives, and where Bob lives
    let lisbon = create(
        &s,
        &key,
        json!({"content": "I live in Lisbon", "memory_type": "fact", "user_id": "alice"}),
    );
    let berlin = create(
        &s,
        &key,
        json!({"content": "I live in Berlin", "memory_type": "fact", "user_id": "bob"}),
    );
    assert!(lisbon.get("resolution").is_none(), "{lisbon}");

    // When Alice says she moved, with resolve
    let porto = create(
        &s,
        &key,
        json!({"content": "I moved to Porto", "memory_type": "fact", "user_id": "alice", "resolve": true}),
    );
    // Then the new memory says what it superseded: Lisbon, not Bob's Berlin
    assert_eq!(
        porto["resolution"],
        json!({"stored": true, "superseded": [id(&lisbon)], "duplicate_of": null})
    );
    // and the old memory stays readable, marked
    let (status, old) = s.get(&format!("/v1/memories/{}", id(&lisbon)), &key);
    assert_eq!(status, 200, "{old}");
    assert_eq!(old["data"]["superseded_by"], json!(id(&porto)));
    assert!(old["data"]["superseded_at"].is_string(), "{old}");
    let (_, bob) = s.get(&format!("/v1/memories/{}", id(&berlin)), &key);
    assert!(bob["data"].get("superseded_by").is_none(), "{bob}");
    // but leaves list and search unless asked for
    assert_eq!(
        listed(&s, &key, json!({"filters": {"user_id": "alice"}})),
        vec!["I moved to Porto"]
    );
    assert_eq!(
        listed(
            &s,
            &key,
            json!({"filters": {"user_id": "alice"}, "include_superseded": true})
        ),
        vec!["I moved to Porto", "I live in Lisbon"]
    );
    let (_, all) = s.get("/v1/memories", &key);
    assert_eq!(all["data"]["total"], json!(2), "{all}");
    assert_eq!(searched(&s, &key, false), vec!["I moved to Porto"]);
    let both = searched(&s, &key, true);
    assert!(
        both.len() == 2 && both.contains(&"I live in Lisbon".to_string()),
        "{both:?}"
    );
    // and its history shows the supersession
    let (_, h) = s.get(&format!("/v1/memories/{}/history", id(&lisbon)), &key);
    let versions = h["data"]["versions"].as_array().expect("versions");
    assert_eq!(
        versions
            .iter()
            .map(|v| (v["change"].clone(), v["superseded_by"].clone()))
            .collect::<Vec<_>>(),
        vec![
            (json!("created"), Value::Null),
            (json!("superseded"), json!(id(&porto)))
        ],
        "{h}"
    );

    // A memory equal in meaning to a stored one is not stored: the answer is the stored one
    let again = create(
        &s,
        &key,
        json!({"content": "I live in Porto", "memory_type": "fact", "user_id": "alice", "resolve": true}),
    );
    assert_eq!(id(&again), id(&porto));
    assert_eq!(
        again["resolution"],
        json!({"stored": false, "superseded": [], "duplicate_of": id(&porto)})
    );
    assert_eq!(s.get("/v1/memories", &key).1["data"]["total"], json!(2));

    // Without resolve, nothing is compared (the interface's behaviour)
    let madrid = create(
        &s,
        &key,
        json!({"content": "I live in Madrid", "memory_type": "fact", "user_id": "alice"}),
    );
    assert!(madrid.get("resolution").is_none(), "{madrid}");
    let (_, p) = s.get(&format!("/v1/memories/{}", id(&porto)), &key);
    assert!(p["data"].get("superseded_by").is_none(), "{p}");

    // Extraction resolves each memory it finds
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I work at Acme.", "user_id": "carol"}),
    );
    assert_eq!(status, 200, "{v}");
    let acme = id(&v["data"]["memories"][0]);
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I work at Globex.", "user_id": "carol", "resolve": true}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["memories"][0]["resolution"],
        json!({"stored": true, "superseded": [acme], "duplicate_of": null}),
        "{v}"
    );
    let globex = id(&v["data"]["memories"][0]);
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I work at Globex.", "user_id": "carol", "resolve": true}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["memories"], json!([]), "{v}");
    assert_eq!(
        v["data"]["skipped"][0]["duplicate_of"],
        json!(globex),
        "{v}"
    );

    // Batches do not take resolve; a bad value is named
    let resp = s.post(
        "/v1/memories/batch",
        &key,
        json!({"memories": [{"content": "a", "memory_type": "fact"}, {"content": "b", "memory_type": "fact", "resolve": true}]}),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        resp.1["message"],
        json!("memories[1]: resolve is taken by POST /v1/memories and extraction, not by a batch; nothing was stored")
    );
    let resp = s.post(
        "/v1/memories",
        &key,
        json!({"content": "a", "memory_type": "fact", "resolve": "yes"}),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(resp.1["message"], json!("resolve must be a boolean"));

    // And replay reproduces every supersession
    let ids = [id(&lisbon), id(&porto), id(&berlin), acme.clone(), globex];
    let reads = |s: &Server| -> Vec<Value> {
        let mut out = vec![
            s.get("/v1/memories?page_size=100", &key).1,
            s.post(
                "/v1/memories/query",
                &key,
                json!({"include_superseded": true, "page_size": 100}),
            )
            .1,
        ];
        for i in &ids {
            out.push(s.get(&format!("/v1/memories/{i}"), &key).1);
            out.push(s.get(&format!("/v1/memories/{i}/history"), &key).1);
        }
        out
    };
    let before = reads(&s);
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on(&replayed);
    assert_eq!(reads(&r), before);
}

/// A chat provider that judges conflicts: it names as contradicted every candidate that
/// mentions Lisbon, and fails while `failing` is set. Returns its base URL.
fn start_judge(
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use axum::routing::post;
    use std::sync::atomic::Ordering;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |axum::Json(req): axum::Json<Value>| {
            let (calls, failing) = (calls.clone(), failing.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if failing.load(Ordering::SeqCst) {
                    return (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        axum::Json(json!({"error": {"message": "down"}})),
                    );
                }
                let user = req["messages"][1]["content"].as_str().unwrap_or_default();
                let asked: Value = serde_json::from_str(user).unwrap_or(Value::Null);
                let contradicts: Vec<Value> = asked["existing"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["content"].as_str().is_some_and(|t| t.contains("Lisbon")))
                    .map(|c| c["id"].clone())
                    .collect();
                let content = json!({"contradicts": contradicts, "duplicates": []}).to_string();
                (
                    axum::http::StatusCode::OK,
                    axum::Json(json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})),
                )
            }
        }),
    );
    format!("http://{}", crate::common::serve_in_background(app))
}

#[test]
fn the_chat_model_decides_when_extraction_uses_one() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let calls = Arc::new(AtomicUsize::new(0));
    let failing = Arc::new(AtomicBool::new(false));
    let url = start_judge(calls.clone(), failing.clone());
    let s = Server::start_with(&[
        "--extractor",
        "openai",
        "--extract-url",
        &url,
        "--extract-model",
        "judge",
        "--provider-timeout-secs",
        "2",
    ]);
    let (_, key) = s.tenant_with_key("pro");
    let lisbon = create(
        &s,
        &key,
        json!({"content": "I live in Lisbon", "memory_type": "fact", "user_id": "alice"}),
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no resolve, no call");

    // A phrasing the rules do not read: the model decides, in one call
    let porto = create(
        &s,
        &key,
        json!({"content": "Home is Porto these days", "memory_type": "fact", "user_id": "alice", "resolve": true}),
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        porto["resolution"],
        json!({"stored": true, "superseded": [id(&lisbon)], "duplicate_of": null})
    );

    // A failing model is the extraction's 502, and nothing is stored
    failing.store(true, Ordering::SeqCst);
    let resp = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Home is Braga these days", "memory_type": "fact", "user_id": "alice", "resolve": true}),
    );
    assert_error(&resp, 502, 5020);
    assert!(
        resp.1["message"].as_str().is_some_and(
            |m| m.starts_with("the conflict resolution provider failed; nothing was stored")
        ),
        "{}",
        resp.1
    );
    let (_, all) = s.get("/v1/memories?user_id=alice", &key);
    assert_eq!(all["data"]["total"], json!(1), "{all}");
}
