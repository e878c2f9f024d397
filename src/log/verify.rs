//! Proves that a sequence of stored log records is one unbroken hash chain.
//!
//! Records are hashed in parallel (rayon, a batch at a time) and linked sequentially. Every
//! failure is named, CloudTrail-validator style: which seq, which kind, and why. The verifier
//! only reads the bytes it is fed; it never trusts a server's own verdict, and it never
//! re-serializes a record to hash it.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;
use rayon::prelude::*;
use serde::Serialize;

use super::checkpoint::Checkpoint;
use super::record::RecordRef;
use super::Head;

/// At most this many failures are kept in a report (the count goes on).
const MAX_LISTED: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The stored hash does not match the record's own bytes: the record was modified.
    HashMismatch,
    /// A seq is missing from the tree: records were deleted.
    Missing,
    /// A record sits under another seq than the one it was sealed with: records were reordered.
    OutOfOrder,
    /// A self-consistent record was put into the chain: the one after it claims its seq.
    Inserted,
    /// A record does not link to the one before it: that one was replaced with a recomputed hash.
    BrokenLink,
    /// The stored value is not a record.
    Undecodable,
    /// A checkpoint's signature does not verify.
    BadSignature,
    /// The log ends before a head it is known to have had.
    Truncated,
    /// The log has the seq of a signed or expected head, with another hash: history rewritten.
    HeadMismatch,
}

impl FailureKind {
    pub fn describe(self) -> &'static str {
        match self {
            FailureKind::HashMismatch => "modified record (hash mismatch)",
            FailureKind::Missing => "deleted record (missing seq)",
            FailureKind::OutOfOrder => "reordered record (out of order)",
            FailureKind::Inserted => "inserted record",
            FailureKind::BrokenLink => "broken link (a record was replaced with a recomputed hash)",
            FailureKind::Undecodable => "undecodable record",
            FailureKind::BadSignature => "bad checkpoint signature",
            FailureKind::Truncated => "truncated tail",
            FailureKind::HeadMismatch => "head mismatch (history rewritten)",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    pub seq: u64,
    pub kind: FailureKind,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// First seq checked and the last seq the anchors say must exist (or "end").
    pub requested_from: u64,
    pub requested_to: Option<u64>,
    /// First and last seq found in the log (None when empty).
    pub found_from: Option<u64>,
    pub found_to: Option<u64>,
    pub records: u64,
    pub valid: u64,
    pub failures: Vec<Failure>,
    pub failure_count: u64,
    pub head_seq: u64,
    pub head_hash: String,
    pub checkpoints_checked: usize,
}

impl Report {
    pub fn clean(&self) -> bool {
        self.failure_count == 0
    }

    pub fn first_failure(&self) -> Option<&Failure> {
        self.failures.first()
    }

    /// Human summary, several lines.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let to = self
            .requested_to
            .map(|t| t.to_string())
            .unwrap_or_else(|| "end".into());
        let found = match (self.found_from, self.found_to) {
            (Some(a), Some(b)) => format!("{a}..{b}"),
            _ => "nothing".into(),
        };
        s.push_str(&format!(
            "requested seq {}..{to}, found {found}\n",
            self.requested_from
        ));
        if let Some(f) = self.first_failure() {
            s.push_str(&format!(
                "FIRST BAD SEQ {}: {}: {}\n",
                f.seq,
                f.kind.describe(),
                f.detail
            ));
            for f in self.failures.iter().skip(1).take(9) {
                s.push_str(&format!(
                    "  also seq {}: {}: {}\n",
                    f.seq,
                    f.kind.describe(),
                    f.detail
                ));
            }
            if self.failure_count > 10 {
                s.push_str(&format!("  ... {} failures in all\n", self.failure_count));
            }
        }
        if self.checkpoints_checked > 0 {
            s.push_str(&format!(
                "{} checkpoint(s) checked\n",
                self.checkpoints_checked
            ));
        }
        s.push_str(&format!(
            "{}/{} records valid; head seq {} hash {}\n{}",
            self.valid,
            self.records,
            self.head_seq,
            self.head_hash,
            if self.clean() {
                "OK: the chain is intact"
            } else {
                "TAMPERED"
            }
        ));
        s
    }
}

