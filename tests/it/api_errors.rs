//! Every error on every route is the one envelope with the registry's status and code.

use crate::common;

use common::{assert_error, Server, ADMIN_TOKEN};
use reqwest::Method;
use serde_json::json;

#[test]
fn router_level_errors_are_enveloped() {
    let s = Server::start();
    assert_error(
        &s.call(Method::GET, "/no/such/route", None, None),
        404,
        4040,
    );
    assert_error(
        &s.call(Method::GET, "/v1/nothing-here", None, None),
        404,
        4040,
    );
    assert_error(&s.call(Method::POST, "/healthz", None, None), 405, 4050);
    let (_, key) = s.tenant_with_key("pro");
    assert_error(
        &s.call(Method::DELETE, "/v1/audit/logs", Some(&key), None),
        405,
        4050,
    );
    assert_error(
        &s.call(Method::PUT, "/admin/v1/tenants", Some(ADMIN_TOKEN), None),
        405,
        4050,
    );
    let (status, v) = s.call(Method::GET, "/healthz", None, None);
    assert_eq!(status, 200);
    assert_eq!(v["success"], json!(true));
    assert_eq!(v["data"]["status"], json!("ok"));
}

#[test]
fn authentication_failures_are_401_and_not_recorded() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    assert_error(
        &s.call(Method::GET, "/v1/audit/logs", None, None),
        401,
        4010,
    );
    assert_error(
        &s.call(
            Method::GET,
            "/v1/audit/logs",
            Some("amk_not-a-real-key"),
            None,
        ),
        401,
        4010,
    );
    let resp = s
        .raw()
        .get(format!("{}/v1/audit/logs", s.url))
        .header("authorization", format!("Basic {key}"))
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(
        resp.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    // None of the refused requests became an entry: the first successful list sees nothing.
    let (status, v) = s.get("/v1/audit/logs", &key);
    assert_eq!(status, 200);
    assert_eq!(v["data"]["total"], json!(0), "{v}");
}

