//! `occurred_at` on a cluster: set on one node, changed on another, each node reads it at the
//! write's position and filters on it, and a node started empty folds the same from the stream.

use super::harness::{api_node, request, tenant_with_key, NatsCluster};

use reqwest::Method;
use serde_json::json;

#[test]
fn occurred_at_written_on_one_node_is_read_and_filtered_on_every_node() {
    let nats = NatsCluster::start();
    let a = api_node(&nats, &[]);
    let b = api_node(&nats, &[]);
    let (_, key, _) = tenant_with_key(&a, "business");

    let created = request(
        &a,
        Method::POST,
        "/v1/memories",
        &key,
        Some(
            &json!({"content": "went camping at the lake", "memory_type": "context",
                     "occurred_at": "2023-06-20T12:00:00Z"}),
        ),
        None,
    );
    assert_eq!(created.status, 200, "{}", created.body);
    let id = created.body["data"]["id"].as_str().expect("id").to_string();
    let read = request(
        &b,
        Method::GET,
        &format!("/v1/memories/{id}"),
        &key,
        None,
        Some(created.pos()),
    );
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(
        read.body["data"]["occurred_at"],
        json!("2023-06-20T12:00:00.000Z")
    );

    let updated = request(
        &b,
        Method::PATCH,
        &format!("/v1/memories/{id}"),
        &key,
        Some(&json!({"occurred_at": "2023-07-01T08:00:00Z"})),
        Some(created.pos()),
    );
    assert_eq!(updated.status, 200, "{}", updated.body);
    let filter = json!({"filters": {"occurred_at": {"gte": "2023-07-01T00:00:00Z"}}});
    for node in [&a, &b] {
        let page = request(
            node,
            Method::POST,
            "/v1/memories/query",
            &key,
            Some(&filter),
            Some(updated.pos()),
        );
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(page.body["data"]["total"], json!(1), "{}", page.body);
        assert_eq!(
            page.body["data"]["memories"][0]["occurred_at"],
            json!("2023-07-01T08:00:00.000Z")
        );
    }

    // A node that joins later folds the same from the stream.
    let c = api_node(&nats, &[]);
    let late = request(
        &c,
        Method::GET,
        &format!("/v1/memories/{id}/history"),
        &key,
        None,
        Some(updated.pos()),
    );
    assert_eq!(late.status, 200, "{}", late.body);
    let versions = late.body["data"]["versions"].as_array().expect("versions");
    assert_eq!(
        versions[0]["occurred_at"],
        json!("2023-06-20T12:00:00.000Z")
    );
    assert_eq!(
        versions[1]["occurred_at"],
        json!("2023-07-01T08:00:00.000Z")
    );
}
