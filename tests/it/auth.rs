//! Permissions, revocation, subscriptions and tenant isolation on the `/v1` routes.

use crate::common;

use common::{assert_error, Server};
use reqwest::Method;
use serde_json::json;

const ALL: [&str; 4] = ["audit.read", "audit.export", "memory.read", "memory.write"];

#[test]
fn permission_matrix_on_audit_routes() {
    let s = Server::start();
    let tenant = s.create_tenant("business");
    let full = s.create_key(&tenant, &ALL);
    // An entry to read: the full key's own list call.
    let (status, _) = s.get("/v1/audit/logs", &full);
    assert_eq!(status, 200);
    let (_, v) = s.get("/v1/audit/logs", &full);
    let id = v["data"]["logs"][0]["id"].as_str().expect("id").to_string();

    for perm in ALL {
        let key = s.create_key(&tenant, &[perm]);
        let list = s.get("/v1/audit/logs", &key);
        let detail = s.get(&format!("/v1/audit/logs/{id}"), &key);
        if perm == "audit.read" {
            assert_eq!(list.0, 200, "{perm}: {}", list.1);
            assert_eq!(detail.0, 200, "{perm}: {}", detail.1);
            assert_eq!(list.1["code"], json!(1000));
        } else {
            assert_error(&list, 403, 4030);
            assert_error(&detail, 403, 4030);
            assert!(list.1["message"]
                .as_str()
                .is_some_and(|m| m.contains("audit.read")));
        }
    }
    // The refusals were recorded as the tenant's entries, with their status and code.
    let (_, v) = s.get("/v1/audit/logs?page_size=100", &full);
    let refused: Vec<_> = v["data"]["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .filter(|e| e["http_status"] == json!(403))
        .collect();
    assert_eq!(refused.len(), 6, "{v}");
    for e in refused {
        assert_eq!(e["is_success"], json!(false));
        assert_eq!(e["error_code"], json!(4030));
        assert!(e["error_msg"]
            .as_str()
            .is_some_and(|m| m.contains("audit.read")));
    }
}

#[test]
fn revoked_key_is_refused() {
    let s = Server::start();
    let tenant = s.create_tenant("free");
    let (status, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(json!({"permissions": ["audit.read"]})),
    );
    assert_eq!(status, 201);
    let key = v["data"]["api_key"].as_str().expect("key").to_string();
    let key_id = v["data"]["id"].as_str().expect("id").to_string();
    assert_eq!(s.get("/v1/audit/logs", &key).0, 200);
    let (status, _) = s.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}"), None);
    assert_eq!(status, 200);
    let resp = s.get("/v1/audit/logs", &key);
    assert_error(&resp, 401, 4010);
    assert!(resp.1["message"]
        .as_str()
        .is_some_and(|m| m.contains("revoked")));
}

#[test]
fn inactive_subscription_closes_audit_routes_with_2200() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("pro");
    let (status, _) = s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"subscription_active": false})),
    );
    assert_eq!(status, 200);
    let resp = s.get("/v1/audit/logs", &key);
    assert_error(&resp, 403, 2200);
    assert_error(
        &s.get("/v1/audit/logs/01a200de-62df-7099-b415-80dd76ccdb25", &key),
        403,
        2200,
    );
    // Reactivated, the refusals are there in the tenant's own log.
    s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"subscription_active": true})),
    );
    let (_, v) = s.get("/v1/audit/logs", &key);
    assert_eq!(v["data"]["total"], json!(2), "{v}");
    assert_eq!(v["data"]["logs"][0]["error_code"], json!(2200));
}

#[test]
fn tenants_never_see_each_other() {
    let s = Server::start();
    let (_, a) = s.tenant_with_key("business");
    let (_, b) = s.tenant_with_key("business");
    for _ in 0..3 {
        assert_eq!(s.get("/v1/audit/logs", &a).0, 200);
    }
    let (_, va) = s.get("/v1/audit/logs", &a);
    let a_id = va["data"]["logs"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let (_, vb) = s.get("/v1/audit/logs", &b);
    assert_eq!(vb["data"]["total"], json!(0), "{vb}");
    assert_error(&s.get(&format!("/v1/audit/logs/{a_id}"), &b), 404, 4040);
    let (status, own) = s.get(&format!("/v1/audit/logs/{a_id}"), &a);
    assert_eq!(status, 200);
    assert_eq!(own["data"]["id"], json!(a_id));
}
