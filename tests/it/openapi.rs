//! The OpenAPI document served by the code is the one checked into docs/openapi.json.

use crate::common;

use common::Server;

#[test]
fn served_openapi_matches_the_checked_in_document() {
    let s = Server::start();
    let resp = s
        .raw()
        .get(format!("{}/openapi.json", s.url))
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let served = resp.text().expect("text");
    let doc: serde_json::Value = serde_json::from_str(&served).expect("json");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    for path in [
        "/v1/audit/logs",
        "/v1/audit/logs/export",
        "/v1/memories/search",
        "/admin/v1/tenants",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} is not documented");
    }
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
    let checked_in = std::fs::read_to_string(file).unwrap_or_default();
    assert!(
        served == checked_in,
        "docs/openapi.json is stale: regenerate it with `curl -s http://127.0.0.1:8080/openapi.json > docs/openapi.json`"
    );
}

/// The statuses the document lists for one operation.
fn documented(doc: &serde_json::Value, path: &str, method: &str) -> Vec<String> {
    doc["paths"][path][method]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {path} is not documented"))
        .keys()
        .cloned()
        .collect()
}

/// What the Schemathesis run (tests/schemathesis/run.sh) found the document did not say: each
/// answer the server gives here is one the document now lists.
#[test]
fn the_answers_schemathesis_found_undocumented_are_documented() {
    use common::{assert_error, ADMIN_TOKEN};
    use reqwest::Method;
    use serde_json::json;

    let s = Server::start();
    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None);
    let (_, key) = s.tenant_with_key("business");
    let unknown = "00000000-0000-0000-0000-000000000000";

    // Unknown tenants and keys on the admin API: 404, which was not listed.
    for (method, path, op_path) in [
        (
            Method::GET,
            format!("/admin/v1/tenants/{unknown}"),
            "/admin/v1/tenants/{id}",
        ),
        (
            Method::DELETE,
            format!("/admin/v1/keys/{unknown}"),
            "/admin/v1/keys/{key_id}",
        ),
    ] {
        let resp = s.call(method.clone(), &path, Some(ADMIN_TOKEN), None);
        assert_error(&resp, 404, 4040);
        let listed = documented(&doc, op_path, &method.as_str().to_lowercase());
        assert!(
            listed.contains(&"404".to_string()),
            "{method} {op_path}: {listed:?}"
        );
    }
    let resp = s.call(
        Method::PATCH,
        &format!("/admin/v1/tenants/{unknown}"),
        Some(ADMIN_TOKEN),
        Some(&json!({"credits": 1})),
    );
    assert_error(&resp, 404, 4040);
    let resp = s.call(
        Method::POST,
        &format!("/admin/v1/tenants/{unknown}/keys"),
        Some(ADMIN_TOKEN),
        Some(&json!({"permissions": ["audit.read"]})),
    );
    assert_error(&resp, 404, 4040);
    for (path, method) in [
        ("/admin/v1/tenants/{id}", "patch"),
        ("/admin/v1/tenants/{id}/keys", "post"),
    ] {
        let listed = documented(&doc, path, method);
        assert!(
            listed.contains(&"404".to_string()),
            "{method} {path}: {listed:?}"
        );
    }

    // A body-taking admin operation called without a JSON body: 415, which was not listed (the
    // admin request bodies were not documented at all, so Schemathesis sent none).
    for (method, path, op_path) in [
        (
            Method::POST,
            "/admin/v1/tenants".to_string(),
            "/admin/v1/tenants",
        ),
        (
            Method::PATCH,
            format!("/admin/v1/tenants/{unknown}"),
            "/admin/v1/tenants/{id}",
        ),
        (
            Method::POST,
            format!("/admin/v1/tenants/{unknown}/keys"),
            "/admin/v1/tenants/{id}/keys",
        ),
        (
            Method::POST,
            "/admin/v1/audit/logs".to_string(),
            "/admin/v1/audit/logs",
        ),
    ] {
        let resp = s.call(method.clone(), &path, Some(ADMIN_TOKEN), None);
        assert_error(&resp, 415, 4150);
        let op = &doc["paths"][op_path][method.as_str().to_lowercase()];
        assert!(
            op["requestBody"].is_object(),
            "{method} {op_path} has no body"
        );
        let listed = documented(&doc, op_path, &method.as_str().to_lowercase());
        assert!(
            listed.contains(&"415".to_string()),
            "{method} {op_path}: {listed:?}"
        );
        assert!(
            listed.contains(&"413".to_string()),
            "{method} {op_path}: {listed:?}"
        );
    }

    // The export's body may be left out (the document required one), and a JSON export is
    // downloaded as application/json (the document listed only text/csv).
    let r = s
        .raw()
        .post(format!("{}/v1/audit/logs/export", s.url))
        .bearer_auth(&key)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let created: serde_json::Value = r.json().expect("json");
    assert_eq!(created["data"]["status"], json!("processing"), "{created}");
    assert_eq!(
        doc["paths"]["/v1/audit/logs/export"]["post"]["requestBody"]["required"],
        json!(false)
    );
    let first = created["data"]["export_id"].as_str().expect("export_id");
    s.wait_export_status(&key, first, "completed");
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({"format": "json"}));
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["export_id"].as_str().expect("export_id");
    s.wait_export_status(&key, id, "completed");
    let (status, content_type, _, _) = s.download_export(&key, id);
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    let content = &doc["paths"]["/v1/audit/logs/export/{export_id}/download"]["get"]["responses"]
        ["200"]["content"];
    assert!(content["application/json"].is_object(), "{content}");
    assert!(content["text/csv"].is_object(), "{content}");

    // Links from a created memory to the operations on it, spelled as OpenAPI spells them
    // (utoipa writes `operation_id`, which no reader knows).
    let links = &doc["paths"]["/v1/memories"]["post"]["responses"]["200"]["links"];
    for op in [
        "get_memory",
        "update_memory",
        "delete_memory",
        "memory_history",
    ] {
        assert_eq!(
            links[op],
            json!({"operationId": op, "parameters": {"id": "$response.body#/data/id"}}),
            "{links}"
        );
    }
}

