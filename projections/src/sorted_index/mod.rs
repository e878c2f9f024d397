//! An ordered multiset of `(created_at, seq)` pairs with rank queries.
//!
//! The audit list needs, per tenant and per (tenant, action), the number of entries in a time
//! range (`total`) and the entry at a given rank (offset paging), both without scanning. A
//! sorted vector gives O(log n) rank but O(n) inserts when the gateway forwards entries late;
//! a list of sorted blocks of bounded size keeps inserts cheap (one block memmove) and rank
//! and select at O(blocks + log block).
//!
//! Memory is the other half of the design, as every audit entry has a pair here twice (its
//! tenant's index and its action's) for as long as the log keeps it. A full block is
//! **sealed**: its pairs are stored as offsets from the block's smallest `created_at` and
//! smallest `seq`, bit-packed at the width the largest offset needs (`Packed`). Entries of a
//! busy tenant arriving in order span well under a second and a few thousand seqs per block,
//! so a pair takes 4-5 bytes instead of 16. Only the last block, where in-order appends land,
//! and at most one other block, the last one a late pair was inserted into, are kept unpacked.
//!
//! An index given a [`BlockFile`] writes each sealed block's packed words there and keeps in
//! memory only the block's summary (bases, widths, length, last pair, file offset: ~60 bytes
//! per 2,048 pairs). A query reads the one or two blocks it lands in (a ~9 KB `pread`,
//! normally from the page cache) instead of holding every pair, so the service's memory does
//! not grow with the audit log (held on the heap, the packed pairs take ~9 bytes an entry).
//! The file is unlinked and rebuilt at each open, so nothing in it is trusted across restarts.

mod block;

use std::io;

pub use block::BlockFile;
#[cfg(test)]
use block::{Bits, Words};
use block::{Block, Packed, View};

/// Pairs per block: a sealed block is unpacked (2,048 pairs, 32 KiB) to take a late pair.
const BLOCK: usize = 2048;

pub type Key = (i64, u64);

#[derive(Debug, Default, Clone)]
pub struct SortedIndex {
    blocks: Vec<Block>,
    len: usize,
    /// The one block other than the last that may be unpacked: the last one a late pair was
    /// inserted into (late pairs tend to come in runs landing in the same block).
    unsealed: Option<usize>,
    /// Where sealed blocks' words go; `None`: they stay on the heap.
    file: Option<BlockFile>,
}

impl SortedIndex {
    /// An index holding everything on the heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// An index writing its sealed blocks to `file` (on the heap without one).
    pub fn with_file(file: Option<BlockFile>) -> Self {
        Self {
            file,
            ..Self::default()
        }
    }