struct Parsed {
    key: u64,
    result: Result<Checked, String>,
}

struct Checked {
    seq: u64,
    prev: [u8; 32],
    hash: [u8; 32],
    hash_ok: bool,
}

fn check_one(key: u64, bytes: &[u8]) -> Parsed {
    check_decoded(
        key,
        bytes,
        RecordRef::decode(bytes).map_err(|e| e.to_string()),
    )
}

/// Checks the record `bytes` found at `key`, already decoded as `decoded`.
fn check_decoded(key: u64, bytes: &[u8], decoded: Result<RecordRef<'_>, String>) -> Parsed {
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
        let hash_ok = r.computed_hash() == hash && super::record::is_canonical(bytes, &r);
        Ok(Checked {
            seq: r.seq,
            prev,
            hash,
            hash_ok,
        })
    });
    Parsed { key, result }
}

/// Checks every record of the stored value under `key`: the `i`-th sits at seq `key + i`.
fn check_stored(key: u64, value: &[u8], out: &mut Vec<Parsed>) {
    for (i, piece) in super::record::pieces(value).enumerate() {
        let at = key.saturating_add(i as u64);
        out.push(check_decoded(at, &value[piece.range], piece.record));
    }
}

/// Streaming verifier: feed batches of `(seq, one record's bytes)` in seq order, then finish.
/// A stored chunk of several records is split into its records first ([`verify_tree`] does;
/// the server's log stream sends them one by one).
pub struct Verifier {
    from: u64,
    expected: u64,
    prev_hash: [u8; 32],
    prev2_hash: Option<[u8; 32]>,
    /// After an inserted record the genuine records sit one key later than their seq.
    offset: u64,
    resync: bool,
    records: u64,
    valid: u64,
    failures: Vec<Failure>,
    failure_count: u64,
    found_from: Option<u64>,
    last_key: u64,
    last_hash: [u8; 32],
    /// Hashes found at the seqs the anchors name.
    wanted: BTreeMap<u64, Option<[u8; 32]>>,
}

impl Verifier {
    /// A verifier for a log read from seq 1; `anchor_seqs` are the seqs whose hashes the
    /// checkpoints or an expected head name.
    pub fn new(anchor_seqs: impl IntoIterator<Item = u64>) -> Verifier {
        Verifier {
            from: 1,
            expected: 1,
            prev_hash: [0; 32],
            prev2_hash: None,
            offset: 0,
            resync: false,
            records: 0,
            valid: 0,
            failures: Vec::new(),
            failure_count: 0,
            found_from: None,
            last_key: 0,
            last_hash: [0; 32],
            wanted: anchor_seqs.into_iter().map(|s| (s, None)).collect(),
        }
    }

    fn fail(&mut self, seq: u64, kind: FailureKind, detail: String) {
        self.failure_count += 1;
        if self.failures.len() < MAX_LISTED {
            self.failures.push(Failure { seq, kind, detail });
        }
    }

    /// Checks a batch of records, each with the seq it was found at (hashing in parallel,
    /// linking in order).
    pub fn feed<B: AsRef<[u8]> + Sync>(&mut self, batch: &[(u64, B)]) {
        let parsed: Vec<Parsed> = batch
            .par_iter()
            .map(|(k, v)| check_one(*k, v.as_ref()))
            .collect();
        for p in parsed {
            self.link(p);
        }
    }

