//! The audit log entry as lists, details and exports show it.

use std::borrow::Cow;

use auditmem_projections::audit_index::AuditRef;
use auditmem_projections::audit_view::hash_hex;
use auditmem_projections::event::ResponseRef;
use auditmem_projections::{AuditDetail, AuditEntry, Tokens};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use crate::wire::envelope::Payload;
use crate::wire::time::Time;

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
    /// The digest (hex) of the entry's detail, among the fields its chain `hash` covers
    /// (docs/API.md, "Per-tenant chain"): keyed with the entry's `detail_salt` on a sealed
    /// entry (rule v3), blake3 of its canonical detail on one written before sealing (rule
    /// v2); null on entries written before the detail was hashed, whose `hash` follows rule v1.
    #[schema(value_type = Option<String>)]
    pub detail_hash: Option<Hex>,
    /// `true` on an entry whose personal fields (`ip_address`, `user_agent`, `error_msg`,
    /// `metadata` and the detail) are stored sealed under its subjects' keys: its `hash`
    /// follows tenant chain rule v3, which leaves those fields out. Absent on entries that
    /// predate encryption.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<bool>)]
    pub sealed: Option<bool>,
    /// `true` when the entry's subject was erased: its personal fields are gone for good and
    /// shown as null. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<bool>)]
    pub erased: Option<bool>,
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

/// How an entry's personal fields stand: in the clear (an entry that predates encryption),
/// sealed and opened (the entry holds them again), or sealed and erased.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personal {
    Plain,
    Opened,
    Erased,
}

impl Personal {
    fn sealed(self) -> Option<bool> {
        (self != Personal::Plain).then_some(true)
    }

    fn erased(self) -> Option<bool> {
        (self == Personal::Erased).then_some(true)
    }
}

impl<'a> AuditLogEntry<'a> {
    /// `chain`: the entry's place in its chain and the hash before it.
    fn new(
        e: &'a AuditEntry,
        personal: Personal,
        chain: Option<(u64, Hex)>,
        hash: EntryHash,
    ) -> Self {
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
            sealed: personal.sealed(),
            erased: personal.erased(),
            chain_index: chain.map(|c| c.0),
            prev_hash: chain.map(|c| c.1),
            hash,
        }
    }

    /// The entry as an export row: with its place in the chain and its hash when the plan sees
    /// the chain, without either otherwise.
    pub fn exported(e: &'a AuditEntry, r: &AuditRef, with_chain: bool) -> Self {
        Self::exported_as(e, Personal::Plain, r, with_chain)
    }

    /// [`AuditLogEntry::exported`] for an entry whose personal fields stand as `personal`
    /// says.
    pub fn exported_as(
        e: &'a AuditEntry,
        personal: Personal,
        r: &AuditRef,
        with_chain: bool,
    ) -> Self {
        if with_chain {
            let place = (r.chain_index, Hex(r.prev_hash));
            Self::new(e, personal, Some(place), EntryHash::Shown(Hex(r.hash)))
        } else {
            Self::new(e, personal, None, EntryHash::LeftOut)
        }
    }
}

/// An entry as lists and details show it, owning what it shows: `hash` for plans that see the
/// chain, else null. Its schema is [`AuditLogEntry`]'s.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedEntry {
    /// The entry with its personal fields as shown (opened, or `None` when erased).
    pub entry: AuditEntry,
    pub personal: Personal,
    pub hash: Option<[u8; 32]>,
}

impl ListedEntry {
    /// An entry that predates encryption.
    pub fn new(entry: AuditEntry, r: &AuditRef, show_hash: bool) -> Self {
        Self::with(entry, Personal::Plain, r, show_hash)
    }

    /// An entry whose personal fields stand as `personal` says.
    pub fn with(entry: AuditEntry, personal: Personal, r: &AuditRef, show_hash: bool) -> Self {
        ListedEntry {
            entry,
            personal,
            hash: show_hash.then_some(r.hash),
        }
    }

    fn view(&self) -> AuditLogEntry<'_> {
        let hash = match self.hash {
            Some(h) => EntryHash::Shown(Hex(h)),
            None => EntryHash::Hidden,
        };
        AuditLogEntry::new(&self.entry, self.personal, None, hash)
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
    /// On a sealed entry not erased: the 32-byte salt (hex) its `detail_hash` is keyed with,
    /// `blake3::keyed_hash(salt, canonical personal fields)` (tenant chain rule v3), so this
    /// read can be checked against the chain. Absent otherwise: an erased entry's salt is
    /// gone with its key.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub detail_salt: Option<Hex>,
}

impl AuditLogDetail {
    /// The detail view of `entry` with its detail `d`, the response shown as `response_body`
    /// (the stored body, or the one rendered from `d.response_ref`).
    pub fn new(
        entry: ListedEntry,
        d: AuditDetail,
        response_body: Option<ShownBody>,
        detail_salt: Option<[u8; 32]>,
    ) -> Self {
        AuditLogDetail {
            detail_salt: detail_salt.map(Hex),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::audit::tests::sample;
    use serde_json::json;

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
                canonical_entry_bytes(&e, false),
                "{change}"
            );
            assert_eq!(
                chain_hash_fields(&[3; 32], &fields),
                chain_hash(&[3; 32], &e, false)
            );
        }
        let text = String::from_utf8(canonical_entry_bytes(&e, false)).expect("utf8");
        assert!(
            text.starts_with("{\"action\":\"gateway.chat\",\"balance_consumed_usd\":1e-7,"),
            "{text}"
        );
        assert!(
            text.contains("\"metadata\":{\"a\":{\"y\":2,\"z\":1},\"b\":1}"),
            "{text}"
        );
    }
}
