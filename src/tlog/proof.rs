//! The proofs the service hands out, as JSON documents a file can hold, and their offline check
//! (`auditmem verify --proof`, `--consistency`).
//!
//! An inclusion proof carries the entry's record itself (its stored bytes: the tenant's own
//! entry and the hash of the record before it, nothing of anyone else), so the check starts
//! from the data: the record's blake3 hash is recomputed, its leaf derived from it, the audit
//! path walked to a root, and that root must be the one a checkpoint signed.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use tlog_tiles::Hash;
use uuid::Uuid;

use super::note::{self, NoteCheckError};
use crate::log::record::RecordRef;

/// `GET /v1/audit/logs/{audit_id}/proof`: one entry's record and its inclusion proof.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InclusionProof {
    /// The audit entry the record holds.
    pub audit_id: Uuid,
    /// The record's place in the log (1-based).
    pub seq: u64,
    /// The record's leaf in the Merkle tree: `seq - 1`.
    pub leaf_index: u64,
    /// Base64 of the record as stored: the msgpack array
    /// `[seq, ts_micros, prev hash, hash, event]` (docs/VERIFYING.md).
    pub record: String,
    /// Lowercase hex of the record's blake3 hash; the leaf is `seq (8 bytes BE) || this`.
    pub record_hash: String,
    /// The size of the tree the proof is for.
    pub tree_size: u64,
    /// Base64 of that tree's root hash.
    pub root_hash: String,
    /// The RFC 6962 audit path, leaf to root, each hash base64.
    pub inclusion: Vec<String>,
    /// The signed checkpoint (C2SP tlog-checkpoint in a signed note, with any witness
    /// cosignatures) of `tree_size`; absent when none was signed at that size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

/// `GET /v1/audit/consistency`: the proof that the tree of `from` leaves is a prefix of the
/// tree of `to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConsistencyProof {
    pub from: u64,
    pub to: u64,
    /// Base64 of the root hash of the tree of `from` leaves.
    pub from_root: String,
    /// Base64 of the root hash of the tree of `to` leaves.
    pub to_root: String,
    /// The RFC 6962 consistency proof, each hash base64; empty when `from` is 0 or `to`.
    pub proof: Vec<String>,
    /// The signed checkpoint of `to`, when one was signed at that size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

/// The first line of `GET /v1/audit/logs/export/{export_id}/proofs`: the checkpoint every
/// row's proof leads to. Each line after it is an [`InclusionProof`] without `checkpoint`,
/// one per row of the export file, in the file's order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExportProofsHead {
    pub export_id: Uuid,
    /// The number of rows (proof lines that follow).
    pub rows: u64,
    pub tree_size: u64,
    /// Base64 of the root hash of the tree of `tree_size` leaves.
    pub root_hash: String,
    /// The signed checkpoint of `tree_size`.
    pub checkpoint: String,
}

/// Why a proof failed; each names the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("the proof file is malformed: {0}")]
    Malformed(String),
    #[error("the record does not match its hash: its bytes hash to {computed}, it names {stored}")]
    RecordTampered { computed: String, stored: String },
    #[error("the leaf does not match its record: the proof names record hash {claimed}, the record's is {actual}")]
    LeafMismatch { claimed: String, actual: String },
    #[error("the record is seq {record}, the proof says seq {claimed} (leaf {leaf})")]
    WrongPlace {
        record: u64,
        claimed: u64,
        leaf: u64,
    },
    #[error("the record holds audit entry {found}, not {claimed}")]
    WrongEntry { claimed: String, found: String },
    #[error("the record holds {found}, not erasure {claimed}")]
    WrongErasure { claimed: String, found: String },
    #[error(transparent)]
    Checkpoint(#[from] NoteCheckError),
    #[error("the proof carries no signed checkpoint to check its root against")]
    NoCheckpoint,
    #[error("wrong root: the checkpoint signs tree size {cp_size} with root {cp_root}, the proof is for size {size} with root {root}")]
    CheckpointMismatch {
        cp_size: u64,
        cp_root: String,
        size: u64,
        root: String,
    },
    #[error("wrong root: the inclusion path from leaf {leaf} does not lead to the root of tree size {size}")]
    InclusionFails { leaf: u64, size: u64 },
    #[error("inconsistent checkpoints: the tree of size {from} is not a prefix of the tree of size {to} (the consistency proof fails)")]
    Inconsistent { from: u64, to: u64 },
    #[error("row {row} (audit entry {audit_id}): {why}")]
    Row {
        row: u64,
        audit_id: String,
        why: Box<ProofError>,
    },
    #[error("the proofs are not the export file's rows: {0}")]
    RowsDiffer(String),
}

