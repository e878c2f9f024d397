//! [`verify_tree`]: a whole stored `log` tree read a window at a time, each window's key range
//! split across the cores for reading and hashing, its records then linked in order by one
//! [`Verifier`] while the next window is read.
//!
//! Invariant: a tampered tree can hold any key, u64::MAX included, so nothing in the range
//! arithmetic may overflow, and a range's width says nothing about how many records it holds.

use std::ops::Bound;

use ed25519_dalek::VerifyingKey;
use rayon::prelude::*;

use super::check::{check_stored, settle, Parsed};
use super::hashes::Hashes;
use super::report::Report;
use super::verifier::Verifier;
use crate::log::checkpoint::Checkpoint;
use crate::log::record;
use crate::log::Head;
use auditmem_projections::event::LastKeys;

/// Seqs one thread reads and checks at a time. A window (this many per thread) is linked and
/// dropped before the one after the next is read, so verify holds a few windows of checked
/// records (~100 bytes each) whatever the log's size, instead of every record of the log.
const SPAN: u64 = 32_768;

/// Verifies a whole `log` tree, reporting progress through `tick(records_done)`.
///
/// The tree is read a window at a time: a window's key range is split across the cores, each
/// part iterated and hashed on its own thread (sled serves concurrent readers), and its records
/// are linked in order while the next window is read.
pub fn verify_tree(
    tree: &sled::Tree,
    expect_head: Option<Head>,
    checkpoints: &[Checkpoint],
    pinned: Option<&VerifyingKey>,
    tick: &(dyn Fn(u64) + Sync),
) -> Report {
    verify_windows(tree, SPAN, expect_head, checkpoints, pinned, tick)
}

/// [`verify_tree`] with windows of `span` seqs a thread.
fn verify_windows(
    tree: &sled::Tree,
    span: u64,
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
    let key_of = |kv: Option<sled::Result<(sled::IVec, sled::IVec)>>| {
        kv.and_then(|r| r.ok()).map(|(k, _)| k)
    };
    let (Some(mut from), Some(last)) = (
        key_of(tree.first().transpose()),
        key_of(tree.last().transpose()),
    ) else {
        return v.finish(expect_head, checkpoints, pinned);
    };
    let hi = seq_at(&last);
    let threads = rayon::current_num_threads().max(1);
    let mut checked: Vec<Vec<Parsed>> = Vec::new();
    loop {
        // Up to one key range a thread from the key `from`, each `span` seqs wide and each
        // starting where the one before ends, so that no key between them (a tampered tree's
        // key of another length included) falls outside; the last range reaching past the
        // last key is open-ended.
        let mut ranges: Vec<KeyRange> = Vec::with_capacity(threads);
        let mut lower = Bound::Included(from.to_vec());
        let mut end = Some(seq_at(&from));
        while ranges.len() < threads {
            let Some(upper) = end.and_then(|e| e.checked_add(span)).filter(|u| *u <= hi) else {
                ranges.push((lower, Bound::Unbounded));
                end = None;
                break;
            };
            ranges.push((lower, Bound::Excluded(record::seq_key(upper))));
            lower = Bound::Included(record::seq_key(upper).to_vec());
            end = Some(upper);
        }
        let read = || -> Vec<Vec<Parsed>> {
            ranges
                .par_iter()
                .map(|r| check_range(tree, r.clone(), (span, hi), tick))
                .collect()
        };
        let (mut read, ()) = rayon::join(read, || link(&mut v, std::mem::take(&mut checked)));
        // The next window starts at the first key past this one: a gap in the keys (a
        // tampered tree's u64::MAX) is skipped, not walked.
        let next = end.and_then(|e| match tree.range(record::seq_key(e)..).next()? {
            Ok((k, _)) => Some(k),
            Err(err) => {
                read.push(vec![Parsed {
                    key: e,
                    result: Err(format!("storage error reading the log: {err}")),
                }]);
                None
            }
        });
        checked = read;
        match next {
            Some(k) => from = k,
            None => break,
        }
    }
    link(&mut v, checked);
    v.finish(expect_head, checkpoints, pinned)
}

/// The keys a thread reads: from a key (a seq's, or one that sorts where a tampered tree put
/// it) up to a seq's key, or to the end.
type KeyRange = (Bound<Vec<u8>>, Bound<[u8; 8]>);

/// The seq the key `k` stands for; for a key that is not 8 bytes (a tampered tree's), the seq
/// of its first 8 bytes padded with zeros, which is where it sorts among the seqs' keys.
fn seq_at(k: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = k.len().min(8);
    b[..n].copy_from_slice(&k[..n]);
    u64::from_be_bytes(b)
}

fn link(v: &mut Verifier, checked: Vec<Vec<Parsed>>) {
    for p in checked.into_iter().flatten() {
        v.link(p);
    }
}

