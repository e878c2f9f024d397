//! The log record: its wire form and its hash.
//!
//! A record is the msgpack array `[seq, ts_micros, prev (bin 32), hash (bin 32), event (bin)]`,
//! where `hash = blake3(DOMAIN || prev || seq_be || ts_be || event)`. The event bytes are hashed
//! exactly as stored, so verification never depends on re-serializing anything.
//!
//! The sled tree `log` stores records in *chunks*: the value under key `K` (u64 big-endian) is
//! the records `K, K+1, ..` of one group commit written back to back, each exactly as
//! [`Record::seal_encoded`] writes it (at most [`CHUNK_RECORDS`] records and, past the first,
//! [`CHUNK_BYTES`] bytes). A chunk of one record is the stored value of one record, so data
//! dirs written one record per key read the same. Why: sled 0.34 keeps per-leaf state in
//! memory and rewrites a leaf as it fills, both per key; a key per record would make the
//! server's memory grow with the log and write each entry's bytes several times over
//! (docs/ARCHITECTURE.md, "Record format").

use rmp::Marker;
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
        let mut out = Vec::with_capacity(event.len() + RECORD_HEAD_MAX);
        let hash = Self::seal_into(&mut out, seq, ts_micros, prev, event);
        (hash, out)
    }

    /// Seals the record that follows `prev`, appends its stored bytes (those of
    /// [`Record::seal_encoded`]) to `out` and returns its hash.
    pub fn seal_into(
        out: &mut Vec<u8>,
        seq: u64,
        ts_micros: i64,
        prev: &[u8; 32],
        event: &[u8],
    ) -> [u8; 32] {
        let hash = record_hash(prev, seq, ts_micros, event);
        let record = RecordOut {
            seq,
            ts_micros,
            prev,
            hash: &hash,
            event,
        };
        // Encoding integers and byte strings into a Vec cannot fail.
        let _ = rmp_serde::encode::write(out, &record);
        hash
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
    // Encoded on the stack (`verify` checks every record), in room for the largest header; a
    // slice too short would fail the write, not the check.
    let mut buf = [0u8; RECORD_HEAD_MAX];
    let mut out = &mut buf[..];
    if rmp_serde::encode::write(&mut out, &head).is_err() {
        return false;
    }
    let left = out.len();
    // `head` ends with the empty event's bin header (0xc4 0x00): replace it with the real one.
    let mut len = RECORD_HEAD_MAX - left - 2;
    let n = r.event.len();
    let mut put = |b: &[u8]| {
        buf[len..len + b.len()].copy_from_slice(b);
        len += b.len();
    };
    match u8::try_from(n) {
        Ok(n) => put(&[0xc4, n]),
        Err(_) => match u16::try_from(n) {
            Ok(n) => {
                put(&[0xc5]);
                put(&n.to_be_bytes());
            }
            Err(_) => {
                put(&[0xc6]);
                put(&(n as u32).to_be_bytes());
            }
        },
    }
    bytes.len() == len + n && bytes.starts_with(&buf[..len])
}

