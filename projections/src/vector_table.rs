//! Each tenant's vectors, normalised f32 rows with ids, types and importance, and an int8 copy
//! of every row; exact top-k by dot product with a type filter, or an int8 first pass with
//! exact rescoring on large tables.
//!
//! Search is bound by memory bandwidth (100,000 × 384 f32 is 154 MB), so the scan keeps eight
//! independent accumulators per row (the compiler vectorises them) and splits large tables
//! across cores. Deleting swaps the last row into the hole, so no trace of a deleted memory
//! stays in the table.
//!
//! Where the f32 rows live ([`Rows`]): on the heap while the table is small, where search
//! scans them all exactly. A table given a spill directory moves them to an unlinked file
//! there once it reaches [`SPILL_ROWS`], the size from which search runs the int8 first pass
//! and reads only its ~100 candidates' f32 rows to rescore them: the int8 copy stays in
//! memory and is what is scanned, the f32 rows (four times its size) are read from the page
//! cache a hundred at a time. The service's memory then grows by ~0.5 KB per stored memory
//! instead of ~2 KB (the soak in docs/RELIABILITY.md). The file is rebuilt from the log at
//! every start, so nothing in it is ever trusted across restarts.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use uuid::Uuid;

use crate::event::MemoryType;

/// Rows per parallel task; below two of these the scan stays on one core.
const PAR_ROWS: usize = 16_384;

/// From this many rows a table with a spill directory keeps its f32 rows in a file by default:
/// the size from which [`VectorTable::search_fast`] reads only its candidates' rows.
pub const SPILL_ROWS: usize = FAST_MIN_ROWS;

/// Where and from what size a table keeps its f32 rows in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spill {
    pub dir: PathBuf,
    /// Rows from which the rows move to the file (back below half of it); 0: never.
    pub rows: usize,
}
/// Rows appended to a spilled table are written to the file this many at a time (a replay
/// appends 100,000 rows; one write each would cost it a fifth of its time).
const TAIL_ROWS: usize = 256;
/// Rows read per `pread` when a spilled table is scanned in full (exact search, `most_similar`).
const READ_ROWS: usize = 128;

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and u8 no alignment requirement: the same memory, as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn f32_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as above; every bit pattern written through it is a valid f32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

/// The f32 rows of a table.
#[derive(Debug)]
enum Rows {
    Heap(Vec<f32>),
    /// Rows `0..stored` in `file` (native byte order: the file never leaves this process),
    /// the rows after them in `tail` until there are [`TAIL_ROWS`] to write.
    File {
        file: File,
        stored: usize,
        tail: Vec<f32>,
    },
}

impl Default for Rows {
    fn default() -> Self {
        Rows::Heap(Vec::new())
    }
}

impl Rows {
    /// Moves the rows of a heap table into a new unlinked file in `dir`.
    fn spill(dir: &Path, data: &[f32], dim: usize) -> io::Result<Rows> {
        let file = tempfile::tempfile_in(dir)?;
        file.write_all_at(f32_bytes(data), 0)?;
        Ok(Rows::File {
            file,
            stored: data.len() / dim.max(1),
            tail: Vec::new(),
        })
    }

    /// Reads every row back onto the heap.
    fn unspill(&self, rows: usize, dim: usize) -> io::Result<Rows> {
        let mut data = vec![0f32; rows * dim];
        self.read_into(0, &mut data, dim)?;
        Ok(Rows::Heap(data))
    }

    fn push(&mut self, v: &[f32], dim: usize) -> io::Result<()> {
        match self {
            Rows::Heap(data) => data.extend_from_slice(v),
            Rows::File { file, stored, tail } => {
                tail.extend_from_slice(v);
                if tail.len() >= TAIL_ROWS * dim {
                    file.write_all_at(f32_bytes(tail), (*stored * dim * 4) as u64)?;
                    *stored += tail.len() / dim;
                    tail.clear();
                }
            }
        }
        Ok(())
    }

    fn set(&mut self, r: usize, v: &[f32], dim: usize) -> io::Result<()> {
        match self {
            Rows::Heap(data) => data[r * dim..(r + 1) * dim].copy_from_slice(v),
            Rows::File { file, stored, tail } => {
                if r >= *stored {
                    let t = r - *stored;
                    tail[t * dim..(t + 1) * dim].copy_from_slice(v);
                } else {
                    file.write_all_at(f32_bytes(v), (r * dim * 4) as u64)?;
                }
            }
        }
        Ok(())
    }

