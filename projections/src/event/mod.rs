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
//!
//! This module holds the [`Event`] enum and its codec; the event structs live by domain in
//! `audit`, `tenant`, `export`, `memory`, `erasure` and `webhook`, the closed sets in `names`, all re-exported here.

mod audit;
mod erasure;
mod export;
mod memory;
mod names;
mod tenant;
mod webhook;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use audit::*;
pub use erasure::*;
pub use export::*;
pub use memory::*;
pub use names::*;
pub use tenant::*;
pub use webhook::*;

/// Version of the event wire format written by this build.
pub const EVENT_FORMAT_VERSION: u16 = 2;

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
    SubjectsErased(SubjectsErased),
    WebhookSaved(Box<WebhookSaved>),
    WebhookDeleted(WebhookDeleted),
    WebhookAttempted(Box<WebhookAttempted>),
    WebhookRedeliveryRequested(WebhookRedeliveryRequested),
    WebhookLeaseTaken(WebhookLeaseTaken),
}

/// The list fields of an audit record: its tenant, its entry (personal fields `None` when
/// sealed) and its sealed personal fields, without its detail.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditHead {
    pub tenant_id: Uuid,
    pub entry: AuditEntry,
    pub sealed: Option<crate::seal::Sealed>,
}

/// [`Event::decode_audit_head`] on the v2 layout: `Ok(None)` when the bytes are laid out
/// otherwise (the caller then decodes them whole), `Ok(Some(None))` for another event.
fn audit_head_v2(bytes: &[u8], sealed: bool) -> Result<Option<Option<AuditHead>>, EventCodecError> {
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
    let Ok(fields @ 3..) = decode::read_array_len(&mut rd) else {
        return Ok(None);
    };
    let mut de = rmp_serde::Deserializer::from_read_ref(rd);
    let tenant_id = Uuid::deserialize(&mut de)?;
    let entry = AuditEntry::deserialize(&mut de)?;
    // The sealed fields follow the detail, which a sealed record keeps empty (ten nils): read
    // past it only when the caller wants them and the record has them; the sealed detail
    // after them is left unread.
    let sealed = if sealed && fields >= 4 {
        serde::de::IgnoredAny::deserialize(&mut de)?;
        Option::<crate::seal::Sealed>::deserialize(&mut de)?
    } else {
        None
    };
    Ok(Some(Some(AuditHead {
        tenant_id,
        entry,
        sealed,
    })))
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
        // Room for a sealed audit entry (~0.9 KB) from the start: growing from rmp_serde's
        // 128 bytes copied it three times over on every ingested entry.
        let mut out = Vec::with_capacity(1024);
        rmp_serde::encode::write(&mut out, &(EVENT_FORMAT_VERSION, self))?;
        Ok(out)
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
    /// `[version, {"AuditRecorded": [tenant_id, entry, detail, sealed, sealed_detail]}]` (the
    /// last two absent on records written before sealing), so the entry is read and the rest
    /// left unread; any other layout (v1 named maps) takes the full decode.
    pub fn decode_audit_entry(bytes: &[u8]) -> Result<Option<(Uuid, AuditEntry)>, EventCodecError> {
        if let Some(head) = audit_head_v2(bytes, false)? {
            return Ok(head.map(|h| (h.tenant_id, h.entry)));
        }
        Ok(match Event::decode(bytes)? {
            Event::AuditRecorded(rec) => Some((rec.tenant_id, rec.entry)),
            _ => None,
        })
    }

    /// [`Event::decode_audit_entry`] with the record's sealed personal part, which a list item
    /// opens to show its personal fields.
    pub fn decode_audit_head(bytes: &[u8]) -> Result<Option<AuditHead>, EventCodecError> {
        if let Some(head) = audit_head_v2(bytes, true)? {
            return Ok(head);
        }
        Ok(match Event::decode(bytes)? {
            Event::AuditRecorded(rec) => Some(AuditHead {
                tenant_id: rec.tenant_id,
                entry: rec.entry,
                sealed: rec.sealed,
            }),
            _ => None,
        })
    }

    /// How the record `bytes` holds personal fields, without decoding them: `None` for an
    /// event without any (or bytes that do not decode: the verifier reports those on its own
    /// terms), `Some(None)` for an audit entry that predates encryption (in the clear),
    /// `Some(Some(keys))` for one sealed under `keys`.
    pub fn sealing_of(bytes: &[u8]) -> Option<Option<Vec<crate::seal::KeyId>>> {
        match Event::sealing_ref(bytes)? {
            None => Some(None),
            Some(keys) => Some(Some(keys.ids()?)),
        }
    }

    /// [`Event::sealing_of`] with the key ids as stored: `verify` reads every record's key set,
    /// and consecutive records (a tenant's entries) share one, so it compares their stored
    /// bytes and decodes a list only when they change.
    pub fn sealing_ref(bytes: &[u8]) -> Option<Option<KeysRef<'_>>> {
        audit_seal_parts::<false>(bytes).map(|p| p.keys)
    }

    /// [`Event::sealing_ref`] with the entry's `created_at`, for an audit record alone (`None`
    /// for any other event or bytes that do not decode): an erasure's receipt reads both of
    /// each of the tenant's entries, and this passes over the rest without decoding it.
    pub fn audit_time_and_keys(bytes: &[u8]) -> Option<AuditSealParts<'_>> {
        audit_seal_parts::<true>(bytes)
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
            Event::SubjectsErased(_) => "SubjectsErased",
            Event::WebhookSaved(_) => "WebhookSaved",
            Event::WebhookDeleted(_) => "WebhookDeleted",
            Event::WebhookAttempted(_) => "WebhookAttempted",
            Event::WebhookRedeliveryRequested(_) => "WebhookRedeliveryRequested",
            Event::WebhookLeaseTaken(_) => "WebhookLeaseTaken",
        }
    }
}

