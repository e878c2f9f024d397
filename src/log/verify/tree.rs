//! [`verify_tree`]: a whole stored `log` tree, its key range split across the cores for
//! reading and hashing, every record then linked in order by one [`Verifier`].
//!
//! Invariant: a tampered tree can hold any key, u64::MAX included, so nothing in the range
//! arithmetic may overflow, and a range's width says nothing about how many records it holds.

use ed25519_dalek::VerifyingKey;
use rayon::prelude::*;

use super::check::{check_stored, Parsed};
use super::report::Report;
use super::verifier::Verifier;
use crate::log::checkpoint::Checkpoint;
use crate::log::record;
use crate::log::Head;

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
            .and_then(|(k, _)| record::seq_from_key(&k))
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
            for kv in tree.range(record::seq_key(a)..=record::seq_key(b)) {
                match kv {
                    Ok((k, val)) => {
                        check_stored(record::seq_from_key(&k).unwrap_or(0), &val, &mut out)
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
    use super::super::report::FailureKind;
    use super::super::testing::{chain, stored};
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
