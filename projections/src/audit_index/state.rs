//! The audit index's in-memory state ([`IndexState`]): per tenant the sorted time indexes
//! (all entries, and per action), each tenant's chain head, and where to find an audit id.
//!
//! Invariants: the state is what inserting every stored block in seq order gives, so it is
//! rebuilt from the tree at open and never persisted apart; `spans` covers every stored block
//! in seq order, and the ids of exactly the entries in `spans[recent_from..]` are in `recent`
//! (in seq order in `recent_order`). An id not in `recent` can only be in a span before
//! `recent_from` whose millisecond range holds its leading 48 bits.

use std::collections::VecDeque;

use uuid::Uuid;

use super::refs::AuditRef;
use super::BLOCK_REFS;
use crate::log_order::LogOrder;
use crate::sorted_index::{BlockFile, SortedIndex};
use crate::FastMap;

/// Stable 64-bit key of an action name for the in-memory per-action index.
pub fn action_key(action: &str) -> u64 {
    let h = blake3::hash(action.as_bytes());
    let mut a = [0u8; 8];
    a.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_be_bytes(a)
}

/// One tenant's sorted `(created_at, seq)` indexes: of all its entries, and per action key;
/// and its entries' seqs in log order.
pub(super) struct TenantIndex {
    pub(super) all: SortedIndex,
    pub(super) by_action: FastMap<u64, SortedIndex>,
    /// In log order: "this tenant's entries after log position P" at the cost of those
    /// entries, not of every tenant's since P (a live tail's backfill, an `audit.entry`
    /// webhook). Created_at is not in log order (the gateway forwards entries late), so `all`
    /// cannot answer it.
    pub(super) by_seq: LogOrder,
}

impl TenantIndex {
    fn new(file: Option<&BlockFile>) -> Self {
        Self {
            all: SortedIndex::with_file(file.cloned()),
            by_action: FastMap::default(),
            by_seq: LogOrder::with_file(file.cloned()),
        }
    }

    /// An error is the block file's (see [`SortedIndex::insert`]).
    fn insert(&mut self, r: &AuditRef) -> std::io::Result<()> {
        let k = (r.created_at, r.seq);
        self.by_seq.push(r.seq)?;
        self.all.insert(k)?;
        let all = &self.all;
        self.by_action
            .entry(r.action_key)
            .or_insert_with(|| all.sibling())
            .insert(k)
    }
}

/// Ids kept in memory: the newest entries, which are the ones a duplicate check meets and the
/// ones most often read back. 64 Ki ids, about 3 MiB.
pub const RECENT_IDS: usize = 1 << 16;

/// The leading 48 bits of an id: its millisecond when it is a UUIDv7.
fn id_millis(id: &Uuid) -> u64 {
    id.as_bytes()[..6]
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

/// A run of consecutive stored blocks, from the block keyed `first_seq` up to the next span's.
#[derive(Debug, Clone, Copy)]
struct Span {
    first_seq: u64,
    min_ms: u64,
    max_ms: u64,
    count: usize,
}

/// The audit index's in-memory part: everything but the stored refs.
pub(super) struct IndexState {
    pub(super) tenants: FastMap<Uuid, TenantIndex>,
    /// Per tenant: hash of its newest entry and its number of entries.
    pub(super) heads: FastMap<Uuid, ([u8; 32], u64)>,
    /// Every stored block, in seq order, grouped into runs of at least BLOCK_REFS entries.
    spans: Vec<Span>,
    /// Ids of the entries in `spans[recent_from..]`, and those ids in seq order (to forget the
    /// oldest span's ids when the window is full).
    pub(super) recent: FastMap<Uuid, u64>,
    pub(super) recent_order: VecDeque<Uuid>,
    pub(super) recent_from: usize,
    /// Largest id millisecond among the spans before `recent_from`: an id past it is not
    /// among them, which spares a read for nearly every new entry's duplicate check.
    old_max_ms: u64,
    pub(super) recent_cap: usize,
    /// Where the time indexes' sealed blocks go (see `sorted_index`); none: on the heap.
    pub(super) file: Option<BlockFile>,
}

impl IndexState {
    /// An empty index writing its sealed blocks to `file`, if given (created with the first
    /// sealed block; if it cannot be, blocks stay on the heap: an unwritable dir costs memory,
    /// not answers).
    pub(super) fn new(recent_cap: usize, file: Option<BlockFile>) -> Self {
        Self {
            file,
            tenants: FastMap::default(),
            heads: FastMap::default(),
            spans: Vec::new(),
            recent: FastMap::default(),
            recent_order: Default::default(),
            recent_from: 0,
            old_max_ms: 0,
            recent_cap,
        }
    }

    /// A stored block's refs, in seq order: the last ref of a tenant is its chain head. An
    /// error is the block file's.
    pub(super) fn insert_block(&mut self, refs: &[AuditRef]) -> std::io::Result<()> {
        let Some(first) = refs.first() else {
            return Ok(());
        };
        let (lo, hi) = refs.iter().fold((u64::MAX, 0), |(lo, hi), r| {
            let ms = id_millis(&r.id);
            (lo.min(ms), hi.max(ms))
        });
        match self.spans.last_mut() {
            // The newest span grows until it holds BLOCK_REFS entries: group commits of one
            // entry each would otherwise cost a span apiece.
            Some(s) if s.count < BLOCK_REFS => {
                s.min_ms = s.min_ms.min(lo);
                s.max_ms = s.max_ms.max(hi);
                s.count += refs.len();
            }
            _ => self.spans.push(Span {
                first_seq: first.seq,
                min_ms: lo,
                max_ms: hi,
                count: refs.len(),
            }),
        }
        for r in refs {
            self.recent.insert(r.id, r.seq);
            self.recent_order.push_back(r.id);
            let file = self.file.as_ref();
            self.tenants
                .entry(r.tenant_id)
                .or_insert_with(|| TenantIndex::new(file))
                .insert(r)?;
            self.heads.insert(r.tenant_id, (r.hash, r.chain_index));
        }
        // Forget whole spans, oldest first, never the newest (it may still grow).
        while self.recent.len() > self.recent_cap && self.recent_from + 1 < self.spans.len() {
            let old = self.spans[self.recent_from];
            for _ in 0..old.count {
                if let Some(id) = self.recent_order.pop_front() {
                    self.recent.remove(&id);
                }
            }
            self.old_max_ms = self.old_max_ms.max(old.max_ms);
            self.recent_from += 1;
        }
        Ok(())
    }

    /// First seqs of the stored runs, newest first, that may hold `id` and are not in
    /// `recent`, each with the first seq of the run after it (None: up to the end).
    pub(super) fn older_runs(&self, id: &Uuid) -> Vec<(u64, Option<u64>)> {
        let ms = id_millis(id);
        if self.recent_from == 0 || ms > self.old_max_ms {
            return Vec::new();
        }
        (0..self.recent_from)
            .rev()
            .filter(|&i| self.spans[i].min_ms <= ms && ms <= self.spans[i].max_ms)
            .map(|i| {
                (
                    self.spans[i].first_seq,
                    self.spans.get(i + 1).map(|s| s.first_seq),
                )
            })
            .collect()
    }
}
