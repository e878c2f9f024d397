//! Scopes (`user_id`, `agent_id`, `session_id`), metadata, filters (`POST /v1/memories/query`,
//! search's `filters`, `DELETE /v1/memories` with `filters`) and expiry (`expires_at`).

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{assert_error, replayed_copy, Server};

fn message(resp: &(u16, Value)) -> String {
    resp.1["message"].as_str().unwrap_or_default().to_string()
}

fn create(s: &Server, key: &str, body: Value) -> Value {
    let (status, v) = s.post("/v1/memories", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"].clone()
}

fn contents(page: &Value) -> Vec<String> {
    page["memories"]
        .as_array()
        .or_else(|| page["results"].as_array())
        .expect("a list")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn query(s: &Server, key: &str, body: Value) -> Value {
    let (status, v) = s.post("/v1/memories/query", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"].clone()
}

/// An ISO 8601 time `secs` from now.
fn in_secs(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn reads(s: &Server, key: &str, ids: &[String]) -> Vec<Value> {
    let mut out = vec![
        s.get("/v1/memories?page_size=100", key).1,
        s.post(
            "/v1/memories/query",
            key,
            json!({"filters": {"user_id": "alice"}, "include_superseded": true}),
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
fn scoped_memories_are_filtered_expire_and_survive_replay() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("pro");

    // Given memories of two users and two agents, with metadata
    let a1 = create(
        &s,
        &key,
        json!({"content": "Alice prefers answers in Spanish", "memory_type": "rule", "importance": 0.9,
               "user_id": " alice ", "agent_id": "support", "session_id": "s-1",
               "metadata": {"topic": "language", "tags": ["vip"], "priority": 3}}),
    );
    let a2 = create(
        &s,
        &key,
        json!({"content": "Alice's invoices go to billing@alice.example", "memory_type": "fact",
               "importance": 0.4, "user_id": "alice", "agent_id": "billing", "metadata": {"topic": "billing"}}),
    );
    let b1 = create(
        &s,
        &key,
        json!({"content": "Bob prefers answers in French", "memory_type": "rule", "user_id": "bob", "agent_id": "support"}),
    );
    let plain = create(
        &s,
        &key,
        json!({"content": "The team ships on Thursdays", "memory_type": "context"}),
    );
    // Then each memory shows what it was given, trimmed, and a memory given none shows only the
    // interface's fields
    assert_eq!(
        (
            a1["user_id"].clone(),
            a1["agent_id"].clone(),
            a1["session_id"].clone(),
            a1["metadata"].clone()
        ),
        (
            json!("alice"),
            json!("support"),
            json!("s-1"),
            json!({"topic": "language", "tags": ["vip"], "priority": 3})
        )
    );
    let mut keys: Vec<&String> = plain.as_object().expect("object").keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "content",
            "created_at",
            "id",
            "importance",
            "memory_type",
            "updated_at"
        ]
    );
    let id = |m: &Value| m["id"].as_str().expect("id").to_string();
    assert_eq!(
        s.get(&format!("/v1/memories/{}", id(&a1)), &key).1["data"],
        a1
    );

    // Every bad scope, metadata or expiry is a 400 naming the field
    for (body, want) in [
        (
            json!({"content": "c", "memory_type": "fact", "user_id": "  "}),
            "user_id must be 1 to 256 characters",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "agent_id": 7}),
            "agent_id must be a string",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "session_id": "a\u{7}b"}),
            "session_id must not hold control characters",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "metadata": [1]}),
            "metadata must be a JSON object",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "metadata": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}}),
            "metadata is nested deeper than 5 levels",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "metadata": {"a": "x".repeat(9000)}}),
            "metadata is 9008 bytes as JSON; at most 8192 are allowed",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "expires_at": "2020-01-01T00:00:00Z"}),
            "expires_at must be in the future",
        ),
        (
            json!({"content": "c", "memory_type": "fact", "expires_at": "soon"}),
            "expires_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got 'soon'",
        ),
    ] {
        let resp = s.post("/v1/memories", &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert_eq!(message(&resp), want, "{body}");
    }

    // The list takes the scopes as query parameters
    let (status, v) = s.get("/v1/memories?user_id=alice", &key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["total"], json!(2));
    assert_eq!(
        contents(&v["data"]),
        vec![
            "Alice's invoices go to billing@alice.example",
            "Alice prefers answers in Spanish"
        ]
    );
    let (_, v) = s.get("/v1/memories?agent_id=support&memory_type=rule", &key);
    assert_eq!(v["data"]["total"], json!(2));
    assert_error(&s.get("/v1/memories?user_id=", &key), 400, 4000);

    // Query: AND, OR, NOT, comparisons, metadata keys, times, paging
    for (filters, want) in [
        (
            json!({"AND": [{"user_id": "alice"}, {"importance": {"gte": 0.5}}]}),
            vec!["Alice prefers answers in Spanish"],
        ),
        (
            json!({"OR": [{"user_id": "bob"}, {"metadata.topic": {"in": ["billing"]}}]}),
            vec![
                "Bob prefers answers in French",
                "Alice's invoices go to billing@alice.example",
            ],
        ),
        (
            json!({"NOT": {"agent_id": "support"}}),
            vec![
                "The team ships on Thursdays",
                "Alice's invoices go to billing@alice.example",
            ],
        ),
        (
            json!({"metadata.tags": {"contains": "vip"}, "metadata.priority": {"gt": 2}}),
            vec!["Alice prefers answers in Spanish"],
        ),
        (
            json!({"created_at": {"gte": "2020-01-01"}, "memory_type": {"nin": ["rule", "fact"]}}),
            vec!["The team ships on Thursdays"],
        ),
        (
            json!({"user_id": {"ne": "alice"}, "agent_id": {"contains": "SUPP"}}),
            vec!["Bob prefers answers in French"],
        ),
    ] {
        let page = query(&s, &key, json!({ "filters": filters }));
        assert_eq!(contents(&page), want, "{filters}");
        assert_eq!(page["total"], json!(want.len()), "{filters}");
    }
    let page = query(
        &s,
        &key,
        json!({"filters": {"user_id": {"in": ["alice", "bob"]}}, "page": 2, "page_size": 2}),
    );
    assert_eq!(
        (page["total"].clone(), page["page"].clone(), contents(&page)),
        (
            json!(3),
            json!(2),
            vec!["Alice prefers answers in Spanish".to_string()]
        )
    );
    // An empty body lists everything, as the list does
    assert_eq!(query(&s, &key, json!({}))["total"], json!(4));
    for (body, want) in [
        (json!({"filters": {"AND": [{"user_id": "alice"}, {"importance": {"gte": "high"}}]}}), "filters.AND[1].importance.gte: must be a number from 0.0 to 1.0"),
        (json!({"filters": {"owner": "alice"}}), "filters.owner: unknown field; filter on user_id, agent_id, session_id, memory_type, importance, created_at, updated_at, occurred_at or metadata.<key>, or AND, OR, NOT"),
        (json!({"filters": {"user_id": {"gt": "a"}}}), "filters.user_id.gt: this field takes eq, ne, in, nin or contains"),
        (json!({"filters": []}), "filters: must be an object"),
        (json!({"filters": {"user_id": "a"}, "include_superseded": "yes"}), "include_superseded must be a boolean"),
        (json!({"filter": {"user_id": "a"}}), "unknown field 'filter'"),
    ] {
        let resp = s.post("/v1/memories/query", &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert!(message(&resp).starts_with(want), "{body}: {}", message(&resp));
    }

    // Search takes the same filters and shows the ranking score
    let (status, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "which language should answers be in", "top_k": 5, "filters": {"user_id": "bob"}, "search_mode": "semantic"}),
    );
    assert_eq!(status, 200, "{v}");
    let results = v["data"]["results"].as_array().expect("results");
    assert_eq!(contents(&v["data"]), vec!["Bob prefers answers in French"]);
    let r = &results[0];
    let score = r["score"].as_f64().expect("score");
    let final_score = r["final_score"].as_f64().expect("final_score");
    assert!(
        (final_score - (0.85 * score + 0.15 * 0.5)).abs() < 2e-6,
        "{r}"
    );
    assert_eq!(r["user_id"], json!("bob"));
    let (_, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "which language should answers be in", "filters": {"user_id": "carol"}}),
    );
    assert_eq!(v["data"]["results"], json!([]));

    // PATCH changes metadata and expiry; null clears them; history shows each change
    let (status, v) = s.call(
        Method::PATCH,
        &format!("/v1/memories/{}", id(&a2)),
        Some(&key),
        Some(&json!({"metadata": {"topic": "finance"}, "expires_at": in_secs(3600)})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["metadata"], json!({"topic": "finance"}));
    assert!(v["data"]["expires_at"].is_string(), "{v}");
    let (status, v) = s.call(
        Method::PATCH,
        &format!("/v1/memories/{}", id(&a2)),
        Some(&key),
        Some(&json!({"metadata": null, "expires_at": null})),
    );
    assert_eq!(status, 200, "{v}");
    assert!(
        v["data"].get("metadata").is_none() && v["data"].get("expires_at").is_none(),
        "{v}"
    );
    let (_, h) = s.get(&format!("/v1/memories/{}/history", id(&a2)), &key);
    let versions = h["data"]["versions"].as_array().expect("versions");
    assert_eq!(
        versions
            .iter()
            .map(|v| (v["change"].clone(), v["metadata"].clone()))
            .collect::<Vec<_>>(),
        vec![
            (json!("created"), json!({"topic": "billing"})),
            (json!("updated"), json!({"topic": "finance"})),
            (json!("updated"), Value::Null),
        ]
    );
    assert_eq!(versions[2]["expires_at"], Value::Null);
    assert!(
        versions[2]
            .as_object()
            .is_some_and(|v| v.contains_key("expires_at")),
        "{h}"
    );
    let resp = s.call(
        Method::PATCH,
        &format!("/v1/memories/{}", id(&a2)),
        Some(&key),
        Some(&json!({})),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        message(&resp),
        "give content, importance, metadata, expires_at and/or occurred_at to update"
    );

    // Another tenant with the same user ids sees none of it
    let (_, other) = s.tenant_with_key("pro");
    assert_eq!(
        s.get("/v1/memories?user_id=alice", &other).1["data"]["total"],
        json!(0)
    );
    assert_eq!(
        query(&s, &other, json!({"filters": {"user_id": "alice"}}))["total"],
        json!(0)
    );

    // A memory that expires is answered until then, and gone from every read from that instant
    let short = create(
        &s,
        &key,
        json!({"content": "Alice is travelling this week", "memory_type": "context", "user_id": "alice", "expires_at": in_secs(2)}),
    );
    assert_eq!(
        s.get("/v1/memories?user_id=alice", &key).1["data"]["total"],
        json!(3)
    );
    std::thread::sleep(std::time::Duration::from_millis(2_300));
    assert_error(
        &s.get(&format!("/v1/memories/{}", id(&short)), &key),
        404,
        4040,
    );
    assert_eq!(
        s.get("/v1/memories?user_id=alice", &key).1["data"]["total"],
        json!(2)
    );
    let (_, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "Alice is travelling this week", "top_k": 10}),
    );
    assert!(
        !contents(&v["data"]).contains(&"Alice is travelling this week".to_string()),
        "{v}"
    );
    // and the sweeper writes its expiry into the history
    let mut changes = Vec::new();
    for _ in 0..50 {
        let (_, h) = s.get(&format!("/v1/memories/{}/history", id(&short)), &key);
        changes = h["data"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| v["change"].clone())
            .collect();
        if changes.len() == 2 {
            assert_eq!(h["data"]["deleted"], json!(true));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(changes, vec![json!("created"), json!("expired")]);

    // A filtered delete takes exactly what the filter matches; an empty filter is refused
    for (body, want) in [
        (json!({"filters": {}}), "filters: must not be empty"),
        (json!({}), "memory_type is required"),
    ] {
        let resp = s.call(Method::DELETE, "/v1/memories", Some(&key), Some(&body));
        assert_error(&resp, 400, 4000);
        assert!(message(&resp).starts_with(want), "{}", message(&resp));
    }
    let (status, v) = s.call(
        Method::DELETE,
        "/v1/memories",
        Some(&key),
        Some(&json!({"filters": {"agent_id": "support"}, "memory_type": "rule"})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"], json!({"memory_type": "rule", "deleted": 2}));
    let (status, v) = s.call(
        Method::DELETE,
        "/v1/memories",
        Some(&key),
        Some(&json!({"filters": {"user_id": "nobody"}})),
    );
    assert_eq!((status, v["data"].clone()), (200, json!({"deleted": 0})));
    assert_eq!(
        contents(&s.get("/v1/memories", &key).1["data"]),
        vec![
            "The team ships on Thursdays",
            "Alice's invoices go to billing@alice.example"
        ]
    );
    let (_, h) = s.get(&format!("/v1/memories/{}/history", id(&b1)), &key);
    assert_eq!(h["data"]["versions"][1]["change"], json!("deleted"));

    // And replay reproduces all of it
    let ids = [id(&a1), id(&a2), id(&b1), id(&plain), id(&short)];
    let before = reads(&s, &key, &ids);
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on(&replayed);
    assert_eq!(reads(&r, &key, &ids), before);
}
