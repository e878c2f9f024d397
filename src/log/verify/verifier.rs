//! The streaming [`Verifier`]: records fed in seq order are checked on their own in parallel
//! ([`super::check`]), then linked in order, and the anchors (signed checkpoints, an expected
//! head) are checked at the end.
//!
//! Invariants: the linking state (`expected`, `prev_hash`, `offset`, `resync`) reflects every
//! record fed so far, in order; a failure is reported once, at the seq it concerns; a record
//! that breaks the seq order is reported and left out, so the records after it are still
//! checked against the chain.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use auditmem_projections::seal::KeyId;

use ed25519_dalek::VerifyingKey;
use rayon::prelude::*;

use super::check::{check_one, Parsed};
use super::report::{Failure, FailureKind, Report};
use crate::log::checkpoint::Checkpoint;
use crate::log::Head;
use auditmem_projections::event::LastKeys;

/// At most this many failures are kept in a report (the count goes on).
const MAX_LISTED: usize = 100;

/// Streaming verifier: feed batches of `(seq, one record's bytes)` in seq order, then finish.
/// A stored chunk of several records is split into its records first
/// ([`verify_tree`](super::verify_tree) does; the server's log stream sends them one by one).
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
    /// The first seq of `wanted` past the records linked so far (`u64::MAX` past the last):
    /// the keys linked increase, so a record below it is no anchor's, which a comparison
    /// tells instead of a lookup in `wanted` for every record.
    next_wanted: u64,
    /// The Merkle tree over the records read so far (`crate::tlog`): the complete subtrees of
    /// its right edge, largest first.
    frontier: Vec<tlog_tiles::Hash>,
    /// The last seq an anchor names: a root is checked only at an anchor's seq, so the tree
    /// is built up to it and not over the records after it (with no anchor, not at all: its
    /// SHA-256 per record is a large share of verify's CPU).
    tree_until: u64,
    leaves: u64,
    /// The tree's root after each anchor's seq.
    roots: BTreeMap<u64, tlog_tiles::Hash>,
    /// Records holding personal fields in the clear (written before encryption).
    plaintext: u64,
    /// Sealed records, by the set of keys they are sealed under.
    key_sets: HashMap<Vec<KeyId>, u64>,
    /// The key set of the last sealed records read and how many in a row, not yet in
    /// `key_sets`: a tenant's entries follow each other under one set, so most records cost a
    /// comparison instead of hashing their set into the map.
    run: Option<(Arc<[KeyId]>, u64)>,
}

impl Verifier {
    /// A verifier for a log read from seq 1; `anchor_seqs` are the seqs whose hashes the
    /// checkpoints or an expected head name.
    pub fn new(anchor_seqs: impl IntoIterator<Item = u64>) -> Verifier {
        let wanted: BTreeMap<u64, Option<[u8; 32]>> =
            anchor_seqs.into_iter().map(|s| (s, None)).collect();
        Verifier {
            tree_until: wanted.last_key_value().map_or(0, |(s, _)| *s),
            next_wanted: wanted.first_key_value().map_or(u64::MAX, |(s, _)| *s),
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
            wanted,
            frontier: Vec::new(),
            leaves: 0,
            roots: BTreeMap::new(),
            plaintext: 0,
            key_sets: HashMap::new(),
            run: None,
        }
    }