    /// A new empty index writing its sealed blocks where this one does.
    pub fn sibling(&self) -> Self {
        Self::with_file(self.file.clone())
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
                let mut p = Packed::new(v);
                if let Some(f) = &self.file {
                    p.spill(f);
                }
                self.blocks[b] = Block::Sealed(p);
            }
        }
    }

    /// Inserts `key`; a key already present is not inserted twice (apply is idempotent). An
    /// error is the block file's, read for a late key landing in a sealed block; the index is
    /// then unchanged.
    pub fn insert(&mut self, key: Key) -> io::Result<()> {
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
            return Ok(());
        }
        // The first block whose last key is >= key holds the insertion point (one exists: key
        // is not past the last key).
        let b = self
            .blocks
            .partition_point(|blk| blk.last().is_some_and(|last| last < key))
            .min(self.blocks.len() - 1);
        // The block's pairs: an open block's taken (put back below whatever happens), a sealed
        // one's unpacked (it stays as it is until replaced).
        let mut v = match &mut self.blocks[b] {
            Block::Open(v) => std::mem::take(v),
            Block::Sealed(p) => p.unpack(self.file.as_ref())?,
        };
        let pos = v.partition_point(|k| *k < key);
        if pos < v.len() && v[pos] == key {
            if let Block::Open(taken) = &mut self.blocks[b] {
                *taken = v;
            }
            return Ok(());
        }
        self.len += 1;
        if let Some(u) = self.unsealed.take() {
            if u != b {
                self.seal(u);
            }
        }
        let last = self.blocks.len() - 1;
        if v.len() < BLOCK {
            v.insert(pos, key);
            self.blocks[b] = Block::Open(v);
            if b != last {
                self.unsealed = Some(b);
            }
            return Ok(());
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
        Ok(())
    }

    /// Number of keys strictly less than `key`.
    pub fn rank(&self, key: Key) -> io::Result<usize> {
        let mut n = 0;
        for block in &self.blocks {
            match block.last() {
                Some(last) if last < key => n += block.len(),
                // No pair of the block is below `key` (its first is at least the bases): no
                // read. An all-time filter ranks `(i64::MIN, 0)` on every list call.
                _ if matches!(block, Block::Sealed(p) if key <= (p.base_ts, p.base_seq)) => {
                    return Ok(n)
                }
                _ => {
                    let view = block.view(self.file.as_ref())?;
                    return Ok(n + view.partition_point(|k| *k < key));
                }
            }
        }
        Ok(n)
    }

    /// The key at position `idx` in ascending order.
    pub fn get(&self, mut idx: usize) -> io::Result<Option<Key>> {
        for block in &self.blocks {
            if idx < block.len() {
                return Ok(Some(block.view(self.file.as_ref())?.get(idx)));
            }
            idx -= block.len();
        }
        Ok(None)
    }

    /// Keys at positions `[lo, hi)` in descending order, skipping `skip` and returning at most `limit`.
    pub fn descending(
        &self,
        lo: usize,
        hi: usize,
        skip: usize,
        limit: usize,
    ) -> io::Result<Vec<Key>> {
        // `skip` comes from a client's page number (saturated to usize::MAX for a huge one), so
        // `1 + skip` may overflow: a panic in a debug build, a wrapped start in a release one.
        let Some(start) = skip.checked_add(1).and_then(|n| hi.checked_sub(n)) else {
            return Ok(Vec::new());
        };
        if start < lo {
            return Ok(Vec::new());
        }
        self.rev_from(start + 1)
            .take(limit.min(start + 1 - lo))
            .collect()
    }

    /// Keys at positions below `end`, in descending order. Walks the blocks, reading each
    /// once as it is reached and decoding only the keys taken, not a `get` per key (which
    /// walks the block list once per key).
    pub fn rev_from(&self, end: usize) -> Descending<'_> {
        let end = end.min(self.len);
        // The block holding position `end - 1` (the first one for 0) and its keys below `end`.
        let mut start = 0;
        let mut at = (0, 0);
        for (i, block) in self.blocks.iter().enumerate() {
            if end <= start + block.len() {
                at = (i, end - start);
                break;
            }
            start += block.len();
        }
        Descending {
            idx: self,
            next_block: if self.blocks.is_empty() { 0 } else { at.0 + 1 },
            first_take: Some(at.1),
            view: None,
            left: 0,
            failed: false,
        }
    }

    /// Keys at positions `[lo, hi)`, in ascending order.
    pub fn between(&self, lo: usize, hi: usize) -> impl Iterator<Item = io::Result<Key>> + '_ {
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
            .flat_map(|(block, a, b)| block.range(self.file.as_ref(), a, b))
    }

    /// Positions `[lo, hi)` of keys with `from.0 <= created_at <= to.0`.
    pub fn range(&self, from: i64, to: i64) -> io::Result<(usize, usize)> {
        let lo = self.rank((from, 0))?;
        let hi = if to == i64::MAX {
            self.len
        } else {
            self.rank((to + 1, 0))?
        };
        Ok((lo, hi.max(lo)))
    }

    /// Bytes held on the heap for the keys (blocks' contents and the block list).
    pub fn heap_bytes(&self) -> usize {
        self.blocks.iter().map(Block::heap_bytes).sum::<usize>()
            + self.blocks.capacity() * std::mem::size_of::<Block>()
    }
}

/// The keys of a [`SortedIndex`] below a position, newest first ([`SortedIndex::rev_from`]).
/// An error reading a block ends it after that error.
pub struct Descending<'a> {
    idx: &'a SortedIndex,
    /// Blocks `[0, next_block)` are still to be read, from the last.
    next_block: usize,
    /// Keys to take from the first block read (the rest of it is at or past the end).
    first_take: Option<usize>,
    view: Option<View<'a>>,
    /// Keys of `view` not yet returned: its first `left`.
    left: usize,
    failed: bool,
}

impl Iterator for Descending<'_> {
    type Item = io::Result<Key>;

    fn next(&mut self) -> Option<io::Result<Key>> {
        loop {
            if self.left > 0 {
                if let Some(v) = &self.view {
                    self.left -= 1;
                    return Some(Ok(v.get(self.left)));
                }
            }
            if self.next_block == 0 || self.failed {
                return None;
            }
            self.next_block -= 1;
            match self.idx.blocks[self.next_block].view(self.idx.file.as_ref()) {
                Ok(v) => {
                    self.left = self.first_take.take().unwrap_or(v.len()).min(v.len());
                    self.view = Some(v);
                }
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
