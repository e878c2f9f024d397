//! MCP, driven by the official MCP Python SDK (tests/python/mcp_client.py, pinned in
//! tests/python/requirements.txt) against the real binary: streamable HTTP at `/mcp` and the
//! stdio proxy `auditmem mcp`. Each tool is checked against what its REST route answers and
//! records; the scope binding (a connection's headers, a key's scope) against a model that
//! names another user.

use std::process::Command;

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{self, Server};

/// Runs a plan (see tests/python/mcp_client.py) and returns its output.
fn run(plan: Value) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/mcp_client.py");
    let out = Command::new(common::test_python())
        .arg(script)
        .arg(plan.to_string())
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the MCP client failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `sessions` over streamable HTTP with `key` and the binding `headers`.
fn over_http(s: &Server, key: &str, headers: Value, sessions: Value) -> Value {
    let mut h = json!({ "Authorization": format!("Bearer {key}") });
    for (k, v) in headers.as_object().into_iter().flatten() {
        h[k] = v.clone();
    }
    run(json!({
        "transport": "http",
        "url": format!("{}/mcp", s.url),
        "headers": h,
        "sessions": sessions,
    }))
}

/// The results of the only session.
fn results(out: &Value) -> Vec<Value> {
    out["sessions"][0].as_array().cloned().unwrap_or_default()
}

fn data(r: &Value) -> &Value {
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(r["is_error"], json!(false), "{r}");
    // The text the model reads is the structured content, as JSON.
    let text: Value = serde_json::from_str(r["text"].as_str().unwrap_or("")).expect("text");
    assert_eq!(text, r["structured"], "{r}");
    &r["structured"]
}

fn error(r: &Value) -> (i64, String, i64) {
    let e = &r["error"];
    (
        e["code"].as_i64().unwrap_or(0),
        e["message"].as_str().unwrap_or("").to_string(),
        e["data"]["http_status"].as_i64().unwrap_or(0),
    )
}

fn key_with(s: &Server, tenant: &str, perms: &[&str], scope: Option<Value>) -> String {
    let mut body = json!({ "permissions": perms });
    if let Some(scope) = scope {
        body["scope"] = scope;
    }
    let (st, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(body),
    );
    assert_eq!(st, 201, "{v}");
    v["data"]["api_key"].as_str().expect("api_key").to_string()
}

fn rest_create(s: &Server, key: &str, content: &str, user: Option<&str>) -> (u16, Value) {
    let mut body = json!({ "content": content, "memory_type": "fact" });
    if let Some(u) = user {
        body["user_id"] = json!(u);
    }
    s.post("/v1/memories", key, body)
}

/// The newest audit entries first, as REST lists them.
fn audit_entries(s: &Server, key: &str, n: usize) -> Vec<Value> {
    let (st, v) = s.get(&format!("/v1/audit/logs?page_size={n}"), key);
    assert_eq!(st, 200, "{v}");
    v["data"]["logs"].as_array().cloned().unwrap_or_default()
}

const TOOLS: [&str; 11] = [
    "add_memory",
    "delete_all_memories",
    "delete_memory",
    "get_audit_log",
    "get_memories",
    "get_memory",
    "list_audit_logs",
    "memory_history",
    "prove_audit_log",
    "search_memories",
    "update_memory",
];

