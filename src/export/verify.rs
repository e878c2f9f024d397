//! `auditmem verify --export FILE`: checks a business or custom export against its tenant chain,
//! offline, with nothing but the file.
//!
//! Each row's `hash` must be `blake3(domain || prev_hash || canonical bytes of the row)`; rows
//! must come in chain order (`chain_index` rising); consecutive positions must link
//! (`prev_hash` = the previous row's `hash`); a skipped position means rows were removed.

use auditmem_projections::audit_view::chain_hash_fields;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::log::verify::FailureKind;

#[derive(Debug, Clone, Serialize)]
pub struct RowFailure {
    /// 1-based row number in the file (the header is not a row).
    pub row: usize,
    pub chain_index: Option<u64>,
    pub kind: FailureKind,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub rows: usize,
    pub valid: usize,
    pub first_chain_index: Option<u64>,
    pub last_chain_index: Option<u64>,
    pub failures: Vec<RowFailure>,
}

impl ExportReport {
    pub fn clean(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn render(&self) -> String {
        let mut s = match (self.first_chain_index, self.last_chain_index) {
            (Some(a), Some(b)) => format!("export holds chain positions {a}..{b}\n"),
            _ => "export holds no rows\n".to_string(),
        };
        if let Some(f) = self.failures.first() {
            s.push_str(&format!(
                "FIRST BAD ROW {}: {}: {}\n",
                f.row,
                f.kind.describe(),
                f.detail
            ));
            for f in self.failures.iter().skip(1).take(9) {
                s.push_str(&format!(
                    "  also row {}: {}: {}\n",
                    f.row,
                    f.kind.describe(),
                    f.detail
                ));
            }
        }
        s.push_str(&format!(
            "{}/{} rows valid\n{}",
            self.valid,
            self.rows,
            if self.clean() {
                "OK: the export's chain is intact"
            } else {
                "TAMPERED"
            }
        ));
        s
    }
}

fn hash_of(v: Option<&Value>) -> Option<[u8; 32]> {
    hex::decode(v?.as_str()?).ok()?.try_into().ok()
}

/// Err when the file cannot be checked at all (no chain columns).
pub fn verify_rows(rows: Vec<Map<String, Value>>) -> Result<ExportReport, String> {
    let mut failures = Vec::new();
    let mut valid = 0;
    let mut prev: Option<(u64, [u8; 32])> = None;
    let (mut first, mut last) = (None, None);
    let total = rows.len();
    for (i, mut fields) in rows.into_iter().enumerate() {
        let row = i + 1;
        let hash_v = fields.remove("hash");
        let prev_v = fields.remove("prev_hash");
        let index_v = fields.remove("chain_index");
        if hash_v.is_none() || prev_v.is_none() || index_v.is_none() {
            return Err(format!(
                "row {row} has no chain_index/prev_hash/hash: only business and custom exports carry the tenant chain"
            ));
        }
        let (Some(hash), Some(prev_hash), Some(index)) = (
            hash_of(hash_v.as_ref()),
            hash_of(prev_v.as_ref()),
            index_v.as_ref().and_then(Value::as_u64),
        ) else {
            failures.push(RowFailure {
                row,
                chain_index: None,
                kind: FailureKind::Undecodable,
                detail: "chain fields are malformed".into(),
            });
            prev = None;
            continue;
        };
        first.get_or_insert(index);
        last = Some(index);
        let mut ok = true;
        if chain_hash_fields(&prev_hash, &fields) != hash {
            failures.push(RowFailure {
                row,
                chain_index: Some(index),
                kind: FailureKind::HashMismatch,
                detail: "the row's contents do not match its hash".into(),
            });
            ok = false;
        }
        if let Some((p_index, p_hash)) = prev {
            if index <= p_index {
                failures.push(RowFailure {
                    row,
                    chain_index: Some(index),
                    kind: FailureKind::OutOfOrder,
                    detail: format!("chain position {index} comes after position {p_index}"),
                });
                ok = false;
            } else if index > p_index + 1 {
                let detail = if index == p_index + 2 {
                    format!("chain position {} is missing before this row", p_index + 1)
                } else {
                    format!(
                        "chain positions {}..{} are missing before this row",
                        p_index + 1,
                        index - 1
                    )
                };
                failures.push(RowFailure {
                    row,
                    chain_index: Some(index),
                    kind: FailureKind::Missing,
                    detail,
                });
                ok = false;
            } else if prev_hash != p_hash {
                failures.push(RowFailure {
                    row,
                    chain_index: Some(index),
                    kind: FailureKind::BrokenLink,
                    detail: "prev_hash is not the previous row's hash".into(),
                });
                ok = false;
            }
        }
        if ok {
            valid += 1;
        }
        prev = Some((index, hash));
    }
    Ok(ExportReport {
        rows: total,
        valid,
        first_chain_index: first,
        last_chain_index: last,
        failures,
    })
}
