//! How an audit entry looks on the wire, and the per-tenant chain over it.
//!
//! The per-tenant chain hashes the canonical bytes of the list item without `hash`: the JSON
//! object of the entry's interface fields with keys in lexicographic order, compact, times in
//! RFC 3339 UTC with milliseconds. An exported row carries the same fields, so a tenant can
//! recompute its chain from an export without anything else from us.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use crate::event::AuditEntry;

pub const TENANT_CHAIN_DOMAIN: &[u8] = b"auditmem/tenant-chain/v1";

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-22T01:02:03.456Z`.
pub fn format_time(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Lower-case hex of a hash, as lists and exports show it. blake3's table-driven encoder:
/// `hex::encode` builds the string a char at a time, and an export writes hashes on every row.
pub fn hash_hex(h: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*h).to_hex().to_string()
}

/// Truncates to whole milliseconds, the precision the interface shows. The floor of the
/// few times within a millisecond of `i64::MIN` is not representable: they stay `i64::MIN`.
pub fn millis_floor(micros: i64) -> i64 {
    micros.saturating_sub(micros.rem_euclid(1000))
}

/// Canonical bytes of a field map (keys sorted: serde_json's map is ordered by key).
pub fn canonical_bytes(fields: &Map<String, Value>) -> Vec<u8> {
    let mut sorted: Vec<(&String, &Value)> = fields
        .iter()
        .filter(|(k, _)| k.as_str() != "hash")
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    for (i, (k, v)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, &canonical_value(v));
    }
    out.push(b'}');
    out
}

/// Nested objects with sorted keys, so the bytes do not depend on the map implementation.
fn canonical_value(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), canonical_value(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical_value).collect()),
        other => other.clone(),
    }
}

/// `blake3(domain || prev || canonical bytes)`.
pub fn chain_hash_fields(prev: &[u8; 32], fields: &Map<String, Value>) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(TENANT_CHAIN_DOMAIN);
    h.update(prev);
    h.update(&canonical_bytes(fields));
    *h.finalize().as_bytes()
}

/// The chain hash of a stored entry: the same bytes as [`chain_hash_fields`] over the entry as
/// an export row shows it (the service's tests hold the two together), written field by field in
/// key order without building a JSON map, since this runs once per audit event on the appender's
/// path and in replay. It is the chain's format: a change to it breaks every stored chain.
pub fn chain_hash(prev: &[u8; 32], entry: &AuditEntry) -> [u8; 32] {
    chain_hash_canonical(prev, &canonical_entry_bytes(entry))
}

/// The chain hash from an entry's canonical bytes computed beforehand (replay computes them
/// on every core; only the linking is sequential).
pub fn chain_hash_canonical(prev: &[u8; 32], canonical: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(TENANT_CHAIN_DOMAIN);
    h.update(prev);
    h.update(canonical);
    *h.finalize().as_bytes()
}

/// Canonical bytes of an entry's fields, keys in lexicographic order.
pub fn canonical_entry_bytes(e: &AuditEntry) -> Vec<u8> {
    fn field<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, first: bool, key: &str, v: &T) {
        if !first {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, v);
    }
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    field(&mut out, true, "action", &e.action);
    field(
        &mut out,
        false,
        "balance_consumed_usd",
        &e.balance_consumed_usd,
    );
    field(&mut out, false, "created_at", &format_time(e.created_at));
    field(&mut out, false, "credits_consumed", &e.credits_consumed);
    field(&mut out, false, "duration", &e.duration);
    field(&mut out, false, "error_code", &e.error_code);
    field(&mut out, false, "error_msg", &e.error_msg);
    field(&mut out, false, "gateway_id", &e.gateway_id);
    field(&mut out, false, "http_status", &e.http_status);
    field(&mut out, false, "id", &e.id.hyphenated().to_string());
    field(&mut out, false, "ip_address", &e.ip_address);
    field(&mut out, false, "is_cache_hit", &e.is_cache_hit);
    field(&mut out, false, "is_success", &e.is_success);
    match &e.metadata {
        Some(m) => field(&mut out, false, "metadata", &canonical_value(m)),
        None => field(&mut out, false, "metadata", &Value::Null),
    }
    field(&mut out, false, "model_id", &e.model_id);
    field(&mut out, false, "project_id", &e.project_id);
    match &e.tokens {
        // A small map: canonical_value orders its keys.
        Some(t) => field(&mut out, false, "tokens", &canonical_value(&json!(t))),
        None => field(&mut out, false, "tokens", &Value::Null),
    }
    field(&mut out, false, "user_agent", &e.user_agent);
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn millis_floor_rounds_down_and_never_overflows() {
        assert_eq!(millis_floor(1_234_567), 1_234_000);
        assert_eq!(millis_floor(-1), -1000);
        assert_eq!(millis_floor(-1000), -1000);
        assert_eq!(millis_floor(i64::MAX), i64::MAX - 807);
        // i64::MIN's floor is below i64::MIN: it saturates instead of overflowing.
        assert_eq!(millis_floor(i64::MIN), i64::MIN);
        assert_eq!(millis_floor(i64::MIN + 192), i64::MIN);
    }

    fn entry() -> AuditEntry {
        AuditEntry {
            id: Uuid::nil(),
            action: "rag.query".into(),
            model_id: None,
            project_id: None,
            gateway_id: None,
            ip_address: None,
            user_agent: None,
            http_status: 200,
            is_success: true,
            is_cache_hit: false,
            error_code: None,
            error_msg: None,
            duration: Some(12.0),
            credits_consumed: 0.5,
            balance_consumed_usd: 0.0,
            tokens: None,
            metadata: Some(json!({"b": 1, "a": {"z": 1, "y": 2}})),
            created_at: 1_763_773_323_456_789,
        }
    }

    #[test]
    fn time_is_millisecond_rfc3339_utc() {
        assert_eq!(
            format_time(1_763_773_323_456_789),
            "2025-11-22T01:02:03.456Z"
        );
    }

    #[test]
    fn chain_depends_on_prev_and_content() {
        let e = entry();
        let h1 = chain_hash(&[0; 32], &e);
        assert_ne!(h1, chain_hash(&[1; 32], &e));
        let mut e2 = e.clone();
        e2.http_status = 500;
        assert_ne!(h1, chain_hash(&[0; 32], &e2));
    }
}
