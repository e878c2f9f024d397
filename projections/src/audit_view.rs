//! How an audit entry looks on the wire, the per-tenant chain over it, and the digest of its
//! detail.
//!
//! The per-tenant chain hashes the canonical bytes of the list item without `hash`: the JSON
//! object of the entry's interface fields with keys in lexicographic order (nested objects
//! too), compact, times in RFC 3339 UTC with milliseconds, numbers as serde_json writes them.
//! An exported row carries the same fields, so a tenant can recompute its chain from an export
//! without anything else from us. Three rules ([`ChainRule`]), told apart by the entry itself:
//!
//! - **v1**, an entry without `detail_hash` (written before the detail was hashed):
//!   `blake3("auditmem/tenant-chain/v1" || prev || canonical bytes)`;
//! - **v2**, an entry with `detail_hash`: `blake3("auditmem/tenant-chain/v2" || prev ||
//!   canonical bytes)`, `detail_hash` among the hashed fields, so the chain commits to the
//!   detail too.
//!
//! - **v3**, a sealed entry (its personal fields stored only sealed; its list item and export
//!   row say `"sealed": true`): `blake3("auditmem/tenant-chain/v3" || prev || canonical
//!   bytes)` over the clear fields only: the personal ones (`ip_address`, `user_agent`,
//!   `error_msg`, `metadata`) and `erased` are left out, `sealed` and `detail_hash` are in. So
//!   the chain is the same before and after the entry is erased.
//!
//! `detail_hash` of v2: `blake3("auditmem/detail/v1" || canonical bytes of the detail)`
//! ([`detail_hash`]): the detail fields as a detail read shows them, with the response's
//! reference in place of its body when it was recorded by reference.
//!
//! `detail_hash` of v3: `blake3::keyed_hash(salt, canonical bytes of the personal fields)`
//! ([`personal_hash`]): the entry's four personal fields and the detail fields, keys sorted, as
//! a detail read shows them; `salt` is 32 random bytes sealed with them, shown by a detail read
//! as `detail_salt`. Without the salt (erased with the key) the hash confirms no guess.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::event::{AuditDetail, AuditEntry, AuditPersonal, PersonalFields};

/// The domain of chain rule v1 (entries without `detail_hash`).
pub const TENANT_CHAIN_DOMAIN: &[u8] = b"auditmem/tenant-chain/v1";
/// The domain of chain rule v2 (entries with `detail_hash`).
pub const TENANT_CHAIN_DOMAIN_V2: &[u8] = b"auditmem/tenant-chain/v2";
/// The domain of chain rule v3 (sealed entries).
pub const TENANT_CHAIN_DOMAIN_V3: &[u8] = b"auditmem/tenant-chain/v3";
/// The fields of an entry that a sealed entry holds only sealed, which rule v3 does not hash.
pub const PERSONAL_ENTRY_FIELDS: [&str; 4] = ["error_msg", "ip_address", "metadata", "user_agent"];
/// The domain of an entry's detail digest.
pub const DETAIL_DOMAIN: &[u8] = b"auditmem/detail/v1";

/// Which rule hashed an entry into its tenant chain: v3 when it is sealed, else v2 when it
/// carries a `detail_hash`, else v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainRule {
    V1,
    V2,
    V3,
}

impl ChainRule {
    /// The rule of a stored entry; `sealed`: whether its record holds a sealed part.
    pub fn of(entry: &AuditEntry, sealed: bool) -> Self {
        if sealed {
            ChainRule::V3
        } else if entry.detail_hash.is_some() {
            ChainRule::V2
        } else {
            ChainRule::V1
        }
    }

    /// The rule of an entry given as its fields (an export row, a list item): v3 when
    /// `sealed` is true; else v1 when `detail_hash` is absent or null (a CSV cell cannot tell
    /// the two apart, and v1 entries have neither), v2 otherwise.
    pub fn of_fields(fields: &Map<String, Value>) -> Self {
        if fields.get("sealed") == Some(&Value::Bool(true)) {
            return ChainRule::V3;
        }
        match fields.get("detail_hash") {
            None | Some(Value::Null) => ChainRule::V1,
            Some(_) => ChainRule::V2,
        }
    }

