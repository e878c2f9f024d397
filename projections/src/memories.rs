//! The memory store and its vector table, folded from `MemoryCreated`, `MemoryUpdated`,
//! `MemoryDeleted` and `MemoriesDeletedByType`.
//!
//! In memory: every memory ever created with its current state, a [`StoredMemory`] held compact
//! (type, importance, times, the model, where its content is in an unlinked file of the spill
//! directory (see [`crate::texts`]), the seq of the event holding its current
//! vector, the seqs of every event that changed it, and `deleted_at` once deleted: a deleted
//! memory answers nothing but its history), and per tenant the order of its live memories by
//! creation, each with its type, and its [`VectorTable`].
//!
//! Tree `proj_memories` persists the states in blocks: each `apply` writes the states it
//! changed as `b|last seq|part` → up to [`BLOCK_STATES`] states, one sled value per few
//! hundred memories instead of one per memory (a sled insert costs ~10 µs here, as much as
//! the whole budget of a replayed event). Opening reads the blocks in order, later states
//! replacing earlier ones. A block whose states were all superseded is removed in the batch
//! that superseded the last; one that falls below a quarter current has its current states
//! carried into the batch being written, so the tree stays within 4x of the live data.
//! (Trees written by older builds hold one `m|id` key per memory; they are read as the
//! oldest states and removed as their memories change.)
//!
//! The vector itself is not copied into the tree: it stays in its log record, like an audit
//! entry, and is read from there (through a [`VectorSource`]) when the table is rebuilt at open.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::io;
use std::sync::{RwLock, RwLockReadGuard};
use strum::VariantArray as _;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{vector_from_bytes, Event, MemoryType};
use crate::overlay::{fold_new, prefixed, Overlay};
use crate::projection::{corrupt, Applied, Projection, Result};
use crate::texts::{TextRef, Texts};
use crate::vector_table::{Hit, Spill, VectorTable};
use crate::{FastMap, FastSet};

pub const TREE: &str = "proj_memories";

/// States per block value: ~250 bytes each, so a block stays well below sled's large-value
/// threshold while a replay writes a few hundred values per 100,000 memories.
const BLOCK_STATES: usize = 256;

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

/// A block: the seq of the last event of the batch that wrote it, and its part number.
type BlockId = (u64, u32);

fn block_key((seq, part): BlockId) -> Vec<u8> {
    prefixed(b'b', &[&seq.to_be_bytes(), &part.to_be_bytes()])
}

fn block_id(key: &[u8]) -> Result<BlockId> {
    match key {
        [b'b', rest @ ..] if rest.len() == 12 => {
            let (seq, part) = rest.split_at(8);
            let seq = u64::from_be_bytes(seq.try_into().unwrap_or_default());
            let part = u32::from_be_bytes(part.try_into().unwrap_or_default());
            Ok((seq, part))
        }
        _ => Err(corrupt(TREE, format!("block key of {} bytes", key.len()))),
    }
}

/// Where a memory's current state is persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Home {
    /// An `m|id` key of an older build.
    Single,
    Block(BlockId),
}

/// `Kept::home_part` of a memory whose home is [`Home::Single`]: a block's part numbers count
/// from 0 by [`BLOCK_STATES`] states, so they never reach it.
const SINGLE_PART: u32 = u32::MAX;

/// `Kept::deleted_at` of a live memory: no event carries this time.
const NOT_DELETED: i64 = i64::MIN;

/// A memory as held in memory: [`StoredMemory`] without its id (the key it is held under) and
/// without its content (in [`Names::texts`], off the heap), in 96 bytes and two allocations
/// (itself and its versions). Held once per memory ever created, so every field counts 100,000
/// times over in the soak's seed: the tenant and the model are indexes into [`Names`] (each
/// held once however many memories share it), the home and the deletion time are packed
/// without an enum's tag, and an older build's copy of the vector lives beside
/// (`Names::old_vectors`), not in every state. Before this layout (160 bytes and the content
/// on the heap) `examples/heap_per_memory.rs` measured the store's heap without the vector
/// tables at 501 bytes a memory; docs/RELIABILITY.md ("Seventh session") has it now.
struct Kept {
    /// Where the content is in [`Names::texts`].
    text_at: u64,
    versions: Box<[u64]>,
    importance: f64,
    created_at: i64,
    updated_at: i64,
    /// [`NOT_DELETED`] while live.
    deleted_at: i64,
    vector_seq: u64,
    home_seq: u64,
    /// [`SINGLE_PART`] for [`Home::Single`].
    home_part: u32,
    tenant: u32,
    model: u32,
    text_len: u32,
    memory_type: MemoryType,
}