#[cfg(test)]
mod tests;

/// Moves `rd` past one msgpack value (with everything it holds), reading only its markers and
/// lengths; `None` on bytes that are not msgpack or end inside the value. `verify` passes over
/// every audit record's entry and detail this way to reach its key ids: serde's `IgnoredAny`
/// visits each of their ~35 values, several times the cost.
/// An audit record's `created_at` and how it holds its personal fields
/// ([`Event::audit_time_and_keys`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSealParts<'a> {
    /// The entry's `created_at` (0 when it was not asked for).
    pub created_at: i64,
    /// `None` for an entry that predates encryption (in the clear), else its key set.
    pub keys: Option<KeysRef<'a>>,
}

/// The parts of an audit record `bytes` that say how it is sealed, its entry's `created_at`
/// too when `TIME`; `None` for another event or bytes that do not decode. The v2 layout
/// (`[version, {"AuditRecorded": [tenant_id, entry, detail, sealed, sealed_detail]}]`) is read
/// by markers and lengths, passing over what is not wanted; any other layout (v1 named maps)
/// is decoded whole.
#[inline]
fn audit_seal_parts<const TIME: bool>(bytes: &[u8]) -> Option<AuditSealParts<'_>> {
    use rmp::decode;
    /// `AuditEntry::created_at`'s place in the entry's array (its 18th field).
    const CREATED_AT: u32 = 17;
    let mut rd = bytes;
    let v2 = (|| {
        let Ok(2) = decode::read_array_len(&mut rd) else {
            return None;
        };
        let Ok(2..) = decode::read_int::<u16, _>(&mut rd) else {
            return None;
        };
        let Ok(1) = decode::read_map_len(&mut rd) else {
            return None;
        };
        let name_len = decode::read_str_len(&mut rd).ok()?;
        let (name, rest) = rd.split_at_checked(name_len as usize)?;
        if name != b"AuditRecorded" {
            return Some(None);
        }
        let mut rd = rest;
        let fields = decode::read_array_len(&mut rd).ok()?;
        let clear = AuditSealParts {
            created_at: 0,
            keys: None,
        };
        if !TIME && fields < 4 {
            return Some(Some(clear));
        }
        let mut created_at = 0;
        skip_value(&mut rd)?;
        if TIME {
            let entry_fields = decode::read_array_len(&mut rd).ok()?;
            if entry_fields <= CREATED_AT {
                return None;
            }
            for _ in 0..CREATED_AT {
                skip_value(&mut rd)?;
            }
            created_at = decode::read_int::<i64, _>(&mut rd).ok()?;
            for _ in CREATED_AT + 1..entry_fields {
                skip_value(&mut rd)?;
            }
        } else {
            skip_value(&mut rd)?;
        }
        if fields < 4 {
            return Some(Some(AuditSealParts {
                created_at,
                ..clear
            }));
        }
        skip_value(&mut rd)?;
        // A sealed value as the service writes it: `[keys, nonce, ct]`. Its key list is
        // taken as stored; the nonce and ciphertext must be there, as a decode requires.
        if let Some((&0x93, mut sealed)) = rd.split_first() {
            let start = sealed;
            skip_value(&mut sealed)?;
            let keys = &start[..start.len() - sealed.len()];
            skip_value(&mut sealed)?;
            skip_value(&mut sealed)?;
            return Some(Some(AuditSealParts {
                created_at,
                keys: Some(KeysRef::Stored(keys)),
            }));
        }
        // Nil, or another encoding of the sealed value (named fields): decoded.
        let mut de = rmp_serde::Deserializer::from_read_ref(rd);
        let sealed = Option::<SealedKeys>::deserialize(&mut de).ok()?;
        Some(Some(AuditSealParts {
            created_at,
            keys: sealed.map(|s| KeysRef::Ids(s.keys)),
        }))
    })();
    match v2 {
        Some(found) => found,
        // Another layout (v1 named maps): decoded whole.
        None => match Event::decode(bytes).ok()? {
            Event::AuditRecorded(rec) => Some(AuditSealParts {
                created_at: if TIME { rec.entry.created_at } else { 0 },
                keys: rec.sealed.map(|s| KeysRef::Ids(s.keys)),
            }),
            _ => None,
        },
    }
}

