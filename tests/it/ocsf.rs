//! OCSF output (docs/OCSF.md), checked field by field against the published API Activity class
//! (class_uid 6003) of OCSF 1.3.0 (https://schema.ocsf.io/1.3.0/classes/api_activity; the
//! same class as rendered at docs.tenzir.com/reference/ocsf/1-3-0/classes/api_activity): every
//! required attribute present with its type and, where the class enumerates them, an allowed
//! value. An OCSF export verifies with `verify --export`.

use crate::common::{cli, path_str, Server};

use reqwest::Method;
use serde_json::{json, Value};

/// The OCSF version the events say they follow.
pub const SCHEMA_VERSION: &str = "1.3.0";

/// A check of an attribute's JSON type.
type Typed = fn(&Value) -> bool;

/// The attributes API Activity 1.3.0 requires (the class's own, its base event's and the
/// cloud profile's), each with a check of its type.
const REQUIRED: [(&str, Typed); 11] = [
    ("activity_id", Value::is_u64),
    ("category_uid", Value::is_u64),
    ("class_uid", Value::is_u64),
    ("type_uid", Value::is_u64),
    ("severity_id", Value::is_u64),
    ("time", Value::is_i64),
    ("metadata", Value::is_object),
    ("actor", Value::is_object),
    ("api", Value::is_object),
    ("src_endpoint", Value::is_object),
    ("cloud", Value::is_object),
];

/// Asserts that `ev` is a valid OCSF 1.3.0 API Activity event.
pub fn assert_api_activity(ev: &Value) {
    for (name, typed) in REQUIRED {
        assert!(typed(&ev[name]), "{name} missing or mistyped: {ev}");
    }
    let activity = ev["activity_id"].as_u64().expect("activity_id");
    assert!(
        [0, 1, 2, 3, 4, 99].contains(&activity),
        "activity_id {activity}"
    );
    assert_eq!(ev["category_uid"], json!(6));
    assert_eq!(ev["class_uid"], json!(6003));
    assert_eq!(ev["type_uid"], json!(6003 * 100 + activity));
    let severity = ev["severity_id"].as_u64().expect("severity_id");
    assert!(
        [0, 1, 2, 3, 4, 5, 6, 99].contains(&severity),
        "severity_id {severity}"
    );
    // timestamp_t: milliseconds since the epoch, so after 2020 and before 2100.
    let time = ev["time"].as_i64().expect("time");
    assert!(
        (1_577_836_800_000..4_102_444_800_000).contains(&time),
        "time {time}"
    );
    // metadata: version and product (whose vendor_name is required) are required.
    assert_eq!(ev["metadata"]["version"], json!(SCHEMA_VERSION));
    assert!(ev["metadata"]["product"]["vendor_name"].is_string(), "{ev}");
    assert_eq!(ev["metadata"]["product"]["name"], json!("auditmem"));
    // actor: at least one of its identifying attributes; api: the operation is required.
    let actor = ev["actor"].as_object().expect("actor");
    assert!(
        [
            "user",
            "process",
            "session",
            "app_name",
            "app_uid",
            "invoked_by"
        ]
        .iter()
        .any(|k| actor.contains_key(*k)),
        "{ev}"
    );
    if let Some(user) = actor.get("user") {
        assert!(user["uid"].is_string(), "{ev}");
        let t = user["type_id"].as_u64().expect("type_id");
        assert!([0, 1, 2, 3, 99].contains(&t), "user.type_id {t}");
    }
    assert!(ev["api"]["operation"].is_string(), "{ev}");
    if let Some(req) = ev["api"].get("request") {
        assert!(req["uid"].is_string(), "api.request.uid: {ev}");
    }
    // src_endpoint (network endpoint): at least one of its identifying attributes.
    let src = ev["src_endpoint"].as_object().expect("src_endpoint");
    assert!(
        [
            "ip",
            "hostname",
            "name",
            "uid",
            "domain",
            "instance_uid",
            "interface_uid"
        ]
        .iter()
        .any(|k| src.contains_key(*k)),
        "{ev}"
    );
    assert!(ev["cloud"]["provider"].is_string(), "{ev}");
    // Recommended attributes, checked when present: their enumerations and types.
    if let Some(s) = ev.get("status_id") {
        let s = s.as_u64().expect("status_id");
        assert!([0, 1, 2, 99].contains(&s), "status_id {s}");
    }
    for name in [
        "activity_name",
        "category_name",
        "class_name",
        "type_name",
        "severity",
        "status",
        "message",
    ] {
        if let Some(v) = ev.get(name) {
            assert!(v.is_string(), "{name}: {ev}");
        }
    }
    assert_eq!(ev["class_name"], json!("API Activity"));
    assert_eq!(ev["category_name"], json!("Application Activity"));
    if let Some(code) = ev["http_response"].get("code") {
        assert!(code.is_u64(), "http_response.code: {ev}");
    }
    if let Some(d) = ev.get("duration") {
        assert!(d.is_i64(), "duration: {ev}");
    }
    assert!(ev["unmapped"].is_object(), "{ev}");
}

