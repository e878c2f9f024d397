//! `auditmem replay` drops every projection and rebuilds the same answers from the log.

use crate::common;

use common::{answers, assert_same_answers, copy_dir, now_end_time, replayed_copy, Server};
use reqwest::Method;
use serde_json::json;

#[test]
fn replay_gives_identical_answers() {
    let mut s = Server::start();
    let mut keys = Vec::new();
    let mut ids = Vec::new();
    let past = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339();
    for plan in ["free", "pro", "business"] {
        let (tenant, key) = s.tenant_with_key(plan);
        for i in 0..7 {
            let action = if i % 2 == 0 {
                "gateway.chat"
            } else {
                "rag.query"
            };
            let mut entry = json!({"tenant_id": tenant, "action": action, "http_status": if i == 3 { 500 } else { 200 }, "tokens": {"prompt_tokens": i, "completion_tokens": 1, "total_tokens": i + 1}, "rag_query": ["q"]});
            if i == 5 {
                entry["created_at"] = json!(past);
            }
            let (status, v) = s.admin(
                Method::POST,
                "/admin/v1/audit/logs",
                Some(json!({"entries": [entry]})),
            );
            assert_eq!(status, 200, "{v}");
            ids.push(v["data"]["ids"][0].as_str().expect("id").to_string());
        }
        assert_eq!(s.get("/v1/audit/logs?page=0", &key).0, 400);
        assert_eq!(s.get("/v1/audit/logs", &key).0, 200);
        keys.push(key);
    }
    let revoked_tenant = s.create_tenant("basic");
    let (_, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{revoked_tenant}/keys"),
        Some(json!({"permissions": ["audit.read"]})),
    );
    s.admin(
        Method::DELETE,
        &format!("/admin/v1/keys/{}", v["data"]["id"].as_str().expect("id")),
        None,
    );
    s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{revoked_tenant}"),
        Some(json!({"plan": "custom", "credits": 5})),
    );
    let end = now_end_time();
    s.stop();

    let tmp = tempfile::tempdir().expect("tempdir");
    let (plain, replayed) = (tmp.path().join("plain"), tmp.path().join("replayed"));
    copy_dir(&s.data_dir, &plain);
    replayed_copy(&s.data_dir, &replayed);

    let a = Server::start_on(&plain);
    let before = answers(&a, &keys, &ids, &[], &end);
    drop(a);
    let b = Server::start_on(&replayed);
    let after = answers(&b, &keys, &ids, &[], &end);
    assert_same_answers(&before, &after);
    // The answers are not vacuous: entries, hashes and details are there.
    let flat = serde_json::to_string(&before).expect("json");
    assert!(
        flat.contains("gateway.chat") && flat.contains("\"rag_query\":[\"q\"]"),
        "{flat}"
    );
}

/// Projection state damaged on disk (every audit-index and memory block overwritten with bytes
/// that do not decode) is detected at start and rebuilt from the log, with a log line saying
/// so; the server then answers exactly as before the damage.
#[test]
fn corrupt_projection_state_is_rebuilt_from_the_log_at_start() {
    let mut s = Server::start_capturing_log(&[]);
    let (tenant, key) = s.tenant_with_key("business");
    let mut memory_ids = Vec::new();
    for (i, ty) in ["rule", "fact", "context"].iter().enumerate() {
        let (status, v) = s.post(
            "/v1/memories",
            &key,
            json!({"content": format!("memory number {i}"), "memory_type": ty}),
        );
        assert_eq!(status, 200, "{v}");
        memory_ids.push(v["data"]["id"].as_str().expect("id").to_string());
    }
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}]})),
    );
    assert_eq!(status, 200, "{v}");
    let audit_ids = vec![v["data"]["ids"][0].as_str().expect("id").to_string()];
    let end = now_end_time();
    let keys = [key];
    s.stop();
    // An undamaged copy answers what the damaged dir must answer once rebuilt.
    let tmp = tempfile::tempdir().expect("tempdir");
    let plain = tmp.path().join("plain");
    copy_dir(&s.data_dir, &plain);

    {
        let db = auditmem::log::open_db(&s.data_dir).expect("open the stopped server's db");
        for name in ["proj_audit", "proj_memories"] {
            let tree = db.open_tree(name).expect("tree");
            // State keys only: the checkpoint (0x00...) stays, so nothing looks merely behind.
            let state: Vec<_> = tree
                .iter()
                .keys()
                .map(|k| k.expect("key"))
                .filter(|k| k.first() != Some(&0))
                .collect();
            assert!(!state.is_empty(), "{name} holds state");
            for k in state {
                tree.insert(k, &b"\xc1 not msgpack"[..]).expect("overwrite");
            }
        }
        db.flush().expect("flush");
    }

    s.spawn();
    let after = answers(&s, &keys, &audit_ids, &memory_ids, &end);
    s.stop();
    let p = Server::start_on(&plain);
    let before = answers(&p, &keys, &audit_ids, &memory_ids, &end);
    assert_same_answers(&before, &after);
    let log =
        std::fs::read_to_string(s.log_file.as_ref().expect("captured log")).expect("read log");
    assert!(
        log.contains("projection state is corrupt: rebuilding every projection from the log"),
        "{log}"
    );
    assert!(log.contains("projections rebuilt from the log"), "{log}");
}