#[test]
fn every_tool_does_what_its_rest_route_does_and_is_audited_as_mcp() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let bound = json!({ "X-Auditmem-User-Id": "alice" });
    let out = over_http(
        &s,
        &key,
        bound.clone(),
        json!([[
            {"list_tools": true},
            {"call": "add_memory", "args": {"text": "Alice prefers green tea", "infer": false, "importance": 0.7}},
            {"call": "add_memory", "args": {"messages": [
                {"role": "user", "content": "My cat is called Tom"},
                {"role": "user", "content": "I live in Lisbon"}], "infer": false, "memory_type": "context"}},
            {"call": "add_memory", "args": {"text": "I am allergic to peanuts."}},
            {"call": "search_memories", "args": {"query": "what does alice drink", "top_k": 1}},
            {"call": "get_memory", "args": {"memory_id": "$1.id"}},
            {"call": "update_memory", "args": {"memory_id": "$1.id", "text": "Alice prefers black tea"}},
            {"call": "memory_history", "args": {"memory_id": "$1.id"}},
            {"call": "get_memories", "args": {"memory_type": "context", "page_size": 1}},
            {"call": "delete_memory", "args": {"memory_id": "$2.memories.0.id"}},
            {"call": "get_memory", "args": {"memory_id": "$2.memories.0.id"}},
            {"call": "delete_all_memories", "args": {}},
            {"call": "get_memories", "args": {}},
        ]]),
    );
    assert_eq!(out["initialize"]["protocolVersion"], json!("2025-11-25"));
    assert_eq!(out["initialize"]["serverInfo"]["name"], json!("auditmem"));
    let r = results(&out);
    let tools = r[0]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, TOOLS);
    let search = tools
        .iter()
        .find(|t| t["name"] == json!("search_memories"))
        .expect("search_memories");
    let schema = &search["inputSchema"];
    let mut props: Vec<&String> = schema["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .collect();
    props.sort();
    assert_eq!(props, ["filters", "memory_type", "mode", "query", "top_k"]);
    assert_eq!(schema["required"], json!(["query"]));
    assert_eq!(schema["properties"]["top_k"]["maximum"], json!(100));
    assert_eq!(schema["properties"]["top_k"]["minimum"], json!(1));
    // No tool takes a user: the scope is the connection's.
    for t in tools {
        for scope in ["user_id", "agent_id", "session_id"] {
            assert!(t["inputSchema"]["properties"].get(scope).is_none(), "{t}");
        }
    }

    let created = data(&r[1]);
    assert_eq!(created["content"], json!("Alice prefers green tea"));
    assert_eq!(created["user_id"], json!("alice"));
    assert_eq!(created["memory_type"], json!("fact"));
    assert_eq!(created["importance"], json!(0.7));
    let id = created["id"].as_str().expect("id").to_string();
    let batch = data(&r[2])["memories"].as_array().cloned().expect("batch");
    let contents: Vec<&Value> = batch.iter().map(|m| &m["content"]).collect();
    assert_eq!(
        contents,
        [&json!("My cat is called Tom"), &json!("I live in Lisbon")]
    );
    assert!(batch
        .iter()
        .all(|m| m["user_id"] == json!("alice") && m["memory_type"] == json!("context")));
    // infer: the extractor's memories, charged as extraction is.
    let extracted = data(&r[3]);
    let found: Vec<&Value> = extracted["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| &m["content"])
        .collect();
    assert_eq!(found, [&json!("The user is allergic to peanuts")]);
    assert_eq!(extracted["credits_consumed"], json!(2.0));
    let hits = data(&r[4])["results"].as_array().cloned().expect("results");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0]["id"], json!(id));
    assert_eq!(data(&r[5])["id"], json!(id));
    assert_eq!(data(&r[6])["content"], json!("Alice prefers black tea"));
    let versions = data(&r[7])["versions"]
        .as_array()
        .cloned()
        .expect("versions");
    assert_eq!(versions.len(), 2);
    let page = data(&r[8]);
    assert_eq!(page["total"], json!(2));
    assert_eq!(page["page_size"], json!(1));
    assert_eq!(page["memories"].as_array().map(Vec::len), Some(1));
    assert_eq!(data(&r[9])["deleted"], json!(true));
    assert_eq!(error(&r[10]), (4040, "memory not found".into(), 404));
    // Everything of alice's that was left: the first memory, Lisbon, the extracted one.
    assert_eq!(data(&r[11])["deleted"], json!(3));
    assert_eq!(data(&r[12])["total"], json!(0));

    // Each call is the tenant's audit entry, with its route's action and the transport.
    let entries = audit_entries(&s, &key, 100);
    let got: Vec<(String, Value)> = entries
        .iter()
        .rev()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or("").to_string(),
                e["metadata"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, Value)> = [
        ("memory.write", "add_memory"),
        ("memory.batch_create", "add_memory"),
        ("memory.extract", "add_memory"),
        ("memory.search", "search_memories"),
        ("memory.read", "get_memory"),
        ("memory.update", "update_memory"),
        ("memory.history", "memory_history"),
        ("memory.query", "get_memories"),
        ("memory.delete", "delete_memory"),
        ("memory.read", "get_memory"),
        ("memory.batch_delete", "delete_all_memories"),
        ("memory.query", "get_memories"),
    ]
    .iter()
    .map(|(a, t)| (a.to_string(), json!({ "transport": "mcp", "mcp_tool": t })))
    .collect();
    assert_eq!(got, want);

    // The audit tools, on a connection bound to no user.
    let audit_id = entries[0]["id"].as_str().expect("id").to_string();
    let out = over_http(
        &s,
        &key,
        json!({}),
        json!([[
            {"call": "list_audit_logs", "args": {"action": "memory.update"}},
            {"call": "get_audit_log", "args": {"audit_id": audit_id}},
            {"call": "prove_audit_log", "args": {"audit_id": audit_id}},
            {"call": "get_audit_log", "args": {"audit_id": "../../memories"}},
        ]]),
    );
    let r = results(&out);
    let listed = data(&r[0]);
    assert_eq!(listed["total"], json!(1));
    assert_eq!(listed["logs"][0]["action"], json!("memory.update"));
    let entry = data(&r[1]);
    assert_eq!(entry["id"], json!(audit_id));
    assert_eq!(entry["action"], json!("memory.query"));
    let proof = data(&r[2]);
    assert_eq!(proof["audit_id"], json!(audit_id));
    let checkpoint = proof["checkpoint"].as_str().expect("checkpoint");
    assert!(
        checkpoint.starts_with("auditmem.localhost/log\n"),
        "{checkpoint}"
    );
    assert!(proof["inclusion"].is_array(), "{proof}");
    // An id is one path segment: no way to another route.
    assert_eq!(error(&r[3]), (4040, "audit log not found".into(), 404));
}

