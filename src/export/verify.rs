//! `auditmem verify --export FILE --manifest M [--pubkey K]`: checks an export file offline,
//! with nothing but the file, its signed manifest and the service's public key.
//!
//! Against the manifest ([`super::manifest`]): its signature (by the pinned key when one is
//! given), the file's size and blake3, its format, its row count, and its first and last rows
//! (audit id, chain position, hash). Within the file, for exports that carry the tenant chain:
//! each row's `hash` must be `blake3(domain || prev_hash || canonical bytes of the row)`; rows
//! must come in chain order (`chain_index` rising); consecutive positions must link
//! (`prev_hash` = the previous row's `hash`); a skipped position means rows were removed.
//!
//! The chain alone cannot see rows cut from either end, a row removed with the rest
//! renumbered, rows rewritten with the chain recomputed, or a file made up whole: each of
//! those still chains. The manifest names each: rows missing at the start or the end, rows
//! renumbered, a hash mismatch against the manifest, and in every case a file digest that is
//! not the one signed.

use auditmem_projections::audit_view::chain_hash_fields;
use ed25519_dalek::VerifyingKey;
use serde::Serialize;
use serde_json::{Map, Value};

use super::manifest::Manifest;
use crate::log::verify::FailureKind;

#[derive(Debug, Clone, Serialize)]
pub struct RowFailure {
    /// 1-based row number in the file (the header is not a row); none for the file as a whole.
    pub row: Option<usize>,
    pub chain_index: Option<u64>,
    pub kind: FailureKind,
    pub detail: String,
}

/// What was checked against a manifest.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestCheck {
    pub export_id: String,
    pub tenant_id: String,
    /// The key that signed it, and whether the auditor pinned it (`--pubkey`) or the
    /// manifest's own key was trusted.
    pub public_key: String,
    pub key_pinned: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub rows: usize,
    pub valid: usize,
    pub first_chain_index: Option<u64>,
    pub last_chain_index: Option<u64>,
    pub file_bytes: u64,
    pub file_blake3: String,
    /// None with `--chain-only`.
    pub manifest: Option<ManifestCheck>,
    pub failures: Vec<RowFailure>,
}

