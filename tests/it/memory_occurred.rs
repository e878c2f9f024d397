//! `occurred_at`: when what a memory says happened, as the caller gives it. Set on create,
//! batch create, update and batch update; shown by get, list, query, search and history only
//! when set; filtered on (`occurred_after`/`occurred_before` on the list, `occurred_at` in the
//! filter language); read as it stood by `as_of` and after a replay; a hybrid search whose
//! query names a date lifts the memories of that date.

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{assert_error, replayed_copy, Server};

fn message(resp: &(u16, Value)) -> String {
    resp.1["message"].as_str().unwrap_or_default().to_string()
}

fn create(s: &Server, key: &str, body: Value) -> String {
    let (status, v) = s.post("/v1/memories", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"]["id"].as_str().expect("id").to_string()
}

fn contents(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// What every read shows of the tenant's memories.
fn reads(s: &Server, key: &str, ids: &[String]) -> Vec<Value> {
    let mut out = vec![
        s.get("/v1/memories?page_size=100", key).1,
        s.post(
            "/v1/memories/query",
            key,
            json!({"filters": {"occurred_at": {"gte": "2023-01-01T00:00:00Z"}}}),
        )
        .1,
    ];
    for id in ids {
        out.push(s.get(&format!("/v1/memories/{id}"), key).1);
        out.push(s.get(&format!("/v1/memories/{id}/history"), key).1);
    }
    out
}

#[test]
fn occurred_at_round_trips_through_every_write_read_and_replay() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("pro");

    // Create: any offset is read, the answer shows UTC; a memory without it shows no key.
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Caroline went to the support group", "memory_type": "context",
               "occurred_at": "2023-05-08T15:56:00+02:00"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["occurred_at"], json!("2023-05-08T13:56:00.000Z"));
    let group = v["data"]["id"].as_str().expect("id").to_string();
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Caroline likes hiking", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    assert!(
        v["data"]
            .as_object()
            .is_some_and(|m| !m.contains_key("occurred_at")),
        "{v}"
    );
    let plain = v["data"]["id"].as_str().expect("id").to_string();

    // Batch create, one item with it and one without.
    let (status, v) = s.post(
        "/v1/memories/batch",
        &key,
        json!({"memories": [
            {"content": "Melanie painted a sunrise", "memory_type": "context",
             "occurred_at": "2022-08-14T10:00:00Z"},
            {"content": "Melanie has two kids", "memory_type": "fact"}]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["memories"][0]["occurred_at"],
        json!("2022-08-14T10:00:00.000Z")
    );
    assert!(v["data"]["memories"][1].get("occurred_at").is_none(), "{v}");
    let painted = v["data"]["memories"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();

    // Get, list and search show it.
    let (_, v) = s.get(&format!("/v1/memories/{group}"), &key);
    assert_eq!(v["data"]["occurred_at"], json!("2023-05-08T13:56:00.000Z"));
    let (_, v) = s.get("/v1/memories?page_size=100", &key);
    let shown: Vec<(String, Value)> = v["data"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| {
            (
                m["content"].as_str().unwrap_or_default().to_string(),
                m.get("occurred_at").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            ("Melanie has two kids".into(), Value::Null),
            (
                "Melanie painted a sunrise".into(),
                json!("2022-08-14T10:00:00.000Z")
            ),
            ("Caroline likes hiking".into(), Value::Null),
            (
                "Caroline went to the support group".into(),
                json!("2023-05-08T13:56:00.000Z")
            ),
        ]
    );
    let (status, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "support group", "top_k": 1}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["results"][0]["id"], json!(group));
    assert_eq!(
        v["data"]["results"][0]["occurred_at"],
        json!("2023-05-08T13:56:00.000Z")
    );

    // Update sets it, then clears it with null; batch update sets it; history shows each.
    let patch = |id: &str, body: Value| {
        s.call(
            Method::PATCH,
            &format!("/v1/memories/{id}"),
            Some(&key),
            Some(&body),
        )
    };
    let (status, v) = patch(&plain, json!({"occurred_at": "2023-06-01T00:00:00Z"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["occurred_at"], json!("2023-06-01T00:00:00.000Z"));
    let (status, v) = patch(&plain, json!({"occurred_at": null}));
    assert_eq!(status, 200, "{v}");
    assert!(v["data"].get("occurred_at").is_none(), "{v}");
    let (status, v) = s.call(
        Method::PATCH,
        "/v1/memories/batch",
        Some(&key),
        Some(&json!({"memories": [{"id": painted, "occurred_at": "2022-08-15T00:00:00Z"}]})),
    );
    assert_eq!(status, 200, "{v}");
    let (_, h) = s.get(&format!("/v1/memories/{plain}/history"), &key);
    let versions: Vec<(Value, Option<Value>)> = h["data"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| (v["change"].clone(), v.get("occurred_at").cloned()))
        .collect();
    assert_eq!(
        versions,
        vec![
            (json!("created"), None),
            (json!("updated"), Some(json!("2023-06-01T00:00:00.000Z"))),
            (json!("updated"), Some(Value::Null)),
        ]
    );
    let (_, h) = s.get(&format!("/v1/memories/{painted}/history"), &key);
    assert_eq!(
        h["data"]["versions"][1]["occurred_at"],
        json!("2022-08-15T00:00:00.000Z"),
        "{h}"
    );

    // A replay of the log reads the same.
    let ids = [group, plain, painted];
    let before = reads(&s, &key, &ids);
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on(&replayed);
    assert_eq!(reads(&r, &key, &ids), before);
}

#[test]
fn occurred_at_is_read_as_it_stood_as_of_a_position() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let id = create(
        &s,
        &key,
        json!({"content": "a trip to Paris", "memory_type": "context",
               "occurred_at": "2023-03-10T00:00:00Z"}),
    );
    let (status, _) = s.call(
        Method::PATCH,
        &format!("/v1/memories/{id}"),
        Some(&key),
        Some(&json!({"occurred_at": "2024-03-10T00:00:00Z"})),
    );
    assert_eq!(status, 200);
    let (_, h) = s.get(&format!("/v1/memories/{id}/history"), &key);
    let created = h["data"]["versions"][0]["seq"].as_u64().expect("seq");
    let (status, v) = s.get(&format!("/v1/memories/{id}?as_of={created}"), &key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["occurred_at"], json!("2023-03-10T00:00:00.000Z"));
    let (status, v) = s.post(
        "/v1/memories/query",
        &key,
        json!({"filters": {"occurred_at": {"lt": "2024-01-01T00:00:00Z"}}, "as_of": created}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(contents(&v["data"]["memories"]), vec!["a trip to Paris"]);
    let (_, v) = s.post(
        "/v1/memories/query",
        &key,
        json!({"filters": {"occurred_at": {"lt": "2024-01-01T00:00:00Z"}}}),
    );
    assert_eq!(v["data"]["total"], json!(0), "{v}");
    assert_eq!(
        s.get(&format!("/v1/memories/{id}"), &key).1["data"]["occurred_at"],
        json!("2024-03-10T00:00:00.000Z")
    );
}

#[test]
fn lists_queries_and_searches_filter_on_occurred_at() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    for (content, at) in [
        ("went camping at the lake", Some("2023-06-20T12:00:00Z")),
        (
            "went camping in the mountains",
            Some("2023-07-05T12:00:00Z"),
        ),
        ("went camping as a child", None),
    ] {
        let mut body = json!({"content": content, "memory_type": "context"});
        if let Some(at) = at {
            body["occurred_at"] = json!(at);
        }
        create(&s, &key, body);
    }
    let list = |q: &str| {
        let (status, v) = s.get(&format!("/v1/memories?{q}"), &key);
        assert_eq!(status, 200, "{v}");
        contents(&v["data"]["memories"])
    };
    assert_eq!(
        list("occurred_after=2023-07-01T00:00:00Z"),
        vec!["went camping in the mountains"]
    );
    assert_eq!(
        list("occurred_before=2023-07-05T12:00:00Z"),
        vec!["went camping at the lake"]
    );
    assert_eq!(
        list("occurred_after=2023-06-20T12:00:00Z&occurred_before=2023-08-01"),
        vec!["went camping in the mountains", "went camping at the lake"]
    );
    let (_, v) = s.post(
        "/v1/memories/query",
        &key,
        json!({"filters": {"NOT": {"occurred_at": {"gte": "2000-01-01T00:00:00Z"}}}}),
    );
    assert_eq!(
        contents(&v["data"]["memories"]),
        vec!["went camping as a child"]
    );
    let (status, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "camping", "filters": {"occurred_at": {"lt": "2023-07-01T00:00:00Z"}}}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        contents(&v["data"]["results"]),
        vec!["went camping at the lake"]
    );
}

#[test]
fn bad_occurred_at_values_are_refused_naming_the_field() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    for (path, body, want) in [
        (
            "/v1/memories",
            json!({"content": "c", "memory_type": "fact", "occurred_at": "last tuesday"}),
            "occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got 'last tuesday'",
        ),
        (
            "/v1/memories",
            json!({"content": "c", "memory_type": "fact", "occurred_at": 1_700_000_000}),
            "occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or null",
        ),
        (
            "/v1/memories/batch",
            json!({"memories": [{"content": "c", "memory_type": "fact", "occurred_at": "x"}]}),
            "memories[0]: occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got 'x'; nothing was stored",
        ),
        (
            "/v1/memories/query",
            json!({"filters": {"occurred_at": {"contains": "2023"}}}),
            "filters.occurred_at.contains: a time takes eq, ne, in, nin, gt, gte, lt or lte",
        ),
        (
            "/v1/memories/search",
            json!({"query": "q", "filters": {"occurred_at": {"gte": 2023}}}),
            "filters.occurred_at.gte: must be an ISO 8601 time such as 2026-01-31T12:00:00Z",
        ),
    ] {
        let resp = s.post(path, &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert_eq!(message(&resp), want, "{body}");
    }
    let resp = s.get("/v1/memories?occurred_after=soon", &key);
    assert_error(&resp, 400, 4000);
    assert_eq!(
        message(&resp),
        "occurred_after must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got 'soon'"
    );
    let id = create(&s, &key, json!({"content": "c", "memory_type": "fact"}));
    let resp = s.call(
        Method::PATCH,
        &format!("/v1/memories/{id}"),
        Some(&key),
        Some(&json!({"occurred_at": true})),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        message(&resp),
        "occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or null"
    );
    // Nothing was stored by the refused writes.
    assert_eq!(s.get("/v1/memories", &key).1["data"]["total"], json!(1));
}

#[test]
fn a_hybrid_search_naming_a_date_lifts_the_memories_of_that_date() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let july = create(
        &s,
        &key,
        json!({"content": "John bought a red racing bicycle", "memory_type": "context",
               "occurred_at": "2023-07-02T09:00:00Z"}),
    );
    let march = create(
        &s,
        &key,
        json!({"content": "John bought a bicycle", "memory_type": "context",
               "occurred_at": "2023-03-12T09:00:00Z"}),
    );
    let order = |query: &str, mode: Option<&str>| {
        let mut body = json!({"query": query, "top_k": 2});
        if let Some(m) = mode {
            body["search_mode"] = json!(m);
        }
        let (status, v) = s.post("/v1/memories/search", &key, body);
        assert_eq!(status, 200, "{v}");
        v["data"]["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["id"].as_str().expect("id").to_string())
            .collect::<Vec<_>>()
    };
    // Without a date the closer wording wins; naming March 2023 (or the day) lifts March's.
    assert_eq!(
        order("Which red racing bicycle did John buy?", None),
        [july.clone(), march.clone()]
    );
    assert_eq!(
        order("Which red racing bicycle did John buy in March 2023?", None),
        [march.clone(), july.clone()]
    );
    assert_eq!(
        order(
            "Which red racing bicycle did John buy on 12 March, 2023?",
            Some("hybrid")
        ),
        [march.clone(), july.clone()]
    );
    // Semantic and keyword rank by their own measure alone.
    assert_eq!(
        order(
            "Which red racing bicycle did John buy in March 2023?",
            Some("keyword")
        ),
        [july, march]
    );
}

/// An extraction's memories, content → `occurred_at` (null when it has none).
fn extracted_times(v: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = v["data"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| {
            (
                m["content"].as_str().unwrap_or_default().to_string(),
                m.get("occurred_at").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn an_extracted_memory_takes_the_occurred_at_of_the_messages_it_came_from() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({
            "occurred_at": "2023-01-01T00:00:00Z",
            "messages": [
                {"role": "user", "content": "I live in Lisbon.", "occurred_at": "2023-05-08T13:56:00+02:00"},
                {"role": "assistant", "content": "Nice!", "occurred_at": "2023-05-09T10:00:00Z"},
                {"role": "user", "content": "I am allergic to peanuts."},
                {"role": "narrator", "content": "Later.", "occurred_at": "2023-06-01T00:00:00Z"},
                {"role": "user", "content": "I work at Renault. I live in Lisbon.", "occurred_at": "2023-07-20T09:30:00Z"},
                {"role": "user", "content": "I work at Renault.", "occurred_at": "2023-03-01T00:00:00Z"}
            ]
        }),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        extracted_times(&v),
        vec![
            // A message without its own time: the request's.
            (
                "The user is allergic to peanuts".to_string(),
                json!("2023-01-01T00:00:00.000Z")
            ),
            // Said twice: the later time of the two messages.
            (
                "The user lives in Lisbon".to_string(),
                json!("2023-07-20T09:30:00.000Z")
            ),
            // Said twice, the second message given an earlier time: still the latest time.
            (
                "The user works at Renault".to_string(),
                json!("2023-07-20T09:30:00.000Z")
            ),
        ]
    );
    assert_eq!(
        v["data"]["skipped_messages"],
        json!([{"index": 3, "reason": "unknown role \"narrator\""}])
    );

    // Without a request-level time, a message without its own gives none.
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": [
            {"role": "user", "content": "I live in Oslo.", "occurred_at": "2024-02-29"},
            {"role": "user", "content": "I work at Initech."}
        ]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        extracted_times(&v),
        vec![
            (
                "The user lives in Oslo".to_string(),
                json!("2024-02-29T00:00:00.000Z")
            ),
            ("The user works at Initech".to_string(), Value::Null),
        ]
    );
}

#[test]
fn a_bad_message_occurred_at_is_refused_naming_the_message() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let cases = [
        (
            json!("yesterday"),
            "messages[1].occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got 'yesterday'",
        ),
        (
            json!(1700000000),
            "messages[1].occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or null",
        ),
    ];
    for (bad, said) in cases {
        let resp = s.post(
            "/v1/memories/extract",
            &key,
            json!({"messages": [
                {"role": "user", "content": "I live in Oslo."},
                {"role": "user", "content": "I work at Initech.", "occurred_at": bad}
            ]}),
        );
        assert_error(&resp, 400, 4000);
        assert_eq!(message(&resp), said);
    }
    // Nothing was stored.
    let (status, v) = s.get("/v1/memories", &key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["total"], json!(0));
}

/// A chat-completions server whose model names, for each memory, the messages it came from.
fn sourcing_provider() -> String {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|| async {
            let content = json!({"memories": [
                {"content": "The user lives in Lisbon", "memory_type": "fact", "importance": 0.6, "messages": [0, 2]},
                {"content": "The user is allergic to peanuts", "memory_type": "fact", "importance": 0.9, "messages": 1},
                {"content": "The user works at Renault", "memory_type": "fact", "importance": 0.6},
                {"content": "The user likes tea", "memory_type": "fact", "importance": 0.5, "messages": [7]}
            ]})
            .to_string();
            axum::Json(json!({"id": "x", "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}))
        }),
    );
    format!("http://{}", crate::common::serve_in_background(app))
}

#[test]
fn a_model_extracted_memory_takes_the_occurred_at_of_the_messages_it_names() {
    let url = sourcing_provider();
    let s = Server::start_with(&[
        "--extractor",
        "openai",
        "--extract-url",
        &url,
        "--extract-model",
        "mini-llm",
    ]);
    let (_, key) = s.tenant_with_key("pro");
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({
            "occurred_at": "2023-01-01T00:00:00Z",
            "messages": [
                {"role": "user", "content": "I live in Lisbon.", "occurred_at": "2023-05-08T13:56:00Z"},
                {"role": "user", "content": "I am allergic to peanuts.", "occurred_at": "2023-04-01T08:00:00Z"},
                {"role": "user", "content": "Still in Lisbon, and I work at Renault.", "occurred_at": "2023-07-20T09:30:00Z"}
            ]
        }),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        extracted_times(&v),
        vec![
            // Messages 1: its time.
            (
                "The user is allergic to peanuts".to_string(),
                json!("2023-04-01T08:00:00.000Z")
            ),
            // A message the conversation does not hold (7) names none: the request's time.
            (
                "The user likes tea".to_string(),
                json!("2023-01-01T00:00:00.000Z")
            ),
            // Messages 0 and 2: the later.
            (
                "The user lives in Lisbon".to_string(),
                json!("2023-07-20T09:30:00.000Z")
            ),
            // None named: the request's time.
            (
                "The user works at Renault".to_string(),
                json!("2023-01-01T00:00:00.000Z")
            ),
        ]
    );
}