/// The admin API's refusals before any handler: the ingest token on any route but ingestion's
/// is 403 (4030), and a source throttled after failed authentications is 429 (4290) with
/// `Retry-After` on every route. Each operation of the document that answers one lists it, in
/// the error envelope; ingestion, which the ingest token opens, lists no 403.
#[test]
fn the_admin_apis_403_and_429_are_documented_on_every_route_that_answers_them() {
    use common::{assert_error, Launch};
    use reqwest::Method;
    use serde_json::{json, Value};

    const INGEST_TOKEN: &str = "ingest-token-5e1f09a7c3b24d68-gateway";
    let s = Server::launch(
        &[],
        Launch {
            envs: &[("AUDITMEM_INGEST_TOKEN", INGEST_TOKEN)],
            ..Launch::default()
        },
    );
    let (_, doc) = s.call(Method::GET, "/openapi.json", None, None);
    let unknown = "00000000-0000-0000-0000-000000000000";
    let mut admin_ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if !path.starts_with("/admin/") {
            continue;
        }
        for method in item.as_object().expect("path item").keys() {
            let concrete = path.replace("{id}", unknown).replace("{key_id}", unknown);
            admin_ops.push((path.clone(), method.clone(), concrete));
        }
    }
    assert_eq!(admin_ops.len(), 14, "{admin_ops:?}");
    let in_envelope = |response: &Value| {
        response["content"]["application/json"]["schema"]["$ref"]
            == json!("#/components/schemas/ErrorEnvelope")
    };

    for (path, method, concrete) in &admin_ops {
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
        let documented = &doc["paths"][path][method]["responses"]["403"];
        let answer = s.call(m.clone(), concrete, Some(INGEST_TOKEN), None);
        if (method.as_str(), path.as_str()) == ("post", "/admin/v1/audit/logs") {
            // Let in, and refused by the handler for its missing body.
            assert_error(&answer, 415, 4150);
            assert!(documented.is_null(), "{method} {path}: {documented}");
        } else {
            assert_error(&answer, 403, 4030);
            assert!(in_envelope(documented), "{method} {path}: {documented}");
        }
    }

    // Ten wrong tokens a minute from a source, then it is throttled on every route.
    let client = reqwest::blocking::Client::builder()
        .local_address("127.0.0.5".parse::<std::net::IpAddr>().expect("address"))
        .build()
        .expect("client");
    let call = |m: Method, path: &str| {
        let r = client
            .request(m, format!("{}{path}", s.url))
            .bearer_auth("wrong-admin-token")
            .send()
            .expect("send");
        let status = r.status().as_u16();
        let retry = r.headers().contains_key("retry-after");
        let body: Value = r.json().expect("json");
        (status, retry, body)
    };
    for _ in 0..10 {
        let (status, _, body) = call(Method::GET, "/admin/v1/tenants");
        assert_error(&(status, body), 401, 4010);
    }
    for (path, method, concrete) in &admin_ops {
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
        let (status, retry, body) = call(m, concrete);
        assert_error(&(status, body), 429, 4290);
        assert!(retry, "{method} {path}: no Retry-After");
        let documented = &doc["paths"][path][method]["responses"]["429"];
        assert!(in_envelope(documented), "{method} {path}: {documented}");
        assert!(
            documented["headers"]["Retry-After"]["schema"]["type"] == json!("integer"),
            "{method} {path}: {documented}"
        );
    }
}