    pub fn domain(self) -> &'static [u8] {
        match self {
            ChainRule::V1 => TENANT_CHAIN_DOMAIN,
            ChainRule::V2 => TENANT_CHAIN_DOMAIN_V2,
            ChainRule::V3 => TENANT_CHAIN_DOMAIN_V3,
        }
    }
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-22T01:02:03.456Z`.
pub fn format_time(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Lower-case hex of a hash, as lists and exports show it. blake3's table-driven encoder:
/// `hex::encode` builds the string a char at a time, and an export writes hashes on every row.
pub fn hash_hex(h: &[u8; 32]) -> String {
    blake3::Hash::from_bytes(*h).to_hex().to_string()
}

/// Truncates to whole milliseconds, the precision the interface shows. The floor of the
/// few times within a millisecond of `i64::MIN` is not representable: they stay `i64::MIN`.
pub fn millis_floor(micros: i64) -> i64 {
    micros.saturating_sub(micros.rem_euclid(1000))
}

/// Canonical bytes of a field map (keys sorted, `hash` left out; a v1 entry's null or absent
/// `detail_hash` left out too, as its rule hashed no such field; a v3 entry's personal fields
/// and `erased` left out, as its rule hashes only what stays clear; a v1 or v2 entry's false
/// or null `sealed`, which rows of a file mixing rules may carry, left out too).
pub fn canonical_bytes(fields: &Map<String, Value>) -> Vec<u8> {
    let rule = ChainRule::of_fields(fields);
    let hashed = |k: &str| match rule {
        ChainRule::V1 => !matches!(k, "hash" | "detail_hash" | "sealed" | "erased"),
        ChainRule::V2 => !matches!(k, "hash" | "sealed" | "erased"),
        ChainRule::V3 => k != "hash" && k != "erased" && !PERSONAL_ENTRY_FIELDS.contains(&k),
    };
    let mut sorted: Vec<(&String, &Value)> =
        fields.iter().filter(|(k, _)| hashed(k.as_str())).collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(512);
    out.push(b'{');
    for (i, (k, v)) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, k);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, &Canonical(v));
    }
    out.push(b'}');
    out
}

/// A JSON value written with the keys of every object in lexicographic order, so the bytes do
/// not depend on the map implementation or on the order a client sent them in; written
/// straight to the output, without a sorted copy of the tree.
pub struct Canonical<'a>(pub &'a Value);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort_unstable();
                let mut map = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    map.serialize_entry(k, &Canonical(&m[k]))?;
                }
                map.end()
            }
            Value::Array(a) => CanonicalSeq(a).serialize(s),
            other => other.serialize(s),
        }
    }
}

/// `blake3(domain of the row's rule || prev || canonical bytes)`: the chain hash of an entry
/// given as its fields (what `verify --export` checks a row with).
pub fn chain_hash_fields(prev: &[u8; 32], fields: &Map<String, Value>) -> [u8; 32] {
    chain_hash_canonical(ChainRule::of_fields(fields), prev, &canonical_bytes(fields))
}

/// The chain hash of a stored entry: the same bytes as [`chain_hash_fields`] over the entry as
/// an export row shows it (the service's tests hold the two together), written field by field in
/// key order without building a JSON map, since this runs once per audit event on the appender's
/// path and in replay. It is the chain's format: a change to it breaks every stored chain.
/// `sealed`: whether the entry's record holds a sealed part (rule v3).
pub fn chain_hash(prev: &[u8; 32], entry: &AuditEntry, sealed: bool) -> [u8; 32] {
    chain_hash_canonical(
        ChainRule::of(entry, sealed),
        prev,
        &canonical_entry_bytes(entry, sealed),
    )
}

/// The chain hash from an entry's canonical bytes computed beforehand (replay computes them
/// on every core; only the linking is sequential).
pub fn chain_hash_canonical(rule: ChainRule, prev: &[u8; 32], canonical: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(rule.domain());
    h.update(prev);
    h.update(canonical);
    *h.finalize().as_bytes()
}

/// Canonical bytes of an entry's fields, keys in lexicographic order; `detail_hash` (lower-case
/// hex) only on entries that have one (rules v2 and v3); on a sealed entry (rule v3) no
/// personal field, and `"sealed":true`.
pub fn canonical_entry_bytes(e: &AuditEntry, sealed: bool) -> Vec<u8> {
    /// `,"key":` (`{"key":` first), then the caller writes the value.
    fn key(out: &mut Vec<u8>, first: bool, key: &str) {
        out.extend_from_slice(if first { b"{\"" } else { b",\"" });
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
    }
    fn field<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, first: bool, name: &str, v: &T) {
        key(out, first, name);
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, v);
    }
    /// A value that needs no escaping (hex digits, hyphens, a time), quoted.
    fn plain(out: &mut Vec<u8>, name: &str, v: &[u8]) {
        key(out, false, name);
        out.push(b'"');
        out.extend_from_slice(v);
        out.push(b'"');
    }
    // The strings and the metadata, the only values of unbounded length, plus room for the rest
    // (~300 bytes): one allocation, never grown.
    let strings = [&e.model_id, &e.project_id, &e.gateway_id]
        .iter()
        .filter_map(|s| s.as_ref().map(String::len))
        .sum::<usize>();
    let mut out = Vec::with_capacity(384 + e.action.len() + strings + if sealed { 0 } else { 256 });
    field(&mut out, true, "action", &e.action);
    field(
        &mut out,
        false,
        "balance_consumed_usd",
        &e.balance_consumed_usd,
    );
    let mut time = [0u8; TIME_LEN];
    match write_time(&mut time, e.created_at) {
        Some(t) => plain(&mut out, "created_at", t),
        None => field(&mut out, false, "created_at", &format_time(e.created_at)),
    }
    field(&mut out, false, "credits_consumed", &e.credits_consumed);
    if let Some(d) = &e.detail_hash {
        plain(
            &mut out,
            "detail_hash",
            blake3::Hash::from_bytes(*d).to_hex().as_bytes(),
        );
    }
    field(&mut out, false, "duration", &e.duration);
    field(&mut out, false, "error_code", &e.error_code);
    if !sealed {
        field(&mut out, false, "error_msg", &e.error_msg);
    }
    field(&mut out, false, "gateway_id", &e.gateway_id);
    field(&mut out, false, "http_status", &e.http_status);
    plain(
        &mut out,
        "id",
        e.id.hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer())
            .as_bytes(),
    );
    if !sealed {
        field(&mut out, false, "ip_address", &e.ip_address);
    }
    field(&mut out, false, "is_cache_hit", &e.is_cache_hit);
    field(&mut out, false, "is_success", &e.is_success);
    if !sealed {
        match &e.metadata {
            Some(m) => field(&mut out, false, "metadata", &Canonical(m)),
            None => field(&mut out, false, "metadata", &Value::Null),
        }
    }
    field(&mut out, false, "model_id", &e.model_id);
    field(&mut out, false, "project_id", &e.project_id);
    if sealed {
        field(&mut out, false, "sealed", &true);
    }
    match &e.tokens {
        // Its keys in order, as `Canonical` of its JSON object writes them.
        Some(t) => {
            key(&mut out, false, "tokens");
            out.push(b'{');
            for (name, v) in [
                ("\"completion_tokens\":", t.completion_tokens),
                (",\"prompt_tokens\":", t.prompt_tokens),
                (",\"total_tokens\":", t.total_tokens),
            ] {
                out.extend_from_slice(name.as_bytes());
                let _ = serde_json::to_writer(&mut out, &v);
            }
            out.push(b'}');
        }
        None => field(&mut out, false, "tokens", &Value::Null),
    }
    if !sealed {
        field(&mut out, false, "user_agent", &e.user_agent);
    }
    out.push(b'}');
    out
}