impl Kept {
    fn home(&self) -> Home {
        if self.home_part == SINGLE_PART {
            Home::Single
        } else {
            Home::Block((self.home_seq, self.home_part))
        }
    }

    fn set_home(&mut self, home: Home) {
        (self.home_seq, self.home_part) = match home {
            Home::Single => (0, SINGLE_PART),
            Home::Block(b) => b,
        };
    }

    fn is_deleted(&self) -> bool {
        self.deleted_at != NOT_DELETED
    }

    fn text(&self) -> TextRef {
        TextRef {
            at: self.text_at,
            len: self.text_len,
        }
    }
}

/// What the memories' states share: tenants and models, each held once and named in a
/// [`Kept`] by index, the contents (off the heap, see [`Texts`]), and the vectors older builds
/// copied into their records.
/// Values held once each, named by their index in the order they were first seen.
struct Interned<T> {
    values: Vec<T>,
    index: HashMap<T, u32>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<T: Eq + Hash> Interned<T> {
    fn index_of<Q>(&mut self, value: &Q) -> u32
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = T> + ?Sized,
    {
        if let Some(&i) = self.index.get(value) {
            return i;
        }
        let i = self.values.len() as u32;
        self.values.push(value.to_owned());
        self.index.insert(value.to_owned(), i);
        i
    }

    fn get(&self, i: u32) -> Option<&T> {
        self.values.get(i as usize)
    }
}

#[derive(Default)]
struct Names {
    texts: Texts,
    tenants: Interned<Uuid>,
    models: Interned<String>,
    /// `StoredMemory::vector` of an older build's record, by memory, until the memory changes.
    old_vectors: BTreeMap<Uuid, Box<[u8]>>,
}

impl Names {
    /// The tenant named by a [`Kept`]'s index; indexes are only handed out by
    /// [`Interned::index_of`], so the nil id (no tenant's) is never given back in practice.
    fn tenant(&self, i: u32) -> Uuid {
        self.tenants.get(i).copied().unwrap_or_default()
    }

    /// `m` as held in memory; its content is appended to the texts unless `text` says where
    /// the same content already is.
    fn keep(&mut self, m: StoredMemory, home: Home, text: Option<TextRef>) -> Box<Kept> {
        if m.vector.is_empty() {
            // Taken out once a later state (which never carries one) replaces it.
            self.old_vectors.remove(&m.id);
        } else {
            self.old_vectors.insert(m.id, m.vector.into_boxed_slice());
        }
        let text = text.unwrap_or_else(|| self.texts.push(&m.content));
        let mut kept = Box::new(Kept {
            tenant: self.tenants.index_of(&m.tenant_id),
            model: self.models.index_of(m.model.as_str()),
            text_at: text.at,
            text_len: text.len,
            versions: m.versions.into_boxed_slice(),
            importance: m.importance,
            created_at: m.created_at,
            updated_at: m.updated_at,
            deleted_at: m.deleted_at.unwrap_or(NOT_DELETED),
            vector_seq: m.vector_seq,
            home_seq: 0,
            home_part: SINGLE_PART,
            memory_type: m.memory_type,
        });
        kept.set_home(home);
        kept
    }

    fn view(&self, id: Uuid, k: &Kept) -> io::Result<MemoryView> {
        Ok(MemoryView {
            id,
            content: self.texts.read(k.text())?,
            memory_type: k.memory_type,
            importance: k.importance,
            created_at: k.created_at,
            updated_at: k.updated_at,
        })
    }

