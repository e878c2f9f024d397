//! Record hashes ([`record_hash`]) computed many at a time, for `verify`, which hashes every
//! record of the log.
//!
//! A record's hash input (`DOMAIN || prev || seq || ts || event`) is most often one BLAKE3
//! chunk (at most 1,024 bytes) of a dozen 64-byte blocks, which `blake3::Hasher` compresses one
//! after another, one SIMD lane's worth of work at a time. Here the records whose input is one
//! chunk are queued by their count of blocks, and a full queue (as many records as the CPU's
//! vectors have lanes, 16 with AVX-512) is compressed together with BLAKE3's own `hash_many`,
//! its kernel for hashing the chunks of one large input side by side: every block but the last
//! of each record at once, then each record's last block (shorter than 64 bytes, and the root)
//! on its own. The hashes are BLAKE3's, bit for bit (tests below compare them with
//! [`record_hash`] for every input length up to past a chunk); a longer record is hashed by
//! [`record_hash`] itself.
//!
//! `hash_many` and `compress_in_place` are in blake3's `platform` module, public but outside
//! its semver promise: the workspace pins blake3's version for it (Cargo.toml).

use blake3::platform::Platform;
use blake3::IncrementCounter;

use crate::log::record::{record_hash, DOMAIN};

const BLOCK_LEN: usize = blake3::BLOCK_LEN;
/// A chunk's blocks: a record's input of at most this many blocks is hashed here.
const MAX_BLOCKS: usize = blake3::CHUNK_LEN / BLOCK_LEN;
/// The most inputs `hash_many` takes side by side (AVX-512's lanes).
const LANES: usize = 16;
/// BLAKE3's domain flags (the spec, section 2.1).
const CHUNK_START: u8 = 1;
const CHUNK_END: u8 = 2;
const ROOT: u8 = 8;
/// BLAKE3's IV, its key for an unkeyed hash.
const IV: [u32; 8] = [
    0x6A09_E667,
    0xBB67_AE85,
    0x3C6E_F372,
    0xA54F_F53A,
    0x510E_527F,
    0x9B05_688C,
    0x1F83_D9AB,
    0x5BE0_CD19,
];
/// The bytes of a record's hash input before its event.
const PREFIX: usize = DOMAIN.len() + 32 + 8 + 8;

/// Records queued for hashing, each with a caller's tag; [`Hashes::push`] and
/// [`Hashes::finish`] hand each hash back with its tag.
pub(super) struct Hashes {
    platform: Platform,
    /// By block count less one: the queued inputs of that many blocks, back to back, each
    /// zero-padded to whole blocks.
    queues: [Queue; MAX_BLOCKS],
}

#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    /// Each queued input's tag and the length of its last block (1..=64).
    pending: Vec<(usize, u8)>,
}

impl Default for Hashes {
    fn default() -> Hashes {
        Hashes {
            platform: Platform::detect(),
            queues: Default::default(),
        }
    }
}

impl Hashes {
    /// Queues `record_hash(prev, seq, ts_micros, event)` under `tag`; `done(tag, hash)` is
    /// called with it now (a record longer than a chunk), when its queue fills, or at
    /// [`Hashes::finish`].
    pub(super) fn push(
        &mut self,
        tag: usize,
        prev: &[u8; 32],
        seq: u64,
        ts_micros: i64,
        event: &[u8],
        done: &mut impl FnMut(usize, [u8; 32]),
    ) {
        let len = PREFIX + event.len();
        let blocks = len.div_ceil(BLOCK_LEN);
        if blocks > MAX_BLOCKS {
            done(tag, record_hash(prev, seq, ts_micros, event));
            return;
        }
        let q = &mut self.queues[blocks - 1];
        let last = len - (blocks - 1) * BLOCK_LEN;
        q.bytes.extend_from_slice(DOMAIN);
        q.bytes.extend_from_slice(prev);
        q.bytes.extend_from_slice(&seq.to_be_bytes());
        q.bytes.extend_from_slice(&ts_micros.to_be_bytes());
        q.bytes.extend_from_slice(event);
        q.bytes.resize(q.bytes.len() + BLOCK_LEN - last, 0);
        // `last` is 1..=64: the input is at least PREFIX bytes, never empty.
        q.pending.push((tag, last as u8));
        if q.pending.len() == LANES {
            flush(self.platform, blocks, q, done);
        }
    }

    /// Hashes every input still queued.
    pub(super) fn finish(&mut self, done: &mut impl FnMut(usize, [u8; 32])) {
        for (i, q) in self.queues.iter_mut().enumerate() {
            if !q.pending.is_empty() {
                flush(self.platform, i + 1, q, done);
            }
        }
    }
}

