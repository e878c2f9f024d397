//! Search over a [`VectorTable`]: exact top-k by final score, the int8 first pass with exact
//! rescoring for large tables, and the single most similar row.
//!
//! Search is bound by memory bandwidth (100,000 × 384 f32 is 154 MB), so large tables are
//! split across cores in [`PAR_ROWS`] ranges, each keeping its own best `k`, merged at the
//! end. Ranking is by [`Hit`]'s order: final score, then id, so equal scores always rank the
//! same way.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io;

use rayon::prelude::*;
use uuid::Uuid;

use super::quantize::quantize;
use super::scalar::{dot, dot_i8};
use super::VectorTable;
use crate::event::MemoryType;

/// Rows per parallel task; below two of these the scan stays on one core.
const PAR_ROWS: usize = 16_384;

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
/// With an `admit` filter, the first pass first takes this many times its candidates by score
/// alone and asks `admit` about them best first (see [`VectorTable::first_pass_admitting`]);
/// more when the caller knows the filter passes fewer rows, up to [`MAX_OVERFETCH`].
const OVERFETCH: usize = 4;
const MAX_OVERFETCH: usize = 32;

/// First-pass candidates that [`VectorTable::search_fast`] rescores exactly for a top `k`.
pub fn candidates_for(k: usize) -> usize {
    (k * CANDIDATES_PER_HIT).max(MIN_CANDIDATES)
}

/// What a caller of [`VectorTable::search_fast_with`] knows beyond the query.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastSearch {
    /// `filter.admit` passes at most about this many rows: the first pass over-fetches enough
    /// of the best rows by score for that share (twice what the share needs, 4x to 32x), so
    /// a filter passing an eighth of the rows still finds its candidates without the scan
    /// that asks `admit` about every row.
    pub passing: Option<usize>,
    /// Candidates to rescore instead of [`candidates_for`]`(k)` (at least `k`): a hybrid
    /// search ranks 50 rows by similarity but shows few, so it takes the candidates of the
    /// few it shows.
    pub candidates: Option<usize>,
}

/// Which rows a search may return: those of a type (any without one) that `admit` (when
/// given) accepts. The type is checked before a row is scored (it is a column of the table);
/// `admit` looks beyond the table (scopes, metadata, expiry), so it is asked only about a row
/// that would enter the best kept so far.
#[derive(Clone, Copy, Default)]
pub struct RowFilter<'a> {
    pub memory_type: Option<MemoryType>,
    pub admit: Option<&'a (dyn Fn(&Uuid) -> bool + Sync)>,
}

impl From<Option<MemoryType>> for RowFilter<'_> {
    fn from(memory_type: Option<MemoryType>) -> Self {
        Self {
            memory_type,
            admit: None,
        }
    }
}

impl RowFilter<'_> {
    /// Whether `item` (row `id`) goes into `heap`, which keeps the best `k`: `admit` is asked
    /// only when it would.
    #[inline(always)]
    fn keeps<T: Ord>(&self, heap: &BinaryHeap<T>, item: &T, id: &Uuid, k: usize) -> bool {
        match self.admit {
            None => true,
            Some(admit) => {
                (heap.len() < k || heap.peek().is_some_and(|worst| item < worst)) && admit(id)
            }
        }
    }
}

/// Keeps the best `k` of what is pushed (the heap's top is the worst kept). Called for every
/// row a scan admits: always inlined into the scan loops, which the compiler's own choice
/// does not do across this module's callers.
#[inline(always)]
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
    Ok(merge_best(heaps, k))
}

/// The best `k` of several scans' heaps.
fn merge_best<T: Ord>(heaps: Vec<BinaryHeap<T>>, k: usize) -> BinaryHeap<T> {
    let mut best = BinaryHeap::with_capacity(k + 1);
    for item in heaps.into_iter().flatten() {
        keep_best(&mut best, item, k);
    }
    best
}

