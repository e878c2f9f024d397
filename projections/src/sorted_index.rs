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
    pub fn insert(&mut self, key: Key) {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::with_capacity(BLOCK));
        }
        // Entries mostly arrive in time order: past the last key, append without searching.
        if let Some(last) = self.blocks.last_mut() {
            if last.last().is_some_and(|k| *k < key) && last.len() < BLOCK {
                last.push(key);
                self.len += 1;
                return;
            }
        }
        // The first block whose last key is >= key holds the insertion point; past every
        // block, append to the last one (the common case: entries arrive in time order).
        let b = self
            .blocks
            .partition_point(|blk| blk.last().is_some_and(|last| *last < key))
            .min(self.blocks.len() - 1);
        let block = &mut self.blocks[b];
        match block.binary_search(&key) {
            Ok(_) => return,
            Err(pos) => block.insert(pos, key),
        }
        self.len += 1;
        if block.len() > BLOCK {
            let tail = block.split_off(block.len() / 2);
            self.blocks.insert(b + 1, tail);
        }
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
        let mut out = Vec::with_capacity(limit.min(hi.saturating_sub(lo)));
        // `skip` comes from a client's page number (saturated to usize::MAX for a huge one), so
        // `1 + skip` may overflow: a panic in a debug build, a wrapped start in a release one.
        let Some(start) = skip.checked_add(1).and_then(|n| hi.checked_sub(n)) else {
            return out;
        };
        if start < lo {
            return out;
        }
        let mut idx = start;
        while out.len() < limit {
            match self.get(idx) {
                Some(k) => out.push(k),
                None => break,
            }
            if idx == lo {
                break;
            }
            idx -= 1;
        }
        out
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
