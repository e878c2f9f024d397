//! The log record: its wire form and its hash.
//!
//! A record is the msgpack array `[seq, ts_micros, prev (bin 32), hash (bin 32), event (bin)]`
//! stored under the key `seq` (u64 big-endian) of the sled tree `log`, where
//! `hash = blake3(DOMAIN || prev || seq_be || ts_be || event)`. The event bytes are hashed
//! exactly as stored, so verification never depends on re-serializing anything.

use serde::{Deserialize, Serialize};

pub const DOMAIN: &[u8] = b"auditmem/log/v1";
pub const ZERO_HASH: [u8; 32] = [0; 32];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub ts_micros: i64,
    #[serde(with = "serde_bytes")]
    pub prev: [u8; 32],
    #[serde(with = "serde_bytes")]
    pub hash: [u8; 32],
    #[serde(with = "serde_bytes")]
    pub event: Vec<u8>,
}

/// The same record, borrowing its byte fields from the stored value (no copies when verifying).
#[derive(Debug, Deserialize)]
pub struct RecordRef<'a> {
    pub seq: u64,
    pub ts_micros: i64,
    #[serde(borrow, with = "serde_bytes")]
    pub prev: &'a [u8],
    #[serde(borrow, with = "serde_bytes")]
    pub hash: &'a [u8],
    #[serde(borrow, with = "serde_bytes")]
    pub event: &'a [u8],
}

pub fn record_hash(prev: &[u8], seq: u64, ts_micros: i64, event: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(DOMAIN);
    h.update(prev);
    h.update(&seq.to_be_bytes());
    h.update(&ts_micros.to_be_bytes());
    h.update(event);
    *h.finalize().as_bytes()
}

/// What [`Record`] serializes to, borrowing the event bytes (the appender seals without a copy).
#[derive(Serialize)]
struct RecordOut<'a> {
    seq: u64,
    ts_micros: i64,
    #[serde(with = "serde_bytes")]
    prev: &'a [u8; 32],
    #[serde(with = "serde_bytes")]
    hash: &'a [u8; 32],
    #[serde(with = "serde_bytes")]
    event: &'a [u8],
}

impl Record {
    /// Seals the record that follows `prev` and returns its hash and stored bytes, the same
    /// bytes as `Record::seal(..).encode()`.
    pub fn seal_encoded(
        seq: u64,
        ts_micros: i64,
        prev: &[u8; 32],
        event: &[u8],
    ) -> ([u8; 32], Vec<u8>) {
        let hash = record_hash(prev, seq, ts_micros, event);
        let out = RecordOut {
            seq,
            ts_micros,
            prev,
            hash: &hash,
            event,
        };
        // Encoding integers and byte strings into a Vec cannot fail.
        (hash, rmp_serde::to_vec(&out).unwrap_or_default())
    }

    /// Builds the record that follows `prev`, hash included.
    pub fn seal(seq: u64, ts_micros: i64, prev: [u8; 32], event: Vec<u8>) -> Record {
        let hash = record_hash(&prev, seq, ts_micros, &event);
        Record {
            seq,
            ts_micros,
            prev,
            hash,
            event,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // Encoding a struct of integers and byte strings into a Vec cannot fail.
        rmp_serde::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Record, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }
}

/// Whether `bytes` are exactly the encoding [`Record::seal_encoded`] writes for the record they
/// decode to. msgpack has several encodings of one value (a positive integer as uint 64 or as
/// int 64, a byte string as bin or as str): a record re-encoded that way still decodes to the
/// same fields and the same hash, yet its stored bytes were changed. Compares the envelope
/// header only (at most ~90 bytes); the event bytes are the tail either way.
pub fn is_canonical(bytes: &[u8], r: &RecordRef<'_>) -> bool {
    let (Ok(prev), Ok(hash)) = (<&[u8; 32]>::try_from(r.prev), <&[u8; 32]>::try_from(r.hash))
    else {
        return false;
    };
    let head = RecordOut {
        seq: r.seq,
        ts_micros: r.ts_micros,
        prev,
        hash,
        event: &[],
    };
    // Encoding integers and byte strings into a Vec cannot fail.
    let mut want = rmp_serde::to_vec(&head).unwrap_or_default();
    // `head` ends with the empty event's bin header (0xc4 0x00): replace it with the real one.
    want.truncate(want.len().saturating_sub(2));
    let n = r.event.len();
    match u8::try_from(n) {
        Ok(n) => want.extend_from_slice(&[0xc4, n]),
        Err(_) => match u16::try_from(n) {
            Ok(n) => {
                want.push(0xc5);
                want.extend_from_slice(&n.to_be_bytes());
            }
            Err(_) => {
                want.push(0xc6);
                want.extend_from_slice(&(n as u32).to_be_bytes());
            }
        },
    }
    bytes.len() == want.len() + n && bytes.starts_with(&want)
}

impl<'a> RecordRef<'a> {
    pub fn decode(bytes: &'a [u8]) -> Result<RecordRef<'a>, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }

