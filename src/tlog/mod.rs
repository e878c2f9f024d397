//! The transparency log over the audit log: an RFC 6962 / RFC 9162 Merkle tree with one leaf
//! per log record, in log order, so that one entry's presence (an inclusion proof) or the log's
//! growth between two signed sizes (a consistency proof) costs O(log n) hashes that independent
//! software checks (Go's `x/mod/sumdb/tlog`, any C2SP tlog client).
//!
//! - Leaf `i` is record `seq = i + 1`; its data is [`leaf_data`]: the record's seq (8 bytes,
//!   big-endian) then its 32-byte blake3 hash. The record hash commits to the record's bytes,
//!   the leaf reveals nothing of any tenant's data, and whoever holds the record can recompute
//!   it.
//! - Hashing is RFC 6962's: leaf hash `SHA-256(0x00 || leaf)`, node `SHA-256(0x01 || l || r)`.
//! - The tree is a projection of the log: the applier appends each durable group's leaves
//!   ([`MerkleTree::append`]) before the group's callers hear back, `serve` and the appender
//!   catch it up from the log at start, and `replay` rebuilds it. The data dir's `tlog/` holds
//!   the complete C2SP hash tiles (256 hashes of tree level 8L each, one file per level), the
//!   right edge's partial tiles are in memory, and a proof or a root costs O(log n) reads.
//!
//! The proof algorithms and tile geometry are `tlog_tiles` (a port of Go's tlog); what is ours
//! is the storage, the leaf and the incremental append (appending never reads the store).

pub mod cosignature;
pub mod note;
pub mod proof;
pub mod witnesses;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tlog_tiles::{Hash, HashReader, Tile};

use crate::log::record::RecordRef;
use crate::log::{LogError, LogReader};