#[test]
fn admin_api_needs_the_token_and_is_absent_without_one() {
    let s = Server::start();
    assert_error(
        &s.call(Method::GET, "/admin/v1/tenants", None, None),
        401,
        4010,
    );
    assert_error(
        &s.call(Method::GET, "/admin/v1/tenants", Some("wrong"), None),
        401,
        4010,
    );
    let (status, _) = s.admin(Method::GET, "/admin/v1/tenants", None);
    assert_eq!(status, 200);

    // A server started without AUDITMEM_ADMIN_TOKEN has no admin API at all.
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(common::bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("d"))
        .arg("--signing-key")
        .arg(tmp.path().join("k"))
        .arg("--checkpoints-file")
        .arg(tmp.path().join("c"))
        .env_remove("AUDITMEM_ADMIN_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("read");
    let url = line
        .trim()
        .trim_start_matches("auditmem listening on ")
        .to_string();
    let resp = reqwest::blocking::Client::new()
        .get(format!("{url}/admin/v1/tenants"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 404);
    let v: serde_json::Value = resp.json().expect("json");
    assert_eq!(v["code"], json!(4040));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn body_errors_are_enveloped() {
    let s = Server::start_with(&["--max-body-bytes", "2048"]);
    let url = format!("{}/admin/v1/tenants", s.url);
    let c = s.raw();
    let send = |ct: Option<&str>, body: String| {
        let mut r = c.post(&url).bearer_auth(ADMIN_TOKEN).body(body);
        if let Some(ct) = ct {
            r = r.header("content-type", ct);
        }
        let resp = r.send().expect("send");
        let status = resp.status().as_u16();
        (status, resp.json::<serde_json::Value>().expect("json"))
    };
    assert_error(
        &send(Some("application/json"), "{not json".into()),
        400,
        4000,
    );
    assert_error(
        &send(Some("text/plain"), r#"{"name":"a","plan":"free"}"#.into()),
        415,
        4150,
    );
    assert_error(
        &send(None, r#"{"name":"a","plan":"free"}"#.into()),
        415,
        4150,
    );
    let big = format!(r#"{{"name":"{}","plan":"free"}}"#, "x".repeat(4096));
    assert_error(&send(Some("application/json"), big), 413, 4130);
    let missing = send(Some("application/json"), r#"{"plan":"free"}"#.into());
    assert_error(&missing, 400, 4000);
    assert!(
        missing.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("name")),
        "{}",
        missing.1
    );
    let bad_plan = send(
        Some("application/json"),
        r#"{"name":"a","plan":"gold"}"#.into(),
    );
    assert_error(&bad_plan, 400, 4000);
    assert!(
        bad_plan.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("plan")),
        "{}",
        bad_plan.1
    );
    assert_error(
        &send(
            Some("application/json"),
            r#"{"name":"a","plan":"free","credits":-1}"#.into(),
        ),
        400,
        4000,
    );
    assert_error(
        &send(
            Some("application/json"),
            r#"{"name":"a","plan":"free","extra":1}"#.into(),
        ),
        400,
        4000,
    );
    assert_error(
        &send(
            Some("application/json"),
            r#"{"name":"   ","plan":"free"}"#.into(),
        ),
        400,
        4000,
    );
}

#[test]
fn admin_tenant_and_key_lifecycle() {
    let s = Server::start();
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/tenants",
        Some(json!({"name": "acme", "plan": "pro"})),
    );
    assert_eq!(status, 201);
    let d = &v["data"];
    assert_eq!(
        (
            d["name"].clone(),
            d["plan"].clone(),
            d["subscription_active"].clone(),
            d["credits"].clone()
        ),
        (json!("acme"), json!("pro"), json!(true), json!(0.0))
    );
    let id = d["id"].as_str().expect("id").to_string();
    assert!(
        d["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 24),
        "{d}"
    );

    let (status, v) = s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{id}"),
        Some(json!({"plan": "business", "credits": 12.5, "subscription_active": false})),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["data"]["plan"].clone(),
            v["data"]["credits"].clone(),
            v["data"]["subscription_active"].clone()
        ),
        (json!("business"), json!(12.5), json!(false))
    );
    assert_error(
        &s.admin(
            Method::PATCH,
            &format!("/admin/v1/tenants/{id}"),
            Some(json!({})),
        ),
        400,
        4000,
    );
    assert_error(
        &s.admin(
            Method::PATCH,
            &format!("/admin/v1/tenants/{id}"),
            Some(json!({"id": "x"})),
        ),
        400,
        4000,
    );
    assert_error(
        &s.admin(
            Method::GET,
            "/admin/v1/tenants/00000000-0000-0000-0000-000000000000",
            None,
        ),
        404,
        4040,
    );
    assert_error(
        &s.admin(Method::GET, "/admin/v1/tenants/nope", None),
        404,
        4040,
    );

    let (status, v) = s.admin(Method::GET, "/admin/v1/tenants", None);
    assert_eq!(status, 200);
    assert_eq!(v["data"]["total"], json!(1));
    assert_eq!(v["data"]["tenants"][0]["id"], json!(id));

    let (status, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{id}/keys"),
        Some(json!({"permissions": ["audit.read", "audit.read"], "name": "ci"})),
    );
    assert_eq!(status, 201, "{v}");
    let key = v["data"]["api_key"].as_str().expect("key").to_string();
    assert!(
        key.len() >= 43,
        "a key carries at least 32 random bytes: {key}"
    );
    assert_eq!(v["data"]["permissions"], json!(["audit.read"]));
    let key_id = v["data"]["id"].as_str().expect("key id").to_string();
    assert_error(
        &s.admin(
            Method::POST,
            &format!("/admin/v1/tenants/{id}/keys"),
            Some(json!({"permissions": ["root"]})),
        ),
        400,
        4000,
    );
    assert_error(
        &s.admin(
            Method::POST,
            &format!("/admin/v1/tenants/{id}/keys"),
            Some(json!({"permissions": []})),
        ),
        400,
        4000,
    );

    let (status, v) = s.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}"), None);
    assert_eq!(status, 200);
    assert_eq!(v["data"]["revoked"], json!(true));
    assert_error(
        &s.admin(
            Method::DELETE,
            "/admin/v1/keys/00000000-0000-0000-0000-000000000000",
            None,
        ),
        404,
        4040,
    );
    // The key itself was never stored: nothing in the raw log contains it.
    let raw = s
        .raw()
        .get(format!("{}/admin/v1/log?from=1", s.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .expect("send")
        .text()
        .expect("text");
    use base64::Engine;
    for line in raw.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("line");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["record"].as_str().expect("record"))
            .expect("b64");
        let needle = &key.as_bytes()[4..];
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "the raw key leaked into the log"
        );
    }
}

#[test]
fn docs_list_every_registry_row() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/API.md"))
        .expect("docs/API.md");
    for row in auditmem::registry::ErrorCode::ALL {
        let needle = format!("| {} | {} |", row.code(), row.status().as_u16());
        assert!(doc.contains(&needle), "docs/API.md lacks the row {needle}");
    }
}

