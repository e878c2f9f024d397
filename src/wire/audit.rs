//! The audit log's shapes: the entry as lists, details and exports show it, the list's query
//! and page, and the gateway's ingestion body; [`bounds`], the bounds on what callers put in an
//! entry.

pub mod bounds;

use std::borrow::Cow;

use auditmem_projections::audit_index::AuditRef;
use auditmem_projections::audit_view::{detail_hash, hash_hex, millis_floor};
use auditmem_projections::event::ResponseRef;
use auditmem_projections::{AuditDetail, AuditEntry, AuditRecorded, Tokens};
use base64::Engine;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};
use uuid::Uuid;

use super::envelope::Payload;
use super::field::Invalid;
use super::query::{self, Paging};
use super::time::{parse_time, Time, CLOCK_SKEW_MICROS};
use super::{Body, Params};

/// A hash written as lower-case hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hex(pub [u8; 32]);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hash_hex(&self.0))
    }
}

/// The `hash` of an entry: shown to plans that see the chain, `null` to the others in lists
/// and details, and left out of the exports of plans that do not see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryHash {
    Shown(Hex),
    Hidden,
    LeftOut,
}

impl EntryHash {
    fn is_left_out(&self) -> bool {
        *self == EntryHash::LeftOut
    }
}

impl Serialize for EntryHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            EntryHash::Shown(h) => h.serialize(s),
            EntryHash::Hidden | EntryHash::LeftOut => s.serialize_none(),
        }
    }
}

/// The audit log entry of the interface: the list item, the base of the detail, and the row of
/// an export (a JSON object, or a CSV record whose columns are these fields in this order).
///
/// Borrowed from the stored entry: a page or an export chunk is written straight from the
/// entries read from the log, without a copy or a JSON tree per entry.
#[derive(Debug, Serialize, ToSchema)]
#[schema(description = "An audit log entry (list item).")]
pub struct AuditLogEntry<'a> {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub action: &'a str,
    pub model_id: Option<&'a str>,
    pub project_id: Option<&'a str>,
    pub gateway_id: Option<&'a str>,
    pub ip_address: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    pub http_status: u16,
    pub is_success: bool,
    pub is_cache_hit: bool,
    pub error_code: Option<i64>,
    pub error_msg: Option<&'a str>,
    /// Milliseconds.
    pub duration: Option<f64>,
    pub credits_consumed: f64,
    pub balance_consumed_usd: f64,
    #[schema(value_type = Option<Tokens>)]
    pub tokens: Option<&'a Tokens>,
    #[schema(value_type = Option<Value>)]
    pub metadata: Option<&'a Value>,
    /// RFC 3339 UTC, milliseconds.
    #[schema(value_type = String)]
    pub created_at: Time,
    /// blake3 (hex) of the entry's canonical detail, among the fields its chain `hash` covers
    /// (tenant chain rule v2, docs/API.md); null on entries written before the detail was
    /// hashed, whose `hash` follows rule v1.
    #[schema(value_type = Option<String>)]
    pub detail_hash: Option<Hex>,
    // An entry's place in its tenant's chain, in the rows of an export of a plan that sees it
    // (and only there, so not in the list item's schema).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub chain_index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub prev_hash: Option<Hex>,
    /// Per-tenant chain hash (hex) for business and custom plans; null otherwise.
    #[serde(skip_serializing_if = "EntryHash::is_left_out")]
    #[schema(value_type = Option<String>)]
    pub hash: EntryHash,
}

impl<'a> AuditLogEntry<'a> {
    /// `chain`: the entry's place in its chain and the hash before it.
    fn new(e: &'a AuditEntry, chain: Option<(u64, Hex)>, hash: EntryHash) -> Self {
        AuditLogEntry {
            id: e.id,
            action: &e.action,
            model_id: e.model_id.as_deref(),
            project_id: e.project_id.as_deref(),
            gateway_id: e.gateway_id.as_deref(),
            ip_address: e.ip_address.as_deref(),
            user_agent: e.user_agent.as_deref(),
            http_status: e.http_status,
            is_success: e.is_success,
            is_cache_hit: e.is_cache_hit,
            error_code: e.error_code,
            error_msg: e.error_msg.as_deref(),
            duration: e.duration,
            credits_consumed: e.credits_consumed,
            balance_consumed_usd: e.balance_consumed_usd,
            tokens: e.tokens.as_ref(),
            metadata: e.metadata.as_ref(),
            created_at: Time(e.created_at),
            detail_hash: e.detail_hash.map(Hex),
            chain_index: chain.map(|c| c.0),
            prev_hash: chain.map(|c| c.1),
            hash,
        }
    }