    /// The hash this record should carry, from its own stored bytes.
    pub fn computed_hash(&self) -> [u8; 32] {
        record_hash(self.prev, self.seq, self.ts_micros, self.event)
    }
}

pub fn seq_key(seq: u64) -> [u8; 8] {
    seq.to_be_bytes()
}

pub fn seq_from_key(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_record_round_trips_and_verifies() {
        let r = Record::seal(7, 1_700_000_000_000_000, [3; 32], b"event bytes".to_vec());
        let bytes = r.encode();
        assert_eq!(Record::decode(&bytes).expect("decode"), r);
        assert_eq!(
            Record::seal_encoded(7, 1_700_000_000_000_000, &[3; 32], b"event bytes"),
            (r.hash, bytes.clone())
        );
        let rr = RecordRef::decode(&bytes).expect("decode ref");
        assert_eq!(rr.computed_hash(), r.hash);
        assert_eq!(
            (rr.seq, rr.prev, rr.event),
            (7, &[3u8; 32][..], &b"event bytes"[..])
        );
    }

    #[test]
    fn canonical_encodings_are_told_from_re_encodings() {
        for len in [0usize, 1, 255, 256, 65_535, 65_536] {
            for (seq, ts) in [(1u64, 0i64), (300, -5), (u64::MAX, 1_700_000_000_000_000)] {
                let (_, bytes) = Record::seal_encoded(seq, ts, &[0; 32], &vec![7; len]);
                let r = RecordRef::decode(&bytes).expect("decode");
                assert!(is_canonical(&bytes, &r), "len {len} seq {seq}");
            }
        }
        // The same timestamp as int 64 instead of uint 64: same fields, other bytes.
        let (_, bytes) = Record::seal_encoded(1, 1_700_000_000_000_000, &[0; 32], b"e");
        let mut other = bytes.clone();
        assert_eq!(other[..3], [0x95, 0x01, 0xcf]);
        other[2] = 0xd3;
        let r = RecordRef::decode(&other).expect("decode");
        assert_eq!(
            r.computed_hash(),
            RecordRef::decode(&bytes).expect("decode").computed_hash()
        );
        assert!(!is_canonical(&other, &r));
    }

    #[test]
    fn hash_covers_every_field() {
        let base = record_hash(&[0; 32], 1, 2, b"e");
        assert_ne!(base, record_hash(&[1; 32], 1, 2, b"e"));
        assert_ne!(base, record_hash(&[0; 32], 2, 2, b"e"));
        assert_ne!(base, record_hash(&[0; 32], 1, 3, b"e"));
        assert_ne!(base, record_hash(&[0; 32], 1, 2, b"f"));
        // The documented formula, spelled out.
        let mut h = blake3::Hasher::new();
        h.update(b"auditmem/log/v1");
        h.update(&[0; 32]);
        h.update(&1u64.to_be_bytes());
        h.update(&2i64.to_be_bytes());
        h.update(b"e");
        assert_eq!(base, *h.finalize().as_bytes());
    }
}
