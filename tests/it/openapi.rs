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
