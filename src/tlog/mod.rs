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
//!   every complete subtree's hash under its stored-hash index (Crosby and Wallach's dense
//!   order, as Go's tlog numbers them), so a proof or a root costs O(log n) point reads and a
//!   C2SP hash tile 256.
//!
//! The proof algorithms and tile geometry are `tlog_tiles` (a port of Go's tlog); what is ours
//! is the storage, the leaf and the incremental append (a frontier of the right edge's
//! complete subtrees, so appending never reads the store).

pub mod cosignature;
pub mod note;
pub mod proof;
pub mod witnesses;

use std::sync::Mutex;

use tlog_tiles::{Hash, HashReader, Tile};

use crate::log::record::RecordRef;
use crate::log::{LogError, LogReader};

/// The sled tree holding the stored hashes.
pub const TREE: &str = "tlog";
/// The number of leaves the stored hashes cover; 4 bytes long, so no stored-hash key (8 bytes)
/// can be it.
const SIZE_KEY: &[u8] = b"size";
/// Hash tiles are C2SP tlog-tiles' height: 256 hashes.
pub const TILE_HEIGHT: u8 = 8;

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
    #[error("the stored hash {index} is missing or not 32 bytes")]
    MissingHash { index: u64 },
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

/// The hashes of the complete subtrees along the right edge of a tree, largest first: exactly
/// what appending the next leaf combines with.
struct Frontier {
    size: u64,
    roots: Vec<Hash>,
}

pub struct MerkleTree {
    tree: sled::Tree,
    frontier: Mutex<Frontier>,
}

/// Reads stored hashes from the sled tree, for `tlog_tiles`' proof and tile functions.
struct Stored<'a>(&'a sled::Tree);

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&index| {
                let v = self
                    .0
                    .get(index.to_be_bytes())
                    .map_err(|_| tlog_tiles::Error::IndexesNotInTree)?
                    .ok_or(tlog_tiles::Error::IndexesNotInTree)?;
                let bytes: [u8; 32] = v
                    .as_ref()
                    .try_into()
                    .map_err(|_| tlog_tiles::Error::MalformedHash)?;
                Ok(Hash(bytes))
            })
            .collect()
    }
}

impl MerkleTree {
    /// Opens the tree stored in `db` (empty when there is none).
    pub fn open(db: &sled::Db) -> Result<MerkleTree, TlogError> {
        let tree = db.open_tree(TREE)?;
        let size = match tree.get(SIZE_KEY)? {
            Some(v) => <[u8; 8]>::try_from(v.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| TlogError::MissingHash { index: u64::MAX })?,
            None => 0,
        };
        let roots = if size == 0 {
            Vec::new()
        } else {
            // The complete subtrees of a tree of `size` leaves, as its root hash reads them.
            let indexes = tlog_tiles::sub_tree_index(0, size, Vec::new());
            Stored(&tree).read_hashes(&indexes)?
        };
        Ok(MerkleTree {
            tree,
            frontier: Mutex::new(Frontier { size, roots }),
        })
    }

    /// Drops the stored tree (`replay` rebuilds it).
    pub fn drop_in(db: &sled::Db) -> Result<(), sled::Error> {
        db.drop_tree(TREE).map(|_| ())
    }

    /// The number of leaves: the records `1..=size` are in the tree.
    pub fn size(&self) -> u64 {
        self.frontier
            .lock()
            .map(|f| f.size)
            .unwrap_or_else(|p| p.into_inner().size)
    }

    /// Appends the leaves of the records `first_seq, first_seq + 1, ..` whose blake3 hashes are
    /// `hashes`. Records already in the tree are skipped (a catch-up may overlap what the
    /// applier appended); a gap is an error.
    pub fn append(&self, first_seq: u64, hashes: &[[u8; 32]]) -> Result<(), TlogError> {
        let mut f = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
        let skip = f.size.saturating_add(1).saturating_sub(first_seq.max(1));
        if first_seq == 0 || (skip == 0 && first_seq != f.size + 1) {
            return Err(TlogError::Gap {
                size: f.size,
                first_seq,
            });
        }
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        if skip >= hashes.len() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let mut size = f.size;
        let mut roots = f.roots.clone();
        for h in &hashes[skip..] {
            let seq = size + 1;
            let mut node = leaf_hash(seq, h);
            batch.insert(
                &tlog_tiles::stored_hash_index(0, size).to_be_bytes(),
                &node.0[..],
            );
            // Each trailing one bit of the new leaf's index closes a complete subtree.
            let mut index = size;
            let mut level = 0u8;
            while index & 1 == 1 {
                let Some(left) = roots.pop() else {
                    return Err(TlogError::MissingHash { index: size });
                };
                node = tlog_tiles::node_hash(left, node);
                level += 1;
                index >>= 1;
                batch.insert(
                    &tlog_tiles::stored_hash_index(level, index).to_be_bytes(),
                    &node.0[..],
                );
            }
            roots.push(node);
            size += 1;
        }
        batch.insert(SIZE_KEY, &size.to_be_bytes());
        self.tree.apply_batch(batch)?;
        f.size = size;
        f.roots = roots;
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

    fn check_size(&self, size: u64, what: impl FnOnce() -> String) -> Result<(), TlogError> {
        let have = self.size();
        if size > have {
            return Err(TlogError::OutOfRange {
                size: have,
                what: what(),
            });
        }
        Ok(())
    }

    /// The root hash of the tree's first `size` leaves.
    pub fn root(&self, size: u64) -> Result<Hash, TlogError> {
        self.check_size(size, || format!("tree of size {size}"))?;
        Ok(tlog_tiles::tree_hash(size, &Stored(&self.tree))?)
    }

    /// The RFC 6962 audit path of leaf `index` in the tree of `size` leaves.
    pub fn inclusion(&self, index: u64, size: u64) -> Result<Vec<Hash>, TlogError> {
        if index >= size {
            return Err(TlogError::OutOfRange {
                size,
                what: format!("leaf {index}"),
            });
        }
        self.check_size(size, || format!("tree of size {size}"))?;
        Ok(tlog_tiles::prove_record(size, index, &Stored(&self.tree))?)
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
        self.check_size(to, || format!("tree of size {to}"))?;
        if from == 0 || from == to {
            return Ok(Vec::new());
        }
        Ok(tlog_tiles::prove_tree(to, from, &Stored(&self.tree))?)
    }

    /// The bytes of a hash tile (C2SP tlog-tiles) of the tree of `size` leaves: its hashes back
    /// to back. A tile beyond that tree, or wider than what the tree completes, is out of range.
    pub fn tile(&self, tile: &Tile, size: u64) -> Result<Vec<u8>, TlogError> {
        self.check_size(size, || format!("tree of size {size}"))?;
        let height = u32::from(tile.height());
        let level_shift = height * u32::from(tile.level());
        // The hashes of this tile's level the tree of `size` leaves completes.
        let complete = size.checked_shr(level_shift).unwrap_or(0);
        let start = tile.level_index().saturating_mul(1 << height);
        let end = start.saturating_add(u64::from(tile.width()));
        if tile.is_data() || tile.width() == 0 || end > complete {
            return Err(TlogError::OutOfRange {
                size,
                what: format!("tile {}", tile.path()),
            });
        }
        Ok(tile.read_data(&Stored(&self.tree))?)
    }

    /// Bytes the stored hashes take in sled (keys and values, without sled's overhead).
    pub fn stored_bytes(&self) -> u64 {
        self.tree.len() as u64 * (8 + 32)
    }
}

#[cfg(test)]
mod tests;
