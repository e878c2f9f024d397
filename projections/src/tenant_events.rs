//! The tenant events index: per tenant, the log positions of its webhook events other than
//! audit entries (memories created, updated, deleted, superseded or expired; subjects erased;
//! exports completed), in log order. A webhook endpoint finds its next event from it at the
//! cost of its own tenant's events, however many records other tenants wrote in between; its
//! tenant's audit entries are in the audit index's own log-order list.
//!
//! These events are records of their own, not the audit entry's: a request's memory event is
//! the record before its entry, and the sweeper's expiries and the completions of erasures and
//! exports have no entry of their tenant at all. So they are listed here, not found from the
//! audit index.
//!
//! Tree `proj_tenant_events`: `g|first_seq` → the positions one group commit folded, each
//! [`POSITION_LEN`] bytes (seq u64 big-endian, tenant id). In memory a [`LogOrder`] per
//! tenant, rebuilt from the blocks at open; opened with a directory, its sealed blocks go to an
//! unlinked file there, as the audit index's do.
//!
//! Invariants: the tree (blocks and checkpoint in one batch) is committed before memory takes
//! the batch, so memory holds exactly what the blocks hold; `apply` is the only writer; every
//! event up to the log's head is listed (the applier folds a group before the head moves).

use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard};

use uuid::Uuid;

use crate::event::Event;
use crate::log_order::{reached, LogOrder};
use crate::overlay::{fold_new, prefixed};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::sorted_index::BlockFile;
use crate::FastMap;

pub const TREE: &str = "proj_tenant_events";
/// Bytes of one stored position: its seq, then its tenant.
pub const POSITION_LEN: usize = 24;

/// The tenant of `event` when it is a webhook event other than an audit entry: the events this
/// index lists. The webhook deliverer names its event types from the same events, so an event
/// it sends is never one left out of here.
pub fn tenant_of(event: &Event) -> Option<Uuid> {
    Some(match event {
        Event::MemoryCreated(e) => e.tenant_id,
        Event::MemoryUpdated(e) => e.tenant_id,
        Event::MemoryDeleted(e) => e.tenant_id,
        Event::MemoriesDeletedByType(e) => e.tenant_id,
        Event::MemoriesDeleted(e) => e.tenant_id,
        Event::MemorySuperseded(e) => e.tenant_id,
        Event::MemoriesExpired(e) => e.tenant_id,
        Event::SubjectsErased(e) => e.tenant_id,
        Event::ExportCompleted(e) => e.tenant_id,
        _ => return None,
    })
}

struct State {
    tenants: FastMap<Uuid, LogOrder>,
    /// Where the lists' sealed blocks go; none: on the heap.
    file: Option<BlockFile>,
}

impl State {
    fn new(file: Option<BlockFile>) -> Self {
        Self {
            tenants: FastMap::default(),
            file,
        }
    }

    /// An error is the block file's.
    fn insert(&mut self, positions: &[(u64, Uuid)]) -> std::io::Result<()> {
        for &(seq, tenant) in positions {
            let file = &self.file;
            self.tenants
                .entry(tenant)
                .or_insert_with(|| LogOrder::with_file(file.clone()))
                .push(seq)?;
        }
        Ok(())
    }
}

/// [`TenantEvents`]' in-memory part, detached from its tree.
pub struct Detached(State);

/// The tenant events projection: tree `proj_tenant_events` and the lists folded from it.
pub struct TenantEvents {
    tree: sled::Tree,
    state: RwLock<State>,
}

fn parse_block(bytes: &[u8]) -> Result<Vec<(u64, Uuid)>> {
    if !bytes.len().is_multiple_of(POSITION_LEN) {
        return Err(corrupt(
            TREE,
            format!(
                "a block of {} bytes is no whole number of positions",
                bytes.len()
            ),
        ));
    }
    Ok(bytes
        .chunks_exact(POSITION_LEN)
        .map(|p| {
            let mut seq = [0u8; 8];
            seq.copy_from_slice(&p[..8]);
            let mut tenant = [0u8; 16];
            tenant.copy_from_slice(&p[8..]);
            (u64::from_be_bytes(seq), Uuid::from_bytes(tenant))
        })
        .collect())
}

