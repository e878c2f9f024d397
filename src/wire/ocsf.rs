//! An audit entry as an OCSF API Activity event (class 6003, schema [`SCHEMA_VERSION`]): what
//! `?format=ocsf` streams and `format: "ocsf"` exports. docs/OCSF.md has the table.
//!
//! The mapping starts from the entry as the list (or the export) shows it, so an erased
//! entry's personal fields are absent here as they are there. Every field of the entry that
//! has no OCSF attribute of its own is kept, unchanged, under `unmapped`, and the fields that
//! are mapped keep their exact values in the attributes they map to (`metadata.uid`,
//! `metadata.original_time`, `api.operation`, ...), so [`entry_of`] gives the entry back
//! field for field: `verify --export` checks an OCSF export's tenant chain that way.

use serde_json::{json, Map, Value};
use uuid::Uuid;

/// The OCSF schema version the events follow (`metadata.version`).
pub const SCHEMA_VERSION: &str = "1.3.0";
pub const CLASS_UID: u64 = 6003;
pub const CATEGORY_UID: u64 = 6;

/// The entry fields an attribute of the event holds; every other field goes to `unmapped`.
const MAPPED: [&str; 10] = [
    "id",
    "action",
    "ip_address",
    "user_agent",
    "http_status",
    "is_success",
    "error_code",
    "error_msg",
    "created_at",
    "duration",
];

/// The API Activity `activity_id` of an action, with its caption: the verb its last part
/// names (`memory.batch_delete` deletes, `audit.list` reads); 99 (Other) for the rest.
pub fn activity(action: &str) -> (u64, &'static str) {
    let verb = action.rsplit('.').next().unwrap_or(action);
    let has = |words: &[&str]| words.iter().any(|w| verb.contains(w));
    if has(&["delete", "erase"]) {
        (4, "Delete")
    } else if has(&["update"]) {
        (3, "Update")
    } else if has(&["write", "create", "extract"]) || action == "audit.export" {
        (1, "Create")
    } else if has(&[
        "read",
        "list",
        "search",
        "query",
        "history",
        "proof",
        "consistency",
        "status",
        "download",
        "manifest",
        "stream",
    ]) {
        (2, "Read")
    } else {
        (99, "Other")
    }
}

/// `severity_id` and its caption from the HTTP status: a refused authentication or permission
/// is Medium, any other client error Low, a server error Low, the rest Informational.
pub fn severity(status: u64) -> (u64, &'static str) {
    match status {
        401 | 403 => (3, "Medium"),
        400..=599 => (2, "Low"),
        _ => (1, "Informational"),
    }
}

