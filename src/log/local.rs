//! The log of record on one node: the `log` tree itself (`--log sled`, the default).
//!
//! A group is stored as one atomic sled batch; with [`Durability::Fsync`] it is then made
//! durable before anyone is answered (sled's `flush()`, which on Linux ends in
//! `sync_file_range`, followed by a real `fdatasync` of sled's `db` file), with
//! [`Durability::BatchInterval`] a sidecar thread `fdatasync`s the file on a timer (a group
//! holding an erasure is made durable first in either mode: [`syncs`]). One sync
//! serves a whole group, so its cost is shared by every request in it. Nothing else writes the
//! `log` tree, so a group is never stored on another head than the one it was sealed on.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use auditmem_projections::Projections;
use tokio::sync::mpsc;

use super::appender::{
    Appender, AppenderThread, Chain, Driver, Durability, Failure, LogOfRecord, Msg, Sealed,
    StoreError, Stored,
};
use super::{LogError, LogReader};

/// Why the local log failed to store a group; the writer then refuses every write until a
/// restart re-reads the head (the batch may or may not be on disk).
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("log write failed: {0}")]
    Write(#[source] sled::Error),
    #[error("log flush failed: {0}")]
    Flush(#[source] sled::Error),
    #[error("syncing the new data keys failed: {0}")]
    Keys(auditmem_projections::seal::KeyError),
    #[error("log fdatasync failed: {0}")]
    Sync(#[source] std::io::Error),
}

/// The `log` tree as the log of record.
pub(crate) struct LocalLog {
    db: sled::Db,
    log: LogReader,
    /// A second handle on sled's `db` file: sled 0.34's own flush does not fdatasync it.
    db_file: File,
    durability: Durability,
    /// The keyring: keys created for the records of a group are made durable with it.
    keys: Arc<dyn auditmem_projections::seal::Keyring>,
}

/// Starts the appender with the `log` tree as the log of record.
pub(crate) fn start(
    db: sled::Db,
    data_dir: &Path,
    projections: Arc<Projections>,
    durability: Durability,
    min_free_bytes: u64,
) -> Result<(Appender, AppenderThread), LogError> {
    let db_file = File::open(data_dir.join("db"))?;
    let keys = projections.keys.clone();
    let syncer_keys = keys.clone();
    let (appender, thread) = Appender::launch(
        &db,
        data_dir,
        projections,
        min_free_bytes,
        Driver::own()?,
        None,
        |log, _head| {
            Ok(LocalLog {
                db: db.clone(),
                log,
                db_file,
                durability,
                keys,
            })
        },
    )?;
    if let Durability::BatchInterval(every) = durability {
        spawn_interval_syncer(data_dir, every, thread.queue(), syncer_keys)?;
    }
    Ok((appender, thread))
}

impl LogOfRecord for LocalLog {
    async fn next(&mut self, queue: &mut mpsc::Receiver<Msg>, _chain: &mut Chain) -> Option<Msg> {
        queue.recv().await
    }

    fn max_group_bytes(&self) -> usize {
        usize::MAX
    }

    fn deadline(&self, oldest: Instant) -> Instant {
        oldest
    }

    async fn ready(&mut self, _chain: &mut Chain, _deadline: Instant) {}

    async fn store(
        &mut self,
        sealed: &mut Sealed,
        _chain: &mut Chain,
        _deadline: Instant,
    ) -> Result<Stored, StoreError> {
        let started = Instant::now();
        let batch = std::mem::take(&mut sealed.chunks).into_batch();
        let sync = syncs(self.durability, sealed.erasure);
        self.log
            .tree()
            .apply_batch(batch)
            .map_err(LocalError::Write)
            .and_then(|()| {
                if !sync {
                    return Ok(());
                }
                // The group's new keys first: a record is never durable before its keys are
                // unless sled's own background flush got there in between, and then the write
                // was not acknowledged (it reads as erased).
                if self.keys.unsynced() {
                    self.keys.sync().map_err(LocalError::Keys)?;
                }
                self.db.flush().map_err(LocalError::Flush)?;
                self.db_file.sync_data().map_err(LocalError::Sync)
            })
            .map_err(|e| StoreError::Failed(Failure::log(e)))?;
        Ok(Stored::Appended {
            micros: started.elapsed().as_micros() as u64,
        })
    }

    async fn idle(&mut self) {}

    fn close(&mut self) {
        let _ = self.keys.sync();
        let _ = self.db.flush();
        let _ = self.db_file.sync_data();
    }
}

/// Whether a group is made durable before it is folded: always with [`Durability::Fsync`];
/// with [`Durability::BatchInterval`] when it holds an erasure, because folding it destroys
/// keys for good, and an erasure lost with the last interval (a power loss) would leave its
/// subject's keys gone with no record in the log that they were erased, nor why.
fn syncs(durability: Durability, erasure: bool) -> bool {
    match durability {
        Durability::Fsync => true,
        Durability::BatchInterval(_) => erasure,
    }
}

/// In batch-interval mode a sidecar thread makes sled's file durable on a timer; it ends with
/// the writer.
fn spawn_interval_syncer(
    data_dir: &Path,
    every: Duration,
    queue: mpsc::Sender<Msg>,
    keys: Arc<dyn auditmem_projections::seal::Keyring>,
) -> std::io::Result<()> {
    let file = File::open(data_dir.join("db"))?;
    std::thread::Builder::new()
        .name("log-syncer".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            if let Err(e) = keys.sync() {
                tracing::error!(error = %e, "periodic sync of new data keys failed");
            }
            if queue.is_closed() {
                let _ = file.sync_data();
                return;
            }
            if let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "periodic fdatasync failed");
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erasure_is_synced_before_it_is_folded_in_either_mode() {
        let interval = Durability::BatchInterval(Duration::from_millis(10));
        assert!(syncs(Durability::Fsync, false));
        assert!(syncs(Durability::Fsync, true));
        assert!(!syncs(interval, false));
        assert!(syncs(interval, true));
    }
}