fn parse_hash(s: &str, what: &str) -> Result<Hash, ProofError> {
    let bytes = B64
        .decode(s.trim())
        .map_err(|e| ProofError::Malformed(format!("{what} is not base64: {e}")))?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|_| ProofError::Malformed(format!("{what} is not 32 bytes")))?;
    Ok(Hash(arr))
}

fn parse_path(p: &[String], what: &str) -> Result<Vec<Hash>, ProofError> {
    p.iter()
        .enumerate()
        .map(|(i, h)| parse_hash(h, &format!("{what} hash {i}")))
        .collect()
}

/// What a checked inclusion proof established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludedIn {
    pub seq: u64,
    pub tree_size: u64,
    pub origin: String,
    pub witnesses: Vec<String>,
}

/// Checks an inclusion proof offline: the record against its hash, the leaf, the path to the
/// root, the root against the checkpoint and the checkpoint against `log_key` (and `quorum`
/// of `witnesses`).
pub fn check_inclusion(
    p: &InclusionProof,
    log_key: &str,
    witnesses: Vec<Box<dyn signed_note::Verifier>>,
    quorum: usize,
) -> Result<IncludedIn, ProofError> {
    let root = parse_hash(&p.root_hash, "root_hash")?;
    let opened = open_checkpoint(
        p.checkpoint.as_deref(),
        p.tree_size,
        &root,
        &p.root_hash,
        log_key,
        witnesses,
        quorum,
    )?;
    let seq = check_record_in(p, &root)?;
    Ok(IncludedIn {
        seq,
        tree_size: p.tree_size,
        origin: opened.origin,
        witnesses: opened.witnesses,
    })
}

/// The checkpoint `cp`, opened with `log_key`, when it signs `size` and `root`.
fn open_checkpoint(
    cp: Option<&str>,
    size: u64,
    root: &Hash,
    root_b64: &str,
    log_key: &str,
    witnesses: Vec<Box<dyn signed_note::Verifier>>,
    quorum: usize,
) -> Result<note::Opened, ProofError> {
    let cp = cp.ok_or(ProofError::NoCheckpoint)?;
    let opened = note::open(cp.as_bytes(), log_key, witnesses, quorum)?;
    if opened.size != size || opened.root != *root {
        return Err(ProofError::CheckpointMismatch {
            cp_size: opened.size,
            cp_root: opened.root.to_string(),
            size,
            root: root_b64.to_string(),
        });
    }
    Ok(opened)
}

/// Checks the record of `p` and its audit path to `root` (whose checkpoint the caller has
/// checked): the record against its hash, the leaf, the entry, the path. The record's seq.
pub fn check_record_in(p: &InclusionProof, root: &Hash) -> Result<u64, ProofError> {
    let leaf = Leaf {
        seq: p.seq,
        leaf_index: p.leaf_index,
        record: &p.record,
        record_hash: &p.record_hash,
        tree_size: p.tree_size,
        inclusion: &p.inclusion,
    };
    check_leaf(
        &leaf,
        root,
        |event| match auditmem_projections::Event::decode_audit_entry(event) {
            Ok(Some((_, entry))) if entry.id == p.audit_id => Ok(()),
            Ok(Some((_, entry))) => Err(ProofError::WrongEntry {
                claimed: p.audit_id.to_string(),
                found: entry.id.to_string(),
            }),
            Ok(None) => Err(ProofError::WrongEntry {
                claimed: p.audit_id.to_string(),
                found: "no audit entry".into(),
            }),
            Err(e) => Err(ProofError::Malformed(format!("record's event: {e}"))),
        },
    )
}

/// An erasure receipt's `proof`: the erasure event's record and its inclusion proof in the
/// tree of the receipt's checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErasureProof {
    /// The erasure the record holds.
    pub erasure_id: Uuid,
    /// The record's place in the log (1-based).
    pub seq: u64,
    /// The record's leaf in the Merkle tree: `seq - 1`.
    pub leaf_index: u64,
    /// Base64 of the record as stored.
    pub record: String,
    /// Lowercase hex of the record's blake3 hash.
    pub record_hash: String,
    pub tree_size: u64,
    /// Base64 of that tree's root hash.
    pub root_hash: String,
    /// The RFC 6962 audit path, leaf to root, each hash base64.
    pub inclusion: Vec<String>,
    /// The signed checkpoint of `tree_size`, as a C2SP signed note.
    pub checkpoint: String,
}

