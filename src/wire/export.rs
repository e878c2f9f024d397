//! Export tasks: the request that starts one, and the task as it is shown.

use auditmem_projections::exports::{ExportStatus, ExportView};
use auditmem_projections::ExportFormat;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::Payload;
use super::field::{optional, Check, Field, Invalid};
use super::time::{parse_time, Time};
use super::Body;

/// The body may be left out: every field is optional.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportRequest {
    /// ISO 8601; default: the start of the plan's retention window.
    #[serde(default)]
    pub start_time: Option<String>,
    /// ISO 8601; default: now.
    #[serde(default)]
    pub end_time: Option<String>,
    /// csv (default), json, or ocsf (OCSF API Activity events, docs/OCSF.md).
    #[serde(default)]
    #[schema(inline)]
    pub format: Option<Field<ExportFormat>>,
}

impl Check for ExportFormat {
    type Raw = String;
    const BY_NAME: bool = true;

    fn check(raw: String) -> Result<Self, Invalid> {
        let name = raw.trim();
        name.parse()
            .map_err(|_| Invalid(format!("format must be csv, json or ocsf, got '{name}'")))
    }
}

/// An export request checked: its format and the times given, in microseconds. The plan's
/// window and the defaults are the handler's (they need the tenant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportAsked {
    pub format: ExportFormat,
    pub start: Option<i64>,
    pub end: Option<i64>,
}

impl Body for ExportRequest {
    type Checked = ExportAsked;

    /// Every field is optional, so an empty body is a valid request.
    fn when_empty() -> Option<Result<Self, Invalid>> {
        Some(Ok(Self::default()))
    }

    fn check(self) -> Result<ExportAsked, Invalid> {
        let format = optional(self.format)?.unwrap_or(ExportFormat::Csv);
        let start = self
            .start_time
            .map(|s| parse_time("start_time", &s))
            .transpose()?;
        let end = self
            .end_time
            .map(|s| parse_time("end_time", &s))
            .transpose()?;
        Ok(ExportAsked { format, start, end })
    }
}

/// The status of a task that was just accepted.
pub const PROCESSING: &str = "processing";

#[derive(Debug, Serialize, ToSchema)]
pub struct ExportCreated {
    #[schema(value_type = String)]
    pub export_id: Uuid,
    pub status: &'static str,
    pub estimated_records: u64,
    pub download_url: Option<String>,
}

impl Payload for ExportCreated {}

#[derive(Debug, Serialize, ToSchema)]
pub struct ExportTask {
    #[schema(value_type = String)]
    pub export_id: Uuid,
    /// processing, completed, failed or expired.
    pub status: &'static str,
    #[schema(value_type = String)]
    pub format: ExportFormat,
    #[schema(value_type = String)]
    pub start_time: Time,
    #[schema(value_type = String)]
    pub end_time: Time,
    pub estimated_records: u64,
    pub records: Option<u64>,
    pub file_size: Option<u64>,
    pub file_blake3: Option<String>,
    pub download_url: Option<String>,
    #[schema(value_type = String)]
    pub created_at: Time,
    #[schema(value_type = Option<String>)]
    pub completed_at: Option<Time>,
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Time>,
    pub error: Option<String>,
    /// The signed manifest of a completed (or expired) export; null otherwise.
    pub manifest: Option<Manifest>,
}

impl Payload for ExportTask {}

/// What the service states about a completed export file, signed with its checkpoint key: who
/// and what it covers, where it starts and ends in the tenant chain, and the file's digest.
/// `auditmem verify --export FILE --manifest M --pubkey K` holds a file to it. The signature
/// covers [`Manifest::message`] (src/export/manifest.rs), a text any ed25519 tool can check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `auditmem/export-manifest/v1`.
    pub version: String,
    #[schema(value_type = String)]
    pub export_id: Uuid,
    #[schema(value_type = String)]
    pub tenant_id: Uuid,
    /// csv, json or ocsf.
    pub format: String,
    /// The requested range, RFC 3339 with microseconds, inclusive.
    pub start_time: String,
    pub end_time: String,
    /// The log position of the request: the file holds the range's entries logged before it.
    pub request_seq: u64,
    pub requested_at: String,
    pub completed_at: String,
    /// Rows in the file.
    pub records: u64,
    /// Whether rows carry `chain_index`, `prev_hash` and `hash` (business and custom plans).
    pub with_chain: bool,
    /// Audit id, chain position and hash (lowercase hex) of the first and last row; null
    /// without the chain or rows.
    #[schema(value_type = Option<String>)]
    pub first_id: Option<Uuid>,
    pub first_chain_index: Option<u64>,
    pub first_hash: Option<String>,
    #[schema(value_type = Option<String>)]
    pub last_id: Option<Uuid>,
    pub last_chain_index: Option<u64>,
    pub last_hash: Option<String>,
    /// The file's size and blake3 (lowercase hex).
    pub file_bytes: u64,
    pub file_blake3: String,
    /// Whether CSV text cells that a spreadsheet would read as a formula (starting with `=`,
    /// `+`, `-`, `@`, a tab or a carriage return), or that start with `'`, carry a leading `'`.
    pub formula_guard: bool,
    /// Lowercase hex of the ed25519 key that signed it (the checkpoint key) and of the
    /// signature.
    pub public_key: String,
    pub signature: String,
}

/// Where a completed export is downloaded from.
pub fn download_url(export_id: Uuid) -> String {
    format!("/v1/audit/logs/export/{export_id}/download")
}

impl ExportTask {
    /// The task as its tenant sees it; a completed export past its expiry is `expired`.
    pub fn new(v: &ExportView, expired: bool, manifest: Option<Manifest>) -> Self {
        let status = match v.status {
            _ if expired => "expired",
            ExportStatus::Processing => PROCESSING,
            ExportStatus::Completed => "completed",
            ExportStatus::Failed => "failed",
        };
        ExportTask {
            export_id: v.export_id,
            status,
            format: v.format,
            start_time: Time(v.start_time),
            end_time: Time(v.end_time),
            estimated_records: v.estimated_records,
            records: v.records,
            file_size: v.file_size,
            file_blake3: v.file_blake3.clone(),
            download_url: (status == "completed").then(|| download_url(v.export_id)),
            created_at: Time(v.created_at),
            completed_at: v.completed_at.map(Time),
            expires_at: v.expires_at.map(Time),
            error: v.error.clone(),
            manifest,
        }
    }
}