    fn stored(&self, id: Uuid, k: &Kept) -> io::Result<StoredMemory> {
        Ok(StoredMemory {
            id,
            tenant_id: self.tenant(k.tenant),
            content: self.texts.read(k.text())?,
            memory_type: k.memory_type,
            importance: k.importance,
            created_at: k.created_at,
            updated_at: k.updated_at,
            model: self.models.get(k.model).cloned().unwrap_or_default(),
            vector: self
                .old_vectors
                .get(&id)
                .map(|v| v.to_vec())
                .unwrap_or_default(),
            versions: k.versions.to_vec(),
            deleted_at: k.is_deleted().then_some(k.deleted_at),
            vector_seq: k.vector_seq,
        })
    }
}

/// What a block holds: how many states were written into it, and how many of them are still
/// their memory's current state. Which memories they are is read from the block itself when
/// compaction needs it (rarely): a group commit writes a block, so the soak holds one per
/// memory it creates, and a list of members in memory was ~60 bytes a memory.
struct BlockUse {
    len: u32,
    current: u32,
}

struct TenantMemories {
    /// The tenant's live memories by creation, each with its type: a list of one type walks
    /// this order and passes over the others, as a page at an offset already walked to it.
    /// (A second B-tree per type cost ~37 bytes a memory, for every memory held.)
    order: BTreeMap<(i64, Uuid), MemoryType>,
    /// Live memories of each type (by `MemoryType as usize`), a typed list's total.
    per_type: [usize; MemoryType::VARIANTS.len()],
    vectors: VectorTable,
}

impl TenantMemories {
    /// The tenant's entry in `tenants`, new ones with a vector table that spills as `spill` says.
    fn of<'a>(
        tenants: &'a mut HashMap<Uuid, TenantMemories>,
        spill: Option<&Spill>,
        id: Uuid,
    ) -> &'a mut TenantMemories {
        tenants.entry(id).or_insert_with(|| Self {
            order: BTreeMap::new(),
            per_type: [0; MemoryType::VARIANTS.len()],
            vectors: spill.map_or_else(VectorTable::default, |s| VectorTable::spilling(s.clone())),
        })
    }

    /// Puts a live memory; `vector` is its new vector, or `None` when it did not change.
    /// Creation time and type never change, so a memory already listed keeps its places.
    fn put(&mut self, id: Uuid, m: &Kept, vector: Option<&[f32]>) -> std::io::Result<()> {
        if self
            .order
            .insert((m.created_at, id), m.memory_type)
            .is_none()
        {
            self.per_type[m.memory_type as usize] += 1;
        }
        match vector {
            Some(v) => {
                self.vectors
                    .upsert(id, v, m.memory_type, m.importance as f32)?;
            }
            None => self.vectors.set_importance(&id, m.importance as f32),
        }
        Ok(())
    }

    fn drop_memory(&mut self, id: Uuid, m: &Kept) -> std::io::Result<()> {
        if let Some(ty) = self.order.remove(&(m.created_at, id)) {
            self.per_type[ty as usize] = self.per_type[ty as usize].saturating_sub(1);
            self.vectors.remove(&id)?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct State {
    /// Every memory ever created, deleted ones too (their history stays readable). A B-tree:
    /// a hash table doubles at once when it fills, which was a 3.3 MB step in RSS at 114,688
    /// memories in the soak (docs/RELIABILITY.md), 30 MB while the ~230-byte states were
    /// inline; a B-tree grows a node at a time. Boxed: a node moves its slots on insert.
    all: BTreeMap<Uuid, Box<Kept>>,
    /// A B-tree for the reason `all` is one: a group commit writes a block, so the soak adds
    /// ~23,000 blocks to the seed's 15,000, and a hash table doubled on the way (a 3 MB step).
    blocks: BTreeMap<BlockId, BlockUse>,
    names: Names,
    tenants: HashMap<Uuid, TenantMemories>,
    /// Where large tenants' vector tables keep their f32 rows (see `vector_table`).
    spill: Option<Spill>,
}

impl State {
    /// An empty state whose large vector tables and contents go where `spill` says.
    fn new(spill: Option<Spill>) -> Self {
        Self {
            names: Names {
                texts: Texts::new(spill.as_ref().map(|s| s.dir.as_path())),
                ..Names::default()
            },
            spill,
            ..Self::default()
        }
    }

    fn tenant(&mut self, id: Uuid) -> &mut TenantMemories {
        TenantMemories::of(&mut self.tenants, self.spill.as_ref(), id)
    }

    fn live(&self, tenant: &Uuid, id: &Uuid) -> Option<&Kept> {
        self.all
            .get(id)
            .map(|k| &**k)
            .filter(|m| !m.is_deleted() && self.names.tenant(m.tenant) == *tenant)
    }
}

pub struct Memories {
    tree: sled::Tree,
    state: RwLock<State>,
}

fn dec(bytes: &[u8]) -> Result<StoredMemory> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("memory: {e}")))
}

fn dec_block(bytes: &[u8]) -> Result<Vec<StoredMemory>> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("memory block: {e}")))
}

/// The ids of a block's states, without decoding the rest of them.
fn dec_members(bytes: &[u8]) -> Result<Vec<Uuid>> {
    #[derive(Deserialize)]
    struct IdOnly {
        id: Uuid,
    }
    let ids: Vec<IdOnly> =
        rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("memory block: {e}")))?;
    Ok(ids.into_iter().map(|m| m.id).collect())
}

