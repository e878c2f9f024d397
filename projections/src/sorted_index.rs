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

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::unlinked::UnlinkedFile;

/// Pairs per block: a sealed block is unpacked (2,048 pairs, 32 KiB) to take a late pair.
const BLOCK: usize = 2048;

pub type Key = (i64, u64);

/// An unlinked file that sealed blocks' words are written to, shared by every index of a
/// projection, created in its directory when the first block is sealed (a server whose
/// indexes never fill a block has none). Append-only: a block sealed again after a late pair
/// is written anew and its old words are left behind (late pairs are rare; the file goes at
/// the next open).
#[derive(Debug, Clone)]
pub struct BlockFile(Arc<BlockFileInner>);

#[derive(Debug)]
struct BlockFileInner {
    /// A block whose write fails (the file could not be made, or the disk is full) stays on
    /// the heap.
    file: UnlinkedFile,
    end: AtomicU64,
}

impl BlockFile {
    /// A block file in `dir`, created there on the first write.
    pub fn in_dir(dir: &Path) -> BlockFile {
        BlockFile(Arc::new(BlockFileInner {
            file: UnlinkedFile::in_dir(dir),
            end: AtomicU64::new(0),
        }))
    }

    /// A new block file in the same directory (the old one's blocks all forgotten).
    pub fn renewed(&self) -> BlockFile {
        BlockFile::in_dir(self.0.file.dir())
    }

    /// Bytes written to the file so far.
    pub fn len(&self) -> u64 {
        self.0.end.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `words`; returns their offset.
    fn write(&self, words: &[u64]) -> io::Result<u64> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        // Each block gets its own range, so indexes sealing at once never overlap.
        let at = self.0.end.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.0.file.write_at(&bytes, at)?;
        Ok(at)
    }

    fn read(&self, at: u64, n: usize) -> io::Result<Vec<u64>> {
        // A block is only read from the file after it was written there.
        let mut bytes = vec![0u8; n * 8];
        self.0.file.read_at(&mut bytes, at)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(c);
                u64::from_ne_bytes(w)
            })
            .collect())
    }
}

/// The `i`th of the unsigned integers of `width` bits packed into `words`.
#[inline]
fn bits_get(width: u32, words: &[u64], i: usize) -> u64 {
    if width == 0 {
        return 0;
    }
    let bit = i * width as usize;
    let (w, off) = (bit / 64, (bit % 64) as u32);
    let mut v = words[w] >> off;
    if off + width > 64 {
        v |= words[w + 1] << (64 - off);
    }
    if width == 64 {
        v
    } else {
        v & ((1u64 << width) - 1)
    }
}

/// Unsigned integers of one fixed width (0 to 64 bits) packed into 64-bit words.
#[derive(Debug, Clone, Default, PartialEq)]
struct Bits {
    width: u32,
    words: Vec<u64>,
}

impl Bits {
    /// Packs `values` at the width of the largest.
    fn pack(values: &[u64]) -> Bits {
        let max = values.iter().fold(0u64, |m, v| m | v);
        let width = 64 - max.leading_zeros();
        let total = values.len() * width as usize;
        let mut words = vec![0u64; total.div_ceil(64)];
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

    #[cfg(test)]
    fn get(&self, i: usize) -> u64 {
        bits_get(self.width, &self.words, i)
    }
}

/// Where a sealed block's words are: the `created_at` offsets' words, then the `seq` ones'.
#[derive(Debug, Clone, PartialEq)]
enum Words {
    Heap(Box<[u64]>),
    File { at: u64 },
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
    ts_width: u8,
    seq_width: u8,
    words: Words,
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
        let (ts, seq) = (Bits::pack(&ts), Bits::pack(&seq));
        let mut words = ts.words;
        words.extend_from_slice(&seq.words);
        Packed {
            base_ts,
            base_seq,
            last: keys[keys.len() - 1],
            len: keys.len() as u32,
            ts_width: ts.width as u8,
            seq_width: seq.width as u8,
            words: Words::Heap(words.into_boxed_slice()),
        }
    }

    /// Words of a column of `len` values at `width` bits (as [`Bits::pack`] sizes them).
    fn column_words(&self, width: u8) -> usize {
        (self.len as usize * usize::from(width)).div_ceil(64)
    }

    /// Words of the `created_at` column, which the `seq` column's follow.
    fn ts_words(&self) -> usize {
        self.column_words(self.ts_width)
    }

    /// Moves the words to `file`; on a failed write they stay on the heap, where they are
    /// still answered from (a full disk costs memory, not answers).
    fn spill(&mut self, file: &BlockFile) {
        if let Words::Heap(w) = &self.words {
            if let Ok(at) = file.write(w) {
                self.words = Words::File { at };
            }
        }
    }

