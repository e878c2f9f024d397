//! A log-order list of seqs ([`LogOrder`]): one tenant's positions of some kind of record, so
//! that "its records after log position P" costs those records, not every tenant's since P.
//! The audit index keeps one per tenant of its entries (a live tail's backfill, an
//! `audit.entry` webhook); the tenant events index one of its other webhook events.
//!
//! Invariant: seqs come in ascending order (a projection folds the log in order), so every
//! one lands past the last: an append. Each is kept as the pair `(0, seq)` of a
//! [`SortedIndex`], so a sealed block packs to the width of its seqs' spread alone (~1.6-2.3
//! bytes a seq) and, given a block file, goes there like the time indexes' blocks.

use std::io;

use crate::sorted_index::{BlockFile, SortedIndex};

pub(crate) struct LogOrder(SortedIndex);

impl LogOrder {
    /// An empty list writing its sealed blocks to `file` (on the heap without one).
    pub(crate) fn with_file(file: Option<BlockFile>) -> Self {
        Self(SortedIndex::with_file(file))
    }

    /// Adds `seq`; one already present is not added twice. An error is the block file's.
    pub(crate) fn push(&mut self, seq: u64) -> io::Result<()> {
        self.0.insert((0, seq))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.heap_bytes()
    }

    /// The seqs with `after < seq <= upto`, in log order, at most `limit`: a rank, then the
    /// seqs from there. An error is the block file's.
    pub(crate) fn after(&self, after: u64, upto: u64, limit: usize) -> io::Result<Vec<u64>> {
        let lo = self.0.rank((0, after.saturating_add(1)))?;
        let mut seqs = Vec::new();
        for k in self.0.between(lo, self.0.len()) {
            let seq = k?.1;
            if seq > upto || seqs.len() >= limit {
                break;
            }
            seqs.push(seq);
        }
        Ok(seqs)
    }
}

/// How far a read of at most `limit` seqs up to `upto` answered for: through its last seq
/// when it was cut at `limit` (later ones may follow), else through `upto`.
pub(crate) fn reached(seqs: &[u64], upto: u64, limit: usize) -> u64 {
    match seqs.last() {
        Some(&last) if seqs.len() >= limit => last,
        _ => upto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_reads_the_seqs_past_a_position_up_to_a_bound_and_a_limit() {
        let mut l = LogOrder::with_file(None);
        // More than a block, so the rank crosses sealed blocks.
        let seqs: Vec<u64> = (1..=5000).map(|i| i * 3).collect();
        for &s in &seqs {
            l.push(s).unwrap();
        }
        l.push(15).unwrap();
        assert_eq!(l.len(), 5000);
        assert_eq!(l.after(0, u64::MAX, 3).unwrap(), vec![3, 6, 9]);
        assert_eq!(l.after(7000, 7010, 10).unwrap(), vec![7002, 7005, 7008]);
        assert_eq!(l.after(7001, 7001, 10).unwrap(), Vec::<u64>::new());
        assert_eq!(l.after(15000, u64::MAX, 10).unwrap(), Vec::<u64>::new());
        assert_eq!(reached(&[3, 6, 9], 100, 3), 9);
        assert_eq!(reached(&[3, 6], 100, 3), 100);
        assert_eq!(reached(&[], 100, 3), 100);
    }
}