#[test]
fn an_ocsf_export_holds_valid_api_activity_events_and_verifies() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let entries: Vec<Value> = [
        ("memory.write", 200, Some("203.0.113.7")),
        ("memory.delete", 404, None),
        ("memory.update", 403, Some("2001:db8::1")),
        ("gateway.chat", 500, Some("198.51.100.2")),
    ]
    .iter()
    .map(|(action, status, ip)| {
        json!({"tenant_id": tenant, "action": action, "http_status": status,
               "ip_address": ip, "user_agent": "agent/1", "metadata": {"k": action}})
    })
    .collect();
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({"format": "ocsf"}));
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["export_id"].as_str().expect("id").to_string();
    let task = s.wait_export_status(&key, &id, "completed");
    assert_eq!(task["format"], json!("ocsf"), "{task}");
    let (status, content_type, disposition, file) = s.download_export(&key, &id);
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/json");
    assert!(disposition.ends_with(".ocsf.json\""), "{disposition}");
    let events: Vec<Value> = serde_json::from_slice(&file).expect("a JSON array");
    assert_eq!(events.len(), 4);
    let want = [(1, 1, 1), (4, 2, 2), (3, 3, 2), (99, 2, 2)];
    for (ev, (activity, severity, status_id)) in events.iter().zip(want) {
        assert_api_activity(ev);
        assert_eq!(ev["activity_id"], json!(activity), "{ev}");
        assert_eq!(ev["severity_id"], json!(severity), "{ev}");
        assert_eq!(ev["status_id"], json!(status_id), "{ev}");
        assert_eq!(ev["metadata"]["tenant_uid"], json!(tenant));
        assert_eq!(ev["http_response"]["code"], ev["unmapped"]["http_status"]);
        assert!(ev["unmapped"]["chain_index"].is_u64(), "{ev}");
    }
    assert_eq!(events[0]["src_endpoint"], json!({"ip": "203.0.113.7"}));
    assert_eq!(events[1]["src_endpoint"], json!({"name": "unknown"}));
    assert_eq!(events[0]["http_request"]["user_agent"], json!("agent/1"));
    assert_eq!(
        events[0]["unmapped"]["metadata"],
        json!({"k": "memory.write"})
    );

    // The file verifies against its signed manifest; a changed event does not.
    let manifest = crate::export_verify::download_manifest(&s, &key, &id);
    let m: Value = serde_json::from_slice(&manifest).expect("manifest");
    assert_eq!(m["format"], json!("ocsf"));
    let (_, v) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    let pubkey = v["data"]["public_key"].as_str().expect("key").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let (file_path, manifest_path) = (dir.path().join("e.json"), dir.path().join("m.json"));
    std::fs::write(&file_path, &file).expect("write");
    std::fs::write(&manifest_path, &manifest).expect("write");
    let args = [
        "verify",
        "--export",
        path_str(&file_path),
        "--manifest",
        path_str(&manifest_path),
        "--pubkey",
        &pubkey,
    ];
    let (code, out, err) = cli(&args, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4/4 rows valid"), "{out}");
    let tampered = String::from_utf8(file.clone()).expect("utf-8").replacen(
        "\"operation\":\"memory.delete\"",
        "\"operation\":\"memory.read\"",
        1,
    );
    assert_ne!(tampered.as_bytes(), &file[..]);
    std::fs::write(&file_path, tampered).expect("write");
    let (code, out, _) = cli(&args, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("4/4 rows valid"), "{out}");
    let (code, out, _) = cli(
        &["verify", "--export", path_str(&file_path), "--chain-only"],
        &[],
    );
    assert_eq!(code, 1, "{out}");
}