    fn link(&mut self, p: Parsed) {
        let key = p.key;
        self.records += 1;
        self.found_from.get_or_insert(key);
        // Seqs start at 1 and increase. A sled tree cannot break that, but the record stream of
        // `verify --url` can: a repeated or earlier seq, even one that links, is not the chain.
        // It is reported and left out, so the records after it are checked against the chain.
        if key == 0 || (self.records > 1 && key <= self.last_key) {
            self.fail(
                key,
                FailureKind::OutOfOrder,
                format!(
                    "seq {key} comes after seq {}: seqs start at 1 and increase",
                    self.last_key
                ),
            );
            return;
        }
        if key > self.expected {
            let gap_end = key - 1;
            let detail = if gap_end == self.expected {
                format!("seq {} is missing", self.expected)
            } else {
                format!("seqs {}..{} are missing", self.expected, gap_end)
            };
            self.fail(self.expected, FailureKind::Missing, detail);
            self.resync = true;
        }
        // A stored seq can be u64::MAX; nothing can follow it, so saturating loses nothing.
        self.expected = key.saturating_add(1);
        self.last_key = key;
        let c = match p.result {
            Err(why) => {
                self.fail(key, FailureKind::Undecodable, why);
                self.resync = true;
                return;
            }
            Ok(c) => c,
        };
        self.last_hash = c.hash;
        if let Some(slot) = self.wanted.get_mut(&key) {
            *slot = Some(c.hash);
        }
        let mut ok = true;
        if !c.hash_ok {
            self.fail(
                key,
                FailureKind::HashMismatch,
                "the stored hash does not match the record's contents".into(),
            );
            ok = false;
        } else if c.seq.checked_add(self.offset) != Some(key) {
            // Checked: a record can be sealed with any seq, u64::MAX included.
            if c.seq.checked_add(self.offset + 1) == Some(key) && self.prev2_hash == Some(c.prev) {
                self.fail(
                    key - 1,
                    FailureKind::Inserted,
                    format!("the record at seq {} is not part of the chain: the record after it was sealed as seq {} and links past it", key - 1, c.seq),
                );
                self.offset += 1;
                // The record before was the intruder; this one links to the one before that.
                self.prev_hash = c.hash;
                self.prev2_hash = None;
                self.valid += 1;
                self.resync = false;
                return;
            }
            self.fail(
                key,
                FailureKind::OutOfOrder,
                format!("stored at seq {key} but sealed as seq {}", c.seq),
            );
            ok = false;
            self.resync = true;
        } else if !self.resync && c.prev != self.prev_hash {
            self.fail(
                key,
                FailureKind::BrokenLink,
                format!("does not link to seq {}: that record was replaced with a recomputed hash, or one was inserted", key - 1),
            );
            ok = false;
        }
        if ok {
            self.valid += 1;
            self.resync = false;
        }
        self.prev2_hash = Some(self.prev_hash);
        self.prev_hash = c.hash;
    }

    /// Checks the anchors (expected head, checkpoints) and returns the report.
    pub fn finish(
        mut self,
        expect_head: Option<Head>,
        checkpoints: &[Checkpoint],
        pinned: Option<&VerifyingKey>,
    ) -> Report {
        let found_to = (self.records > 0).then_some(self.last_key);
        let mut anchors: Vec<(u64, Option<[u8; 32]>, String)> = Vec::new();
        for cp in checkpoints {
            if let Err(why) = cp.check_signature(pinned) {
                self.fail(
                    cp.seq,
                    FailureKind::BadSignature,
                    format!("checkpoint at seq {} signed {}: {why}", cp.seq, cp.time),
                );
                continue;
            }
            anchors.push((
                cp.seq,
                cp.hash_bytes(),
                format!("signed checkpoint of {}", cp.time),
            ));
        }
        if let Some(h) = expect_head {
            anchors.push((h.seq, Some(h.hash), "expected head".into()));
        }
        let mut requested_to = None;
        for (seq, hash, what) in &anchors {
            requested_to = Some(requested_to.unwrap_or(0).max(*seq));
            match self.wanted.get(seq).copied().flatten() {
                _ if *seq > self.last_key || self.records == 0 => {
                    let ends = if self.records == 0 {
                        "the log is empty".to_string()
                    } else {
                        format!("the log ends at seq {}", self.last_key)
                    };
                    self.fail(
                        *seq,
                        FailureKind::Truncated,
                        format!("{what} is at seq {seq} but {ends}"),
                    );
                }
                Some(found) if Some(found) != *hash => {
                    self.fail(
                        *seq,
                        FailureKind::HeadMismatch,
                        format!(
                            "{what} names hash {} but the log has {}",
                            hash.map(hex::encode).unwrap_or_default(),
                            hex::encode(found)
                        ),
                    );
                }
                None => {
                    self.fail(
                        *seq,
                        FailureKind::Missing,
                        format!("{what} names seq {seq}, which is not in the log"),
                    );
                }
                _ => {}
            }
        }
        self.failures.sort_by_key(|f| f.seq);
        Report {
            requested_from: self.from,
            requested_to,
            found_from: self.found_from,
            found_to,
            records: self.records,
            valid: self.valid,
            failures: self.failures,
            failure_count: self.failure_count,
            head_seq: self.last_key,
            head_hash: hex::encode(self.last_hash),
            checkpoints_checked: checkpoints.len(),
        }
    }
}

