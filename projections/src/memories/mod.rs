//! The memory store and its vector tables, folded from `MemoryCreated`, `MemoryUpdated`,
//! `MemoryDeleted` and `MemoriesDeletedByType`.
//!
//! In memory: every memory ever created with its current state, held compact (type,
//! importance, times, the model, where its content is in an unlinked file of the spill
//! directory (see [`crate::texts`]), the seq of the event holding its current vector, the
//! seqs of every event that changed it, and `deleted_at` once deleted: a deleted memory
//! answers nothing but its history), and per tenant the order of its live memories by
//! creation, each with its type, and its [`VectorTable`](crate::vector_table::VectorTable).
//!
//! Tree `proj_memories` persists the states in blocks of a few hundred, written per batch and
//! compacted so the tree stays within 4x of the live data. The vector itself is not copied
//! into the tree: it stays in its log record, like an audit entry, and is read from there
//! (through a [`VectorSource`]) when the tables are rebuilt at open.
//!
//! - `state`: the packed per-memory state (`Kept`, `Home`, `Interned`, `Names`, `State`);
//! - `block`: the stored block format, reading it at open, and compaction;
//! - `tenant`: the per-tenant indexes and vector tables, and their rebuild at open;
//! - `apply`: the [`Projection`](crate::projection::Projection) impl (fold, plan, land);
//! - here: [`Memories`] and its queries.

use std::io;
use std::sync::{RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::MemoryType;
use crate::projection::Result;
use crate::vector_table::{Hit, Spill};

mod apply;
mod block;
mod state;
mod tenant;
#[cfg(test)]
mod tests;

use state::State;

pub const TREE: &str = "proj_memories";

/// A memory's state as stored in the tree's blocks, and as its history reads it.
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
    /// A vector copied in by an older build; this build writes it empty (see `vector_seq`).
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

/// The memories projection: tree `proj_memories` and the in-memory state folded from it.
pub struct Memories {
    tree: sled::Tree,
    state: RwLock<State>,
}

/// [`Memories`]' in-memory part, detached from its tree.
pub struct Detached(State);

impl Memories {
    /// The in-memory state without the tree handle (see `Projections::detach`).
    pub fn detach(self) -> Detached {
        Detached(self.state.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn attach(db: &sled::Db, d: Detached) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
            state: RwLock::new(d.0),
        })
    }

    /// Opens the store over `db`, reading each live memory's vector through `vectors`; large
    /// tenants' f32 rows go to files as `spill` says (none: every row stays on the heap).
    pub fn open(db: &sled::Db, vectors: VectorSource<'_>, spill: Option<Spill>) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut state = State::new(spill);
        block::read_states(&tree, &mut state)?;
        state.tenants = tenant::read_tenants(&state, vectors)?;
        Ok(Self {
            tree,
            state: RwLock::new(state),
        })
    }

    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A live memory of the tenant.
    pub fn get(&self, tenant: &Uuid, id: &Uuid) -> io::Result<Option<MemoryView>> {
        let state = self.state();
        state
            .live(tenant, id)
            .map(|m| state.names.view(*id, m))
            .transpose()
    }

    /// The stored record, live or deleted, of any tenant (history reads it).
    pub fn stored(&self, id: &Uuid) -> Result<Option<StoredMemory>> {
        let state = self.state();
        Ok(state
            .all
            .get(id)
            .map(|k| state.names.stored(*id, k))
            .transpose()?)
    }

    /// Newest first; returns (total, page).
    pub fn list(
        &self,
        tenant: &Uuid,
        memory_type: Option<MemoryType>,
        offset: usize,
        limit: usize,
    ) -> io::Result<(usize, Vec<MemoryView>)> {
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok((0, Vec::new()));
        };
        let total = match memory_type {
            None => t.order.len(),
            Some(ty) => t.per_type[ty as usize],
        };
        let page = t
            .order
            .iter()
            .rev()
            .filter(|(_, ty)| memory_type.is_none_or(|want| **ty == want))
            .skip(offset)
            .take(limit)
            .filter_map(|((_, id), _)| state.live(tenant, id).map(|m| state.names.view(*id, m)))
            .collect::<io::Result<_>>()?;
        Ok((total, page))
    }

    /// Ids of the tenant's live memories of a type.
    pub fn ids_of_type(&self, tenant: &Uuid, memory_type: MemoryType) -> Vec<Uuid> {
        self.state()
            .tenants
            .get(tenant)
            .map(|t| {
                t.order
                    .iter()
                    .filter(|(_, ty)| **ty == memory_type)
                    .map(|((_, id), _)| *id)
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn count(&self, tenant: &Uuid) -> usize {
        self.state()
            .tenants
            .get(tenant)
            .map(|t| t.order.len())
            .unwrap_or(0)
    }

    /// Memories held in memory (live and deleted, whose history stays readable) and the
    /// bytes of every tenant's vector table.
    pub fn footprint(&self) -> (usize, usize) {
        let state = self.state();
        let vectors = state.tenants.values().map(|t| t.vectors.heap_bytes()).sum();
        (state.all.len(), vectors)
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
    ) -> std::io::Result<Vec<(MemoryView, Hit)>> {
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok(Vec::new());
        };
        t.vectors
            .search_fast(query, memory_type, min_similarity, k)?
            .into_iter()
            .filter_map(|h| {
                state
                    .live(tenant, &h.id)
                    .map(|m| state.names.view(h.id, m).map(|v| (v, h)))
            })
            .collect()
    }

    /// The most similar live memory of the tenant (of a type, if given) and its cosine.
    pub fn nearest(
        &self,
        tenant: &Uuid,
        query: &[f32],
        memory_type: Option<MemoryType>,
    ) -> std::io::Result<Option<(Uuid, f32)>> {
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok(None);
        };
        // Similarity alone: importance must not decide what counts as a duplicate.
        t.vectors.most_similar(query, memory_type)
    }
}
