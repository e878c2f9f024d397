//! The audit export events: an export requested, and how it ended.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::ExportFormat;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportRequested {
    pub export_id: Uuid,
    pub tenant_id: Uuid,
    pub format: ExportFormat,
    /// Inclusive range, micros.
    pub start_time: i64,
    pub end_time: i64,
    pub estimated_records: u64,
    /// Whether rows carry the tenant chain (business and custom plans).
    pub with_chain: bool,
    pub requested_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportCompleted {
    pub export_id: Uuid,
    pub tenant_id: Uuid,
    pub records: u64,
    pub bytes: u64,
    #[serde(with = "serde_bytes")]
    pub blake3: [u8; 32],
    pub completed_at: i64,
    pub expires_at: i64,
    /// Where the file starts in its tenant's chain (its first row), for exports that show the
    /// chain; none for the others and for an empty file.
    #[serde(default)]
    pub first: Option<ChainPoint>,
    /// Where the file ends in its tenant's chain (its last row).
    #[serde(default)]
    pub last: Option<ChainPoint>,
    /// Whether the file's CSV text cells that a spreadsheet would read as a formula carry a
    /// leading `'` (false for JSON files, and for files written before the guard existed).
    #[serde(default)]
    pub formula_guard: bool,
}

/// A row's place in its tenant's chain: the entry, its position and its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainPoint {
    pub audit_id: Uuid,
    pub chain_index: u64,
    #[serde(with = "serde_bytes")]
    pub hash: [u8; 32],
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportFailed {
    pub export_id: Uuid,
    pub tenant_id: Uuid,
    pub error: String,
    pub failed_at: i64,
}