    /// The entry as an export row: with its place in the chain and its hash when the plan sees
    /// the chain, without either otherwise.
    pub fn exported(e: &'a AuditEntry, r: &AuditRef, with_chain: bool) -> Self {
        if with_chain {
            let place = (r.chain_index, Hex(r.prev_hash));
            Self::new(e, Some(place), EntryHash::Shown(Hex(r.hash)))
        } else {
            Self::new(e, None, EntryHash::LeftOut)
        }
    }
}

/// An entry as lists and details show it, owning what it shows: `hash` for plans that see the
/// chain, else null. Its schema is [`AuditLogEntry`]'s.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedEntry {
    pub entry: AuditEntry,
    pub hash: Option<[u8; 32]>,
}

impl ListedEntry {
    pub fn new(entry: AuditEntry, r: &AuditRef, show_hash: bool) -> Self {
        ListedEntry {
            entry,
            hash: show_hash.then_some(r.hash),
        }
    }

    fn view(&self) -> AuditLogEntry<'_> {
        let hash = match self.hash {
            Some(h) => EntryHash::Shown(Hex(h)),
            None => EntryHash::Hidden,
        };
        AuditLogEntry::new(&self.entry, None, hash)
    }
}

impl Serialize for ListedEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(s)
    }
}

impl PartialSchema for ListedEntry {
    fn schema() -> RefOr<Schema> {
        AuditLogEntry::schema()
    }
}

impl ToSchema for ListedEntry {
    fn name() -> Cow<'static, str> {
        AuditLogEntry::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        AuditLogEntry::schemas(schemas)
    }
}

/// A response body as a detail read shows it: the JSON text as it was sent, byte for byte (the
/// stored text, or the answer rendered again from its reference), or a stored JSON value (a
/// body recorded as a tree: a truncation marker, an ingested body).
#[derive(Debug)]
pub enum ShownBody {
    Sent(Box<RawValue>),
    Value(Value),
}

impl ShownBody {
    /// A body the service rendered (always UTF-8 JSON: it is what a handler answered).
    pub fn rendered(bytes: Vec<u8>) -> Result<Self, String> {
        let text = String::from_utf8(bytes).map_err(|e| e.to_string())?;
        RawValue::from_string(text)
            .map(ShownBody::Sent)
            .map_err(|e| e.to_string())
    }

    /// The body a by-value entry stored, as its detail shows it: a stored text that is not
    /// JSON (none is recorded so) as `{"_unparsed": text}`, as it is hashed
    /// (`AuditDetail::response_body_value`).
    pub fn stored(d: &AuditDetail) -> Option<Self> {
        match &d.response_json {
            Some(text) => Some(match RawValue::from_string(text.clone()) {
                Ok(raw) => ShownBody::Sent(raw),
                Err(_) => ShownBody::Value(serde_json::json!({ "_unparsed": text })),
            }),
            None => d.response_body.clone().map(ShownBody::Value),
        }
    }
}

impl Serialize for ShownBody {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ShownBody::Sent(raw) => raw.serialize(s),
            ShownBody::Value(v) => v.serialize(s),
        }
    }
}

/// An audit log entry with its detail fields.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditLogDetail {
    #[serde(flatten)]
    pub entry: ListedEntry,
    pub request_body: Option<Value>,
    /// The body the caller received: the JSON text as sent when it was within the audit body
    /// limit (or recorded by reference), else a marker.
    #[schema(value_type = Option<Object>)]
    pub response_body: Option<ShownBody>,
    pub input_content: Option<Value>,
    pub output_content: Option<Value>,
    pub rag_query: Option<Vec<String>>,
    pub rag_results: Option<Vec<Value>>,
    pub memory_query: Option<Vec<String>>,
    pub memory_results: Option<Vec<Value>>,
    /// For an audit list or detail read, what its response was recorded as instead of its
    /// body (`response_body` is rendered from it); it is what `detail_hash` covers in place of
    /// `response_body`. Null for every other entry.
    #[schema(value_type = Option<Object>)]
    pub response_ref: Option<ResponseRef>,
}

