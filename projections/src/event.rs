//! The event schema: every fact auditmem ever learns is one of these, appended to the log.
//!
//! Invariants:
//! - Events are past-tense facts; they carry no business logic and are never rewritten.
//! - The wire form is msgpack `[EVENT_FORMAT_VERSION, event]`: the enum tagged by variant name,
//!   its structs as arrays in declaration order (version 2), so no field name is stored.
//!   Version 1 wrote the structs as maps with field names, which more than double an audit
//!   record and with it the hashing, copying and sled work of every append, verify and replay;
//!   it still decodes, since the same `Deserialize` reads both. So that records already in the
//!   log keep decoding, a field is never removed or reordered: new fields go last, with
//!   `#[serde(default)]`, and new variants can be added freely.
//! - Secrets never appear: an API key is stored only as its blake3 hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// Version of the event wire format written by this build.
pub const EVENT_FORMAT_VERSION: u16 = 2;

/// The wire names of a closed set (plans, permissions, memory types, export formats): each
/// enum derives its list of variants and their names, and parses a name with a message that
/// lists the accepted ones.
pub trait Named: Copy + strum::VariantArray + Into<&'static str> + 'static {
    /// What a value of the set is called in messages ("plan", "memory_type").
    const WHAT: &'static str;

    /// The wire name, as serde writes it.
    fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The refusal of a name outside the set `T`: "unknown plan 'gold' (expected free, basic, pro,
/// business or custom)".
fn unknown<T: Named>(name: &str) -> String {
    let names: Vec<&str> = T::VARIANTS.iter().map(|v| v.as_str()).collect();
    let expected = match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("unknown {} '{name}' (expected {expected})", T::WHAT)
}

/// Subscription plan of a tenant; decides audit retention and which features are open.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown::<Plan>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = PlanName))]
pub enum Plan {
    Free,
    Basic,
    Pro,
    Business,
    Custom,
}

impl Named for Plan {
    const WHAT: &'static str = "plan";
}

impl Plan {
    /// Pro, Business and Custom may export audit logs.
    pub fn can_export(&self) -> bool {
        matches!(self, Plan::Pro | Plan::Business | Plan::Custom)
    }

    /// Business and Custom see the per-tenant chain hash.
    pub fn shows_hash(&self) -> bool {
        matches!(self, Plan::Business | Plan::Custom)
    }
}

/// A permission an API key may carry.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(parse_err_ty = String, parse_err_fn = unknown::<Permission>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = PermissionName))]
pub enum Permission {
    #[serde(rename = "audit.read")]
    #[strum(serialize = "audit.read")]
    AuditRead,
    #[serde(rename = "audit.export")]
    #[strum(serialize = "audit.export")]
    AuditExport,
    #[serde(rename = "memory.read")]
    #[strum(serialize = "memory.read")]
    MemoryRead,
    #[serde(rename = "memory.write")]
    #[strum(serialize = "memory.write")]
    MemoryWrite,
}

impl Named for Permission {
    const WHAT: &'static str = "permission";
}

/// The three memory types of the interface.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown::<MemoryType>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = MemoryTypeName))]
pub enum MemoryType {
    Rule,
    Fact,
    Context,
}

impl Named for MemoryType {
    const WHAT: &'static str = "memory_type";
}

impl MemoryType {
    /// Stable one-byte tag used in projection keys.
    pub fn tag(&self) -> u8 {
        match self {
            MemoryType::Rule => 1,
            MemoryType::Fact => 2,
            MemoryType::Context => 3,
        }
    }
}

/// Token usage of a gateway operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Tokens {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// The audit log entry of the interface (list item), minus `hash`, which the audit index
/// derives from the per-tenant chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: Uuid,
    pub action: String,
    #[serde(default)]
    pub model_id: Option<String>,
    #[serde(default)]
    pub project_id: Option<String>,
    #[serde(default)]
    pub gateway_id: Option<String>,
    #[serde(default)]
    pub ip_address: Option<String>,
    #[serde(default)]
    pub user_agent: Option<String>,
    pub http_status: u16,
    pub is_success: bool,
    #[serde(default)]
    pub is_cache_hit: bool,
    #[serde(default)]
    pub error_code: Option<i64>,
    #[serde(default)]
    pub error_msg: Option<String>,
    /// Milliseconds.
    #[serde(default)]
    pub duration: Option<f64>,
    #[serde(default)]
    pub credits_consumed: f64,
    #[serde(default)]
    pub balance_consumed_usd: f64,
    #[serde(default)]
    pub tokens: Option<Tokens>,
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Microseconds since the Unix epoch, UTC.
    pub created_at: i64,
    /// blake3 of the entry's canonical detail (`audit_view::detail_hash`): set on every entry
    /// written by this build, which its tenant chain then hashes under rule v2; `None` on
    /// entries written before it, whose chain hash keeps rule v1 (`audit_view::ChainRule`).
    /// Last and defaulted, so entries written without it decode.
    #[serde(default, with = "serde_bytes")]
    pub detail_hash: Option<[u8; 32]>,
}

