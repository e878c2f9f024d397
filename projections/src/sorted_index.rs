//! An in-memory ordered multiset of `(created_at, seq)` pairs with rank queries.
//!
//! The audit list needs, per tenant and per (tenant, action), the number of entries in a time
//! range (`total`) and the entry at a given rank (offset paging), both without scanning. A
//! sorted vector gives O(log n) rank but O(n) inserts when the gateway forwards entries late;
//! a list of sorted blocks of bounded size keeps inserts cheap (one block memmove) and rank
//! and select at O(blocks + log block).

/// Maximum entries per block before it splits; 2,048 pairs = 32 KiB, one cheap memmove.
const BLOCK: usize = 2048;

pub type Key = (i64, u64);

#[derive(Debug, Default, Clone)]
pub struct SortedIndex {
    blocks: Vec<Vec<Key>>,
    len: usize,
}

impl SortedIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Inserts `key`; a key already present is not inserted twice (apply is idempotent).
    ///
    /// Memory is the reason for the shape: keys arriving in order (nearly all of them) fill the
    /// last block to exactly [`BLOCK`] and then start a new one, so sealed blocks are full and
    /// their capacity is their length (`Vec` doubling lands on the power of two). Splitting a
    /// full last block on append, as this did before, left every sealed block half full with
    /// twice its keys' capacity: 32 bytes a key instead of 16, most of the audit index's RSS.
    pub fn insert(&mut self, key: Key) {
        // Past the last key: append without searching, into a new block if the last is full.
        let after_last = match self.blocks.last().and_then(|b| b.last()) {
            Some(last) => *last < key,
            None => true,
        };
        if after_last {
            match self.blocks.last_mut() {
                Some(last) if last.len() < BLOCK => last.push(key),
                _ => self.blocks.push(vec![key]),
            }
            self.len += 1;
            return;
        }
        // The first block whose last key is >= key holds the insertion point (one exists: key
        // is not past the last key).
        let b = self
            .blocks
            .partition_point(|blk| blk.last().is_some_and(|last| *last < key))
            .min(self.blocks.len() - 1);
        let pos = match self.blocks[b].binary_search(&key) {
            Ok(_) => return,
            Err(pos) => pos,
        };
        self.len += 1;
        if self.blocks[b].len() < BLOCK {
            self.blocks[b].insert(pos, key);
            return;
        }
        // A full block splits in two halves before the insert, so neither reallocates past
        // BLOCK; late keys (a gateway forwarding old entries) are rare enough that these
        // half-full blocks stay few.
        let half = BLOCK / 2;
        let mut tail = Vec::with_capacity(BLOCK);
        tail.extend_from_slice(&self.blocks[b][half..]);
        self.blocks[b].truncate(half);
        if pos <= half {
            self.blocks[b].insert(pos, key);
        } else {
            tail.insert(pos - half, key);
        }
        self.blocks.insert(b + 1, tail);
    }

    /// Number of keys strictly less than `key`.
    pub fn rank(&self, key: Key) -> usize {
        let mut n = 0;
        for block in &self.blocks {
            match block.last() {
                Some(last) if *last < key => n += block.len(),
                _ => return n + block.partition_point(|k| *k < key),
            }
        }
        n
    }

    /// The key at position `idx` in ascending order.
    pub fn get(&self, mut idx: usize) -> Option<Key> {
        for block in &self.blocks {
            if idx < block.len() {
                return Some(block[idx]);
            }
            idx -= block.len();
        }
        None
    }

    /// Keys at positions `[lo, hi)` in descending order, skipping `skip` and returning at most `limit`.
    pub fn descending(&self, lo: usize, hi: usize, skip: usize, limit: usize) -> Vec<Key> {
        // `skip` comes from a client's page number (saturated to usize::MAX for a huge one), so
        // `1 + skip` may overflow: a panic in a debug build, a wrapped start in a release one.
        let Some(start) = skip.checked_add(1).and_then(|n| hi.checked_sub(n)) else {
            return Vec::new();
        };
        if start < lo {
            return Vec::new();
        }
        self.rev_from(start + 1)
            .take(limit.min(start + 1 - lo))
            .collect()
    }

    /// Keys at positions below `end`, in descending order. Walks the blocks, not a `get` per
    /// key (which walks the block list once per key).
    pub fn rev_from(&self, end: usize) -> impl Iterator<Item = Key> + '_ {
        let end = end.min(self.len);
        let mut before = self.len;
        self.blocks
            .iter()
            .rev()
            .filter_map(move |block| {
                before -= block.len();
                (before < end).then(|| &block[..(end - before).min(block.len())])
            })
            .flat_map(|b| b.iter().rev().copied())
    }

    /// Keys at positions `[lo, hi)`, in ascending order.
    pub fn between(&self, lo: usize, hi: usize) -> impl Iterator<Item = Key> + '_ {
        let hi = hi.min(self.len);
        let mut before = 0;
        self.blocks
            .iter()
            .filter_map(move |block| {
                let start = before;
                before += block.len();
                let (a, b) = (lo.max(start), hi.min(before));
                (a < b).then(|| &block[a - start..b - start])
            })
            .flat_map(|b| b.iter().copied())
    }

    /// Positions `[lo, hi)` of keys with `from.0 <= created_at <= to.0`.
    pub fn range(&self, from: i64, to: i64) -> (usize, usize) {
        let lo = self.rank((from, 0));
        let hi = if to == i64::MAX {
            self.len
        } else {
            self.rank((to + 1, 0))
        };
        (lo, hi.max(lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_and_select_match_a_sorted_vector() {
        // Given keys inserted in a scrambled order, including duplicates,
        let mut idx = SortedIndex::new();
        let mut reference = Vec::new();
        let mut x: u64 = 12345;
        for seq in 0..10_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = (x >> 33) as i64 % 5000;
            idx.insert((t, seq));
            idx.insert((t, seq)); // idempotent
            reference.push((t, seq));
        }
        reference.sort();
        // then len, select and rank agree with the sorted vector.
        assert_eq!(idx.len(), reference.len());
        for (i, k) in reference.iter().enumerate().step_by(97) {
            assert_eq!(idx.get(i), Some(*k));
            assert_eq!(idx.rank(*k), i);
        }
        let (lo, hi) = idx.range(1000, 1999);
        let expected = reference
            .iter()
            .filter(|(t, _)| (1000..=1999).contains(t))
            .count();
        assert_eq!(hi - lo, expected);
        let page = idx.descending(lo, hi, 3, 5);
        let want: Vec<Key> = reference[lo..hi]
            .iter()
            .rev()
            .skip(3)
            .take(5)
            .copied()
            .collect();
        assert_eq!(page, want);
    }

    #[test]
    fn keys_in_order_fill_blocks_to_their_capacity() {
        // Given keys arriving in order, as nearly all audit entries do,
        let mut idx = SortedIndex::new();
        let n = BLOCK * 5 + 7;
        for s in 0..n as u64 {
            idx.insert((s as i64 / 3, s));
        }
        // then every block but the last is full and holds no spare capacity (16 bytes a key),
        assert_eq!(idx.blocks.len(), 6);
        for b in &idx.blocks[..5] {
            assert_eq!((b.len(), b.capacity()), (BLOCK, BLOCK));
        }
        assert_eq!(idx.blocks[5].len(), 7);
        // and late keys landing in full blocks split them and stay in order.
        let mut reference: Vec<Key> = (0..n as u64).map(|s| (s as i64 / 3, s)).collect();
        for (i, t) in [(0u64, 0i64), (1, 700), (2, 700), (3, 2000), (4, 5000)] {
            let k = (t, n as u64 + i);
            idx.insert(k);
            reference.push(k);
        }
        reference.sort();
        assert_eq!(idx.len(), reference.len());
        let all: Vec<Key> = idx.descending(0, idx.len(), 0, usize::MAX);
        let want: Vec<Key> = reference.iter().rev().copied().collect();
        assert_eq!(all, want);
        for b in &idx.blocks {
            assert!(b.len() <= BLOCK && !b.is_empty());
        }
        // A window in the middle, across block edges, matches the sorted vector.
        let (lo, hi) = (BLOCK - 5, 3 * BLOCK + 9);
        assert_eq!(
            idx.between(lo, hi).collect::<Vec<_>>(),
            reference[lo..hi].to_vec()
        );
        assert_eq!(
            idx.rev_from(lo + 3).collect::<Vec<_>>(),
            reference[..lo + 3]
                .iter()
                .rev()
                .copied()
                .collect::<Vec<_>>()
        );
        let page = idx.descending(lo, hi, 2, 3000);
        let want: Vec<Key> = reference[lo..hi]
            .iter()
            .rev()
            .skip(2)
            .take(3000)
            .copied()
            .collect();
        assert_eq!(page, want);
    }

    #[test]
    fn descending_past_the_end_is_empty() {
        let mut idx = SortedIndex::new();
        for s in 0..10 {
            idx.insert((s as i64, s));
        }
        assert!(idx.descending(0, 10, 10, 5).is_empty());
        assert_eq!(idx.descending(0, 10, 8, 5), vec![(1, 1), (0, 0)]);
        assert!(SortedIndex::new().descending(0, 0, 0, 5).is_empty());
    }
}