/// The event of `row` (an entry as the list or an export shows it, as a JSON object) of
/// `tenant`, created at `created_at` (microseconds); `position`: its log position, when the
/// event is streamed.
pub fn event(
    row: &Map<String, Value>,
    tenant: Uuid,
    created_at: i64,
    position: Option<u64>,
) -> Value {
    let get = |k: &str| row.get(k).cloned().unwrap_or(Value::Null);
    let action = row.get("action").and_then(Value::as_str).unwrap_or("");
    let status = row.get("http_status").and_then(Value::as_u64).unwrap_or(0);
    let success = row
        .get("is_success")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (activity_id, activity_name) = activity(action);
    let (severity_id, severity_name) = severity(status);
    let mut ev = json!({
        "activity_id": activity_id,
        "activity_name": activity_name,
        "category_uid": CATEGORY_UID,
        "category_name": "Application Activity",
        "class_uid": CLASS_UID,
        "class_name": "API Activity",
        "type_uid": CLASS_UID * 100 + activity_id,
        "type_name": format!("API Activity: {activity_name}"),
        "time": created_at.div_euclid(1000),
        "severity_id": severity_id,
        "severity": severity_name,
        "status_id": if success { 1 } else { 2 },
        "status": if success { "Success" } else { "Failure" },
        "message": format!("{action} {status}"),
        "metadata": {
            "version": SCHEMA_VERSION,
            "uid": get("id"),
            "original_time": get("created_at"),
            "tenant_uid": tenant.to_string(),
            "log_name": "audit",
            "profiles": ["cloud"],
            "product": {
                "name": "auditmem",
                "vendor_name": "auditmem",
                "version": env!("CARGO_PKG_VERSION"),
            },
        },
        "actor": {
            "user": { "uid": tenant.to_string(), "type_id": 99, "type": "Tenant" },
        },
        "api": {
            "operation": action,
            "service": { "name": "auditmem" },
            "request": { "uid": get("id") },
            "response": { "code": status },
        },
        "http_response": { "code": status },
        "cloud": { "provider": "auditmem", "account": { "uid": tenant.to_string() } },
    });
    let Value::Object(m) = &mut ev else {
        return ev;
    };
    if let Some(p) = position {
        m["metadata"]["sequence"] = json!(p);
    }
    if let Some(d) = row.get("duration").and_then(Value::as_f64) {
        m.insert("duration".into(), json!(d.round() as i64));
    }
    if let Some(code) = row.get("error_code").filter(|v| !v.is_null()) {
        m.insert("status_code".into(), json!(code.to_string()));
        m["api"]["response"]["error"] = json!(code.to_string());
    }
    if let Some(msg) = row.get("error_msg").filter(|v| !v.is_null()) {
        m.insert("status_detail".into(), msg.clone());
        m["api"]["response"]["error_message"] = msg.clone();
    }
    // The source endpoint is required: an entry whose address was not recorded, or was
    // erased, names it as unknown rather than leaving the attribute out.
    m.insert(
        "src_endpoint".into(),
        match row.get("ip_address").filter(|v| !v.is_null()) {
            Some(ip) => json!({ "ip": ip }),
            None => json!({ "name": "unknown" }),
        },
    );
    let mut http_request = Map::new();
    if let Some(ua) = row.get("user_agent").filter(|v| !v.is_null()) {
        http_request.insert("user_agent".into(), ua.clone());
    }
    m.insert("http_request".into(), Value::Object(http_request));
    let mut unmapped: Map<String, Value> = row
        .iter()
        .filter(|(k, _)| !MAPPED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // OCSF's duration is whole milliseconds; the entry's exact value stays beside it.
    unmapped.insert("duration".into(), get("duration"));
    unmapped.insert("http_status".into(), get("http_status"));
    unmapped.insert("is_success".into(), get("is_success"));
    unmapped.insert("error_code".into(), get("error_code"));
    m.insert("unmapped".into(), Value::Object(unmapped));
    ev
}

/// The entry an [`event`] was made of, field for field as the list or the export showed it
/// (the fields in the order the event holds them, which a chain check does not depend on).
/// Err names what is missing when `ev` is not such an event.
pub fn entry_of(ev: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    if ev.get("class_uid").and_then(Value::as_u64) != Some(CLASS_UID) {
        return Err("not an OCSF API Activity event (class_uid 6003)".into());
    }
    let path = |p: &[&str]| -> Option<Value> {
        let mut v = ev.get(p[0])?;
        for k in &p[1..] {
            v = v.get(k)?;
        }
        Some(v.clone())
    };
    let need = |p: &[&str]| path(p).ok_or_else(|| format!("the event has no {}", p.join(".")));
    let Some(Value::Object(unmapped)) = ev.get("unmapped") else {
        return Err("the event has no unmapped object".into());
    };
    let mut row = unmapped.clone();
    row.insert("id".into(), need(&["metadata", "uid"])?);
    row.insert("action".into(), need(&["api", "operation"])?);
    row.insert("created_at".into(), need(&["metadata", "original_time"])?);
    row.insert(
        "ip_address".into(),
        path(&["src_endpoint", "ip"]).unwrap_or(Value::Null),
    );
    row.insert(
        "user_agent".into(),
        path(&["http_request", "user_agent"]).unwrap_or(Value::Null),
    );
    row.insert(
        "error_msg".into(),
        path(&["api", "response", "error_message"]).unwrap_or(Value::Null),
    );
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_map_to_their_activity() {
        for (action, id) in [
            ("memory.write", 1),
            ("memory.batch_create", 1),
            ("memory.extract", 1),
            ("audit.export", 1),
            ("memory.read", 2),
            ("audit.list", 2),
            ("audit.stream", 2),
            ("audit.export_download", 2),
            ("memory.update", 3),
            ("memory.batch_update", 3),
            ("memory.delete", 4),
            ("memory.batch_delete", 4),
            ("memory.erase", 4),
            ("gateway.chat", 99),
        ] {
            assert_eq!(activity(action).0, id, "{action}");
        }
    }

    #[test]
    fn an_entry_goes_to_an_event_and_back_unchanged() {
        let row = json!({
            "id": "0190a0a0-0000-7000-8000-000000000001",
            "action": "memory.delete",
            "model_id": null,
            "ip_address": null,
            "user_agent": "curl/8",
            "http_status": 404,
            "is_success": false,
            "is_cache_hit": false,
            "error_code": 4040,
            "error_msg": "memory not found",
            "duration": 1.234,
            "credits_consumed": 0.0,
            "metadata": {"k": "v"},
            "created_at": "2026-01-02T03:04:05.678Z",
            "sealed": true,
            "hash": null,
        });
        let Value::Object(row) = row else {
            unreachable!()
        };
        let tenant = Uuid::from_u128(9);
        let ev = event(&row, tenant, 1_767_323_045_678_000, Some(42));
        assert_eq!(ev["type_uid"], json!(600304));
        assert_eq!(ev["time"], json!(1_767_323_045_678_i64));
        assert_eq!(ev["severity_id"], json!(2));
        assert_eq!(ev["status_id"], json!(2));
        assert_eq!(ev["status_code"], json!("4040"));
        assert_eq!(ev["duration"], json!(1));
        assert_eq!(ev["metadata"]["sequence"], json!(42));
        assert_eq!(ev["src_endpoint"], json!({"name": "unknown"}));
        assert_eq!(ev["unmapped"]["metadata"], json!({"k": "v"}));
        let Value::Object(ev) = ev else {
            unreachable!()
        };
        assert_eq!(entry_of(&ev), Ok(row));
    }
}