/// The detail fields of an audit entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditDetail {
    #[serde(default)]
    pub request_body: Option<Value>,
    #[serde(default)]
    pub response_body: Option<Value>,
    #[serde(default)]
    pub input_content: Option<Value>,
    #[serde(default)]
    pub output_content: Option<Value>,
    #[serde(default)]
    pub rag_query: Option<Vec<String>>,
    #[serde(default)]
    pub rag_results: Option<Vec<Value>>,
    #[serde(default)]
    pub memory_query: Option<Vec<String>>,
    #[serde(default)]
    pub memory_results: Option<Vec<Value>>,
    /// The response body as the JSON text the service sent, when within the audit body limit:
    /// kept as written rather than parsed into `response_body` (an audit list answer is tens
    /// of kilobytes; parsing, encoding and freeing it as a tree costs more than the list
    /// itself). Read it through [`AuditDetail::response_body_value`]. Last and defaulted, so
    /// records written without it decode.
    #[serde(default)]
    pub response_json: Option<String>,
    /// The response recorded by reference instead of by value (audit list and detail reads):
    /// what determines the body exactly, from which the service renders the identical bytes
    /// when this entry's detail is read. `response_body` and `response_json` are then `None`.
    /// Last and defaulted, so records written without it decode.
    #[serde(default)]
    pub response_ref: Option<ResponseRef>,
}

/// A response recorded by reference: an answer that is a function of the log (entries that
/// never change once appended) and of a few values, stored as those values.
///
/// Variants and fields follow the event rule: never removed or reordered, new ones last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ResponseRef {
    /// A page of `GET /v1/audit/logs`.
    #[serde(rename = "audit.list")]
    List(ListRef),
    /// `GET /v1/audit/logs/{audit_id}`.
    #[serde(rename = "audit.read")]
    Read(ReadRef),
}

/// What an audit list page was answered from: the effective query (after clamping), the log
/// position it was answered at, the entries it returned and the values of the page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListRef {
    /// The range searched, micros, inclusive: `start_time` clamped to the retention window.
    pub from: i64,
    pub to: i64,
    /// The action filter (one longer than any action name is kept truncated: it matched none).
    pub action: Option<String>,
    /// A cursor page: it starts after this `(created_at, seq)`.
    pub after: Option<(i64, u64)>,
    /// The log head the page was answered at (a cursor's pinned position).
    pub at_seq: u64,
    pub page: u64,
    pub page_size: u64,
    /// The log seqs of the entries returned, in the page's order.
    pub seqs: Vec<u64>,
    pub total: u64,
    pub next_cursor: Option<String>,
    /// Whether the items showed their chain `hash` (the plan then).
    pub show_hash: bool,
}