/// The directory of a data dir holding the tile files.
pub const DIR: &str = "tlog";
/// The sled tree holding [`SYNCED_KEY`].
const STATE_TREE: &str = "tlog_state";
/// The leaves covered by complete level-0 tiles known to be on disk: a multiple of 256.
const SYNCED_KEY: &[u8] = b"synced";
/// Where an older version kept the tiles, as sled values; dropped at open (the tree is
/// rebuilt from the log).
const LEGACY_TREE: &str = "tlog";
/// Hash tiles are C2SP tlog-tiles' height: 256 hashes.
pub const TILE_HEIGHT: u8 = 8;
/// Leaves (and hashes) a complete tile holds; the tree stores only complete tiles, so the
/// leaves past the last one are folded again from the log at every open.
pub const TILE_WIDTH: usize = 1 << TILE_HEIGHT;
const HASH: usize = tlog_tiles::HASH_SIZE;
const TILE_BYTES: u64 = (TILE_WIDTH * HASH) as u64;
/// Tile levels: level L holds tree level 8L, and a tree of at most 2^64 leaves has tree
/// levels 0..=63.
const LEVELS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum TlogError {
    #[error("tree storage: {0}")]
    Storage(#[from] sled::Error),
    #[error("tile file {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("{0}")]
    Tree(#[from] tlog_tiles::Error),
    #[error("the tree holds {size} leaves; leaves from seq {first_seq} cannot follow them")]
    Gap { size: u64, first_seq: u64 },
    #[error("a tree of {size} leaves has no {what}")]
    OutOfRange { size: u64, what: String },
}

/// The leaf of the record `seq` whose blake3 hash is `record_hash`.
pub fn leaf_data(seq: u64, record_hash: &[u8; 32]) -> [u8; 40] {
    let mut leaf = [0u8; 40];
    leaf[..8].copy_from_slice(&seq.to_be_bytes());
    leaf[8..].copy_from_slice(record_hash);
    leaf
}

// A leaf and about one node a record, hashed by the tree as records are appended and by
// `verify` over the whole log: SHA-256 of one and two blocks, their padded blocks written here
// and compressed by sha2's `compress256`, without the `Digest` API's buffering a byte string at
// a time (a fifth of their cost in a profile of verify).

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
const SHA256_H0: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// SHA-256 of the message whose padded blocks are `blocks`.
fn sha256_padded(
    blocks: &[sha2::digest::generic_array::GenericArray<u8, sha2::digest::consts::U64>],
) -> Hash {
    let mut state = SHA256_H0;
    sha2::compress256(&mut state, blocks);
    let mut out = [0u8; 32];
    for (b, w) in out.chunks_exact_mut(4).zip(state) {
        b.copy_from_slice(&w.to_be_bytes());
    }
    Hash(out)
}

/// `SHA-256(0x00 || leaf_data(seq, record_hash))`: 41 bytes, one block.
pub fn leaf_hash(seq: u64, record_hash: &[u8; 32]) -> Hash {
    let mut block = [0u8; 64];
    block[1..9].copy_from_slice(&seq.to_be_bytes());
    block[9..41].copy_from_slice(record_hash);
    // Padding: a one bit, zeros, the message's length in bits.
    block[41] = 0x80;
    block[56..].copy_from_slice(&(41u64 * 8).to_be_bytes());
    sha256_padded(&[block.into()])
}

/// `tlog_tiles::node_hash`: SHA-256 of `0x01 || left || right`, 65 bytes, two blocks.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut first = [0u8; 64];
    first[0] = 0x01;
    first[1..33].copy_from_slice(&left.0);
    first[33..].copy_from_slice(&right.0[..31]);
    let mut second = [0u8; 64];
    second[0] = right.0[31];
    second[1] = 0x80;
    second[56..].copy_from_slice(&(65u64 * 8).to_be_bytes());
    sha256_padded(&[first.into(), second.into()])
}

/// The root of a complete subtree over `hashes` (a power of two of them).
fn subtree(hashes: &[Hash]) -> Hash {
    match hashes.len() {
        0 => tlog_tiles::EMPTY_HASH,
        1 => hashes[0],
        n => {
            let half = n / 2;
            node_hash(&subtree(&hashes[..half]), &subtree(&hashes[half..]))
        }
    }
}

fn hashes_of(data: &[u8]) -> Vec<Hash> {
    data.chunks_exact(HASH)
        .map(|c| {
            let mut h = [0u8; HASH];
            h.copy_from_slice(c);
            Hash(h)
        })
        .collect()
}

/// How many complete tiles tile level `level` has in a tree of `size` leaves.
fn complete_tiles(size: u64, level: u8) -> u64 {
    size.checked_shr(u32::from(TILE_HEIGHT) * (u32::from(level) + 1))
        .unwrap_or(0)
}

/// The right edge: for each tile level L, the hashes of tree level 8L past the level's last
/// complete tile (fewer than 256 each). Copied on write, so a reader takes a snapshot without
/// holding the lock while it hashes.
#[derive(Clone)]
struct Edge {
    size: u64,
    pending: Arc<Vec<Vec<Hash>>>,
}

/// One file per tile level: complete tile N of the level at offset N * 8 KiB.
struct Tiles {
    dir: PathBuf,
    files: Vec<File>,
}

impl Tiles {
    fn path(&self, level: usize) -> PathBuf {
        self.dir.join(format!("level-{level}"))
    }

    fn io(&self, level: usize) -> impl FnOnce(std::io::Error) -> TlogError + '_ {
        move |source| TlogError::File {
            path: self.path(level),
            source,
        }
    }

    fn open(dir: PathBuf) -> Result<Tiles, TlogError> {
        std::fs::create_dir_all(&dir).map_err(|source| TlogError::File {
            path: dir.clone(),
            source,
        })?;
        let mut tiles = Tiles {
            dir,
            files: Vec::with_capacity(LEVELS),
        };
        for level in 0..LEVELS {
            let path = tiles.path(level);
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|source| TlogError::File { path, source })?;
            tiles.files.push(file);
        }
        Ok(tiles)
    }

    /// `count` hashes of level `level` from hash `first`, all within its complete tiles.
    fn read(&self, level: u8, first: u64, count: usize) -> Result<Vec<Hash>, TlogError> {
        let l = usize::from(level);
        let mut data = vec![0u8; count * HASH];
        self.files[l]
            .read_exact_at(&mut data, first * HASH as u64)
            .map_err(self.io(l))?;
        Ok(hashes_of(&data))
    }

    /// Writes the complete tile `index` of `level`.
    fn write(&self, level: u8, index: u64, hashes: &[Hash]) -> Result<(), TlogError> {
        let l = usize::from(level);
        let mut data = Vec::with_capacity(hashes.len() * HASH);
        for h in hashes {
            data.extend_from_slice(&h.0);
        }
        self.files[l]
            .write_all_at(&data, index * TILE_BYTES)
            .map_err(self.io(l))
    }

    /// Cuts every level to the complete tiles of a tree of `size` leaves: what is past them
    /// was written without a sync and may hold anything after a crash. False (and nothing
    /// cut) when a level holds fewer.
    fn cut_to(&self, size: u64) -> Result<bool, TlogError> {
        for (l, f) in self.files.iter().enumerate() {
            let want = complete_tiles(size, l as u8) * TILE_BYTES;
            if f.metadata().map_err(self.io(l))?.len() < want {
                return Ok(false);
            }
        }
        for (l, f) in self.files.iter().enumerate() {
            f.set_len(complete_tiles(size, l as u8) * TILE_BYTES)
                .map_err(self.io(l))?;
        }
        Ok(true)
    }

    fn sync(&self) -> Result<(), TlogError> {
        for (l, f) in self.files.iter().enumerate() {
            f.sync_data().map_err(self.io(l))?;
        }
        Ok(())
    }
}

