//! Checking one record on its own, before it is linked to the chain: that it decodes, that
//! its stored hash is the hash of its own bytes, and that those bytes are the canonical
//! encoding. These checks are independent per record, so they run in parallel.

use std::sync::Arc;

use auditmem_projections::event::LastKeys;
use auditmem_projections::seal::KeyId;
use auditmem_projections::Event;

use crate::log::record::{self, RecordRef};

/// A record checked on its own, with the key it was found at.
pub(super) struct Parsed {
    pub(super) key: u64,
    pub(super) result: Result<Checked, String>,
}

/// What linking needs of a record that decoded.
pub(super) struct Checked {
    pub(super) seq: u64,
    pub(super) prev: [u8; 32],
    pub(super) hash: [u8; 32],
    pub(super) hash_ok: bool,
    /// Whether the record holds personal fields, and how (`Event::sealing_of`); records read
    /// one after another under one key set share its list.
    pub(super) sealing: Option<Option<Arc<[KeyId]>>>,
}

pub(super) fn check_one(key: u64, bytes: &[u8], last: &mut LastKeys) -> Parsed {
    // The bytes must be one record and nothing after it to be as sealing writes them.
    if let Some((r, _)) = RecordRef::decode_sealed(bytes).filter(|(_, end)| *end == bytes.len()) {
        return check_decoded(key, bytes, Ok(r), true, last);
    }
    check_decoded(
        key,
        bytes,
        RecordRef::decode(bytes).map_err(|e| e.to_string()),
        false,
        last,
    )
}

/// Checks the record `bytes` found at `key`, already decoded as `decoded`; `sealed_form` when
/// the decoding found the bytes exactly as sealing writes them (so they are canonical).
fn check_decoded(
    key: u64,
    bytes: &[u8],
    decoded: Result<RecordRef<'_>, String>,
    sealed_form: bool,
    last: &mut LastKeys,
) -> Parsed {
    let result = decoded.and_then(|r| {
        let prev: [u8; 32] = r
            .prev
            .try_into()
            .map_err(|_| "prev is not 32 bytes".to_string())?;
        let hash: [u8; 32] = r
            .hash
            .try_into()
            .map_err(|_| "hash is not 32 bytes".to_string())?;
        // A re-encoded envelope decodes to the same fields and hash: its bytes were
        // changed all the same, so it counts as a modified record.
        let hash_ok = r.computed_hash() == hash && (sealed_form || record::is_canonical(bytes, &r));
        Ok(Checked {
            seq: r.seq,
            prev,
            hash,
            hash_ok,
            sealing: Event::sealing_ref(r.event).and_then(|s| match s {
                None => Some(None),
                Some(keys) => last.ids(keys).map(Some),
            }),
        })
    });
    Parsed { key, result }
}

/// Checks every record of the stored value under `key`: the `i`-th sits at seq `key + i`.
pub(super) fn check_stored(key: u64, value: &[u8], out: &mut Vec<Parsed>, last: &mut LastKeys) {
    for (i, piece) in record::pieces(value).enumerate() {
        let at = key.saturating_add(i as u64);
        out.push(check_decoded(
            at,
            &value[piece.range],
            piece.record,
            piece.sealed_form,
            last,
        ));
    }
}
