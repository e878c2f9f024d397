//! The audit index: which audit entries a tenant has, by time and by action, and the
//! per-tenant hash chain over them.
//!
//! Tree `proj_audit`:
//! - `g|first_seq` → a block of up to [`BLOCK_REFS`] fixed-size [`AuditRef`]s in seq order
//!   (audit id, seq of the log record holding the entry, tenant, created_at, action key,
//!   chain position, chain hash, previous chain hash);
//!
//! Chain heads (hash of a tenant's newest entry, entry count) are not stored apart: the newest
//! ref of each tenant already holds them, so they are rebuilt with the in-memory index at open
//! and a group commit writes one block and a checkpoint, not a key per tenant as well.
//!
//! Refs are written a block per group commit rather than a key per entry: sled costs about as
//! much per key as per kilobyte, so this keeps an audit event at about one log insert and a
//! fraction of a projection insert (replay and append throughput depend on it).
//!
//! The entry itself is read from the log record at `seq`, never copied. In memory: per tenant
//! sorted `(created_at, seq)` indexes (all entries, and per action), rebuilt from the blocks at
//! open; they answer `total` and any page offset by rank, without scanning. A third one per
//! tenant holds its seqs in log order, for reading its entries after a log position. Opened with a
//! directory (the service's data dir), their sealed blocks go to an unlinked file there and
//! memory holds a summary per 2,048 pairs (see `sorted_index`), so what the index keeps in
//! memory stops growing with the log.
//!
//! Audit id → ref is not a map of every id (40 bytes an entry, the largest part of the index
//! and growing with the log without bound). Audit ids are UUIDv7, minted just before their
//! append, so the millisecond leading an id places it among the blocks: in memory are the
//! ids of the newest [`RECENT_IDS`] entries, and for older ones a span per run of about
//! [`BLOCK_REFS`] entries giving the range of their ids' milliseconds. An older id is found by
//! reading the runs whose range holds its millisecond (normally one). Ids of any other layout
//! are still found, as the ranges are taken from the ids themselves; they are only slower.
//!
//! - `refs`: the stored ref and block format, and the reads that go to the tree;
//! - `state`: the in-memory per-tenant indexes, chain heads and id window (`IndexState`);
//! - `apply`: the [`Projection`](crate::projection::Projection) impl, chaining new entries;
//! - here: [`AuditIndex`] and its queries.

use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard};

use uuid::Uuid;

use crate::projection::Result;
use crate::sorted_index::{BlockFile, Key, SortedIndex};

mod apply;
mod refs;
mod state;
#[cfg(test)]
mod tests;

pub use refs::AuditRef;
pub use state::{action_key, RECENT_IDS};

use refs::parse_block;
use state::IndexState;

pub const TREE: &str = "proj_audit";
/// Refs per stored block: small enough that reading one ref reads at most 32 KiB.
pub const BLOCK_REFS: usize = 256;

/// A page of the audit index: positions are newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    pub total: usize,
    pub items: Vec<Key>,
}

/// A filter over one tenant's entries; times inclusive, micros.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    pub tenant_id: Uuid,
    pub action: Option<&'a str>,
    pub from: i64,
    pub to: i64,
}

/// [`AuditIndex`]'s in-memory part, detached from its tree.
pub struct Detached(IndexState);

/// The audit index projection: tree `proj_audit` and the in-memory index folded from it.
pub struct AuditIndex {
    tree: sled::Tree,
    state: RwLock<IndexState>,
}

impl AuditIndex {
    /// Opens the index with every pair on the heap.
    pub fn open(db: &sled::Db) -> Result<Self> {
        Self::open_with(db, RECENT_IDS, None)
    }

    /// Opens the index writing its sealed blocks to an unlinked file in `dir` (the service's
    /// data dir).
    pub fn open_in(db: &sled::Db, dir: &Path) -> Result<Self> {
        Self::open_with(db, RECENT_IDS, Some(dir))
    }

    /// `open` with a window of `recent` ids in memory (tests use a small one to reach the
    /// stored runs).
    pub fn open_with_recent(db: &sled::Db, recent: usize) -> Result<Self> {
        Self::open_with(db, recent, None)
    }