/// The tree, stored as C2SP hash tiles: each complete tile of tile level L (256 hashes of tree
/// level 8L, 8 KiB) is written once, when it completes, at its offset in the level's file; the
/// partial tiles of the right edge live in memory.
///
/// The files are written without a sync on the append path (the tree is a projection: the log
/// holds everything it is made of). [`sync`](MerkleTree::sync) makes them durable and then
/// records in sled how many leaves the synced tiles cover; at open everything past that mark
/// is cut and comes again from the log (`catch_up`). Files rather than sled values: sled 0.34
/// rewrites the pages holding its values, and 8 KiB values made the tree cost ingestion
/// several percent of its CPU; an appended file costs one write per 256 leaves.
pub struct MerkleTree {
    tiles: Tiles,
    state: sled::Tree,
    edge: Mutex<Edge>,
    /// The leaves the last sync made durable; its lock serializes syncs.
    synced: Mutex<u64>,
}

/// A tree of `size` leaves when the tree holds `have`: out of range beyond it.
fn check_size(size: u64, have: u64, what: impl FnOnce() -> String) -> Result<(), TlogError> {
    if size > have {
        return Err(TlogError::OutOfRange {
            size: have,
            what: what(),
        });
    }
    Ok(())
}

/// Reads hashes at any tree level from the tiles: a hash at level `8L + k` is the subtree root
/// of `2^k` consecutive hashes of one tile of level L (at most 127 node hashes).
struct Reader<'a> {
    tiles: &'a Tiles,
    edge: Edge,
}

impl Reader<'_> {
    /// The hashes of tree level `8 * level` from `first`, `count` of them, all in one tile.
    fn level_range(&self, level: u8, first: u64, count: usize) -> Result<Vec<Hash>, TlogError> {
        let index = first >> TILE_HEIGHT;
        let at = (first % TILE_WIDTH as u64) as usize;
        let out_of_range = || TlogError::OutOfRange {
            size: self.edge.size,
            what: format!("hash {first} of level {}", u32::from(level) * 8),
        };
        if at + count > TILE_WIDTH {
            return Err(out_of_range());
        }
        if index < complete_tiles(self.edge.size, level) {
            return self.tiles.read(level, first, count);
        }
        if index == complete_tiles(self.edge.size, level) {
            return self
                .edge
                .pending
                .get(usize::from(level))
                .and_then(|p| p.get(at..at + count))
                .map(<[Hash]>::to_vec)
                .ok_or_else(out_of_range);
        }
        Err(out_of_range())
    }
}

impl HashReader for Reader<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&index| {
                let (l, n) = tlog_tiles::split_stored_hash_index(index);
                let (level, k) = (l / TILE_HEIGHT, l % TILE_HEIGHT);
                self.level_range(level, n << k, 1 << k)
                    .map(|h| subtree(&h))
                    .map_err(|_| tlog_tiles::Error::IndexesNotInTree)
            })
            .collect()
    }
}

