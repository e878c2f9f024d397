//! Each tenant's vectors, contiguous f32 rows (normalised), with ids, types and importance;
//! exact top-k by dot product with a type filter.
//!
//! Search is bound by memory bandwidth (100,000 × 384 f32 is 154 MB), so the scan keeps eight
//! independent accumulators per row (the compiler vectorises them) and splits large tables
//! across cores. Deleting swaps the last row into the hole, so no trace of a deleted memory
//! stays in the table.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use rayon::prelude::*;
use uuid::Uuid;

use crate::event::MemoryType;

/// Rows per parallel task; below two of these the scan stays on one core.
const PAR_ROWS: usize = 16_384;

#[derive(Default, Debug)]
pub struct VectorTable {
    dim: usize,
    data: Vec<f32>,
    ids: Vec<Uuid>,
    types: Vec<MemoryType>,
    importance: Vec<f32>,
    pos: HashMap<Uuid, usize>,
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

impl VectorTable {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Inserts or replaces the row of `id`. A vector of another dimension than the table's
    /// (another model) is refused, so vectors of different models are never compared.
    pub fn upsert(
        &mut self,
        id: Uuid,
        vector: &[f32],
        memory_type: MemoryType,
        importance: f32,
    ) -> bool {
        if self.ids.is_empty() && self.dim == 0 {
            self.dim = vector.len();
        }
        if vector.len() != self.dim || vector.is_empty() {
            return false;
        }
        match self.pos.get(&id) {
            Some(&p) => {
                self.data[p * self.dim..(p + 1) * self.dim].copy_from_slice(vector);
                self.types[p] = memory_type;
                self.importance[p] = importance;
            }
            None => {
                self.pos.insert(id, self.ids.len());
                self.ids.push(id);
                self.data.extend_from_slice(vector);
                self.types.push(memory_type);
                self.importance.push(importance);
            }
        }
        true
    }

    pub fn set_importance(&mut self, id: &Uuid, importance: f32) {
        if let Some(&p) = self.pos.get(id) {
            self.importance[p] = importance;
        }
    }

    pub fn remove(&mut self, id: &Uuid) {
        let Some(p) = self.pos.remove(id) else { return };
        let last = self.ids.len() - 1;
        if p != last {
            let moved = self.ids[last];
            self.ids.swap(p, last);
            self.types.swap(p, last);
            self.importance.swap(p, last);
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[p * self.dim..(p + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
            self.pos.insert(moved, p);
        }
        self.ids.pop();
        self.types.pop();
        self.importance.pop();
        self.data.truncate(last * self.dim);
        if self.ids.is_empty() {
            self.dim = 0;
            self.data = Vec::new();
        }
    }

    fn scan(
        &self,
        rows: std::ops::Range<usize>,
        query: &[f32],
        filter: Option<MemoryType>,
        min: f32,
        k: usize,
    ) -> BinaryHeap<Hit> {
        let mut heap = BinaryHeap::with_capacity(k + 1);
        for r in rows {
            if filter.is_some_and(|t| self.types[r] != t) {
                continue;
            }
            let score = dot(&self.data[r * self.dim..(r + 1) * self.dim], query);
            if score < min {
                continue;
            }
            let hit = Hit {
                id: self.ids[r],
                score,
                final_score: SIMILARITY_WEIGHT * score + IMPORTANCE_WEIGHT * self.importance[r],
            };
            if heap.len() < k {
                heap.push(hit);
            } else if heap.peek().is_some_and(|worst| hit < *worst) {
                heap.pop();
                heap.push(hit);
            }
        }
        heap
    }

    /// Exact top-k by final score among rows with `score >= min_similarity`.
    pub fn search(
        &self,
        query: &[f32],
        filter: Option<MemoryType>,
        min_similarity: f32,
        k: usize,
    ) -> Vec<Hit> {
        if k == 0 || query.len() != self.dim || self.ids.is_empty() {
            return Vec::new();
        }
        let n = self.ids.len();
        let heap = if n < 2 * PAR_ROWS {
            self.scan(0..n, query, filter, min_similarity, k)
        } else {
            let starts: Vec<usize> = (0..n).step_by(PAR_ROWS).collect();
            starts
                .par_iter()
                .map(|&s| self.scan(s..(s + PAR_ROWS).min(n), query, filter, min_similarity, k))
                .reduce(BinaryHeap::new, |mut a, b| {
                    for h in b {
                        if a.len() < k {
                            a.push(h);
                        } else if a.peek().is_some_and(|worst| h < *worst) {
                            a.pop();
                            a.push(h);
                        }
                    }
                    a
                })
        };
        // Min-heap order sorted ascending is best first.
        heap.into_sorted_vec()
    }

    /// The row most similar to `query` (by cosine alone) and its score.
    pub fn most_similar(&self, query: &[f32], filter: Option<MemoryType>) -> Option<(Uuid, f32)> {
        if query.len() != self.dim {
            return None;
        }
        let mut best: Option<(Uuid, f32)> = None;
        for r in 0..self.ids.len() {
            if filter.is_some_and(|t| self.types[r] != t) {
                continue;
            }
            let score = dot(&self.data[r * self.dim..(r + 1) * self.dim], query);
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((self.ids[r], score));
            }
        }
        best
    }

    /// The stored vector of a memory (tests, dedup).
    pub fn vector(&self, id: &Uuid) -> Option<&[f32]> {
        self.pos
            .get(id)
            .map(|&p| &self.data[p * self.dim..(p + 1) * self.dim])
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
        t.upsert(a, &unit(&[1.0, 0.0, 0.0]), MemoryType::Fact, 0.0);
        t.upsert(b, &unit(&[0.9, 0.1, 0.0]), MemoryType::Rule, 1.0);
        t.upsert(c, &unit(&[0.0, 1.0, 0.0]), MemoryType::Fact, 0.5);
        let q = unit(&[1.0, 0.0, 0.0]);
        let hits = t.search(&q, None, 0.0, 5);
        // b's importance lifts it above a despite a lower similarity.
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![b, a, c]);
        assert!((hits[1].score - 1.0).abs() < 1e-6 && (hits[1].final_score - 0.85).abs() < 1e-6);
        let facts = t.search(&q, Some(MemoryType::Fact), 0.5, 5);
        assert_eq!(facts.iter().map(|h| h.id).collect::<Vec<_>>(), vec![a]);
        t.remove(&b);
        assert!(t.search(&q, None, -1.0, 5).iter().all(|h| h.id != b));
        assert_eq!(t.len(), 2);
        assert_eq!(t.vector(&c), Some(&unit(&[0.0, 1.0, 0.0])[..]));
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
            );
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
            .iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(got, brute.iter().take(10).map(|b| b.1).collect::<Vec<_>>());
    }
}
