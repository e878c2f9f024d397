//! The audit events: an entry of the audit log, its detail, and a response recorded by
//! reference.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::seal::Sealed;

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
    /// The digest of the entry's detail its tenant chain hashes (`audit_view::ChainRule`): on
    /// a sealed entry (every entry this build writes, rule v3) keyed with the salt sealed with
    /// its personal fields (`audit_view::personal_hash`); on an entry written before sealing,
    /// blake3 of its canonical detail (`audit_view::detail_hash`, rule v2); `None` on entries
    /// written before that, whose chain hash keeps rule v1. Last and defaulted, so entries
    /// written without it decode.
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
    /// The entry's personal fields and the salt of its `detail_hash` ([`PersonalFields`],
    /// msgpack) sealed under its subjects' keys, bound to [`audit_aad`]: on every entry this
    /// build writes, whose `ip_address`, `user_agent`, `error_msg` and `metadata` are then
    /// `None`. `None` on records that predate encryption, which hold those fields in the
    /// clear. Last and defaulted, so records written without it decode.
    #[serde(default)]
    pub sealed: Option<Sealed>,
    /// The entry's detail (msgpack) sealed under the same keys, bound to
    /// [`audit_detail_aad`]; the clear `detail` is then empty. Apart from `sealed` so that a
    /// list, which shows no detail, neither reads nor decrypts one (details reach the audit
    /// body limit in each field). `None` beside `sealed` when the detail is empty (a gateway
    /// entry without bodies): there is nothing personal to seal, the clear `detail` (empty)
    /// is the detail, and an empty value's ciphertext would tell as much by its length. Last
    /// and defaulted, so records written without it decode.
    #[serde(default)]
    pub sealed_detail: Option<Sealed>,
}

/// The personal part of an audit entry: what a sealed entry holds only sealed.
///
/// Personal: what a caller or a client wrote (bodies, contents, queries, results, the
/// `X-Audit-Metadata` tags, an error message quoting input) and what identifies a person's
/// device (`ip_address`, `user_agent`). `salt` keys the entry's `detail_hash` (tenant chain
/// rule v3): gone with the key, it leaves that hash unable to confirm a guess.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditPersonal {
    pub fields: PersonalFields,
    pub detail: AuditDetail,
}

/// The personal fields of an audit entry's list item, and the salt of its `detail_hash`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersonalFields {
    #[serde(with = "serde_bytes")]
    pub salt: [u8; 32],
    pub ip_address: Option<String>,
    pub user_agent: Option<String>,
    pub error_msg: Option<String>,
    pub metadata: Option<Value>,
}

impl PersonalFields {
    /// Writes the personal fields back into `entry`, as a read shows it.
    pub fn restore_entry(&self, entry: &mut AuditEntry) {
        entry.ip_address.clone_from(&self.ip_address);
        entry.user_agent.clone_from(&self.user_agent);
        entry.error_msg.clone_from(&self.error_msg);
        entry.metadata.clone_from(&self.metadata);
    }
}

impl AuditPersonal {
    /// Moves the personal fields out of `entry` and `detail` (left `None` and empty), with a
    /// fresh random salt.
    pub fn take(entry: &mut AuditEntry, detail: &mut AuditDetail) -> AuditPersonal {
        let mut salt = [0u8; 32];
        crate::seal::fill_nonce(&mut salt);
        AuditPersonal {
            fields: PersonalFields {
                salt,
                ip_address: entry.ip_address.take(),
                user_agent: entry.user_agent.take(),
                error_msg: entry.error_msg.take(),
                metadata: entry.metadata.take(),
            },
            detail: std::mem::take(detail),
        }
    }
}

