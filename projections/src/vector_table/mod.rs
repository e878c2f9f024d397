//! Each tenant's vectors: normalised f32 rows with ids, types and importance, and an int8
//! copy of every row; exact top-k by dot product with a type filter, or an int8 first pass
//! with exact rescoring on large tables.
//!
//! - `rows`: where the f32 rows live, the heap or an unlinked spill file;
//! - `quantize`: the int8 copy of a row;
//! - `scalar`: the portable kernels (f32 dot, i8·i16 dot), the reference for the SIMD ones;
//! - `avx2`: the AVX2 kernels (x86_64), each tested against its `scalar` reference;
//! - `search`: top-k search, exact and through the int8 first pass.
//!
//! Invariants: every row has the table's dimension (a vector of another is refused, so
//! vectors of different models are never compared); row `r` of the f32 rows, of the int8
//! copy and of `ids`, `types`, `importance` and `scales` is the same memory, and `pos` maps
//! each id to its row. Deleting swaps the last row into the hole, so no trace of a deleted
//! memory stays in the table.
//!
//! Where the f32 rows live (`rows::Rows`): on the heap while the table is small, where
//! search scans them all exactly. A table given a spill directory moves them to an unlinked
//! file there once it reaches [`SPILL_ROWS`], the size from which search runs the int8 first
//! pass and reads only its ~100 candidates' f32 rows to rescore them: the int8 copy stays in
//! memory and is what is scanned, the f32 rows (four times its size) are read from the page
//! cache a hundred at a time. A row of a spilled table then holds ~0.4 KB of the heap (its
//! int8 copy, id, scale, type and importance), its 1.5 KB of f32 being in the file. The file is
//! rebuilt from the log at every start, so nothing in it is ever trusted across restarts.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::event::MemoryType;

#[cfg(target_arch = "x86_64")]
mod avx2;
mod quantize;
mod rows;
mod scalar;
mod search;

use quantize::quantize;
use rows::Rows;
pub use scalar::dot;
pub use search::{
    candidates_for, FastSearch, Hit, RowFilter, FAST_MIN_ROWS, IMPORTANCE_WEIGHT, SIMILARITY_WEIGHT,
};

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

/// One tenant's vectors (see the module doc for the invariants between its columns).
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
    /// (a step of megabytes in RSS at a large tenant's size), a B-tree grows a node at a time,
    /// and ids (UUIDv7) arrive nearly in order, which it appends cheaply.
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

/// `v` scaled to unit length (tests).
#[cfg(test)]
fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

#[cfg(test)]
mod tests {
    use super::rows::TAIL_ROWS;
    use super::*;

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
}
