//! `POST /v1/memories/batch` and `PATCH /v1/memories/batch`: up to 100 memories created or
//! updated in one call, all or nothing, each invalid item named by its index.

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{assert_error, cli, copy_dir, path_str, Server};

fn call(s: &Server, method: Method, path: &str, key: &str, body: Value) -> (u16, Value) {
    s.call(method, path, Some(key), Some(&body))
}

fn total(s: &Server, key: &str) -> Value {
    s.get("/v1/memories?page_size=100", key).1["data"]["total"].clone()
}

fn message(resp: &(u16, Value)) -> String {
    resp.1["message"].as_str().unwrap_or_default().to_string()
}

/// The four reads a batch changes: the list, a search, each memory and its history.
fn reads(s: &Server, key: &str, ids: &[String]) -> Vec<Value> {
    let mut out = vec![
        s.get("/v1/memories?page_size=100", key).1["data"].clone(),
        s.post(
            "/v1/memories/search",
            key,
            json!({"query": "which editor theme", "top_k": 10}),
        )
        .1["data"]
            .clone(),
    ];
    for id in ids {
        out.push(s.get(&format!("/v1/memories/{id}"), key).1["data"].clone());
        out.push(s.get(&format!("/v1/memories/{id}/history"), key).1["data"].clone());
    }
    out
}