    /// Adds the leaf of the record stored at `seq` with hash `hash` to the tree, keeping the
    /// root after it when `anchor` (an anchor names `seq`).
    fn add_leaf(&mut self, seq: u64, hash: &[u8; 32], anchor: bool) {
        let mut node = crate::tlog::leaf_hash(seq, hash);
        let mut index = self.leaves;
        while index & 1 == 1 {
            match self.frontier.pop() {
                Some(left) => node = crate::tlog::node_hash(&left, &node),
                None => break,
            }
            index >>= 1;
        }
        self.frontier.push(node);
        self.leaves += 1;
        if anchor {
            let mut root = node;
            for left in self.frontier.iter().rev().skip(1) {
                root = crate::tlog::node_hash(left, &root);
            }
            self.roots.insert(seq, root);
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
            .map_init(LastKeys::default, |last, (k, v)| {
                check_one(*k, v.as_ref(), last)
            })
            .collect();
        for p in parsed {
            self.link(p);
        }
    }

    pub(super) fn link(&mut self, p: Parsed) {
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
        match c.sealing {
            Some(Some(keys)) => match &mut self.run {
                Some((set, n)) if Arc::ptr_eq(set, &keys) || *set == keys => *n += 1,
                run => {
                    if let Some((set, n)) = run.replace((keys, 1)) {
                        *self.key_sets.entry(set.to_vec()).or_default() += n;
                    }
                }
            },
            Some(None) => self.plaintext += 1,
            None => {}
        }
        let mut anchor = false;
        if key >= self.next_wanted {
            if let Some(slot) = self.wanted.get_mut(&key) {
                *slot = Some(c.hash);
                anchor = true;
            }
            self.next_wanted = self
                .wanted
                .range((Bound::Excluded(key), Bound::Unbounded))
                .next()
                .map_or(u64::MAX, |(s, _)| *s);
        }
        // Keys increase from here on (the out-of-order ones returned above), so the leaves
        // left out are the log's tail past the last anchor.
        if key <= self.tree_until {
            self.add_leaf(key, &c.hash, anchor);
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

    /// What is wrong with a checkpoint's Merkle root: the note must verify with the key the
    /// checkpoint names (the pinned one), sign the checkpoint's size and root, and that root
    /// must be the tree's over the records read. Checkpoints signed before the tree have none.
    fn root_disagrees(&self, cp: &Checkpoint, pinned: Option<&VerifyingKey>) -> Option<String> {
        let root = cp.root.as_deref()?;
        let what = format!("checkpoint at seq {} signed {}", cp.seq, cp.time);
        if let Some(note) = &cp.note {
            let origin = note.lines().next().unwrap_or_default();
            let key = match pinned {
                Some(k) => *k,
                None => match crate::log::checkpoint::parse_public_key(&cp.public_key) {
                    Ok(k) => k,
                    Err(why) => return Some(format!("{what}: {why}")),
                },
            };
            let vkey = crate::tlog::note::verifier_key(origin, &key);
            match crate::tlog::note::open(note.as_bytes(), &vkey, Vec::new(), 0) {
                Err(why) => return Some(format!("{what}: its signed note: {why}")),
                Ok(o) if o.size != cp.seq || o.root.to_string() != root => {
                    return Some(format!(
                        "{what}: its signed note is for tree size {} with root {}, the checkpoint says {} with {root}",
                        o.size,
                        o.root,
                        cp.seq
                    ))
                }
                Ok(_) => {}
            }
        }
        let computed = self.roots.get(&cp.seq)?;
        let computed = computed.to_string();
        (computed != root).then(|| {
            format!(
                "{what} signs Merkle root {root} for tree size {}, but the records give {computed}",
                cp.seq
            )
        })
    }

    /// Checks the anchors (expected head, checkpoints) and returns the report.
    pub fn finish(
        mut self,
        expect_head: Option<Head>,
        checkpoints: &[Checkpoint],
        pinned: Option<&VerifyingKey>,
    ) -> Report {
        if let Some((set, n)) = self.run.take() {
            *self.key_sets.entry(set.to_vec()).or_default() += n;
        }
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
            if let Some(why) = self.root_disagrees(cp, pinned) {
                self.fail(cp.seq, FailureKind::RootMismatch, why);
            }
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
            sealed: self.key_sets.values().sum(),
            plaintext: self.plaintext,
            erased: None,
            key_sets: self.key_sets.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{chain, linked, sealed_event, stored, two_users};
    use super::*;
    use crate::log::record::Record;

    fn run(stored: &[(u64, Vec<u8>)]) -> Report {
        let mut v = Verifier::new([]);
        v.feed(stored);
        v.finish(None, &[], None)
    }

    /// Records sealed under one key set, then another, then the first again, with a record
    /// of no personal fields between: each set counts every record sealed under it, whether
    /// or not they follow each other.
    #[test]
    fn key_sets_count_their_records_in_and_out_of_runs() {
        use auditmem_projections::seal::{Keyring, Subject};
        let (ring, alice, bob) = two_users();
        let events = [
            sealed_event(&ring, &alice, 1),
            sealed_event(&ring, &alice, 2),
            sealed_event(&ring, &bob, 3),
            b"not an audit event".to_vec(),
            sealed_event(&ring, &alice, 4),
            sealed_event(&ring, &bob, 5),
            sealed_event(&ring, &bob, 6),
        ];
        let records = linked(events);
        let rep = run(&stored(&records));
        assert!(rep.clean(), "{}", rep.render());
        let key = |s: &Subject| vec![ring.find(s).expect("ring").expect("a key")];
        let mut sets = rep.key_sets.clone();
        sets.sort();
        let mut want = vec![(key(&alice), 3), (key(&bob), 3)];
        want.sort();
        assert_eq!(sets, want);
        assert_eq!((rep.sealed, rep.plaintext), (6, 0));
    }

    /// A record at seq 0, or a record repeating an earlier seq and linking to the one before
    /// it, is not an intact chain (cases of the `record_chain` fuzz target, tests/fuzz).
    #[test]
    fn a_seq_of_zero_or_one_that_does_not_increase_is_out_of_order() {
        // The fuzz target's case, reduced: one record stored and sealed as seq 0, linking to
        // zeros.
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

    /// A record may be sealed with any seq and stored under any key: u64::MAX must not
    /// overflow the verifier's seq arithmetic (a panic in debug builds, a wrapped comparison
    /// in release).
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

    /// The tree is built up to the last anchor's seq and no further: past it no root is
    /// checked. The root at the anchor is the one a checkpoint signs.
    #[test]
    fn the_tree_stops_at_the_last_anchor() {
        let records = chain(50);
        let mut v = Verifier::new([]);
        v.feed(&stored(&records));
        assert_eq!((v.leaves, v.records), (0, 50));

        // RFC 6962's root over the first 20 leaves, split at the largest power of two below.
        fn root(leaves: &[tlog_tiles::Hash]) -> tlog_tiles::Hash {
            if leaves.len() == 1 {
                return leaves[0];
            }
            let k = leaves.len().next_power_of_two() / 2;
            tlog_tiles::node_hash(root(&leaves[..k]), root(&leaves[k..]))
        }
        let leaves: Vec<tlog_tiles::Hash> = records[..20]
            .iter()
            .map(|r| crate::tlog::leaf_hash(r.seq, &r.hash))
            .collect();
        let mut v = Verifier::new([10, 20]);
        v.feed(&stored(&records));
        assert_eq!((v.leaves, v.records), (20, 50));
        assert_eq!(v.roots.get(&20).map(|h| h.0), Some(root(&leaves).0));
        assert_eq!(v.roots.get(&10).map(|h| h.0), Some(root(&leaves[..10]).0));
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
        // fields and hash (a case of the property tests, tests/it/properties.rs).
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
