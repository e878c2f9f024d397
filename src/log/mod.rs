//! The append-only, hash-chained event log and the tools around it.
//!
//! - [`record`]: the record format and its hash.
//! - [`appender`]: the only writer of the `log` tree; one thread, group commit.
//! - [`verify`]: proves a sequence of stored records is an unbroken chain.
//! - [`checkpoint`]: signed heads that anchor the chain outside the database.
//! - [`catch_up`]: folds records into the projections.

pub mod appender;
pub mod catch_up;
pub mod checkpoint;
pub mod record;
pub mod verify;

use std::path::Path;

use auditmem_projections::{Event, Projections};

pub use record::{Record, RecordRef};

pub const LOG_TREE: &str = "log";

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("storage: {0}")]
    Storage(#[from] sled::Error),
    #[error("record {seq} is undecodable: {why}")]
    Undecodable { seq: u64, why: String },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Chain head: the last record's seq and hash (seq 0 and zeros for an empty log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Head {
    pub seq: u64,
    pub hash: [u8; 32],
}

/// Read access to the log tree.
#[derive(Clone)]
pub struct LogReader {
    tree: sled::Tree,
}

impl LogReader {
    pub fn open(db: &sled::Db) -> Result<Self, LogError> {
        Ok(Self {
            tree: db.open_tree(LOG_TREE)?,
        })
    }

    pub fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    pub fn head(&self) -> Result<Head, LogError> {
        match self.tree.last()? {
            None => Ok(Head::default()),
            Some((k, v)) => {
                let seq = record::seq_from_key(&k).unwrap_or(0);
                let r = RecordRef::decode(&v).map_err(|e| LogError::Undecodable {
                    seq,
                    why: e.to_string(),
                })?;
                let hash: [u8; 32] = r.hash.try_into().map_err(|_| LogError::Undecodable {
                    seq,
                    why: "hash is not 32 bytes".into(),
                })?;
                Ok(Head { seq: r.seq, hash })
            }
        }
    }

    pub fn get(&self, seq: u64) -> Result<Option<Record>, LogError> {
        match self.tree.get(record::seq_key(seq))? {
            None => Ok(None),
            Some(v) => Record::decode(&v)
                .map(Some)
                .map_err(|e| LogError::Undecodable {
                    seq,
                    why: e.to_string(),
                }),
        }
    }

    /// The vector (f32 little-endian bytes) carried by the memory event at `seq`: the memories
    /// projection keeps only that seq and reads the vector back from here at open.
    pub fn vector_at(&self, seq: u64) -> Result<Option<Vec<u8>>, LogError> {
        Ok(match self.event(seq)? {
            Some((_, Event::MemoryCreated(e))) => Some(e.vector),
            Some((_, Event::MemoryUpdated(e))) => e.vector,
            _ => None,
        })
    }

    /// The event stored at `seq`.
    pub fn event(&self, seq: u64) -> Result<Option<(Record, Event)>, LogError> {
        match self.get(seq)? {
            None => Ok(None),
            Some(r) => {
                let e = Event::decode(&r.event).map_err(|e| LogError::Undecodable {
                    seq,
                    why: e.to_string(),
                })?;
                Ok(Some((r, e)))
            }
        }
    }

    /// Raw stored values from `from` on, in key order.
    pub fn raw_from(&self, from: u64) -> impl Iterator<Item = Result<(u64, sled::IVec), LogError>> {
        self.tree.range(record::seq_key(from)..).map(|kv| {
            let (k, v) = kv?;
            Ok((record::seq_from_key(&k).unwrap_or(0), v))
        })
    }
}

/// Opens the sled database of a data dir with the settings the service uses.
/// Opens every projection over `db`, the memories projection reading vectors from its log.
pub fn open_projections(db: &sled::Db) -> anyhow::Result<Projections> {
    let log = LogReader::open(db)?;
    let vectors = |seq: u64| log.vector_at(seq).map_err(|e| e.to_string());
    Ok(Projections::open(db, &vectors)?)
}

pub fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    open_db_with_cache(dir, 256 * 1024 * 1024)
}

/// Like [`open_db`] with another page cache size: one-off scans (replay) want the whole log
/// in cache so sled never re-reads a page.
pub fn open_db_with_cache(dir: &Path, cache_bytes: u64) -> Result<sled::Db, sled::Error> {
    sled::Config::new()
        .path(dir)
        // The appender decides durability itself (flush + fdatasync per group); sled's own
        // background flusher stays as a backstop.
        .flush_every_ms(Some(500))
        .cache_capacity(cache_bytes)
        .open()
}