impl AuditLogDetail {
    /// The detail view of `entry` with its detail `d`, the response shown as `response_body`
    /// (the stored body, or the one rendered from `d.response_ref`).
    pub fn new(entry: ListedEntry, d: AuditDetail, response_body: Option<ShownBody>) -> Self {
        AuditLogDetail {
            entry,
            response_body,
            request_body: d.request_body,
            input_content: d.input_content,
            output_content: d.output_content,
            rag_query: d.rag_query,
            rag_results: d.rag_results,
            memory_query: d.memory_query,
            memory_results: d.memory_results,
            response_ref: d.response_ref,
        }
    }
}

impl Payload for AuditLogDetail {}

/// A page of `GET /v1/audit/logs`, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditLogPage {
    pub logs: Vec<ListedEntry>,
    #[schema(value_type = u64)]
    pub total: usize,
    #[schema(value_type = u64)]
    pub page: usize,
    #[schema(value_type = u64)]
    pub page_size: usize,
    pub next_cursor: Option<String>,
}

impl Payload for AuditLogPage {}

/// The audit list's page size: default 50, at most 100 (larger is clamped).
pub const DEFAULT_PAGE_SIZE: usize = 50;

/// Where a cursor page starts: after `(created_at, seq)`, among entries up to `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub seq: u64,
    pub snapshot: u64,
}

impl Cursor {
    pub fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!(
            "{}.{}.{}",
            self.created_at, self.seq, self.snapshot
        ))
    }

    pub fn decode(s: &str) -> Result<Cursor, Invalid> {
        let bad = || Invalid::new("cursor is not a cursor returned by this endpoint");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s.trim())
            .map_err(|_| bad())?;
        let text = String::from_utf8(raw).map_err(|_| bad())?;
        let mut it = text.split('.');
        let (Some(a), Some(b), Some(c), None) = (it.next(), it.next(), it.next(), it.next()) else {
            return Err(bad());
        };
        Ok(Cursor {
            created_at: a.parse().map_err(|_| bad())?,
            seq: b.parse().map_err(|_| bad())?,
            snapshot: c.parse().map_err(|_| bad())?,
        })
    }
}

/// The query of `GET /v1/audit/logs`. Empty values are "not given" (but for the page numbers);
/// unknown parameters are ignored.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditListQuery {
    /// ISO 8601; clamped to the retention window
    start_time: Option<String>,
    /// ISO 8601, inclusive
    end_time: Option<String>,
    /// exact action name
    action: Option<String>,
    /// default 1
    #[param(value_type = Option<u64>, minimum = 1)]
    page: Option<String>,
    /// default 50, above 100 clamped
    #[param(value_type = Option<u64>, minimum = 1)]
    page_size: Option<String>,
    /// next_cursor of a previous page
    cursor: Option<String>,
}

/// [`AuditListQuery`] checked: times in microseconds, the page size clamped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub page: usize,
    pub page_size: usize,
    pub action: Option<String>,
    pub cursor: Option<Cursor>,
}

impl Params for AuditListQuery {
    type Checked = ListQuery;

    fn check(self) -> Result<ListQuery, Invalid> {
        let time = |field: &str, v: Option<String>| {
            query::given(v).map(|s| parse_time(field, &s)).transpose()
        };
        let start = time("start_time", self.start_time)?;
        let end = time("end_time", self.end_time)?;
        if let (Some(s), Some(e)) = (start, end) {
            if e < s {
                return Err(Invalid::new("end_time is before start_time"));
            }
        }
        let Paging { page, page_size } =
            Paging::check(self.page, self.page_size, DEFAULT_PAGE_SIZE)?;
        let action = query::given(self.action.map(|a| a.trim().to_string()));
        let cursor = query::given(self.cursor)
            .map(|c| Cursor::decode(&c))
            .transpose()?;
        Ok(ListQuery {
            start,
            end,
            page,
            page_size,
            action,
            cursor,
        })
    }
}

