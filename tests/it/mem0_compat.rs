//! The mem0-compatible API (`/compat/mem0`), driven by mem0's own client (`mem0ai`'s
//! `MemoryClient`, pinned in tests/python/requirements.txt) against the real binary: a mem0
//! user's script (tests/python/mem0_user.py) runs unchanged but for its host and key, and
//! each answer is compared with what our REST API says of the same memories; then another
//! tenant's key, a bad key, a key without a permission and a scoped key
//! (tests/python/mem0_calls.py).

use std::collections::BTreeSet;
use std::process::Command;

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{self, Server};

/// Runs `script` with `args` and the environment `envs` (mem0's telemetry off, its config
/// directory a temporary one); its printed JSON.
fn python(script: &str, args: &[String], envs: &[(&str, String)]) -> Value {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let home = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(common::test_python());
    cmd.arg(path)
        .args(args)
        .env("MEM0_TELEMETRY", "False")
        .env("MEM0_DIR", home.path());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the mem0 client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the mem0 client failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn host(s: &Server) -> String {
    format!("{}/compat/mem0", s.url)
}

/// `calls` made with `key` by tests/python/mem0_calls.py.
fn calls(s: &Server, key: &str, calls: Value) -> Value {
    let plan = json!({ "host": host(s), "api_key": key, "calls": calls });
    python("mem0_calls.py", &[plan.to_string()], &[])
}

/// A memory as mem0's client shows it, from our REST answer for it.
fn as_mem0(m: &Value) -> Value {
    json!({
        "id": m["id"],
        "memory": m["content"],
        "user_id": m.get("user_id").cloned().unwrap_or(Value::Null),
        "agent_id": m.get("agent_id").cloned().unwrap_or(Value::Null),
        "app_id": null,
        "run_id": m.get("session_id").cloned().unwrap_or(Value::Null),
        "metadata": m.get("metadata").cloned().unwrap_or(Value::Null),
        "categories": [],
        "created_at": m["created_at"],
        "updated_at": m["updated_at"],
        "expiration_date": null,
    })
}

fn rest_memory(s: &Server, key: &str, id: &str) -> Value {
    let (st, v) = s.get(&format!("/v1/memories/{id}"), key);
    assert_eq!(st, 200, "{v}");
    v["data"].clone()
}

/// Our search's results for `body`, as mem0's client shows them.
fn rest_search(s: &Server, key: &str, body: Value) -> Vec<Value> {
    let (st, v) = s.post("/v1/memories/search", key, body);
    assert_eq!(st, 200, "{v}");
    v["data"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let mut m = as_mem0(r);
            m["score"] = r["score"].clone();
            m
        })
        .collect()
}

