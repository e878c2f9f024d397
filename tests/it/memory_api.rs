//! The memory store against a real server and the real embedding model.

use crate::common;

use common::{assert_error, cli, copy_dir, path_str, Server};
use reqwest::Method;
use serde_json::{json, Value};

fn create(s: &Server, key: &str, body: Value) -> Value {
    let (status, v) = s.post("/v1/memories", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"].clone()
}

fn call(s: &Server, method: Method, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    s.call(method, path, Some(key), body.as_ref())
}

#[test]
fn crud_defaults_and_envelopes() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "  I prefer dark mode in every editor  ", "memory_type": "rule"}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        v.as_object().map(|o| o.len()),
        Some(2),
        "memory endpoints answer success and data only: {v}"
    );
    assert_eq!(v["success"], json!(true));
    let m = &v["data"];
    assert_eq!(
        (
            m["content"].clone(),
            m["memory_type"].clone(),
            m["importance"].clone()
        ),
        (
            json!("I prefer dark mode in every editor"),
            json!("rule"),
            json!(0.5)
        )
    );
    assert!(m["created_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    let id = m["id"].as_str().expect("id").to_string();

    let (status, got) = s.get(&format!("/v1/memories/{id}"), &key);
    assert_eq!(status, 200);
    assert_eq!(&got["data"], m);

    for i in 0..25 {
        create(
            &s,
            &key,
            json!({"content": format!("fact number {i}"), "memory_type": "fact", "importance": 0.2}),
        );
    }
    let (_, list) = s.get("/v1/memories", &key);
    let d = &list["data"];
    assert_eq!(
        (
            d["total"].clone(),
            d["page"].clone(),
            d["page_size"].clone()
        ),
        (json!(26), json!(1), json!(20))
    );
    assert_eq!(d["memories"].as_array().map(Vec::len), Some(20));
    assert_eq!(
        d["memories"][0]["content"],
        json!("fact number 24"),
        "newest first"
    );
    let (_, rules) = s.get("/v1/memories?memory_type=rule", &key);
    assert_eq!(rules["data"]["total"], json!(1));
    let (_, clamped) = s.get("/v1/memories?page_size=500&page=1", &key);
    assert_eq!(clamped["data"]["page_size"], json!(100));
    let (_, past) = s.get("/v1/memories?page=9", &key);
    assert_eq!(
        (
            past["data"]["total"].clone(),
            past["data"]["memories"].clone()
        ),
        (json!(26), json!([]))
    );
    assert_error(&s.get("/v1/memories?memory_type=opinion", &key), 400, 4000);
    assert_error(&s.get("/v1/memories?page=0", &key), 400, 4000);

    let (status, up) = call(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{id}"),
        &key,
        Some(json!({"importance": 0.9})),
    );
    assert_eq!(status, 200, "{up}");
    assert_eq!(
        (
            up["data"]["importance"].clone(),
            up["data"]["content"].clone()
        ),
        (json!(0.9), m["content"].clone())
    );
    assert_error(
        &call(
            &s,
            Method::PATCH,
            &format!("/v1/memories/{id}"),
            &key,
            Some(json!({"memory_type": "fact"})),
        ),
        400,
        4000,
    );
    assert_error(
        &call(
            &s,
            Method::PATCH,
            &format!("/v1/memories/{id}"),
            &key,
            Some(json!({})),
        ),
        400,
        4000,
    );
    let empty = s
        .raw()
        .patch(format!("{}/v1/memories/{id}", s.url))
        .bearer_auth(&key)
        .send()
        .expect("send");
    assert_eq!(empty.status().as_u16(), 400);

    let (status, del) = call(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{id}"),
        &key,
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(del["data"], json!({"id": id, "deleted": true}));
    assert_error(&s.get(&format!("/v1/memories/{id}"), &key), 404, 4040);
    assert_error(
        &call(
            &s,
            Method::DELETE,
            &format!("/v1/memories/{id}"),
            &key,
            None,
        ),
        404,
        4040,
    );
    assert_error(&s.get("/v1/memories/not-a-uuid", &key), 404, 4040);
}

#[test]
fn each_validation_error_names_its_field() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("free");
    let cases = [
        (json!({"memory_type": "fact"}), "content"),
        (json!({"content": "   ", "memory_type": "fact"}), "content"),
        (
            json!({"content": "x".repeat(10_001), "memory_type": "fact"}),
            "content",
        ),
        (json!({"content": 5, "memory_type": "fact"}), "content"),
        (json!({"content": "ok"}), "memory_type"),
        (
            json!({"content": "ok", "memory_type": "opinion"}),
            "memory_type",
        ),
        (
            json!({"content": "ok", "memory_type": "fact", "importance": 1.5}),
            "importance",
        ),
        (
            json!({"content": "ok", "memory_type": "fact", "importance": -0.1}),
            "importance",
        ),
        (
            json!({"content": "ok", "memory_type": "fact", "importance": "high"}),
            "importance",
        ),
        (
            json!({"content": "ok", "memory_type": "fact", "color": "red"}),
            "color",
        ),
    ];
    for (body, field) in cases {
        let resp = s.post("/v1/memories", &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert!(
            resp.1["message"]
                .as_str()
                .is_some_and(|m| m.contains(field)),
            "{body}: {}",
            resp.1
        );
    }
    // Exactly 10,000 characters is allowed.
    create(
        &s,
        &key,
        json!({"content": "y".repeat(10_000), "memory_type": "context"}),
    );
    let search_cases = [
        (json!({}), "query"),
        (json!({"query": ""}), "query"),
        (json!({"query": "x", "top_k": 0}), "top_k"),
        (json!({"query": "x", "top_k": 101}), "top_k"),
        (json!({"query": "x", "top_k": 2.5}), "top_k"),
        (json!({"query": "x", "top_k": 101.0}), "top_k"),
        (json!({"query": "x", "top_k": "5"}), "top_k"),
        (
            json!({"query": "x", "min_similarity": "high"}),
            "min_similarity",
        ),
        (
            json!({"query": "x", "memory_type": "opinion"}),
            "memory_type",
        ),
    ];
    // A whole number written with a fraction is that number: the spec's top_k is a number.
    let (status, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "y", "top_k": 1.0, "min_similarity": -1.0}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["results"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
    for (body, field) in search_cases {
        let resp = s.post("/v1/memories/search", &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert!(
            resp.1["message"]
                .as_str()
                .is_some_and(|m| m.contains(field)),
            "{body}: {}",
            resp.1
        );
    }
}

#[test]
fn tenants_are_isolated_on_every_memory_route() {
    let s = Server::start();
    let (_, a) = s.tenant_with_key("pro");
    let (_, b) = s.tenant_with_key("pro");
    let mine = create(
        &s,
        &a,
        json!({"content": "The launch code is blue falcon", "memory_type": "fact"}),
    );
    create(
        &s,
        &b,
        json!({"content": "My favourite colour is green", "memory_type": "fact"}),
    );
    let id = mine["id"].as_str().expect("id");
    assert_error(&s.get(&format!("/v1/memories/{id}"), &b), 404, 4040);
    assert_error(&s.get(&format!("/v1/memories/{id}/history"), &b), 404, 4040);
    assert_error(
        &call(
            &s,
            Method::PATCH,
            &format!("/v1/memories/{id}"),
            &b,
            Some(json!({"importance": 0.1})),
        ),
        404,
        4040,
    );
    assert_error(
        &call(&s, Method::DELETE, &format!("/v1/memories/{id}"), &b, None),
        404,
        4040,
    );
    let (_, found) = s.post(
        "/v1/memories/search",
        &b,
        json!({"query": "launch code falcon", "top_k": 100}),
    );
    assert!(
        found["data"]["results"]
            .as_array()
            .expect("results")
            .iter()
            .all(|r| r["id"] != json!(id)),
        "{found}"
    );
    let (_, del) = call(
        &s,
        Method::DELETE,
        "/v1/memories",
        &b,
        Some(json!({"memory_type": "fact"})),
    );
    assert_eq!(del["data"], json!({"memory_type": "fact", "deleted": 1}));
    assert_eq!(
        s.get(&format!("/v1/memories/{id}"), &a).0,
        200,
        "another tenant's batch delete left it alone"
    );
}

#[test]
fn batch_delete_is_scoped_and_refuses_an_empty_body() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    for (c, t) in [
        ("a rule", "rule"),
        ("another rule", "rule"),
        ("a fact", "fact"),
        ("a context", "context"),
    ] {
        create(&s, &key, json!({"content": c, "memory_type": t}));
    }
    let empty = s
        .raw()
        .delete(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .send()
        .expect("send");
    assert_eq!(empty.status().as_u16(), 400);
    assert_error(
        &call(&s, Method::DELETE, "/v1/memories", &key, Some(json!({}))),
        400,
        4000,
    );
    assert_error(
        &call(
            &s,
            Method::DELETE,
            "/v1/memories",
            &key,
            Some(json!({"memory_type": "all"})),
        ),
        400,
        4000,
    );
    assert_eq!(
        s.get("/v1/memories", &key).1["data"]["total"],
        json!(4),
        "refused deletes deleted nothing"
    );
    let (status, v) = call(
        &s,
        Method::DELETE,
        "/v1/memories",
        &key,
        Some(json!({"memory_type": "rule"})),
    );
    assert_eq!(status, 200);
    assert_eq!(v["data"], json!({"memory_type": "rule", "deleted": 2}));
    let (_, left) = s.get("/v1/memories", &key);
    assert_eq!(left["data"]["total"], json!(2));
    let (_, v) = call(
        &s,
        Method::DELETE,
        "/v1/memories",
        &key,
        Some(json!({"memory_type": "rule"})),
    );
    assert_eq!(v["data"]["deleted"], json!(0));
}

#[test]
fn semantic_search_finds_paraphrases_and_follows_updates() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let memories = [
        ("The user is allergic to peanuts", "fact"),
        ("Always answer in formal English", "rule"),
        (
            "The team is migrating the billing database to PostgreSQL this quarter",
            "context",
        ),
        (
            "Her daughter plays the violin in the school orchestra",
            "fact",
        ),
        ("Deployments happen every Tuesday afternoon", "fact"),
        ("Never share API keys in chat messages", "rule"),
    ];
    let mut ids = Vec::new();
    for (c, t) in memories {
        ids.push(
            create(&s, &key, json!({"content": c, "memory_type": t}))["id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    // Queries sharing no content word with the memory they should find.
    let queries = [
        ("Which foods could trigger a reaction for this person?", 0),
        ("How polite should replies be?", 1),
        (
            "What storage engine are we moving our invoicing records to?",
            2,
        ),
        ("Does the child play a musical instrument?", 3),
        ("When do we ship releases to production?", 4),
        ("Can I paste my credentials in a conversation?", 5),
    ];
    for (q, want) in queries {
        let (status, v) = s.post("/v1/memories/search", &key, json!({"query": q, "top_k": 1}));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["data"]["results"][0]["id"], json!(ids[want]), "{q}: {v}");
    }
    let (_, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "peanut allergy", "search_mode": "semantic"}),
    );
    let results = v["data"]["results"].as_array().expect("results");
    assert_eq!(results.len(), 5, "top_k defaults to 5");
    let first = &results[0];
    // The interface's five fields and the score results are ranked by
    assert_eq!(first.as_object().map(|o| o.len()), Some(6), "{first}");
    let score = first["score"].as_f64().expect("score");
    assert!(score > 0.5 && score <= 1.0, "{first}");
    let ranked = first["final_score"].as_f64().expect("final_score");
    let importance = first["importance"].as_f64().expect("importance");
    assert!(
        (ranked - (0.85 * score + 0.15 * importance)).abs() < 2e-6,
        "{first}"
    );
    let (_, filtered) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "peanut allergy", "min_similarity": score, "search_mode": "semantic"}),
    );
    // The shown score given back as the threshold keeps that result: the filter compares
    // what the client sees (six decimals), not the unrounded similarity.
    assert_eq!(
        filtered["data"]["results"].as_array().map(Vec::len),
        Some(1),
        "{filtered}"
    );
    assert_eq!(filtered["data"]["results"][0]["id"], first["id"]);
    let (_, none) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "peanut allergy", "min_similarity": score + 1e-6, "search_mode": "semantic"}),
    );
    assert_eq!(none["data"]["results"], json!([]), "{none}");
    let (_, rules) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "peanut allergy", "memory_type": "rule", "search_mode": "semantic"}),
    );
    assert!(rules["data"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .all(|r| r["memory_type"] == json!("rule")));

    // The search's audit entry carries similarity, final_score and the source.
    let (_, list) = s.get("/v1/audit/logs?action=memory.search&page_size=1", &key);
    let audit_id = list["data"]["logs"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (_, detail) = s.get(&format!("/v1/audit/logs/{audit_id}"), &key);
    let item = &detail["data"]["memory_results"][0];
    assert_eq!(detail["data"]["memory_query"], json!(["peanut allergy"]));
    assert_eq!(item["source"], json!("semantic"));
    let (sim, fin, imp) = (
        item["similarity"].as_f64().expect("sim"),
        item["final_score"].as_f64().expect("final"),
        item["importance"].as_f64().expect("imp"),
    );
    assert!((fin - (0.85 * sim + 0.15 * imp)).abs() < 1e-5, "{item}");

    // Patching the content re-embeds it: the old topic no longer finds it, the new one does.
    let (status, _) = call(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{}", ids[4]),
        &key,
        Some(json!({"content": "The office cat is called Biscuit"})),
    );
    assert_eq!(status, 200);
    let (_, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "When do we ship releases to production?", "top_k": 1}),
    );
    assert_ne!(v["data"]["results"][0]["id"], json!(ids[4]), "{v}");
    let (_, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": "What is the name of our pet?", "top_k": 1}),
    );
    assert_eq!(v["data"]["results"][0]["id"], json!(ids[4]), "{v}");
}