impl MerkleTree {
    /// Opens the tree of the data dir `data_dir` whose database is `db` (empty when there is
    /// none). Its size is then what its synced complete level-0 tiles cover; `catch_up` adds
    /// the leaves after them from the log.
    pub fn open(db: &sled::Db, data_dir: &Path) -> Result<MerkleTree, TlogError> {
        db.drop_tree(LEGACY_TREE)?;
        let state = db.open_tree(STATE_TREE)?;
        let tiles = Tiles::open(data_dir.join(DIR))?;
        let mut size = match state.get(SYNCED_KEY)? {
            Some(v) => <[u8; 8]>::try_from(v.as_ref()).map_or(0, u64::from_be_bytes),
            None => 0,
        };
        size -= size % TILE_WIDTH as u64;
        if !tiles.cut_to(size)? {
            // Files shorter than the mark (lost or restored from elsewhere): start over.
            tracing::warn!(
                synced = size,
                "the Merkle tree's tile files are shorter than their sync mark: rebuilding the tree from the log"
            );
            size = 0;
            tiles.cut_to(0)?;
            state.insert(SYNCED_KEY, &0u64.to_be_bytes())?;
        }
        // The partial tile of each level above 0: the roots of the complete tiles below it
        // that no complete tile of its own holds yet.
        let mut pending = vec![Vec::new()];
        let mut level = 1u8;
        while complete_tiles(size, level - 1) > 0 {
            let below = complete_tiles(size, level - 1);
            let start = below - below % TILE_WIDTH as u64;
            let mut hashes = Vec::with_capacity((below - start) as usize);
            for index in start..below {
                let tile = tiles.read(level - 1, index * TILE_WIDTH as u64, TILE_WIDTH)?;
                hashes.push(subtree(&tile));
            }
            pending.push(hashes);
            level += 1;
        }
        Ok(MerkleTree {
            tiles,
            state,
            edge: Mutex::new(Edge {
                size,
                pending: Arc::new(pending),
            }),
            synced: Mutex::new(size),
        })
    }

