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
//!   catch it up from the log at start, and `replay` rebuilds it. Its sled tree `tlog` holds
//!   the complete C2SP hash tiles (256 hashes of tree level 8L each), the right edge's partial
//!   tiles are in memory, and a proof or a root costs O(log n) tile reads.
//!
//! The proof algorithms and tile geometry are `tlog_tiles` (a port of Go's tlog); what is ours
//! is the storage, the leaf and the incremental append (appending never reads the store).

pub mod cosignature;
pub mod note;
pub mod proof;
pub mod witnesses;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tlog_tiles::{Hash, HashReader, Tile};

use crate::log::record::RecordRef;
use crate::log::{LogError, LogReader};

/// The sled tree holding the complete hash tiles.
pub const TREE: &str = "tlog";
/// The number of leaves the complete level-0 tiles cover; 4 bytes long, so no tile key (9
/// bytes) can be it.
const SIZE_KEY: &[u8] = b"size";
/// Hash tiles are C2SP tlog-tiles' height: 256 hashes.
pub const TILE_HEIGHT: u8 = 8;
const TILE_WIDTH: usize = 1 << TILE_HEIGHT;
const HASH: usize = tlog_tiles::HASH_SIZE;

#[derive(Debug, thiserror::Error)]
pub enum TlogError {
    #[error("tree storage: {0}")]
    Storage(#[from] sled::Error),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("{0}")]
    Tree(#[from] tlog_tiles::Error),
    #[error("the tree holds {size} leaves; leaves from seq {first_seq} cannot follow them")]
    Gap { size: u64, first_seq: u64 },
    #[error("a tree of {size} leaves has no {what}")]
    OutOfRange { size: u64, what: String },
    #[error("the stored tile {level}/{index} is missing or not {TILE_WIDTH} hashes")]
    MissingTile { level: u8, index: u64 },
}

/// The leaf of the record `seq` whose blake3 hash is `record_hash`.
pub fn leaf_data(seq: u64, record_hash: &[u8; 32]) -> [u8; 40] {
    let mut leaf = [0u8; 40];
    leaf[..8].copy_from_slice(&seq.to_be_bytes());
    leaf[8..].copy_from_slice(record_hash);
    leaf
}

/// `SHA-256(0x00 || leaf_data(seq, record_hash))`.
pub fn leaf_hash(seq: u64, record_hash: &[u8; 32]) -> Hash {
    tlog_tiles::record_hash(&leaf_data(seq, record_hash))
}

/// The root of a complete subtree over `hashes` (a power of two of them).
fn subtree(hashes: &[Hash]) -> Hash {
    match hashes.len() {
        0 => tlog_tiles::EMPTY_HASH,
        1 => hashes[0],
        n => {
            let half = n / 2;
            tlog_tiles::node_hash(subtree(&hashes[..half]), subtree(&hashes[half..]))
        }
    }
}

fn tile_key(level: u8, index: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = level;
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
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

/// The tree, stored as C2SP hash tiles: each complete tile of tile level L (256 hashes of tree
/// level 8L, 8 KiB) is one sled value, written once when it completes. The partial tiles of
/// the right edge live in memory and are rebuilt at open from the stored tiles and, for the
/// leaves past the last complete level-0 tile, from the log (`catch_up`). sled 0.34 keeps
/// state and rewrites pages per key, so a key per hash would cost ~20x the time and space.
pub struct MerkleTree {
    tree: sled::Tree,
    edge: Mutex<Edge>,
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
    tree: &'a sled::Tree,
    edge: Edge,
    tiles: RefCell<HashMap<(u8, u64), Vec<Hash>>>,
}

impl Reader<'_> {
    /// The hashes of tree level `8 * level` from `first`, `count` of them, all in one tile.
    fn level_hashes(&self, level: u8, first: u64, count: usize) -> Result<Hash, TlogError> {
        let index = first >> TILE_HEIGHT;
        let at = (first % TILE_WIDTH as u64) as usize;
        let out_of_range = || TlogError::OutOfRange {
            size: self.edge.size,
            what: format!("hash {first} of level {}", u32::from(level) * 8),
        };
        if index < complete_tiles(self.edge.size, level) {
            let mut tiles = self.tiles.borrow_mut();
            let tile = match tiles.entry((level, index)) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    let data = self
                        .tree
                        .get(tile_key(level, index))?
                        .filter(|d| d.len() == TILE_WIDTH * HASH)
                        .ok_or(TlogError::MissingTile { level, index })?;
                    v.insert(hashes_of(&data))
                }
            };
            return tile
                .get(at..at + count)
                .map(subtree)
                .ok_or_else(out_of_range);
        }
        if index == complete_tiles(self.edge.size, level) {
            return self
                .edge
                .pending
                .get(usize::from(level))
                .and_then(|p| p.get(at..at + count))
                .map(subtree)
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
                self.level_hashes(level, n << k, 1 << k)
                    .map_err(|_| tlog_tiles::Error::IndexesNotInTree)
            })
            .collect()
    }
}