/// What an audit detail read was answered from: the entry read and how it was shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadRef {
    /// The log seq of the entry read.
    pub seq: u64,
    /// Whether the entry showed its chain `hash` (the plan then).
    pub show_hash: bool,
    /// Whether this entry's own detail renders the answer in full. It does not when the entry
    /// read was itself a detail read rendered in full: the answer then nested two reads, and
    /// rendering it would descend a chain of reads of reads as long as callers made it; its
    /// `response_body` then names the entry read instead (`{"_detail_of": id}`).
    pub full: bool,
}

impl AuditDetail {
    /// `response_body` as the interface shows it, from whichever of the two forms is stored.
    pub fn response_body_value(&self) -> Option<Value> {
        match &self.response_json {
            Some(text) => Some(
                serde_json::from_str(text)
                    .unwrap_or_else(|_| serde_json::json!({ "_unparsed": text })),
            ),
            None => self.response_body.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantCreated {
    pub tenant_id: Uuid,
    pub name: String,
    pub plan: Plan,
    pub subscription_active: bool,
    pub credits: f64,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantUpdated {
    pub tenant_id: Uuid,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub plan: Option<Plan>,
    #[serde(default)]
    pub subscription_active: Option<bool>,
    #[serde(default)]
    pub credits: Option<f64>,
    pub updated_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyIssued {
    pub key_id: Uuid,
    pub tenant_id: Uuid,
    /// blake3 of the key; the key itself is shown once and never stored.
    #[serde(with = "serde_bytes")]
    pub key_hash: [u8; 32],
    pub permissions: Vec<Permission>,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyRevoked {
    pub key_id: Uuid,
    pub tenant_id: Uuid,
    pub revoked_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecorded {
    pub tenant_id: Uuid,
    pub entry: AuditEntry,
    #[serde(default)]
    pub detail: AuditDetail,
}

/// File format of an audit export.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown::<ExportFormat>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = ExportFormatName))]
pub enum ExportFormat {
    Csv,
    Json,
}

impl Named for ExportFormat {
    const WHAT: &'static str = "format";
}

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

/// A vector as stored in events: f32 little-endian bytes (compact, and decoded without parsing).
pub fn vector_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn vector_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryCreated {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub created_at: i64,
    /// Embedding model id and the vector (normalised, f32 LE), so replay never calls a model.
    pub model: String,
    #[serde(with = "serde_bytes")]
    pub vector: Vec<u8>,
    /// Scope, metadata and expiry, when the memory was created with any: absent otherwise, so
    /// such a record is what it was before these fields existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<MemoryExtra>,
}

/// What a memory may carry beyond the interface's fields, each optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryExtra {
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// The metadata object as JSON text (a JSON value does not round-trip through the
    /// positional encoding of events; text does, byte for byte).
    #[serde(default)]
    pub metadata: Option<String>,
    /// When the memory stops being answered (µs since the epoch).
    #[serde(default)]
    pub expires_at: Option<i64>,
}

impl MemoryExtra {
    /// `None` when it carries nothing, so that the event is written without it.
    pub fn or_none(self) -> Option<Self> {
        (self != Self::default()).then_some(self)
    }
}

/// An update's changes to metadata and expiry: each is set (to a value or cleared) only when
/// its flag says so (an `Option<Option<_>>` would not survive the positional encoding).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryAmend {
    #[serde(default)]
    pub set_metadata: bool,
    #[serde(default)]
    pub metadata: Option<String>,
    #[serde(default)]
    pub set_expires_at: bool,
    #[serde(default)]
    pub expires_at: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryUpdated {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub importance: Option<f64>,
    pub updated_at: i64,
    /// Set with a new vector when the content changed.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, with = "serde_bytes")]
    pub vector: Option<Vec<u8>>,
    /// Metadata and expiry changes; absent when the update changed neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amend: Option<MemoryAmend>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryDeleted {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    pub deleted_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoriesDeletedByType {
    pub tenant_id: Uuid,
    pub memory_type: MemoryType,
    /// Exactly the memories deleted, decided by the handler: replay deletes the same ones.
    pub memory_ids: Vec<Uuid>,
    pub deleted_at: i64,
}

/// Memories a filtered batch delete chose (exactly these: replay deletes the same ones).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoriesDeleted {
    pub tenant_id: Uuid,
    pub memory_ids: Vec<Uuid>,
    pub deleted_at: i64,
}

/// Memories whose `expires_at` had passed, taken out by the sweeper: from then on they are
/// gone as deleted ones are, their history saying `expired`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoriesExpired {
    pub tenant_id: Uuid,
    pub memory_ids: Vec<Uuid>,
    pub expired_at: i64,
}

/// An older memory that a newer one contradicts: it stays readable and in history, marked,
/// and leaves list and search unless superseded memories are asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemorySuperseded {
    pub memory_id: Uuid,
    pub tenant_id: Uuid,
    pub superseded_by: Uuid,
    pub superseded_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreditsConsumed {
    pub tenant_id: Uuid,
    pub credits: f64,
    pub usd: f64,
    pub at: i64,
}

/// Every event kind. Variants are only ever added, never renamed or removed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    TenantCreated(TenantCreated),
    TenantUpdated(TenantUpdated),
    KeyIssued(KeyIssued),
    KeyRevoked(KeyRevoked),
    AuditRecorded(Box<AuditRecorded>),
    ExportRequested(ExportRequested),
    ExportCompleted(ExportCompleted),
    ExportFailed(ExportFailed),
    MemoryCreated(MemoryCreated),
    MemoryUpdated(MemoryUpdated),
    MemoryDeleted(MemoryDeleted),
    MemoriesDeletedByType(MemoriesDeletedByType),
    CreditsConsumed(CreditsConsumed),
    MemoriesDeleted(MemoriesDeleted),
    MemoriesExpired(MemoriesExpired),
    MemorySuperseded(MemorySuperseded),
}

/// [`Event::decode_audit_entry`] on the v2 layout: `Ok(None)` when the bytes are laid out
/// otherwise (the caller then decodes them whole), `Ok(Some(None))` for another event.
#[allow(clippy::type_complexity)]
fn audit_head_v2(bytes: &[u8]) -> Result<Option<Option<(Uuid, AuditEntry)>>, EventCodecError> {
    use rmp::decode;
    let mut rd = bytes;
    let Ok(2) = decode::read_array_len(&mut rd) else {
        return Ok(None);
    };
    let Ok(version) = decode::read_int::<u16, _>(&mut rd) else {
        return Ok(None);
    };
    if version > EVENT_FORMAT_VERSION {
        return Err(EventCodecError::Version(version));
    }
    if version < 2 {
        return Ok(None);
    }
    let Ok(1) = decode::read_map_len(&mut rd) else {
        return Ok(None);
    };
    let Ok(name_len) = decode::read_str_len(&mut rd) else {
        return Ok(None);
    };
    let Some((name, rest)) = rd.split_at_checked(name_len as usize) else {
        return Ok(None);
    };
    if name != b"AuditRecorded" {
        return Ok(Some(None));
    }
    let mut rd = rest;
    let Ok(3..) = decode::read_array_len(&mut rd) else {
        return Ok(None);
    };
    let mut de = rmp_serde::Deserializer::from_read_ref(rd);
    let tenant_id = Uuid::deserialize(&mut de)?;
    let entry = AuditEntry::deserialize(&mut de)?;
    Ok(Some(Some((tenant_id, entry))))
}

#[derive(Debug, thiserror::Error)]
pub enum EventCodecError {
    #[error("event could not be encoded: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("event could not be decoded: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error(
        "event format version {0} is newer than this build understands ({EVENT_FORMAT_VERSION})"
    )]
    Version(u16),
}

impl Event {
    /// The bytes stored (and hashed) in a log record.
    pub fn encode(&self) -> Result<Vec<u8>, EventCodecError> {
        Ok(rmp_serde::to_vec(&(EVENT_FORMAT_VERSION, self))?)
    }

