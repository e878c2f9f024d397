//! Checking one record on its own, before it is linked to the chain: that it decodes, that
//! its stored hash is the hash of its own bytes, and that those bytes are the canonical
//! encoding. These checks are independent per record, so they run in parallel.

use std::sync::Arc;

use auditmem_projections::event::LastKeys;
use auditmem_projections::seal::KeyId;
use auditmem_projections::Event;

use super::hashes::Hashes;
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
    /// Its bytes are canonical and hash to `hash`: false until its hash is computed
    /// ([`settle`]), so a record whose hash was never computed fails.
    pub(super) hash_ok: bool,
    /// Its bytes are canonical (what `hash_ok` needs beside the hash).
    canonical: bool,
    /// Whether the record holds personal fields, and how (`Event::sealing_of`); records read
    /// one after another under one key set share its list.
    pub(super) sealing: Option<Option<Arc<[KeyId]>>>,
}

pub(super) fn check_one(key: u64, bytes: &[u8], last: &mut LastKeys) -> Parsed {
    // The bytes must be one record and nothing after it to be as sealing writes them.
    let (decoded, sealed_form) =
        match RecordRef::decode_sealed(bytes).filter(|(_, end)| *end == bytes.len()) {
            Some((r, _)) => (Ok(r), true),
            None => (RecordRef::decode(bytes).map_err(|e| e.to_string()), false),
        };
    let result = decoded.and_then(|r| {
        let mut c = check_unhashed(bytes, &r, sealed_form, last)?;
        c.settle(r.computed_hash());
        Ok(c)
    });
    Parsed { key, result }
}

impl Checked {
    /// Records that the record hashes to `computed`.
    fn settle(&mut self, computed: [u8; 32]) {
        self.hash_ok = self.canonical && computed == self.hash;
    }
}

/// Checks the record `bytes`, decoded as `r`, all but its hash: its `hash_ok` is false until
/// [`Checked::settle`] is given its computed hash. `sealed_form` when the decoding found the
/// bytes exactly as sealing writes them (so they are canonical).
fn check_unhashed(
    bytes: &[u8],
    r: &RecordRef<'_>,
    sealed_form: bool,
    last: &mut LastKeys,
) -> Result<Checked, String> {
    let prev: [u8; 32] = r
        .prev
        .try_into()
        .map_err(|_| "prev is not 32 bytes".to_string())?;
    let hash: [u8; 32] = r
        .hash
        .try_into()
        .map_err(|_| "hash is not 32 bytes".to_string())?;
    // A re-encoded envelope decodes to the same fields and hash: its bytes were changed all
    // the same, so it counts as a modified record.
    let canonical = sealed_form || record::is_canonical(bytes, r);
    Ok(Checked {
        seq: r.seq,
        prev,
        hash,
        hash_ok: false,
        canonical,
        sealing: Event::sealing_ref(r.event).and_then(|s| match s {
            None => Some(None),
            Some(keys) => last.ids(keys).map(Some),
        }),
    })
}

/// Checks every record of the stored value under `key`, the `i`-th at seq `key + i`, into
/// `out`: each record's hash is queued in `hashes` under its index in `out`, and its
/// `hash_ok` is false until [`settle`] has been called with that hash (from the `hashes`'
/// `push` here or its `finish`).
pub(super) fn check_stored(
    key: u64,
    value: &[u8],
    out: &mut Vec<Parsed>,
    last: &mut LastKeys,
    hashes: &mut Hashes,
) {
    for (i, piece) in record::pieces(value).enumerate() {
        let at = key.saturating_add(i as u64);
        let bytes = &value[piece.range];
        let result = piece
            .record
            .and_then(|r| Ok((check_unhashed(bytes, &r, piece.sealed_form, last)?, r)));
        let tag = out.len();
        match result {
            Ok((c, r)) => {
                let prev = c.prev;
                out.push(Parsed {
                    key: at,
                    result: Ok(c),
                });
                hashes.push(tag, &prev, r.seq, r.ts_micros, r.event, &mut |t, h| {
                    settle(out, t, h)
                });
            }
            Err(why) => out.push(Parsed {
                key: at,
                result: Err(why),
            }),
        }
    }
}

/// Records that the record at `out[tag]` hashes to `computed`.
pub(super) fn settle(out: &mut [Parsed], tag: usize, computed: [u8; 32]) {
    if let Some(Parsed { result: Ok(c), .. }) = out.get_mut(tag) {
        c.settle(computed);
    }
}