    /// Drops the stored tree (`replay` rebuilds it).
    pub fn drop_in(db: &sled::Db, data_dir: &Path) -> Result<(), TlogError> {
        db.drop_tree(LEGACY_TREE)?;
        db.open_tree(STATE_TREE)?
            .insert(SYNCED_KEY, &0u64.to_be_bytes())?;
        let dir = data_dir.join(DIR);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(TlogError::File {
                path: dir,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Makes the complete tiles written so far durable, then records the leaves they cover,
    /// so the next open keeps them.
    pub fn sync(&self) -> Result<(), TlogError> {
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        let size = self.size();
        let covered = size - size % TILE_WIDTH as u64;
        if covered <= *synced {
            return Ok(());
        }
        // Every tile of the first `covered` leaves was written before `size` was published.
        self.tiles.sync()?;
        self.state.insert(SYNCED_KEY, &covered.to_be_bytes())?;
        *synced = covered;
        Ok(())
    }

    /// Syncs the tree every `every` while it lives (on a thread of its own, off the append
    /// path); the thread ends with the tree.
    pub fn sync_every(tree: &Arc<MerkleTree>, every: std::time::Duration) -> std::io::Result<()> {
        let weak = Arc::downgrade(tree);
        std::thread::Builder::new()
            .name("tlog-sync".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                let Some(tree) = weak.upgrade() else { return };
                if let Err(e) = tree.sync() {
                    tracing::warn!(error = %e, "syncing the Merkle tree's tiles failed; a restart rebuilds what is not synced");
                }
            })
            .map(|_| ())
    }

    fn edge(&self) -> Edge {
        self.edge
            .lock()
            .map(|e| e.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn reader(&self) -> Reader<'_> {
        Reader {
            tiles: &self.tiles,
            edge: self.edge(),
        }
    }

    /// The number of leaves: the records `1..=size` are in the tree.
    pub fn size(&self) -> u64 {
        self.edge().size
    }

    /// Appends the leaves of the records `first_seq, first_seq + 1, ..` whose blake3 hashes are
    /// `hashes`. Records already in the tree are skipped (a catch-up may overlap what the
    /// applier appended); a gap is an error. Tiles that complete are written to their files.
    pub fn append(&self, first_seq: u64, hashes: &[[u8; 32]]) -> Result<(), TlogError> {
        let mut edge = self.edge.lock().unwrap_or_else(|p| p.into_inner());
        let skip = edge.size.saturating_add(1).saturating_sub(first_seq.max(1));
        if first_seq == 0 || (skip == 0 && first_seq != edge.size + 1) {
            return Err(TlogError::Gap {
                size: edge.size,
                first_seq,
            });
        }
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        if skip >= hashes.len() {
            return Ok(());
        }
        let mut pending: Vec<Vec<Hash>> = (*edge.pending).clone();
        let mut size = edge.size;
        for h in &hashes[skip..] {
            size += 1;
            pending[0].push(leaf_hash(size, h));
            let mut level = 0usize;
            while pending[level].len() == TILE_WIDTH {
                let full = std::mem::take(&mut pending[level]);
                let tl = level as u8;
                self.tiles.write(tl, complete_tiles(size, tl) - 1, &full)?;
                if pending.len() == level + 1 {
                    pending.push(Vec::new());
                }
                pending[level + 1].push(subtree(&full));
                level += 1;
            }
        }
        edge.size = size;
        edge.pending = Arc::new(pending);
        Ok(())
    }

    /// Appends the leaves of every record of `log` past the tree's size, then syncs; how many.
    pub fn catch_up(
        &self,
        log: &LogReader,
        progress: Option<&indicatif::ProgressBar>,
    ) -> Result<u64, TlogError> {
        const BATCH: usize = 4096;
        let from = self.size() + 1;
        let mut total = 0u64;
        let mut first = from;
        let mut hashes: Vec<[u8; 32]> = Vec::with_capacity(BATCH);
        for item in log.records_from(from) {
            let (seq, value) = item?;
            let r = RecordRef::decode(&value).map_err(|e| LogError::Undecodable {
                seq,
                why: e.to_string(),
            })?;
            let hash: [u8; 32] = r.hash.try_into().map_err(|_| LogError::Undecodable {
                seq,
                why: "the record's hash is not 32 bytes".into(),
            })?;
            hashes.push(hash);
            if hashes.len() == BATCH {
                self.append(first, &hashes)?;
                total += BATCH as u64;
                first += BATCH as u64;
                hashes.clear();
                if let Some(p) = progress {
                    p.inc(BATCH as u64);
                }
            }
        }
        if !hashes.is_empty() {
            self.append(first, &hashes)?;
            total += hashes.len() as u64;
            if let Some(p) = progress {
                p.inc(hashes.len() as u64);
            }
        }
        self.sync()?;
        Ok(total)
    }

    /// The root hash of the tree's first `size` leaves.
    pub fn root(&self, size: u64) -> Result<Hash, TlogError> {
        let r = self.reader();
        check_size(size, r.edge.size, || format!("tree of size {size}"))?;
        Ok(tlog_tiles::tree_hash(size, &r)?)
    }

    /// The RFC 6962 audit path of leaf `index` in the tree of `size` leaves.
    pub fn inclusion(&self, index: u64, size: u64) -> Result<Vec<Hash>, TlogError> {
        if index >= size {
            return Err(TlogError::OutOfRange {
                size,
                what: format!("leaf {index}"),
            });
        }
        let r = self.reader();
        check_size(size, r.edge.size, || format!("tree of size {size}"))?;
        Ok(tlog_tiles::prove_record(size, index, &r)?)
    }

    /// The RFC 6962 consistency proof from the tree of `from` leaves to the tree of `to`: empty
    /// when `from` is 0 (every tree extends the empty one) or equals `to`.
    pub fn consistency(&self, from: u64, to: u64) -> Result<Vec<Hash>, TlogError> {
        if from > to {
            return Err(TlogError::OutOfRange {
                size: to,
                what: format!("prefix of size {from}"),
            });
        }
        let r = self.reader();
        check_size(to, r.edge.size, || format!("tree of size {to}"))?;
        if from == 0 || from == to {
            return Ok(Vec::new());
        }
        Ok(tlog_tiles::prove_tree(to, from, &r)?)
    }

    /// The bytes of a hash tile (C2SP tlog-tiles) of the tree of `size` leaves: its hashes back
    /// to back. A tile beyond that tree, or wider than what the tree completes, is out of range.
    pub fn tile(&self, tile: &Tile, size: u64) -> Result<Vec<u8>, TlogError> {
        let r = self.reader();
        check_size(size, r.edge.size, || format!("tree of size {size}"))?;
        let level = tile.level();
        // The hashes of this tile's level the tree of `size` leaves completes.
        let complete = size
            .checked_shr(u32::from(TILE_HEIGHT) * u32::from(level))
            .unwrap_or(0);
        let start = tile.level_index().saturating_mul(TILE_WIDTH as u64);
        let width = tile.width() as usize;
        let end = start.saturating_add(width as u64);
        if tile.is_data() || tile.height() != TILE_HEIGHT || width == 0 || end > complete {
            return Err(TlogError::OutOfRange {
                size,
                what: format!("tile {}", tile.path()),
            });
        }
        let hashes = r.level_range(level, start, width)?;
        let mut out = Vec::with_capacity(width * HASH);
        for h in hashes {
            out.extend_from_slice(&h.0);
        }
        Ok(out)
    }
}

impl Drop for MerkleTree {
    fn drop(&mut self) {
        // What is not synced is rebuilt from the log at the next open: a failure costs time.
        if let Err(e) = self.sync() {
            tracing::warn!(error = %e, "syncing the Merkle tree's tiles at close failed");
        }
    }
}

#[cfg(test)]
mod tests;