impl MerkleTree {
    /// Opens the tree stored in `db` (empty when there is none). Its size is then what the
    /// complete level-0 tiles cover; `catch_up` adds the leaves after them from the log.
    pub fn open(db: &sled::Db) -> Result<MerkleTree, TlogError> {
        let tree = db.open_tree(TREE)?;
        let size = match tree.get(SIZE_KEY)? {
            Some(v) => <[u8; 8]>::try_from(v.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| TlogError::MissingTile {
                    level: 0,
                    index: u64::MAX,
                })?,
            None => 0,
        };
        // The partial tile of each level above 0: the roots of the complete tiles below it
        // that no complete tile of its own holds yet.
        let mut pending = vec![Vec::new()];
        let mut level = 1u8;
        while complete_tiles(size, level - 1) > 0 {
            let below = complete_tiles(size, level - 1);
            let start = below - below % TILE_WIDTH as u64;
            let mut hashes = Vec::with_capacity((below - start) as usize);
            for index in start..below {
                let data = tree
                    .get(tile_key(level - 1, index))?
                    .filter(|d| d.len() == TILE_WIDTH * HASH)
                    .ok_or(TlogError::MissingTile {
                        level: level - 1,
                        index,
                    })?;
                hashes.push(subtree(&hashes_of(&data)));
            }
            pending.push(hashes);
            level += 1;
        }
        Ok(MerkleTree {
            tree,
            edge: Mutex::new(Edge {
                size,
                pending: Arc::new(pending),
            }),
        })
    }

    /// Drops the stored tree (`replay` rebuilds it).
    pub fn drop_in(db: &sled::Db) -> Result<(), sled::Error> {
        db.drop_tree(TREE).map(|_| ())
    }

    fn edge(&self) -> Edge {
        self.edge
            .lock()
            .map(|e| e.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn reader(&self) -> Reader<'_> {
        Reader {
            tree: &self.tree,
            edge: self.edge(),
            tiles: RefCell::new(HashMap::new()),
        }
    }

    /// The number of leaves: the records `1..=size` are in the tree.
    pub fn size(&self) -> u64 {
        self.edge().size
    }

    /// Appends the leaves of the records `first_seq, first_seq + 1, ..` whose blake3 hashes are
    /// `hashes`. Records already in the tree are skipped (a catch-up may overlap what the
    /// applier appended); a gap is an error. Tiles that complete are written in one batch.
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
        let mut batch = sled::Batch::default();
        let mut size = edge.size;
        let mut wrote = false;
        for h in &hashes[skip..] {
            size += 1;
            pending[0].push(leaf_hash(size, h));
            let mut level = 0usize;
            while pending[level].len() == TILE_WIDTH {
                let full = std::mem::take(&mut pending[level]);
                let tl = level as u8;
                let mut data = Vec::with_capacity(TILE_WIDTH * HASH);
                for x in &full {
                    data.extend_from_slice(&x.0);
                }
                batch.insert(&tile_key(tl, complete_tiles(size, tl) - 1), data);
                wrote = true;
                if pending.len() == level + 1 {
                    pending.push(Vec::new());
                }
                pending[level + 1].push(subtree(&full));
                level += 1;
            }
        }
        if wrote {
            let covered = size - size % TILE_WIDTH as u64;
            batch.insert(SIZE_KEY, &covered.to_be_bytes());
            self.tree.apply_batch(batch)?;
        }
        edge.size = size;
        edge.pending = Arc::new(pending);
        Ok(())
    }

    /// Appends the leaves of every record of `log` past the tree's size; how many.
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
        let hashes: Vec<Hash> = (0..width as u64)
            .map(|i| r.level_hashes(level, start + i, 1))
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(width * HASH);
        for h in hashes {
            out.extend_from_slice(&h.0);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