/// `POST /admin/v1/audit/logs`: 1 to 1,000 entries, appended atomically.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    pub entries: Vec<IngestEntry>,
}

/// At most this many entries in one ingestion call.
pub const MAX_INGEST_ENTRIES: usize = 1000;

impl Body for IngestRequest {
    type Checked = Vec<IngestEntry>;

    /// Names the entry as the checks do (`entries[3]: http_status: invalid type ...`).
    fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if let Some((index, field)) = path
            .strip_prefix("entries[")
            .and_then(|rest| rest.split_once(']'))
        {
            let field = field.trim_start_matches('.');
            let field = if field.is_empty() {
                String::new()
            } else {
                format!("{field}: ")
            };
            return Invalid(format!("entries[{index}]: {field}{inner}"));
        }
        Invalid(format!("invalid JSON body: {inner}"))
    }

    fn check(self) -> Result<Vec<IngestEntry>, Invalid> {
        if self.entries.is_empty() || self.entries.len() > MAX_INGEST_ENTRIES {
            return Err(Invalid(format!(
                "entries must hold 1 to {MAX_INGEST_ENTRIES} entries"
            )));
        }
        Ok(self.entries)
    }
}

/// One entry of `POST /admin/v1/audit/logs`; `tenant_id`, `action` and `http_status` are
/// required. `created_at` defaults to now and may lie at most 5 minutes ahead.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestEntry {
    #[schema(value_type = String)]
    pub tenant_id: Uuid,
    action: String,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    model_id: Option<String>,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    gateway_id: Option<String>,
    #[serde(default)]
    ip_address: Option<String>,
    #[serde(default)]
    user_agent: Option<String>,
    #[serde(deserialize_with = "whole::number")]
    http_status: u16,
    #[serde(default, deserialize_with = "whole::optional")]
    error_code: Option<i64>,
    #[serde(default)]
    error_msg: Option<String>,
    #[serde(default)]
    duration: Option<f64>,
    #[serde(default)]
    credits_consumed: Option<f64>,
    #[serde(default)]
    balance_consumed_usd: Option<f64>,
    #[serde(default)]
    is_cache_hit: Option<bool>,
    #[serde(default)]
    #[schema(value_type = Option<Tokens>)]
    tokens: Option<IngestTokens>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    request_body: Option<Value>,
    #[serde(default)]
    response_body: Option<Value>,
    #[serde(default)]
    input_content: Option<Value>,
    #[serde(default)]
    output_content: Option<Value>,
    #[serde(default)]
    rag_query: Option<Vec<String>>,
    #[serde(default)]
    rag_results: Option<Vec<Value>>,
}

/// Token usage as ingested: the counts are whole numbers (see [`whole`]).
#[derive(Debug, Deserialize)]
struct IngestTokens {
    #[serde(deserialize_with = "whole::number")]
    prompt_tokens: u64,
    #[serde(deserialize_with = "whole::number")]
    completion_tokens: u64,
    #[serde(deserialize_with = "whole::number")]
    total_tokens: u64,
}

impl From<IngestTokens> for Tokens {
    fn from(t: IngestTokens) -> Self {
        Tokens {
            prompt_tokens: t.prompt_tokens,
            completion_tokens: t.completion_tokens,
            total_tokens: t.total_tokens,
        }
    }
}

/// Fields the interface calls numbers that hold whole numbers (`http_status`, `error_code`,
/// token counts). A whole number written with a fraction, `200.0`, is that number: encoders of
/// floats send it, JSON Schema's "integer" admits it, and search's `top_k` takes it too. A
/// fraction (`200.5`) or a value out of the field's range is refused, naming the field.
mod whole {
    use serde::de::Error;
    use serde::{Deserialize, Deserializer};

    fn of<E: Error, T: TryFrom<i128>>(n: serde_json::Number) -> Result<T, E> {
        let v = crate::wire::field::whole_number(&n)
            .ok_or_else(|| E::custom(format!("expected a whole number, got {n}")))?;
        T::try_from(v).map_err(|_| E::custom(format!("{n} is out of range")))
    }

