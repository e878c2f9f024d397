//! The rows of an audit export, as written and as read back by `verify --export`.
//!
//! CSV (RFC 4180, the `csv` crate): one header row, then one row per entry; strings as they
//! are, null as an empty cell, numbers and booleans as JSON literals, nested objects (`tokens`,
//! `metadata`) as JSON text. JSON: an array of row objects. Business and custom exports add
//! `chain_index`, `prev_hash` and `hash`: the entry's place in its tenant's chain.

use std::borrow::Cow;

use auditmem_projections::audit_index::AuditRef;
use auditmem_projections::audit_view::{format_time, hash_hex};
use auditmem_projections::AuditEntry;
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

/// The CSV writer of exports, header and rows alike (RFC 4180: fields holding a comma, a quote
/// or a line break are quoted, quotes doubled); [`parse`] reads its output back.
pub fn csv_writer<W: std::io::Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new().from_writer(w)
}

/// A number cell as the JSON literal of the value (empty for a non-finite one, which JSON
/// cannot hold and the list shows as null).
fn number(v: f64) -> Cow<'static, str> {
    match serde_json::Number::from_f64(v) {
        Some(n) => Cow::Owned(n.to_string()),
        None => Cow::Borrowed(""),
    }
}

fn text(v: &Option<String>) -> Cow<'_, str> {
    Cow::Borrowed(v.as_deref().unwrap_or(""))
}

fn json_text<T: serde::Serialize>(v: &Option<T>) -> Cow<'static, str> {
    match v {
        // Writing JSON of a serialisable value into a String cannot fail.
        Some(v) => Cow::Owned(serde_json::to_string(v).unwrap_or_default()),
        None => Cow::Borrowed(""),
    }
}

/// The CSV cells of one entry, in [`columns`] order, straight from its fields: what
/// [`uncell`] reads back into the values the list shows.
pub fn csv_cells<'a>(e: &'a AuditEntry, r: &AuditRef, with_chain: bool) -> Vec<Cow<'a, str>> {
    let flag = |b: bool| Cow::Borrowed(if b { "true" } else { "false" });
    let mut cells = Vec::with_capacity(BASE_COLUMNS.len() + CHAIN_COLUMNS.len());
    cells.extend([
        Cow::Owned(e.id.to_string()),
        Cow::Borrowed(e.action.as_str()),
        text(&e.model_id),
        text(&e.project_id),
        text(&e.gateway_id),
        text(&e.ip_address),
        text(&e.user_agent),
        Cow::Owned(e.http_status.to_string()),
        flag(e.is_success),
        flag(e.is_cache_hit),
        e.error_code
            .map(|c| Cow::Owned(c.to_string()))
            .unwrap_or_default(),
        text(&e.error_msg),
        e.duration.map(number).unwrap_or_default(),
        number(e.credits_consumed),
        number(e.balance_consumed_usd),
        json_text(&e.tokens),
        json_text(&e.metadata),
        Cow::Owned(format_time(e.created_at)),
    ]);
    if with_chain {
        cells.extend([
            Cow::Owned(r.chain_index.to_string()),
            Cow::Owned(hash_hex(&r.prev_hash)),
            Cow::Owned(hash_hex(&r.hash)),
        ]);
    }
    cells
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_read_back_as_the_values_the_list_shows() {
        let (mut entry, r) = crate::api::audit::tests::sample();
        for with_chain in [true, false] {
            let mut want = crate::api::audit::entry_json(&entry, &r, true);
            want.insert("chain_index".into(), Value::from(3));
            want.insert("prev_hash".into(), Value::String(hex::encode([9u8; 32])));
            let cols = columns(with_chain);
            let cells = csv_cells(&entry, &r, with_chain);
            assert_eq!(cells.len(), cols.len());
            for (c, cell) in cols.iter().zip(&cells) {
                assert_eq!(uncell(c, cell).as_ref(), Ok(&want[*c]), "column {c}");
            }
        }
        entry.duration = None;
        let cells = csv_cells(&entry, &r, false);
        assert_eq!(cells[12], "");
    }
}