    /// Moves row `last` (the last row) into row `p` and forgets it.
    fn swap_remove(&mut self, p: usize, last: usize, dim: usize) -> io::Result<()> {
        if let Rows::Heap(data) = self {
            data.copy_within(last * dim..(last + 1) * dim, p * dim);
            data.truncate(last * dim);
            return Ok(());
        }
        if p != last {
            let mut row = vec![0f32; dim];
            self.read_into(last, &mut row, dim)?;
            self.set(p, &row, dim)?;
        }
        if let Rows::File { stored, tail, .. } = self {
            // The file keeps its length: the rows past `stored` are overwritten by the next
            // appends, and the file goes when the table does.
            if tail.is_empty() {
                *stored -= 1;
            } else {
                tail.truncate(tail.len() - dim);
            }
        }
        Ok(())
    }

    /// Rows from `first` on into `out` (a whole number of rows).
    fn read_into(&self, first: usize, out: &mut [f32], dim: usize) -> io::Result<()> {
        match self {
            Rows::Heap(data) => out.copy_from_slice(&data[first * dim..first * dim + out.len()]),
            Rows::File { file, stored, tail } => {
                let from_file = stored.saturating_sub(first).min(out.len() / dim) * dim;
                let (head, rest) = out.split_at_mut(from_file);
                file.read_exact_at(f32_bytes_mut(head), (first * dim * 4) as u64)?;
                if !rest.is_empty() {
                    let t = (first * dim + from_file) - *stored * dim;
                    rest.copy_from_slice(&tail[t..t + rest.len()]);
                }
            }
        }
        Ok(())
    }

    /// Calls `f(first_row, rows)` over the rows of `range`, in order: one slice for a heap
    /// table, [`READ_ROWS`] rows read at a time from a spilled one.
    fn scan(
        &self,
        range: std::ops::Range<usize>,
        dim: usize,
        f: &mut dyn FnMut(usize, &[f32]),
    ) -> io::Result<()> {
        match self {
            Rows::Heap(data) => f(range.start, &data[range.start * dim..range.end * dim]),
            Rows::File { .. } => {
                let mut buf = vec![0f32; READ_ROWS * dim];
                let mut r = range.start;
                while r < range.end {
                    let n = READ_ROWS.min(range.end - r);
                    self.read_into(r, &mut buf[..n * dim], dim)?;
                    f(r, &buf[..n * dim]);
                    r += n;
                }
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Rows::Heap(data) => data.capacity() * 4,
            Rows::File { tail, .. } => tail.capacity() * 4,
        }
    }
}

#[derive(Default, Debug)]
pub struct VectorTable {
    dim: usize,
    rows: Rows,
    /// The rows quantised to int8 (one scale per row) for the first pass of
    /// [`VectorTable::search_fast`]: a quarter of the bytes to stream.
    quant: Vec<i8>,
    scales: Vec<f32>,
    ids: Vec<Uuid>,
    types: Vec<MemoryType>,
    importance: Vec<f32>,
    /// Row of each id. A B-tree, not a hash table: a hash table doubles at once when it fills
    /// (at 114,688 rows a 3.3 MB step in the soak of docs/RELIABILITY.md), a B-tree grows a
    /// node at a time, and ids (UUIDv7) arrive nearly in order, which it appends cheaply.
    pos: BTreeMap<Uuid, usize>,
    /// Where the rows go and from what size; `None`: always on the heap.
    spill: Option<Spill>,
}

/// An estimate of the heap bytes of a `BTreeMap<K, V>` of `len` entries, which does not tell:
/// a leaf holds up to 11 entries and one inserted in order leaves the node it splits 6 full,
/// so entries arriving in order take about 11/6 slots each (random order ~1.4), and internal
/// nodes add ~1/6 more.
fn btree_bytes<K, V>(len: usize) -> usize {
    use std::mem::size_of;
    len * (size_of::<K>() + size_of::<V>()) * 11 / 6 * 7 / 6
}

/// One search hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub id: Uuid,
    /// Cosine similarity.
    pub score: f32,
    /// `0.85 * score + 0.15 * importance`: the ranking key.
    pub final_score: f32,
}

impl Eq for Hit {}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Min-heap order on the final score (worst on top), ties broken by id for determinism.
impl Ord for Hit {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .final_score
            .total_cmp(&self.final_score)
            .then_with(|| self.id.cmp(&other.id))
    }
}