/// Checks an erasure receipt's proof offline, as [`check_inclusion`] checks an entry's: the
/// record must hold the `SubjectsErased` event of `erasure_id`.
pub fn check_erasure_inclusion(
    p: &ErasureProof,
    log_key: &str,
    witnesses: Vec<Box<dyn signed_note::Verifier>>,
    quorum: usize,
) -> Result<IncludedIn, ProofError> {
    let root = parse_hash(&p.root_hash, "root_hash")?;
    let opened = open_checkpoint(
        Some(&p.checkpoint),
        p.tree_size,
        &root,
        &p.root_hash,
        log_key,
        witnesses,
        quorum,
    )?;
    let leaf = Leaf {
        seq: p.seq,
        leaf_index: p.leaf_index,
        record: &p.record,
        record_hash: &p.record_hash,
        tree_size: p.tree_size,
        inclusion: &p.inclusion,
    };
    let seq = check_leaf(&leaf, &root, |event| {
        let wrong = |found: String| ProofError::WrongErasure {
            claimed: p.erasure_id.to_string(),
            found,
        };
        match auditmem_projections::Event::decode(event) {
            Ok(auditmem_projections::Event::SubjectsErased(e)) if e.erasure_id == p.erasure_id => {
                Ok(())
            }
            Ok(auditmem_projections::Event::SubjectsErased(e)) => {
                Err(wrong(format!("erasure {}", e.erasure_id)))
            }
            Ok(other) => Err(wrong(format!("a {} event", other.kind()))),
            Err(e) => Err(ProofError::Malformed(format!("record's event: {e}"))),
        }
    })?;
    Ok(IncludedIn {
        seq,
        tree_size: p.tree_size,
        origin: opened.origin,
        witnesses: opened.witnesses,
    })
}

/// The parts of a proof that place a record in a tree.
struct Leaf<'a> {
    seq: u64,
    leaf_index: u64,
    record: &'a str,
    record_hash: &'a str,
    tree_size: u64,
    inclusion: &'a [String],
}

/// The record against its hash, the leaf, the event (`event_is`), the path to `root`.
fn check_leaf(
    p: &Leaf<'_>,
    root: &Hash,
    event_is: impl FnOnce(&[u8]) -> Result<(), ProofError>,
) -> Result<u64, ProofError> {
    let bytes = B64
        .decode(p.record.trim())
        .map_err(|e| ProofError::Malformed(format!("record is not base64: {e}")))?;
    let r = RecordRef::decode(&bytes)
        .map_err(|e| ProofError::Malformed(format!("record does not decode: {e}")))?;
    let computed = r.computed_hash();
    if r.hash != computed.as_slice() {
        return Err(ProofError::RecordTampered {
            computed: hex::encode(computed),
            stored: hex::encode(r.hash),
        });
    }
    let actual = hex::encode(computed);
    if p.record_hash.trim().to_ascii_lowercase() != actual {
        return Err(ProofError::LeafMismatch {
            claimed: p.record_hash.to_string(),
            actual,
        });
    }
    if r.seq != p.seq || p.leaf_index.checked_add(1) != Some(r.seq) {
        return Err(ProofError::WrongPlace {
            record: r.seq,
            claimed: p.seq,
            leaf: p.leaf_index,
        });
    }
    event_is(r.event)?;
    let path = parse_path(p.inclusion, "inclusion")?;
    let leaf = super::leaf_hash(r.seq, &computed);
    tlog_tiles::check_record(&path, p.tree_size, *root, p.leaf_index, leaf).map_err(|_| {
        ProofError::InclusionFails {
            leaf: p.leaf_index,
            size: p.tree_size,
        }
    })?;
    Ok(r.seq)
}

/// Checks that the checkpoint `new` extends the checkpoint `old` by `proof` (the hashes of a
/// [`ConsistencyProof`]); both notes must verify with `log_key`.
pub fn check_consistency(
    old: &[u8],
    new: &[u8],
    proof: &[String],
    log_key: &str,
) -> Result<(note::Opened, note::Opened), ProofError> {
    let a = note::open(old, log_key, Vec::new(), 0)?;
    let b = note::open(new, log_key, Vec::new(), 0)?;
    let path = parse_path(proof, "consistency proof")?;
    let consistent = if a.size > b.size {
        false
    } else if a.size == 0 {
        path.is_empty()
    } else {
        tlog_tiles::check_tree(&path, b.size, b.root, a.size, a.root).is_ok()
    };
    if !consistent {
        return Err(ProofError::Inconsistent {
            from: a.size,
            to: b.size,
        });
    }
    Ok((a, b))
}