impl<'a> RecordRef<'a> {
    pub fn decode(bytes: &'a [u8]) -> Result<RecordRef<'a>, rmp_serde::decode::Error> {
        rmp_serde::from_slice(bytes)
    }

    /// The record at the start of `bytes` when its envelope is exactly what
    /// [`Record::seal_into`] writes (each integer in its shortest form, the hashes and the
    /// event as bin), with the offset where it ends; `None` for any other bytes, which
    /// [`RecordRef::decode`] then reads. `verify` reads every record of the log: this takes
    /// the fields from their places in the sealed layout rather than through serde, and a
    /// record read this way needs no [`is_canonical`] check, which re-encodes its envelope.
    pub fn decode_sealed(bytes: &'a [u8]) -> Option<(RecordRef<'a>, usize)> {
        let (&0x95, rest) = bytes.split_first()? else {
            return None;
        };
        let (seq, rest) = shortest_uint(rest)?;
        let (ts_micros, rest) = shortest_sint(rest)?;
        let (prev, rest) = bin32(rest)?;
        let (hash, rest) = bin32(rest)?;
        // The event's bin header, in the shortest form for its length.
        let mut rd = rest;
        let len = rmp::decode::read_bin_len(&mut rd).ok()?;
        let least = match Marker::from_u8(*rest.first()?) {
            Marker::Bin8 => 0,
            Marker::Bin16 => 0x100,
            _ => 0x1_0000,
        };
        let rest = rd;
        let event = rest.get(..usize::try_from(len).ok().filter(|_| len >= least)?)?;
        let end = bytes.len() - rest.len() + event.len();
        let record = RecordRef {
            seq,
            ts_micros,
            prev,
            hash,
            event,
        };
        Some((record, end))
    }

    /// The hash this record should carry, from its own stored bytes.
    pub fn computed_hash(&self) -> [u8; 32] {
        record_hash(self.prev, self.seq, self.ts_micros, self.event)
    }
}

/// A msgpack unsigned integer in the shortest form (rmp's `write_uint`, as serde's u64 is
/// written), and the bytes after it: rmp reads the value, the marker says whether a shorter
/// form would have held it.
fn shortest_uint(b: &[u8]) -> Option<(u64, &[u8])> {
    use rmp::decode;
    let mut rd = b;
    let (v, least) = match Marker::from_u8(*b.first()?) {
        Marker::FixPos(_) => (u64::from(decode::read_pfix(&mut rd).ok()?), 0),
        Marker::U8 => (u64::from(decode::read_u8(&mut rd).ok()?), 0x80),
        Marker::U16 => (u64::from(decode::read_u16(&mut rd).ok()?), 0x100),
        Marker::U32 => (u64::from(decode::read_u32(&mut rd).ok()?), 0x1_0000),
        Marker::U64 => (decode::read_u64(&mut rd).ok()?, 0x1_0000_0000),
        _ => return None,
    };
    (v >= least).then_some((v, rd))
}

/// A msgpack integer as rmp's `write_sint` writes an i64 (serde's i64): a value from 0 up as
/// [`shortest_uint`], a negative one as the shortest negative fixint or int 8/16/32/64.
fn shortest_sint(b: &[u8]) -> Option<(i64, &[u8])> {
    use rmp::decode;
    let mut rd = b;
    let (v, most) = match Marker::from_u8(*b.first()?) {
        Marker::FixNeg(_) => (i64::from(decode::read_nfix(&mut rd).ok()?), -1),
        Marker::I8 => (i64::from(decode::read_i8(&mut rd).ok()?), -33),
        Marker::I16 => (i64::from(decode::read_i16(&mut rd).ok()?), -129),
        Marker::I32 => (i64::from(decode::read_i32(&mut rd).ok()?), -32_769),
        Marker::I64 => (decode::read_i64(&mut rd).ok()?, -2_147_483_649),
        _ => {
            let (v, rest) = shortest_uint(b)?;
            return Some((i64::try_from(v).ok()?, rest));
        }
    };
    (v <= most).then_some((v, rd))
}

/// A 32-byte hash as sealing writes it: bin 8 of length 32.
fn bin32(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&[0xc4, 0x20], rest) = b.split_first_chunk::<2>()? else {
        return None;
    };
    rest.split_at_checked(32)
}

/// At most this many records share a stored value: a read by seq walks the record headers
/// before its own in the chunk, so chunks stay short.
pub const CHUNK_RECORDS: usize = 32;
/// A chunk takes another record only while it stays within this many bytes (a record larger
/// than that is a chunk of its own): audited list responses run to 60 KB.
pub const CHUNK_BYTES: usize = 64 * 1024;

/// The most bytes a record's encoding adds to its event's: the array marker, seq and time
/// (9 each at most), the two hashes (34 each) and the event's bin header (5 at most).
pub const RECORD_HEAD_MAX: usize = 1 + 9 + 9 + 34 + 34 + 5;

/// Packs consecutive sealed records into the stored values of the `log` tree.
#[derive(Default)]
pub struct Chunker {
    done: Vec<(u64, Vec<u8>)>,
    first: u64,
    value: Vec<u8>,
    records: usize,
    /// The bytes still to come (events and their records' heads, [`Chunker::expecting`]): a
    /// chunk's value is sized from it when it starts, rather than grown record by record.
    expected: usize,
}

impl Chunker {
    /// A chunker for records whose events add up to `event_bytes` over `records` records.
    pub fn expecting(records: usize, event_bytes: usize) -> Chunker {
        Chunker {
            expected: event_bytes + records * RECORD_HEAD_MAX,
            ..Chunker::default()
        }
    }