impl AuditRecorded {
    /// The entry sealed: its personal fields and its detail moved into `sealed` and
    /// `sealed_detail` under the keys of `subjects` (created when missing), its `detail_hash`
    /// the salted digest of chain rule v3 (`audit_view::personal_hash`). What every writer of
    /// audit entries stores.
    pub fn sealed_for(
        tenant_id: Uuid,
        mut entry: AuditEntry,
        mut detail: AuditDetail,
        ring: &dyn crate::seal::Keyring,
        subjects: &[crate::seal::Subject],
    ) -> Result<AuditRecorded, crate::seal::KeyError> {
        use crate::seal::KeyError;
        let personal = AuditPersonal::take(&mut entry, &mut detail);
        entry.detail_hash = Some(crate::audit_view::personal_hash(&personal));
        let encode =
            |e: rmp_serde::encode::Error| KeyError::Store(format!("encoding an entry: {e}"));
        let ids = crate::seal::sorted_ids(
            subjects
                .iter()
                .map(|s| ring.key_of(s))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let key = ring.seal_key(&ids)?.ok_or(KeyError::Destroyed)?;
        // Encoded into the buffer that is then encrypted in place and stored as the
        // ciphertext: no plaintext buffer to zero, no copy. Sized for a gateway entry's fields
        // and the tag up front, as a buffer that grows leaves copies of its start behind
        // unzeroed.
        let mut fields = Vec::with_capacity(256);
        if let Err(e) = rmp_serde::encode::write(&mut fields, &personal.fields) {
            zeroize::Zeroize::zeroize(&mut fields);
            return Err(encode(e));
        }
        // An empty detail is not sealed: an AEAD and ~60 stored bytes fewer an entry.
        let detail_bytes = if personal.detail == AuditDetail::default() {
            None
        } else {
            let mut bytes = Vec::with_capacity(1024);
            if let Err(e) = rmp_serde::encode::write(&mut bytes, &personal.detail) {
                zeroize::Zeroize::zeroize(&mut fields);
                zeroize::Zeroize::zeroize(&mut bytes);
                return Err(encode(e));
            }
            Some(bytes)
        };
        let sealed_detail = detail_bytes.map(|bytes| {
            Sealed::seal_in_place(
                &key,
                ids.clone(),
                &audit_detail_aad(tenant_id, entry.id),
                bytes,
            )
        });
        Ok(AuditRecorded {
            tenant_id,
            sealed: Some(Sealed::seal_in_place(
                &key,
                ids,
                &audit_aad(tenant_id, entry.id),
                fields,
            )),
            sealed_detail,
            entry,
            detail,
        })
    }
}

/// The associated data an entry's personal fields are sealed with: `audit/v1`, the tenant and
/// the entry id, so a sealed value moved to another entry does not open.
pub fn audit_aad(tenant_id: Uuid, entry_id: Uuid) -> [u8; 8 + 32] {
    aad(*b"audit/v1", tenant_id, entry_id)
}

/// The associated data an entry's detail is sealed with: `audit-detail/v1`, the tenant and the
/// entry id.
pub fn audit_detail_aad(tenant_id: Uuid, entry_id: Uuid) -> [u8; 15 + 32] {
    aad(*b"audit-detail/v1", tenant_id, entry_id)
}

/// `domain || tenant_id || entry_id`, on the stack (two of them an ingested entry).
fn aad<const D: usize, const N: usize>(
    domain: [u8; D],
    tenant_id: Uuid,
    entry_id: Uuid,
) -> [u8; N] {
    let mut aad = [0u8; N];
    aad[..D].copy_from_slice(&domain);
    aad[D..D + 16].copy_from_slice(tenant_id.as_bytes());
    aad[D + 16..].copy_from_slice(entry_id.as_bytes());
    aad
}

/// What an audit record opens to.
#[derive(Debug)]
pub enum Opened<T> {
    /// A record that predates encryption: its fields are all in the clear.
    Plain,
    /// A sealed record whose keys exist: its personal part.
    Open(Box<T>),
    /// A sealed record one of whose keys was destroyed: its personal part is erased.
    Erased,
}

/// Opens `sealed`, bound to `aad`, with `ring`, and decodes it as a `T`.
fn open_as<T: serde::de::DeserializeOwned>(
    ring: &dyn crate::seal::Keyring,
    sealed: Option<&Sealed>,
    aad: &[u8],
) -> Result<Opened<T>, crate::seal::KeyError> {
    let Some(sealed) = sealed else {
        return Ok(Opened::Plain);
    };
    match sealed.open_with(ring, aad)? {
        None => Ok(Opened::Erased),
        Some(bytes) => rmp_serde::from_slice(&bytes)
            .map(|p| Opened::Open(Box::new(p)))
            .map_err(|e| crate::seal::KeyError::Store(format!("a sealed audit entry: {e}"))),
    }
}

/// Opens the personal fields `sealed` of the entry `entry_id` of `tenant_id` with `ring`: what
/// a list item shows.
pub fn open_fields(
    ring: &dyn crate::seal::Keyring,
    tenant_id: Uuid,
    entry_id: Uuid,
    sealed: Option<&Sealed>,
) -> Result<Opened<PersonalFields>, crate::seal::KeyError> {
    open_as(ring, sealed, &audit_aad(tenant_id, entry_id))
}

/// Opens the whole personal part of a record: its fields and its detail. Erased when either
/// does not open.
pub fn open_personal(
    ring: &dyn crate::seal::Keyring,
    rec: &AuditRecorded,
) -> Result<Opened<AuditPersonal>, crate::seal::KeyError> {
    let (t, id) = (rec.tenant_id, rec.entry.id);
    let fields = match open_fields(ring, t, id, rec.sealed.as_ref())? {
        Opened::Plain => return Ok(Opened::Plain),
        Opened::Erased => return Ok(Opened::Erased),
        Opened::Open(f) => *f,
    };
    let detail =
        match open_as::<AuditDetail>(ring, rec.sealed_detail.as_ref(), &audit_detail_aad(t, id))? {
            Opened::Erased => return Ok(Opened::Erased),
            Opened::Open(d) => *d,
            // Sealed fields without a sealed detail: the clear detail is the detail.
            Opened::Plain => rec.detail.clone(),
        };
    Ok(Opened::Open(Box::new(AuditPersonal { fields, detail })))
}

/// The seal keys of the key sets met so far, for opening many entries at once (a list page,
/// an export): entries of one subject share a key set, whose key is derived once.
pub struct KeyCache<'a> {
    ring: &'a dyn crate::seal::Keyring,
    keys: std::collections::HashMap<Vec<crate::seal::KeyId>, Option<crate::seal::SealKey>>,
}

