//! Erasure (`POST /v1/erasures`, `POST /admin/v1/tenants/{id}/erasures`) on the real binary:
//! what it takes and refuses, its receipt checked against the log offline, another user's data
//! left intact, every read of the erased user's data erased (`crate::forget`, as on a cluster:
//! `cluster::erasure`), no copy of an erased secret in any file of the data dir, and keys
//! erased again when a key store from before the erasure is restored. Erasures cut by SIGKILL:
//! `erasure_crash`.

use crate::common;
use crate::forget::{self, erasure_event};

use std::path::Path;

use common::{assert_error, cli, copy_dir, path_str, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// Alice's secrets: in her memories' contents and metadata.
const SECRET: &str = "078-05-1120";
const SECRET_META: &str = "QX-PASSPORT-55192";
/// Bob's, which outlive alice's erasure.
const BOB_SECRET: &str = "locker code 5512";

fn key_with_erase(s: &Server) -> (String, String) {
    let tenant = s.create_tenant("business");
    let key = s.create_key(&tenant, &forget::ALL);
    (tenant, key)
}

fn erase(s: &Server, key: &str, body: Value) -> (u16, Value) {
    s.call(Method::POST, "/v1/erasures", Some(key), Some(&body))
}

/// Creates a memory and gives its id.
fn remember(s: &Server, key: &str, body: Value) -> String {
    let (status, v) = s.post("/v1/memories", key, body);
    assert_eq!(status, 200, "{v}");
    v["data"]["id"].as_str().expect("id").to_string()
}

fn alice_and_bob(s: &Server, key: &str) -> (Vec<String>, String) {
    let alice = vec![
        remember(
            s,
            key,
            json!({"content": format!("The user's social security number is {SECRET}"), "memory_type": "fact", "user_id": "alice"}),
        ),
        remember(
            s,
            key,
            json!({"content": "The user lives in Porto", "memory_type": "fact", "user_id": "alice", "metadata": {"passport": SECRET_META}}),
        ),
    ];
    let bob = remember(
        s,
        key,
        json!({"content": format!("The user's {BOB_SECRET}"), "memory_type": "fact", "user_id": "bob"}),
    );
    (alice, bob)
}

fn message(v: &Value) -> &str {
    v["message"].as_str().expect("message")
}

#[test]
fn an_erasure_names_exactly_one_valid_subject_of_the_tenant() {
    let s = Server::start();
    let (_, key) = key_with_erase(&s);
    let (_, other) = key_with_erase(&s);
    let others = remember(
        &s,
        &other,
        json!({"content": "another tenant's fact", "memory_type": "fact"}),
    );
    let refused = |body: Value, want: &str| {
        let resp = erase(&s, &key, body.clone());
        assert_error(&resp, 400, 4000);
        assert_eq!(message(&resp.1), want, "{body}");
    };
    refused(
        json!({}),
        "give exactly one of user_id, agent_id, session_id or memory_ids",
    );
    refused(
        json!({"user_id": "alice", "session_id": "s1"}),
        "give exactly one of user_id, agent_id, session_id or memory_ids, not user_id and session_id",
    );
    refused(
        json!({"user_id": "   "}),
        "user_id must be 1 to 256 characters",
    );
    refused(
        json!({"agent_id": "a".repeat(257)}),
        "agent_id must be 1 to 256 characters",
    );
    refused(json!({"session_id": 7}), "session_id must be a string");
    refused(
        json!({"memory_ids": []}),
        "memory_ids must name 1 to 1000 memories; it names 0",
    );
    refused(
        json!({"memory_ids": vec!["0190a000-0000-7000-8000-000000000000"; 1001]}),
        "memory_ids must name 1 to 1000 memories; it names 1001",
    );
    refused(
        json!({"memory_ids": "not a list"}),
        "memory_ids must be an array of memory ids",
    );
    refused(
        json!({"memory_ids": ["nope"]}),
        "memory_ids[0]: id 'nope' is not a memory id",
    );
    // Another tenant's memory is answered as one that never existed.
    refused(
        json!({"memory_ids": [others]}),
        "memory_ids[0]: no memory of this tenant has this id",
    );
    refused(
        json!({"memory_ids": ["0190a000-0000-7000-8000-000000000000"]}),
        "memory_ids[0]: no memory of this tenant has this id",
    );
    refused(
        json!({"user": "alice"}),
        "unknown field 'user' (allowed: user_id, agent_id, session_id, memory_ids)",
    );
    let (status, v) = s.call(Method::POST, "/v1/erasures", Some(&key), None);
    assert_error(&(status, v.clone()), 400, 4000);
    assert_eq!(
        message(&v),
        "the request body is empty; a JSON object is required"
    );
    // The other tenant's memory is still there.
    let (status, _) = s.get(&format!("/v1/memories/{others}"), &other);
    assert_eq!(status, 200);
}

#[test]
fn a_key_without_memory_erase_is_refused_and_the_refusal_is_recorded() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let id = remember(
        &s,
        &key,
        json!({"content": "kept", "memory_type": "fact", "user_id": "alice"}),
    );
    let resp = erase(&s, &key, json!({"user_id": "alice"}));
    assert_error(&resp, 403, 4030);
    assert_eq!(
        message(&resp.1),
        "this API key lacks the 'memory.erase' permission"
    );
    let (status, _) = s.get(&format!("/v1/memories/{id}"), &key);
    assert_eq!(status, 200);
    let (_, v) = s.get("/v1/audit/logs?action=memory.erase", &key);
    let logs = v["data"]["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), 1, "{v}");
    assert_eq!(logs[0]["http_status"], json!(403), "{v}");
    assert_eq!(logs[0]["error_code"], json!(4030), "{v}");
    // A key that holds it: issued with the new permission, shown back by name.
    let (status, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(json!({"permissions": ["memory.erase"]})),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["data"]["permissions"], json!(["memory.erase"]), "{v}");
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn erasing_alice_keeps_bob_and_the_receipt_verifies_against_the_log() {
    let mut s = Server::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let (tenant, key) = key_with_erase(&s);
    let (alice, bob) = alice_and_bob(&s, &key);

    let resp = s
        .raw()
        .post(format!("{}/v1/erasures", s.url))
        .bearer_auth(&key)
        .json(&json!({"user_id": "alice"}))
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 201);
    let position: u64 = resp.headers()["x-auditmem-position"]
        .to_str()
        .expect("header")
        .parse()
        .expect("a seq");
    let receipt: Value = resp.json().expect("json");
    let r = &receipt["data"];
    assert_eq!(receipt["success"], json!(true), "{receipt}");
    assert_eq!(r["erased"]["memories"], json!(2), "{receipt}");
    // The event is appended with the request's audit entry, right before it.
    let seq = r["seq"].as_u64().expect("seq");
    assert_eq!(seq, position - 1, "{receipt}");
    let event = erasure_event(&s, seq);
    assert_eq!(
        event.erasure_id.to_string(),
        r["erasure_id"].as_str().expect("id")
    );
    assert_eq!(event.tenant_id.to_string(), tenant);
    let mut want: Vec<String> = alice.clone();
    want.sort();
    let mut named: Vec<String> = event.memory_ids.iter().map(ToString::to_string).collect();
    named.sort();
    assert_eq!(named, want);
    assert_eq!(r["erased"]["keys"], json!(event.key_ids.len()), "{receipt}");
    // The checkpoint covers the event and is the service's; its proof checks offline.
    let cp = &r["checkpoint"];
    assert!(cp["seq"].as_u64().expect("cp seq") >= seq, "{receipt}");
    let (_, pk) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    let pubkey = pk["data"]["public_key"].as_str().expect("hex").to_string();
    assert_eq!(cp["public_key"], json!(pubkey));
    assert_eq!(r["proof"]["seq"], json!(seq));
    assert_eq!(r["proof"]["tree_size"], cp["seq"]);
    let file = write(tmp.path(), "receipt.json", &receipt.to_string());
    let (code, out, err) = cli(
        &["verify", "--proof", path_str(&file), "--pubkey", &pubkey],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        format!(
            "OK: erasure {} is record {seq} (leaf {}) of the tree of size {} signed by auditmem.localhost/log",
            r["erasure_id"].as_str().expect("id"),
            seq - 1,
            cp["seq"]
        )
    );
    // A receipt whose record was changed, or that names another erasure, does not verify.
    let mut forged = receipt.clone();
    forged["data"]["proof"]["erasure_id"] = json!("0190a000-0000-7000-8000-000000000000");
    let file = write(tmp.path(), "forged.json", &forged.to_string());
    let (code, out, _) = cli(
        &["verify", "--proof", path_str(&file), "--pubkey", &pubkey],
        &[],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not erasure 0190a000"), "{out}");

    // Bob is intact: read, listed and searchable.
    let (status, v) = s.get(&format!("/v1/memories/{bob}"), &key);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["content"],
        json!(format!("The user's {BOB_SECRET}"))
    );
    let (_, v) = s.get("/v1/memories?user_id=bob", &key);
    assert_eq!(v["data"]["total"], json!(1), "{v}");
    for mode in ["semantic", "keyword", "hybrid"] {
        let (status, v) = s.post(
            "/v1/memories/search",
            &key,
            json!({"query": "what is the user's locker code?", "search_mode": mode, "filters": {"user_id": "bob"}}),
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["data"]["results"][0]["id"], json!(bob), "{mode}: {v}");
    }

    // Erasing again is harmless: a new erasure, later in the log, with no key left to destroy.
    let (status, again) = erase(&s, &key, json!({"user_id": "alice"}));
    assert_eq!(status, 201, "{again}");
    assert_ne!(again["data"]["erasure_id"], r["erasure_id"]);
    assert!(again["data"]["seq"].as_u64().expect("seq") > seq, "{again}");
    assert_eq!(again["data"]["erased"]["keys"], json!(0), "{again}");
    // The erasures' own entries are the tenant's, not alice's: they stay readable.
    let (_, v) = s.get("/v1/audit/logs?action=memory.erase", &key);
    let logs = v["data"]["logs"].as_array().expect("logs");
    assert_eq!(logs.len(), 2, "{v}");
    for e in logs {
        assert_eq!(e["erased"], json!(null), "{e}");
        assert_eq!(e["ip_address"], json!("127.0.0.1"), "{e}");
    }
    let (status, _) = s.get(&format!("/v1/memories/{bob}"), &key);
    assert_eq!(status, 200);

    // The log still proves itself.
    s.stop();
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn an_admin_erases_a_whole_tenant() {
    let s = Server::start();
    let (tenant, key) = key_with_erase(&s);
    let (_, other_key) = key_with_erase(&s);
    alice_and_bob(&s, &key);
    let kept = remember(
        &s,
        &other_key,
        json!({"content": "The user's locker code is 9000", "memory_type": "fact", "user_id": "alice"}),
    );
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/tenants/0190a000-0000-7000-8000-000000000000/erasures",
        None,
    );
    assert_error(&(status, v), 404, 4040);
    let (status, v) = s.admin(
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/erasures"),
        None,
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["data"]["erased"]["memories"], json!(3), "{v}");
    let seq = v["data"]["seq"].as_u64().expect("seq");
    let event = erasure_event(&s, seq);
    assert_eq!(event.tenant_id.to_string(), tenant);
    assert_eq!(
        event.subjects,
        vec![auditmem_projections::seal::Subject::Tenant(
            tenant.parse().expect("uuid")
        )]
    );
    assert!(v["data"]["checkpoint"]["seq"].as_u64().expect("cp") >= seq);
    let (status, _) = s.get(&format!("/v1/memories/{kept}"), &other_key);
    assert_eq!(status, 200);
}

#[test]
fn erased_data_reads_erased_and_no_file_of_the_data_dir_holds_it() {
    let mut s = Server::start();
    let (_, key) = key_with_erase(&s);
    let (alice, bob) = alice_and_bob(&s, &key);
    // Alice's secret in a search, an audit tag and an export too.
    let (status, v) = s.post(
        "/v1/memories/search",
        &key,
        json!({"query": format!("whose number is {SECRET}?"), "filters": {"user_id": "alice"}}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({"format": "json"}));
    assert_eq!(status, 200, "{v}");
    let export = v["data"]["export_id"].as_str().expect("id").to_string();
    s.wait_export_status(&key, &export, "completed");

    let (status, r) = erase(&s, &key, json!({"user_id": "alice"}));
    assert_eq!(status, 201, "{r}");
    // A fresh data dir holds nothing written before encryption.
    assert_eq!(r["data"]["predate_encryption"], json!(0), "{r}");
    assert_eq!(r["data"]["notice"], json!(null), "{r}");
    assert!(
        r["data"]["erased"]["keys"].as_u64().expect("keys") >= 1,
        "{r}"
    );
    // The entries the receipt counts are those the audit list now shows erased (the
    // erasures' own entries, the tenant's, aside): her two writes and the search at least.
    let shown_erased = common::all_audit_entries(&s, &key)
        .iter()
        .filter(|e| e["erased"] == json!(true) && e["action"] != json!("memory.erase"))
        .count();
    assert!(shown_erased >= 3, "{shown_erased}");
    assert_eq!(
        r["data"]["erased"]["audit_entries"],
        json!(shown_erased),
        "{r}"
    );
    assert_eq!(r["data"]["erased"]["exports"], json!(1), "{r}");
    for id in &alice {
        let resp = s.get(&format!("/v1/memories/{id}"), &key);
        assert_error(&resp, 404, 4040);
    }
    let (_, v) = s.get("/v1/memories?user_id=alice", &key);
    assert_eq!(v["data"]["total"], json!(0), "{v}");
    for mode in ["semantic", "keyword", "hybrid"] {
        let (status, v) = s.post(
            "/v1/memories/search",
            &key,
            json!({"query": format!("social security number {SECRET}"), "search_mode": mode, "top_k": 100, "min_similarity": -1.0}),
        );
        assert_eq!(status, 200, "{v}");
        let text = v.to_string();
        assert!(!text.contains(SECRET), "{mode}: {v}");
        let ids: Vec<&str> = v["data"]["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|m| m["id"].as_str().expect("id"))
            .collect();
        // Only alice's memory held the phrase: a keyword search finds nothing, the others
        // only bob's, the one memory left.
        let want: Vec<&str> = match mode {
            "keyword" => Vec::new(),
            _ => vec![bob.as_str()],
        };
        assert_eq!(ids, want, "{mode}: {v}");
    }
    s.stop();
    let found = forget::scan(&s.data_dir, &[SECRET, "05-1120", SECRET_META, "55192"]).found;
    assert_eq!(found, Vec::new());
    // Bob's secret is still there, sealed: not in any file in the clear either.
    assert_eq!(forget::scan(&s.data_dir, &[BOB_SECRET]).found, Vec::new());
}

#[test]
fn keys_restored_from_a_backup_taken_before_an_erasure_are_destroyed_again_at_start() {
    let mut s = Server::start();
    let (_, key) = key_with_erase(&s);
    let (alice, bob) = alice_and_bob(&s, &key);
    // The backup: the whole data dir, key store and key-encryption key included.
    s.stop();
    let backup = tempfile::tempdir().expect("tmp");
    copy_dir(&s.data_dir, backup.path());
    s.spawn();

    let (status, r) = erase(&s, &key, json!({"user_id": "alice"}));
    assert_eq!(status, 201, "{r}");
    let event = erasure_event(&s, r["data"]["seq"].as_u64().expect("seq"));
    assert!(!event.key_ids.is_empty(), "the erasure destroys no key");
    let key_file = |dir: &Path, id: &auditmem_projections::seal::KeyId| {
        dir.join("keys").join("data").join(id.to_hex())
    };
    for id in &event.key_ids {
        assert!(
            !key_file(&s.data_dir, id).exists(),
            "{id} survived the erasure"
        );
        assert!(
            key_file(backup.path(), id).exists(),
            "{id} is not in the backup"
        );
    }
    s.stop();

    // The key store comes back from the backup; the log keeps the erasure.
    std::fs::remove_dir_all(s.data_dir.join("keys")).expect("rm keys");
    copy_dir(&backup.path().join("keys"), &s.data_dir.join("keys"));
    std::fs::copy(
        backup.path().join("master.key"),
        s.data_dir.join("master.key"),
    )
    .expect("master.key");
    for id in &event.key_ids {
        assert!(key_file(&s.data_dir, id).exists(), "{id} was not restored");
    }
    s.spawn();
    // Destroyed before the first request is served.
    for id in &event.key_ids {
        assert!(
            !key_file(&s.data_dir, id).exists(),
            "{id} is back after start"
        );
    }
    for id in &alice {
        let resp = s.get(&format!("/v1/memories/{id}"), &key);
        assert_error(&resp, 404, 4040);
        let resp = s.get(&format!("/v1/memories/{id}/history"), &key);
        assert!(!resp.1.to_string().contains(SECRET), "{}", resp.1);
    }
    let (status, v) = s.get(&format!("/v1/memories/{bob}"), &key);
    assert_eq!(status, 200, "{v}");
}

#[test]
fn every_read_and_file_of_one_node_forgets_alice_and_keeps_bob() {
    let mut s = Server::start();
    let (_, key, at) = forget::tenant_with_erase(&s);
    let mut c = forget::Client {
        nodes: vec![&s],
        key,
        at,
    };
    let people = [&forget::ALICE, &forget::BOB];
    let planted = forget::plant(&mut c, &people);
    let before = forget::before(&mut c, 0, &planted, &people);
    let case = forget::Case {
        planted: &planted,
        before: &before,
        gone: people[0],
        kept: people[1],
    };
    forget::erase_and_check(&mut c, 0, &case);
    drop(c);
    s.stop();
    forget::assert_node_forgets(&s, people[0], people[1]);
}