#[test]
fn refusals_are_the_error_envelope_codes_and_messages() {
    let s = Server::start();
    let tenant = s.create_tenant("business");
    let reader = key_with(&s, &tenant, &["memory.read", "audit.read"], None);
    // No key: the transport itself is refused, in the envelope.
    let resp = s
        .raw()
        .post(format!("{}/mcp", s.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#)
        .send()
        .expect("post");
    assert_eq!(resp.status().as_u16(), 401);
    let body: Value = resp.json().expect("json");
    assert_eq!(
        body,
        json!({"success": false, "code": 4010, "message": "missing Authorization: Bearer <API key> header", "data": null})
    );
    let out = over_http(
        &s,
        &reader,
        json!({ "X-Auditmem-User-Id": "alice" }),
        json!([[
            {"call": "add_memory", "args": {"text": "x", "infer": false}},
            {"call": "get_memory", "args": {"memory_id": "01a21e6b-e798-749b-8be9-125bd90a40dc"}},
            {"call": "search_memories", "args": {"query": "tea", "top_k": 0}},
            {"call": "search_memories", "args": {"query": "tea", "mode": "fuzzy"}},
            {"call": "add_memory", "args": {"text": "x", "messages": []}},
            {"call": "list_audit_logs", "args": {}},
        ]]),
    );
    let r = results(&out);
    assert_eq!(
        error(&r[0]),
        (
            4030,
            "this API key lacks the 'memory.write' permission".into(),
            403
        )
    );
    assert_eq!(error(&r[1]), (4040, "memory not found".into(), 404));
    let (code, message, status) = error(&r[2]);
    assert_eq!((code, status), (4000, 400));
    let (st, rest) = s.post(
        "/v1/memories/search",
        &reader,
        json!({"query": "tea", "top_k": 0}),
    );
    assert_eq!(st, 400);
    assert_eq!(
        json!(message),
        rest["message"],
        "the REST route's own message"
    );
    let (st, rest) = s.post(
        "/v1/memories/search",
        &reader,
        json!({"query": "tea", "search_mode": "fuzzy"}),
    );
    assert_eq!(st, 400);
    assert_eq!(
        error(&r[3]),
        (4000, rest["message"].as_str().unwrap_or("").into(), 400)
    );
    assert_eq!(
        error(&r[4]),
        (
            4000,
            "add_memory takes exactly one of text and messages".into(),
            400
        )
    );
    assert_eq!(
        error(&r[5]),
        (
            4030,
            "this caller is bound to user_id 'alice'; this route reaches beyond one scope".into(),
            403
        )
    );
    // A binding header that is no user id.
    let out = over_http(
        &s,
        &reader,
        json!({ "X-Auditmem-Agent-Id": "bot" }),
        json!([[{"call": "get_memories", "args": {}}]]),
    );
    assert_eq!(
        error(&results(&out)[0]),
        (
            4000,
            "x-auditmem-agent-id and x-auditmem-session-id narrow x-auditmem-user-id, which is missing".into(),
            400
        )
    );
}

#[test]
fn a_bound_connection_gets_nothing_of_another_user_whatever_the_model_passes() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let (st, bob) = rest_create(&s, &key, "Bob's bank PIN is 4321", Some("bob"));
    assert_eq!(st, 200, "{bob}");
    let bob_id = bob["data"]["id"].as_str().expect("id").to_string();
    let out = over_http(
        &s,
        &key,
        json!({ "X-Auditmem-User-Id": "alice" }),
        json!([[
            {"call": "add_memory", "args": {"text": "Alice's PIN is 1111", "infer": false}},
            {"call": "search_memories", "args": {"query": "bank PIN", "filters": {"user_id": "bob"}}},
            {"call": "search_memories", "args": {"query": "bank PIN", "top_k": 10}},
            {"call": "get_memories", "args": {"filters": {"OR": [{"user_id": "bob"}, {"user_id": "alice"}]}}},
            {"call": "get_memory", "args": {"memory_id": bob_id}},
            {"call": "update_memory", "args": {"memory_id": bob_id, "text": "hacked"}},
            {"call": "memory_history", "args": {"memory_id": bob_id}},
            {"call": "delete_memory", "args": {"memory_id": bob_id}},
            {"call": "delete_all_memories", "args": {"filters": {"user_id": "bob"}}},
            {"call": "add_memory", "args": {"text": "x", "infer": false, "user_id": "bob"}},
            {"call": "delete_all_memories", "args": {}},
        ]]),
    );
    let r = results(&out);
    assert_eq!(data(&r[0])["user_id"], json!("alice"));
    assert_eq!(data(&r[1])["results"], json!([]));
    let hits = data(&r[2])["results"].as_array().cloned().expect("results");
    let users: Vec<&Value> = hits.iter().map(|h| &h["user_id"]).collect();
    assert_eq!(users, [&json!("alice")]);
    let page = data(&r[3]);
    assert_eq!(page["total"], json!(1));
    assert_eq!(page["memories"][0]["user_id"], json!("alice"));
    for (i, step) in r.iter().enumerate().take(8).skip(4) {
        let refused = (4040, "memory not found".to_string(), 404);
        assert_eq!(error(step), refused, "step {i}");
    }
    assert_eq!(data(&r[8])["deleted"], json!(0));
    // An argument the tool does not have is refused by its schema.
    assert_eq!(r[9]["is_error"], json!(true), "{}", r[9]);
    assert!(
        r[9]["text"]
            .as_str()
            .is_some_and(|t| t.contains("unknown field `user_id`")),
        "{}",
        r[9]
    );
    assert_eq!(data(&r[10])["deleted"], json!(1));
    // Bob's memory is as it was.
    let (st, v) = s.get(&format!("/v1/memories/{bob_id}"), &key);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["content"], json!("Bob's bank PIN is 4321"));
    let (_, history) = s.get(&format!("/v1/memories/{bob_id}/history"), &key);
    assert_eq!(
        history["data"]["versions"].as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn a_scoped_key_is_confined_to_its_user_on_rest_and_mcp() {
    let s = Server::start();
    let tenant = s.create_tenant("business");
    let wide = key_with(
        &s,
        &tenant,
        &["memory.read", "memory.write", "audit.read"],
        None,
    );
    let (st, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(json!({"permissions": ["memory.read", "memory.write", "audit.read"], "scope": {"user_id": "alice"}})),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        v["data"]["scope"],
        json!({"user_id": "alice", "agent_id": null, "session_id": null})
    );
    let scoped = v["data"]["api_key"].as_str().expect("key").to_string();
    let (st, bob) = rest_create(&s, &wide, "Bob's secret", Some("bob"));
    assert_eq!(st, 200, "{bob}");
    let bob_id = bob["data"]["id"].as_str().expect("id").to_string();

    // REST.
    let refused = rest_create(&s, &scoped, "for bob", Some("bob"));
    assert_eq!(refused.0, 403);
    assert_eq!(
        refused.1,
        json!({"success": false, "code": 4030, "message": "this caller is bound to user_id 'alice'; a memory of user_id 'bob' is outside it", "data": null})
    );
    let (st, mine) = rest_create(&s, &scoped, "Alice's note", None);
    assert_eq!(st, 200, "{mine}");
    assert_eq!(mine["data"]["user_id"], json!("alice"));
    let (st, listed) = s.get("/v1/memories?user_id=bob", &scoped);
    assert_eq!(st, 200);
    assert_eq!(listed["data"]["total"], json!(0));
    let (st, listed) = s.get("/v1/memories", &scoped);
    assert_eq!(st, 200);
    assert_eq!(listed["data"]["total"], json!(1));
    assert_eq!(listed["data"]["memories"][0]["user_id"], json!("alice"));
    common::assert_error(
        &s.get(&format!("/v1/memories/{bob_id}"), &scoped),
        404,
        4040,
    );
    // Nor in the past: as of the head, bob's memory and its history are as missing.
    let head = s.head().0;
    for path in [
        format!("/v1/memories/{bob_id}?as_of={head}"),
        format!("/v1/memories/{bob_id}/history?as_of={head}"),
    ] {
        common::assert_error(&s.get(&path, &scoped), 404, 4040);
    }
    let (st, past) = s.get(&format!("/v1/memories?as_of={head}"), &scoped);
    assert_eq!(st, 200, "{past}");
    assert_eq!(past["data"]["total"], json!(1));
    assert_eq!(past["data"]["memories"][0]["user_id"], json!("alice"));
    let (st, deleted) = s.call(
        Method::DELETE,
        &format!("/v1/memories/{bob_id}"),
        Some(&scoped),
        None,
    );
    assert_eq!(
        (st, deleted["message"].clone()),
        (404, json!("memory not found"))
    );
    let audit = s.get("/v1/audit/logs", &scoped);
    common::assert_error(&audit, 403, 4030);
    assert_eq!(
        audit.1["message"],
        json!("this caller is bound to user_id 'alice'; this route reaches beyond one scope")
    );

    // MCP with the scoped key: no binding needed, and a binding cannot leave the key's scope.
    let out = over_http(
        &s,
        &scoped,
        json!({}),
        json!([[
            {"call": "get_memories", "args": {"filters": {"user_id": "bob"}}},
            {"call": "get_memories", "args": {}},
            {"call": "get_memory", "args": {"memory_id": bob_id}},
        ]]),
    );
    let r = results(&out);
    assert_eq!(data(&r[0])["total"], json!(0));
    assert_eq!(data(&r[1])["total"], json!(1));
    assert_eq!(error(&r[2]), (4040, "memory not found".into(), 404));
    let out = over_http(
        &s,
        &scoped,
        json!({ "X-Auditmem-User-Id": "bob" }),
        json!([[{"call": "get_memories", "args": {}}]]),
    );
    assert_eq!(
        error(&results(&out)[0]),
        (
            4030,
            "this API key is restricted to user_id 'alice'; the connection is bound to 'bob'"
                .into(),
            403
        )
    );
    // Bob's memory was never touched.
    let (st, v) = s.get(&format!("/v1/memories/{bob_id}"), &wide);
    assert_eq!(
        (st, v["data"]["content"].clone()),
        (200, json!("Bob's secret"))
    );

    // A key issued by the admin CLI, to one agent of a user: the user's other memories are
    // outside it.
    let env = [
        ("AUDITMEM_ADMIN_TOKEN", common::ADMIN_TOKEN),
        ("AUDITMEM_URL", s.url.as_str()),
    ];
    let (code, out, err) = common::cli(
        &[
            "admin",
            "key",
            "create",
            &tenant,
            "--permissions",
            "memory.read,memory.write",
            "--user-id",
            "carol",
            "--agent-id",
            "bot",
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let issued: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        issued["scope"],
        json!({"user_id": "carol", "agent_id": "bot", "session_id": null})
    );
    let bot = issued["api_key"].as_str().expect("key").to_string();
    let (st, _) = rest_create(&s, &wide, "Carol's own note", Some("carol"));
    assert_eq!(st, 200);
    let (_, listed) = s.get("/v1/memories", &bot);
    assert_eq!(listed["data"]["total"], json!(0));
    let (st, created) = rest_create(&s, &bot, "noted by the bot", None);
    assert_eq!(st, 200, "{created}");
    assert_eq!(
        (
            created["data"]["user_id"].clone(),
            created["data"]["agent_id"].clone()
        ),
        (json!("carol"), json!("bot"))
    );
    let (_, listed) = s.get("/v1/memories", &bot);
    assert_eq!(listed["data"]["total"], json!(1));
}

#[test]
fn concurrent_sessions_each_see_only_their_own_user() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    // Eight clients at once, each bound to its user by its own headers.
    let plans: Vec<Value> = (0..8)
        .map(|i| {
            json!({
                "transport": "http",
                "url": format!("{}/mcp", s.url),
                "headers": {"Authorization": format!("Bearer {key}"), "X-Auditmem-User-Id": format!("user-{i}")},
                "sessions": [[
                    {"call": "add_memory", "args": {"text": format!("note {i}"), "infer": false}},
                    {"call": "get_memories", "args": {}},
                    {"call": "search_memories", "args": {"query": "note", "top_k": 10}},
                ]],
            })
        })
        .collect();
    let outs: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .into_iter()
            .map(|p| scope.spawn(move || run(p)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("session"))
            .collect()
    });
    for (i, out) in outs.iter().enumerate() {
        let r = results(out);
        let page = data(&r[1]);
        assert_eq!(page["total"], json!(1), "user-{i}");
        assert_eq!(page["memories"][0]["content"], json!(format!("note {i}")));
        let hits = data(&r[2])["results"].as_array().cloned().expect("results");
        assert_eq!(hits.len(), 1, "user-{i}");
        assert_eq!(hits[0]["user_id"], json!(format!("user-{i}")));
    }
    let (_, all) = s.get("/v1/memories", &key);
    assert_eq!(all["data"]["total"], json!(8));
}

#[test]
fn the_stdio_proxy_serves_the_same_tools_through_the_service() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let (st, bob) = rest_create(&s, &key, "Bob likes jazz", Some("bob"));
    assert_eq!(st, 200, "{bob}");
    let bob_id = bob["data"]["id"].as_str().expect("id").to_string();
    let args = |user: &str| json!(["mcp", "--url", s.url, "--key", key, "--user-id", user]);
    let out = run(json!({
        "transport": "stdio",
        "command": common::bin(),
        "args": args("alice"),
        "sessions": [[
            {"list_tools": true},
            {"call": "add_memory", "args": {"text": "Alice likes opera", "infer": false}},
            {"call": "search_memories", "args": {"query": "music", "top_k": 5}},
            {"call": "get_memory", "args": {"memory_id": bob_id}},
            {"call": "search_memories", "args": {"query": "music", "top_k": 500}},
        ]],
    }));
    assert_eq!(out["initialize"]["protocolVersion"], json!("2025-11-25"));
    let r = results(&out);
    let names: Vec<&str> = r[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, TOOLS);
    let created = data(&r[1]);
    assert_eq!(created["user_id"], json!("alice"));
    let hits = data(&r[2])["results"].as_array().cloned().expect("results");
    let ids: Vec<&Value> = hits.iter().map(|h| &h["id"]).collect();
    assert_eq!(ids, [&created["id"]]);
    assert_eq!(error(&r[3]), (4040, "memory not found".into(), 404));
    let (code, _, status) = error(&r[4]);
    assert_eq!((code, status), (4000, 400));
    let entries = audit_entries(&s, &key, 4);
    let actions: Vec<(&Value, &Value)> = entries
        .iter()
        .rev()
        .map(|e| (&e["action"], &e["metadata"]["mcp_tool"]))
        .collect();
    assert_eq!(
        actions,
        [
            (&json!("memory.write"), &json!("add_memory")),
            (&json!("memory.search"), &json!("search_memories")),
            (&json!("memory.read"), &json!("get_memory")),
            (&json!("memory.search"), &json!("search_memories")),
        ]
    );
    // A wrong key reaches the host as the service's refusal.
    let out = run(json!({
        "transport": "stdio",
        "command": common::bin(),
        "args": ["mcp", "--url", s.url, "--key", "amk_wrong"],
        "sessions": [[]],
    }));
    assert_eq!(
        out["sessions"][0],
        json!("initialize refused: 4010 unknown API key")
    );
}
