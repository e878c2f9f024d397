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
//! open; they answer `total` and any page offset by rank, without scanning. Opened with a
//! directory (the service's data dir), their sealed blocks go to an unlinked file there and
//! memory holds a summary per 2,048 pairs (see `sorted_index`), so what the index keeps in
//! memory stops growing with the log.
//!
//! Audit id → ref is not a map of every id (40 bytes an entry, the largest part of the index
//! and growing with the log without bound). Audit ids are UUIDv7, minted just before their
//! append, so the millisecond leading an id places it among the blocks: in memory are the
//! ids of the newest [`RECENT_IDS`] entries, and for older ones a [`Span`] per run of about
//! [`BLOCK_REFS`] entries giving the range of their ids' milliseconds. An older id is found by
//! reading the runs whose range holds its millisecond (normally one). Ids of any other layout
//! are still found, as the ranges are taken from the ids themselves; they are only slower.

use std::path::Path;
use std::sync::RwLock;

use uuid::Uuid;

use crate::audit_view::{canonical_entry_bytes, chain_hash_canonical};
use crate::event::Event;
use crate::overlay::{fold_new, prefixed};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::sorted_index::{BlockFile, Key, SortedIndex};
use crate::FastMap;

pub const TREE: &str = "proj_audit";
/// Refs per stored block: small enough that reading one ref reads at most 32 KiB.
pub const BLOCK_REFS: usize = 256;

/// Where an audit entry lives and its place in its tenant's chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditRef {
    pub id: Uuid,
    pub seq: u64,
    pub tenant_id: Uuid,
    pub created_at: i64,
    pub action_key: u64,
    /// 1-based position of the entry in its tenant's chain.
    pub chain_index: u64,
    pub hash: [u8; 32],
    pub prev_hash: [u8; 32],
}

const REF_LEN: usize = 16 + 8 + 16 + 8 + 8 + 8 + 32 + 32;

impl AuditRef {
    fn write(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(self.id.as_bytes());
        v.extend_from_slice(&self.seq.to_be_bytes());
        v.extend_from_slice(self.tenant_id.as_bytes());
        v.extend_from_slice(&self.created_at.to_be_bytes());
        v.extend_from_slice(&self.action_key.to_be_bytes());
        v.extend_from_slice(&self.chain_index.to_be_bytes());
        v.extend_from_slice(&self.hash);
        v.extend_from_slice(&self.prev_hash);
    }

    fn read(b: &[u8]) -> AuditRef {
        // Callers pass exactly REF_LEN bytes (blocks are checked to be a multiple of it).
        let arr = |o: usize| -> [u8; 8] {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            a
        };
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[0..16]);
        let mut tenant = [0u8; 16];
        tenant.copy_from_slice(&b[24..40]);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&b[64..96]);
        let mut prev_hash = [0u8; 32];
        prev_hash.copy_from_slice(&b[96..128]);
        AuditRef {
            id: Uuid::from_bytes(id),
            seq: u64::from_be_bytes(arr(16)),
            tenant_id: Uuid::from_bytes(tenant),
            created_at: i64::from_be_bytes(arr(40)),
            action_key: u64::from_be_bytes(arr(48)),
            chain_index: u64::from_be_bytes(arr(56)),
            hash,
            prev_hash,
        }
    }
}

fn parse_block(b: &[u8]) -> Result<Vec<AuditRef>> {
    if !b.len().is_multiple_of(REF_LEN) {
        return Err(corrupt(TREE, format!("ref block of {} bytes", b.len())));
    }
    Ok(b.chunks_exact(REF_LEN).map(AuditRef::read).collect())
}

/// Stable 64-bit key of an action name for the in-memory per-action index.
pub fn action_key(action: &str) -> u64 {
    let h = blake3::hash(action.as_bytes());
    let mut a = [0u8; 8];
    a.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_be_bytes(a)
}

struct TenantIndex {
    all: SortedIndex,
    by_action: FastMap<u64, SortedIndex>,
}