impl<'a> KeyCache<'a> {
    pub fn new(ring: &'a dyn crate::seal::Keyring) -> Self {
        KeyCache {
            ring,
            keys: std::collections::HashMap::new(),
        }
    }

    /// The seal key of `ids`; `None` when one of them is destroyed.
    pub fn key(
        &mut self,
        ids: &[crate::seal::KeyId],
    ) -> Result<Option<&crate::seal::SealKey>, crate::seal::KeyError> {
        if !self.keys.contains_key(ids) {
            let key = self.ring.seal_key(ids)?;
            self.keys.insert(ids.to_vec(), key);
        }
        Ok(self.keys.get(ids).and_then(Option::as_ref))
    }

    /// [`open_fields`] through the cache.
    pub fn open_fields(
        &mut self,
        tenant_id: Uuid,
        entry_id: Uuid,
        sealed: Option<&Sealed>,
    ) -> Result<Opened<PersonalFields>, crate::seal::KeyError> {
        let Some(sealed) = sealed else {
            return Ok(Opened::Plain);
        };
        let Some(key) = self.key(&sealed.keys)? else {
            return Ok(Opened::Erased);
        };
        let bytes = sealed.open(key, &audit_aad(tenant_id, entry_id))?;
        rmp_serde::from_slice(&bytes)
            .map(|p| Opened::Open(Box::new(p)))
            .map_err(|e| crate::seal::KeyError::Store(format!("a sealed audit entry: {e}")))
    }
}