    fn open_with(db: &sled::Db, recent: usize, dir: Option<&Path>) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut state = IndexState::new(recent, dir.map(BlockFile::in_dir));
        for kv in tree.scan_prefix([b'g']) {
            let (_, v) = kv?;
            state.insert_block(&parse_block(&v)?)?;
        }
        Ok(Self {
            tree,
            state: RwLock::new(state),
        })
    }

    /// The in-memory index without the tree handle (see `Projections::detach`).
    pub fn detach(self) -> Detached {
        Detached(self.state.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn attach(db: &sled::Db, d: Detached) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
            state: RwLock::new(d.0),
        })
    }

    fn state(&self) -> RwLockReadGuard<'_, IndexState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, audit_id: &Uuid) -> Result<Option<AuditRef>> {
        let (recent, runs) = {
            let state = self.state();
            (
                state.recent.get(audit_id).copied(),
                state.older_runs(audit_id),
            )
        };
        match recent {
            Some(seq) => self.at_seq(seq),
            None => self.find_stored(audit_id, &runs),
        }
    }

    /// Bytes the in-memory time indexes hold (every tenant's, and per action).
    pub fn index_heap_bytes(&self) -> usize {
        self.state()
            .tenants
            .values()
            .map(|t| {
                t.all.heap_bytes()
                    + t.by_seq.heap_bytes()
                    + t.by_action
                        .values()
                        .map(SortedIndex::heap_bytes)
                        .sum::<usize>()
            })
            .sum()
    }

    /// Bytes written to the block file of sealed time-index blocks (0 without one).
    pub fn index_file_bytes(&self) -> u64 {
        self.state().file.as_ref().map_or(0, BlockFile::len)
    }

    /// Chain head of a tenant: (hash of its newest entry, number of entries).
    pub fn head(&self, tenant_id: &Uuid) -> ([u8; 32], u64) {
        self.state()
            .heads
            .get(tenant_id)
            .copied()
            .unwrap_or(([0; 32], 0))
    }

    /// `op` on the index the filter names; `default` when the tenant or action has none. An
    /// error is the block file's.
    fn with_index<T>(
        &self,
        f: &Filter<'_>,
        default: T,
        op: impl FnOnce(&SortedIndex) -> std::io::Result<T>,
    ) -> Result<T> {
        let state = self.state();
        let Some(t) = state.tenants.get(&f.tenant_id) else {
            return Ok(default);
        };
        let idx = match f.action {
            None => Some(&t.all),
            Some(a) => t.by_action.get(&action_key(a)),
        };
        match idx {
            Some(idx) => Ok(op(idx)?),
            None => Ok(default),
        }
    }

    /// The seqs of `tenant_id`'s entries with `after < seq <= upto`, in log order, at most
    /// `limit`, from the tenant's log-order list.
    pub(super) fn tenant_seqs(
        &self,
        tenant_id: &Uuid,
        after: u64,
        upto: u64,
        limit: usize,
    ) -> Result<Vec<u64>> {
        match self.state().tenants.get(tenant_id) {
            Some(t) => Ok(t.by_seq.after(after, upto, limit)?),
            None => Ok(Vec::new()),
        }
    }

    /// Number of matching entries.
    pub fn count(&self, f: &Filter<'_>) -> Result<usize> {
        self.with_index(f, 0, |idx| {
            let (lo, hi) = idx.range(f.from, f.to)?;
            Ok(hi - lo)
        })
    }

    /// Offset paging, newest first.
    pub fn page(&self, f: &Filter<'_>, offset: usize, limit: usize) -> Result<Page> {
        self.with_index(f, Page::default(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to)?;
            Ok(Page {
                total: hi - lo,
                items: idx.descending(lo, hi, offset, limit)?,
            })
        })
    }

    /// The seqs of the next `limit` matching entries with `after < seq < before_seq`, in log
    /// (chain) order: what an export holds, a window at a time. The index is ordered by time,
    /// not seq, so each window is one pass over the range keeping the `limit` smallest seqs
    /// past `after` (at most twice that held at once): memory stays bounded by `limit` however
    /// many entries match, for one pass per window.
    pub fn in_log_order(
        &self,
        f: &Filter<'_>,
        after: Option<u64>,
        before_seq: u64,
        limit: usize,
    ) -> Result<Vec<u64>> {
        let limit = limit.max(1);
        if f.action.is_none() && f.from == i64::MIN && f.to == i64::MAX {
            // Every entry of the tenant: its log-order index answers a window at the cost of
            // the window (an erasure's receipt counts a large tenant's entries this way; a
            // pass over the time index would hold the index's lock for the whole tenant).
            return self.tenant_seqs(
                &f.tenant_id,
                after.unwrap_or(0),
                before_seq.saturating_sub(1),
                limit,
            );
        }
        self.with_index(f, Vec::new(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to)?;
            let mut seqs: Vec<u64> = Vec::new();
            // Seqs at or past `cap` cannot be among the `limit` smallest.
            let mut cap = before_seq;
            for k in idx.between(lo, hi) {
                let seq = k?.1;
                if seq >= cap || after.is_some_and(|a| seq <= a) {
                    continue;
                }
                seqs.push(seq);
                if seqs.len() == 2 * limit {
                    seqs.select_nth_unstable(limit - 1);
                    seqs.truncate(limit);
                    cap = seqs[limit - 1] + 1;
                }
            }
            seqs.sort_unstable();
            seqs.truncate(limit);
            Ok(seqs)
        })
    }

    /// Cursor paging, newest first: entries strictly older than `after` (by created_at, then
    /// seq) with `seq <= snapshot`, so entries appended after the first page never shift or
    /// repeat the pages that follow.
    pub fn after(&self, f: &Filter<'_>, after: Key, snapshot: u64, limit: usize) -> Result<Page> {
        self.with_index(f, Page::default(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to)?;
            let end = idx.rank(after)?.clamp(lo, hi);
            let items = idx
                .rev_from(end)
                .take(end - lo)
                .filter(|k| k.as_ref().map_or(true, |k| k.1 <= snapshot))
                .take(limit)
                .collect::<std::io::Result<Vec<Key>>>()?;
            Ok(Page {
                total: hi - lo,
                items,
            })
        })
    }
}