impl VectorTable {
    fn scan(
        &self,
        rows: std::ops::Range<usize>,
        query: &[f32],
        filter: RowFilter<'_>,
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
                let hit = self.hit(r, self.ids[r], score);
                if !filter.keeps(&heap, &hit, &self.ids[r], k) {
                    continue;
                }
                keep_best(&mut heap, hit, k);
            }
        })?;
        Ok(heap)
    }

    /// Whether row `r` is of the type a search asked for (any type without a filter).
    #[inline(always)]
    fn admits(&self, r: usize, filter: RowFilter<'_>) -> bool {
        filter.memory_type.is_none_or(|t| self.types[r] == t)
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
    pub fn search<'a>(
        &self,
        query: &[f32],
        filter: impl Into<RowFilter<'a>>,
        min_similarity: f32,
        k: usize,
    ) -> io::Result<Vec<Hit>> {
        let filter = filter.into();
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

    /// The query quantised as the int8 first pass takes it (widened to i16) and its scale.
    fn quantized_query(&self, query: &[f32]) -> (Vec<i16>, f32) {
        let mut q = vec![0i8; self.dim];
        let q_scale = quantize(query, &mut q);
        (q.iter().map(|&v| i16::from(v)).collect(), q_scale)
    }

    /// First pass over the int8 rows: the best `n` rows as hits with approximate scores, with
    /// `dot` the integer dot product of a row with the quantised query.
    #[inline(always)]
    pub(super) fn scan_quantized_with(
        &self,
        rows: impl Iterator<Item = usize>,
        dot: impl Fn(&[i8]) -> i32,
        query_scale: f32,
        filter: RowFilter<'_>,
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
            let hit = self.hit(r, self.ids[r], score);
            if !filter.keeps(&heap, &hit, &self.ids[r], n) {
                continue;
            }
            keep_best(&mut heap, hit, n);
        }
        heap
    }

    /// [`Self::scan_quantized_with`] with the fastest integer dot product this CPU runs.
    fn scan_quantized(
        &self,
        rows: impl Iterator<Item = usize>,
        query: &[i16],
        query_scale: f32,
        filter: RowFilter<'_>,
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
        filter: RowFilter<'_>,
        min: f32,
        n: usize,
    ) -> BinaryHeap<Hit> {
        let (wide, q_scale) = self.quantized_query(query);
        // The int8 rows are in memory: this scan cannot fail.
        best_of_rows(self.ids.len(), n, |rows| {
            Ok(self.scan_quantized(rows, &wide, q_scale, filter, min, n))
        })
        .unwrap_or_default()
    }

    /// [`Self::first_pass`] with `filter.admit`: the best `OVERFETCH * n` rows by score alone
    /// (of the type asked for), then `admit` asked about them best first until `n` pass. When
    /// the filter passes at least a quarter of the best rows (most filters) that is the same
    /// `n` rows a scan asking `admit` would keep, for a few hundred `admit` calls: a scan asks
    /// it about every row that would enter its best `n` so far, and each of the parallel
    /// ranges keeps its own `n`, thousands of calls at 100,000 rows (an `admit` looks the
    /// memory up in two B-trees, ~0.4 µs; `benches/memory_search.rs`). A more selective filter
    /// (fewer than `n` pass among those rows, more rows left) falls back to that scan.
    fn first_pass_admitting(
        &self,
        query: &[f32],
        filter: RowFilter<'_>,
        min: f32,
        n: usize,
        overfetch: usize,
    ) -> BinaryHeap<Hit> {
        let Some(admit) = filter.admit else {
            return self.first_pass(query, filter, min, n);
        };
        let by_score = RowFilter {
            memory_type: filter.memory_type,
            admit: None,
        };
        let fetched = self.first_pass(query, by_score, min, n * overfetch);
        let more_rows = fetched.len() == n * overfetch;
        let mut kept = BinaryHeap::with_capacity(n + 1);
        // Min-heap order sorted ascending is best first.
        for hit in fetched.into_sorted_vec() {
            if kept.len() == n {
                break;
            }
            if admit(&hit.id) {
                kept.push(hit);
            }
        }
        if kept.len() < n && more_rows {
            return self.first_pass(query, filter, min, n);
        }
        kept
    }

    /// Top-k like [`Self::search`], through a quantised first pass on large tables: every
    /// row's int8 copy is scored on all cores, and the best `16 k` (at least 100) candidates
    /// are rescored exactly in f32 (read from the spill file when the rows are there). Scores
    /// and ranking of what it returns are exact; a hit can only be missed when more than that
    /// many rows outrank it by the approximate score (recall@5 against [`Self::search`] is
    /// measured in `benches/vectors.rs`). Tables under [`FAST_MIN_ROWS`] rows are searched
    /// exactly.
    pub fn search_fast<'a>(
        &self,
        query: &[f32],
        filter: impl Into<RowFilter<'a>>,
        min_similarity: f32,
        k: usize,
    ) -> io::Result<Vec<Hit>> {
        self.search_fast_with(query, filter, min_similarity, k, FastSearch::default())
    }

    /// [`Self::search_fast`] tuned by what the caller knows ([`FastSearch`]).
    pub fn search_fast_with<'a>(
        &self,
        query: &[f32],
        filter: impl Into<RowFilter<'a>>,
        min_similarity: f32,
        k: usize,
        how: FastSearch,
    ) -> io::Result<Vec<Hit>> {
        let filter = filter.into();
        if self.ids.len() < FAST_MIN_ROWS || k == 0 || query.len() != self.dim {
            return self.search(query, filter, min_similarity, k);
        }
        let want = how.candidates.unwrap_or_else(|| candidates_for(k)).max(k);
        let min = min_similarity - MIN_SIMILARITY_SLACK;
        let overfetch = how.passing.map_or(OVERFETCH, |p| {
            (2 * self.ids.len())
                .div_ceil(p.max(1))
                .clamp(OVERFETCH, MAX_OVERFETCH)
        });
        let first = self.first_pass_admitting(query, filter, min, want, overfetch);
        self.rescore(first, query, min_similarity, k)
    }

    /// The best `k` of a first pass's `candidates` by their exact scores.
    fn rescore(
        &self,
        candidates: BinaryHeap<Hit>,
        query: &[f32],
        min_similarity: f32,
        k: usize,
    ) -> io::Result<Vec<Hit>> {
        // Rescored in row order: neighbouring rows of a spilled table share pages.
        let mut candidates: Vec<(usize, Uuid)> = candidates
            .into_iter()
            .filter_map(|c| self.pos.get(&c.id).map(|&r| (r, c.id)))
            .collect();
        candidates.sort_unstable_by_key(|c| c.0);
        let mut heap = BinaryHeap::with_capacity(k + 1);
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

    /// Top-k like [`Self::search_fast`] among the rows of `ids` alone (ids without a row are
    /// passed over): the memories an index narrowed a filtered search to, which the filter
    /// then decides on as in a scan. A few candidates (up to the first pass's candidate count,
    /// or any number in a table searched exactly) are scored exactly; more go through the
    /// int8 first pass over those rows only, in [`PAR_ROWS`] / 4 pieces on all cores.
    pub fn search_among<'a, 'b>(
        &self,
        query: &[f32],
        ids: impl Iterator<Item = &'b Uuid>,
        filter: impl Into<RowFilter<'a>>,
        min_similarity: f32,
        k: usize,
    ) -> io::Result<Vec<Hit>> {
        let filter = filter.into();
        if k == 0 || query.len() != self.dim {
            return Ok(Vec::new());
        }
        // In row order: neighbouring rows of a spilled table share pages.
        let mut rows: Vec<usize> = ids.filter_map(|id| self.pos.get(id).copied()).collect();
        rows.sort_unstable();
        rows.dedup();
        let want = (k * CANDIDATES_PER_HIT).max(MIN_CANDIDATES);
        if self.ids.len() < FAST_MIN_ROWS || rows.len() <= want {
            let mut heap = BinaryHeap::with_capacity(k + 1);
            let mut row = vec![0f32; self.dim];
            for r in rows {
                if !self.admits(r, filter) {
                    continue;
                }
                self.rows.read_into(r, &mut row, self.dim)?;
                let score = dot(&row, query);
                if score < min_similarity {
                    continue;
                }
                let hit = self.hit(r, self.ids[r], score);
                if filter.keeps(&heap, &hit, &self.ids[r], k) {
                    keep_best(&mut heap, hit, k);
                }
            }
            return Ok(heap.into_sorted_vec());
        }
        let (wide, q_scale) = self.quantized_query(query);
        let min = min_similarity - MIN_SIMILARITY_SLACK;
        let heaps: Vec<BinaryHeap<Hit>> = rows
            .par_chunks(PAR_ROWS / 4)
            .map(|piece| {
                self.scan_quantized(piece.iter().copied(), &wide, q_scale, filter, min, want)
            })
            .collect();
        self.rescore(merge_best(heaps, want), query, min_similarity, k)
    }

    /// The row most similar to `query` (by cosine alone) and its score.
    pub fn most_similar<'a>(
        &self,
        query: &[f32],
        filter: impl Into<RowFilter<'a>>,
    ) -> io::Result<Option<(Uuid, f32)>> {
        let filter = filter.into();
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
                    if best.is_none_or(|(_, s)| score > s)
                        && filter.admit.is_none_or(|admit| admit(&self.ids[r]))
                    {
                        best = Some((self.ids[r], score));
                    }
                }
            })?;
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::super::unit;
    use super::*;

    /// Values in [-0.5, 0.5) from `seed`, by a 64-bit LCG (the tests need no better).
    fn values(seed: u64) -> impl FnMut() -> f32 {
        let mut x = seed;
        move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        }
    }

    /// `n` random unit 384-d rows, ids `0..n`, rules and facts in turn, importance `(i % 10) / 10`.
    fn random_table(n: usize, next: &mut impl FnMut() -> f32) -> VectorTable {
        let mut t = VectorTable::default();
        for i in 0..n as u128 {
            let v = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
            let ty = [MemoryType::Rule, MemoryType::Fact][i as usize % 2];
            t.upsert(Uuid::from_u128(i), &v, ty, (i % 10) as f32 / 10.0)
                .expect("upsert");
        }
        t
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
        let mut next = values(11);
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
                .first_pass(q, None.into(), -1.0, MIN_CANDIDATES)
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
    fn an_admit_filter_keeps_the_same_first_pass_candidates_as_the_scan_asking_it() {
        let mut next = values(5);
        let t = random_table(FAST_MIN_ROWS + PAR_ROWS, &mut next);
        // Passing half (over-fetched), a tenth (over-fetched at 20x, the scan's fallback at
        // 4x), a hundredth (fallback), and none (fallback, nothing found).
        let half = |id: &Uuid| id.as_u128() % 4 < 2;
        let tenth = |id: &Uuid| id.as_u128() % 10 == 3;
        let rare = |id: &Uuid| id.as_u128() % 100 == 7;
        let none = |_: &Uuid| false;
        let admits: [&(dyn Fn(&Uuid) -> bool + Sync); 4] = [&half, &tenth, &rare, &none];
        for _ in 0..3 {
            let q = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
            for admit in admits {
                for memory_type in [None, Some(MemoryType::Fact)] {
                    let filter = RowFilter {
                        memory_type,
                        admit: Some(admit),
                    };
                    for (min, overfetch) in [(-1.0, OVERFETCH), (0.05, OVERFETCH), (-1.0, 20)] {
                        let scanned = t.first_pass(&q, filter, min, MIN_CANDIDATES);
                        let fetched =
                            t.first_pass_admitting(&q, filter, min, MIN_CANDIDATES, overfetch);
                        assert!(fetched.iter().all(|h| admit(&h.id)));
                        assert_eq!(fetched.into_sorted_vec(), scanned.into_sorted_vec());
                    }
                    let fast = t.search_fast(&q, filter, 0.0, 5).expect("search");
                    assert!(fast.iter().all(|h| admit(&h.id)
                        && memory_type.is_none_or(|ty| t.types[t.pos[&h.id]] == ty)));
                }
            }
        }
    }

    type Admit<'a> = &'a (dyn Fn(&Uuid) -> bool + Sync);

    #[test]
    fn a_search_among_candidates_finds_the_filtered_exact_top_k() {
        let mut next = values(13);
        let n = FAST_MIN_ROWS + 2 * PAR_ROWS;
        let mut t = random_table(n, &mut next);
        t.remove(&Uuid::from_u128(300)).expect("remove");
        // Candidates: 59 rows (scored exactly), ~520 (the first pass over them) and 10,000 (in
        // three parallel pieces); an id without a row and repeated ids are passed over.
        let (mut found, mut total) = (0, 0);
        for (every, exact) in [(901u128, true), (101, false), (5, false)] {
            let mut ids: Vec<Uuid> = (0..n as u128)
                .filter(|i| i.is_multiple_of(every))
                .map(Uuid::from_u128)
                .collect();
            ids.extend_from_within(..10);
            ids.push(Uuid::from_u128(u128::MAX));
            let among = |id: &Uuid| id.as_u128().is_multiple_of(every);
            let odd = |id: &Uuid| id.as_u128() % 3 != 1;
            for _ in 0..4 {
                let q = unit(&(0..384).map(|_| next()).collect::<Vec<_>>());
                for memory_type in [None, Some(MemoryType::Fact)] {
                    // Without `admit` the candidates decide alone; with one, it decides too.
                    let both = |id: &Uuid| among(id) && odd(id);
                    let cases: [(Option<Admit<'_>>, Admit<'_>); 2] =
                        [(None, &among), (Some(&odd), &both)];
                    for (admit, truth) in cases {
                        let filter = RowFilter { memory_type, admit };
                        let got = t
                            .search_among(&q, ids.iter(), filter, -1.0, 5)
                            .expect("search");
                        let want = t
                            .search(
                                &q,
                                RowFilter {
                                    memory_type,
                                    admit: Some(truth),
                                },
                                -1.0,
                                5,
                            )
                            .expect("search");
                        assert_eq!(want.len(), 5);
                        assert!(got.iter().all(|h| truth(&h.id)
                            && memory_type.is_none_or(|ty| t.types[t.pos[&h.id]] == ty)));
                        if exact {
                            assert_eq!(got, want);
                        }
                        total += want.len();
                        found += want.iter().filter(|h| got.contains(h)).count();
                    }
                }
            }
        }
        assert!(
            found as f64 / total as f64 >= 0.99,
            "recall {found}/{total}"
        );
        assert!(t
            .search_among(&unit(&[1.0; 384]), std::iter::empty(), None, 0.0, 5)
            .expect("search")
            .is_empty());
    }

    #[test]
    fn parallel_scan_equals_a_brute_force_ranking() {
        let mut t = VectorTable::default();
        let mut next = values(7);
        let mut rows = Vec::new();
        for i in 0..(3 * PAR_ROWS as u128 + 17) {
            let v = unit(&(0..16).map(|_| next()).collect::<Vec<_>>());
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