/// Hashes the inputs of `q`, each `blocks` blocks, and empties it.
fn flush(platform: Platform, blocks: usize, q: &mut Queue, done: &mut impl FnMut(usize, [u8; 32])) {
    let stride = blocks * BLOCK_LEN;
    let n = q.pending.len();
    // The chaining value of each input after all its blocks but the last.
    let mut cvs = [[0u32; 8]; LANES];
    if blocks > 1 {
        let mut out = [0u8; LANES * 32];
        let out = &mut out[..n * 32];
        // `hash_many` takes its inputs' length as a constant: one instance a block count.
        match blocks - 1 {
            1 => lead::<64>(platform, &q.bytes, stride, n, out),
            2 => lead::<128>(platform, &q.bytes, stride, n, out),
            3 => lead::<192>(platform, &q.bytes, stride, n, out),
            4 => lead::<256>(platform, &q.bytes, stride, n, out),
            5 => lead::<320>(platform, &q.bytes, stride, n, out),
            6 => lead::<384>(platform, &q.bytes, stride, n, out),
            7 => lead::<448>(platform, &q.bytes, stride, n, out),
            8 => lead::<512>(platform, &q.bytes, stride, n, out),
            9 => lead::<576>(platform, &q.bytes, stride, n, out),
            10 => lead::<640>(platform, &q.bytes, stride, n, out),
            11 => lead::<704>(platform, &q.bytes, stride, n, out),
            12 => lead::<768>(platform, &q.bytes, stride, n, out),
            13 => lead::<832>(platform, &q.bytes, stride, n, out),
            14 => lead::<896>(platform, &q.bytes, stride, n, out),
            _ => lead::<960>(platform, &q.bytes, stride, n, out),
        }
        for (cv, bytes) in cvs.iter_mut().zip(out.chunks_exact(32)) {
            for (w, b) in cv.iter_mut().zip(bytes.chunks_exact(4)) {
                *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
    } else {
        cvs = [IV; LANES];
    }
    let start = if blocks == 1 { CHUNK_START } else { 0 };
    for (i, ((tag, last), cv)) in q.pending.drain(..).zip(cvs.iter_mut()).enumerate() {
        let at = i * stride + stride - BLOCK_LEN;
        let mut block = [0u8; BLOCK_LEN];
        block.copy_from_slice(&q.bytes[at..at + BLOCK_LEN]);
        platform.compress_in_place(cv, &block, last, 0, start | CHUNK_END | ROOT);
        let mut hash = [0u8; 32];
        for (b, w) in hash.chunks_exact_mut(4).zip(cv.iter()) {
            b.copy_from_slice(&w.to_le_bytes());
        }
        done(tag, hash);
    }
    q.bytes.clear();
}

/// The chaining values of `n` inputs laid `stride` bytes apart in `bytes`, after their first
/// `N` bytes (whole blocks, the first a chunk's start, none its end), into `out`.
fn lead<const N: usize>(platform: Platform, bytes: &[u8], stride: usize, n: usize, out: &mut [u8]) {
    let at =
        |i: usize| -> Option<&[u8; N]> { bytes.get(i * stride..i * stride + N)?.try_into().ok() };
    // The queue holds `n` inputs of `stride` bytes: none is missing (were one, it would be
    // hashed as the first, so its hash would not match unless its bytes were the first's).
    let Some(first) = at(0) else { return };
    let mut inputs: [&[u8; N]; LANES] = [first; LANES];
    for (i, input) in inputs.iter_mut().enumerate().take(n) {
        if let Some(b) = at(i) {
            *input = b;
        }
    }
    platform.hash_many(
        &inputs[..n],
        &IV,
        0,
        IncrementCounter::No,
        0,
        CHUNK_START,
        0,
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event length from empty to past one chunk, queued in an order that fills some
    /// queues and leaves others part full: each tag gets [`record_hash`]'s hash of its record,
    /// once.
    #[test]
    fn many_at_once_are_record_hash_bit_for_bit() {
        let mut h = Hashes::default();
        let mut got: Vec<Option<[u8; 32]>> = Vec::new();
        let mut want = Vec::new();
        let put = |got: &mut Vec<Option<[u8; 32]>>, tag: usize, hash: [u8; 32]| {
            assert!(got[tag].replace(hash).is_none(), "tag {tag} twice");
        };
        for round in 0..3u64 {
            for len in 0..1200usize {
                let seq = round * 10_000 + len as u64;
                let ts = -(len as i64) * 7_919;
                let prev = [(len % 251) as u8; 32];
                let event: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
                let tag = got.len();
                got.push(None);
                want.push(record_hash(&prev, seq, ts, &event));
                h.push(tag, &prev, seq, ts, &event, &mut |t, x| put(&mut got, t, x));
            }
        }
        h.finish(&mut |t, x| put(&mut got, t, x));
        for (tag, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.as_ref(),
                Some(w),
                "tag {tag} (event of {} bytes)",
                tag % 1200
            );
        }
        // Nothing is left queued.
        h.finish(&mut |t, _| panic!("tag {t} again"));
    }
}
