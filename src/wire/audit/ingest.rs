//! Ingestion: `POST /admin/v1/audit/logs`, the gateway's entries and their checks.

use auditmem_projections::audit_view::millis_floor;
use auditmem_projections::{AuditDetail, AuditEntry, AuditRecorded, Tokens};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{
    ArrayBuilder, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::bounds;
use crate::wire::envelope::Payload;
use crate::wire::field::{Check, Field, Invalid};
use crate::wire::time::{parse_time, CLOCK_SKEW_MICROS};
use crate::wire::{Body, Refusal};

/// `POST /admin/v1/audit/logs`: 1 to 1,000 entries, appended atomically.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    #[schema(inline)]
    pub entries: Field<Entries>,
}

/// Entries one ingestion call holds, at least and at most.
pub const MIN_INGEST_ENTRIES: usize = 1;
pub const MAX_INGEST_ENTRIES: usize = 1000;

/// An ingestion's entries: [`MIN_INGEST_ENTRIES`] to [`MAX_INGEST_ENTRIES`]; each is checked
/// by the handler, which knows the tenants.
#[derive(Debug)]
pub struct Entries(pub Vec<IngestEntry>);

impl Check for Entries {
    type Raw = Vec<IngestEntry>;

    fn check(raw: Vec<IngestEntry>) -> Result<Self, Invalid> {
        if !(MIN_INGEST_ENTRIES..=MAX_INGEST_ENTRIES).contains(&raw.len()) {
            return Err(Invalid(format!(
                "entries must hold {MIN_INGEST_ENTRIES} to {MAX_INGEST_ENTRIES} entries"
            )));
        }
        Ok(Entries(raw))
    }
}

impl PartialSchema for Entries {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new()
            .items(Ref::from_schema_name(IngestEntry::name()))
            .min_items(Some(MIN_INGEST_ENTRIES))
            .max_items(Some(MAX_INGEST_ENTRIES))
            .into()
    }
}

impl ToSchema for Entries {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((IngestEntry::name().into_owned(), IngestEntry::schema()));
        IngestEntry::schemas(schemas);
    }
}

impl Body for IngestRequest {
    type Checked = Vec<IngestEntry>;

    /// Names the entry as the checks do (`entries[3]: http_status: invalid type ...`).
    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        let path = e.error.path().to_string();
        let inner = e.error.into_inner();
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
        Ok(self.entries.value()?.0)
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
    #[schema(inline)]
    http_status: HttpStatus,
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

/// An entry's `http_status`: a status code, [`MIN_HTTP_STATUS`] to [`MAX_HTTP_STATUS`], read as a
/// whole number (see [`whole`]); the range is the entry's check's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct HttpStatus(#[serde(deserialize_with = "whole::number")] pub u16);

/// The status codes HTTP defines, the first and the last.
pub const MIN_HTTP_STATUS: u16 = 100;
pub const MAX_HTTP_STATUS: u16 = 599;

impl PartialSchema for HttpStatus {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
            .minimum(Some(MIN_HTTP_STATUS))
            .maximum(Some(MAX_HTTP_STATUS))
            .into()
    }
}

impl ToSchema for HttpStatus {}

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
        && a.len() <= bounds::ACTION_MAX
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
        if !(MIN_HTTP_STATUS..=MAX_HTTP_STATUS).contains(&self.http_status.0) {
            return Err(Invalid(format!(
                "http_status must be an HTTP status code ({MIN_HTTP_STATUS} to {MAX_HTTP_STATUS})"
            )));
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

    /// The checked entry as the event that records it, its detail bounded: in the clear, for
    /// the caller to seal.
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
                http_status: e.http_status.0,
                is_success: (200..300).contains(&e.http_status.0),
                is_cache_hit: e.is_cache_hit.unwrap_or(false),
                error_code: e.error_code,
                error_msg: text(e.error_msg),
                duration: e.duration,
                credits_consumed: e.credits_consumed.unwrap_or(0.0),
                balance_consumed_usd: e.balance_consumed_usd.unwrap_or(0.0),
                tokens: e.tokens.map(Tokens::from),
                metadata: e.metadata,
                created_at: millis_floor(created_at),
                // Sealing sets it, keyed with the entry's salt (`AuditRecorded::sealed_for`).
                detail_hash: None,
            },
            detail,
            sealed: None,
            sealed_detail: None,
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