    pub fn decode(bytes: &[u8]) -> Result<Event, EventCodecError> {
        let (version, event): (u16, Event) = rmp_serde::from_slice(bytes)?;
        if version > EVENT_FORMAT_VERSION {
            return Err(EventCodecError::Version(version));
        }
        Ok(event)
    }

    /// The tenant and list fields of an audit event, without its detail; `None` for any
    /// other event.
    ///
    /// The detail holds whole request and response bodies (an audit list's response is tens of
    /// kilobytes): lists and exports need only the entry, and decoding the detail into JSON
    /// values costs many times what the entry does. The v2 layout is
    /// `[version, {"AuditRecorded": [tenant_id, entry, detail]}]`, so the entry is read and the
    /// rest left unread; any other layout (v1 named maps) takes the full decode.
    pub fn decode_audit_entry(bytes: &[u8]) -> Result<Option<(Uuid, AuditEntry)>, EventCodecError> {
        if let Some(head) = audit_head_v2(bytes)? {
            return Ok(head);
        }
        Ok(match Event::decode(bytes)? {
            Event::AuditRecorded(rec) => Some((rec.tenant_id, rec.entry)),
            _ => None,
        })
    }

    /// Short name of the variant, for logs and the history view.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TenantCreated(_) => "TenantCreated",
            Event::TenantUpdated(_) => "TenantUpdated",
            Event::KeyIssued(_) => "KeyIssued",
            Event::KeyRevoked(_) => "KeyRevoked",
            Event::AuditRecorded(_) => "AuditRecorded",
            Event::ExportRequested(_) => "ExportRequested",
            Event::ExportCompleted(_) => "ExportCompleted",
            Event::ExportFailed(_) => "ExportFailed",
            Event::MemoryCreated(_) => "MemoryCreated",
            Event::MemoryUpdated(_) => "MemoryUpdated",
            Event::MemoryDeleted(_) => "MemoryDeleted",
            Event::MemoriesDeletedByType(_) => "MemoriesDeletedByType",
            Event::CreditsConsumed(_) => "CreditsConsumed",
            Event::MemoriesDeleted(_) => "MemoriesDeleted",
            Event::MemoriesExpired(_) => "MemoriesExpired",
            Event::MemorySuperseded(_) => "MemorySuperseded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_audit() -> Event {
        Event::AuditRecorded(Box::new(AuditRecorded {
            tenant_id: Uuid::now_v7(),
            entry: AuditEntry {
                id: Uuid::now_v7(),
                action: "memory.write".into(),
                model_id: None,
                project_id: Some("p1".into()),
                gateway_id: None,
                ip_address: Some("127.0.0.1".into()),
                user_agent: Some("curl/8".into()),
                http_status: 200,
                is_success: true,
                is_cache_hit: false,
                error_code: None,
                error_msg: None,
                duration: Some(1.5),
                credits_consumed: 0.0,
                balance_consumed_usd: 0.0,
                tokens: Some(Tokens {
                    prompt_tokens: 1,
                    completion_tokens: 2,
                    total_tokens: 3,
                }),
                metadata: Some(serde_json::json!({"team": "a", "n": [1, 2.5, -3]})),
                created_at: 1_700_000_000_123_000,
                detail_hash: Some([5; 32]),
            },
            detail: AuditDetail {
                request_body: Some(serde_json::json!({"content": "x"})),
                response_ref: Some(ResponseRef::List(ListRef {
                    from: -5,
                    to: i64::MAX,
                    action: Some("gateway.chat".into()),
                    after: Some((7, 8)),
                    at_seq: 9,
                    page: 1,
                    page_size: 2,
                    seqs: vec![3, 1],
                    total: 2,
                    next_cursor: None,
                    show_hash: true,
                })),
                ..Default::default()
            },
        }))
    }

