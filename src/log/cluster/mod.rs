//! The log of record on a NATS JetStream stream (`--log nats://...`, docs/SCALING.md), and this
//! node's `log` tree its mirror.
//!
//! - [`stream`]: what the writer needs of a stream ([`LogStream`]): publish with an expected
//!   last sequence and a message id, follow from a sequence, the last sequence, who published.
//! - [`nats`]: the JetStream client that implements it ([`NatsLog`]), the stream's creation
//!   and its genesis message.
//! - [`stream_log`]: the writer's log of record over a stream ([`StreamLog`]): publish on the
//!   head a group was sealed on, fold the other nodes' messages, wait for the turn, catch up
//!   after a lost race.
//! - [`fold`]: a stream message's records checked against the chain they must continue.
//! - [`mirror`]: the `log` tree as the stream's copy, and the position it folded to.
//! - [`turns`]: the turn order, so that under load the nodes do not race for each sequence.
//! - [`outbox`]: audit entries of reads answered while the stream took no writes.
//!
//! What an acknowledgement means here: a write is answered only after JetStream acknowledged
//! its message, i.e. the stream's leader and a quorum of its replicas (R3: 2 of 3) appended it,
//! and after this node folded it into its mirror and projections. It survives the crash or
//! loss of any minority of the NATS servers and of any auditmem node (a node's mirror is not
//! synced: it is folded again from the stream). JetStream writes through the page cache and
//! syncs on its own timer (2 minutes by default; `sync_interval: always` syncs every write), so
//! a simultaneous power loss of a quorum of servers can lose acknowledged writes not yet synced
//! (docs/OPERATIONS.md, "What an acknowledgement means").

pub mod fold;
pub mod mirror;
pub mod nats;
mod outbox;
pub mod stream;
pub mod stream_log;
pub mod turns;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::Projections;

use super::appender::{Appender, AppenderThread, Driver};
use super::LogError;

pub use mirror::mirror_position;
pub use nats::{NatsConfig, NatsLog};
pub use outbox::Outbox;
pub(crate) use stream::LogStream;
pub(crate) use stream_log::StreamLog;

/// The cluster's log, for [`Appender::start_on`]. See the module's documentation for what an
/// acknowledged write has survived.
pub struct ClusterLog {
    pub log: NatsLog,
    /// The runtime the NATS client runs on; the writer's thread runs the writer on it.
    pub handle: tokio::runtime::Handle,
}

/// Starts the appender with the cluster's stream as the log of record.
pub(crate) fn start(
    db: sled::Db,
    data_dir: &Path,
    projections: Arc<Projections>,
    min_free_bytes: u64,
    cluster: ClusterLog,
) -> Result<(Appender, AppenderThread), LogError> {
    let timeout = cluster.log.config.timeout;
    start_with(
        db,
        data_dir,
        projections,
        min_free_bytes,
        cluster.log,
        timeout,
        cluster.handle,
    )
}

/// Like [`start`], over any [`LogStream`] (the tests' in-memory one among them); a write waits
/// for the stream at most `timeout`.
pub(crate) fn start_with<S: LogStream>(
    db: sled::Db,
    data_dir: &Path,
    projections: Arc<Projections>,
    min_free_bytes: u64,
    stream: S,
    timeout: Duration,
    handle: tokio::runtime::Handle,
) -> Result<(Appender, AppenderThread), LogError> {
    let outbox = Outbox::open(&db)?;
    Appender::launch(
        &db,
        data_dir,
        projections,
        min_free_bytes,
        Driver::On(handle),
        Some(outbox),
        |log, head| {
            let mirror = mirror::Mirror::open(&db, log, head)?;
            Ok(StreamLog::new(stream, mirror, timeout))
        },
    )
}
