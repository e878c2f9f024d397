//! The memory store and its vector table, folded from `MemoryCreated`, `MemoryUpdated`,
//! `MemoryDeleted` and `MemoriesDeletedByType`.
//!
//! Tree `proj_memories`: `m|memory_id` → [`StoredMemory`] (content, type, importance, times,
//! the model, the seq of the event holding its current vector, the seqs of every event that
//! changed it, and `deleted_at` once deleted: a deleted memory answers nothing but its
//! history). In memory, per tenant: the live memories, their order (newest first) overall and
//! per type, and the [`VectorTable`].
//!
//! The vector itself is not copied into the tree: it stays in its log record, like an audit
//! entry, and is read from there (through a [`VectorSource`]) when the table is rebuilt at open.
//! A stored memory is ~250 bytes instead of ~1.8 KB, and sled's cost grows with the bytes it
//! moves: its leaf nodes are cloned and re-serialized as they fill (replaying 100,000 memory
//! events went from 30k to 51k events/s, `memories_100k/replay`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{RwLock, RwLockReadGuard};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{vector_from_bytes, Event, MemoryType};
use crate::overlay::{fold_new, prefixed, Overlay};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::vector_table::{Hit, VectorTable};
use crate::FastMap;

pub const TREE: &str = "proj_memories";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredMemory {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub created_at: i64,
    pub updated_at: i64,
    pub model: String,
    /// A vector copied in by an older build; empty now (see `vector_seq`).
    #[serde(default, with = "serde_bytes", skip_serializing_if = "Vec::is_empty")]
    pub vector: Vec<u8>,
    /// Seqs of the events that created, changed and deleted it, in order.
    pub versions: Vec<u64>,
    pub deleted_at: Option<i64>,
    /// Seq of the `MemoryCreated`/`MemoryUpdated` event whose vector is current.
    #[serde(default)]
    pub vector_seq: u64,
}

/// Reads the vector (f32 little-endian bytes) carried by the memory event at a log seq.
pub type VectorSource<'a> =
    &'a (dyn Fn(u64) -> std::result::Result<Option<Vec<u8>>, String> + Sync);

/// A live memory as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryView {
    pub id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub created_at: i64,
    pub updated_at: i64,
}

impl From<&StoredMemory> for MemoryView {
    fn from(m: &StoredMemory) -> Self {
        MemoryView {
            id: m.id,
            content: m.content.clone(),
            memory_type: m.memory_type,
            importance: m.importance,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

#[derive(Default)]
struct TenantMemories {
    live: HashMap<Uuid, MemoryView>,
    order: BTreeSet<(i64, Uuid)>,
    by_type: HashMap<MemoryType, BTreeSet<(i64, Uuid)>>,
    vectors: VectorTable,
}

impl TenantMemories {
    /// Puts a live memory; `vector` is its new vector, or `None` when it did not change.
    fn put(&mut self, m: &StoredMemory, vector: Option<&[f32]>) {
        if let Some(old) = self.live.get(&m.id) {
            self.order.remove(&(old.created_at, old.id));
            if let Some(s) = self.by_type.get_mut(&old.memory_type) {
                s.remove(&(old.created_at, old.id));
            }
        }
        self.order.insert((m.created_at, m.id));
        self.by_type
            .entry(m.memory_type)
            .or_default()
            .insert((m.created_at, m.id));
        match vector {
            Some(v) => {
                self.vectors
                    .upsert(m.id, v, m.memory_type, m.importance as f32);
            }
            None => self.vectors.set_importance(&m.id, m.importance as f32),
        }
        self.live.insert(m.id, MemoryView::from(m));
    }

    fn drop_memory(&mut self, id: &Uuid) {
        if let Some(old) = self.live.remove(id) {
            self.order.remove(&(old.created_at, old.id));
            if let Some(s) = self.by_type.get_mut(&old.memory_type) {
                s.remove(&(old.created_at, old.id));
            }
            self.vectors.remove(id);
        }
    }
}

pub struct Memories {
    tree: sled::Tree,
    mem: RwLock<HashMap<Uuid, TenantMemories>>,
}

fn dec(bytes: &[u8]) -> Result<StoredMemory> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("memory: {e}")))
}

fn enc(m: &StoredMemory) -> Vec<u8> {
    // A plain struct of strings, numbers and bytes: encoding into a Vec cannot fail.
    rmp_serde::to_vec_named(m).unwrap_or_default()
}

