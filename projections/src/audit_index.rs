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
//! The entry itself is read from the log record at `seq`, never copied. In memory: audit id →
//! seq, and per tenant sorted `(created_at, seq)` indexes (all entries, and per action), rebuilt
//! from the blocks at open; they answer `total` and any page offset by rank, without scanning.

use std::sync::RwLock;

use uuid::Uuid;

use crate::audit_view::{canonical_entry_bytes, chain_hash_canonical};
use crate::event::Event;
use crate::overlay::{fold_new, prefixed};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::sorted_index::{Key, SortedIndex};
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

#[derive(Default)]
struct TenantIndex {
    all: SortedIndex,
    by_action: FastMap<u64, SortedIndex>,
}

impl TenantIndex {
    fn insert(&mut self, r: &AuditRef) {
        let k = (r.created_at, r.seq);
        self.all.insert(k);
        self.by_action.entry(r.action_key).or_default().insert(k);
    }
}

#[derive(Default)]
struct Memory {
    ids: FastMap<Uuid, u64>,
    tenants: FastMap<Uuid, TenantIndex>,
    /// Per tenant: hash of its newest entry and its number of entries.
    heads: FastMap<Uuid, ([u8; 32], u64)>,
}

impl Memory {
    /// Refs must come in seq order: the last one of a tenant is its chain head.
    fn insert(&mut self, r: &AuditRef) {
        self.ids.insert(r.id, r.seq);
        self.tenants.entry(r.tenant_id).or_default().insert(r);
        self.heads.insert(r.tenant_id, (r.hash, r.chain_index));
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

pub struct AuditIndex {
    tree: sled::Tree,
    mem: RwLock<Memory>,
}

impl AuditIndex {
    pub fn open(db: &sled::Db) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut mem = Memory::default();
        for kv in tree.scan_prefix([b'g']) {
            let (_, v) = kv?;
            for r in parse_block(&v)? {
                mem.insert(&r);
            }
        }
        Ok(Self {
            tree,
            mem: RwLock::new(mem),
        })
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
        let seq = self.mem().ids.get(audit_id).copied();
        match seq {
            None => Ok(None),
            Some(seq) => self.at_seq(seq),
        }
    }

    /// Chain head of a tenant: (hash of its newest entry, number of entries).
    pub fn head(&self, tenant_id: &Uuid) -> ([u8; 32], u64) {
        self.mem()
            .heads
            .get(tenant_id)
            .copied()
            .unwrap_or(([0; 32], 0))
    }

    fn with_index<T>(&self, f: &Filter<'_>, default: T, op: impl FnOnce(&SortedIndex) -> T) -> T {
        let mem = self.mem();
        let Some(t) = mem.tenants.get(&f.tenant_id) else {
            return default;
        };
        let idx = match f.action {
            None => Some(&t.all),
            Some(a) => t.by_action.get(&action_key(a)),
        };
        match idx {
            Some(idx) => op(idx),
            None => default,
        }
    }

    /// Number of matching entries.
    pub fn count(&self, f: &Filter<'_>) -> usize {
        self.with_index(f, 0, |idx| {
            let (lo, hi) = idx.range(f.from, f.to);
            hi - lo
        })
    }

    /// Offset paging, newest first.
    pub fn page(&self, f: &Filter<'_>, offset: usize, limit: usize) -> Page {
        self.with_index(f, Page::default(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to);
            Page {
                total: hi - lo,
                items: idx.descending(lo, hi, offset, limit),
            }
        })
    }

    /// Every matching entry with `seq < before_seq`, in log (chain) order: what an export holds.
    pub fn in_log_order(&self, f: &Filter<'_>, before_seq: u64) -> Vec<Key> {
        self.with_index(f, Vec::new(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to);
            let mut keys: Vec<Key> = (lo..hi)
                .filter_map(|i| idx.get(i))
                .filter(|k| k.1 < before_seq)
                .collect();
            keys.sort_unstable_by_key(|k| k.1);
            keys
        })
    }

    /// Cursor paging, newest first: entries strictly older than `after` (by created_at, then
    /// seq) with `seq <= snapshot`, so entries appended after the first page never shift or
    /// repeat the pages that follow.
    pub fn after(&self, f: &Filter<'_>, after: Key, snapshot: u64, limit: usize) -> Page {
        self.with_index(f, Page::default(), |idx| {
            let (lo, hi) = idx.range(f.from, f.to);
            let end = idx.rank(after).clamp(lo, hi);
            let mut items = Vec::with_capacity(limit);
            let mut pos = end;
            while pos > lo && items.len() < limit {
                pos -= 1;
                if let Some(k) = idx.get(pos) {
                    if k.1 <= snapshot {
                        items.push(k);
                    }
                }
            }
            Page {
                total: hi - lo,
                items,
            }
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
                if mem.ids.contains_key(&rec.entry.id) || !fresh.insert(rec.entry.id) {
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
        for r in &refs {
            mem.insert(r);
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        *self.mem.write().unwrap_or_else(|p| p.into_inner()) = Memory::default();
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
        assert_eq!(idx.count(&all_a), 20);
        let writes_a = Filter {
            action: Some("memory.write"),
            ..all_a
        };
        assert_eq!(idx.count(&writes_a), 10);
        let ranged = Filter {
            from: 1010,
            to: 1019,
            ..all_a
        };
        // 1010..=1019 holds ten entries; 1012, 1015 and 1018 belong to tenant b.
        assert_eq!(idx.count(&ranged), 7);
        let page = idx.page(&all_a, 0, 3);
        assert_eq!(page.total, 20);
        assert_eq!(page.items, vec![(1029, 30), (1028, 29), (1026, 27)]);
        let past = idx.page(&all_a, 100, 3);
        assert_eq!((past.total, past.items.len()), (20, 0));
        let next = idx.after(&all_a, (1026, 27), 30, 2);
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
        assert_eq!(idx.count(&writes_a), 10);
        idx.reset().expect("reset");
        assert_eq!(idx.count(&all_a), 0);
    }
}