/// Bytes of a time as [`format_time`] writes one of the years 0 to 9999.
const TIME_LEN: usize = "2026-11-22T01:02:03.456Z".len();

/// Writes `micros` as [`format_time`] does into `buf`, without a `String`: each chained entry
/// writes its time. `None` for a time it does not cover (before year 0, after 9999, or out of
/// chrono's range), which [`format_time`] then writes.
fn write_time(buf: &mut [u8; TIME_LEN], micros: i64) -> Option<&[u8]> {
    use chrono::{Datelike, Timelike};
    let t = DateTime::<Utc>::from_timestamp_micros(micros)?;
    let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
    // Within a leap second chrono counts nanoseconds past 999,999,999: its millis go past 999.
    let millis = t.timestamp_subsec_millis();
    if millis > 999 {
        return None;
    }
    fn digits(out: &mut [u8], mut v: u32) {
        for d in out.iter_mut().rev() {
            *d = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    digits(&mut buf[0..4], year);
    buf[4] = b'-';
    digits(&mut buf[5..7], t.month());
    buf[7] = b'-';
    digits(&mut buf[8..10], t.day());
    buf[10] = b'T';
    digits(&mut buf[11..13], t.hour());
    buf[13] = b':';
    digits(&mut buf[14..16], t.minute());
    buf[16] = b':';
    digits(&mut buf[17..19], t.second());
    buf[19] = b'.';
    digits(&mut buf[20..23], millis);
    buf[23] = b'Z';
    Some(&buf[..])
}

/// The response as a detail read shows it, for the digest: the stored text parsed (as the
/// tenant parses the body it reads), else the stored value.
fn shown_response(d: &AuditDetail) -> Option<Value> {
    match &d.response_json {
        Some(_) => d.response_body_value(),
        None => d.response_body.clone(),
    }
}

/// Canonical bytes of an entry's detail: the JSON object of `request_body`, `input_content`,
/// `output_content`, `rag_query`, `rag_results`, `memory_query`, `memory_results` and either
/// `response_body` (recorded by value) or `response_ref` (recorded by reference: the body is
/// rendered from it and from entries each covered by their own chain hash), keys sorted at
/// every level as in [`canonical_bytes`].
pub fn canonical_detail_bytes(d: &AuditDetail) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical_detail(&mut out, d);
    out
}

fn write_canonical_detail<W: std::io::Write>(out: &mut W, d: &AuditDetail) {
    write_canonical_fields(out, d, None)
}

/// The detail's fields, and with `personal` the entry's personal ones too, as one canonical
/// object.
fn write_canonical_fields<W: std::io::Write>(
    out: &mut W,
    d: &AuditDetail,
    personal: Option<&PersonalFields>,
) {
    /// `,"key":` then the value (`null` for none). Writes to a Vec or a hasher cannot fail.
    fn field<W: std::io::Write, T: Serialize>(out: &mut W, first: bool, key: &str, v: Option<T>) {
        let _ = out.write_all(if first { b"{\"" } else { b",\"" });
        let _ = out.write_all(key.as_bytes());
        let _ = out.write_all(b"\":");
        let _ = serde_json::to_writer(&mut *out, &v);
    }
    fn value(v: &Option<Value>) -> Option<Canonical<'_>> {
        v.as_ref().map(Canonical)
    }
    if let Some(p) = personal {
        field(out, true, "error_msg", p.error_msg.as_ref());
    }
    field(
        out,
        personal.is_none(),
        "input_content",
        value(&d.input_content),
    );
    if let Some(p) = personal {
        field(out, false, "ip_address", p.ip_address.as_ref());
    }
    field(out, false, "memory_query", d.memory_query.as_ref());
    field(
        out,
        false,
        "memory_results",
        d.memory_results.as_deref().map(CanonicalSeq),
    );
    if let Some(p) = personal {
        field(out, false, "metadata", value(&p.metadata));
    }
    field(out, false, "output_content", value(&d.output_content));
    field(out, false, "rag_query", d.rag_query.as_ref());
    field(
        out,
        false,
        "rag_results",
        d.rag_results.as_deref().map(CanonicalSeq),
    );
    field(out, false, "request_body", value(&d.request_body));
    match &d.response_ref {
        None => field(
            out,
            false,
            "response_body",
            shown_response(d).as_ref().map(Canonical),
        ),
        Some(r) => {
            // A reference is plain data (numbers, strings, arrays): it always has a JSON form.
            let v = serde_json::to_value(r).unwrap_or(Value::Null);
            field(out, false, "response_ref", Some(Canonical(&v)))
        }
    }
    if let Some(p) = personal {
        field(out, false, "user_agent", p.user_agent.as_ref());
    }
    let _ = out.write_all(b"}");
}