impl TenantEvents {
    /// Opens the index with every list on the heap.
    pub fn open(db: &sled::Db) -> Result<Self> {
        Self::open_with(db, None)
    }

    /// Opens the index writing its sealed blocks to an unlinked file in `dir` (the service's
    /// data dir).
    pub fn open_in(db: &sled::Db, dir: &Path) -> Result<Self> {
        Self::open_with(db, Some(dir))
    }

    fn open_with(db: &sled::Db, dir: Option<&Path>) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut state = State::new(dir.map(BlockFile::in_dir));
        for kv in tree.scan_prefix([b'g']) {
            let (_, v) = kv?;
            state.insert(&parse_block(&v)?)?;
        }
        Ok(Self {
            tree,
            state: RwLock::new(state),
        })
    }

    /// The in-memory lists without the tree handle (see `Projections::detach`).
    pub fn detach(self) -> Detached {
        Detached(self.state.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn attach(db: &sled::Db, d: Detached) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
            state: RwLock::new(d.0),
        })
    }

    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The positions of `tenant_id`'s listed events with `after < seq <= upto`, in log order,
    /// at most `limit`, and how far that read: every listed position of the tenant up to it
    /// is in the answer, so a caller resumes after it. Costs the tenant's own positions.
    pub fn tenant_after(
        &self,
        tenant_id: &Uuid,
        after: u64,
        upto: u64,
        limit: usize,
    ) -> Result<(Vec<u64>, u64)> {
        if upto <= after {
            return Ok((Vec::new(), after));
        }
        let limit = limit.max(1);
        let seqs = match self.state().tenants.get(tenant_id) {
            Some(l) => l.after(after, upto, limit)?,
            None => Vec::new(),
        };
        let reached = reached(&seqs, upto, limit);
        Ok((seqs, reached))
    }

    /// Positions listed, every tenant's.
    pub fn len(&self) -> usize {
        self.state().tenants.values().map(LogOrder::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the lists hold on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.state()
            .tenants
            .values()
            .map(LogOrder::heap_bytes)
            .sum()
    }

    /// Bytes written to the block file of sealed list blocks (0 without one).
    pub fn file_bytes(&self) -> u64 {
        self.state().file.as_ref().map_or(0, BlockFile::len)
    }
}

impl Projection for TenantEvents {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        let mut positions: Vec<(u64, Uuid)> = Vec::new();
        let folded = fold_new(&self.tree, TREE, events, |_, a| {
            if let Some(tenant) = tenant_of(a.event) {
                positions.push((a.seq, tenant));
            }
            Ok(())
        })?;
        let Some((mut ov, last)) = folded else {
            return Ok(());
        };
        // One block a group commit: sled costs about as much per key as per kilobyte.
        if let Some(&(first, _)) = positions.first() {
            let mut bytes = Vec::with_capacity(positions.len() * POSITION_LEN);
            for (seq, tenant) in &positions {
                bytes.extend_from_slice(&seq.to_be_bytes());
                bytes.extend_from_slice(tenant.as_bytes());
            }
            ov.insert(prefixed(b'g', &[&first.to_be_bytes()]), bytes);
        }
        ov.commit(last)?;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        state.insert(&positions)?;
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        // A new block file: the old one's blocks are all forgotten.
        *state = State::new(state.file.as_ref().map(BlockFile::renewed));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{MemoriesExpired, MemoryDeleted, MemorySuperseded, WebhookLeaseTaken};

    /// Records in the log: each tenant lists more than a block (2,048) of them.
    const N: u64 = 12_600;

