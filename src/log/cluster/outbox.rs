//! The outbox: audit entries of requests answered while the stream could not take writes
//! (a loss of quorum), kept on this node's disk and appended once it can again.
//!
//! Tree `cluster_outbox`: a time-ordered key (UUID v7) → an event's bytes. An entry leaves the
//! outbox only after its append was acknowledged; an entry that no longer decodes is dropped
//! with an error in the log.

use std::time::Duration;

use auditmem_projections::Event;

use crate::log::appender::{AppendError, Appender};

const OUTBOX_TREE: &str = "cluster_outbox";
/// How many entries one append takes.
const DRAIN_BATCH: usize = 256;

#[derive(Clone)]
pub struct Outbox {
    tree: sled::Tree,
}

impl Outbox {
    pub(crate) fn open(db: &sled::Db) -> Result<Outbox, sled::Error> {
        Ok(Outbox {
            tree: db.open_tree(OUTBOX_TREE)?,
        })
    }

    /// Keeps `event` until [`drain`](Self::drain) appends it.
    pub(crate) fn defer(&self, event: &Event) -> Result<(), AppendError> {
        let bytes = event
            .encode()
            .map_err(|e| AppendError::Encode(e.to_string()))?;
        // Time-ordered keys: the entries join the log in the order they were answered.
        let key = uuid::Uuid::now_v7();
        self.tree
            .insert(key.as_bytes(), bytes)
            .and_then(|_| self.tree.flush())
            .map(|_| ())
            .map_err(|e| AppendError::Storage(e.to_string()))
    }

    /// How many entries wait to be appended. It walks the tree: the outbox is empty but for a
    /// loss of quorum, and `GET /metrics` is what asks.
    pub(crate) fn len(&self) -> usize {
        self.tree.len()
    }

    /// Appends the deferred entries through `appender`, oldest first, whenever the cluster
    /// takes writes; ends when the appender stops.
    pub(crate) async fn drain(&self, appender: Appender) {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if appender.closed() {
                return;
            }
            let mut keys = Vec::new();
            let mut events = Vec::new();
            for kv in self.tree.iter().take(DRAIN_BATCH) {
                let Ok((k, v)) = kv else { break };
                match Event::decode(&v) {
                    Ok(e) => {
                        keys.push(k);
                        events.push(e);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "an undecodable deferred audit entry; dropped");
                        let _ = self.tree.remove(k);
                    }
                }
            }
            if events.is_empty() {
                continue;
            }
            let n = events.len();
            match appender.append(events).await {
                Ok(_) => {
                    for k in keys {
                        let _ = self.tree.remove(k);
                    }
                    let _ = self.tree.flush_async().await;
                    tracing::info!(entries = n, "deferred audit entries appended");
                }
                Err(e) => {
                    tracing::debug!(error = %e, "deferred audit entries wait for the cluster");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}