    pub(super) fn number<'de, D: Deserializer<'de>, T: TryFrom<i128>>(d: D) -> Result<T, D::Error> {
        of(serde_json::Number::deserialize(d)?)
    }

    pub(super) fn optional<'de, D: Deserializer<'de>, T: TryFrom<i128>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Option::<serde_json::Number>::deserialize(d)?
            .map(of)
            .transpose()
    }
}

fn valid_action(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= 100
        && a.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// A RAG hit as the interface describes it: `content` a string, `similarity` a number,
/// `source` an object; other keys are the gateway's and kept.
fn rag_result_shape(r: &Value) -> bool {
    r.get("content").is_some_and(Value::is_string)
        && r.get("similarity").is_some_and(Value::is_number)
        && r.get("source").is_some_and(Value::is_object)
}

/// The detail fields the interface types, with the JSON kinds each may hold besides null.
type DetailKind = (&'static str, fn(&Value) -> bool, &'static str);

const DETAIL_KINDS: [DetailKind; 4] = [
    ("request_body", Value::is_object, "a JSON object"),
    ("response_body", Value::is_object, "a JSON object"),
    (
        "input_content",
        |v| v.is_object() || v.is_array(),
        "a JSON object, array",
    ),
    (
        "output_content",
        |v| v.is_object() || v.is_string(),
        "a string, a JSON object",
    ),
];

impl IngestEntry {
    /// The event entry `i` of a body appends as audit entry `id`, received at `now`; every
    /// refusal names `entries[i]` and the field. Whether the tenant exists is the caller's
    /// check (it needs the state).
    /// Detail fields over `body_limit` bytes of JSON (the audit body limit) are stored with
    /// their marker (`bounds::bound_detail`).
    pub fn check(
        self,
        i: usize,
        id: Uuid,
        now: i64,
        body_limit: usize,
    ) -> Result<AuditRecorded, Invalid> {
        let named = |Invalid(msg)| Invalid(format!("entries[{i}]: {msg}"));
        let created_at = self.check_entry(now).map_err(named)?;
        self.check_detail().map_err(named)?;
        Ok(self.recorded(id, created_at, body_limit))
    }

    /// The entry's own fields; returns its time (now when not given).
    fn check_entry(&self, now: i64) -> Result<i64, Invalid> {
        if !valid_action(&self.action) {
            return Err(Invalid::new(
                "action must be a dotted name such as gateway.chat",
            ));
        }
        for (field, v, max) in [
            ("model_id", &self.model_id, bounds::ID_TEXT_MAX),
            ("project_id", &self.project_id, bounds::ID_TEXT_MAX),
            ("gateway_id", &self.gateway_id, bounds::ID_TEXT_MAX),
            ("user_agent", &self.user_agent, bounds::USER_AGENT_MAX),
            ("error_msg", &self.error_msg, bounds::ERROR_MSG_MAX),
        ] {
            if let Some(n) = v.as_ref().map(String::len).filter(|&n| n > max) {
                return Err(bounds::too_long(field, n, max));
            }
        }
        if let Some(ip) = self.ip_address.as_deref().filter(|s| !s.is_empty()) {
            if ip.parse::<std::net::IpAddr>().is_err() {
                return Err(Invalid::new(
                    "ip_address must be an IPv4 or IPv6 address (such as 203.0.113.7 or 2001:db8::1)",
                ));
            }
        }
        if !(100..=599).contains(&self.http_status) {
            return Err(Invalid::new(
                "http_status must be an HTTP status code (100 to 599)",
            ));
        }
        let created_at = match &self.created_at {
            None => now,
            Some(s) => parse_time("created_at", s)?,
        };
        if created_at > now + CLOCK_SKEW_MICROS {
            return Err(Invalid::new(
                "created_at is more than 5 minutes in the future",
            ));
        }
        for (field, v) in [
            ("duration", self.duration),
            ("credits_consumed", self.credits_consumed),
            ("balance_consumed_usd", self.balance_consumed_usd),
        ] {
            if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
                return Err(Invalid(format!("{field} must be a number of at least 0")));
            }
        }
        if let Some(m) = &self.metadata {
            if !m.is_object() {
                return Err(Invalid::new("metadata must be a JSON object"));
            }
            let n = bounds::json_len(m);
            if n > bounds::METADATA_MAX {
                return Err(bounds::too_long("metadata", n, bounds::METADATA_MAX));
            }
        }
        Ok(created_at)
    }

    /// The detail fields hold the kinds the interface gives them.
    fn check_detail(&self) -> Result<(), Invalid> {
        let given = [
            &self.request_body,
            &self.response_body,
            &self.input_content,
            &self.output_content,
        ];
        for ((field, fits, kinds), v) in DETAIL_KINDS.iter().zip(given) {
            if v.as_ref().is_some_and(|v| !fits(v)) {
                return Err(Invalid(format!("{field} must be {kinds} or null")));
            }
        }
        match self
            .rag_results
            .iter()
            .flatten()
            .position(|r| !rag_result_shape(r))
        {
            Some(i) => Err(Invalid(format!(
                "rag_results[{i}] must be an object with content (string), similarity (number) and source (object)"
            ))),
            None => Ok(()),
        }
    }

    /// The checked entry as the event that records it: its detail bounded and hashed.
    fn recorded(self, id: Uuid, created_at: i64, body_limit: usize) -> AuditRecorded {
        let e = self;
        // Empty strings are stored as null: an export cell cannot tell the two apart.
        let text = |v: Option<String>| v.filter(|s| !s.is_empty());
        let mut detail = AuditDetail {
            request_body: e.request_body,
            response_body: e.response_body,
            input_content: e.input_content,
            output_content: e.output_content,
            rag_query: e.rag_query,
            rag_results: e.rag_results,
            memory_query: None,
            memory_results: None,
            response_json: None,
            response_ref: None,
        };
        bounds::bound_detail(&mut detail, body_limit);
        AuditRecorded {
            tenant_id: e.tenant_id,
            entry: AuditEntry {
                id,
                action: e.action,
                model_id: text(e.model_id),
                project_id: text(e.project_id),
                gateway_id: text(e.gateway_id),
                ip_address: text(e.ip_address),
                user_agent: text(e.user_agent),
                http_status: e.http_status,
                is_success: (200..300).contains(&e.http_status),
                is_cache_hit: e.is_cache_hit.unwrap_or(false),
                error_code: e.error_code,
                error_msg: text(e.error_msg),
                duration: e.duration,
                credits_consumed: e.credits_consumed.unwrap_or(0.0),
                balance_consumed_usd: e.balance_consumed_usd.unwrap_or(0.0),
                tokens: e.tokens.map(Tokens::from),
                metadata: e.metadata,
                created_at: millis_floor(created_at),
                detail_hash: Some(detail_hash(&detail)),
            },
            detail,
        }
    }
}