/// Verifies a whole `log` tree, reporting progress through `tick(records_done)`.
///
/// The key range is split across the cores: each part is iterated and hashed on its own
/// thread (sled serves concurrent readers), then every record is linked in order here.
pub fn verify_tree(
    tree: &sled::Tree,
    expect_head: Option<Head>,
    checkpoints: &[Checkpoint],
    pinned: Option<&VerifyingKey>,
    tick: &(dyn Fn(u64) + Sync),
) -> Report {
    let anchors = checkpoints
        .iter()
        .map(|c| c.seq)
        .chain(expect_head.map(|h| h.seq));
    let mut v = Verifier::new(anchors);
    let bound = |kv: Option<sled::Result<(sled::IVec, sled::IVec)>>| {
        kv.and_then(|r| r.ok())
            .and_then(|(k, _)| super::record::seq_from_key(&k))
    };
    let (Some(lo), Some(hi)) = (
        bound(tree.first().transpose()),
        bound(tree.last().transpose()),
    ) else {
        return v.finish(expect_head, checkpoints, pinned);
    };
    // Inclusive key ranges, one per thread. A tampered tree can hold any key, u64::MAX
    // included, so nothing here may overflow, and a range's width says nothing about how many
    // records it holds (keys 1 and u64::MAX are two records).
    let parts = rayon::current_num_threads().max(1) as u64;
    let width = hi - lo;
    let span = (width / parts).saturating_add(1);
    let ranges: Vec<(u64, u64)> = (0..parts)
        .filter_map(|i| {
            let offset = i.checked_mul(span).filter(|o| *o <= width)?;
            let a = lo + offset;
            Some((a, a.saturating_add(span - 1).min(hi)))
        })
        .collect();
    let checked: Vec<Vec<Parsed>> = ranges
        .par_iter()
        .map(|&(a, b)| {
            let mut out =
                Vec::with_capacity(usize::try_from(b - a).map_or(1 << 16, |n| n.min(1 << 16)) + 1);
            let mut ticked = 0;
            for kv in tree.range(super::record::seq_key(a)..=super::record::seq_key(b)) {
                match kv {
                    Ok((k, val)) => {
                        check_stored(super::record::seq_from_key(&k).unwrap_or(0), &val, &mut out)
                    }
                    Err(e) => {
                        let at = out.last().map(|p: &Parsed| p.key + 1).unwrap_or(a);
                        out.push(Parsed {
                            key: at,
                            result: Err(format!("storage error reading the log: {e}")),
                        });
                        break;
                    }
                }
                if out.len() - ticked >= 65_536 {
                    tick((out.len() - ticked) as u64);
                    ticked = out.len();
                }
            }
            tick((out.len() - ticked) as u64);
            out
        })
        .collect();
    for part in checked {
        for p in part {
            v.link(p);
        }
    }
    v.finish(expect_head, checkpoints, pinned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::Record;

    fn chain(n: u64) -> Vec<Record> {
        let mut prev = [0u8; 32];
        (1..=n)
            .map(|seq| {
                let r = Record::seal(
                    seq,
                    seq as i64 * 10,
                    prev,
                    format!("event {seq}").into_bytes(),
                );
                prev = r.hash;
                r
            })
            .collect()
    }

    fn run(stored: &[(u64, Vec<u8>)]) -> Report {
        let mut v = Verifier::new([]);
        v.feed(stored);
        v.finish(None, &[], None)
    }

    fn stored(records: &[Record]) -> Vec<(u64, Vec<u8>)> {
        records.iter().map(|r| (r.seq, r.encode())).collect()
    }

    /// Records 1..=100 stored as the appender does under load: chunks of 32 (1, 33, 65, 97).
    fn chunked_tree(records: &[Record]) -> (sled::Db, sled::Tree) {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree(crate::log::LOG_TREE).expect("tree");
        let mut chunks = crate::log::record::Chunker::default();
        for r in records {
            chunks.push(r.seq, r.encode());
        }
        tree.apply_batch(chunks.into_batch()).expect("batch");
        (db, tree)
    }

    fn first(rep: &Report) -> (u64, FailureKind) {
        let f = rep.first_failure().expect("a failure");
        (f.seq, f.kind)
    }

    #[test]
    fn tampering_inside_a_chunk_is_named_at_the_record_it_touched() {
        let records = chain(100);
        let check = |tamper: &dyn Fn(&sled::Tree)| {
            let (_db, tree) = chunked_tree(&records);
            assert_eq!(tree.len(), 4);
            tamper(&tree);
            verify_tree(&tree, None, &[], None, &|_| {})
        };
        let rep = check(&|_| {});
        assert!(rep.clean(), "{}", rep.render());
        assert_eq!((rep.records, rep.valid, rep.head_seq), (100, 100, 100));
        assert_eq!(rep.head_hash, hex::encode(records[99].hash));

        // The chunk under 33 with one of its records (seq 40) edited, dropped, or swapped
        // with another (seq 50), written back whole.
        let rewrite = |tree: &sled::Tree, edit: &dyn Fn(&mut Vec<Vec<u8>>)| {
            let mut inner: Vec<Vec<u8>> = records[32..64].iter().map(Record::encode).collect();
            edit(&mut inner);
            tree.insert(33u64.to_be_bytes(), inner.concat())
                .expect("insert");
        };
        let rep = check(&|tree| {
            rewrite(tree, &|rs| {
                let last = rs[7].len() - 1;
                rs[7][last] ^= 1;
            })
        });
        assert_eq!(
            first(&rep),
            (40, FailureKind::HashMismatch),
            "{}",
            rep.render()
        );
        assert_eq!(rep.valid, 99, "{}", rep.render());

        let rep = check(&|tree| rewrite(tree, &|rs| drop(rs.remove(7))));
        assert_eq!(
            first(&rep),
            (40, FailureKind::OutOfOrder),
            "{}",
            rep.render()
        );
        assert!(rep
            .failures
            .iter()
            .any(|f| f.seq == 64 && f.kind == FailureKind::Missing));

        let rep = check(&|tree| rewrite(tree, &|rs| rs.swap(7, 17)));
        assert_eq!(
            first(&rep),
            (40, FailureKind::OutOfOrder),
            "{}",
            rep.render()
        );
        let kinds: Vec<(u64, FailureKind)> = rep.failures.iter().map(|f| (f.seq, f.kind)).collect();
        assert_eq!(
            kinds,
            [(40, FailureKind::OutOfOrder), (50, FailureKind::OutOfOrder)],
            "{}",
            rep.render()
        );

        // A whole chunk removed: its seqs are missing.
        let rep = check(&|tree| drop(tree.remove(33u64.to_be_bytes()).expect("remove")));
        assert_eq!(first(&rep), (33, FailureKind::Missing), "{}", rep.render());
        assert_eq!(rep.failures[0].detail, "seqs 33..64 are missing");

        // A chunk cut in the middle of a record: the rest of it is undecodable, and what
        // follows is missing.
        let rep = check(&|tree| {
            let v = tree.get(33u64.to_be_bytes()).expect("get").expect("chunk");
            let cut = records[32..40]
                .iter()
                .map(|r| r.encode().len())
                .sum::<usize>()
                + 3;
            tree.insert(33u64.to_be_bytes(), &v[..cut]).expect("insert");
        });
        assert_eq!(
            first(&rep),
            (41, FailureKind::Undecodable),
            "{}",
            rep.render()
        );
        assert_eq!(rep.valid, 100 - 24, "{}", rep.render());
    }

    /// A tampered tree with a key at u64::MAX: the ranges split over threads must neither
    /// overflow nor size a buffer by the keys' distance; the gap is reported.
    #[test]
    fn a_tree_with_a_key_at_the_largest_seq_is_reported_not_a_crash() {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree(crate::log::LOG_TREE).expect("tree");
        let records = chain(2);
        for (seq, bytes) in stored(&records) {
            tree.insert(seq.to_be_bytes(), bytes).expect("insert");
        }
        let far = Record::seal(u64::MAX, 30, records[1].hash, b"far".to_vec());
        tree.insert(u64::MAX.to_be_bytes(), far.encode())
            .expect("insert");
        let rep = verify_tree(&tree, None, &[], None, &|_| {});
        assert!(!rep.clean(), "{}", rep.render());
        assert_eq!(rep.records, 3, "{}", rep.render());
        assert_eq!(
            (rep.failures[0].seq, rep.failures[0].kind),
            (3, FailureKind::Missing),
            "{}",
            rep.render()
        );
        // Both ends at u64::MAX: one record, no overflow either.
        let only = db.open_tree("only_the_last").expect("tree");
        only.insert(u64::MAX.to_be_bytes(), far.encode())
            .expect("insert");
        let rep = verify_tree(&only, None, &[], None, &|_| {});
        assert!(!rep.clean(), "{}", rep.render());
        assert_eq!(rep.records, 1);
    }

    /// Found by the `record_chain` fuzz target (tests/fuzz): a record at seq 0, or a record
    /// repeating an earlier seq and linking to the one before it, was called an intact chain.
    #[test]
    fn a_seq_of_zero_or_one_that_does_not_increase_is_out_of_order() {
        // The crashing input, reduced: one record stored and sealed as seq 0, linking to zeros.
        let zero = Record::seal(0, 0, [0; 32], Vec::new());
        let rep = run(&[(0, zero.encode())]);
        assert!(!rep.clean(), "{}", rep.render());
        assert_eq!(rep.failures[0].kind, FailureKind::OutOfOrder);

        // Seq 3 twice, the second copy linking to the first: reported, and left out of the
        // chain, so seq 4 still links.
        let mut records = chain(4);
        let again = Record::seal(3, 0, records[2].hash, b"again".to_vec());
        let mut stored = stored(&records[..3]);
        stored.push((3, again.encode()));
        stored.push((4, records[3].encode()));
        let rep = run(&stored);
        assert_eq!(rep.failure_count, 1, "{}", rep.render());
        assert_eq!(
            (rep.failures[0].seq, rep.failures[0].kind),
            (3, FailureKind::OutOfOrder)
        );
        assert_eq!((rep.valid, rep.records, rep.head_seq), (4, 5, 4));

        // Going back: seq 2 after seq 3.
        records.truncate(3);
        let mut back = self::stored(&records);
        back.push((2, records[1].encode()));
        let rep = run(&back);
        assert_eq!(
            rep.failures[0].kind,
            FailureKind::OutOfOrder,
            "{}",
            rep.render()
        );
    }

    /// A record may be sealed with any seq and stored under any key: u64::MAX overflowed the
    /// verifier's seq arithmetic (a panic in debug builds, a wrapped comparison in release).
    #[test]
    fn the_largest_seq_does_not_overflow() {
        let records = chain(1);
        let last = Record::seal(u64::MAX, 0, records[0].hash, Vec::new());
        let mut s = stored(&records);
        s.push((2, last.encode()));
        let rep = run(&s);
        assert_eq!(
            rep.failures[0].kind,
            FailureKind::OutOfOrder,
            "{}",
            rep.render()
        );

        let mut s = stored(&records);
        s.push((u64::MAX, last.encode()));
        s.push((u64::MAX, last.encode()));
        let rep = run(&s);
        assert_eq!(
            rep.failures.iter().map(|f| f.kind).collect::<Vec<_>>(),
            [FailureKind::Missing, FailureKind::OutOfOrder],
            "{}",
            rep.render()
        );
    }

    #[test]
    fn clean_chain_is_valid() {
        let rep = run(&stored(&chain(50)));
        assert!(rep.clean(), "{}", rep.render());
        assert_eq!((rep.valid, rep.records, rep.head_seq), (50, 50, 50));
    }

    #[test]
    fn each_tampering_is_named_at_the_right_seq() {
        let good = stored(&chain(20));

        let mut modified = good.clone();
        let last = modified[9].1.len() - 1;
        modified[9].1[last] ^= 0x01;
        let f = run(&modified).failures[0].clone();
        assert_eq!((f.seq, f.kind), (10, FailureKind::HashMismatch));

        // A record re-encoded (its timestamp as int 64, not uint 64): bytes changed, same
        // fields and hash. Found by the property tests (tests/properties.rs).
        let r = Record::seal(1, 1_700_000_000_000_000, [0; 32], b"event".to_vec());
        let mut bytes = r.encode();
        assert_eq!(bytes[..3], [0x95, 0x01, 0xcf]);
        bytes[2] = 0xd3;
        assert_eq!(Record::decode(&bytes).expect("decode"), r);
        let f = run(&[(1, bytes)]).failures[0].clone();
        assert_eq!((f.seq, f.kind), (1, FailureKind::HashMismatch));

        let mut deleted = good.clone();
        deleted.remove(4);
        let rep = run(&deleted);
        assert_eq!(
            (rep.failures[0].seq, rep.failures[0].kind),
            (5, FailureKind::Missing)
        );
        assert_eq!(rep.failure_count, 1, "{}", rep.render());

        let mut swapped = good.clone();
        let (a, b) = (swapped[6].1.clone(), swapped[12].1.clone());
        swapped[6].1 = b;
        swapped[12].1 = a;
        let f = run(&swapped).failures[0].clone();
        assert_eq!((f.seq, f.kind), (7, FailureKind::OutOfOrder));

        // A forged record sealed at seq 8 over the real seq 7, the rest shifted one key later.
        let records = chain(20);
        let forged = Record::seal(8, 75, records[6].hash, b"forged".to_vec());
        let mut inserted: Vec<(u64, Vec<u8>)> = good[..7].to_vec();
        inserted.push((8, forged.encode()));
        inserted.extend(good[7..].iter().map(|(k, v)| (k + 1, v.clone())));
        let rep = run(&inserted);
        assert_eq!(
            (rep.failures[0].seq, rep.failures[0].kind),
            (8, FailureKind::Inserted),
            "{}",
            rep.render()
        );
        assert_eq!(rep.failure_count, 1, "{}", rep.render());

        let mut undecodable = good.clone();
        undecodable[2].1 = b"\xc1 not msgpack".to_vec();
        let f = run(&undecodable).failures[0].clone();
        assert_eq!((f.seq, f.kind), (3, FailureKind::Undecodable));

        // Replaced with a recomputed hash: seq 5 itself checks out, seq 6 no longer links.
        let mut replaced = good.clone();
        replaced[4].1 = Record::seal(5, 50, records[3].hash, b"rewritten".to_vec()).encode();
        let f = run(&replaced).failures[0].clone();
        assert_eq!((f.seq, f.kind), (6, FailureKind::BrokenLink));
    }

    #[test]
    fn anchors_catch_truncation_and_rewrites() {
        let records = chain(10);
        let key = ed25519_dalek::SigningKey::from_bytes(&[1; 32]);
        let cp = Checkpoint::sign(
            &key,
            Head {
                seq: 10,
                hash: records[9].hash,
            },
            "t",
        );
        let truncated = stored(&records[..8]);
        let mut v = Verifier::new([10]);
        v.feed(&truncated);
        let rep = v.finish(None, std::slice::from_ref(&cp), Some(&key.verifying_key()));
        assert_eq!(
            (rep.failures[0].seq, rep.failures[0].kind),
            (10, FailureKind::Truncated)
        );
        assert_eq!(rep.requested_to, Some(10));
        assert_eq!(rep.found_to, Some(8));

        let mut bad = cp.clone();
        bad.hash = hex::encode([7u8; 32]);
        let mut v = Verifier::new([10]);
        v.feed(&stored(&records));
        let rep = v.finish(None, &[bad], None);
        assert_eq!(rep.failures[0].kind, FailureKind::BadSignature);

        let mut v = Verifier::new([10]);
        v.feed(&stored(&records));
        let rep = v.finish(
            Some(Head {
                seq: 10,
                hash: [7; 32],
            }),
            &[cp],
            None,
        );
        assert_eq!(rep.failures.len(), 1);
        assert_eq!(rep.failures[0].kind, FailureKind::HeadMismatch);
    }
}
