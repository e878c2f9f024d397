//! The memory store and its vector table, folded from `MemoryCreated`, `MemoryUpdated`,
//! `MemoryDeleted` and `MemoriesDeletedByType`.
//!
//! Tree `proj_memories`: `m|memory_id` → [`StoredMemory`] (content, type, importance, times,
//! the model and vector, the seqs of every event that changed it, and `deleted_at` once
//! deleted: a deleted memory answers nothing but its history). In memory, per tenant: the
//! live memories, their order (newest first) overall and per type, and the [`VectorTable`].

use std::collections::{BTreeSet, HashMap};
use std::sync::{RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{vector_from_bytes, Event, MemoryType};
use crate::overlay::{fold_new, prefixed, Overlay};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::vector_table::{Hit, VectorTable};

const TREE: &str = "proj_memories";

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
    #[serde(with = "serde_bytes")]
    pub vector: Vec<u8>,
    /// Seqs of the events that created, changed and deleted it, in order.
    pub versions: Vec<u64>,
    pub deleted_at: Option<i64>,
}

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
    fn put(&mut self, m: &StoredMemory) {
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
        self.vectors.upsert(
            m.id,
            &vector_from_bytes(&m.vector),
            m.memory_type,
            m.importance as f32,
        );
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
    pub fn open(db: &sled::Db) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut mem: HashMap<Uuid, TenantMemories> = HashMap::new();
        for kv in tree.scan_prefix([b'm']) {
            let (_, v) = kv?;
            let m = dec(&v)?;
            if m.deleted_at.is_none() {
                mem.entry(m.tenant_id).or_default().put(&m);
            }
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

    /// Exact search over the tenant's vectors; hits with their memories, best first.
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
            .search(query, memory_type, min_similarity, k)
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

    fn fold(ov: &mut Overlay<'_>, touched: &mut Vec<Uuid>, a: &Applied<'_>) -> Result<()> {
        let mut update =
            |ov: &mut Overlay<'_>, id: &Uuid, f: &mut dyn FnMut(&mut StoredMemory)| -> Result<()> {
                let key = prefixed(b'm', &[id.as_bytes()]);
                if let Some(bytes) = ov.get(&key)? {
                    let mut m = dec(&bytes)?;
                    if m.deleted_at.is_some() {
                        return Ok(());
                    }
                    f(&mut m);
                    if m.versions.last() != Some(&a.seq) {
                        m.versions.push(a.seq);
                    }
                    ov.insert(key, enc(&m));
                    touched.push(*id);
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
                        vector: e.vector.clone(),
                        versions: vec![a.seq],
                        deleted_at: None,
                    };
                    ov.insert(key, enc(&m));
                    touched.push(e.memory_id);
                }
            }
            Event::MemoryUpdated(e) => update(ov, &e.memory_id, &mut |m| {
                if let Some(c) = &e.content {
                    m.content = c.clone();
                }
                if let Some(i) = e.importance {
                    m.importance = i;
                }
                if let (Some(model), Some(v)) = (&e.model, &e.vector) {
                    m.model = model.clone();
                    m.vector = v.clone();
                }
                m.updated_at = e.updated_at;
            })?,
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

impl Projection for Memories {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        let mut touched = Vec::new();
        let Some((ov, last)) = fold_new(&self.tree, TREE, events, |ov, a| {
            Self::fold(ov, &mut touched, a)
        })?
        else {
            return Ok(());
        };
        // The final state of each touched memory, read back from the overlay before it lands.
        let mut finals = Vec::with_capacity(touched.len());
        touched.sort();
        touched.dedup();
        for id in &touched {
            if let Some(bytes) = ov.get(&prefixed(b'm', &[id.as_bytes()]))? {
                finals.push(dec(&bytes)?);
            }
        }
        ov.commit(last)?;
        let mut mem = self.mem.write().unwrap_or_else(|p| p.into_inner());
        for m in finals {
            let t = mem.entry(m.tenant_id).or_default();
            if m.deleted_at.is_some() {
                t.drop_memory(&m.id);
            } else {
                t.put(&m);
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
        let p = Memories::open(&db).expect("open");
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
        let applied: Vec<Applied> = events
            .iter()
            .enumerate()
            .map(|(i, e)| Applied {
                seq: i as u64 + 1,
                ts_micros: 0,
                event: e,
                prepared: None,
            })
            .collect();
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
        p.apply(&[Applied {
            seq: 7,
            ts_micros: 0,
            event: &batch,
            prepared: None,
        }])
        .expect("apply");
        assert_eq!(p.count(&t), 0);
        assert_eq!(p.count(&other), 1);
        drop(p);
        let p = Memories::open(&db).expect("reopen");
        assert_eq!((p.count(&t), p.count(&other)), (0, 1));
    }
}