pub const SIMILARITY_WEIGHT: f32 = 0.85;
pub const IMPORTANCE_WEIGHT: f32 = 0.15;

/// Dot product with eight independent accumulators.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

/// Symmetric int8 quantisation of a row: `x ≈ q * scale`, `scale = max|x| / 127`.
fn quantize(v: &[f32], out: &mut [i8]) -> f32 {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return 0.0;
    }
    let scale = max / 127.0;
    let inv = 127.0 / max;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer (|x * inv| <= 127)
    // without `round`, a libm call per value on the baseline target (3% of a replay, perf).
    const ROUND: f32 = 12_582_912.0;
    for (o, x) in out.iter_mut().zip(v) {
        *o = ((x * inv + ROUND) - ROUND) as i8;
    }
    scale
}

/// Integer dot product of an int8 row with the quantised query (held as i16, the width the
/// products are taken at), sixteen independent lanes.
#[inline(always)]
fn dot_i8(row: &[i8], query: &[i16]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (row.chunks_exact(16), query.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += i32::from(x[i]) * i32::from(y[i]);
        }
    }
    let mut sum = acc.iter().sum::<i32>();
    for (x, y) in ra.iter().zip(rb) {
        sum += i32::from(*x) * i32::from(*y);
    }
    sum
}

/// [`dot_i8`] with AVX2: 16 int8 values of the row widened to i16 and multiplied with the
/// query (already i16) by pairs into eight i32 lanes per instruction. What the compiler made
/// of the plain loop widened to i32 and used the slow 32-bit multiply (5.8 ms per 100,000-row
/// search instead of 3.6 ms, `benches/vectors.rs`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_i8_i16_avx2(row: &[i8], query: &[i16]) -> i32 {
    use std::arch::x86_64::*;
    let n = row.len().min(query.len());
    let chunks = n / 16;
    let mut acc = _mm256_setzero_si256();
    for i in 0..chunks {
        // SAFETY: i * 16 + 16 <= n, within both slices; unaligned loads.
        let (r, q) = unsafe {
            (
                _mm_loadu_si128(row.as_ptr().add(i * 16).cast()),
                _mm256_loadu_si256(query.as_ptr().add(i * 16).cast()),
            )
        };
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_cvtepi8_epi16(r), q));
    }
    let s = _mm_add_epi32(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    let mut sum = _mm_cvtsi128_si32(s);
    for j in chunks * 16..n {
        sum += i32::from(row[j]) * i32::from(query[j]);
    }
    sum
}

/// Search uses the quantised first pass from this many rows on; below, the exact scan is
/// already fast and exact results cost nothing extra.
pub const FAST_MIN_ROWS: usize = 20_000;
/// First-pass candidates rescored exactly: `max(k * CANDIDATES_PER_HIT, MIN_CANDIDATES)`.
const CANDIDATES_PER_HIT: usize = 16;
const MIN_CANDIDATES: usize = 100;
/// The first pass keeps rows whose approximate cosine is within this of `min_similarity`
/// (int8 errors on a 384-d dot product stay well below it), so the threshold drops none that
/// the exact score would keep.
const MIN_SIMILARITY_SLACK: f32 = 0.02;

/// Keeps the best `k` of what is pushed (the heap's top is the worst kept).
fn keep_best<T: Ord>(heap: &mut BinaryHeap<T>, item: T, k: usize) {
    if heap.len() < k {
        heap.push(item);
    } else if heap.peek().is_some_and(|worst| item < *worst) {
        heap.pop();
        heap.push(item);
    }
}

/// The best `k` over rows `0..n`, `scan` scoring a range of rows: on all cores in
/// [`PAR_ROWS`] ranges from two of them on, else on this thread.
fn best_of_rows<T: Ord + Send>(
    n: usize,
    k: usize,
    scan: impl Fn(std::ops::Range<usize>) -> io::Result<BinaryHeap<T>> + Sync,
) -> io::Result<BinaryHeap<T>> {
    if n < 2 * PAR_ROWS {
        return scan(0..n);
    }
    let starts: Vec<usize> = (0..n).step_by(PAR_ROWS).collect();
    let heaps: Vec<BinaryHeap<T>> = starts
        .par_iter()
        .map(|&s| scan(s..(s + PAR_ROWS).min(n)))
        .collect::<io::Result<_>>()?;
    let mut best = BinaryHeap::new();
    for h in heaps {
        for item in h {
            keep_best(&mut best, item, k);
        }
    }
    Ok(best)
}

