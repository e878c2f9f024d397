//! The projection contract: a read model folded from the log.
//!
//! Invariants every projection keeps:
//! - Its whole state lives in its own sled tree, together with a checkpoint (the last applied
//!   seq) written in the same atomic sled batch as the state it covers, so a crash never
//!   leaves state and checkpoint disagreeing.
//! - `apply` skips events at or below the checkpoint, so feeding it again is harmless.
//! - `apply` holds no business logic: deciding happened before the event was appended.

use crate::event::Event;

/// Key of the checkpoint inside a projection's tree; state keys never start with 0x00.
pub const CHECKPOINT_KEY: &[u8] = b"\x00checkpoint";

/// One event as it came out of the log.
#[derive(Clone, Copy, Debug)]
pub struct Applied<'a> {
    pub seq: u64,
    pub ts_micros: i64,
    pub event: &'a Event,
    /// The event's state-independent work, when a caller did it ahead (on every core).
    pub prepared: Option<&'a Prepared>,
}

#[cfg(test)]
impl<'a> Applied<'a> {
    /// An event at `seq`, nothing prepared ahead (the projection does all the work itself).
    pub(crate) fn at(seq: u64, event: &'a Event) -> Applied<'a> {
        Applied {
            seq,
            ts_micros: 0,
            event,
            prepared: None,
        }
    }

    /// Events as the log hands them over: seqs 1, 2, 3 ... in order.
    pub(crate) fn in_order(events: &'a [Event]) -> Vec<Applied<'a>> {
        (1..)
            .zip(events)
            .map(|(seq, e)| Applied::at(seq, e))
            .collect()
    }
}

/// The part of folding an event that depends on nothing before it. Replay computes it on
/// every core while decoding, so the sequential fold only links; without it a projection
/// computes the same itself. [`crate::Projections::prepare`] fills it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prepared {
    /// For an audit entry: its canonical bytes (what the tenant chain hashes) and action key.
    pub audit: Option<(Vec<u8>, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("storage: {0}")]
    Storage(#[from] sled::Error),
    #[error("corrupt projection state in {tree}: {what}")]
    Corrupt { tree: &'static str, what: String },
    /// The file a large vector table keeps its rows in (rebuilt at every start).
    #[error("vector rows file: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T> = std::result::Result<T, ProjectionError>;

pub trait Projection: Send + Sync {
    /// Name of the sled tree holding this projection.
    fn name(&self) -> &'static str;
    /// The sled tree holding this projection's state and checkpoint.
    fn tree(&self) -> &sled::Tree;
    /// Last applied seq (0 before any).
    fn checkpoint(&self) -> Result<u64> {
        read_checkpoint(self.tree(), self.name())
    }
    /// Records that every event up to `seq` has been applied. `apply` leaves the checkpoint
    /// behind while it only sees events that change nothing here (see `fold_new`); a caller
    /// that knows everything up to `seq` was applied moves it up so the next start has nothing
    /// to catch up.
    fn settle(&self, seq: u64) -> Result<()> {
        if self.checkpoint()? < seq {
            self.tree().insert(CHECKPOINT_KEY, &seq.to_be_bytes())?;
        }
        Ok(())
    }
    /// Folds `events` (ascending seq) into the state; events at or below the checkpoint are skipped.
    fn apply(&self, events: &[Applied<'_>]) -> Result<()>;
    /// Forgets every piece of state, checkpoint included (replay starts from nothing).
    fn reset(&self) -> Result<()>;
}

pub(crate) fn read_checkpoint(tree: &sled::Tree, name: &'static str) -> Result<u64> {
    match tree.get(CHECKPOINT_KEY)? {
        None => Ok(0),
        Some(v) => {
            let bytes: [u8; 8] = v
                .as_ref()
                .try_into()
                .map_err(|_| ProjectionError::Corrupt {
                    tree: name,
                    what: "checkpoint is not 8 bytes".into(),
                })?;
            Ok(u64::from_be_bytes(bytes))
        }
    }
}

/// Encodes a signed time so that byte order equals numeric order.
pub fn time_key(micros: i64) -> [u8; 8] {
    ((micros as u64) ^ (1u64 << 63)).to_be_bytes()
}

pub fn time_from_key(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1u64 << 63)) as i64
}

pub(crate) fn corrupt(tree: &'static str, what: impl Into<String>) -> ProjectionError {
    ProjectionError::Corrupt {
        tree,
        what: what.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_sort_like_times() {
        let times = [i64::MIN, -5, -1, 0, 1, 1_700_000_000_000_000, i64::MAX];
        for w in times.windows(2) {
            assert!(time_key(w[0]) < time_key(w[1]));
            assert_eq!(time_from_key(time_key(w[0])), w[0]);
        }
    }
}