    fn words<'a>(&'a self, file: Option<&BlockFile>) -> io::Result<Cow<'a, [u64]>> {
        match (&self.words, file) {
            (Words::Heap(w), _) => Ok(Cow::Borrowed(w)),
            (Words::File { at }, Some(f)) => Ok(Cow::Owned(
                f.read(*at, self.ts_words() + self.column_words(self.seq_width))?,
            )),
            (Words::File { .. }, None) => Err(io::Error::other("a sealed block without its file")),
        }
    }

    /// Every pair, ascending, in a vector with room for a full block.
    fn unpack(&self, file: Option<&BlockFile>) -> io::Result<Vec<Key>> {
        let u = Unpacked {
            p: self,
            words: self.words(file)?,
        };
        let mut v = Vec::with_capacity(BLOCK);
        v.extend((0..self.len as usize).map(|i| u.get(i)));
        Ok(v)
    }

    fn heap_bytes(&self) -> usize {
        match &self.words {
            Words::Heap(w) => w.len() * 8,
            Words::File { .. } => 0,
        }
    }
}

/// A sealed block's words at hand, to read its pairs.
struct Unpacked<'a> {
    p: &'a Packed,
    words: Cow<'a, [u64]>,
}

impl Unpacked<'_> {
    #[inline]
    fn get(&self, i: usize) -> Key {
        let (ts, seq) = self.words.split_at(self.p.ts_words());
        (
            (self.p.base_ts as u64).wrapping_add(bits_get(u32::from(self.p.ts_width), ts, i))
                as i64,
            self.p.base_seq + bits_get(u32::from(self.p.seq_width), seq, i),
        )
    }
}

#[derive(Debug, Clone)]
enum Block {
    Open(Vec<Key>),
    Sealed(Packed),
}