    #[test]
    fn audit_records_written_before_the_detail_hash_and_references_decode() {
        // An AuditRecorded as this build wrote it before `detail_hash` (entry) and
        // `response_ref` (detail) existed: both read back as None, in both layouts.
        #[derive(Serialize)]
        struct OldEntry {
            id: Uuid,
            action: String,
            model_id: Option<String>,
            project_id: Option<String>,
            gateway_id: Option<String>,
            ip_address: Option<String>,
            user_agent: Option<String>,
            http_status: u16,
            is_success: bool,
            is_cache_hit: bool,
            error_code: Option<i64>,
            error_msg: Option<String>,
            duration: Option<f64>,
            credits_consumed: f64,
            balance_consumed_usd: f64,
            tokens: Option<Tokens>,
            metadata: Option<Value>,
            created_at: i64,
        }
        #[derive(Serialize)]
        struct OldDetail {
            request_body: Option<Value>,
            response_body: Option<Value>,
            input_content: Option<Value>,
            output_content: Option<Value>,
            rag_query: Option<Vec<String>>,
            rag_results: Option<Vec<Value>>,
            memory_query: Option<Vec<String>>,
            memory_results: Option<Vec<Value>>,
            response_json: Option<String>,
        }
        #[derive(Serialize)]
        struct OldRecorded {
            tenant_id: Uuid,
            entry: OldEntry,
            detail: OldDetail,
        }
        #[derive(Serialize)]
        enum OldEvent {
            AuditRecorded(OldRecorded),
        }
        let Event::AuditRecorded(mut rec) = sample_audit() else {
            unreachable!()
        };
        rec.entry.detail_hash = None;
        rec.detail.response_ref = None;
        rec.detail.response_json = Some("{\"success\":true}".into());
        let e = rec.entry.clone();
        let d = rec.detail.clone();
        let old = OldEvent::AuditRecorded(OldRecorded {
            tenant_id: rec.tenant_id,
            entry: OldEntry {
                id: e.id,
                action: e.action,
                model_id: e.model_id,
                project_id: e.project_id,
                gateway_id: e.gateway_id,
                ip_address: e.ip_address,
                user_agent: e.user_agent,
                http_status: e.http_status,
                is_success: e.is_success,
                is_cache_hit: e.is_cache_hit,
                error_code: e.error_code,
                error_msg: e.error_msg,
                duration: e.duration,
                credits_consumed: e.credits_consumed,
                balance_consumed_usd: e.balance_consumed_usd,
                tokens: e.tokens,
                metadata: e.metadata,
                created_at: e.created_at,
            },
            detail: OldDetail {
                request_body: d.request_body,
                response_body: d.response_body,
                input_content: d.input_content,
                output_content: d.output_content,
                rag_query: d.rag_query,
                rag_results: d.rag_results,
                memory_query: d.memory_query,
                memory_results: d.memory_results,
                response_json: d.response_json,
            },
        });
        let want = Event::AuditRecorded(rec.clone());
        for bytes in [
            rmp_serde::to_vec(&(2u16, &old)).expect("encode"),
            rmp_serde::to_vec_named(&(1u16, &old)).expect("encode"),
        ] {
            assert_eq!(Event::decode(&bytes).expect("decode"), want);
            assert_eq!(
                Event::decode_audit_entry(&bytes).expect("entry"),
                Some((rec.tenant_id, rec.entry.clone()))
            );
        }
    }