    /// Seals the record `seq` (one more than the record before it) that follows `prev`,
    /// writing it in place at the end of its chunk (the same bytes [`Chunker::push`] of
    /// [`Record::seal_encoded`] stores); returns its hash.
    pub fn seal(&mut self, seq: u64, ts_micros: i64, prev: &[u8; 32], event: &[u8]) -> [u8; 32] {
        if self.records == CHUNK_RECORDS {
            self.close();
        }
        let size = event.len() + RECORD_HEAD_MAX;
        if self.records == 0 {
            self.first = seq;
            // The rest of the group, within what one chunk takes.
            let want = self
                .expected
                .min(CHUNK_RECORDS * size)
                .min(CHUNK_BYTES + RECORD_HEAD_MAX)
                .max(size);
            self.value.reserve_exact(want);
        }
        self.expected = self.expected.saturating_sub(size);
        let start = self.value.len();
        let hash = Record::seal_into(&mut self.value, seq, ts_micros, prev, event);
        if self.records > 0 && self.value.len() > CHUNK_BYTES {
            // Past the chunk's bytes: the record starts the next chunk (as `push` decides).
            let record = self.value.split_off(start);
            self.close();
            self.first = seq;
            self.value = record;
        }
        self.records += 1;
        hash
    }

    /// Adds the record sealed as `seq` (one more than the record before it), its stored bytes
    /// `encoded`.
    pub fn push(&mut self, seq: u64, encoded: Vec<u8>) {
        if self.records > 0
            && (self.records == CHUNK_RECORDS || self.value.len() + encoded.len() > CHUNK_BYTES)
        {
            self.close();
        }
        if self.records == 0 {
            self.first = seq;
            self.value = encoded;
        } else {
            self.value.extend_from_slice(&encoded);
        }
        self.records += 1;
    }

    fn close(&mut self) {
        self.done
            .push((self.first, std::mem::take(&mut self.value)));
        self.records = 0;
    }

    /// The stored values, each with the seq of its first record (its key).
    pub fn finish(mut self) -> Vec<(u64, Vec<u8>)> {
        if self.records > 0 {
            self.close();
        }
        self.done
    }

    /// The stored values as one sled batch for the `log` tree, each under its key.
    pub fn into_batch(self) -> sled::Batch {
        let mut batch = sled::Batch::default();
        for (first, value) in self.finish() {
            batch.insert(&seq_key(first), value);
        }
        batch
    }
}

/// One record found in a stored value: its byte range in the value and what it decodes to.
pub struct Piece<'a> {
    pub range: std::ops::Range<usize>,
    pub record: Result<RecordRef<'a>, String>,
    /// Whether the record's bytes are known to be exactly what sealing writes
    /// ([`RecordRef::decode_sealed`] read them); when not, [`is_canonical`] tells.
    pub sealed_form: bool,
}

/// The records of a stored value, in order. Where the value stops parsing as records, the rest
/// of it is one last piece with the error: a verifier reports it as what it finds there, and a
/// reader as undecodable. An empty value is one empty, undecodable piece.
pub fn pieces(value: &[u8]) -> Pieces<'_> {
    Pieces {
        value,
        pos: 0,
        done: false,
    }
}