#[test]
fn extraction_charges_credits_deduplicates_and_is_audited() {
    let s = Server::start();
    let tenant = s.create_tenant("pro"); // 100 credits
    let key = s.create_key(&tenant, &["audit.read", "memory.read", "memory.write"]);
    let messages = json!([
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi there! My name is Dana and I work at Acme Robotics. Please always reply in Spanish. I'm preparing a talk for next week."},
        {"role": "assistant", "content": "Claro, Dana."}
    ]);
    let (status, v) = s.post("/v1/memories/extract", &key, json!({"messages": messages}));
    assert_eq!(status, 200, "{v}");
    let created = v["data"]["memories"].as_array().expect("memories").clone();
    let types: Vec<&str> = created
        .iter()
        .map(|m| m["memory_type"].as_str().expect("type"))
        .collect();
    assert!(
        types.contains(&"fact") && types.contains(&"rule") && types.contains(&"context"),
        "{v}"
    );
    assert!(
        created
            .iter()
            .all(|m| !m["content"].as_str().unwrap_or("").contains("Claro")),
        "assistant turns are not the user's memories"
    );
    assert_eq!(v["data"]["skipped"], json!([]));
    assert_eq!(
        v["data"]["credits_consumed"],
        json!(2.0),
        "1 per call + 1 per started 1,000 characters"
    );
    let (_, t) = s.admin(Method::GET, &format!("/admin/v1/tenants/{tenant}"), None);
    assert_eq!(t["data"]["credits"], json!(98.0));

    // The same conversation again, deduplicated: nothing new.
    let (status, again) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": messages, "deduplicate": true}),
    );
    assert_eq!(status, 200);
    assert_eq!(again["data"]["memories"], json!([]));
    let skipped = again["data"]["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), created.len());
    assert!(
        skipped.iter().all(|x| x["reason"] == json!("duplicate")
            && created.iter().any(|m| m["id"] == x["duplicate_of"])),
        "{again}"
    );
    assert_eq!(
        s.get("/v1/memories", &key).1["data"]["total"],
        json!(created.len())
    );

    let (_, list) = s.get("/v1/audit/logs?action=memory.extract&page_size=1", &key);
    let e = &list["data"]["logs"][0];
    assert_eq!(
        (
            e["credits_consumed"].clone(),
            e["balance_consumed_usd"].clone()
        ),
        (json!(2.0), json!(0.002))
    );
    let (_, d) = s.get(
        &format!("/v1/audit/logs/{}", e["id"].as_str().expect("id")),
        &key,
    );
    assert_eq!(d["data"]["input_content"], messages);
    assert_eq!(
        d["data"]["output_content"]["skipped"]
            .as_array()
            .map(Vec::len),
        Some(created.len())
    );

    let (status, t) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I live in Lisbon. Thanks!"}),
    );
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["data"]["memories"][0]["memory_type"], json!("fact"));
    // The text is recorded as the object it came in: input_content is an object or an array.
    let (_, l) = s.get("/v1/audit/logs?action=memory.extract&page_size=1", &key);
    let (_, d) = s.get(
        &format!(
            "/v1/audit/logs/{}",
            l["data"]["logs"][0]["id"].as_str().expect("id")
        ),
        &key,
    );
    assert_eq!(
        d["data"]["input_content"],
        json!({"text": "I live in Lisbon. Thanks!"}),
        "{d}"
    );
    // null is "not given", as for every optional field.
    let (status, t) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I work at Initech.", "messages": null, "deduplicate": null}),
    );
    assert_eq!(status, 200, "{t}");
    assert_error(
        &s.post(
            "/v1/memories/extract",
            &key,
            json!({"messages": null, "text": null}),
        ),
        400,
        4000,
    );

    assert_error(
        &s.post(
            "/v1/memories/extract",
            &key,
            json!({"messages": messages, "text": "x"}),
        ),
        400,
        4000,
    );
    assert_error(&s.post("/v1/memories/extract", &key, json!({})), 400, 4000);
    // An unknown role is skipped and named, not refused.
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": [{"role": "robot", "content": "x"}]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["skipped_messages"],
        json!([{"index": 0, "reason": "unknown role \"robot\""}])
    );

    // Out of credits: 402, and nothing is stored.
    s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"credits": 1.5})),
    );
    let before = s.get("/v1/memories", &key).1["data"]["total"].clone();
    assert_error(
        &s.post(
            "/v1/memories/extract",
            &key,
            json!({"text": "My name is Bo. I work at Initech."}),
        ),
        402,
        4020,
    );
    assert_eq!(s.get("/v1/memories", &key).1["data"]["total"], before);
}