impl VectorTable {
    /// A table that moves its f32 rows to a file in `spill.dir` from `spill.rows` rows on.
    pub fn spilling(spill: Spill) -> Self {
        Self {
            spill: (spill.rows > 0).then_some(spill),
            ..Self::default()
        }
    }

    /// [`Self::spilling`] to `dir` from [`SPILL_ROWS`] on.
    pub fn spilling_to(dir: &Path) -> Self {
        Self::spilling(Spill {
            dir: dir.to_path_buf(),
            rows: SPILL_ROWS,
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the f32 rows are in a file.
    pub fn is_spilled(&self) -> bool {
        matches!(self.rows, Rows::File { .. })
    }

    /// Inserts or replaces the row of `id`. A vector of another dimension than the table's
    /// (another model) is refused (`Ok(false)`), so vectors of different models are never
    /// compared. An error is the spill file's.
    pub fn upsert(
        &mut self,
        id: Uuid,
        vector: &[f32],
        memory_type: MemoryType,
        importance: f32,
    ) -> io::Result<bool> {
        if self.ids.is_empty() && self.dim == 0 {
            self.dim = vector.len();
        }
        if vector.len() != self.dim || vector.is_empty() {
            return Ok(false);
        }
        let dim = self.dim;
        let p = match self.pos.get(&id) {
            Some(&p) => {
                self.rows.set(p, vector, dim)?;
                self.types[p] = memory_type;
                self.importance[p] = importance;
                p
            }
            None => {
                self.rows.push(vector, dim)?;
                let p = self.ids.len();
                self.pos.insert(id, p);
                self.ids.push(id);
                self.quant.resize(self.quant.len() + dim, 0);
                self.scales.push(0.0);
                self.types.push(memory_type);
                self.importance.push(importance);
                p
            }
        };
        self.scales[p] = quantize(vector, &mut self.quant[p * dim..(p + 1) * dim]);
        let spilled = match (&self.rows, &self.spill) {
            (Rows::Heap(data), Some(spill)) if self.ids.len() >= spill.rows => {
                Some(Rows::spill(&spill.dir, data, dim)?)
            }
            _ => None,
        };
        if let Some(rows) = spilled {
            self.rows = rows;
        }
        Ok(true)
    }

    pub fn set_importance(&mut self, id: &Uuid, importance: f32) {
        if let Some(&p) = self.pos.get(id) {
            self.importance[p] = importance;
        }
    }

    pub fn remove(&mut self, id: &Uuid) -> io::Result<()> {
        let Some(&p) = self.pos.get(id) else {
            return Ok(());
        };
        let last = self.ids.len() - 1;
        // The row first: if the file fails, the table is unchanged.
        self.rows.swap_remove(p, last, self.dim)?;
        self.pos.remove(id);
        if p != last {
            let moved = self.ids[last];
            self.ids.swap(p, last);
            self.types.swap(p, last);
            self.importance.swap(p, last);
            self.scales.swap(p, last);
            let (head, tail) = self.quant.split_at_mut(last * self.dim);
            head[p * self.dim..(p + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
            self.pos.insert(moved, p);
        }
        self.ids.pop();
        self.types.pop();
        self.importance.pop();
        self.scales.pop();
        self.quant.truncate(last * self.dim);
        if self.ids.is_empty() {
            self.dim = 0;
            self.rows = Rows::default();
            self.quant = Vec::new();
        } else if self.is_spilled()
            && self.ids.len() < self.spill.as_ref().map_or(0, |s| s.rows / 2)
        {
            // Half the spill size: a table hovering at the line does not move back and forth.
            self.rows = self.rows.unspill(self.ids.len(), self.dim)?;
        }
        Ok(())
    }

    fn scan(
        &self,
        rows: std::ops::Range<usize>,
        query: &[f32],
        filter: Option<MemoryType>,
        min: f32,
        k: usize,
    ) -> io::Result<BinaryHeap<Hit>> {
        let mut heap = BinaryHeap::with_capacity(k + 1);
        self.rows.scan(rows, self.dim, &mut |first, block| {
            for (i, row) in block.chunks_exact(self.dim).enumerate() {
                let r = first + i;
                if !self.admits(r, filter) {
                    continue;
                }
                let score = dot(row, query);
                if score < min {
                    continue;
                }
                keep_best(&mut heap, self.hit(r, self.ids[r], score), k);
            }
        })?;
        Ok(heap)
    }

    /// Whether row `r` is of the type a search asked for (any type without a filter).
    #[inline(always)]
    fn admits(&self, r: usize, filter: Option<MemoryType>) -> bool {
        filter.is_none_or(|t| self.types[r] == t)
    }

    /// Row `r` as a hit at cosine `score`, ranked by the final score (similarity and the
    /// row's importance).
    #[inline(always)]
    fn hit(&self, r: usize, id: Uuid, score: f32) -> Hit {
        Hit {
            id,
            score,
            final_score: SIMILARITY_WEIGHT * score + IMPORTANCE_WEIGHT * self.importance[r],
        }
    }

    /// Exact top-k by final score among rows with `score >= min_similarity`.
    pub fn search(
        &self,
        query: &[f32],
        filter: Option<MemoryType>,
        min_similarity: f32,
        k: usize,
    ) -> io::Result<Vec<Hit>> {
        if k == 0 || query.len() != self.dim || self.ids.is_empty() {
            return Ok(Vec::new());
        }
        let n = self.ids.len();
        let heap = best_of_rows(n, k, |rows| {
            self.scan(rows, query, filter, min_similarity, k)
        })?;
        // Min-heap order sorted ascending is best first.
        Ok(heap.into_sorted_vec())
    }

    /// First pass over the int8 rows: the best `n` rows as hits with approximate scores, with
    /// `dot` the integer dot product of a row with the quantised query.
    #[inline(always)]
    fn scan_quantized_with(
        &self,
        rows: std::ops::Range<usize>,
        dot: impl Fn(&[i8]) -> i32,
        query_scale: f32,
        filter: Option<MemoryType>,
        min: f32,
        n: usize,
    ) -> BinaryHeap<Hit> {
        let mut heap = BinaryHeap::with_capacity(n + 1);
        for r in rows {
            if !self.admits(r, filter) {
                continue;
            }
            let row = &self.quant[r * self.dim..(r + 1) * self.dim];
            let score = dot(row) as f32 * self.scales[r] * query_scale;
            if score < min {
                continue;
            }
            keep_best(&mut heap, self.hit(r, self.ids[r], score), n);
        }
        heap
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn scan_quantized_avx2(
        &self,
        rows: std::ops::Range<usize>,
        query: &[i16],
        query_scale: f32,
        filter: Option<MemoryType>,
        min: f32,
        n: usize,
    ) -> BinaryHeap<Hit> {
        let dot = |row: &[i8]| dot_i8_i16_avx2(row, query);
        self.scan_quantized_with(rows, dot, query_scale, filter, min, n)
    }

    fn scan_quantized(
        &self,
        rows: std::ops::Range<usize>,
        query: &[i16],
        query_scale: f32,
        filter: Option<MemoryType>,
        min: f32,
        n: usize,
    ) -> BinaryHeap<Hit> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU was just found to support AVX2.
            return unsafe { self.scan_quantized_avx2(rows, query, query_scale, filter, min, n) };
        }
        self.scan_quantized_with(rows, |row| dot_i8(row, query), query_scale, filter, min, n)
    }

    /// The first pass of [`Self::search_fast`]: the best `n` rows by approximate final score
    /// among those whose approximate cosine is at least `min`.
    fn first_pass(
        &self,
        query: &[f32],
        filter: Option<MemoryType>,
        min: f32,
        n: usize,
    ) -> BinaryHeap<Hit> {
        let mut q = vec![0i8; self.dim];
        let q_scale = quantize(query, &mut q);
        let wide: Vec<i16> = q.iter().map(|&v| i16::from(v)).collect();
        // The int8 rows are in memory: this scan cannot fail.
        best_of_rows(self.ids.len(), n, |rows| {
            Ok(self.scan_quantized(rows, &wide, q_scale, filter, min, n))
        })
        .unwrap_or_default()
    }

    /// Top-k like [`Self::search`], through a quantised first pass on large tables: every
    /// row's int8 copy is scored on all cores, and the best `16 k` (at least 100) candidates
    /// are rescored exactly in f32 (read from the spill file when the rows are there). Scores
    /// and ranking of what it returns are exact; a hit can only be missed when more than that
    /// many rows outrank it by the approximate score (recall@5 against [`Self::search`] is
    /// measured in `benches/vectors.rs`). Tables under [`FAST_MIN_ROWS`] rows are searched
    /// exactly.
    pub fn search_fast(
        &self,
        query: &[f32],
        filter: Option<MemoryType>,
        min_similarity: f32,
        k: usize,
    ) -> io::Result<Vec<Hit>> {
        if self.ids.len() < FAST_MIN_ROWS || k == 0 || query.len() != self.dim {
            return self.search(query, filter, min_similarity, k);
        }
        let want = (k * CANDIDATES_PER_HIT).max(MIN_CANDIDATES);
        let min = min_similarity - MIN_SIMILARITY_SLACK;
        let mut heap = BinaryHeap::with_capacity(k + 1);
        // Rescored in row order: neighbouring rows of a spilled table share pages.
        let mut candidates: Vec<(usize, Uuid)> = self
            .first_pass(query, filter, min, want)
            .into_iter()
            .filter_map(|c| self.pos.get(&c.id).map(|&r| (r, c.id)))
            .collect();
        candidates.sort_unstable_by_key(|c| c.0);
        let mut row = vec![0f32; self.dim];
        for (r, id) in candidates {
            self.rows.read_into(r, &mut row, self.dim)?;
            let score = dot(&row, query);
            if score < min_similarity {
                continue;
            }
            keep_best(&mut heap, self.hit(r, id, score), k);
        }
        Ok(heap.into_sorted_vec())
    }

    /// The row most similar to `query` (by cosine alone) and its score.
    pub fn most_similar(
        &self,
        query: &[f32],
        filter: Option<MemoryType>,
    ) -> io::Result<Option<(Uuid, f32)>> {
        if query.len() != self.dim {
            return Ok(None);
        }
        let mut best: Option<(Uuid, f32)> = None;
        self.rows
            .scan(0..self.ids.len(), self.dim, &mut |first, block| {
                for (i, row) in block.chunks_exact(self.dim).enumerate() {
                    let r = first + i;
                    if !self.admits(r, filter) {
                        continue;
                    }
                    let score = dot(row, query);
                    if best.is_none_or(|(_, s)| score > s) {
                        best = Some((self.ids[r], score));
                    }
                }
            })?;
        Ok(best)
    }

    /// Bytes the table holds on the heap (capacities, so what is allocated, not just used).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.rows.heap_bytes()
            + self.quant.capacity()
            + self.scales.capacity() * size_of::<f32>()
            + self.ids.capacity() * size_of::<Uuid>()
            + self.types.capacity() * size_of::<MemoryType>()
            + self.importance.capacity() * size_of::<f32>()
            + btree_bytes::<Uuid, usize>(self.pos.len())
    }

    /// The stored vector of a memory (tests, dedup).
    pub fn vector(&self, id: &Uuid) -> io::Result<Option<Vec<f32>>> {
        let Some(&p) = self.pos.get(id) else {
            return Ok(None);
        };
        let mut row = vec![0f32; self.dim];
        self.rows.read_into(p, &mut row, self.dim)?;
        Ok(Some(row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn search_ranks_by_final_score_and_filters() {
        let mut t = VectorTable::default();
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        t.upsert(a, &unit(&[1.0, 0.0, 0.0]), MemoryType::Fact, 0.0)
            .expect("upsert");
        t.upsert(b, &unit(&[0.9, 0.1, 0.0]), MemoryType::Rule, 1.0)
            .expect("upsert");
        t.upsert(c, &unit(&[0.0, 1.0, 0.0]), MemoryType::Fact, 0.5)
            .expect("upsert");
        let q = unit(&[1.0, 0.0, 0.0]);
        let hits = t.search(&q, None, 0.0, 5).expect("search");
        // b's importance lifts it above a despite a lower similarity.
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![b, a, c]);
        assert!((hits[1].score - 1.0).abs() < 1e-6 && (hits[1].final_score - 0.85).abs() < 1e-6);
        let facts = t
            .search(&q, Some(MemoryType::Fact), 0.5, 5)
            .expect("search");
        assert_eq!(facts.iter().map(|h| h.id).collect::<Vec<_>>(), vec![a]);
        t.remove(&b).expect("remove");
        assert!(t
            .search(&q, None, -1.0, 5)
            .expect("search")
            .iter()
            .all(|h| h.id != b));
        assert_eq!(t.len(), 2);
        assert_eq!(t.vector(&c).expect("read"), Some(unit(&[0.0, 1.0, 0.0])));
    }

    #[test]
    fn quantized_first_pass_finds_the_exact_top_k() {
        // Random 384-d rows (harder than real embeddings: their top scores crowd together),
        // with updates and removals applied to both copies.
        let mut t = VectorTable::default();
        let mut x: u64 = 11;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let n = FAST_MIN_ROWS + 5_000;
        let mut queries = Vec::new();
        for i in 0..n as u128 {
            let v = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
            if i % 1000 == 0 {
                // Queries near stored rows, as real queries are near their memories.
                let noisy: Vec<f32> = v.iter().map(|a| a + 0.02 * next()).collect();
                queries.push(unit(&noisy));
            }
            let ty = [MemoryType::Rule, MemoryType::Fact][i as usize % 2];
            t.upsert(Uuid::from_u128(i), &v, ty, (i % 10) as f32 / 10.0)
                .expect("upsert");
        }
        for i in 0..500u128 {
            t.remove(&Uuid::from_u128(i * 7)).expect("remove");
        }
        let v = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
        t.upsert(Uuid::from_u128(3), &v, MemoryType::Fact, 1.0)
            .expect("upsert");
        queries.push(v);
        let (mut found, mut total) = (0, 0);
        for q in &queries {
            for (filter, min) in [(None, 0.0), (Some(MemoryType::Fact), 0.05)] {
                let exact = t.search(q, filter, min, 5).expect("search");
                let fast = t.search_fast(q, filter, min, 5).expect("search");
                assert!(fast.iter().all(|h| h.score >= min));
                for h in &fast {
                    assert_eq!(
                        t.vector(&h.id).expect("read").map(|v| dot(&v, q)),
                        Some(h.score)
                    );
                }
                total += exact.len();
                found += exact.iter().filter(|h| fast.contains(h)).count();
            }
        }
        assert!(total > 0);
        assert!(
            found as f64 / total as f64 >= 0.99,
            "recall {found}/{total}"
        );
        // The first pass alone already holds each exact top 5 among its candidates (so the
        // recall above is its doing, not a fallback's), and the int8 copy matches the f32 rows
        // after the updates and removals.
        for q in &queries {
            let candidates: Vec<Uuid> = t
                .first_pass(q, None, -1.0, MIN_CANDIDATES)
                .into_iter()
                .map(|h| h.id)
                .collect();
            assert_eq!(candidates.len(), MIN_CANDIDATES);
            for h in t.search(q, None, 0.0, 5).expect("search") {
                assert!(candidates.contains(&h.id), "{} missing", h.id);
            }
        }
        let mut row = vec![0i8; t.dim];
        for r in 0..t.len() {
            let v = t.vector(&t.ids[r]).expect("read").expect("row");
            let scale = quantize(&v, &mut row);
            assert_eq!(scale, t.scales[r]);
            assert_eq!(&row[..], &t.quant[r * t.dim..(r + 1) * t.dim]);
        }
        // The updated row is found with its new vector.
        assert_eq!(
            t.search_fast(queries.last().expect("query"), None, 0.0, 1)
                .expect("search")[0]
                .id,
            Uuid::from_u128(3)
        );
    }

    #[test]
    fn a_spilled_table_answers_as_a_heap_table() {
        // Given the same rows, updates and removals applied to a table that spills its rows to
        // a file and to one that keeps them on the heap,
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spilled = VectorTable::spilling_to(dir.path());
        let mut heap = VectorTable::default();
        let mut x: u64 = 5;
        let mut row = |seed: u64| {
            x = x.wrapping_add(seed);
            unit(
                &(0..24)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let ty = |i: u128| [MemoryType::Rule, MemoryType::Fact][i as usize % 2];
        let n = SPILL_ROWS + TAIL_ROWS + 77;
        for i in 0..n as u128 {
            let v = row(0);
            for t in [&mut spilled, &mut heap] {
                assert!(t
                    .upsert(Uuid::from_u128(i), &v, ty(i), (i % 7) as f32 / 7.0)
                    .expect("upsert"));
            }
        }
        // then the first moved its rows to a file at SPILL_ROWS (its heap holds the int8 copy
        // and a tail of fewer than TAIL_ROWS rows), the second did not,
        assert!(spilled.is_spilled() && !heap.is_spilled());
        assert!(
            heap.heap_bytes() - spilled.heap_bytes() >= (n - TAIL_ROWS) * 24 * 4,
            "{} vs {}",
            spilled.heap_bytes(),
            heap.heap_bytes()
        );
        let same = |a: &VectorTable, b: &VectorTable, q: &[f32]| {
            for (filter, min) in [(None, -1.0), (Some(MemoryType::Fact), 0.1)] {
                assert_eq!(
                    a.search(q, filter, min, 7).expect("search"),
                    b.search(q, filter, min, 7).expect("search")
                );
                assert_eq!(
                    a.search_fast(q, filter, min, 7).expect("search"),
                    b.search_fast(q, filter, min, 7).expect("search")
                );
                assert_eq!(
                    a.most_similar(q, filter).expect("search"),
                    b.most_similar(q, filter).expect("search")
                );
            }
            for i in (0..n as u128)
                .step_by(997)
                .chain([n as u128 - 1, n as u128 - 300])
            {
                let id = Uuid::from_u128(i);
                assert_eq!(a.vector(&id).expect("read"), b.vector(&id).expect("read"));
            }
        };
        let q = row(1);
        same(&spilled, &heap, &q);
        // and they stay equal through updates of rows in the file and in the tail, removals
        // that move tail rows and file rows into holes,
        for i in [
            3u128,
            SPILL_ROWS as u128 - 1,
            n as u128 - 2,
            n as u128 - 200,
        ] {
            let v = row(2);
            for t in [&mut spilled, &mut heap] {
                t.upsert(Uuid::from_u128(i), &v, ty(i), 1.0)
                    .expect("upsert");
            }
        }
        for i in (0..n as u128).step_by(3).take(400) {
            for t in [&mut spilled, &mut heap] {
                t.remove(&Uuid::from_u128(i)).expect("remove");
            }
        }
        assert_eq!(spilled.len(), heap.len());
        same(&spilled, &heap, &q);
        same(&spilled, &heap, &row(3));
        // and once below half the spill size, the rows come back to the heap, unchanged.
        let ids: Vec<Uuid> = spilled.ids.clone();
        for id in &ids[..ids.len() - SPILL_ROWS / 2 + 1] {
            for t in [&mut spilled, &mut heap] {
                t.remove(id).expect("remove");
            }
        }
        assert!(!spilled.is_spilled());
        assert_eq!(spilled.len(), SPILL_ROWS / 2 - 1);
        same(&spilled, &heap, &q);
    }

    #[test]
    fn int8_dot_products_agree_with_and_without_avx2() {
        let mut x: u64 = 3;
        let mut byte = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8 as i8
        };
        // 384 (whole lanes) and 100 (a remainder of 4), extremes included.
        for len in [384usize, 100] {
            let mut a: Vec<i8> = (0..len).map(|_| byte()).collect();
            let b: Vec<i8> = (0..len).map(|_| byte()).collect();
            a[0] = -128;
            let wide: Vec<i16> = b.iter().map(|&q| i16::from(q)).collect();
            let naive: i32 = a
                .iter()
                .zip(&b)
                .map(|(p, q)| i32::from(*p) * i32::from(*q))
                .sum();
            assert_eq!(dot_i8(&a, &wide), naive);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was just detected.
                assert_eq!(unsafe { dot_i8_i16_avx2(&a, &wide) }, naive);
            }
        }
    }

    #[test]
    fn parallel_scan_equals_a_brute_force_ranking() {
        let mut t = VectorTable::default();
        let mut x: u64 = 7;
        let mut rows = Vec::new();
        for i in 0..(3 * PAR_ROWS as u128 + 17) {
            let v: Vec<f32> = (0..16)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
                })
                .collect();
            let v = unit(&v);
            let imp = (i % 10) as f32 / 10.0;
            t.upsert(
                Uuid::from_u128(i),
                &v,
                if i % 2 == 0 {
                    MemoryType::Rule
                } else {
                    MemoryType::Fact
                },
                imp,
            )
            .expect("upsert");
            rows.push((Uuid::from_u128(i), v, imp, i % 2 == 0));
        }
        let q = rows[5].1.clone();
        let mut brute: Vec<(f32, Uuid)> = rows
            .iter()
            .filter(|r| r.3)
            .map(|r| (0.85 * dot(&r.1, &q) + 0.15 * r.2, r.0))
            .collect();
        brute.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let got: Vec<Uuid> = t
            .search(&q, Some(MemoryType::Rule), -1.0, 10)
            .expect("search")
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(got, brute.iter().take(10).map(|b| b.1).collect::<Vec<_>>());
    }
}
