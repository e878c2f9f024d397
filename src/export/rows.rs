//! The rows of an audit export, as written and as read back by `verify --export`.
//!
//! CSV (RFC 4180, the `csv` crate): one header row, then one row per entry; strings as they
//! are, null as an empty cell, numbers and booleans as JSON literals, nested objects (`tokens`,
//! `metadata`) as JSON text. JSON: an array of row objects. Business and custom exports add
//! `chain_index`, `prev_hash` and `hash`: the entry's place in its tenant's chain.

use serde_json::{Map, Value};

pub const BASE_COLUMNS: [&str; 18] = [
    "id",
    "action",
    "model_id",
    "project_id",
    "gateway_id",
    "ip_address",
    "user_agent",
    "http_status",
    "is_success",
    "is_cache_hit",
    "error_code",
    "error_msg",
    "duration",
    "credits_consumed",
    "balance_consumed_usd",
    "tokens",
    "metadata",
    "created_at",
];

pub const CHAIN_COLUMNS: [&str; 3] = ["chain_index", "prev_hash", "hash"];

/// Columns whose cells are plain strings (every other cell is a JSON literal).
pub const STRING_COLUMNS: [&str; 11] = [
    "id",
    "action",
    "model_id",
    "project_id",
    "gateway_id",
    "ip_address",
    "user_agent",
    "error_msg",
    "created_at",
    "prev_hash",
    "hash",
];

pub fn columns(with_chain: bool) -> Vec<&'static str> {
    let mut c = BASE_COLUMNS.to_vec();
    if with_chain {
        c.extend_from_slice(&CHAIN_COLUMNS);
    }
    c
}

/// One CSV cell of a row value.
pub fn cell(column: &str, v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if STRING_COLUMNS.contains(&column) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads a CSV cell back into the value it was written from.
pub fn uncell(column: &str, s: &str) -> Result<Value, String> {
    if s.is_empty() {
        return Ok(Value::Null);
    }
    if STRING_COLUMNS.contains(&column) {
        return Ok(Value::String(s.to_string()));
    }
    serde_json::from_str(s).map_err(|e| format!("column {column}: {e}"))
}

/// Parses an export file (CSV or JSON, told apart by its first byte) into row maps.
pub fn parse(bytes: &[u8]) -> Result<Vec<Map<String, Value>>, String> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let rows: Vec<Value> =
            serde_json::from_slice(bytes).map_err(|e| format!("not a JSON export: {e}"))?;
        return rows
            .into_iter()
            .enumerate()
            .map(|(i, r)| match r {
                Value::Object(m) => Ok(m),
                _ => Err(format!("row {} is not an object", i + 1)),
            })
            .collect();
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| format!("not a CSV export: {e}"))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut out = Vec::new();
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| format!("row {}: {e}", i + 1))?;
        let mut m = Map::new();
        for (h, v) in headers.iter().zip(rec.iter()) {
            m.insert(
                h.clone(),
                uncell(h, v).map_err(|e| format!("row {}: {e}", i + 1))?,
            );
        }
        out.push(m);
    }
    Ok(out)
}