impl Memories {
    pub fn open(db: &sled::Db, vectors: VectorSource<'_>) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut live = Vec::new();
        for kv in tree.scan_prefix([b'm']) {
            let (_, v) = kv?;
            let m = dec(&v)?;
            if m.deleted_at.is_none() {
                live.push(m);
            }
        }
        // Reading the vectors back from the log is random reads and decoding: on every core.
        let found: Vec<Result<Vec<f32>>> = live
            .par_iter()
            .map(|m| {
                if !m.vector.is_empty() {
                    return Ok(vector_from_bytes(&m.vector));
                }
                match vectors(m.vector_seq) {
                    Ok(Some(bytes)) => Ok(vector_from_bytes(&bytes)),
                    Ok(None) => Err(corrupt(
                        TREE,
                        format!(
                            "memory {}: no vector at log seq {} (run `auditmem replay`)",
                            m.id, m.vector_seq
                        ),
                    )),
                    Err(why) => Err(corrupt(
                        TREE,
                        format!("memory {}: vector at seq {}: {why}", m.id, m.vector_seq),
                    )),
                }
            })
            .collect();
        let mut mem: HashMap<Uuid, TenantMemories> = HashMap::new();
        for (m, v) in live.iter().zip(found) {
            mem.entry(m.tenant_id).or_default().put(m, Some(&v?));
        }
        Ok(Self {
            tree,
            mem: RwLock::new(mem),
        })
    }

    fn mem(&self) -> RwLockReadGuard<'_, HashMap<Uuid, TenantMemories>> {
        self.mem.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A live memory of the tenant.
    pub fn get(&self, tenant: &Uuid, id: &Uuid) -> Option<MemoryView> {
        self.mem().get(tenant).and_then(|t| t.live.get(id).cloned())
    }

    /// The stored record, live or deleted, of any tenant (history reads it).
    pub fn stored(&self, id: &Uuid) -> Result<Option<StoredMemory>> {
        self.tree
            .get(prefixed(b'm', &[id.as_bytes()]))?
            .map(|v| dec(&v))
            .transpose()
    }

    /// Newest first; returns (total, page).
    pub fn list(
        &self,
        tenant: &Uuid,
        memory_type: Option<MemoryType>,
        offset: usize,
        limit: usize,
    ) -> (usize, Vec<MemoryView>) {
        let mem = self.mem();
        let Some(t) = mem.get(tenant) else {
            return (0, Vec::new());
        };
        let set = match memory_type {
            None => Some(&t.order),
            Some(ty) => t.by_type.get(&ty),
        };
        let Some(set) = set else {
            return (0, Vec::new());
        };
        let page = set
            .iter()
            .rev()
            .skip(offset)
            .take(limit)
            .filter_map(|(_, id)| t.live.get(id).cloned())
            .collect();
        (set.len(), page)
    }

    /// Ids of the tenant's live memories of a type.
    pub fn ids_of_type(&self, tenant: &Uuid, memory_type: MemoryType) -> Vec<Uuid> {
        self.mem()
            .get(tenant)
            .and_then(|t| t.by_type.get(&memory_type))
            .map(|s| s.iter().map(|(_, id)| *id).collect())
            .unwrap_or_default()
    }

    pub fn count(&self, tenant: &Uuid) -> usize {
        self.mem().get(tenant).map(|t| t.live.len()).unwrap_or(0)
    }

    /// Search over the tenant's vectors (exact; through the quantised first pass from
    /// `vector_table::FAST_MIN_ROWS` rows on); hits with their memories, best first.
    pub fn search(
        &self,
        tenant: &Uuid,
        query: &[f32],
        memory_type: Option<MemoryType>,
        min_similarity: f32,
        k: usize,
    ) -> Vec<(MemoryView, Hit)> {
        let mem = self.mem();
        let Some(t) = mem.get(tenant) else {
            return Vec::new();
        };
        t.vectors
            .search_fast(query, memory_type, min_similarity, k)
            .into_iter()
            .filter_map(|h| t.live.get(&h.id).map(|m| (m.clone(), h)))
            .collect()
    }

    /// The most similar live memory of the tenant (of a type, if given) and its cosine.
    pub fn nearest(
        &self,
        tenant: &Uuid,
        query: &[f32],
        memory_type: Option<MemoryType>,
    ) -> Option<(Uuid, f32)> {
        let mem = self.mem();
        let t = mem.get(tenant)?;
        // Similarity alone: importance must not decide what counts as a duplicate.
        t.vectors.most_similar(query, memory_type)
    }