#[test]
fn history_follows_a_memory_from_creation_to_deletion() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let m = create(
        &s,
        &key,
        json!({"content": "The wifi password is on the fridge", "memory_type": "fact"}),
    );
    let id = m["id"].as_str().expect("id");
    call(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{id}"),
        &key,
        Some(json!({"content": "The wifi password is on the router", "importance": 0.7})),
    );
    call(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{id}"),
        &key,
        None,
    );
    let (status, h) = s.get(&format!("/v1/memories/{id}/history"), &key);
    assert_eq!(status, 200, "{h}");
    let versions = h["data"]["versions"].as_array().expect("versions");
    assert_eq!(h["data"]["deleted"], json!(true));
    let changes: Vec<&str> = versions
        .iter()
        .map(|v| v["change"].as_str().expect("change"))
        .collect();
    assert_eq!(changes, vec!["created", "updated", "deleted"]);
    assert_eq!(
        versions[1]["content"],
        json!("The wifi password is on the router")
    );
    let actions: Vec<String> = versions
        .iter()
        .map(|v| {
            let (status, e) = s.get(
                &format!(
                    "/v1/audit/logs/{}",
                    v["audit_id"].as_str().expect("audit id")
                ),
                &key,
            );
            assert_eq!(status, 200, "{e}");
            e["data"]["action"].as_str().expect("action").to_string()
        })
        .collect();
    assert_eq!(
        actions,
        vec!["memory.write", "memory.update", "memory.delete"]
    );
}