pub struct Pieces<'a> {
    value: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        if self.done || (self.pos > 0 && self.pos >= self.value.len()) {
            return None;
        }
        let start = self.pos;
        let rest = &self.value[start..];
        if let Some((r, end)) = RecordRef::decode_sealed(rest) {
            self.pos = start + end;
            return Some(Piece {
                range: start..self.pos,
                record: Ok(r),
                sealed_form: true,
            });
        }
        // A record is an array of five fields, the event last and borrowed from the value:
        // where the event ends, the record ends. (msgpack could also spell a record as a map,
        // fields in any order; sealing never does, so such bytes are not a record here.)
        let decoded = (rest.first() == Some(&0x95))
            .then_some(rest)
            .ok_or_else(|| "not a record (an array of five fields)".to_string())
            .and_then(|rest| RecordRef::decode(rest).map_err(|e| e.to_string()))
            .and_then(|r| {
                let end = (r.event.as_ptr() as usize)
                    .checked_sub(rest.as_ptr() as usize)
                    .map(|at| at + r.event.len())
                    .filter(|end| *end > 0 && *end <= rest.len())
                    .ok_or_else(|| "the record's fields are out of order".to_string())?;
                Ok((r, end))
            });
        Some(match decoded {
            Ok((r, end)) => {
                self.pos = start + end;
                Piece {
                    range: start..self.pos,
                    record: Ok(r),
                    sealed_form: false,
                }
            }
            Err(why) => {
                self.done = true;
                self.pos = self.value.len();
                Piece {
                    range: start..self.value.len(),
                    record: Err(why),
                    sealed_form: false,
                }
            }
        })
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

    /// Every record as sealing writes it, across each integer form's bounds and each bin
    /// header's, is read by `decode_sealed` to the fields serde reads, and to its end; bytes
    /// that decode to the same fields in another form are left to serde.
    #[test]
    fn decode_sealed_reads_exactly_the_sealed_form() {
        let seqs = [
            0,
            1,
            127,
            128,
            255,
            256,
            65_535,
            65_536,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            u64::MAX,
        ];
        let times = [
            i64::MIN,
            -2_147_483_649,
            -2_147_483_648,
            -32_769,
            -32_768,
            -129,
            -128,
            -33,
            -32,
            -1,
            0,
            127,
            128,
            65_536,
            1_700_000_000_000_000,
            i64::MAX,
        ];
        let mut checked = 0;
        for len in [0usize, 1, 255, 256, 65_535, 65_536] {
            for seq in seqs {
                for ts in times {
                    let (_, bytes) = Record::seal_encoded(seq, ts, &[3; 32], &vec![7; len]);
                    let (r, end) = RecordRef::decode_sealed(&bytes).expect("sealed form");
                    let want = RecordRef::decode(&bytes).expect("decode");
                    assert_eq!(
                        (r.seq, r.ts_micros, r.prev, r.hash, r.event, end),
                        (
                            want.seq,
                            want.ts_micros,
                            want.prev,
                            want.hash,
                            want.event,
                            bytes.len()
                        ),
                        "seq {seq} ts {ts} len {len}"
                    );
                    // Followed by more bytes (the next record of a chunk): it ends where it did.
                    let mut more = bytes.clone();
                    more.push(0x95);
                    let (_, end) = RecordRef::decode_sealed(&more).expect("sealed form");
                    assert_eq!(end, bytes.len());
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 6 * 11 * 16);

        // Each field re-encoded in a longer or other form: serde reads the same record,
        // `decode_sealed` does not.
        let (_, bytes) = Record::seal_encoded(1, 5, &[3; 32], b"event");
        assert_eq!(bytes[..4], [0x95, 0x01, 0x05, 0xc4]);
        let at_event = 3 + 34 + 34;
        assert_eq!(bytes[at_event..at_event + 2], [0xc4, 5]);
        let splice =
            |at: usize, cut: usize, with: &[u8]| [&bytes[..at], with, &bytes[at + cut..]].concat();
        let others = [
            splice(1, 1, &[0xcc, 0x01]),
            splice(1, 1, &[0xcf, 0, 0, 0, 0, 0, 0, 0, 1]),
            splice(2, 1, &[0xd0, 0x05]),
            splice(2, 1, &[0xd3, 0, 0, 0, 0, 0, 0, 0, 5]),
            splice(2, 1, &[0xcd, 0, 5]),
            splice(3, 2, &[0xc5, 0, 32]),
            splice(at_event, 2, &[0xc5, 0, 5]),
            splice(at_event, 2, &[0xc6, 0, 0, 0, 5]),
        ];
        for (i, other) in others.iter().enumerate() {
            let want = RecordRef::decode(other).expect("serde reads it");
            assert_eq!(
                (want.seq, want.ts_micros, want.event),
                (1, 5, &b"event"[..])
            );
            assert!(RecordRef::decode_sealed(other).is_none(), "case {i}");
            assert!(!is_canonical(other, &want), "case {i}");
        }
        // A negative time in a longer form, and cut short anywhere.
        let (_, neg) = Record::seal_encoded(1, -1, &[3; 32], b"event");
        assert_eq!(neg[2], 0xff);
        let longer = [&neg[..2], &[0xd0, 0xff], &neg[3..]].concat();
        assert_eq!(RecordRef::decode(&longer).expect("decode").ts_micros, -1);
        assert!(RecordRef::decode_sealed(&longer).is_none());
        for cut in 0..bytes.len() {
            assert!(
                RecordRef::decode_sealed(&bytes[..cut]).is_none(),
                "cut {cut}"
            );
        }
    }

    fn sealed(first: u64, sizes: &[usize]) -> Vec<(u64, Vec<u8>)> {
        let mut prev = ZERO_HASH;
        sizes
            .iter()
            .enumerate()
            .map(|(i, len)| {
                let seq = first + i as u64;
                let (hash, bytes) = Record::seal_encoded(seq, 5, &prev, &vec![b'e'; *len]);
                prev = hash;
                (seq, bytes)
            })
            .collect()
    }

    fn chunked(records: &[(u64, Vec<u8>)]) -> Vec<(u64, Vec<u8>)> {
        let mut chunks = Chunker::default();
        for (seq, bytes) in records {
            chunks.push(*seq, bytes.clone());
        }
        chunks.finish()
    }

    #[test]
    fn chunks_hold_at_most_32_records_and_64_kib_and_split_back_into_them() {
        let records = sealed(7, &[300; 100]);
        let chunks = chunked(&records);
        let keys: Vec<u64> = chunks.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [7, 39, 71, 103]);
        let mut back = Vec::new();
        for (key, value) in &chunks {
            for (i, piece) in pieces(value).enumerate() {
                let r = piece.record.expect("decodes");
                assert_eq!(r.seq, key + i as u64);
                assert!(is_canonical(&value[piece.range.clone()], &r));
                back.push((r.seq, value[piece.range].to_vec()));
            }
        }
        assert_eq!(back, records);

        // 30 KB records go two to a chunk; one over 64 KiB is a chunk of its own.
        let big = sealed(1, &[30_000, 30_000, 30_000, 70_000, 10]);
        let keys: Vec<u64> = chunked(&big).iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [1, 3, 4, 5]);
        // A chunk of one record is that record's bytes, as data dirs of earlier builds hold it.
        assert_eq!(chunked(&big[3..4]), vec![(4, big[3].1.clone())]);
        assert!(Chunker::default().finish().is_empty());
    }

    /// What the appender stores: each record sealed in place in its chunk, the same values as
    /// the records sealed one by one and pushed, whatever the group's size hint.
    #[test]
    fn records_sealed_in_place_are_the_chunks_of_the_records_pushed() {
        let groups: [&[usize]; 5] = [
            &[300; 100],
            &[30_000, 30_000, 30_000, 70_000, 10],
            &[70_000, 10, 65_000, 1, 40_000, 30_000],
            &[0],
            &[900; 33],
        ];
        for sizes in groups {
            let want = chunked(&sealed(11, sizes));
            let total: usize = sizes.iter().sum();
            for hint in [Chunker::default(), Chunker::expecting(sizes.len(), total)] {
                let mut chunks = hint;
                let mut prev = ZERO_HASH;
                for (i, len) in sizes.iter().enumerate() {
                    prev = chunks.seal(11 + i as u64, 5, &prev, &vec![b'e'; *len]);
                }
                assert_eq!(chunks.finish(), want, "sizes {sizes:?}");
            }
        }
    }

    #[test]
    fn a_value_that_stops_parsing_ends_in_one_undecodable_piece() {
        let records = sealed(1, &[10, 20, 30]);
        let (_, mut value) = chunked(&records).remove(0);
        value.extend_from_slice(b"\xc1 trailing");
        let got: Vec<(std::ops::Range<usize>, bool)> = pieces(&value)
            .map(|p| (p.range, p.record.is_ok()))
            .collect();
        let (a, b, c) = (records[0].1.len(), records[1].1.len(), records[2].1.len());
        assert_eq!(
            got,
            [
                (0..a, true),
                (a..a + b, true),
                (a + b..a + b + c, true),
                (a + b + c..value.len(), false)
            ]
        );
        let empty: Vec<_> = pieces(&[]).map(|p| (p.range, p.record.is_ok())).collect();
        assert_eq!(empty, [(0..0, false)]);
        let garbage: Vec<_> = pieces(b"\x01\x02")
            .map(|p| (p.range, p.record.is_ok()))
            .collect();
        assert_eq!(garbage, [(0..2, false)]);
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