    /// Given 12,600 records: tenant A's memory deletions and supersessions (every third), B's
    /// expiries (every third), and records of no tenant's webhook events between them.
    fn events(a: Uuid, b: Uuid) -> Vec<Event> {
        (0..N as u128)
            .map(|i| match i % 6 {
                0 => Event::MemoryDeleted(MemoryDeleted {
                    memory_id: Uuid::from_u128(i),
                    tenant_id: a,
                    deleted_at: 1,
                }),
                3 => Event::MemorySuperseded(MemorySuperseded {
                    memory_id: Uuid::from_u128(i),
                    tenant_id: a,
                    superseded_by: Uuid::from_u128(i + 1),
                    superseded_at: 1,
                }),
                1 | 4 => Event::MemoriesExpired(MemoriesExpired {
                    tenant_id: b,
                    memory_ids: vec![Uuid::from_u128(i)],
                    expired_at: 1,
                }),
                _ => Event::WebhookLeaseTaken(WebhookLeaseTaken {
                    node_id: Uuid::from_u128(i),
                    until: 2,
                    at: 1,
                }),
            })
            .collect()
    }

    /// Every position of `tenant` the index lists.
    fn listed(ix: &TenantEvents, tenant: &Uuid) -> Vec<u64> {
        let (seqs, reached) = ix.tenant_after(tenant, 0, u64::MAX, usize::MAX).unwrap();
        assert_eq!(reached, u64::MAX);
        seqs
    }

    #[test]
    fn given_events_then_each_tenant_lists_its_positions_through_reopen_detach_and_replay() {
        let (a, b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
        let events = events(a, b);
        let applied = Applied::in_order(&events);
        // The fold's answer: seqs are 1-based, the i-th event at seq i + 1.
        let of = |r: &[u64]| -> Vec<u64> {
            (0..N)
                .filter(|i| r.contains(&(i % 6)))
                .map(|i| i + 1)
                .collect()
        };
        let (want_a, want_b) = (of(&[0, 3]), of(&[1, 4]));
        let (dir, spill) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let db = sled::open(dir.path()).unwrap();
        let ix = TenantEvents::open_in(&db, spill.path()).unwrap();
        // When applied in group commits of 100, then again (at or below the checkpoint),
        for batch in applied.chunks(100) {
            ix.apply(batch).unwrap();
        }
        ix.apply(&applied).unwrap();
        // then each tenant's list is exactly its positions, sealed blocks in the file,
        assert_eq!(listed(&ix, &a), want_a);
        assert_eq!(listed(&ix, &b), want_b);
        assert_eq!(ix.len(), 8_400);
        assert!(ix.file_bytes() > 0);
        assert_eq!(
            ix.tenant_after(&Uuid::from_u128(0xc), 0, N, 10).unwrap(),
            (vec![], N)
        );
        // a read past a position answers up to its bound and limit, and how far it went,
        assert_eq!(
            ix.tenant_after(&a, 3_000, 3_020, 10).unwrap(),
            (vec![3_001, 3_004, 3_007, 3_010, 3_013, 3_016, 3_019], 3_020)
        );
        assert_eq!(
            ix.tenant_after(&a, 3_000, N, 2).unwrap(),
            (vec![3_001, 3_004], 3_004)
        );
        assert_eq!(
            ix.tenant_after(&a, 3_000, 3_000, 2).unwrap(),
            (vec![], 3_000)
        );
        // the same through a detach and an attach,
        let ix = TenantEvents::attach(&db, ix.detach()).unwrap();
        assert_eq!(listed(&ix, &a), want_a);
        // and after the database is opened again (rebuilt from the blocks),
        drop(ix);
        drop(db);
        let db = crate::reopen_db(dir.path());
        let ix = TenantEvents::open(&db).unwrap();
        assert_eq!(listed(&ix, &a), want_a);
        assert_eq!(listed(&ix, &b), want_b);
        assert_eq!(ix.checkpoint().unwrap(), N);
        // and after a replay, in one batch.
        ix.reset().unwrap();
        assert!(ix.is_empty());
        ix.apply(&applied).unwrap();
        assert_eq!(listed(&ix, &a), want_a);
        assert_eq!(listed(&ix, &b), want_b);
    }
}
