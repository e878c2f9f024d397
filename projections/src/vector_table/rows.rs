//! Where a table's f32 rows live: on the heap, or in an unlinked spill file with a short tail
//! of rows on the heap waiting to be written.
//!
//! Invariants: a row is `dim` f32 values; rows `0..stored` of a spilled table are in the file
//! in native byte order (the file never leaves this process and is rebuilt from the log at
//! every start), the rows after them in `tail`, fewer than [`TAIL_ROWS`] of them. Removing a
//! row moves the last one into its place, so rows stay dense, and leaves none of its bytes in
//! the file (a removed memory may be an erased one).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytemuck::{cast_slice, cast_slice_mut};

/// Rows appended to a spilled table are written to the file this many at a time (a replay
/// appends a row per memory, and a write per row would be a system call per row).
pub(super) const TAIL_ROWS: usize = 256;
/// Rows read per `pread` when a spilled table is scanned in full (exact search, `most_similar`).
const READ_ROWS: usize = 128;

/// The f32 rows of a table.
#[derive(Debug)]
pub(super) enum Rows {
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
    pub(super) fn spill(dir: &Path, data: &[f32], dim: usize) -> io::Result<Rows> {
        let file = tempfile::tempfile_in(dir)?;
        file.write_all_at(cast_slice(data), 0)?;
        Ok(Rows::File {
            file,
            stored: data.len() / dim.max(1),
            tail: Vec::new(),
        })
    }

    /// Reads every row back onto the heap.
    pub(super) fn unspill(&self, rows: usize, dim: usize) -> io::Result<Rows> {
        let mut data = vec![0f32; rows * dim];
        self.read_into(0, &mut data, dim)?;
        Ok(Rows::Heap(data))
    }

    pub(super) fn push(&mut self, v: &[f32], dim: usize) -> io::Result<()> {
        match self {
            Rows::Heap(data) => data.extend_from_slice(v),
            Rows::File { file, stored, tail } => {
                tail.extend_from_slice(v);
                if tail.len() >= TAIL_ROWS * dim {
                    file.write_all_at(cast_slice(tail.as_slice()), (*stored * dim * 4) as u64)?;
                    *stored += tail.len() / dim;
                    tail.clear();
                }
            }
        }
        Ok(())
    }

    pub(super) fn set(&mut self, r: usize, v: &[f32], dim: usize) -> io::Result<()> {
        match self {
            Rows::Heap(data) => data[r * dim..(r + 1) * dim].copy_from_slice(v),
            Rows::File { file, stored, tail } => {
                if r >= *stored {
                    let t = r - *stored;
                    tail[t * dim..(t + 1) * dim].copy_from_slice(v);
                } else {
                    file.write_all_at(cast_slice(v), (r * dim * 4) as u64)?;
                }
            }
        }
        Ok(())
    }

    /// Moves row `last` (the last row) into row `p` and forgets it.
    pub(super) fn swap_remove(&mut self, p: usize, last: usize, dim: usize) -> io::Result<()> {
        if let Rows::Heap(data) = self {
            data.copy_within(last * dim..(last + 1) * dim, p * dim);
            data.truncate(last * dim);
            return Ok(());
        }
        let mut row = vec![0f32; dim];
        if p != last {
            self.read_into(last, &mut row, dim)?;
        }
        // The removed row is overwritten (by the last, or by zeros when it is the last), so
        // the vector of a memory taken out (an erased one) stays nowhere in the file.
        self.set(p, &row, dim)?;
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
    pub(super) fn read_into(&self, first: usize, out: &mut [f32], dim: usize) -> io::Result<()> {
        match self {
            Rows::Heap(data) => out.copy_from_slice(&data[first * dim..first * dim + out.len()]),
            Rows::File { file, stored, tail } => {
                let from_file = stored.saturating_sub(first).min(out.len() / dim) * dim;
                let (head, rest) = out.split_at_mut(from_file);
                file.read_exact_at(cast_slice_mut(head), (first * dim * 4) as u64)?;
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
    pub(super) fn scan(
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

    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Rows::Heap(data) => data.capacity() * 4,
            Rows::File { tail, .. } => tail.capacity() * 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of the whole file, past `stored` too.
    fn file_bytes(rows: &Rows) -> Vec<u8> {
        let Rows::File { file, .. } = rows else {
            panic!("a spilled table")
        };
        let len = file.metadata().expect("metadata").len() as usize;
        let mut out = vec![0u8; len];
        file.read_exact_at(&mut out, 0).expect("read");
        out
    }

    fn holds(bytes: &[u8], row: &[f32]) -> bool {
        let row: &[u8] = cast_slice(row);
        bytes.windows(row.len()).any(|w| w == row)
    }

    #[test]
    fn a_removed_row_stays_nowhere_in_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dim = 3;
        let rows: Vec<[f32; 3]> = (0..4).map(|i| [i as f32 + 0.25, 7.5, -1.0]).collect();
        let data: Vec<f32> = rows.iter().flatten().copied().collect();
        let mut r = Rows::spill(dir.path(), &data, dim).expect("spill");
        // The last row, then one in the middle (the last takes its place).
        r.swap_remove(3, 3, dim).expect("remove last");
        r.swap_remove(1, 2, dim).expect("remove middle");
        let bytes = file_bytes(&r);
        assert!(!holds(&bytes, &rows[3]) && !holds(&bytes, &rows[1]));
        assert!(holds(&bytes, &rows[0]) && holds(&bytes, &rows[2]));
        let mut back = vec![0f32; 2 * dim];
        r.read_into(0, &mut back, dim).expect("read");
        assert_eq!(back, [rows[0], rows[2]].concat());
    }
}