/// The ids of the entries an ingestion call appended, in the order given.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ingested {
    #[schema(value_type = Vec<String>)]
    pub ids: Vec<Uuid>,
}

impl Payload for Ingested {}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// An entry with every kind of cell (text needing CSV quoting, nulls, nested objects,
    /// small floats) and its ref; shared with the export rows' tests.
    pub(crate) fn sample() -> (AuditEntry, AuditRef) {
        let entry = AuditEntry {
            id: Uuid::now_v7(),
            action: "gateway.chat".into(),
            model_id: Some("m, \"quoted\"".into()),
            project_id: None,
            gateway_id: Some("g\nline".into()),
            ip_address: Some("10.0.0.1".into()),
            user_agent: None,
            http_status: 429,
            is_success: false,
            is_cache_hit: true,
            error_code: Some(4290),
            error_msg: Some("slow down".into()),
            duration: Some(100.0),
            credits_consumed: 0.25,
            balance_consumed_usd: 1e-7,
            tokens: Some(Tokens {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
            }),
            metadata: Some(json!({"b": [1, 2.5], "a": null})),
            created_at: 1_700_000_000_123_000,
            detail_hash: Some([4; 32]),
        };
        let r = AuditRef {
            id: entry.id,
            seq: 7,
            tenant_id: Uuid::now_v7(),
            created_at: entry.created_at,
            action_key: 1,
            chain_index: 3,
            hash: [7; 32],
            prev_hash: [9; 32],
        };
        (entry, r)
    }

    #[test]
    fn a_list_item_holds_the_entry_fields_and_its_hash() {
        let (entry, r) = sample();
        let shown = serde_json::to_value(ListedEntry::new(entry.clone(), &r, true)).expect("json");
        assert_eq!(shown["hash"], json!(hex::encode([7u8; 32])));
        assert_eq!(shown["model_id"], json!("m, \"quoted\""));
        assert_eq!(shown["project_id"], Value::Null);
        assert_eq!(shown["created_at"], json!("2023-11-14T22:13:20.123Z"));
        assert_eq!(
            shown["tokens"],
            json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
        );
        assert_eq!(shown["detail_hash"], json!(hex::encode([4u8; 32])));
        assert_eq!(shown.as_object().map(|m| m.len()), Some(20));
        let hidden =
            serde_json::to_value(ListedEntry::new(entry.clone(), &r, false)).expect("json");
        assert_eq!(hidden["hash"], Value::Null);
        // An export row of a chain-showing plan adds its place in the chain; the other plans'
        // rows leave `hash` out instead of showing null.
        let row = serde_json::to_value(AuditLogEntry::exported(&entry, &r, true)).expect("json");
        assert_eq!(row["chain_index"], json!(3));
        assert_eq!(row["prev_hash"], json!(hex::encode([9u8; 32])));
        assert_eq!(row["hash"], shown["hash"]);
        let row = serde_json::to_value(AuditLogEntry::exported(&entry, &r, false)).expect("json");
        assert_eq!(row.as_object().map(|m| m.contains_key("hash")), Some(false));
        assert_eq!(row.as_object().map(|m| m.len()), Some(19));
    }

    /// The fields an export row of `e` holds, parsed back as `verify --export` reads them.
    fn row_fields(e: &AuditEntry, r: &AuditRef) -> serde_json::Map<String, Value> {
        let row = serde_json::to_vec(&AuditLogEntry::exported(e, r, false)).expect("json");
        serde_json::from_slice(&row).expect("parse")
    }

    #[test]
    fn the_canonical_bytes_of_an_entry_are_those_of_its_wire_form() {
        // What a tenant chain hashes (the stored entry's canonical bytes, written by hand for
        // speed) must equal what `verify --export` hashes from an exported row parsed back.
        use auditmem_projections::audit_view::{
            canonical_bytes, canonical_entry_bytes, chain_hash, chain_hash_fields,
        };
        let (mut e, r) = sample();
        for change in 0..4 {
            match change {
                // An entry of rule v1: its row's `detail_hash` is null, hashed as no field.
                3 => e.detail_hash = None,
                1 => {
                    e.error_msg = Some("quote \" and \n newline, unicode é".into());
                    e.metadata = None;
                    e.tokens = None;
                    e.ip_address = Some("::1".into());
                }
                2 => e.metadata = Some(json!({"b": 1, "a": {"z": 1, "y": 2}})),
                _ => {}
            }
            let fields = row_fields(&e, &r);
            assert_eq!(
                canonical_bytes(&fields),
                canonical_entry_bytes(&e),
                "{change}"
            );
            assert_eq!(
                chain_hash_fields(&[3; 32], &fields),
                chain_hash(&[3; 32], &e)
            );
        }
        let text = String::from_utf8(canonical_entry_bytes(&e)).expect("utf8");
        assert!(
            text.starts_with("{\"action\":\"gateway.chat\",\"balance_consumed_usd\":1e-7,"),
            "{text}"
        );
        assert!(
            text.contains("\"metadata\":{\"a\":{\"y\":2,\"z\":1},\"b\":1}"),
            "{text}"
        );
    }

    #[test]
    fn cursors_round_trip_and_forgeries_are_refused() {
        let c = Cursor {
            created_at: -5,
            seq: 7,
            snapshot: 9,
        };
        assert_eq!(Cursor::decode(&c.encode()), Ok(c));
        for bad in ["", "!!", "MS4y", "MS4yLjMuNA"] {
            assert!(Cursor::decode(bad).is_err(), "{bad}");
        }
    }
}