/// Found by the Schemathesis run: serde's derived structs also read a JSON array as their fields
/// in order, so `[null, null]` was accepted as an export request (200, an export started) and an
/// array of a name and a plan created a tenant. Every request body must be a JSON object.
#[test]
fn a_json_array_is_not_a_request_body() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let (_, before) = s.admin(Method::GET, "/admin/v1/tenants", None);
    let send = |path: &str, bearer: &str, body: &str| {
        let r = s
            .raw()
            .post(format!("{}{path}", s.url))
            .bearer_auth(bearer)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .expect("send");
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().expect("json"))
    };
    let message = json!("the request body must be a JSON object");
    for (path, bearer, body) in [
        ("/v1/audit/logs/export", key.as_str(), "[null, null]"),
        (
            "/v1/audit/logs/export",
            key.as_str(),
            " [\"2026-01-01T00:00:00Z\"]",
        ),
        ("/admin/v1/tenants", ADMIN_TOKEN, r#"["acme", "pro"]"#),
        ("/admin/v1/tenants", ADMIN_TOKEN, "null"),
        ("/v1/memories", key.as_str(), r#"["a fact", "fact"]"#),
    ] {
        let resp = send(path, bearer, body);
        assert_error(&resp, 400, 4000);
        assert_eq!(resp.1["message"], message, "{path} {body}");
    }
    // The refused memory write is the tenant's audit entry, its body kept whole inside a marker
    // object (the interface types request_body as an object or null).
    let (status, v) = s.get("/v1/audit/logs?action=memory.write", &key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["total"], json!(1), "{v}");
    let id = v["data"]["logs"][0]["id"].as_str().expect("id");
    let (status, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        d["data"]["request_body"],
        json!({"_non_object": ["a fact", "fact"]}),
        "{d}"
    );
    // Nothing was created: no tenant, and no export (an export would answer 409 below).
    let (_, after) = s.admin(Method::GET, "/admin/v1/tenants", None);
    assert_eq!(after["data"]["total"], before["data"]["total"], "{after}");
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["status"], json!("processing"), "{v}");
    // An object still goes through, and a key request still reports its field errors.
    let tenant = s.create_tenant("free");
    let resp = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(json!({"permissions": "audit.read"})),
    );
    assert_error(&resp, 400, 4000);
    assert!(
        resp.1["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("invalid JSON body: permissions: invalid type")),
        "{}",
        resp.1
    );
}

/// `HEAD` on a `/v1` GET route is that GET without a body: same status and headers, never a
/// 5xx, with a key and without. Every such route of the served document is tried, so a new
/// one is covered without an edit here.
#[test]
fn head_on_every_get_route_is_the_get_without_its_body() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let (status, doc) = s.call(Method::GET, "/openapi.json", None, None);
    assert_eq!(status, 200);
    let mut paths: Vec<String> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .filter(|(path, item)| path.starts_with("/v1/") && item.get("get").is_some())
        .map(|(path, _)| {
            // Every path parameter is an id: a well-formed one that names nothing.
            path.split('/')
                .map(|seg| {
                    if seg.starts_with('{') {
                        "00000000-0000-0000-0000-000000000000"
                    } else {
                        seg
                    }
                })
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 6, "{paths:?}");
    for path in &paths {
        for bearer in [Some(key.as_str()), None] {
            let send = |method: Method| {
                let mut req = s.raw().request(method.clone(), format!("{}{path}", s.url));
                if let Some(b) = bearer {
                    req = req.bearer_auth(b);
                }
                let resp = req.send().expect("request");
                let status = resp.status().as_u16();
                let content_type = resp.headers().get("content-type").cloned();
                // The audit tail's body never ends: its GET is compared by its head alone.
                let body = if method == Method::GET && path.ends_with("/stream") {
                    Default::default()
                } else {
                    resp.bytes().expect("body")
                };
                (status, content_type, body)
            };
            let (get_status, get_type, _) = send(Method::GET);
            let (head_status, head_type, head_body) = send(Method::HEAD);
            let with = if bearer.is_some() { "key" } else { "no key" };
            assert_eq!(head_status, get_status, "HEAD {path} ({with})");
            assert!(head_status < 500, "HEAD {path} ({with}): {head_status}");
            assert_eq!(head_type, get_type, "HEAD {path} ({with})");
            assert!(head_body.is_empty(), "HEAD {path} ({with}) has a body");
        }
    }
}