    /// Folds one event; `finals` keeps the latest state of each memory the batch touched (what
    /// the in-memory view takes once the batch landed), `vectors` which event holds each
    /// touched memory's new vector.
    fn fold(
        ov: &mut Overlay<'_>,
        finals: &mut FastMap<Uuid, StoredMemory>,
        vectors: &mut FastMap<Uuid, u64>,
        a: &Applied<'_>,
    ) -> Result<()> {
        let mut update =
            |ov: &mut Overlay<'_>, id: &Uuid, f: &mut dyn FnMut(&mut StoredMemory)| -> Result<()> {
                let key = prefixed(b'm', &[id.as_bytes()]);
                let current = match finals.get(id) {
                    Some(m) => Some(m.clone()),
                    None => ov.get(&key)?.map(|bytes| dec(&bytes)).transpose()?,
                };
                if let Some(mut m) = current {
                    if m.deleted_at.is_some() {
                        return Ok(());
                    }
                    f(&mut m);
                    if m.versions.last() != Some(&a.seq) {
                        m.versions.push(a.seq);
                    }
                    ov.insert(key, enc(&m));
                    finals.insert(*id, m);
                }
                Ok(())
            };
        match a.event {
            Event::MemoryCreated(e) => {
                let key = prefixed(b'm', &[e.memory_id.as_bytes()]);
                if ov.get(&key)?.is_none() {
                    let m = StoredMemory {
                        id: e.memory_id,
                        tenant_id: e.tenant_id,
                        content: e.content.clone(),
                        memory_type: e.memory_type,
                        importance: e.importance,
                        created_at: e.created_at,
                        updated_at: e.created_at,
                        model: e.model.clone(),
                        vector: Vec::new(),
                        versions: vec![a.seq],
                        deleted_at: None,
                        vector_seq: a.seq,
                    };
                    ov.insert(key, enc(&m));
                    finals.insert(e.memory_id, m);
                    vectors.insert(e.memory_id, a.seq);
                }
            }
            Event::MemoryUpdated(e) => {
                let mut new_vector = false;
                update(ov, &e.memory_id, &mut |m| {
                    if let Some(c) = &e.content {
                        m.content = c.clone();
                    }
                    if let Some(i) = e.importance {
                        m.importance = i;
                    }
                    if let (Some(model), Some(_)) = (&e.model, &e.vector) {
                        m.model = model.clone();
                        m.vector = Vec::new();
                        m.vector_seq = a.seq;
                        new_vector = true;
                    }
                    m.updated_at = e.updated_at;
                })?;
                if new_vector {
                    vectors.insert(e.memory_id, a.seq);
                }
            }
            Event::MemoryDeleted(e) => {
                update(ov, &e.memory_id, &mut |m| m.deleted_at = Some(e.deleted_at))?
            }
            Event::MemoriesDeletedByType(e) => {
                for id in &e.memory_ids {
                    update(ov, id, &mut |m| m.deleted_at = Some(e.deleted_at))?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The vector bytes carried by the event at `seq` among `events` (ascending seqs).
fn vector_in<'e>(events: &'e [Applied<'_>], seq: u64) -> Option<&'e [u8]> {
    let i = events.binary_search_by_key(&seq, |a| a.seq).ok()?;
    match events[i].event {
        Event::MemoryCreated(e) => Some(&e.vector),
        Event::MemoryUpdated(e) => e.vector.as_deref(),
        _ => None,
    }
}

impl Projection for Memories {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        let mut finals: FastMap<Uuid, StoredMemory> = FastMap::default();
        let mut new_vectors: FastMap<Uuid, u64> = FastMap::default();
        let Some((ov, last)) = fold_new(&self.tree, TREE, events, |ov, a| {
            Self::fold(ov, &mut finals, &mut new_vectors, a)
        })?
        else {
            return Ok(());
        };
        ov.commit(last)?;
        let mut mem = self.mem.write().unwrap_or_else(|p| p.into_inner());
        for m in finals.into_values() {
            let t = mem.entry(m.tenant_id).or_default();
            if m.deleted_at.is_some() {
                t.drop_memory(&m.id);
            } else {
                let vector = new_vectors
                    .get(&m.id)
                    .and_then(|seq| vector_in(events, *seq))
                    .map(vector_from_bytes);
                t.put(&m, vector.as_deref());
            }
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        self.mem.write().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{
        vector_to_bytes, MemoriesDeletedByType, MemoryCreated, MemoryDeleted, MemoryUpdated,
    };

    fn created(tenant: Uuid, id: u128, ty: MemoryType, v: [f32; 2], at: i64) -> Event {
        Event::MemoryCreated(MemoryCreated {
            memory_id: Uuid::from_u128(id),
            tenant_id: tenant,
            content: format!("memory {id}"),
            memory_type: ty,
            importance: 0.5,
            created_at: at,
            model: "m".into(),
            vector: vector_to_bytes(&v),
        })
    }

    #[test]
    fn given_memory_events_then_lists_search_and_history_follow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Memories::open(&db, &|_| Ok(None)).expect("open");
        let (t, other) = (Uuid::from_u128(100), Uuid::from_u128(200));
        let events = [
            created(t, 1, MemoryType::Rule, [1.0, 0.0], 10),
            created(t, 2, MemoryType::Fact, [0.0, 1.0], 20),
            created(t, 3, MemoryType::Fact, [0.6, 0.8], 30),
            created(other, 4, MemoryType::Fact, [1.0, 0.0], 40),
            Event::MemoryUpdated(MemoryUpdated {
                memory_id: Uuid::from_u128(2),
                tenant_id: t,
                content: Some("changed".into()),
                importance: Some(0.9),
                updated_at: 50,
                model: Some("m".into()),
                vector: Some(vector_to_bytes(&[1.0, 0.0])),
            }),
            Event::MemoryDeleted(MemoryDeleted {
                memory_id: Uuid::from_u128(1),
                tenant_id: t,
                deleted_at: 60,
            }),
        ];
        let applied = Applied::in_order(&events);
        p.apply(&applied[..3]).expect("apply");
        p.apply(&applied).expect("apply overlapping");

        let (total, page) = p.list(&t, None, 0, 10);
        assert_eq!(total, 2);
        assert_eq!(
            page.iter().map(|m| m.id.as_u128()).collect::<Vec<_>>(),
            vec![3, 2]
        );
        assert_eq!(p.list(&t, Some(MemoryType::Rule), 0, 10).0, 0);
        let hits = p.search(&t, &[1.0, 0.0], None, 0.0, 5);
        assert_eq!(
            hits[0].0.id.as_u128(),
            2,
            "the re-embedded memory now matches best"
        );
        assert_eq!(hits[0].0.content, "changed");
        assert!(
            p.search(&t, &[1.0, 0.0], None, 0.0, 5)
                .iter()
                .all(|(m, _)| m.id.as_u128() != 4),
            "no other tenant's memory"
        );
        assert_eq!(
            p.stored(&Uuid::from_u128(2))
                .expect("read")
                .expect("stored")
                .versions,
            vec![2, 5]
        );
        assert_eq!(
            p.stored(&Uuid::from_u128(1))
                .expect("read")
                .expect("stored")
                .deleted_at,
            Some(60)
        );
        assert_eq!(p.get(&t, &Uuid::from_u128(1)), None);

        let batch = Event::MemoriesDeletedByType(MemoriesDeletedByType {
            tenant_id: t,
            memory_type: MemoryType::Fact,
            memory_ids: p.ids_of_type(&t, MemoryType::Fact),
            deleted_at: 70,
        });
        p.apply(&[Applied::at(7, &batch)]).expect("apply");
        assert_eq!(p.count(&t), 0);
        assert_eq!(p.count(&other), 1);
        drop(p);
        // Reopening reads each live memory's vector back from "the log" (here: the events).
        let from_log = |seq: u64| -> std::result::Result<Option<Vec<u8>>, String> {
            Ok(match events.get(seq as usize - 1) {
                Some(Event::MemoryCreated(e)) => Some(e.vector.clone()),
                Some(Event::MemoryUpdated(e)) => e.vector.clone(),
                _ => None,
            })
        };
        let p = Memories::open(&db, &from_log).expect("reopen");
        assert_eq!((p.count(&t), p.count(&other)), (0, 1));
        let hits = p.search(&other, &[1.0, 0.0], None, 0.0, 5);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0.id.as_u128(), 4);
        assert!((hits[0].1.score - 1.0).abs() < 1e-6, "{:?}", hits[0].1);
        // A vector the log does not have is a clear error, not an empty table.
        assert!(Memories::open(&db, &|_| Ok(None)).is_err());
    }
}
