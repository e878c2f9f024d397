//! An in-memory ordered multiset of `(created_at, seq)` pairs with rank queries.
//!
//! The audit list needs, per tenant and per (tenant, action), the number of entries in a time
//! range (`total`) and the entry at a given rank (offset paging), both without scanning. A
//! sorted vector gives O(log n) rank but O(n) inserts when the gateway forwards entries late;
//! a list of sorted blocks of bounded size keeps inserts cheap (one block memmove) and rank
//! and select at O(blocks + log block).
//!
//! Memory is the other half of the design, as every audit entry has a pair here twice (its
//! tenant's index and its action's) for the life of the server. A full block is **sealed**:
//! its pairs are stored as offsets from the block's smallest `created_at` and smallest `seq`,
//! bit-packed at the width the largest offset needs ([`Packed`]). Entries of a busy tenant
//! arriving in order span well under a second and a few thousand seqs per block, so a pair
//! takes 4-5 bytes instead of 16. Only the last block, where in-order appends land, and at
//! most one other block, the last one a late pair was inserted into, are kept unpacked.

/// Pairs per block: a sealed block is unpacked (2,048 pairs, 32 KiB) to take a late pair.
const BLOCK: usize = 2048;

pub type Key = (i64, u64);

/// Unsigned integers of one fixed width (0 to 64 bits) packed into 64-bit words.
#[derive(Debug, Clone, Default, PartialEq)]
struct Bits {
    width: u32,
    words: Box<[u64]>,
}

impl Bits {
    /// Packs `values` at the width of the largest.
    fn pack(values: &[u64]) -> Bits {
        let max = values.iter().fold(0u64, |m, v| m | v);
        let width = 64 - max.leading_zeros();
        let total = values.len() * width as usize;
        let mut words = vec![0u64; total.div_ceil(64)].into_boxed_slice();
        if width > 0 {
            for (i, &v) in values.iter().enumerate() {
                let bit = i * width as usize;
                let (w, off) = (bit / 64, (bit % 64) as u32);
                words[w] |= v << off;
                if off + width > 64 {
                    // The value straddles two words (off > 0 here, so the shift is < 64).
                    words[w + 1] |= v >> (64 - off);
                }
            }
        }
        Bits { width, words }
    }

    #[inline]
    fn get(&self, i: usize) -> u64 {
        if self.width == 0 {
            return 0;
        }
        let bit = i * self.width as usize;
        let (w, off) = (bit / 64, (bit % 64) as u32);
        let mut v = self.words[w] >> off;
        if off + self.width > 64 {
            v |= self.words[w + 1] << (64 - off);
        }
        if self.width == 64 {
            v
        } else {
            v & ((1u64 << self.width) - 1)
        }
    }

    fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// A sealed block: its pairs as offsets from the smallest `created_at` (the first pair's, as
/// pairs are sorted) and the smallest `seq`, each column at its own width.
#[derive(Debug, Clone, PartialEq)]
struct Packed {
    base_ts: i64,
    base_seq: u64,
    /// The block's largest pair, which `rank` compares against for every block it passes.
    last: Key,
    len: u32,
    ts: Bits,
    seq: Bits,
}

impl Packed {
    /// `keys` is sorted and not empty.
    fn new(keys: &[Key]) -> Packed {
        let base_ts = keys[0].0;
        let base_seq = keys.iter().map(|k| k.1).min().unwrap_or(0);
        // created_at >= base_ts, so the wrapping difference is the true one (it fits in u64).
        let ts: Vec<u64> = keys
            .iter()
            .map(|k| (k.0 as u64).wrapping_sub(base_ts as u64))
            .collect();
        let seq: Vec<u64> = keys.iter().map(|k| k.1 - base_seq).collect();
        Packed {
            base_ts,
            base_seq,
            last: keys[keys.len() - 1],
            len: keys.len() as u32,
            ts: Bits::pack(&ts),
            seq: Bits::pack(&seq),
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Key {
        (
            (self.base_ts as u64).wrapping_add(self.ts.get(i)) as i64,
            self.base_seq + self.seq.get(i),
        )
    }

    fn unpack(&self) -> Vec<Key> {
        let mut v = Vec::with_capacity(BLOCK);
        v.extend((0..self.len as usize).map(|i| self.get(i)));
        v
    }
}

#[derive(Debug, Clone)]
enum Block {
    Open(Vec<Key>),
    Sealed(Packed),
}

impl Block {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Block::Open(v) => v.len(),
            Block::Sealed(p) => p.len as usize,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Key {
        match self {
            Block::Open(v) => v[i],
            Block::Sealed(p) => p.get(i),
        }
    }

    fn last(&self) -> Option<Key> {
        match self {
            Block::Open(v) => v.last().copied(),
            Block::Sealed(p) => Some(p.last),
        }
    }

    /// The number of leading pairs for which `pred` holds (`pred` is true then false).
    fn partition_point(&self, pred: impl Fn(&Key) -> bool) -> usize {
        match self {
            Block::Open(v) => v.partition_point(pred),
            Block::Sealed(p) => {
                let (mut lo, mut hi) = (0usize, p.len as usize);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if pred(&p.get(mid)) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }

    /// Pairs `[a, b)` of this block, ascending.
    fn range(&self, a: usize, b: usize) -> impl DoubleEndedIterator<Item = Key> + '_ {
        (a..b).map(move |i| self.get(i))
    }

    /// Bytes this block holds on the heap.
    fn heap_bytes(&self) -> usize {
        match self {
            Block::Open(v) => v.capacity() * std::mem::size_of::<Key>(),
            Block::Sealed(p) => p.ts.bytes() + p.seq.bytes(),
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct SortedIndex {
    blocks: Vec<Block>,
    len: usize,
    /// The one block other than the last that may be unpacked: the last one a late pair was
    /// inserted into (late pairs tend to come in runs landing in the same block).
    unsealed: Option<usize>,
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

    fn seal(&mut self, b: usize) {
        if let Block::Open(v) = &self.blocks[b] {
            if !v.is_empty() {
                self.blocks[b] = Block::Sealed(Packed::new(v));
            }
        }
    }

    /// Inserts `key`; a key already present is not inserted twice (apply is idempotent).
    pub fn insert(&mut self, key: Key) {
        // Past the last key (nearly every audit entry): append without searching, sealing the
        // last block and starting a new one when it is full.
        let after_last = match self.blocks.last().and_then(Block::last) {
            Some(last) => last < key,
            None => true,
        };
        if after_last {
            let n = self.blocks.len();
            match self.blocks.last_mut() {
                Some(Block::Open(last)) if last.len() < BLOCK => last.push(key),
                _ => {
                    if n > 0 {
                        self.seal(n - 1);
                    }
                    // Doubling from one lands on exactly BLOCK: a sealed block's Vec had no
                    // spare capacity to waste either.
                    self.blocks.push(Block::Open(vec![key]));
                }
            }
            self.len += 1;
            return;
        }
        // The first block whose last key is >= key holds the insertion point (one exists: key
        // is not past the last key).
        let b = self
            .blocks
            .partition_point(|blk| blk.last().is_some_and(|last| last < key))
            .min(self.blocks.len() - 1);
        let pos = self.blocks[b].partition_point(|k| *k < key);
        if pos < self.blocks[b].len() && self.blocks[b].get(pos) == key {
            return;
        }
        self.len += 1;
        if let Some(u) = self.unsealed.take() {
            if u != b {
                self.seal(u);
            }
        }
        let last = self.blocks.len() - 1;
        let mut v = match std::mem::replace(&mut self.blocks[b], Block::Open(Vec::new())) {
            Block::Open(v) => v,
            Block::Sealed(p) => p.unpack(),
        };
        if v.len() < BLOCK {
            v.insert(pos, key);
            self.blocks[b] = Block::Open(v);
            if b != last {
                self.unsealed = Some(b);
            }
            return;
        }
        // A full block splits in two halves before the insert, so neither reallocates past
        // BLOCK. The half that took the key stays unpacked; the other is sealed unless it is
        // the last block.
        let half = BLOCK / 2;
        let mut tail = Vec::with_capacity(BLOCK);
        tail.extend_from_slice(&v[half..]);
        v.truncate(half);
        let into_tail = pos > half;
        if into_tail {
            tail.insert(pos - half, key);
        } else {
            v.insert(pos, key);
        }
        self.blocks[b] = Block::Open(v);
        self.blocks.insert(b + 1, Block::Open(tail));
        let tail_is_last = b + 1 == self.blocks.len() - 1;
        match (into_tail, tail_is_last) {
            (_, true) => self.unsealed = Some(b),
            (true, false) => {
                self.seal(b);
                self.unsealed = Some(b + 1);
            }
            (false, false) => {
                self.seal(b + 1);
                self.unsealed = Some(b);
            }
        }
    }

    /// Number of keys strictly less than `key`.
    pub fn rank(&self, key: Key) -> usize {
        let mut n = 0;
        for block in &self.blocks {
            match block.last() {
                Some(last) if last < key => n += block.len(),
                _ => return n + block.partition_point(|k| *k < key),
            }
        }
        n
    }

    /// The key at position `idx` in ascending order.
    pub fn get(&self, mut idx: usize) -> Option<Key> {
        for block in &self.blocks {
            if idx < block.len() {
                return Some(block.get(idx));
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
                (before < end).then(|| (block, (end - before).min(block.len())))
            })
            .flat_map(|(block, n)| block.range(0, n).rev())
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
                (a < b).then(|| (block, a - start, b - start))
            })
            .flat_map(|(block, a, b)| block.range(a, b))
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

    /// Bytes held on the heap for the keys (blocks' contents and the block list).
    pub fn heap_bytes(&self) -> usize {
        self.blocks.iter().map(Block::heap_bytes).sum::<usize>()
            + self.blocks.capacity() * std::mem::size_of::<Block>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks every query against a sorted vector of the same keys.
    fn assert_matches(idx: &SortedIndex, reference: &[Key]) {
        assert_eq!(idx.len(), reference.len());
        let all: Vec<Key> = idx.between(0, idx.len()).collect();
        assert_eq!(all, reference);
        for (i, k) in reference.iter().enumerate().step_by(37) {
            assert_eq!(idx.get(i), Some(*k));
            assert_eq!(idx.rank(*k), i);
        }
        assert_eq!(idx.get(reference.len()), None);
        let desc: Vec<Key> = idx.rev_from(usize::MAX).collect();
        let want: Vec<Key> = reference.iter().rev().copied().collect();
        assert_eq!(desc, want);
        // At most the last block and one other are unpacked.
        let open = idx
            .blocks
            .iter()
            .filter(|b| matches!(b, Block::Open(_)))
            .count();
        assert!(open <= 2, "{open} unpacked blocks");
        for (i, b) in idx.blocks.iter().enumerate() {
            assert!(b.len() <= BLOCK && b.len() > 0);
            let sealed_allowed = i + 1 == idx.blocks.len() || idx.unsealed == Some(i);
            assert!(matches!(b, Block::Sealed(_)) || sealed_allowed, "block {i}");
        }
    }

    #[test]
    fn bits_round_trip_at_every_width() {
        for width in 0..=64u32 {
            let max = if width == 0 {
                0
            } else {
                u64::MAX >> (64 - width)
            };
            let values: Vec<u64> = (0..200u64)
                .map(|i| match i % 4 {
                    0 => max,
                    1 => 0,
                    _ => i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & max,
                })
                .collect();
            let bits = Bits::pack(&values);
            assert_eq!(bits.width, width);
            for (i, v) in values.iter().enumerate() {
                assert_eq!(bits.get(i), *v, "width {width} index {i}");
            }
        }
    }

    #[test]
    fn packed_blocks_hold_extreme_keys() {
        let keys = vec![(i64::MIN, u64::MAX), (-5, 0), (0, 1 << 40), (i64::MAX, 7)];
        let p = Packed::new(&keys);
        assert_eq!(p.unpack(), keys);
        assert_eq!(p.last, (i64::MAX, 7));
    }

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
        assert_matches(&idx, &reference);
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
    fn keys_in_order_are_sealed_into_packed_blocks() {
        // Given keys arriving in order, as nearly all audit entries do (a busy tenant: a few
        // hundred microseconds apart, seqs shared with other tenants),
        let mut idx = SortedIndex::new();
        let n = BLOCK * 5 + 7;
        let key = |s: u64| (1_700_000_000_000_000 + s as i64 * 350, 1_000_000 + s * 3);
        for s in 0..n as u64 {
            idx.insert(key(s));
        }
        // then every block but the last is sealed, at under 5 bytes a key,
        assert_eq!(idx.blocks.len(), 6);
        for b in &idx.blocks[..5] {
            let Block::Sealed(p) = b else {
                panic!("an unsealed full block")
            };
            assert_eq!(p.len as usize, BLOCK);
            assert!(b.heap_bytes() <= BLOCK * 5, "{} bytes", b.heap_bytes());
        }
        let mut reference: Vec<Key> = (0..n as u64).map(key).collect();
        assert_matches(&idx, &reference);
        // and late keys landing in sealed blocks unpack one at a time, split full ones and
        // stay in order.
        for (i, s) in [0u64, 700, 701, 2000, 5000, 9000, 3, 4100]
            .into_iter()
            .enumerate()
        {
            let k = (key(s).0 + 1, 5_000_000 + i as u64);
            idx.insert(k);
            reference.push(k);
            reference.sort();
            assert_matches(&idx, &reference);
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
    fn a_stream_of_late_keys_keeps_one_block_unpacked() {
        // Given a full index and then late keys walking backwards over every block,
        let mut idx = SortedIndex::new();
        let mut reference = Vec::new();
        for s in 0..(BLOCK * 4) as u64 {
            idx.insert((s as i64 * 10, s));
            reference.push((s as i64 * 10, s));
        }
        for (i, t) in (0..(BLOCK * 4) as i64).rev().step_by(97).enumerate() {
            let k = (t * 10 + 5, 1_000_000 + i as u64);
            idx.insert(k);
            reference.push(k);
        }
        reference.sort();
        // then the answers match and no more than two blocks are ever unpacked.
        assert_matches(&idx, &reference);
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
