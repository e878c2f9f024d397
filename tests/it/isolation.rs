//! The tenant isolation matrix: tenant B puts data of every kind in the store, then tenant A
//! calls every `/v1` route, with its own ids and with B's real ids, and never reads, changes,
//! deletes, exports, downloads or finds anything of B's; B's data is unchanged afterwards.

use crate::common;

use std::collections::BTreeSet;

use common::{assert_error, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// Every `/v1` route of the route table (src/api/routes.rs).
/// The test checks this list against the routes the gate knows and the served OpenAPI document,
/// so a route added later without a row here fails the test.
const ROUTES: [(&str, &str); 31] = [
    ("GET", "/v1/audit/logs"),
    ("GET", "/v1/audit/logs/stream"),
    ("GET", "/v1/audit/logs/{audit_id}"),
    ("GET", "/v1/audit/logs/{audit_id}/proof"),
    ("GET", "/v1/audit/consistency"),
    ("GET", "/v1/audit/logs/export/{export_id}/proofs"),
    ("POST", "/v1/audit/logs/export"),
    ("GET", "/v1/audit/logs/export/{export_id}"),
    ("GET", "/v1/audit/logs/export/{export_id}/download"),
    ("GET", "/v1/audit/logs/export/{export_id}/manifest"),
    ("POST", "/v1/memories"),
    ("GET", "/v1/memories"),
    ("DELETE", "/v1/memories"),
    ("GET", "/v1/memories/{id}"),
    ("PATCH", "/v1/memories/{id}"),
    ("DELETE", "/v1/memories/{id}"),
    ("GET", "/v1/memories/{id}/history"),
    ("POST", "/v1/memories/search"),
    ("POST", "/v1/memories/extract"),
    ("POST", "/v1/memories/batch"),
    ("PATCH", "/v1/memories/batch"),
    ("POST", "/v1/memories/query"),
    ("POST", "/v1/erasures"),
    ("POST", "/v1/webhooks"),
    ("GET", "/v1/webhooks"),
    ("GET", "/v1/webhooks/{id}"),
    ("PATCH", "/v1/webhooks/{id}"),
    ("DELETE", "/v1/webhooks/{id}"),
    ("POST", "/v1/webhooks/{id}/rotate-secret"),
    ("GET", "/v1/webhooks/{id}/deliveries"),
    (
        "POST",
        "/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver",
    ),
];

const TYPES: [&str; 3] = ["rule", "fact", "context"];

/// In everything B stores and tags, never in anything A sends.
const MARKER: &str = "QUOKKA";

/// A user id both tenants use: scopes are per tenant.
const SHARED_USER: &str = "shared-user";

/// B's extraction input; A sends the very same text (deduplication must not look across).
const EXTRACT_TEXT: &str = "My name is Dana. Please always answer in Spanish.";

fn call(s: &Server, method: Method, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    s.call(method, path, Some(key), body.as_ref())
}

/// A call with an `X-Audit-Metadata` tag, so the tenant's audit entries carry the marker too.
fn tagged(s: &Server, method: Method, path: &str, key: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = s
        .raw()
        .request(method, format!("{}{path}", s.url))
        .bearer_auth(key)
        .header("x-audit-metadata", format!(r#"{{"tag":"{MARKER}"}}"#));
    if let Some(b) = &body {
        req = req.json(b);
    }
    let resp = req.send().expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().expect("json"))
}

/// What B owns, by id, and what identifies B in text.
struct Owned {
    tenant: String,
    memories: Vec<String>,
    deleted_memory: String,
    audit: Vec<String>,
    export: String,
}

impl Owned {
    /// Every string of B's that must never show up in anything A gets back.
    fn needles(&self) -> Vec<String> {
        let mut v = vec![MARKER.to_string(), self.tenant.clone(), self.export.clone()];
        v.extend(self.memories.iter().cloned());
        v.push(self.deleted_memory.clone());
        v.extend(self.audit.iter().cloned());
        v
    }
}

fn assert_nothing_of(owned: &Owned, what: &str, text: &str) {
    for needle in owned.needles() {
        assert!(
            !text.contains(&needle),
            "{what} shows B's {needle:?}: {text}"
        );
    }
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("array")
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_string())
        .collect()
}

/// B's data as B sees it: every memory, every history, the lists, the export and its file.
fn snapshot_of_b(s: &Server, b: &str, owned: &Owned) -> Vec<(String, u16, Value)> {
    let mut out = Vec::new();
    let mut get = |path: String| {
        let (status, v) = s.get(&path, b);
        out.push((path, status, v));
    };
    for id in owned.memories.iter().chain([&owned.deleted_memory]) {
        get(format!("/v1/memories/{id}"));
        get(format!("/v1/memories/{id}/history"));
    }
    for t in TYPES {
        get(format!("/v1/memories?memory_type={t}&page_size=100"));
    }
    for id in &owned.audit {
        get(format!("/v1/audit/logs/{id}"));
    }
    get(format!("/v1/audit/logs/export/{}", owned.export));
    get(format!("/v1/audit/logs/export/{}/manifest", owned.export));
    let (status, _, _, bytes) = s.download_export(b, &owned.export);
    out.push((
        "download".into(),
        status,
        json!(blake3::hash(&bytes).to_hex().to_string()),
    ));
    out
}

#[test]
fn tenant_a_can_reach_nothing_of_tenant_b_on_any_route() {
    // The list is complete: the gate has a policy for each row, and the served document has
    // exactly these /v1 operations.
    for (method, path) in ROUTES {
        let m = axum::http::Method::from_bytes(method.as_bytes()).expect("method");
        assert!(
            auditmem::api::routes::policy(&m, path).is_some(),
            "{method} {path} is not a gated route"
        );
    }
    let s = Server::start();
    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None);
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .filter(|(p, _)| p.starts_with("/v1/"))
        .flat_map(|(p, item)| {
            item.as_object()
                .expect("path item")
                .keys()
                .map(move |m| (m.to_uppercase(), p.clone()))
        })
        .collect();
    let listed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, listed, "the /v1 routes changed: update ROUTES");

    let (a_tenant, a) = s.tenant_with_key("business");
    let (b_tenant, b) = s.tenant_with_key("business");

    // B: memories of every type, one updated, one deleted, extracted ones, a gateway entry,
    // an export; every call tagged with the marker in its audit entry.
    let mut memories = Vec::new();
    for t in TYPES {
        let (status, v) = tagged(
            &s,
            Method::POST,
            "/v1/memories",
            &b,
            Some(
                json!({"content": format!("{MARKER} {t}: the launch code is blue falcon"), "memory_type": t, "importance": 0.9,
                       "user_id": SHARED_USER, "agent_id": SHARED_USER, "metadata": {"tag": MARKER}}),
            ),
        );
        assert_eq!(status, 200, "{v}");
        memories.push(v["data"]["id"].as_str().expect("id").to_string());
    }
    let (status, v) = tagged(
        &s,
        Method::PATCH,
        &format!("/v1/memories/{}", memories[0]),
        &b,
        Some(json!({"content": format!("{MARKER} rule: the launch code is red falcon")})),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = tagged(
        &s,
        Method::POST,
        "/v1/memories",
        &b,
        Some(json!({"content": format!("{MARKER} fact: soon deleted"), "memory_type": "fact"})),
    );
    assert_eq!(status, 200, "{v}");
    let deleted_memory = v["data"]["id"].as_str().expect("id").to_string();
    let (status, v) = tagged(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{deleted_memory}"),
        &b,
        None,
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = tagged(
        &s,
        Method::POST,
        "/v1/memories/extract",
        &b,
        Some(json!({"text": EXTRACT_TEXT})),
    );
    assert_eq!(status, 200, "{v}");
    let extracted = ids(&v["data"]["memories"]);
    assert!(!extracted.is_empty(), "{v}");
    memories.extend(extracted);
    let (status, v) = tagged(
        &s,
        Method::POST,
        "/v1/memories/batch",
        &b,
        Some(json!({"memories": [
            {"content": format!("{MARKER} batch: the vault code is 4417"), "memory_type": "fact"},
            {"content": format!("{MARKER} batch: the vault is in Lyon"), "memory_type": "context"}
        ]})),
    );
    assert_eq!(status, 200, "{v}");
    let batched = ids(&v["data"]["memories"]);
    let (status, v) = tagged(
        &s,
        Method::PATCH,
        "/v1/memories/batch",
        &b,
        Some(json!({"memories": [{"id": batched[1], "importance": 0.95}]})),
    );
    assert_eq!(status, 200, "{v}");
    memories.extend(batched);
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": [{"tenant_id": b_tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"tag": MARKER}}]})),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = tagged(
        &s,
        Method::POST,
        "/v1/audit/logs/export",
        &b,
        Some(json!({"format": "json"})),
    );
    assert_eq!(status, 200, "{v}");
    let export = v["data"]["export_id"]
        .as_str()
        .expect("export_id")
        .to_string();
    s.wait_export_status(&b, &export, "completed");
    let (status, v) = tagged(&s, Method::GET, "/v1/audit/logs?page_size=100", &b, None);
    assert_eq!(status, 200, "{v}");
    let audit = ids(&v["data"]["logs"]);
    assert!(audit.len() >= 9, "{v}");
    let owned = Owned {
        tenant: b_tenant.clone(),
        memories,
        deleted_memory,
        audit,
        export,
    };
    let before = snapshot_of_b(&s, &b, &owned);
    // The needles are real: B itself sees each of them (its tenant id is never shown).
    let seen_by_b: String = before.iter().map(|(_, _, v)| v.to_string()).collect();
    for needle in owned.needles().iter().filter(|n| **n != owned.tenant) {
        assert!(seen_by_b.contains(needle.as_str()), "B never sees {needle}");
    }

    // A has a memory of its own, so its lists and searches are not trivially empty.
    let (status, v) = s.post(
        "/v1/memories",
        &a,
        json!({"content": "the launch code is green falcon", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    let a_memory = v["data"]["id"].as_str().expect("id").to_string();

    // A's key on every route that takes one of B's ids: 404, exactly as for an id that never
    // existed (no existence oracle).
    let never = "01a200de-62df-7099-b415-80dd76ccdb25";
    let by_id: [(Method, &str, Option<Value>); 4] = [
        (Method::GET, "/v1/memories/{}", None),
        (Method::GET, "/v1/memories/{}/history", None),
        (
            Method::PATCH,
            "/v1/memories/{}",
            Some(json!({"content": "overwritten by A", "importance": 0.0})),
        ),
        (Method::DELETE, "/v1/memories/{}", None),
    ];
    for (method, template, body) in &by_id {
        let unknown = call(
            &s,
            method.clone(),
            &template.replace("{}", never),
            &a,
            body.clone(),
        );
        assert_error(&unknown, 404, 4040);
        for id in owned.memories.iter().chain([&owned.deleted_memory]) {
            let resp = call(
                &s,
                method.clone(),
                &template.replace("{}", id),
                &a,
                body.clone(),
            );
            assert_eq!(resp, unknown, "{method} {template} with B's {id}");
        }
    }
    // B's webhook: A's key with `webhooks.manage` lists none and reaches it on no route, with
    // the 404 of a webhook that never existed.
    let b_hooks = s.create_key(&b_tenant, &["webhooks.manage"]);
    let a_hooks = s.create_key(&a_tenant, &["webhooks.manage"]);
    let (status, v) = s.post(
        "/v1/webhooks",
        &b_hooks,
        json!({"url": format!("https://1.1.1.1/{MARKER}"), "event_types": ["memory.expired"]}),
    );
    assert_eq!(status, 201, "{v}");
    let b_hook = v["data"]["id"].as_str().expect("id").to_string();
    let (status, v) = s.get("/v1/webhooks", &a_hooks);
    assert_eq!((status, &v["data"]["webhooks"]), (200, &json!([])), "{v}");
    let hook_routes: [(Method, &str, Option<Value>); 6] = [
        (Method::GET, "/v1/webhooks/{}", None),
        (
            Method::PATCH,
            "/v1/webhooks/{}",
            Some(json!({"enabled": false})),
        ),
        (Method::DELETE, "/v1/webhooks/{}", None),
        (Method::POST, "/v1/webhooks/{}/rotate-secret", None),
        (Method::GET, "/v1/webhooks/{}/deliveries", None),
        (
            Method::POST,
            &format!("/v1/webhooks/{{}}/deliveries/{never}/redeliver"),
            None,
        ),
    ];
    for (method, template, body) in &hook_routes {
        let unknown = call(
            &s,
            method.clone(),
            &template.replace("{}", never),
            &a_hooks,
            body.clone(),
        );
        assert_error(&unknown, 404, 4040);
        let theirs = call(
            &s,
            method.clone(),
            &template.replace("{}", &b_hook),
            &a_hooks,
            body.clone(),
        );
        assert_eq!(theirs, unknown, "{method} {template} with B's webhook");
    }
    let (status, v) = s.get(&format!("/v1/webhooks/{b_hook}"), &b_hooks);
    assert_eq!((status, &v["data"]["enabled"]), (200, &json!(true)), "{v}");
    // A batch update naming B's memory is the same 404 as one naming a memory that never
    // existed. It runs as a third tenant, C: the ids are in the request body, which the
    // caller's own audit entry records, and A's entries are scanned for B's ids below.
    let (_, c) = s.tenant_with_key("business");
    let batch_update = |id: &str| {
        call(
            &s,
            Method::PATCH,
            "/v1/memories/batch",
            &c,
            Some(json!({"memories": [{"id": id, "content": "overwritten by A"}]})),
        )
    };
    let unknown = batch_update(never);
    assert_error(&unknown, 404, 4040);
    for id in owned.memories.iter().chain([&owned.deleted_memory]) {
        assert_eq!(batch_update(id), unknown, "a batch update with B's {id}");
    }
    // So is an erasure naming B's memory (C again: the ids are in its body).
    let c_tenant = s.create_tenant("business");
    let c_eraser = s.create_key(&c_tenant, &["memory.erase"]);
    let erase = |id: &str| {
        call(
            &s,
            Method::POST,
            "/v1/erasures",
            &c_eraser,
            Some(json!({"memory_ids": [id]})),
        )
    };
    let unknown = erase(never);
    assert_error(&unknown, 400, 4000);
    for id in owned.memories.iter().chain([&owned.deleted_memory]) {
        assert_eq!(erase(id), unknown, "an erasure of B's {id}");
    }
    let unknown = s.get(&format!("/v1/audit/logs/{never}"), &a);
    assert_error(&unknown, 404, 4040);
    for id in &owned.audit {
        assert_eq!(s.get(&format!("/v1/audit/logs/{id}"), &a), unknown, "{id}");
    }
    let unknown = s.get(&format!("/v1/audit/logs/{never}/proof"), &a);
    assert_error(&unknown, 404, 4040);
    for id in &owned.audit {
        assert_eq!(
            s.get(&format!("/v1/audit/logs/{id}/proof"), &a),
            unknown,
            "{id}"
        );
    }
    // A consistency proof holds hashes of the whole log only: the same for every tenant.
    let (status, v) = s.get("/v1/audit/consistency?from=1", &b);
    assert_eq!(status, 200, "{v}");
    let to = v["data"]["to"].as_u64().expect("to");
    let q = format!("/v1/audit/consistency?from=1&to={to}");
    assert_eq!(s.get(&q, &a), s.get(&q, &b));
    let proofs = |key: &str, id: &str| s.get(&format!("/v1/audit/logs/export/{id}/proofs"), key);
    let unknown = proofs(&a, never);
    assert_error(&unknown, 404, 4040);
    assert_eq!(proofs(&a, &owned.export), unknown);
    let unknown = s.get(&format!("/v1/audit/logs/export/{never}"), &a);
    assert_error(&unknown, 404, 4040);
    assert_eq!(
        s.get(&format!("/v1/audit/logs/export/{}", owned.export), &a),
        unknown
    );
    let (status, _, _, body) = s.download_export(&a, &owned.export);
    assert_eq!(status, 404);
    let body: Value = serde_json::from_slice(&body).expect("json");
    assert_error(&(status, body.clone()), 404, 4040);
    let never_body: Value = serde_json::from_slice(&s.download_export(&a, never).3).expect("json");
    assert_eq!(body, never_body);
    let manifest =
        |key: &str, id: &str| s.get(&format!("/v1/audit/logs/export/{id}/manifest"), key);
    let unknown = manifest(&a, never);
    assert_error(&unknown, 404, 4040);
    assert_eq!(manifest(&a, &owned.export), unknown);
    // A's audit tail, from the start of the log, holds A's entries alone.
    let (status, last) =
        crate::stream::audited_get(s.raw(), &s.url, "/v1/memories?page_size=1", &a);
    assert_eq!(status, 200);
    let events = crate::stream::events_until(&s.url, &a, "after=0", last, true);
    assert!(events.len() > 10, "{events:?}");
    let mut a_ids: BTreeSet<String> = BTreeSet::new();
    for e in &events {
        a_ids.insert(e.data["id"].as_str().expect("id").to_string());
        assert_nothing_of(&owned, "A's audit stream", &e.data.to_string());
    }
    assert!(owned.audit.iter().all(|id| !a_ids.contains(id)));

    // Lists and searches of A, with every filter, find nothing of B's.
    for query in [
        "",
        "&memory_type=rule",
        "&memory_type=fact",
        "&memory_type=context",
    ] {
        let (status, v) = s.get(&format!("/v1/memories?page_size=100{query}"), &a);
        assert_eq!(status, 200, "{v}");
        assert_nothing_of(&owned, "A's memory list", &v.to_string());
    }
    for memory_type in [None, Some("rule"), Some("fact"), Some("context")] {
        let mut body =
            json!({"query": "what is the launch code?", "top_k": 100, "min_similarity": -1.0});
        if let Some(t) = memory_type {
            body["memory_type"] = json!(t);
        }
        let (status, v) = s.post("/v1/memories/search", &a, body);
        assert_eq!(status, 200, "{v}");
        assert_nothing_of(&owned, "A's search", &v.to_string());
        if memory_type.is_none_or(|t| t == "fact") {
            assert_eq!(ids(&v["data"]["results"]), vec![a_memory.as_str()], "{v}");
        }
    }
    // Scopes and filters are A's alone: the same user id names none of B's memories.
    let (status, v) = s.get(&format!("/v1/memories?user_id={SHARED_USER}"), &a);
    assert_eq!((status, v["data"]["total"].clone()), (200, json!(0)), "{v}");
    for body in [
        json!({}),
        json!({"filters": {"user_id": SHARED_USER}, "include_superseded": true}),
        json!({"filters": {"OR": [{"agent_id": SHARED_USER}, {"importance": {"gte": 0.0}}]}}),
    ] {
        let (status, v) = s.post("/v1/memories/query", &a, body.clone());
        assert_eq!(status, 200, "{v}");
        assert_nothing_of(&owned, "A's memory query", &v.to_string());
        assert!(ids(&v["data"]["memories"]).len() <= 1, "{body}: {v}");
    }
    let (status, v) = s.post(
        "/v1/memories/search",
        &a,
        json!({"query": "what is the launch code?", "min_similarity": -1.0, "filters": {"user_id": SHARED_USER}}),
    );
    assert_eq!(
        (status, v["data"]["results"].clone()),
        (200, json!([])),
        "{v}"
    );
    let (status, v) = call(
        &s,
        Method::DELETE,
        "/v1/memories",
        &a,
        Some(json!({"filters": {"user_id": SHARED_USER}})),
    );
    assert_eq!(
        (status, v["data"].clone()),
        (200, json!({"deleted": 0})),
        "{v}"
    );
    // A erasing the user id B uses too erases A's scope alone.
    let a_eraser = s.create_key(&a_tenant, &["memory.erase"]);
    let (status, v) = call(
        &s,
        Method::POST,
        "/v1/erasures",
        &a_eraser,
        Some(json!({"user_id": SHARED_USER})),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["data"]["erased"]["memories"], json!(0), "{v}");
    assert_nothing_of(&owned, "A's erasure", &v.to_string());
    // Deduplication compares with A's own memories only: B's identical ones are not duplicates.
    let (status, v) = s.post(
        "/v1/memories/extract",
        &a,
        json!({"text": EXTRACT_TEXT, "deduplicate": true}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["skipped"], json!([]), "{v}");
    assert!(!ids(&v["data"]["memories"]).is_empty(), "{v}");
    assert_nothing_of(&owned, "A's extraction", &v.to_string());
    // Batch deletes of A remove A's memories alone.
    for t in TYPES {
        let (status, v) = call(
            &s,
            Method::DELETE,
            "/v1/memories",
            &a,
            Some(json!({"memory_type": t})),
        );
        assert_eq!(status, 200, "{v}");
        assert_nothing_of(&owned, "A's batch delete", &v.to_string());
    }
    let (_, v) = s.get("/v1/memories", &a);
    assert_eq!(v["data"]["total"], json!(0), "{v}");

    // A's audit log, every entry in detail, and A's export hold nothing of B's, though they
    // record every one of A's attempts above.
    let (status, list) = s.get("/v1/audit/logs?page_size=100", &a);
    assert_eq!(status, 200, "{list}");
    assert_nothing_of(&owned, "A's audit list", &list.to_string());
    let a_entries = ids(&list["data"]["logs"]);
    assert!(a_entries.len() > 40, "{list}");
    for id in &a_entries {
        let (status, v) = s.get(&format!("/v1/audit/logs/{id}"), &a);
        assert_eq!(status, 200, "{v}");
        assert_nothing_of(&owned, "A's audit entry", &v.to_string());
    }
    for format in ["csv", "json"] {
        let (status, v) = s.post("/v1/audit/logs/export", &a, json!({"format": format}));
        assert_eq!(status, 200, "{v}");
        assert_nothing_of(&owned, "A's export task", &v.to_string());
        let id = v["data"]["export_id"]
            .as_str()
            .expect("export_id")
            .to_string();
        let st = s.wait_export_status(&a, &id, "completed");
        assert_nothing_of(&owned, "A's export status", &st.to_string());
        let (status, _, _, bytes) = s.download_export(&a, &id);
        assert_eq!(status, 200);
        let text = String::from_utf8(bytes).expect("utf8");
        assert!(
            text.contains(&a_entries[0]),
            "A's export holds A's own entries"
        );
        assert_nothing_of(&owned, &format!("A's {format} export"), &text);
    }

    // B's data is exactly as it was.
    assert_eq!(snapshot_of_b(&s, &b, &owned), before);
    let (_, v) = s.get("/v1/memories?page_size=100", &b);
    assert_eq!(
        v["data"]["total"],
        json!(owned.memories.len()),
        "B lost or gained memories: {v}"
    );
}