/// Canonical bytes of a sealed entry's personal part: the JSON object of `error_msg`,
/// `ip_address`, `metadata`, `user_agent` and every detail field as in
/// [`canonical_detail_bytes`], keys sorted at every level.
pub fn canonical_personal_bytes(p: &AuditPersonal) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical_fields(&mut out, &p.detail, Some(&p.fields));
    out
}

/// The `detail_hash` of a sealed entry (rule v3): `blake3::keyed_hash(salt,
/// canonical_personal_bytes)`.
pub fn personal_hash(p: &AuditPersonal) -> [u8; 32] {
    let mut h = blake3::Hasher::new_keyed(&p.fields.salt);
    write_canonical_fields(&mut Buffered::new(&mut h), &p.detail, Some(&p.fields));
    *h.finalize().as_bytes()
}

/// A hasher fed through a buffer: the canonical writers hand serde_json's output over in
/// pieces of a few bytes, and a blake3 update costs tens of nanoseconds whatever its size (a
/// third of an ingested entry's hashing went on them). Flushed when dropped; writes to a
/// hasher cannot fail.
struct Buffered<'a> {
    hasher: &'a mut blake3::Hasher,
    buf: Vec<u8>,
}

impl<'a> Buffered<'a> {
    /// blake3 hashes in chunks of 1 KiB: a buffer of a few of them is updated whole.
    const CAPACITY: usize = 4096;

