//! The audit events: an entry of the audit log, its detail, and a response recorded by
//! reference.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

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
pub struct AuditRecorded {
    pub tenant_id: Uuid,
    pub entry: AuditEntry,
    #[serde(default)]
    pub detail: AuditDetail,
}