/// A block's pairs at hand: an open block's directly, a sealed one's words read once.
enum View<'a> {
    Open(&'a [Key]),
    Sealed(Unpacked<'a>),
}

impl View<'_> {
    fn len(&self) -> usize {
        match self {
            View::Open(v) => v.len(),
            View::Sealed(u) => u.p.len as usize,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Key {
        match self {
            View::Open(v) => v[i],
            View::Sealed(u) => u.get(i),
        }
    }

    /// The number of leading pairs for which `pred` holds (`pred` is true then false).
    fn partition_point(&self, pred: impl Fn(&Key) -> bool) -> usize {
        match self {
            View::Open(v) => v.partition_point(pred),
            View::Sealed(_) => {
                let (mut lo, mut hi) = (0usize, self.len());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if pred(&self.get(mid)) {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                lo
            }
        }
    }
}

impl Block {
    #[inline]
    fn len(&self) -> usize {
        match self {
            Block::Open(v) => v.len(),
            Block::Sealed(p) => p.len as usize,
        }
    }

    fn last(&self) -> Option<Key> {
        match self {
            Block::Open(v) => v.last().copied(),
            Block::Sealed(p) => Some(p.last),
        }
    }

    fn view<'a>(&'a self, file: Option<&BlockFile>) -> io::Result<View<'a>> {
        Ok(match self {
            Block::Open(v) => View::Open(v),
            Block::Sealed(p) => View::Sealed(Unpacked {
                p,
                words: p.words(file)?,
            }),
        })
    }

    /// Pairs `[a, b)` of this block, ascending; one error if its words cannot be read.
    fn range(&self, file: Option<&BlockFile>, a: usize, b: usize) -> Vec<io::Result<Key>> {
        match self.view(file) {
            Ok(v) => (a..b).map(|i| Ok(v.get(i))).collect(),
            Err(e) => vec![Err(e)],
        }
    }

    /// Bytes this block holds on the heap.
    fn heap_bytes(&self) -> usize {
        match self {
            Block::Open(v) => v.capacity() * std::mem::size_of::<Key>(),
            Block::Sealed(p) => p.heap_bytes(),
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
mod tests {
    use super::*;

    /// The indexes each test runs on: one on the heap, one writing its sealed blocks to a file
    /// (the directory is kept alive with it).
    fn indexes() -> Vec<(SortedIndex, Option<tempfile::TempDir>)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = BlockFile::in_dir(dir.path());
        vec![
            (SortedIndex::new(), None),
            (SortedIndex::with_file(Some(file)), Some(dir)),
        ]
    }

    fn collect(it: impl Iterator<Item = io::Result<Key>>) -> Vec<Key> {
        it.collect::<io::Result<Vec<Key>>>().expect("read")
    }

    /// Checks every query against a sorted vector of the same keys.
    fn assert_matches(idx: &SortedIndex, reference: &[Key]) {
        assert_eq!(idx.len(), reference.len());
        let all: Vec<Key> = collect(idx.between(0, idx.len()));
        assert_eq!(all, reference);
        for (i, k) in reference.iter().enumerate().step_by(37) {
            assert_eq!(idx.get(i).expect("get"), Some(*k));
            assert_eq!(idx.rank(*k).expect("rank"), i);
        }
        assert_eq!(idx.get(reference.len()).expect("get"), None);
        let desc: Vec<Key> = collect(idx.rev_from(usize::MAX));
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
        let mut p = Packed::new(&keys);
        let unpacked = |p: &Packed, file: Option<&BlockFile>| p.unpack(file).expect("unpack");
        assert_eq!(unpacked(&p, None), keys);
        assert_eq!(p.last, (i64::MAX, 7));
        // and read back the same from a block file.
        let dir = tempfile::tempdir().expect("tempdir");
        let file = BlockFile::in_dir(dir.path());
        p.spill(&file);
        assert!(matches!(p.words, Words::File { .. }));
        assert_eq!(p.heap_bytes(), 0);
        assert_eq!(unpacked(&p, Some(&file)), keys);
        assert!(p.words(None).is_err());
    }

    #[test]
    fn rank_and_select_match_a_sorted_vector() {
        for (mut idx, _dir) in indexes() {
            // Given keys inserted in a scrambled order, including duplicates,
            let mut reference = Vec::new();
            let mut x: u64 = 12345;
            for seq in 0..10_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let t = (x >> 33) as i64 % 5000;
                idx.insert((t, seq)).expect("insert");
                idx.insert((t, seq)).expect("insert again"); // idempotent
                reference.push((t, seq));
            }
            reference.sort();
            // then len, select and rank agree with the sorted vector.
            assert_matches(&idx, &reference);
            let (lo, hi) = idx.range(1000, 1999).expect("range");
            let expected = reference
                .iter()
                .filter(|(t, _)| (1000..=1999).contains(t))
                .count();
            assert_eq!(hi - lo, expected);
            let page = idx.descending(lo, hi, 3, 5).expect("page");
            let want: Vec<Key> = reference[lo..hi]
                .iter()
                .rev()
                .skip(3)
                .take(5)
                .copied()
                .collect();
            assert_eq!(page, want);
        }
    }

    #[test]
    fn keys_in_order_are_sealed_into_packed_blocks() {
        for (mut idx, dir) in indexes() {
            // Given keys arriving in order, as nearly all audit entries do (a busy tenant: a
            // few hundred microseconds apart, seqs shared with other tenants),
            let n = BLOCK * 5 + 7;
            let key = |s: u64| (1_700_000_000_000_000 + s as i64 * 350, 1_000_000 + s * 3);
            for s in 0..n as u64 {
                idx.insert(key(s)).expect("insert");
            }
            // then every block but the last is sealed, at under 5 bytes a key on the heap, or
            // none with a block file (where the words went),
            assert_eq!(idx.blocks.len(), 6);
            for b in &idx.blocks[..5] {
                let Block::Sealed(p) = b else {
                    panic!("an unsealed full block")
                };
                assert_eq!(p.len as usize, BLOCK);
                match dir {
                    None => assert!(b.heap_bytes() <= BLOCK * 5, "{} bytes", b.heap_bytes()),
                    Some(_) => assert_eq!(b.heap_bytes(), 0),
                }
            }
            if let Some(f) = &idx.file {
                let words: u64 = idx.blocks[..5]
                    .iter()
                    .map(|b| match b {
                        Block::Sealed(p) => (p.ts_words() + p.column_words(p.seq_width)) as u64 * 8,
                        Block::Open(_) => 0,
                    })
                    .sum();
                assert_eq!(f.len(), words);
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
                idx.insert(k).expect("insert late");
                reference.push(k);
                reference.sort();
                assert_matches(&idx, &reference);
            }
            // A window in the middle, across block edges, matches the sorted vector.
            let (lo, hi) = (BLOCK - 5, 3 * BLOCK + 9);
            assert_eq!(collect(idx.between(lo, hi)), reference[lo..hi].to_vec());
            assert_eq!(
                collect(idx.rev_from(lo + 3)),
                reference[..lo + 3]
                    .iter()
                    .rev()
                    .copied()
                    .collect::<Vec<_>>()
            );
            let page = idx.descending(lo, hi, 2, 3000).expect("page");
            let want: Vec<Key> = reference[lo..hi]
                .iter()
                .rev()
                .skip(2)
                .take(3000)
                .copied()
                .collect();
            assert_eq!(page, want);
        }
    }

    #[test]
    fn a_stream_of_late_keys_keeps_one_block_unpacked() {
        for (mut idx, _dir) in indexes() {
            // Given a full index and then late keys walking backwards over every block,
            let mut reference = Vec::new();
            for s in 0..(BLOCK * 4) as u64 {
                idx.insert((s as i64 * 10, s)).expect("insert");
                reference.push((s as i64 * 10, s));
            }
            for (i, t) in (0..(BLOCK * 4) as i64).rev().step_by(97).enumerate() {
                let k = (t * 10 + 5, 1_000_000 + i as u64);
                idx.insert(k).expect("insert late");
                reference.push(k);
            }
            reference.sort();
            // then the answers match and no more than two blocks are ever unpacked.
            assert_matches(&idx, &reference);
        }
    }

    #[test]
    fn descending_past_the_end_is_empty() {
        for (mut idx, _dir) in indexes() {
            for s in 0..10 {
                idx.insert((s as i64, s)).expect("insert");
            }
            assert!(idx.descending(0, 10, 10, 5).expect("page").is_empty());
            assert_eq!(
                idx.descending(0, 10, 8, 5).expect("page"),
                vec![(1, 1), (0, 0)]
            );
        }
        assert!(SortedIndex::new()
            .descending(0, 0, 0, 5)
            .expect("page")
            .is_empty());
    }
}