/// Reads and checks the records stored under the keys of `range`; a storage error ends the
/// range with a record that names it.
///
/// The records' vector is sized for the range's seqs, those up to `last_seq` (the last key's) in
/// an open range, at most `span` (a tampered tree's range can hold any number), rather than
/// grown record by record.
fn check_range(
    tree: &sled::Tree,
    range: KeyRange,
    (span, last_seq): (u64, u64),
    tick: &(dyn Fn(u64) + Sync),
) -> Vec<Parsed> {
    let a = match &range.0 {
        Bound::Included(k) | Bound::Excluded(k) => seq_at(k),
        Bound::Unbounded => 0,
    };
    let seqs = match &range.1 {
        Bound::Excluded(k) => seq_at(k).saturating_sub(a),
        _ => last_seq.saturating_sub(a).saturating_add(1),
    };
    let mut out = Vec::with_capacity(usize::try_from(seqs.min(span)).unwrap_or(0));
    let mut last = LastKeys::default();
    let mut hashes = Hashes::default();
    for kv in tree.range::<&[u8], _>((
        range.0.as_ref().map(Vec::as_slice),
        range.1.as_ref().map(|k| &k[..]),
    )) {
        match kv {
            Ok((k, val)) => check_stored(
                record::seq_from_key(&k).unwrap_or(0),
                &val,
                &mut out,
                &mut last,
                &mut hashes,
            ),
            Err(e) => {
                let at = out
                    .last()
                    .map(|p: &Parsed| p.key.saturating_add(1))
                    .unwrap_or(a);
                out.push(Parsed {
                    key: at,
                    result: Err(format!("storage error reading the log: {e}")),
                });
                break;
            }
        }
    }
    // The hashes still queued: every record's `hash_ok` is final before it is linked.
    hashes.finish(&mut |t, h| settle(&mut out, t, h));
    tick(out.len() as u64);
    out
}

#[cfg(test)]
mod tests {
    use super::super::report::FailureKind;
    use super::super::testing::{chain, linked, sealed_event, stored, two_users};
    use super::*;
    use crate::log::record::Record;

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

    /// A tree read in windows much smaller than it (4 seqs a thread, so each chunk of 32 is a
    /// window of its own, and the gaps between chunk keys are skipped): every record is linked
    /// in order across windows, the key sets are counted across them, and a tampered record is
    /// named at its seq, as when the whole tree is one window.
    #[test]
    fn a_tree_read_in_windows_links_and_counts_across_them() {
        use auditmem_projections::seal::{Keyring, Subject};
        let (ring, alice, bob) = two_users();
        let records = linked((1u64..=100).map(|seq| {
            let who = if (41..=70).contains(&seq) {
                &bob
            } else {
                &alice
            };
            sealed_event(&ring, who, seq.into())
        }));
        let key = |s: &Subject| vec![ring.find(s).expect("ring").expect("a key")];
        let mut want_sets = vec![(key(&alice), 70), (key(&bob), 30)];
        want_sets.sort();
        for span in [4, SPAN] {
            let (_db, tree) = chunked_tree(&records);
            let rep = verify_windows(&tree, span, None, &[], None, &|_| {});
            assert!(rep.clean(), "span {span}: {}", rep.render());
            assert_eq!((rep.records, rep.valid, rep.head_seq), (100, 100, 100));
            assert_eq!(rep.head_hash, hex::encode(records[99].hash));
            let mut sets = rep.key_sets.clone();
            sets.sort();
            assert_eq!(sets, want_sets, "span {span}");
            assert_eq!((rep.sealed, rep.plaintext), (100, 0));

            // Seq 70 (in the chunk under key 65) edited in place.
            let mut inner: Vec<Vec<u8>> = records[64..96].iter().map(Record::encode).collect();
            let last = inner[5].len() - 1;
            inner[5][last] ^= 1;
            tree.insert(65u64.to_be_bytes(), inner.concat())
                .expect("insert");
            let rep = verify_windows(&tree, span, None, &[], None, &|_| {});
            assert_eq!(
                first(&rep),
                (70, FailureKind::HashMismatch),
                "span {span}: {}",
                rep.render()
            );
            assert_eq!((rep.records, rep.valid), (100, 99), "span {span}");
        }
    }

    /// Keys of another length than a seq's (a tampered tree's) at a window's edge, at a range's
    /// edge, after the last seq and as the last key are each read and reported, never passed
    /// over: a verdict that skipped them would miss what they hold.
    #[test]
    fn keys_of_another_length_are_read_wherever_they_sort() {
        let records = chain(100);
        let odd = |seq: u64, extra: &[u8]| [&record::seq_key(seq)[..], extra].concat();
        for span in [4, SPAN] {
            let (_db, tree) = chunked_tree(&records);
            for k in [
                odd(5, &[0]),
                odd(9, &[0]),
                odd(200, &[1]),
                vec![0, 0, 0, 0, 0, 0, 0x7f],
            ] {
                tree.insert(k, records[0].encode()).expect("insert");
            }
            let rep = verify_windows(&tree, span, None, &[], None, &|_| {});
            assert_eq!(rep.records, 104, "span {span}: {}", rep.render());
            assert_eq!(rep.valid, 100, "span {span}: {}", rep.render());
            assert_eq!(rep.failure_count, 4, "span {span}: {}", rep.render());
        }
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
}
