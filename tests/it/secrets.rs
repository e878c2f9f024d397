//! Secrets stay secret: an API key is stored only as its blake3 hash, never in the data dir, the
//! key dir or the server's log, and the `Authorization` header never lands in an audit entry.

use crate::common;

use std::path::Path;

use base64::Engine;
use common::{Server, ADMIN_TOKEN};
use reqwest::Method;
use serde_json::json;

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A call with a raw `Authorization` header value.
fn with_authorization(s: &Server, path: &str, value: &str) -> u16 {
    s.raw()
        .get(format!("{}{path}", s.url))
        .header("authorization", value)
        .send()
        .expect("send")
        .status()
        .as_u16()
}

#[test]
fn api_keys_are_never_stored_logged_or_audited_in_plain() {
    let mut s = Server::start_capturing_log(&[]);
    let tenant = s.create_tenant("business");
    let (status, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(json!({"permissions": ["audit.read", "audit.export", "memory.read", "memory.write"], "name": "secret-test"})),
    );
    assert_eq!(status, 201, "{v}");
    let key = v["data"]["api_key"].as_str().expect("api_key").to_string();
    let key_id = v["data"]["id"].as_str().expect("id").to_string();
    let secret = key.strip_prefix("amk_").expect("amk_ prefix");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(secret)
        .expect("base64url");
    assert_eq!(raw.len(), 32);

    // Calls of every kind with the key, successful and refused.
    let marker = "PANGOLIN memory content";
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": marker, "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        s.post("/v1/memories/search", &key, json!({"query": "pangolin"}))
            .0,
        200
    );
    assert_eq!(s.get("/v1/memories", &key).0, 200);
    assert_eq!(s.get("/v1/memories/not-a-uuid", &key).0, 404);
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({}));
    assert_eq!(status, 200, "{v}");
    let export = v["data"]["export_id"].as_str().expect("export_id");
    s.wait_export_status(&key, export, "completed");
    assert_eq!(s.download_export(&key, export).0, 200);
    // The key under another scheme, with junk after it, and as the admin token: all refused.
    assert_eq!(
        with_authorization(&s, "/v1/memories", &format!("Token {key}")),
        401
    );
    assert_eq!(
        with_authorization(&s, "/v1/memories", &format!("Bearer {key}x")),
        401
    );
    assert_eq!(
        with_authorization(&s, "/admin/v1/tenants", &format!("Bearer {key}")),
        401
    );

    // No audit entry, listed or in detail, holds the header's value or the key.
    let (status, list) = s.get("/v1/audit/logs?page_size=100", &key);
    assert_eq!(status, 200, "{list}");
    let logs = list["data"]["logs"].as_array().expect("logs");
    let entries: Vec<&str> = logs.iter().map(|e| e["id"].as_str().expect("id")).collect();
    // One entry a call the tenant's key made (the 401s name no tenant); the export's status is
    // polled until it completes, once or more, so the count is not fixed.
    let mut actions: Vec<&str> = logs
        .iter()
        .map(|e| e["action"].as_str().expect("action"))
        .collect();
    actions.dedup();
    assert_eq!(
        actions,
        [
            "audit.export_download",
            "audit.export_status",
            "audit.export",
            "memory.read",
            "memory.list",
            "memory.search",
            "memory.write"
        ],
        "{list}"
    );
    let mut texts = vec![list.to_string()];
    for id in &entries {
        let (status, v) = s.get(&format!("/v1/audit/logs/{id}"), &key);
        assert_eq!(status, 200, "{v}");
        // Request headers are not among the recorded fields at all.
        assert_eq!(v["data"]["request_body"].get("authorization"), None);
        texts.push(v.to_string());
    }
    for text in &texts {
        assert!(
            !text.contains(secret),
            "an audit entry holds the key: {text}"
        );
        assert!(
            !text.contains("Bearer"),
            "an audit entry holds the header: {text}"
        );
    }

    // Revoked, the key is refused (and the refusal is logged without it).
    let (status, _) = s.admin(Method::DELETE, &format!("/admin/v1/keys/{key_id}"), None);
    assert_eq!(status, 200);
    assert_eq!(s.get("/v1/memories", &key).0, 401);

    // A clean stop flushes everything; then every byte the server wrote is searched.
    s.stop();
    let mut files = files_under(&s.data_dir);
    files.extend(files_under(&s.keys_dir));
    let log_file = s.log_file.clone().expect("captured log");
    let log = std::fs::read(&log_file).expect("server log");
    files.push((log_file.display().to_string(), log.clone()));
    let hash = blake3::hash(key.as_bytes());
    let mut hash_found = false;
    let mut marker_found = false;
    for (name, bytes) in &files {
        for (what, needle) in [
            ("the key", key.as_bytes()),
            ("the key without its prefix", secret.as_bytes()),
            ("the key's raw bytes", raw.as_slice()),
            ("the admin token", ADMIN_TOKEN.as_bytes()),
        ] {
            assert!(!contains(bytes, needle), "{name} holds {what}");
        }
        hash_found |= contains(bytes, hash.as_bytes());
        marker_found |= contains(bytes, marker.as_bytes());
    }
    // The search can find what is there (the key's hash is stored, and the log did capture
    // the requests), and the memory's text is stored only sealed.
    assert!(
        !marker_found,
        "the memory content is in the clear in the data dir"
    );
    assert!(
        hash_found,
        "the key's blake3 hash is nowhere in the data dir"
    );
    let log = String::from_utf8_lossy(&log);
    assert!(
        log.contains("/v1/memories") && log.contains("revoked"),
        "the captured log misses the requests: {log}"
    );
}