impl ExportReport {
    pub fn clean(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn render(&self) -> String {
        let mut s = format!(
            "file blake3 {} ({} bytes)\n",
            self.file_blake3, self.file_bytes
        );
        match &self.manifest {
            Some(m) if m.key_pinned => s.push_str(&format!(
                "manifest of export {} (tenant {}), signed by the pinned key {}\n",
                m.export_id, m.tenant_id, m.public_key
            )),
            Some(m) => s.push_str(&format!(
                "manifest of export {} (tenant {}); NOTE: no --pubkey given, so the manifest's own key {} was trusted: anyone can sign a manifest with a key of their own; pin the service's key (auditmem admin pubkey) with --pubkey\n",
                m.export_id, m.tenant_id, m.public_key
            )),
            None => s.push_str(
                "no manifest (--chain-only): rows cut from either end, a row removed with the rest renumbered, rows rewritten with the chain recomputed and a made-up file all pass this check\n",
            ),
        }
        s.push_str(&match (self.first_chain_index, self.last_chain_index) {
            (Some(a), Some(b)) => format!("export holds chain positions {a}..{b}\n"),
            _ if self.rows == 0 => "export holds no rows\n".to_string(),
            _ => format!("export holds {} rows (no chain columns)\n", self.rows),
        });
        let place = |f: &RowFailure| match f.row {
            Some(r) => format!("row {r}"),
            None => "file".to_string(),
        };
        if let Some(f) = self.failures.first() {
            s.push_str(&format!(
                "FIRST FAILURE, {}: {}: {}\n",
                place(f),
                f.kind.describe(),
                f.detail
            ));
            for f in self.failures.iter().skip(1).take(19) {
                s.push_str(&format!(
                    "  also {}: {}: {}\n",
                    place(f),
                    f.kind.describe(),
                    f.detail
                ));
            }
            if self.failures.len() > 20 {
                s.push_str(&format!("  ... {} failures in all\n", self.failures.len()));
            }
        }
        s.push_str(&format!("{}/{} rows valid\n", self.valid, self.rows));
        s.push_str(match (self.clean(), &self.manifest) {
            (true, Some(m)) if m.key_pinned => {
                "OK: the export is complete and exactly as the service wrote it"
            }
            (true, Some(_)) => {
                "OK, BUT UNPINNED: the file matches a manifest signed by the key the manifest names"
            }
            (true, None) => "CHAIN INTACT, NOT PROVEN COMPLETE OR GENUINE (--chain-only)",
            (false, _) => "TAMPERED",
        });
        s
    }
}

fn hash_of(v: Option<&Value>) -> Option<[u8; 32]> {
    hex::decode(v?.as_str()?).ok()?.try_into().ok()
}

/// A row's identity in the chain, read before the chain check takes the row apart.
struct End {
    id: Option<String>,
    index: Option<u64>,
    hash: Option<[u8; 32]>,
}

fn end_of(row: &Map<String, Value>) -> End {
    End {
        id: row.get("id").and_then(Value::as_str).map(str::to_string),
        index: row.get("chain_index").and_then(Value::as_u64),
        hash: hash_of(row.get("hash")),
    }
}

/// Checks an export file's bytes, against `manifest` unless it is `None` (`--chain-only`:
/// the chain alone). Err when the file cannot be checked at all: not an export, or, without a
/// manifest, no chain columns.
pub fn verify_export(
    bytes: &[u8],
    manifest: Option<&Manifest>,
    pinned: Option<&VerifyingKey>,
) -> Result<ExportReport, String> {
    let digest = blake3::hash(bytes).to_hex().to_string();
    let mut failures = Vec::new();
    let file_failure = |kind, detail: String| RowFailure {
        row: None,
        chain_index: None,
        kind,
        detail,
    };
    if let Some(m) = manifest {
        if let Err(why) = m.check_signature(pinned) {
            let detail = if pinned.is_some() && why.contains("different key") {
                format!(
                    "the manifest is signed by {}, not by the key given with --pubkey: refused",
                    m.public_key
                )
            } else {
                format!("the manifest's signature: {why}")
            };
            failures.push(file_failure(FailureKind::BadSignature, detail));
        }
        if m.file_blake3 != digest || m.file_bytes != bytes.len() as u64 {
            failures.push(file_failure(
                FailureKind::DigestMismatch,
                format!(
                    "the file's blake3 is {digest} ({} bytes); the manifest's is {} ({} bytes)",
                    bytes.len(),
                    m.file_blake3,
                    m.file_bytes
                ),
            ));
        }
        let json = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
        let format = match json {
            true if super::rows::is_ocsf(bytes) => "ocsf",
            true => "json",
            false => "csv",
        };
        if m.format != format {
            failures.push(file_failure(
                FailureKind::ManifestMismatch,
                format!(
                    "the file is {format}; the manifest's export is {}",
                    m.format
                ),
            ));
        }
    }
    let guard = manifest.is_none_or(|m| m.formula_guard);
    let rows = super::rows::parse_as(bytes, guard)?;
    let total = rows.len();
    let has_chain = rows.first().is_some_and(|r| r.contains_key("chain_index"));
    let with_chain = manifest.is_none_or(|m| m.with_chain);
    let (first, last) = (rows.first().map(end_of), rows.last().map(end_of));
    let mut report = if with_chain && (has_chain || total == 0) {
        verify_rows(rows)?
    } else if with_chain && manifest.is_some() {
        failures.push(file_failure(
            FailureKind::ManifestMismatch,
            "the manifest's export carries the tenant chain; the file's rows do not".into(),
        ));
        unchained(total)
    } else if with_chain {
        return Err(
            "the rows have no chain_index/prev_hash/hash: only business and custom exports carry the tenant chain; check another export with its --manifest".into(),
        );
    } else {
        unchained(total)
    };
    if let Some(m) = manifest {
        if m.records != total as u64 {
            failures.push(file_failure(
                FailureKind::RowCountMismatch,
                format!(
                    "the file has {total} rows; the manifest states {}",
                    m.records
                ),
            ));
        }
        if m.with_chain {
            failures.extend(check_ends(m, first.as_ref(), last.as_ref(), total));
        }
    }
    // File-level findings first: they say what the file is; the rows' own follow.
    failures.append(&mut report.failures);
    report.failures = failures;
    report.file_bytes = bytes.len() as u64;
    report.file_blake3 = digest;
    report.manifest = manifest.map(|m| ManifestCheck {
        export_id: m.export_id.to_string(),
        tenant_id: m.tenant_id.to_string(),
        public_key: m.public_key.clone(),
        key_pinned: pinned.is_some(),
    });
    Ok(report)
}

fn unchained(rows: usize) -> ExportReport {
    ExportReport {
        rows,
        valid: rows,
        first_chain_index: None,
        last_chain_index: None,
        file_bytes: 0,
        file_blake3: String::new(),
        manifest: None,
        failures: Vec::new(),
    }
}

/// The file's first and last rows against the manifest's: the same entries, at the same
/// chain positions, with the same hashes.
fn check_ends(
    m: &Manifest,
    first: Option<&End>,
    last: Option<&End>,
    rows: usize,
) -> Vec<RowFailure> {
    let mut out = Vec::new();
    let (Some(m_first), Some(m_last)) = (m.first_chain_index, m.last_chain_index) else {
        // A manifest of an export written before manifests pinned the ends: the digest and the
        // count above still hold the file to it.
        return out;
    };
    let (Some(first), Some(last)) = (first, last) else {
        out.push(RowFailure {
            row: None,
            chain_index: None,
            kind: FailureKind::RowsMissingAtEnd,
            detail: format!(
                "the file has no rows; the manifest's run from chain position {m_first} to {m_last}"
            ),
        });
        return out;
    };
    let id = |s: &Option<uuid::Uuid>| s.map(|u| u.to_string());
    let want_hash = |h: &Option<String>| h.as_deref().and_then(|h| hex::decode(h).ok());
    let same_hash =
        |got: &Option<[u8; 32]>, want: &Option<String>| got.map(|g| g.to_vec()) == want_hash(want);
    // The first row.
    let at = |row: usize, index: Option<u64>, kind, detail| RowFailure {
        row: Some(row),
        chain_index: index,
        kind,
        detail,
    };
    let (f_index, m_first_id) = (first.index.unwrap_or(0), id(&m.first_id));
    if first.id.is_some() && first.id == m_first_id {
        if f_index != m_first {
            out.push(at(1, first.index, FailureKind::Renumbered, format!(
                "the manifest's first row {} is at chain position {m_first}; the file has it at {f_index}",
                first.id.as_deref().unwrap_or_default()
            )));
        } else if !same_hash(&first.hash, &m.first_hash) {
            out.push(at(1, first.index, FailureKind::ManifestHashMismatch, format!(
                "the first row's hash is not the manifest's {}: it was rewritten and its hash recomputed",
                m.first_hash.as_deref().unwrap_or("-")
            )));
        }
    } else if f_index > m_first {
        out.push(at(1, first.index, FailureKind::RowsMissingAtStart, format!(
            "the file starts at chain position {f_index}; the manifest's first row {} is at {m_first}: {} rows missing at the start",
            m_first_id.as_deref().unwrap_or("-"),
            f_index - m_first
        )));
    } else {
        out.push(at(1, first.index, FailureKind::ManifestMismatch, format!(
            "the file's first row {} at chain position {f_index} is not the manifest's first row {} at {m_first}",
            first.id.as_deref().unwrap_or("-"),
            m_first_id.as_deref().unwrap_or("-")
        )));
    }
    // The last row.
    let (l_index, m_last_id) = (last.index.unwrap_or(0), id(&m.last_id));
    if last.id.is_some() && last.id == m_last_id {
        if l_index != m_last {
            out.push(at(rows, last.index, FailureKind::Renumbered, format!(
                "the manifest's last row {} is at chain position {m_last}; the file has it at {l_index}: rows were removed before it (or added) and the rest renumbered",
                last.id.as_deref().unwrap_or_default()
            )));
        } else if !same_hash(&last.hash, &m.last_hash) {
            out.push(at(rows, last.index, FailureKind::ManifestHashMismatch, format!(
                "the last row's hash is not the manifest's {}: rows were rewritten and the chain recomputed",
                m.last_hash.as_deref().unwrap_or("-")
            )));
        }
    } else if l_index < m_last {
        out.push(at(rows, last.index, FailureKind::RowsMissingAtEnd, format!(
            "the file ends at chain position {l_index}; the manifest's last row {} is at {m_last}: {} rows missing at the end",
            m_last_id.as_deref().unwrap_or("-"),
            m_last - l_index
        )));
    } else {
        out.push(at(rows, last.index, FailureKind::ManifestMismatch, format!(
            "the file's last row {} at chain position {l_index} is not the manifest's last row {} at {m_last}",
            last.id.as_deref().unwrap_or("-"),
            m_last_id.as_deref().unwrap_or("-")
        )));
    }
    out
}

/// The chain checks of the rows alone. Err when they carry no chain columns.
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
                row: Some(row),
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
        let mut fail = |kind, detail: String| {
            failures.push(RowFailure {
                row: Some(row),
                chain_index: Some(index),
                kind,
                detail,
            });
            ok = false;
        };
        if chain_hash_fields(&prev_hash, &fields) != hash {
            fail(
                FailureKind::HashMismatch,
                "the row's contents do not match its hash".into(),
            );
        }
        if let Some((p_index, p_hash)) = prev {
            if index <= p_index {
                fail(
                    FailureKind::OutOfOrder,
                    format!("chain position {index} comes after position {p_index}"),
                );
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
                fail(FailureKind::Missing, detail);
            } else if prev_hash != p_hash {
                fail(
                    FailureKind::BrokenLink,
                    "prev_hash is not the previous row's hash".into(),
                );
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
        file_bytes: 0,
        file_blake3: String::new(),
        manifest: None,
        failures,
    })
}