#[test]
fn permissions_on_memory_routes() {
    let s = Server::start();
    let tenant = s.create_tenant("pro");
    let reader = s.create_key(&tenant, &["memory.read"]);
    let writer = s.create_key(&tenant, &["memory.write"]);
    let auditor = s.create_key(&tenant, &["audit.read"]);
    let m = create(&s, &writer, json!({"content": "x", "memory_type": "fact"}));
    let id = m["id"].as_str().expect("id");
    assert_error(
        &s.post(
            "/v1/memories",
            &reader,
            json!({"content": "x", "memory_type": "fact"}),
        ),
        403,
        4030,
    );
    assert_error(&s.get("/v1/memories", &writer), 403, 4030);
    assert_error(&s.get(&format!("/v1/memories/{id}"), &auditor), 403, 4030);
    assert_error(
        &s.post("/v1/memories/search", &writer, json!({"query": "x"})),
        403,
        4030,
    );
    assert_error(
        &s.post(
            "/v1/memories/extract",
            &reader,
            json!({"text": "I live in Oslo."}),
        ),
        403,
        4030,
    );
    assert_error(
        &call(
            &s,
            Method::DELETE,
            "/v1/memories",
            &reader,
            Some(json!({"memory_type": "fact"})),
        ),
        403,
        4030,
    );
    assert_eq!(s.get(&format!("/v1/memories/{id}"), &reader).0, 200);
    assert_eq!(
        s.post("/v1/memories/search", &reader, json!({"query": "x"}))
            .0,
        200
    );
}

