//! The storage of the index's blocks: an open block's pairs as they are, a sealed block's
//! bit-packed ([`Packed`]), on the heap or in the projection's [`BlockFile`].

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Key, BLOCK};
use crate::unlinked::UnlinkedFile;

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

    pub(super) fn read(&self, at: u64, n: usize) -> io::Result<Vec<u64>> {
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
pub(super) struct Bits {
    pub(super) width: u32,
    pub(super) words: Vec<u64>,
}

impl Bits {
    /// Packs `values` at the width of the largest.
    pub(super) fn pack(values: &[u64]) -> Bits {
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
    pub(super) fn get(&self, i: usize) -> u64 {
        bits_get(self.width, &self.words, i)
    }
}

/// Where a sealed block's words are: the `created_at` offsets' words, then the `seq` ones'.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Words {
    Heap(Box<[u64]>),
    File { at: u64 },
}

/// A sealed block: its pairs as offsets from the smallest `created_at` (the first pair's, as
/// pairs are sorted) and the smallest `seq`, each column at its own width.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Packed {
    pub(super) base_ts: i64,
    pub(super) base_seq: u64,
    /// The block's largest pair, which `rank` compares against for every block it passes.
    pub(super) last: Key,
    pub(super) len: u32,
    ts_width: u8,
    pub(super) seq_width: u8,
    pub(super) words: Words,
}

impl Packed {
    /// `keys` is sorted and not empty.
    pub(super) fn new(keys: &[Key]) -> Packed {
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
    pub(super) fn column_words(&self, width: u8) -> usize {
        (self.len as usize * usize::from(width)).div_ceil(64)
    }

    /// Words of the `created_at` column, which the `seq` column's follow.
    pub(super) fn ts_words(&self) -> usize {
        self.column_words(self.ts_width)
    }

    /// Moves the words to `file`; on a failed write they stay on the heap, where they are
    /// still answered from (a full disk costs memory, not answers).
    pub(super) fn spill(&mut self, file: &BlockFile) {
        if let Words::Heap(w) = &self.words {
            if let Ok(at) = file.write(w) {
                self.words = Words::File { at };
            }
        }
    }

    pub(super) fn words<'a>(&'a self, file: Option<&BlockFile>) -> io::Result<Cow<'a, [u64]>> {
        match (&self.words, file) {
            (Words::Heap(w), _) => Ok(Cow::Borrowed(w)),
            (Words::File { at }, Some(f)) => Ok(Cow::Owned(
                f.read(*at, self.ts_words() + self.column_words(self.seq_width))?,
            )),
            (Words::File { .. }, None) => Err(io::Error::other("a sealed block without its file")),
        }
    }

    /// Every pair, ascending, in a vector with room for a full block.
    pub(super) fn unpack(&self, file: Option<&BlockFile>) -> io::Result<Vec<Key>> {
        let u = Unpacked {
            p: self,
            words: self.words(file)?,
        };
        let mut v = Vec::with_capacity(BLOCK);
        v.extend((0..self.len as usize).map(|i| u.get(i)));
        Ok(v)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        match &self.words {
            Words::Heap(w) => w.len() * 8,
            Words::File { .. } => 0,
        }
    }
}

/// A sealed block's words at hand, to read its pairs.
pub(super) struct Unpacked<'a> {
    p: &'a Packed,
    words: Cow<'a, [u64]>,
}

impl Unpacked<'_> {
    #[inline]
    pub(super) fn get(&self, i: usize) -> Key {
        let (ts, seq) = self.words.split_at(self.p.ts_words());
        (
            (self.p.base_ts as u64).wrapping_add(bits_get(u32::from(self.p.ts_width), ts, i))
                as i64,
            self.p.base_seq + bits_get(u32::from(self.p.seq_width), seq, i),
        )
    }
}

#[derive(Debug, Clone)]
pub(super) enum Block {
    Open(Vec<Key>),
    Sealed(Packed),
}

/// A block's pairs at hand: an open block's directly, a sealed one's words read once.
pub(super) enum View<'a> {
    Open(&'a [Key]),
    Sealed(Unpacked<'a>),
}

impl View<'_> {
    pub(super) fn len(&self) -> usize {
        match self {
            View::Open(v) => v.len(),
            View::Sealed(u) => u.p.len as usize,
        }
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Key {
        match self {
            View::Open(v) => v[i],
            View::Sealed(u) => u.get(i),
        }
    }

    /// The number of leading pairs for which `pred` holds (`pred` is true then false).
    pub(super) fn partition_point(&self, pred: impl Fn(&Key) -> bool) -> usize {
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
    pub(super) fn len(&self) -> usize {
        match self {
            Block::Open(v) => v.len(),
            Block::Sealed(p) => p.len as usize,
        }
    }

    pub(super) fn last(&self) -> Option<Key> {
        match self {
            Block::Open(v) => v.last().copied(),
            Block::Sealed(p) => Some(p.last),
        }
    }

    pub(super) fn view<'a>(&'a self, file: Option<&BlockFile>) -> io::Result<View<'a>> {
        Ok(match self {
            Block::Open(v) => View::Open(v),
            Block::Sealed(p) => View::Sealed(Unpacked {
                p,
                words: p.words(file)?,
            }),
        })
    }

    /// Pairs `[a, b)` of this block, ascending; one error if its words cannot be read.
    pub(super) fn range(
        &self,
        file: Option<&BlockFile>,
        a: usize,
        b: usize,
    ) -> Vec<io::Result<Key>> {
        match self.view(file) {
            Ok(v) => (a..b).map(|i| Ok(v.get(i))).collect(),
            Err(e) => vec![Err(e)],
        }
    }

    /// Bytes this block holds on the heap.
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Block::Open(v) => v.capacity() * std::mem::size_of::<Key>(),
            Block::Sealed(p) => p.heap_bytes(),
        }
    }
}
