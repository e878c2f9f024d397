//! The mirror: this node's copy of the stream, the `log` tree in the format of one node, and
//! the stream sequence of the last message folded into it (tree `cluster`, key `stream_seq`).
//!
//! Records are written before the position: after a crash between the two, the node folds the
//! message again and finds its records in the tree already (they are compared and skipped).
//! Nothing here is synced: the stream is the durable copy, and a mirror that lost its tail
//! folds it again.

use crate::log::record;
use crate::log::{Head, LogError, LogReader};

/// The tree holding the stream sequence of the last message folded into the mirror.
const CLUSTER_TREE: &str = "cluster";
const POSITION_KEY: &[u8] = b"stream_seq";

/// The stream sequence of the last message a data dir's mirror folded (0: none).
pub fn mirror_position(db: &sled::Db) -> Result<u64, LogError> {
    let tree = db.open_tree(CLUSTER_TREE)?;
    Ok(tree
        .get(POSITION_KEY)?
        .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        .map_or(0, u64::from_be_bytes))
}

/// Why a data dir cannot be a mirror of the stream.
#[derive(Debug, thiserror::Error)]
#[error("this data dir holds a log of {records} records that is not a mirror of the stream: start a cluster node on an empty data dir")]
pub struct NotAMirror {
    pub records: u64,
}

pub(crate) struct Mirror {
    log: LogReader,
    meta: sled::Tree,
    /// The stream sequence of the last message folded.
    position: u64,
}

impl Mirror {
    /// The mirror of `db`, whose `log` tree is `log` with head `head`. A data dir with records
    /// and no position holds a single node's log, not a mirror: refused.
    pub(crate) fn open(db: &sled::Db, log: LogReader, head: Head) -> Result<Mirror, LogError> {
        let position = mirror_position(db)?;
        if position == 0 && head.seq > 0 {
            return Err(LogError::Io(std::io::Error::other(NotAMirror {
                records: head.seq,
            })));
        }
        Ok(Mirror {
            log,
            meta: db.open_tree(CLUSTER_TREE)?,
            position,
        })
    }

    pub(crate) fn position(&self) -> u64 {
        self.position
    }

    pub(crate) fn log(&self) -> &LogReader {
        &self.log
    }

    /// Writes stream message `stream_seq`'s records (the `log` tree's values, each with its
    /// key's seq: [`record::Chunker::finish`]) and moves the position to it.
    pub(crate) fn write(
        &mut self,
        values: Vec<(u64, Vec<u8>)>,
        stream_seq: u64,
    ) -> Result<(), sled::Error> {
        let mut batch = sled::Batch::default();
        for (first, value) in values {
            batch.insert(&record::seq_key(first), value);
        }
        self.log.tree().apply_batch(batch)?;
        self.meta.insert(POSITION_KEY, &stream_seq.to_be_bytes())?;
        self.position = stream_seq;
        Ok(())
    }

    /// Whether the mirror holds the record sealed as `head` (at or below `chain`, the chain's
    /// head).
    pub(crate) fn holds(&self, head: &Head, chain: Head) -> bool {
        head.seq <= chain.seq
            && matches!(self.log.get(head.seq), Ok(Some(r)) if r.hash == head.hash)
    }

    pub(crate) fn flush(&self) {
        let _ = self.log.tree().flush();
    }
}