fn enc_block(states: &[&StoredMemory]) -> Vec<u8> {
    // Plain structs of strings, numbers and bytes: encoding into a Vec cannot fail.
    rmp_serde::to_vec_named(states).unwrap_or_default()
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
        for kv in tree.scan_prefix([b'm']) {
            let (_, v) = kv?;
            let m = dec(&v)?;
            let id = m.id;
            let kept = state.names.keep(m, Home::Single, None);
            state.all.insert(id, kept);
        }
        // Keys sort by seq, so a later state of a memory replaces an earlier one.
        for kv in tree.scan_prefix([b'b']) {
            let (k, v) = kv?;
            let block = block_id(&k)?;
            let states = dec_block(&v)?;
            let len = states.len() as u32;
            for m in states {
                let id = m.id;
                let kept = state.names.keep(m, Home::Block(block), None);
                state.all.insert(id, kept);
            }
            state.blocks.insert(block, BlockUse { len, current: 0 });
        }
        for kept in state.all.values() {
            if let Home::Block(b) = kept.home() {
                if let Some(u) = state.blocks.get_mut(&b) {
                    u.current += 1;
                }
            }
        }
        // Reading the vectors back from the log is random reads and decoding: on every core.
        let mut live: Vec<(Uuid, &Kept)> = state
            .all
            .iter()
            .map(|(id, k)| (*id, &**k))
            .filter(|(_, m)| !m.is_deleted())
            .collect();
        // In log order: each leaf of the log is paged in once and read in one go. Read in
        // random order, sled kept ~40 MB more of the log's nodes after opening a dir of
        // 100,000 memories (measured: RSS 477 -> 441 MB), though its cache is capped.
        live.sort_unstable_by_key(|(_, m)| m.vector_seq);
        let found: Vec<Result<Vec<f32>>> = live
            .par_iter()
            .map(|(id, m)| {
                if let Some(v) = state.names.old_vectors.get(id) {
                    return Ok(vector_from_bytes(v));
                }
                match vectors(m.vector_seq) {
                    Ok(Some(bytes)) => Ok(vector_from_bytes(&bytes)),
                    Ok(None) => Err(corrupt(
                        TREE,
                        format!(
                            "memory {}: no vector at log seq {} (run `auditmem replay`)",
                            id, m.vector_seq
                        ),
                    )),
                    Err(why) => Err(corrupt(
                        TREE,
                        format!("memory {id}: vector at seq {}: {why}", m.vector_seq),
                    )),
                }
            })
            .collect();
        let mut tenants: HashMap<Uuid, TenantMemories> = HashMap::new();
        for ((id, m), v) in live.iter().zip(found) {
            TenantMemories::of(
                &mut tenants,
                state.spill.as_ref(),
                state.names.tenant(m.tenant),
            )
            .put(*id, m, Some(&v?))?;
        }
        state.tenants = tenants;
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

    /// Folds one event into `finals`, the latest state of each memory the batch touched (what
    /// the stored and in-memory state take once the batch landed); `vectors` records which
    /// event holds each touched memory's new vector, `texts` which were given a content. Reads
    /// only the state before the batch (and contents from the texts file).
    fn fold(
        state: &State,
        finals: &mut FastMap<Uuid, StoredMemory>,
        vectors: &mut FastMap<Uuid, u64>,
        texts: &mut FastSet<Uuid>,
        a: &Applied<'_>,
    ) -> io::Result<()> {
        // Applies `f` to the memory's latest state unless it is deleted or unknown.
        let update = |finals: &mut FastMap<Uuid, StoredMemory>,
                      id: &Uuid,
                      f: &mut dyn FnMut(&mut StoredMemory)|
         -> io::Result<()> {
            if !finals.contains_key(id) {
                let Some(k) = state.all.get(id) else {
                    return Ok(());
                };
                finals.insert(*id, state.names.stored(*id, k)?);
            }
            let Some(current) = finals.get_mut(id) else {
                return Ok(());
            };
            if current.deleted_at.is_some() {
                return Ok(());
            }
            f(current);
            if current.versions.last() != Some(&a.seq) {
                current.versions.push(a.seq);
            }
            Ok(())
        };
        match a.event {
            Event::MemoryCreated(e)
                if !state.all.contains_key(&e.memory_id) && !finals.contains_key(&e.memory_id) =>
            {
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
                finals.insert(e.memory_id, m);
                vectors.insert(e.memory_id, a.seq);
                texts.insert(e.memory_id);
            }
            Event::MemoryUpdated(e) => {
                let mut new_vector = false;
                update(finals, &e.memory_id, &mut |m| {
                    if let Some(c) = &e.content {
                        m.content = c.clone();
                        texts.insert(e.memory_id);
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
            Event::MemoryDeleted(e) => update(finals, &e.memory_id, &mut |m| {
                m.deleted_at = Some(e.deleted_at)
            })?,
            Event::MemoriesDeletedByType(e) => {
                for id in &e.memory_ids {
                    update(finals, id, &mut |m| m.deleted_at = Some(e.deleted_at))?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Plans the blocks of a batch into `ov`: the changed states (`finals`) and any carried by
    /// compaction go into new blocks at `last`; blocks left without a current state are
    /// removed, as are the `m|id` keys of changed older-build records. Returns the moves for
    /// [`Plan::land`], once the batch is stored.
    fn plan(
        tree: &sled::Tree,
        state: &State,
        finals: &FastMap<Uuid, StoredMemory>,
        last: u64,
        ov: &mut Overlay<'_>,
    ) -> Result<Plan> {
        // How many current states leave each block.
        let mut leaving: FastMap<BlockId, usize> = FastMap::default();
        for id in finals.keys() {
            match state.all.get(id).map(|k| k.home()) {
                Some(Home::Block(b)) => *leaving.entry(b).or_default() += 1,
                Some(Home::Single) => ov.remove(prefixed(b'm', &[id.as_bytes()])),
                None => {}
            }
        }
        // Compaction: a block dropping below a quarter current hands over the rest.
        let mut carried: Vec<Uuid> = Vec::new();
        let mut emptied = Vec::new();
        for (&b, &n) in &leaving {
            let Some(u) = state.blocks.get(&b) else {
                continue;
            };
            let left = (u.current as usize).saturating_sub(n);
            if left > 0 && left * 4 < u.len as usize {
                let Some(bytes) = tree.get(block_key(b))? else {
                    return Err(corrupt(
                        TREE,
                        format!("block {b:?} is counted but not stored"),
                    ));
                };
                carried.extend(dec_members(&bytes)?.into_iter().filter(|id| {
                    !finals.contains_key(id)
                        && state.all.get(id).map(|k| k.home()) == Some(Home::Block(b))
                }));
                emptied.push(b);
            } else if left == 0 {
                emptied.push(b);
            }
        }
        for &b in &emptied {
            ov.remove(block_key(b));
        }
        let carried: Vec<StoredMemory> = carried
            .iter()
            .filter_map(|id| state.all.get(id).map(|k| state.names.stored(*id, k)))
            .collect::<io::Result<_>>()?;
        let states: Vec<&StoredMemory> = finals.values().chain(&carried).collect();
        let mut written = Vec::new();
        for (part, chunk) in states.chunks(BLOCK_STATES).enumerate() {
            let b = (last, part as u32);
            ov.insert(block_key(b), enc_block(chunk));
            written.push((b, chunk.iter().map(|m| m.id).collect()));
        }
        Ok(Plan {
            leaving,
            emptied,
            written,
        })
    }
}

/// The block moves of one batch, applied to memory once the batch is stored.
struct Plan {
    leaving: FastMap<BlockId, usize>,
    emptied: Vec<BlockId>,
    written: Vec<(BlockId, Box<[Uuid]>)>,
}

impl Plan {
    fn land(self, state: &mut State) {
        for (b, n) in self.leaving {
            if let Some(u) = state.blocks.get_mut(&b) {
                u.current = u.current.saturating_sub(n as u32);
            }
        }
        for b in self.emptied {
            state.blocks.remove(&b);
        }
        for (b, members) in self.written {
            for id in &members {
                if let Some(k) = state.all.get_mut(id) {
                    k.set_home(Home::Block(b));
                }
            }
            let len = members.len() as u32;
            state.blocks.insert(b, BlockUse { len, current: len });
        }
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
        let mut new_texts: FastSet<Uuid> = FastSet::default();
        // `apply` is the only writer, so the state read here is still current when the batch
        // lands below.
        let (ov, last, plan) = {
            let state = self.state();
            let Some((mut ov, last)) = fold_new(&self.tree, TREE, events, |_, a| {
                Self::fold(&state, &mut finals, &mut new_vectors, &mut new_texts, a)?;
                Ok(())
            })?
            else {
                return Ok(());
            };
            let plan = Self::plan(&self.tree, &state, &finals, last, &mut ov)?;
            (ov, last, plan)
        };
        ov.commit(last)?;
        let mut guard = self.state.write().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        for m in finals.into_values() {
            let id = m.id;
            // The home is set by the plan; a new memory starts without one.
            let tenant = m.tenant_id;
            let before = state.all.get(&id);
            let home = before.map_or(Home::Single, |k| k.home());
            // A content that did not change stays where it is in the texts file.
            let text = before
                .filter(|_| !new_texts.contains(&id))
                .map(|k| k.text());
            let kept = state.names.keep(m, home, text);
            let t = state.tenant(tenant);
            if kept.is_deleted() {
                t.drop_memory(id, &kept)?;
            } else {
                let vector = new_vectors
                    .get(&id)
                    .and_then(|seq| vector_in(events, *seq))
                    .map(vector_from_bytes);
                t.put(id, &kept, vector.as_deref())?;
            }
            state.all.insert(id, kept);
        }
        plan.land(state);
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        *state = State::new(state.spill.take());
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
        let p = Memories::open(&db, &|_| Ok(None), None).expect("open");
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

        let (total, page) = p.list(&t, None, 0, 10).expect("list");
        assert_eq!(total, 2);
        assert_eq!(
            page.iter().map(|m| m.id.as_u128()).collect::<Vec<_>>(),
            vec![3, 2]
        );
        assert_eq!(
            p.list(&t, Some(MemoryType::Rule), 0, 10).expect("list").0,
            0
        );
        let hits = p.search(&t, &[1.0, 0.0], None, 0.0, 5).expect("search");
        assert_eq!(
            hits[0].0.id.as_u128(),
            2,
            "the re-embedded memory now matches best"
        );
        assert_eq!(hits[0].0.content, "changed");
        assert!(
            p.search(&t, &[1.0, 0.0], None, 0.0, 5)
                .expect("search")
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
        assert_eq!(p.get(&t, &Uuid::from_u128(1)).expect("get"), None);

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
        let from_log = log_of(&events);
        let p = Memories::open(&db, &from_log, None).expect("reopen");
        assert_eq!((p.count(&t), p.count(&other)), (0, 1));
        let hits = p.search(&other, &[1.0, 0.0], None, 0.0, 5).expect("search");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].0.id.as_u128(), 4);
        assert!((hits[0].1.score - 1.0).abs() < 1e-6, "{:?}", hits[0].1);
        // A vector the log does not have is a clear error, not an empty table.
        assert!(Memories::open(&db, &|_| Ok(None), None).is_err());
    }

    #[test]
    fn state_detached_and_attached_to_the_reopened_database_answers_and_takes_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Memories::open(&db, &|_| Ok(None), None).expect("open");
        let t = Uuid::from_u128(100);
        let events = [
            created(t, 1, MemoryType::Rule, [1.0, 0.0], 10),
            created(t, 2, MemoryType::Fact, [0.0, 1.0], 20),
            Event::MemoryDeleted(MemoryDeleted {
                memory_id: Uuid::from_u128(1),
                tenant_id: t,
                deleted_at: 30,
            }),
        ];
        let applied = Applied::in_order(&events);
        p.apply(&applied[..2]).expect("apply");
        // Given the state detached, the database closed and opened again,
        let detached = p.detach();
        drop(db);
        let db = sled::open(dir.path()).expect("reopen");
        let p = Memories::attach(&db, detached).expect("attach");
        // then it answers as before, without reading anything back,
        assert_eq!(p.count(&t), 2);
        let hits = p.search(&t, &[0.0, 1.0], None, 0.0, 5).expect("search");
        assert_eq!(hits[0].0.id.as_u128(), 2);
        // and takes later events into the reopened tree.
        p.apply(&applied).expect("apply after attach");
        assert_eq!(p.count(&t), 1);
        assert_eq!(p.checkpoint().expect("checkpoint"), 3);
        drop(p);
        let from_log = log_of(&events);
        let p = Memories::open(&db, &from_log, None).expect("open from the tree");
        assert_eq!(p.count(&t), 1);
        assert_eq!(p.get(&t, &Uuid::from_u128(1)).expect("get"), None);
    }

    /// States stored in the tree's blocks, and how many blocks hold them.
    fn stored_states(db: &sled::Db) -> (usize, usize) {
        let tree = db.open_tree(TREE).expect("tree");
        let mut states = 0;
        let mut blocks = 0;
        for kv in tree.scan_prefix([b'b']) {
            let (_, v) = kv.expect("read");
            states += dec_block(&v).expect("block").len();
            blocks += 1;
        }
        (states, blocks)
    }

    #[test]
    fn updates_supersede_block_states_and_compaction_bounds_the_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        // Contents in a file of the dir, as in the service (the rows on the heap).
        let p = Memories::open(&db, &|_| Ok(None), texts_in(dir.path())).expect("open");
        let t = Uuid::from_u128(100);
        let mut events: Vec<Event> = (0..600)
            .map(|i| created(t, i, MemoryType::Fact, [1.0, i as f32], i as i64))
            .collect();
        for i in 0..500u128 {
            events.push(Event::MemoryUpdated(MemoryUpdated {
                memory_id: Uuid::from_u128(i),
                tenant_id: t,
                content: Some(format!("updated {i}")),
                importance: Some(0.25),
                updated_at: 1_000 + i as i64,
                model: None,
                vector: None,
            }));
        }
        let applied = Applied::in_order(&events);
        // All creations in one batch (three blocks), then one update per batch.
        p.apply(&applied[..600]).expect("apply");
        assert_eq!(stored_states(&db), (600, 3));
        for a in &applied[600..] {
            p.apply(std::slice::from_ref(a)).expect("apply");
        }
        let (states, blocks) = stored_states(&db);
        assert!(states <= 4 * 600, "{states} states stored for 600 memories");
        assert!(blocks < 600, "{blocks} blocks");

        let before: Vec<StoredMemory> = (0..600)
            .map(|i| p.stored(&Uuid::from_u128(i)).expect("read").expect("kept"))
            .collect();
        assert_eq!(before[7].content, "updated 7");
        assert_eq!(before[7].versions, vec![8, 608]);
        assert_eq!(before[599].content, "memory 599");
        let listed = p.list(&t, None, 0, 600).expect("list");
        drop(p);
        let from_log = log_of(&events);
        let p = Memories::open(&db, &from_log, texts_in(dir.path())).expect("reopen");
        assert!(p.state().names.texts.in_file() > 0, "contents in the file");
        for (i, want) in before.iter().enumerate() {
            let got = p.stored(&Uuid::from_u128(i as u128)).expect("read");
            assert_eq!(got.as_ref(), Some(want), "memory {i} after reopening");
        }
        assert_eq!(p.list(&t, None, 0, 600).expect("list"), listed);
        assert_eq!(
            p.search(&t, &[1.0, 0.0], None, 0.0, 600)
                .expect("search")
                .len(),
            600
        );
    }

    /// "The log" of `events` for reopening: the vector of the memory event at a seq (the
    /// events' seqs counting from 1).
    fn log_of(
        events: &[Event],
    ) -> impl Fn(u64) -> std::result::Result<Option<Vec<u8>>, String> + Sync + '_ {
        |seq| {
            Ok(
                match seq.checked_sub(1).and_then(|i| events.get(i as usize)) {
                    Some(Event::MemoryCreated(e)) => Some(e.vector.clone()),
                    Some(Event::MemoryUpdated(e)) => e.vector.clone(),
                    _ => None,
                },
            )
        }
    }

    /// A spill setting that keeps vector rows on the heap and contents in a file in `dir`.
    fn texts_in(dir: &std::path::Path) -> Option<Spill> {
        Some(Spill {
            dir: dir.to_path_buf(),
            rows: 0,
        })
    }

    #[test]
    fn a_content_is_written_to_the_texts_once_until_it_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Memories::open(&db, &|_| Ok(None), texts_in(dir.path())).expect("open");
        let t = Uuid::from_u128(100);
        let id = Uuid::from_u128(1);
        let first = created(t, 1, MemoryType::Fact, [1.0, 0.0], 10);
        p.apply(&[Applied::at(1, &first)]).expect("apply");
        let written = p.state().names.texts.len();
        assert_eq!(written, "memory 1".len() as u64);
        // Importance-only updates leave the content where it is,
        let updates: Vec<Event> = (0..300)
            .map(|i| {
                Event::MemoryUpdated(MemoryUpdated {
                    memory_id: id,
                    tenant_id: t,
                    content: None,
                    importance: Some(f64::from(i) / 300.0),
                    updated_at: 20 + i64::from(i),
                    model: None,
                    vector: None,
                })
            })
            .collect();
        for (i, e) in updates.iter().enumerate() {
            p.apply(&[Applied::at(2 + i as u64, e)]).expect("apply");
        }
        assert_eq!(p.state().names.texts.len(), written);
        // a new content is appended and shown,
        let changed = Event::MemoryUpdated(MemoryUpdated {
            memory_id: id,
            tenant_id: t,
            content: Some("x".repeat(500)),
            importance: None,
            updated_at: 1_000,
            model: None,
            vector: None,
        });
        p.apply(&[Applied::at(400, &changed)]).expect("apply");
        assert_eq!(p.state().names.texts.len(), written + 500);
        assert!(p.state().names.texts.in_file() > 0, "contents in the file");
        let shown = p.get(&t, &id).expect("get").expect("live");
        assert_eq!(shown.content, "x".repeat(500));
        assert_eq!(shown.importance, 299.0 / 300.0);
        // and the stored state carries it across a reopen.
        drop(p);
        let from_log = log_of(std::slice::from_ref(&first));
        let p = Memories::open(&db, &from_log, texts_in(dir.path())).expect("reopen");
        let stored = p.stored(&id).expect("read").expect("kept");
        assert_eq!(stored.content, "x".repeat(500));
        assert_eq!(stored.versions.len(), 302);
    }

    #[test]
    fn a_typed_list_pages_through_its_type_only_with_its_own_total() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let p = Memories::open(&db, &|_| Ok(None), None).expect("open");
        let t = Uuid::from_u128(100);
        // Ids 0..9 created at times 0..9; every third a rule, the rest facts.
        let ty = |i: u128| match i % 3 {
            0 => MemoryType::Rule,
            _ => MemoryType::Fact,
        };
        let mut events: Vec<Event> = (0..10)
            .map(|i| created(t, i, ty(i), [1.0, i as f32], i as i64))
            .collect();
        events.push(Event::MemoryDeleted(MemoryDeleted {
            memory_id: Uuid::from_u128(6),
            tenant_id: t,
            deleted_at: 100,
        }));
        p.apply(&Applied::in_order(&events)).expect("apply");
        let ids = |page: Vec<MemoryView>| page.iter().map(|m| m.id.as_u128()).collect::<Vec<_>>();

        let (total, page) = p.list(&t, Some(MemoryType::Rule), 0, 2).expect("list");
        assert_eq!((total, ids(page)), (3, vec![9, 3]));
        let (total, page) = p.list(&t, Some(MemoryType::Rule), 2, 2).expect("list");
        assert_eq!((total, ids(page)), (3, vec![0]));
        let (total, page) = p.list(&t, Some(MemoryType::Fact), 1, 3).expect("list");
        assert_eq!((total, ids(page)), (6, vec![7, 5, 4]));
        assert_eq!(
            p.list(&t, Some(MemoryType::Context), 0, 10).expect("list"),
            (0, Vec::new())
        );
        assert_eq!(p.list(&t, None, 0, 100).expect("list").0, 9);
        let mut rules = p.ids_of_type(&t, MemoryType::Rule);
        rules.sort();
        assert_eq!(rules, [0, 3, 9].map(Uuid::from_u128).to_vec());
    }

    #[test]
    fn a_kept_memory_stays_compact() {
        // What every memory ever created costs in memory (see `Kept`): a field added here
        // is paid 100,000 times over by the soak's seed.
        assert!(
            std::mem::size_of::<Kept>() <= 96,
            "{}",
            std::mem::size_of::<Kept>()
        );
    }

    #[test]
    fn records_of_an_older_build_are_read_and_replaced_when_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let t = Uuid::from_u128(100);
        let first = created(t, 1, MemoryType::Rule, [1.0, 0.0], 10);
        let Event::MemoryCreated(c) = &first else {
            unreachable!()
        };
        let old = StoredMemory {
            id: c.memory_id,
            tenant_id: t,
            content: c.content.clone(),
            memory_type: c.memory_type,
            importance: c.importance,
            created_at: c.created_at,
            updated_at: c.created_at,
            model: c.model.clone(),
            // Older builds copied the vector in.
            vector: c.vector.clone(),
            versions: vec![1],
            deleted_at: None,
            vector_seq: 0,
        };
        let tree = db.open_tree(TREE).expect("tree");
        let key = prefixed(b'm', &[c.memory_id.as_bytes()]);
        tree.insert(&key, rmp_serde::to_vec_named(&old).expect("encode"))
            .expect("insert");
        tree.insert(crate::projection::CHECKPOINT_KEY, &1u64.to_be_bytes())
            .expect("checkpoint");

        let p = Memories::open(&db, &|_| Ok(None), None).expect("open");
        assert_eq!(
            p.get(&t, &c.memory_id).expect("get").map(|m| m.content),
            Some(c.content.clone())
        );
        let deleted = Event::MemoryDeleted(MemoryDeleted {
            memory_id: c.memory_id,
            tenant_id: t,
            deleted_at: 20,
        });
        p.apply(&[Applied::at(2, &deleted)]).expect("apply");
        assert_eq!(
            tree.get(&key).expect("read"),
            None,
            "the old record is gone"
        );
        drop(p);
        let p = Memories::open(&db, &|_| Ok(None), None).expect("reopen");
        assert_eq!(p.get(&t, &c.memory_id).expect("get"), None);
        let kept = p.stored(&c.memory_id).expect("read").expect("kept");
        assert_eq!((kept.deleted_at, kept.versions), (Some(20), vec![1, 2]));
    }
}