/// A query parameter a route does not take is refused with 400 in the error envelope, naming it
/// and the parameters the route takes, as an unknown body field is: a filter the route does not
/// have (`?type=fact`, `?status=500`) is never read as "no filter". The documented parameters
/// are taken.
#[test]
fn an_unknown_query_parameter_is_refused_naming_it() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let refused = |name: &str, allowed: &str| {
        (
            400,
            json!({
                "success": false,
                "code": 4000,
                "message": format!("unknown query parameter '{name}' (allowed: {allowed})"),
                "data": null,
            }),
        )
    };
    let memories = "memory_type, page, page_size, user_id, agent_id, session_id, occurred_after, occurred_before, as_of";
    let logs = "start_time, end_time, action, page, page_size, cursor";
    assert_eq!(
        s.get("/v1/memories?type=fact", &key),
        refused("type", memories)
    );
    assert_eq!(
        s.get("/v1/audit/logs?status=500", &key),
        refused("status", logs)
    );
    let (status, listed) = s.get("/v1/audit/logs?page_size=1", &key);
    assert_eq!(status, 200, "{listed}");
    let id = listed["data"]["logs"][0]["id"].as_str().expect("an entry");
    assert_eq!(
        s.get(&format!("/v1/audit/logs/{id}/proof?size=1"), &key),
        refused("size", "tree_size")
    );
    assert_eq!(
        s.get("/v1/audit/consistency?from=0&until=1", &key),
        refused("until", "from, to")
    );
    assert_eq!(
        s.admin(
            Method::GET,
            "/admin/v1/log/consistency?from=0&until=1",
            None
        ),
        refused("until", "from, to")
    );
    assert_eq!(
        s.admin(Method::GET, "/admin/v1/log?since=1", None),
        refused("since", "from")
    );
    // Several: the first in byte order, whatever else is given.
    assert_eq!(
        s.get("/v1/memories?page=1&zeta=1&alpha=2", &key),
        refused("alpha", memories)
    );

    // Every operation of the served document that takes query parameters refuses one it does
    // not document, naming those it does: a route added later is covered without an edit here.
    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None);
    let mut tried = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let query: Vec<&serde_json::Value> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == json!("query"))
                .collect();
            if query.is_empty() {
                continue;
            }
            assert_eq!(method, "get", "{method} {path}");
            let names: Vec<&str> = query.iter().filter_map(|p| p["name"].as_str()).collect();
            let mut given = vec!["x_unknown=1".to_string()];
            for p in &query {
                if p["required"] == json!(true) {
                    assert_eq!(p["name"], json!("from"), "{path}: a new required parameter");
                    given.push("from=0".into());
                }
            }
            let target = format!(
                "{}?{}",
                path.replace("{audit_id}", id)
                    .replace("{id}", "0190a000-0000-7000-8000-000000000000"),
                given.join("&")
            );
            assert!(!target.contains('{'), "{target}: a path parameter to fill");
            let answer = if path.starts_with("/admin/") {
                s.admin(Method::GET, &target, None)
            } else {
                s.get(&target, &key)
            };
            assert_eq!(answer, refused("x_unknown", &names.join(", ")), "{target}");
            tried.push(path.clone());
        }
    }
    assert_eq!(
        tried,
        [
            "/admin/v1/log",
            "/admin/v1/log/consistency",
            "/v1/audit/consistency",
            "/v1/audit/logs",
            "/v1/audit/logs/stream",
            "/v1/audit/logs/{audit_id}/proof",
            "/v1/memories",
            "/v1/memories/{id}",
            "/v1/memories/{id}/history",
        ]
    );

    // The parameters the interface documents are taken.
    let (status, v) = s.get(
        "/v1/audit/logs?start_time=2020-01-01T00:00:00Z&end_time=2999-01-01T00:00:00Z&action=audit.list&page=1&page_size=10",
        &key,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["page_size"], json!(10), "{v}");
    let (status, v) = s.get("/v1/memories?memory_type=fact&page=1&page_size=5", &key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["page_size"], json!(5), "{v}");
}