impl TenantIndex {
    fn new(file: Option<&BlockFile>) -> Self {
        Self {
            all: SortedIndex::with_file(file.cloned()),
            by_action: FastMap::default(),
        }
    }

    /// An error is the block file's (see [`SortedIndex::insert`]).
    fn insert(&mut self, r: &AuditRef) -> std::io::Result<()> {
        let k = (r.created_at, r.seq);
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

struct Memory {
    tenants: FastMap<Uuid, TenantIndex>,
    /// Per tenant: hash of its newest entry and its number of entries.
    heads: FastMap<Uuid, ([u8; 32], u64)>,
    /// Every stored block, in seq order, grouped into runs of at least BLOCK_REFS entries.
    spans: Vec<Span>,
    /// Ids of the entries in `spans[recent_from..]`, and those ids in seq order (to forget the
    /// oldest span's ids when the window is full).
    recent: FastMap<Uuid, u64>,
    recent_order: std::collections::VecDeque<Uuid>,
    recent_from: usize,
    /// Largest id millisecond among the spans before `recent_from`: an id past it is not
    /// among them, which spares a read for nearly every new entry's duplicate check.
    old_max_ms: u64,
    recent_cap: usize,
    /// Where the time indexes' sealed blocks go (see `sorted_index`); none: on the heap.
    file: Option<BlockFile>,
}

impl Memory {
    /// An empty index writing its sealed blocks to `file`, if given (created with the first
    /// sealed block; if it cannot be, blocks stay on the heap: an unwritable dir costs memory,
    /// not answers).
    fn new(recent_cap: usize, file: Option<BlockFile>) -> Self {
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
    fn insert_block(&mut self, refs: &[AuditRef]) -> std::io::Result<()> {
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
    fn older_runs(&self, id: &Uuid) -> Vec<(u64, Option<u64>)> {
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
pub struct Detached(Memory);

pub struct AuditIndex {
    tree: sled::Tree,
    mem: RwLock<Memory>,
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
        let mut mem = Memory::new(recent, dir.map(BlockFile::in_dir));
        for kv in tree.scan_prefix([b'g']) {
            let (_, v) = kv?;
            mem.insert_block(&parse_block(&v)?)?;
        }
        Ok(Self {
            tree,
            mem: RwLock::new(mem),
        })
    }

    /// The in-memory index without the tree handle (see `Projections::detach`).
    pub fn detach(self) -> Detached {
        Detached(self.mem.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn attach(db: &sled::Db, d: Detached) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
            mem: RwLock::new(d.0),
        })
    }

    /// Finds `id` among the refs stored in the runs `older_runs` names.
    fn find_stored(&self, id: &Uuid, runs: &[(u64, Option<u64>)]) -> Result<Option<AuditRef>> {
        for &(first, next) in runs {
            let from = prefixed(b'g', &[&first.to_be_bytes()]);
            let blocks = match next {
                Some(n) => self.tree.range(from..prefixed(b'g', &[&n.to_be_bytes()])),
                None => self.tree.range(from..prefixed(b'h', &[])),
            };
            for kv in blocks {
                let (_, block) = kv?;
                if !block.len().is_multiple_of(REF_LEN) {
                    return Err(corrupt(TREE, format!("ref block of {} bytes", block.len())));
                }
                // Compare the ids in place: a block is parsed only for the ref asked for.
                if let Some(raw) = block
                    .chunks_exact(REF_LEN)
                    .find(|r| &r[..16] == id.as_bytes())
                {
                    return Ok(Some(AuditRef::read(raw)));
                }
            }
        }
        Ok(None)
    }

    fn mem(&self) -> std::sync::RwLockReadGuard<'_, Memory> {
        self.mem.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The ref of the entry stored at log `seq`.
    pub fn at_seq(&self, seq: u64) -> Result<Option<AuditRef>> {
        let upper = prefixed(b'g', &[&seq.to_be_bytes()]);
        let Some(kv) = self.tree.range(prefixed(b'g', &[])..=upper).next_back() else {
            return Ok(None);
        };
        let (_, block) = kv?;
        let refs = parse_block(&block)?;
        Ok(refs
            .binary_search_by_key(&seq, |r| r.seq)
            .ok()
            .map(|i| refs[i]))
    }

    /// Refs of several seqs, reading each stored block once.
    pub fn at_seqs(&self, seqs: &[u64]) -> Result<Vec<Option<AuditRef>>> {
        let mut out = Vec::with_capacity(seqs.len());
        let mut cached: Vec<AuditRef> = Vec::new();
        for &seq in seqs {
            let hit = cached
                .binary_search_by_key(&seq, |r| r.seq)
                .ok()
                .map(|i| cached[i]);
            if let Some(r) = hit {
                out.push(Some(r));
                continue;
            }
            let upper = prefixed(b'g', &[&seq.to_be_bytes()]);
            match self.tree.range(prefixed(b'g', &[])..=upper).next_back() {
                None => out.push(None),
                Some(kv) => {
                    let (_, block) = kv?;
                    cached = parse_block(&block)?;
                    out.push(
                        cached
                            .binary_search_by_key(&seq, |r| r.seq)
                            .ok()
                            .map(|i| cached[i]),
                    );
                }
            }
        }
        Ok(out)
    }

    pub fn get(&self, audit_id: &Uuid) -> Result<Option<AuditRef>> {
        let (recent, runs) = {
            let mem = self.mem();
            (mem.recent.get(audit_id).copied(), mem.older_runs(audit_id))
        };
        match recent {
            Some(seq) => self.at_seq(seq),
            None => self.find_stored(audit_id, &runs),
        }
    }

    /// Bytes the in-memory time indexes hold (every tenant's, and per action).
    pub fn index_heap_bytes(&self) -> usize {
        self.mem()
            .tenants
            .values()
            .map(|t| {
                t.all.heap_bytes()
                    + t.by_action
                        .values()
                        .map(SortedIndex::heap_bytes)
                        .sum::<usize>()
            })
            .sum()
    }

    /// Bytes written to the block file of sealed time-index blocks (0 without one).
    pub fn index_file_bytes(&self) -> u64 {
        self.mem().file.as_ref().map_or(0, BlockFile::len)
    }

    /// Chain head of a tenant: (hash of its newest entry, number of entries).
    pub fn head(&self, tenant_id: &Uuid) -> ([u8; 32], u64) {
        self.mem()
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
        let mem = self.mem();
        let Some(t) = mem.tenants.get(&f.tenant_id) else {
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

    /// Every matching entry with `seq < before_seq`, in log (chain) order: what an export holds.
    pub fn in_log_order(&self, f: &Filter<'_>, before_seq: u64) -> Result<Vec<Key>> {
        self.with_index(f, Vec::new(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to)?;
            let mut keys = Vec::new();
            for k in idx.between(lo, hi) {
                let k = k?;
                if k.1 < before_seq {
                    keys.push(k);
                }
            }
            keys.sort_unstable_by_key(|k| k.1);
            Ok(keys)
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

impl Projection for AuditIndex {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        let mut heads: FastMap<Uuid, ([u8; 32], u64)> = FastMap::default();
        let mut refs: Vec<AuditRef> = Vec::new();
        let mut fresh: std::collections::HashSet<Uuid> = std::collections::HashSet::new();
        let folded = {
            let mem = self.mem();
            fold_new(&self.tree, TREE, events, |_, a| {
                let Event::AuditRecorded(rec) = a.event else {
                    return Ok(());
                };
                let known = mem.recent.contains_key(&rec.entry.id)
                    || self
                        .find_stored(&rec.entry.id, &mem.older_runs(&rec.entry.id))?
                        .is_some();
                if known || !fresh.insert(rec.entry.id) {
                    // The same audit id twice would fork the tenant chain; the first one stands.
                    return Ok(());
                }
                let head = match heads.get(&rec.tenant_id) {
                    Some(h) => *h,
                    None => mem
                        .heads
                        .get(&rec.tenant_id)
                        .copied()
                        .unwrap_or(([0; 32], 0)),
                };
                let (hash, action) = match a.prepared.and_then(|p| p.audit.as_ref()) {
                    Some((canonical, action)) => {
                        (chain_hash_canonical(&head.0, canonical), *action)
                    }
                    None => (
                        chain_hash_canonical(&head.0, &canonical_entry_bytes(&rec.entry)),
                        action_key(&rec.entry.action),
                    ),
                };
                refs.push(AuditRef {
                    id: rec.entry.id,
                    seq: a.seq,
                    tenant_id: rec.tenant_id,
                    created_at: rec.entry.created_at,
                    action_key: action,
                    chain_index: head.1 + 1,
                    hash,
                    prev_hash: head.0,
                });
                heads.insert(rec.tenant_id, (hash, head.1 + 1));
                Ok(())
            })?
        };
        let Some((mut ov, last)) = folded else {
            return Ok(());
        };
        for block in refs.chunks(BLOCK_REFS) {
            let mut bytes = Vec::with_capacity(block.len() * REF_LEN);
            for r in block {
                r.write(&mut bytes);
            }
            ov.insert(prefixed(b'g', &[&block[0].seq.to_be_bytes()]), bytes);
        }
        ov.commit(last)?;
        let mut mem = self.mem.write().unwrap_or_else(|p| p.into_inner());
        for block in refs.chunks(BLOCK_REFS) {
            mem.insert_block(block)?;
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        let mut mem = self.mem.write().unwrap_or_else(|p| p.into_inner());
        // A new block file: the old one's blocks are all forgotten.
        let fresh = Memory::new(mem.recent_cap, mem.file.as_ref().map(BlockFile::renewed));
        *mem = fresh;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit_view::chain_hash;
    use crate::event::{AuditEntry, AuditRecorded};

    fn entry(action: &str, created_at: i64) -> AuditEntry {
        AuditEntry {
            id: Uuid::now_v7(),
            action: action.into(),
            model_id: None,
            project_id: None,
            gateway_id: None,
            ip_address: None,
            user_agent: None,
            http_status: 200,
            is_success: true,
            is_cache_hit: false,
            error_code: None,
            error_msg: None,
            duration: None,
            credits_consumed: 0.0,
            balance_consumed_usd: 0.0,
            tokens: None,
            metadata: None,
            created_at,
        }
    }

    #[test]
    fn given_a_block_file_then_the_index_answers_as_on_the_heap_and_holds_little() {
        // Given 3 x 2,048 + 500 entries of one tenant in two actions, a tenth of them dated in
        // the past (late), applied to an index on the heap and to one writing its sealed
        // blocks to a file, in group commits of 100,
        let mut events = Vec::new();
        let tenant = Uuid::now_v7();
        for i in 0..6_644i64 {
            let at = if i % 10 == 9 { i * 50 - 40_000 } else { i * 50 };
            let action = if i % 3 == 0 {
                "audit.list"
            } else {
                "memory.write"
            };
            events.push(Event::AuditRecorded(Box::new(AuditRecorded {
                tenant_id: tenant,
                entry: entry(action, 1_000_000 + at),
                detail: Default::default(),
            })));
        }
        let applied = Applied::in_order(&events);
        let (heap_dir, file_dir, spill) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let heap_db = sled::open(heap_dir.path()).expect("open");
        let file_db = sled::open(file_dir.path()).expect("open");
        let heap = AuditIndex::open(&heap_db).expect("open");
        let filed = AuditIndex::open_in(&file_db, spill.path()).expect("open");
        for batch in applied.chunks(100) {
            heap.apply(batch).expect("apply");
            filed.apply(batch).expect("apply");
        }
        // then every count and page agrees, for all entries, an action and a time range,
        let all = Filter {
            tenant_id: tenant,
            action: None,
            from: i64::MIN,
            to: i64::MAX,
        };
        let filters = [
            all,
            Filter {
                action: Some("audit.list"),
                ..all
            },
            Filter {
                from: 1_000_000 + 40_000,
                to: 1_000_000 + 250_000,
                ..all
            },
        ];
        let check = |idx: &AuditIndex| -> Vec<(usize, Page, Page, Vec<Key>)> {
            filters
                .iter()
                .map(|f| {
                    (
                        idx.count(f).expect("count"),
                        idx.page(f, 2_100, 50).expect("page"),
                        idx.after(f, (1_000_000 + 150_000, 0), u64::MAX, 30)
                            .expect("after"),
                        idx.in_log_order(f, u64::MAX).expect("in log order"),
                    )
                })
                .collect()
        };
        let want = check(&heap);
        assert_eq!(want[0].0, 6_644);
        assert_eq!(want[0].1.items.len(), 50);
        assert_eq!(want[0].2.items.len(), 30);
        assert_eq!(check(&filed), want);
        // the sealed blocks' words left the heap for the file (the blocks are the same in both:
        // the same inserts seal the same blocks; the file also keeps the words of blocks
        // unpacked for a late entry since),
        let moved = heap.index_heap_bytes() - filed.index_heap_bytes();
        assert!(moved >= 4 * 1024, "{moved} bytes moved");
        assert!(filed.index_file_bytes() >= moved as u64);
        assert_eq!(heap.index_file_bytes(), 0);
        // and a reopened index (a new file, rebuilt from the tree) answers the same.
        drop(filed);
        let reopened = AuditIndex::open_in(&file_db, spill.path()).expect("reopen");
        assert_eq!(check(&reopened), want);
    }

    #[test]
    fn given_entries_of_two_tenants_then_counts_pages_and_chains_are_per_tenant() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let idx = AuditIndex::open(&db).expect("open");
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let mut events = Vec::new();
        for i in 0..30i64 {
            let tenant = if i % 3 == 0 { b } else { a };
            let action = if i % 2 == 0 {
                "memory.write"
            } else {
                "audit.list"
            };
            events.push(Event::AuditRecorded(Box::new(AuditRecorded {
                tenant_id: tenant,
                entry: entry(action, 1000 + i),
                detail: Default::default(),
            })));
        }
        let applied = Applied::in_order(&events);
        idx.apply(&applied[..10]).expect("apply");
        idx.apply(&applied).expect("apply overlapping");

        let all_a = Filter {
            tenant_id: a,
            action: None,
            from: i64::MIN,
            to: i64::MAX,
        };
        assert_eq!(idx.count(&all_a).expect("count"), 20);
        let writes_a = Filter {
            action: Some("memory.write"),
            ..all_a
        };
        assert_eq!(idx.count(&writes_a).expect("count"), 10);
        let ranged = Filter {
            from: 1010,
            to: 1019,
            ..all_a
        };
        // 1010..=1019 holds ten entries; 1012, 1015 and 1018 belong to tenant b.
        assert_eq!(idx.count(&ranged).expect("count"), 7);
        let page = idx.page(&all_a, 0, 3).expect("page");
        assert_eq!(page.total, 20);
        assert_eq!(page.items, vec![(1029, 30), (1028, 29), (1026, 27)]);
        let past = idx.page(&all_a, 100, 3).expect("page");
        assert_eq!((past.total, past.items.len()), (20, 0));
        let next = idx.after(&all_a, (1026, 27), 30, 2).expect("after");
        assert_eq!(next.items, vec![(1025, 26), (1023, 24)]);

        // Chains: each tenant's first entry links to zeros, each later one to the one before.
        let (head_a, n_a) = idx.head(&a);
        assert_eq!(n_a, 20);
        let mut prev = [0u8; 32];
        let mut n = 0;
        for e in events.iter() {
            let Event::AuditRecorded(r) = e else {
                unreachable!()
            };
            if r.tenant_id != a {
                continue;
            }
            let got = idx.get(&r.entry.id).expect("get").expect("ref");
            assert_eq!(got.prev_hash, prev);
            n += 1;
            assert_eq!(got.chain_index, n);
            assert_eq!(got.hash, chain_hash(&prev, &r.entry));
            prev = got.hash;
        }
        assert_eq!(prev, head_a);

        // Reopening rebuilds the in-memory index from the tree.
        drop(idx);
        let idx = AuditIndex::open(&db).expect("reopen");
        assert_eq!(idx.count(&writes_a).expect("count"), 10);
        idx.reset().expect("reset");
        assert_eq!(idx.count(&all_a).expect("count"), 0);
    }

    #[test]
    fn ids_past_the_recent_window_are_found_in_the_stored_runs_and_still_refused_twice() {
        // Given a window of 300 ids and 2,000 entries applied in group commits of assorted
        // sizes (one entry, a few, more than a block), some with ids that are not UUIDv7
        // (scattered leading bits),
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let idx = AuditIndex::open_with_recent(&db, 300).expect("open");
        let tenant = Uuid::now_v7();
        let events: Vec<Event> = (0..2000i64)
            .map(|i| {
                let mut e = entry("gateway.chat", 1000 + i);
                if i % 97 == 0 {
                    e.id = Uuid::from_u128(
                        (i as u128 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835),
                    );
                }
                Event::AuditRecorded(Box::new(AuditRecorded {
                    tenant_id: tenant,
                    entry: e,
                    detail: Default::default(),
                }))
            })
            .collect();
        let applied = Applied::in_order(&events);
        let mut at = 0;
        for size in [1usize, 7, 300, 1, 1, 513, 40].into_iter().cycle() {
            let end = (at + size).min(applied.len());
            idx.apply(&applied[..end]).expect("apply");
            at = end;
            if at == applied.len() {
                break;
            }
        }
        let all = Filter {
            tenant_id: tenant,
            action: None,
            from: i64::MIN,
            to: i64::MAX,
        };
        assert_eq!(idx.count(&all).expect("count"), 2000);
        // then memory holds a bounded window of ids, not all of them,
        {
            let mem = idx.mem();
            assert!(
                mem.recent.len() <= 300 + 2 * BLOCK_REFS,
                "{}",
                mem.recent.len()
            );
            assert_eq!(mem.recent.len(), mem.recent_order.len());
            assert!(mem.recent_from > 0);
        }
        // every id, old or new, is found with its seq, and an unknown one is not,
        let check = |idx: &AuditIndex| {
            for (a, e) in applied.iter().zip(&events) {
                let Event::AuditRecorded(r) = e else {
                    unreachable!()
                };
                let got = idx.get(&r.entry.id).expect("get").expect("found");
                assert_eq!((got.id, got.seq), (r.entry.id, a.seq));
            }
            assert_eq!(idx.get(&Uuid::now_v7()).expect("get"), None);
            assert_eq!(idx.get(&Uuid::from_u128(u128::MAX / 3)).expect("get"), None);
        };
        check(&idx);
        // and an old id appended again is refused, as a recent one is (the chain stays one).
        let Event::AuditRecorded(first) = &events[3] else {
            unreachable!()
        };
        let Event::AuditRecorded(last) = &events[1999] else {
            unreachable!()
        };
        let again = [first.clone(), last.clone()].map(Event::AuditRecorded);
        let mut applied_again = Applied::in_order(&again);
        for (k, a) in applied_again.iter_mut().enumerate() {
            a.seq = 2001 + k as u64;
        }
        let head = idx.head(&tenant);
        idx.apply(&applied_again).expect("apply duplicates");
        assert_eq!(idx.count(&all).expect("count"), 2000);
        assert_eq!(idx.head(&tenant), head);
        // Detached and attached to the database opened again, nothing is read back,
        let detached = idx.detach();
        drop(db);
        let db = sled::open(dir.path()).expect("reopen");
        let idx = AuditIndex::attach(&db, detached).expect("attach");
        check(&idx);
        assert_eq!(idx.head(&tenant), head);
        // and reopened from the tree, the window and the runs are rebuilt alike.
        drop(idx);
        let idx = AuditIndex::open_with_recent(&db, 300).expect("reopen");
        check(&idx);
        assert_eq!(idx.head(&tenant), head);
    }
}