    #[test]
    fn event_round_trips_through_msgpack() {
        let event = sample_audit();
        let bytes = event.encode().expect("encode");
        assert_eq!(Event::decode(&bytes).expect("decode"), event);
    }

    #[test]
    fn newer_format_version_is_refused() {
        let bytes = rmp_serde::to_vec(&(EVENT_FORMAT_VERSION + 1, sample_audit())).expect("encode");
        assert!(
            matches!(Event::decode(&bytes), Err(EventCodecError::Version(v)) if v == EVENT_FORMAT_VERSION + 1)
        );
    }

    #[test]
    fn audit_entry_decodes_alone_from_both_layouts() {
        let event = sample_audit();
        let Event::AuditRecorded(rec) = &event else {
            unreachable!()
        };
        let want = Some((rec.tenant_id, rec.entry.clone()));
        let v2 = event.encode().expect("encode");
        assert!(
            audit_head_v2(&v2).expect("v2").is_some(),
            "v2 takes the light path"
        );
        assert_eq!(Event::decode_audit_entry(&v2).expect("v2"), want);
        let v1 = rmp_serde::to_vec_named(&(1u16, &event)).expect("encode");
        assert_eq!(Event::decode_audit_entry(&v1).expect("v1"), want);
        let other = Event::CreditsConsumed(CreditsConsumed {
            tenant_id: rec.tenant_id,
            credits: 1.0,
            usd: 0.001,
            at: 1,
        })
        .encode()
        .expect("encode");
        assert_eq!(Event::decode_audit_entry(&other).expect("other"), None);
        let newer = rmp_serde::to_vec(&(EVENT_FORMAT_VERSION + 1, &event)).expect("encode");
        assert!(matches!(
            Event::decode_audit_entry(&newer),
            Err(EventCodecError::Version(_))
        ));
    }