#[test]
fn batches_create_and_update_all_or_nothing_and_survive_replay() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("pro");

    // Given a batch of three memories
    let (status, v) = s.post(
        "/v1/memories/batch",
        &key,
        json!({"memories": [
            {"content": "  I prefer dark mode in every editor ", "memory_type": "rule"},
            {"content": "The user's office is in Porto", "memory_type": "fact", "importance": 0.8},
            {"content": "Working on the billing migration this week", "memory_type": "context"}
        ]}),
    );
    // Then all three are created, in order, with the single create's defaults
    assert_eq!(status, 200, "{v}");
    let created = v["data"]["memories"].as_array().expect("memories").clone();
    let got: Vec<(Value, Value, Value)> = created
        .iter()
        .map(|m| {
            (
                m["content"].clone(),
                m["memory_type"].clone(),
                m["importance"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                json!("I prefer dark mode in every editor"),
                json!("rule"),
                json!(0.5)
            ),
            (
                json!("The user's office is in Porto"),
                json!("fact"),
                json!(0.8)
            ),
            (
                json!("Working on the billing migration this week"),
                json!("context"),
                json!(0.5)
            ),
        ]
    );
    let ids: Vec<String> = created
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect();
    for (id, m) in ids.iter().zip(&created) {
        let (status, one) = s.get(&format!("/v1/memories/{id}"), &key);
        assert_eq!((status, &one["data"]), (200, m));
    }
    assert_eq!(total(&s, &key), json!(3));
    // And each was embedded: a paraphrase finds its memory first
    let (_, found) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "which editor theme", "top_k": 1}),
    );
    assert_eq!(found["data"]["results"][0]["id"], json!(ids[0]), "{found}");

    // When items are invalid, each is named by its index and nothing is stored
    let resp = s.post(
        "/v1/memories/batch",
        &key,
        json!({"memories": [
            {"content": "a valid one", "memory_type": "fact"},
            {"memory_type": "fact"},
            {"content": "x", "memory_type": "opinion"},
            5,
            {"content": "y", "memory_type": "fact", "colour": "red"}
        ]}),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        message(&resp),
        "memories[1]: content is required; memories[2]: unknown memory_type 'opinion' (expected rule, fact or context); memories[3]: must be an object; memories[4]: unknown field 'colour' (allowed: content, memory_type, importance, user_id, agent_id, session_id, metadata, expires_at, occurred_at, resolve); nothing was stored"
    );
    assert_eq!(total(&s, &key), json!(3));
    for (body, want) in [
        (json!({}), "memories is required"),
        (json!({"memories": {}}), "memories must be an array"),
        (
            json!({"memories": []}),
            "memories holds 0 items; a batch holds 1 to 100",
        ),
        (
            json!({"memories": vec![json!({"content": "c", "memory_type": "fact"}); 101]}),
            "memories holds 101 items; a batch holds 1 to 100",
        ),
        (
            json!({"memories": [], "extra": 1}),
            "unknown field 'extra' (allowed: memories)",
        ),
    ] {
        let resp = s.post("/v1/memories/batch", &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert_eq!(message(&resp), want, "{body}");
    }
    // 100 is the most, and allowed
    let hundred: Vec<Value> = (0..100)
        .map(|i| json!({"content": format!("note {i}"), "memory_type": "fact"}))
        .collect();
    let (status, v) = s.post("/v1/memories/batch", &key, json!({"memories": hundred}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["memories"].as_array().map(Vec::len), Some(100));
    assert_eq!(total(&s, &key), json!(103));

    // When two memories are updated in one batch
    let (status, v) = call(
        &s,
        Method::PATCH,
        "/v1/memories/batch",
        &key,
        json!({"memories": [
            {"id": ids[1], "importance": 0.9},
            {"id": ids[0], "content": "I prefer a light theme in every editor"}
        ]}),
    );
    // Then both change, in the order given, and the new content is what search finds
    assert_eq!(status, 200, "{v}");
    let updated = &v["data"]["memories"];
    assert_eq!(
        (
            updated[0]["id"].clone(),
            updated[0]["importance"].clone(),
            updated[0]["content"].clone()
        ),
        (
            json!(ids[1]),
            json!(0.9),
            json!("The user's office is in Porto")
        )
    );
    assert_eq!(
        (updated[1]["id"].clone(), updated[1]["content"].clone()),
        (
            json!(ids[0]),
            json!("I prefer a light theme in every editor")
        )
    );
    assert_eq!(
        s.get(&format!("/v1/memories/{}", ids[0]), &key).1["data"],
        updated[1]
    );
    let (_, history) = s.get(&format!("/v1/memories/{}/history", ids[0]), &key);
    let changes: Vec<Value> = history["data"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["change"].clone())
        .collect();
    assert_eq!(
        changes,
        vec![json!("created"), json!("updated")],
        "{history}"
    );

    // When one item's memory is missing, or another tenant's, nothing is updated
    let (_, other_key) = s.tenant_with_key("pro");
    let theirs = s.post(
        "/v1/memories",
        &other_key,
        json!({"content": "their memory", "memory_type": "fact"}),
    );
    let theirs = theirs.1["data"]["id"].as_str().expect("id").to_string();
    let missing = "0190f5d2-0000-7000-8000-000000000000";
    let resp = call(
        &s,
        Method::PATCH,
        "/v1/memories/batch",
        &key,
        json!({"memories": [
            {"id": ids[2], "importance": 0.1},
            {"id": missing, "importance": 0.1},
            {"id": theirs, "importance": 0.1}
        ]}),
    );
    assert_error(&resp, 404, 4040);
    assert_eq!(
        message(&resp),
        "memories[1]: memory not found; memories[2]: memory not found; nothing was stored"
    );
    assert_eq!(
        s.get(&format!("/v1/memories/{}", ids[2]), &key).1["data"]["importance"],
        json!(0.5)
    );
    assert_eq!(
        s.get(&format!("/v1/memories/{theirs}"), &other_key).1["data"]["importance"],
        json!(0.5)
    );
    // An invalid value, an id given twice, an item with nothing to change: 400, nothing stored
    for (items, want) in [
        (
            json!([{"id": ids[2], "importance": 0.1}, {"id": ids[1], "importance": 2}]),
            "memories[1]: importance must be a number from 0.0 to 1.0; nothing was stored"
                .to_string(),
        ),
        (
            json!([{"id": ids[2], "importance": 0.1}, {"id": ids[2], "importance": 0.2}]),
            format!(
                "memories[1]: id {} is memories[0]'s too; a batch updates a memory once; nothing was stored",
                ids[2]
            ),
        ),
        (
            json!([{"id": ids[2]}, {"id": "nope", "importance": 0.2}]),
            "memories[0]: give content, importance, metadata, expires_at and/or occurred_at to update; memories[1]: id 'nope' is not a memory id; nothing was stored".to_string(),
        ),
    ] {
        let resp = call(
            &s,
            Method::PATCH,
            "/v1/memories/batch",
            &key,
            json!({ "memories": items }),
        );
        assert_error(&resp, 400, 4000);
        assert_eq!(message(&resp), want);
    }
    assert_eq!(
        s.get(&format!("/v1/memories/{}", ids[2]), &key).1["data"]["importance"],
        json!(0.5)
    );

    // Both are writes: a read-only key is refused, and each batch is one audit entry with
    // every memory it touched
    let (tenant, _) = s.tenant_with_key("pro");
    let reader = s.create_key(&tenant, &["memory.read"]);
    assert_error(
        &s.post(
            "/v1/memories/batch",
            &reader,
            json!({"memories": [{"content": "c", "memory_type": "fact"}]}),
        ),
        403,
        4030,
    );
    assert_error(
        &call(
            &s,
            Method::PATCH,
            "/v1/memories/batch",
            &reader,
            json!({"memories": [{"id": ids[0], "importance": 0.3}]}),
        ),
        403,
        4030,
    );
    let (_, audit) = s.get("/v1/audit/logs?action=memory.batch_create", &key);
    let entries = audit["data"]["logs"].as_array().expect("logs").clone();
    let statuses: Vec<Value> = entries.iter().map(|e| e["http_status"].clone()).collect();
    assert!(
        statuses.contains(&json!(200)) && statuses.contains(&json!(400)),
        "{audit}"
    );
    let first_ok = entries
        .iter()
        .rev()
        .find(|e| e["http_status"] == json!(200))
        .expect("the first batch");
    let id = first_ok["id"].as_str().expect("id");
    let (_, detail) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(
        detail["data"]["memory_results"]
            .as_array()
            .map(|r| r.iter().map(|m| m["id"].clone()).collect::<Vec<_>>()),
        Some(ids.iter().map(|i| json!(i)).collect()),
        "{detail}"
    );

    // And replay reproduces every batch
    let before = reads(&s, &key, &ids);
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    copy_dir(&s.data_dir, &replayed);
    let (code, out, err) = cli(&["replay", "--data-dir", path_str(&replayed)], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let r = Server::start_on(&replayed);
    assert_eq!(reads(&r, &key, &ids), before);
}