#[test]
fn memories_survive_replay_identically() {
    let mut s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let mut ids = Vec::new();
    for (c, t) in [
        ("I prefer tea over coffee", "rule"),
        ("Our office is in Porto", "fact"),
        ("We are hiring two engineers", "context"),
    ] {
        ids.push(
            create(&s, &key, json!({"content": c, "memory_type": t}))["id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    call(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{}", ids[1]),
        &key,
        Some(json!({"content": "Our office moved to Braga"})),
    );
    call(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{}", ids[2]),
        &key,
        None,
    );
    s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "My name is Ana. I always want short answers."}),
    );
    let reads = |s: &Server| -> Vec<Value> {
        let mut out = vec![s.get("/v1/memories?page_size=100", &key).1["data"].clone()];
        out.push(
            s.post(
                "/v1/memories/search",
                &key,
                json!({"query": "where is the office", "top_k": 10}),
            )
            .1["data"]
                .clone(),
        );
        for id in &ids {
            out.push(s.get(&format!("/v1/memories/{id}/history"), &key).1["data"].clone());
        }
        out
    };
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (plain, replayed) = (tmp.path().join("plain"), tmp.path().join("replayed"));
    copy_dir(&s.data_dir, &plain);
    copy_dir(&s.data_dir, &replayed);
    let (code, out, err) = cli(&["replay", "--data-dir", path_str(&replayed)], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let a = Server::start_on(&plain);
    let before = reads(&a);
    drop(a);
    let b = Server::start_on(&replayed);
    let after = reads(&b);
    assert_eq!(before, after);
    assert_eq!(before[0]["total"], json!(4), "{}", before[0]);
}