fn skip_value(rd: &mut &[u8]) -> Option<()> {
    fn take<'a>(rd: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = rd.split_at_checked(n)?;
        *rd = rest;
        Some(head)
    }
    fn len(rd: &mut &[u8], bytes: usize) -> Option<usize> {
        let raw = take(rd, bytes)?;
        let mut n = 0usize;
        for b in raw {
            n = (n << 8) | usize::from(*b);
        }
        Some(n)
    }
    // Values still to pass over; each takes at least a byte, so more than the bytes left
    // cannot be valid (and the count cannot overflow).
    let mut pending: usize = 1;
    while pending > 0 {
        pending -= 1;
        let marker = *take(rd, 1)?.first()?;
        let (skip, values) = match marker {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * usize::from(marker & 0x0f)),
            0x90..=0x9f => (0, usize::from(marker & 0x0f)),
            0xa0..=0xbf => (usize::from(marker & 0x1f), 0),
            0xc4 | 0xd9 => (len(rd, 1)?, 0),
            0xc5 | 0xda => (len(rd, 2)?, 0),
            0xc6 | 0xdb => (len(rd, 4)?, 0),
            // ext 8/16/32: a length, then a type byte and the data.
            0xc7 => (len(rd, 1)?.checked_add(1)?, 0),
            0xc8 => (len(rd, 2)?.checked_add(1)?, 0),
            0xc9 => (len(rd, 4)?.checked_add(1)?, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            // fixext 1/2/4/8/16: a type byte and the data.
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (0, len(rd, 2)?),
            0xdd => (0, len(rd, 4)?),
            0xde => (0, len(rd, 2)?.checked_mul(2)?),
            0xdf => (0, len(rd, 4)?.checked_mul(2)?),
            // 0xc1: never used.
            _ => return None,
        };
        take(rd, skip)?;
        pending = pending.checked_add(values)?;
        if pending > rd.len() {
            return None;
        }
    }
    Some(())
}

/// The key ids a sealed audit record names ([`Event::sealing_ref`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysRef<'a> {
    /// The msgpack of the key id list, as stored.
    Stored(&'a [u8]),
    /// The list, decoded (a sealed value in another encoding).
    Ids(Vec<crate::seal::KeyId>),
}

impl KeysRef<'_> {
    /// The key ids; `None` when the stored list does not decode.
    pub fn ids(self) -> Option<Vec<crate::seal::KeyId>> {
        match self {
            KeysRef::Stored(bytes) => rmp_serde::from_slice(bytes).ok(),
            KeysRef::Ids(ids) => Some(ids),
        }
    }
}

/// The key set of the sealed audit record read last, as stored and decoded. A tenant's
/// entries follow each other under one set, so a pass over records (`verify`, an erasure's
/// receipt) costs a comparison of a few dozen stored bytes a record rather than a decode into
/// a list of its own.
#[derive(Default)]
pub struct LastKeys {
    stored: Vec<u8>,
    ids: Option<std::sync::Arc<[crate::seal::KeyId]>>,
}

impl LastKeys {
    /// The ids of `keys`; `None` when they do not decode.
    pub fn ids(&mut self, keys: KeysRef<'_>) -> Option<std::sync::Arc<[crate::seal::KeyId]>> {
        let KeysRef::Stored(stored) = keys else {
            return keys.ids().map(std::sync::Arc::from);
        };
        if let Some(ids) = self.ids.as_ref().filter(|_| self.stored == stored) {
            return Some(std::sync::Arc::clone(ids));
        }
        let ids: std::sync::Arc<[crate::seal::KeyId]> = KeysRef::Stored(stored).ids()?.into();
        self.stored.clear();
        self.stored.extend_from_slice(stored);
        self.ids = Some(std::sync::Arc::clone(&ids));
        Some(ids)
    }
}

/// A [`crate::seal::Sealed`] read for its key ids alone: its nonce and ciphertext are passed
/// over, not copied (`verify` counts every record's key set).
#[derive(Deserialize)]
struct SealedKeys {
    keys: Vec<crate::seal::KeyId>,
    #[serde(rename = "nonce")]
    _nonce: serde::de::IgnoredAny,
    #[serde(rename = "ct")]
    _ct: serde::de::IgnoredAny,
}