fn ids(results: &Value) -> Vec<String> {
    results
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["id"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_mem0_users_script_runs_unchanged_and_every_call_is_audited_as_mem0() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let env = [("MEM0_HOST", host(&s)), ("MEM0_API_KEY", key.clone())];
    let out = python("mem0_user.py", &["remember".into()], &env);

    // add with infer: extraction's memories, each an ADD for alex.
    let extracted = &out["add_infer"]["results"];
    let texts: Vec<(&str, &str)> = extracted
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["event"].as_str().unwrap_or(""),
                r["memory"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            ("ADD", "The user's name is Alex"),
            ("ADD", "The user is a vegetarian"),
            ("ADD", "The user is allergic to nuts"),
        ]
    );
    for r in extracted.as_array().into_iter().flatten() {
        let m = rest_memory(&s, &key, r["id"].as_str().unwrap_or(""));
        assert_eq!(
            (&m["content"], &m["user_id"]),
            (&r["memory"], &json!("alex"))
        );
    }

    // add with infer=False: the message as given, with its scope and metadata.
    let colour_id = out["add_raw"]["results"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(
        out["add_raw"],
        json!({"results": [{"id": colour_id, "event": "ADD", "memory": "Alex's favourite colour is green"}]})
    );
    let colour = rest_memory(&s, &key, &colour_id);
    assert_eq!(
        (
            &colour["user_id"],
            &colour["agent_id"],
            &colour["session_id"],
            &colour["metadata"],
            &colour["memory_type"]
        ),
        (
            &json!("alex"),
            &json!("travel-bot"),
            &json!("trip-1"),
            &json!({"topic": "preferences"}),
            &json!("fact")
        )
    );
    let bob_id = out["add_bob"]["results"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    assert_eq!(
        out["add_bob"],
        json!({"results": [{"id": bob_id, "event": "ADD", "memory": "Bob plays chess on Sundays"}]})
    );
    // mem0's `timestamp` is the memory's occurred_at.
    assert_eq!(
        rest_memory(&s, &key, &bob_id)["occurred_at"],
        json!("2023-11-14T22:13:20.000Z")
    );

    // search with v2 filters: exactly our search under the same filter, in mem0's shape.
    let and = rest_search(
        &s,
        &key,
        json!({"query": "What does Alex like?", "top_k": 3,
               "filters": {"AND": [{"user_id": "alex"}, {"agent_id": "travel-bot"}]}}),
    );
    assert_eq!(and.len(), 1);
    assert_eq!(out["search_and"], json!({ "results": and }));
    let or = rest_search(
        &s,
        &key,
        json!({"query": "chess or colours", "top_k": 10,
               "filters": {"OR": [{"user_id": "bob"}, {"session_id": "trip-1"}]}}),
    );
    assert_eq!(
        ids(&out["search_or"]["results"])
            .into_iter()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([bob_id.clone(), colour_id.clone()])
    );
    assert_eq!(out["search_or"], json!({ "results": or }));

    // get_all: alex's four memories, newest first, as our query lists them.
    let (st, v) = s.post(
        "/v1/memories/query",
        &key,
        json!({"filters": {"user_id": "alex"}, "page_size": 50}),
    );
    assert_eq!(st, 200, "{v}");
    let listed: Vec<Value> = v["data"]["memories"]
        .as_array()
        .into_iter()
        .flatten()
        .map(as_mem0)
        .collect();
    assert_eq!(listed.len(), 4);
    assert_eq!(
        out["get_all"],
        json!({"count": 4, "next": null, "previous": null, "results": listed})
    );
    assert_eq!(
        out["get_all_metadata"],
        json!({"count": 1, "next": null, "previous": null, "results": [as_mem0(&colour)]})
    );

    // get, then update, history.
    assert_eq!(out["get"], as_mem0(&colour));
    let out = python("mem0_user.py", &["change".into(), colour_id.clone()], &env);
    let updated = rest_memory(&s, &key, &colour_id);
    assert_eq!(updated["content"], json!("Alex's favourite colour is blue"));
    assert_eq!(updated["metadata"], json!({"topic": "colours"}));
    assert_eq!(out["update"], as_mem0(&updated));
    let history: Vec<(Value, Value, Value, Value)> = out["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h["event"].clone(),
                h["old_memory"].clone(),
                h["new_memory"].clone(),
                h["memory_id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        history,
        vec![
            (
                json!("ADD"),
                Value::Null,
                json!("Alex's favourite colour is green"),
                json!(colour_id)
            ),
            (
                json!("UPDATE"),
                json!("Alex's favourite colour is green"),
                json!("Alex's favourite colour is blue"),
                json!(colour_id)
            ),
        ]
    );

    // users: every user, agent and run with memories, and how many.
    let users: Vec<(Value, Value, Value)> = out["users"]["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            (
                u["type"].clone(),
                u["name"].clone(),
                u["total_memories"].clone(),
            )
        })
        .collect();
    assert_eq!(
        users,
        vec![
            (json!("user"), json!("alex"), json!(4)),
            (json!("user"), json!("bob"), json!(1)),
            (json!("agent"), json!("travel-bot"), json!(1)),
            (json!("run"), json!("trip-1"), json!(1)),
        ]
    );
    assert_eq!(out["users"]["count"], json!(4));

    // delete, then get: the client's MemoryNotFoundError with our code and message.
    let out = python("mem0_user.py", &["forget".into(), colour_id.clone()], &env);
    assert_eq!(
        out["delete"],
        json!({"message": "Memory deleted successfully!"})
    );
    assert_eq!(
        out["get_deleted"],
        json!({"error": "MemoryNotFoundError", "message": "memory not found",
               "details": {"detail": "memory not found", "code": 4040}})
    );
    assert_eq!(
        out["delete_all"],
        json!({"message": "Memories deleted successfully!"})
    );
    assert_eq!(
        out["delete_users"],
        json!({"message": "Entity deleted successfully."})
    );
    assert_eq!(
        out["users_after"],
        json!({"count": 0, "next": null, "previous": null, "results": []})
    );
    let (st, v) = s.get("/v1/memories", &key);
    assert_eq!((st, &v["data"]["total"]), (200, &json!(0)));

    // Every call is the tenant's audit entry, with its route's action and the transport.
    let (st, v) = s.get("/v1/audit/logs?page_size=100", &key);
    assert_eq!(st, 200, "{v}");
    let got: Vec<(String, Value)> = v["data"]["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .filter(|e| e["metadata"]["transport"] == json!("mem0"))
        .map(|e| {
            (
                e["action"].as_str().unwrap_or("").to_string(),
                e["metadata"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, Value)> = [
        ("memory.extract", "add"),
        ("memory.batch_create", "add"),
        ("memory.batch_create", "add"),
        ("memory.search", "search"),
        ("memory.search", "search"),
        ("memory.query", "get_all"),
        ("memory.query", "get_all"),
        ("memory.read", "get"),
        ("memory.update", "update"),
        ("memory.history", "history"),
        ("memory.query", "users"),
        ("memory.delete", "delete"),
        ("memory.read", "get"),
        ("memory.batch_delete", "delete_all"),
        ("memory.batch_delete", "delete_users"),
        ("memory.query", "users"),
    ]
    .iter()
    .map(|(a, c)| (a.to_string(), json!({"transport": "mem0", "mem0_call": c})))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn another_tenant_a_bad_key_and_a_key_without_the_permission_get_the_clients_errors() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let (st, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Alex lives in Porto", "memory_type": "fact", "user_id": "alex"}),
    );
    assert_eq!(st, 200, "{v}");
    let id = v["data"]["id"].as_str().expect("id").to_string();

    // Another tenant's key sees nothing of it.
    let (other, other_key) = s.tenant_with_key("business");
    let out = calls(
        &s,
        &other_key,
        json!([
            {"method": "get_all", "kwargs": {"filters": {"user_id": "alex"}}},
            {"method": "search", "args": ["where does Alex live"], "kwargs": {"filters": {"user_id": "alex"}}},
            {"method": "get", "args": [id]},
            {"method": "users"},
        ]),
    );
    assert_eq!(out["init"], Value::Null);
    assert_eq!(
        out["results"],
        json!([
            {"ok": {"count": 0, "next": null, "previous": null, "results": []}},
            {"ok": {"results": []}},
            {"error": "MemoryNotFoundError", "message": "memory not found",
             "details": {"detail": "memory not found", "code": 4040}},
            {"ok": {"count": 0, "next": null, "previous": null, "results": []}},
        ])
    );

    // An unknown key: building the client checks it and raises what it raises (ValueError).
    let out = calls(&s, "amk_not-a-key", json!([]));
    assert_eq!(
        out["init"],
        json!({"error": "ValueError", "message": "Error: unknown API key", "details": null})
    );

    // A key without memory.write: the client's AuthenticationError, with our code and message.
    let read_only = s.create_key(&other, &["memory.read"]);
    let out = calls(
        &s,
        &read_only,
        json!([{"method": "add", "args": ["I like tea"], "kwargs": {"user_id": "alex", "infer": false}}]),
    );
    let refusal = "this API key lacks the 'memory.write' permission";
    assert_eq!(
        out["results"],
        json!([{"error": "AuthenticationError", "message": refusal,
                "details": {"detail": refusal, "code": 4030}}])
    );

    // A field this API does not map: the client's ValidationError naming it.
    let out = calls(
        &s,
        &other_key,
        json!([{"method": "get_all", "kwargs": {"filters": {"app_id": "shop"}}}]),
    );
    let refusal = "the filter field filters.app_id is not supported by auditmem's mem0 compatibility API (docs/COMPAT.md)";
    assert_eq!(
        out["results"],
        json!([{"error": "ValidationError", "message": refusal,
                "details": {"detail": refusal, "code": 4000}}])
    );
}

#[test]
fn a_scoped_key_reads_and_deletes_nothing_of_another_user_through_mem0() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let (st, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Bob plays chess", "memory_type": "fact", "user_id": "bob"}),
    );
    assert_eq!(st, 200, "{v}");
    let bob_id = v["data"]["id"].as_str().expect("id").to_string();
    let (st, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(json!({"permissions": ["memory.read", "memory.write"], "scope": {"user_id": "dana"}})),
    );
    assert_eq!(st, 201, "{v}");
    let dana_key = v["data"]["api_key"].as_str().expect("api_key").to_string();

    let out = calls(
        &s,
        &dana_key,
        json!([
            {"method": "get_all", "kwargs": {"filters": {"user_id": "bob"}}},
            {"method": "search", "args": ["chess"], "kwargs": {"filters": {"user_id": "bob"}}},
            {"method": "get", "args": [bob_id]},
            {"method": "history", "args": [bob_id]},
            {"method": "add", "args": ["Bob likes tea"], "kwargs": {"user_id": "bob", "infer": false}},
            {"method": "delete_all", "kwargs": {"user_id": "bob"}},
            {"method": "delete", "args": [bob_id]},
            {"method": "users"},
        ]),
    );
    let not_found = json!({"error": "MemoryNotFoundError", "message": "memory not found",
                           "details": {"detail": "memory not found", "code": 4040}});
    let outside = "this caller is bound to user_id 'dana'; a memory of user_id 'bob' is outside it";
    assert_eq!(
        out["results"],
        json!([
            {"ok": {"count": 0, "next": null, "previous": null, "results": []}},
            {"ok": {"results": []}},
            not_found,
            not_found,
            {"error": "AuthenticationError", "message": outside,
             "details": {"detail": outside, "code": 4030}},
            {"ok": {"message": "Memories deleted successfully!"}},
            not_found,
            {"ok": {"count": 0, "next": null, "previous": null, "results": []}},
        ])
    );
    // Bob's memory is still there.
    assert_eq!(
        rest_memory(&s, &key, &bob_id)["content"],
        json!("Bob plays chess")
    );
}

#[test]
fn rate_limits_and_credits_hold_through_mem0_with_the_clients_exceptions() {
    let s = Server::start_with(&["--rate-limit-per-sec", "0.01", "--rate-limit-burst", "2"]);
    let (tenant, key) = s.tenant_with_key("business");
    let (st, v) = s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"credits": 0})),
    );
    assert_eq!(st, 200, "{v}");
    // The first token: an extraction the tenant's credits do not cover.
    let out = calls(
        &s,
        &key,
        json!([
            {"method": "add", "args": ["I'm Alex and I live in Porto"], "kwargs": {"user_id": "alex"}},
            {"method": "get_all", "kwargs": {"filters": {"user_id": "alex"}}},
            {"method": "get_all", "kwargs": {"filters": {"user_id": "alex"}}},
        ]),
    );
    let results = out["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 3, "{out}");
    // 402 is no status the client names: its base MemoryError, with our code.
    let short = "extraction needs 2 credits; the tenant has 0";
    assert_eq!(
        results[0],
        json!({"error": "MemoryError", "message": short, "details": {"detail": short, "code": 4020}})
    );
    assert_eq!(
        results[1],
        json!({"ok": {"count": 0, "next": null, "previous": null, "results": []}})
    );
    // The bucket is empty: the client's RateLimitError, with the wait it read.
    assert_eq!(results[2]["error"], json!("RateLimitError"), "{out}");
    assert_eq!(results[2]["details"]["code"], json!(4290), "{out}");
    assert!(
        results[2]["retry_after"].as_u64().is_some_and(|n| n >= 1),
        "{out}"
    );
    // Nothing was charged.
    let (_, t) = s.admin(Method::GET, &format!("/admin/v1/tenants/{tenant}"), None);
    assert_eq!(t["data"]["credits"], json!(0.0));
}