/// The server's files that have no name left (unlinked while open) under `dir`.
fn unlinked_files_in(s: &Server, dir: &std::path::Path) -> usize {
    let pid = s.pid().expect("running");
    let dir = dir.canonicalize().expect("data dir");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| {
            let t = target.to_string_lossy();
            target.starts_with(&dir) && t.ends_with(" (deleted)")
        })
        .count()
}

#[test]
fn vector_rows_kept_in_a_file_answer_as_rows_kept_in_memory() {
    // Given a server whose tables move their f32 rows to a file from 8 memories on, and a
    // tenant with 30 memories (the first rows in the file, the later in its unwritten tail),
    // two of them re-embedded by an update and three deleted,
    let mut s = Server::start_with(&["--vector-spill-rows", "8"]);
    let (_, key) = s.tenant_with_key("business");
    let (_, small) = s.tenant_with_key("business");
    let topics = [
        "peanuts",
        "violins",
        "PostgreSQL",
        "Tuesday deployments",
        "API keys",
        "tea",
        "Porto",
        "hiring",
        "the billing system",
        "vacations",
        "the office plants",
        "code review",
        "the coffee machine",
        "on-call rotation",
        "the quarterly budget",
    ];
    let mut ids = Vec::new();
    for (i, topic) in topics.iter().enumerate() {
        for (variant, ty) in [("The user cares about", "fact"), ("Always mention", "rule")] {
            let body = json!({"content": format!("{variant} {topic} ({i})"), "memory_type": ty,
                              "importance": (i % 5) as f64 / 4.0});
            ids.push(
                create(&s, &key, body)["id"]
                    .as_str()
                    .expect("id")
                    .to_string(),
            );
        }
    }
    for id in [&ids[1], &ids[17]] {
        let (status, v) = call(
            &s,
            Method::PATCH,
            &format!("/v1/memories/{id}"),
            &key,
            Some(json!({"content": "The user now only drinks green tea"})),
        );
        assert_eq!(status, 200, "{v}");
    }
    for id in [&ids[0], &ids[9], &ids[29]] {
        assert_eq!(
            call(
                &s,
                Method::DELETE,
                &format!("/v1/memories/{id}"),
                &key,
                None
            )
            .0,
            200
        );
    }
    // and a second tenant that passed the size and fell back below half of it,
    let mut small_ids = Vec::new();
    for topic in &topics[..9] {
        let body = json!({"content": format!("Remember {topic}"), "memory_type": "context"});
        small_ids.push(
            create(&s, &small, body)["id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    for id in &small_ids[..6] {
        assert_eq!(
            call(
                &s,
                Method::DELETE,
                &format!("/v1/memories/{id}"),
                &small,
                None
            )
            .0,
            200
        );
    }
    let searches = |s: &Server| -> Vec<Value> {
        let mut out = Vec::new();
        for (q, extra) in [
            ("What does the user drink?", json!({})),
            (
                "Which rules apply to secrets?",
                json!({"memory_type": "rule"}),
            ),
            ("When do releases go out?", json!({"min_similarity": 0.2})),
            ("budget and money", json!({"top_k": 30})),
        ] {
            let mut body = json!({"query": q, "top_k": 10});
            for (k, v) in extra.as_object().expect("object") {
                body[k] = v.clone();
            }
            let (status, v) = s.post("/v1/memories/search", &key, body.clone());
            assert_eq!(status, 200, "{v}");
            out.push(v["data"].clone());
            out.push(s.post("/v1/memories/search", &small, body).1["data"].clone());
        }
        out
    };
    // then exactly one table keeps its rows in a file, which has no name in the data dir,
    assert_eq!(unlinked_files_in(&s, &s.data_dir), 1);
    let spilled = searches(&s);
    assert_eq!(
        spilled[0]["results"][0]["content"],
        json!("The user now only drinks green tea"),
        "{}",
        spilled[0]
    );
    assert_eq!(
        spilled[6]["results"].as_array().expect("results").len(),
        25, // of 27: two score below the default min_similarity of 0
        "{}",
        spilled[6]
    );
    assert_eq!(
        spilled[7]["results"].as_array().expect("results").len(),
        3,
        "{}",
        spilled[7]
    );
    // and every search answers exactly as on a server keeping every row in memory, on the
    // same data,
    s.stop();
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(&s.data_dir, copy.path());
    let in_memory = Server::start_on_with(copy.path(), &["--vector-spill-rows", "0"]);
    assert_eq!(unlinked_files_in(&in_memory, copy.path()), 0);
    assert_eq!(searches(&in_memory), spilled);
    drop(in_memory);
    // and as the first server once restarted, which writes its file anew from the log.
    s.spawn();
    assert_eq!(unlinked_files_in(&s, &s.data_dir), 1);
    assert_eq!(searches(&s), spilled);
}

#[test]
fn the_server_runs_without_transparent_huge_pages() {
    // Huge pages keep more of the heap resident and make it grow faster under load
    // (src/lib.rs, `disable_transparent_huge_pages`); the kernel reports the process's
    // setting.
    let s = Server::start();
    let pid = s.pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let thp = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(str::trim);
    assert_eq!(thp, Some("0"), "{status}");
    // And this test's own process, which never asked, still has them.
    let own = std::fs::read_to_string("/proc/self/status").expect("status");
    assert!(own.lines().any(|l| l == "THP_enabled:\t1"), "{own}");
}