    #[test]
    fn version_1_named_maps_still_decode() {
        let event = sample_audit();
        let v1 = rmp_serde::to_vec_named(&(1u16, &event)).expect("encode");
        let v2 = event.encode().expect("encode");
        assert!(v2.len() * 2 < v1.len(), "{} vs {}", v2.len(), v1.len());
        assert_eq!(Event::decode(&v1).expect("decode v1"), event);
    }

    #[test]
    fn missing_trailing_fields_decode_with_defaults() {
        // A record written before a field existed must still decode: new fields go last and
        // default, in both the array (v2) and the named-map (v1) layout.
        #[derive(Serialize)]
        struct OldUpdate {
            tenant_id: Uuid,
            name: Option<String>,
        }
        #[derive(Serialize)]
        enum OldEvent {
            TenantUpdated(OldUpdate),
        }
        #[derive(Deserialize, Debug)]
        struct Grown {
            tenant_id: Uuid,
            name: Option<String>,
            #[serde(default)]
            added_later: Option<u32>,
        }
        let id = Uuid::now_v7();
        let old = OldUpdate {
            tenant_id: id,
            name: Some("a".into()),
        };
        for bytes in [
            rmp_serde::to_vec(&old).expect("encode"),
            rmp_serde::to_vec_named(&old).expect("encode"),
        ] {
            let g: Grown = rmp_serde::from_slice(&bytes).expect("decode");
            assert_eq!(
                (g.tenant_id, g.name.as_deref(), g.added_later),
                (id, Some("a"), None)
            );
        }
        // A v1 event missing a required field is refused, never completed with an invented value.
        let bytes = rmp_serde::to_vec_named(&(
            1u16,
            OldEvent::TenantUpdated(OldUpdate {
                tenant_id: id,
                name: None,
            }),
        ))
        .expect("encode");
        let err = Event::decode(&bytes);
        assert!(err.is_err(), "{err:?}");
    }

    /// Every name parses back to its value, serde writes the same name (events and the API
    /// store and show serde's), and a name outside the set is refused listing the set.
    fn names_round_trip<
        T: Named + std::str::FromStr<Err = String> + Serialize + PartialEq + std::fmt::Debug,
    >() {
        for v in T::VARIANTS.iter().copied() {
            assert_eq!(v.as_str().parse::<T>(), Ok(v));
            assert_eq!(
                serde_json::to_value(v).expect("json"),
                serde_json::Value::from(v.as_str())
            );
        }
        assert!("gold".parse::<T>().is_err());
    }

    #[test]
    fn names_parse_and_print() {
        names_round_trip::<Plan>();
        names_round_trip::<Permission>();
        names_round_trip::<MemoryType>();
        names_round_trip::<ExportFormat>();
        assert_eq!(
            "gold".parse::<Plan>(),
            Err("unknown plan 'gold' (expected free, basic, pro, business or custom)".into())
        );
        assert_eq!(
            "x".parse::<Permission>(),
            Err("unknown permission 'x' (expected audit.read, audit.export, memory.read or memory.write)".into())
        );
        assert_eq!(
            "opinion".parse::<MemoryType>(),
            Err("unknown memory_type 'opinion' (expected rule, fact or context)".into())
        );
    }
}