    fn new(hasher: &'a mut blake3::Hasher) -> Self {
        Buffered {
            hasher,
            buf: Vec::with_capacity(Self::CAPACITY),
        }
    }
}

impl std::io::Write for Buffered<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + bytes.len() > Self::CAPACITY {
            self.flush()?;
        }
        if bytes.len() >= Self::CAPACITY {
            self.hasher.update(bytes);
        } else {
            self.buf.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.hasher.update(&self.buf);
        self.buf.clear();
        Ok(())
    }
}

impl Drop for Buffered<'_> {
    fn drop(&mut self) {
        self.hasher.update(&self.buf);
    }
}

/// An array of JSON values written as [`Canonical`] writes each.
struct CanonicalSeq<'a>(&'a [Value]);

impl Serialize for CanonicalSeq<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for v in self.0 {
            seq.serialize_element(&Canonical(v))?;
        }
        seq.end()
    }
}

/// The digest of an entry's detail that its `detail_hash` holds:
/// `blake3("auditmem/detail/v1" || canonical_detail_bytes)`.
pub fn detail_hash(d: &AuditDetail) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(DETAIL_DOMAIN);
    write_canonical_detail(&mut Buffered::new(&mut h), d);
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use uuid::Uuid;

    #[test]
    fn millis_floor_rounds_down_and_never_overflows() {
        assert_eq!(millis_floor(1_234_567), 1_234_000);
        assert_eq!(millis_floor(-1), -1000);
        assert_eq!(millis_floor(-1000), -1000);
        assert_eq!(millis_floor(i64::MAX), i64::MAX - 807);
        // i64::MIN's floor is below i64::MIN: it saturates instead of overflowing.
        assert_eq!(millis_floor(i64::MIN), i64::MIN);
        assert_eq!(millis_floor(i64::MIN + 192), i64::MIN);
    }

    fn entry() -> AuditEntry {
        AuditEntry {
            id: Uuid::nil(),
            action: "rag.query".into(),
            model_id: None,
            project_id: None,
            gateway_id: None,
            ip_address: None,
            user_agent: None,
            http_status: 200,
            is_success: true,
            is_cache_hit: false,
            error_code: None,
            error_msg: None,
            duration: Some(12.0),
            credits_consumed: 0.5,
            balance_consumed_usd: 0.0,
            tokens: None,
            metadata: Some(json!({"b": 1, "a": {"z": 1, "y": 2}})),
            created_at: 1_763_773_323_456_789,
            detail_hash: None,
        }
    }

    #[test]
    fn time_is_millisecond_rfc3339_utc() {
        assert_eq!(
            format_time(1_763_773_323_456_789),
            "2025-11-22T01:02:03.456Z"
        );
    }

    /// The chained entries' times, written by hand, are chrono's text wherever they are
    /// written at all, and chrono's itself beyond.
    #[test]
    fn times_written_by_hand_are_those_chrono_writes() {
        let year_10000 = 253_402_300_800_000_000;
        let year_0 = -62_167_219_200_000_000;
        let mut times = vec![
            0,
            -1,
            999,
            1_000,
            1_763_773_323_456_789,
            951_782_400_000_000 - 1, // the end of 2000-02-28
            year_10000 - 1,
            year_0,
        ];
        let mut t = -70_000_000_000_000_000i64;
        while t < 300_000_000_000_000_000 {
            times.push(t);
            t += 7_777_777_777_777_777 / 1_000 + 123_457;
        }
        let mut written = 0;
        for micros in times {
            let mut buf = [0u8; TIME_LEN];
            if let Some(b) = write_time(&mut buf, micros) {
                assert_eq!(
                    std::str::from_utf8(b),
                    Ok(format_time(micros).as_str()),
                    "{micros}"
                );
                written += 1;
            }
        }
        assert!(written > 1000, "{written}");
        for beyond in [year_10000, year_0 - 1, i64::MIN, i64::MAX] {
            assert_eq!(write_time(&mut [0; TIME_LEN], beyond), None, "{beyond}");
        }
        let mut e = entry();
        e.created_at = year_10000;
        let text = String::from_utf8(canonical_entry_bytes(&e, true)).expect("utf8");
        assert!(
            text.contains(r#""created_at":"+10000-01-01T00:00:00.000Z""#),
            "{text}"
        );
    }

    #[test]
    fn tokens_are_hashed_with_their_keys_in_order() {
        use crate::event::Tokens;
        let mut e = entry();
        e.tokens = Some(Tokens {
            prompt_tokens: 12,
            completion_tokens: u64::MAX,
            total_tokens: 0,
        });
        let text = String::from_utf8(canonical_entry_bytes(&e, true)).expect("utf8");
        let want = format!(
            r#""sealed":true,"tokens":{}}}"#,
            serde_json::to_string(&Canonical(&json!(e.tokens))).expect("json")
        );
        assert!(text.ends_with(&want), "{text}");
        assert!(
            text.ends_with(r#""tokens":{"completion_tokens":18446744073709551615,"prompt_tokens":12,"total_tokens":0}}"#),
            "{text}"
        );
    }

    #[test]
    fn rule_v1_hashes_exactly_the_fields_it_always_hashed() {
        // The v1 bytes are the chain format of every entry written before `detail_hash`
        // existed: they must never change.
        let e = entry();
        let canonical = String::from_utf8(canonical_entry_bytes(&e, false)).expect("utf8");
        assert_eq!(
            canonical,
            concat!(
                r#"{"action":"rag.query","balance_consumed_usd":0.0,"#,
                r#""created_at":"2025-11-22T01:02:03.456Z","credits_consumed":0.5,"#,
                r#""duration":12.0,"error_code":null,"error_msg":null,"gateway_id":null,"#,
                r#""http_status":200,"id":"00000000-0000-0000-0000-000000000000","#,
                r#""ip_address":null,"is_cache_hit":false,"is_success":true,"#,
                r#""metadata":{"a":{"y":2,"z":1},"b":1},"model_id":null,"project_id":null,"#,
                r#""tokens":null,"user_agent":null}"#
            )
        );
        let mut h = blake3::Hasher::new();
        h.update(b"auditmem/tenant-chain/v1");
        h.update(&[4; 32]);
        h.update(canonical.as_bytes());
        assert_eq!(chain_hash(&[4; 32], &e, false), *h.finalize().as_bytes());
    }

    #[test]
    fn rule_v2_hashes_the_detail_digest_under_its_own_domain() {
        let mut e = entry();
        let mut detail = AuditDetail {
            request_body: Some(json!({"q": "x", "a": [1, {"z": 0, "b": 1}]})),
            response_json: Some(r#"{"success":true,"data":{"b":2,"a":1}}"#.into()),
            ..Default::default()
        };
        e.detail_hash = Some(detail_hash(&detail));
        let canonical = String::from_utf8(canonical_entry_bytes(&e, false)).expect("utf8");
        let shown = format!(
            r#""credits_consumed":0.5,"detail_hash":"{}","duration""#,
            hash_hex(&detail_hash(&detail))
        );
        assert!(canonical.contains(&shown), "{canonical}");
        let mut h = blake3::Hasher::new();
        h.update(b"auditmem/tenant-chain/v2");
        h.update(&[4; 32]);
        h.update(canonical.as_bytes());
        assert_eq!(chain_hash(&[4; 32], &e, false), *h.finalize().as_bytes());
        // The detail's canonical bytes: every field, keys sorted at every level, the response
        // as parsed from the text sent.
        assert_eq!(
            String::from_utf8(canonical_detail_bytes(&detail)).expect("utf8"),
            concat!(
                r#"{"input_content":null,"memory_query":null,"memory_results":null,"#,
                r#""output_content":null,"rag_query":null,"rag_results":null,"#,
                r#""request_body":{"a":[1,{"b":1,"z":0}],"q":"x"},"#,
                r#""response_body":{"data":{"a":1,"b":2},"success":true}}"#
            )
        );
        let mut h = blake3::Hasher::new();
        h.update(b"auditmem/detail/v1");
        h.update(&canonical_detail_bytes(&detail));
        assert_eq!(detail_hash(&detail), *h.finalize().as_bytes());
        // Any change to the detail changes the digest.
        let before = detail_hash(&detail);
        detail.memory_query = Some(vec!["q".into()]);
        assert_ne!(detail_hash(&detail), before);
    }

    #[test]
    fn a_row_tells_its_rule_by_its_detail_hash() {
        let mut fields = Map::new();
        fields.insert("action".into(), json!("a"));
        let v1 = chain_hash_fields(&[0; 32], &fields);
        // A null `detail_hash` (a v1 row of a CSV export, read back) is no field at all.
        fields.insert("detail_hash".into(), Value::Null);
        assert_eq!(chain_hash_fields(&[0; 32], &fields), v1);
        let mut h = blake3::Hasher::new();
        h.update(TENANT_CHAIN_DOMAIN);
        h.update(&[0; 32]);
        h.update(br#"{"action":"a"}"#);
        assert_eq!(v1, *h.finalize().as_bytes());
        fields.insert("detail_hash".into(), json!("ab"));
        let mut h = blake3::Hasher::new();
        h.update(TENANT_CHAIN_DOMAIN_V2);
        h.update(&[0; 32]);
        h.update(br#"{"action":"a","detail_hash":"ab"}"#);
        assert_eq!(
            chain_hash_fields(&[0; 32], &fields),
            *h.finalize().as_bytes()
        );
    }

    #[test]
    fn chain_depends_on_prev_and_content() {
        let e = entry();
        let h1 = chain_hash(&[0; 32], &e, false);
        assert_ne!(h1, chain_hash(&[1; 32], &e, false));
        let mut e2 = e.clone();
        e2.http_status = 500;
        assert_ne!(h1, chain_hash(&[0; 32], &e2, false));
    }

    #[test]
    fn rule_v3_hashes_the_clear_fields_and_a_salted_digest_of_the_personal_ones() {
        let mut e = entry();
        let personal = AuditPersonal {
            fields: PersonalFields {
                salt: [9; 32],
                ip_address: Some("10.0.0.1".into()),
                user_agent: Some("ua".into()),
                error_msg: Some("bad".into()),
                metadata: e.metadata.take(),
            },
            detail: AuditDetail {
                memory_query: Some(vec!["078-05-1120".into()]),
                ..Default::default()
            },
        };
        e.detail_hash = Some(personal_hash(&personal));
        // The stored entry's canonical bytes: no personal field, `sealed` and `detail_hash`.
        let canonical = String::from_utf8(canonical_entry_bytes(&e, true)).expect("utf8");
        assert_eq!(
            canonical,
            format!(
                concat!(
                    r#"{{"action":"rag.query","balance_consumed_usd":0.0,"#,
                    r#""created_at":"2025-11-22T01:02:03.456Z","credits_consumed":0.5,"#,
                    r#""detail_hash":"{}","duration":12.0,"error_code":null,"#,
                    r#""gateway_id":null,"http_status":200,"#,
                    r#""id":"00000000-0000-0000-0000-000000000000","is_cache_hit":false,"#,
                    r#""is_success":true,"model_id":null,"project_id":null,"sealed":true,"#,
                    r#""tokens":null}}"#
                ),
                hash_hex(&personal_hash(&personal))
            )
        );
        let mut h = blake3::Hasher::new();
        h.update(b"auditmem/tenant-chain/v3");
        h.update(&[4; 32]);
        h.update(canonical.as_bytes());
        let want = *h.finalize().as_bytes();
        assert_eq!(chain_hash(&[4; 32], &e, true), want);
        // A list item shows the personal fields opened, or null and `erased` once erased:
        // recomputed from either, the chain hash is the same.
        let mut item: Map<String, Value> = serde_json::from_str(&canonical).expect("json");
        item.insert("ip_address".into(), json!("10.0.0.1"));
        item.insert("user_agent".into(), json!("ua"));
        item.insert("error_msg".into(), json!("bad"));
        item.insert("metadata".into(), json!({"a": 1}));
        assert_eq!(ChainRule::of_fields(&item), ChainRule::V3);
        assert_eq!(chain_hash_fields(&[4; 32], &item), want);
        for f in PERSONAL_ENTRY_FIELDS {
            item.insert(f.into(), Value::Null);
        }
        item.insert("erased".into(), json!(true));
        assert_eq!(chain_hash_fields(&[4; 32], &item), want);
        // A clear field changed is seen.
        item.insert("http_status".into(), json!(500));
        assert_ne!(chain_hash_fields(&[4; 32], &item), want);

        // The digest: keyed with the salt over the personal fields and the detail, keys
        // sorted; the right salt checks a read, another does not.
        let bytes = String::from_utf8(canonical_personal_bytes(&personal)).expect("utf8");
        assert_eq!(
            bytes,
            concat!(
                r#"{"error_msg":"bad","input_content":null,"ip_address":"10.0.0.1","#,
                r#""memory_query":["078-05-1120"],"memory_results":null,"#,
                r#""metadata":{"a":{"y":2,"z":1},"b":1},"output_content":null,"#,
                r#""rag_query":null,"rag_results":null,"request_body":null,"#,
                r#""response_body":null,"user_agent":"ua"}"#
            )
        );
        assert_eq!(
            personal_hash(&personal),
            *blake3::keyed_hash(&[9; 32], bytes.as_bytes()).as_bytes()
        );
        assert_ne!(
            personal_hash(&personal),
            *blake3::keyed_hash(&[8; 32], bytes.as_bytes()).as_bytes()
        );
        // Without the salt, a guess of the value cannot be checked against the digest.
        let unsalted = blake3::hash(bytes.as_bytes());
        assert_ne!(personal_hash(&personal), *unsalted.as_bytes());
    }
    /// The digests are of the canonical bytes exactly, whatever pieces the writers hand the
    /// hasher's buffer: details below, at and far past its size.
    #[test]
    fn the_digests_hash_the_canonical_bytes_at_every_size() {
        for n in [0, 1, 4000, 4090, 4096, 5000, 20_000, 100_000] {
            let detail = AuditDetail {
                request_body: Some(json!({"content": "x".repeat(n), "n": n})),
                memory_query: Some(vec!["q".repeat(n / 3), "r".into()]),
                output_content: Some(json!("y".repeat(n / 2))),
                ..Default::default()
            };
            let mut h = blake3::Hasher::new();
            h.update(DETAIL_DOMAIN);
            h.update(&canonical_detail_bytes(&detail));
            assert_eq!(detail_hash(&detail), *h.finalize().as_bytes(), "{n}");
            let personal = AuditPersonal {
                fields: PersonalFields {
                    salt: [3; 32],
                    ip_address: Some("10.0.0.1".into()),
                    user_agent: Some("u".repeat(n / 4)),
                    error_msg: None,
                    metadata: Some(json!({"k": "m".repeat(n / 5)})),
                },
                detail,
            };
            assert_eq!(
                personal_hash(&personal),
                *blake3::keyed_hash(&[3; 32], &canonical_personal_bytes(&personal)).as_bytes(),
                "{n}"
            );
        }
    }
}
