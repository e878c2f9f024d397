//! The OpenAPI document served by the code is the one checked into docs/openapi.json.

mod common;

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
