//! The memories' state as held in memory: every memory ever created, packed ([`Kept`]), what
//! the packed states share ([`Names`]), the stored blocks' use counts and each tenant's
//! indexes ([`State`]).
//!
//! Invariants: `State::all` holds every memory ever created, deleted ones too (their history
//! stays readable); a [`Kept`]'s tenant and model indexes were handed out by its [`Names`]'
//! [`Interned`] tables, and its text range is in `Names::texts`; a live memory (and only a
//! live one) is listed in its tenant's [`TenantMemories`] (its indexes may hold a memory a
//! batch that is still landing dropped, until the batch has landed: see `apply`).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::io;

use uuid::Uuid;

use super::block::{BlockId, BlockUse};
use super::sealing;
use super::tenant::TenantMemories;
use super::{Extra, MemoryView, StoredMemory};
use crate::event::MemoryType;
use crate::seal::Keyring;
use crate::texts::{TextRef, Texts};
use crate::vector_table::Spill;
use crate::FastMap;

/// Where a memory's current state is persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Home {
    /// An `m|id` key of an older build.
    Single,
    Block(BlockId),
}

/// `Kept::home_part` of a memory whose home is [`Home::Single`]: a block's part numbers count
/// from 0 by [`BLOCK_STATES`](super::block::BLOCK_STATES) states, so they never reach it.
const SINGLE_PART: u32 = u32::MAX;

/// `Kept::deleted_at` of a live memory: no event carries this time.
const NOT_DELETED: i64 = i64::MIN;

/// A memory as held in memory: [`StoredMemory`] without its id (the key it is held under) and
/// without its content (in [`Names::texts`], off the heap), in 96 bytes and two allocations
/// (itself and its versions). Held once per memory ever created, so every field counts 100,000
/// times over in the soak's seed: the tenant and the model are indexes into [`Names`] (each
/// held once however many memories share it), the home and the deletion time are packed
/// without an enum's tag, and an older build's copy of the vector lives beside
/// (`Names::old_vectors`), not in every state. `examples/heap_per_memory.rs` measures the
/// store's heap per memory.
pub(super) struct Kept {
    /// Where the content is in [`Names::texts`].
    text_at: u64,
    versions: Box<[u64]>,
    pub(super) importance: f64,
    pub(super) created_at: i64,
    updated_at: i64,
    /// [`NOT_DELETED`] while live.
    deleted_at: i64,
    pub(super) vector_seq: u64,
    home_seq: u64,
    /// [`SINGLE_PART`] for [`Home::Single`].
    home_part: u32,
    pub(super) tenant: u32,
    model: u32,
    text_len: u32,
    pub(super) memory_type: MemoryType,
    /// See [`StoredMemory::erased`].
    erased: bool,
    /// The text is the memory's sealed state, not its content (see `sealing::text_bytes`).
    sealed_text: bool,
}

impl Kept {
    /// Seqs of the events that created, changed and deleted it, in order.
    pub(super) fn versions(&self) -> &[u64] {
        &self.versions
    }

    pub(super) fn home(&self) -> Home {
        if self.home_part == SINGLE_PART {
            Home::Single
        } else {
            Home::Block((self.home_seq, self.home_part))
        }
    }

    pub(super) fn set_home(&mut self, home: Home) {
        (self.home_seq, self.home_part) = match home {
            Home::Single => (0, SINGLE_PART),
            Home::Block(b) => b,
        };
    }

    pub(super) fn updated_at(&self) -> i64 {
        self.updated_at
    }

    pub(super) fn is_deleted(&self) -> bool {
        self.deleted_at != NOT_DELETED
    }

    /// See [`StoredMemory::erased`].
    pub(super) fn is_erased(&self) -> bool {
        self.erased
    }

    /// Marks it deleted at `deleted_at` (if given) and erased (if `erased`) ahead of the state
    /// that replaces it, so that no read shows it from then on (see `apply`).
    pub(super) fn hide(&mut self, deleted_at: Option<i64>, erased: bool) {
        if let Some(at) = deleted_at {
            self.deleted_at = at;
        }
        self.erased |= erased;
    }

    /// Neither deleted nor erased: what lists, searches and the indexes hold.
    pub(super) fn is_live(&self) -> bool {
        !self.is_deleted() && !self.erased
    }

    pub(super) fn text(&self) -> TextRef {
        TextRef {
            at: self.text_at,
            len: self.text_len,
        }
    }
}

/// Values held once each, named by their index in the order they were first seen.
pub(super) struct Interned<T> {
    values: Vec<T>,
    index: FastMap<T, u32>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            index: FastMap::default(),
        }
    }
}

impl<T: Eq + Hash> Interned<T> {
    pub(super) fn index_of<Q>(&mut self, value: &Q) -> u32
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

    pub(super) fn get(&self, i: u32) -> Option<&T> {
        self.values.get(i as usize)
    }
}

/// What the memories' states share: tenants and models, each held once and named in a
/// [`Kept`] by index, the contents (off the heap, see [`Texts`]), and the vectors older builds
/// copied into their records.
#[derive(Default)]
pub(super) struct Names {
    pub(super) texts: Texts,
    tenants: Interned<Uuid>,
    models: Interned<String>,
    /// `StoredMemory::vector` of an older build's record, by memory, until the memory changes.
    pub(super) old_vectors: BTreeMap<Uuid, Box<[u8]>>,
    /// The scope, metadata, expiry and supersession of the memories that have any: beside the
    /// packed states, which every memory pays for, not in them.
    extras: BTreeMap<Uuid, Box<Held>>,
}

/// A memory's [`Extra`] with its metadata parsed once (filters read it on every match).
pub(super) struct Held {
    pub(super) extra: Extra,
    pub(super) metadata: Option<serde_json::Value>,
}

impl Names {
    /// The tenant named by a [`Kept`]'s index; indexes are only handed out by
    /// [`Interned::index_of`], so the nil id (no tenant's) is never given back in practice.
    pub(super) fn tenant(&self, i: u32) -> Uuid {
        self.tenants.get(i).copied().unwrap_or_default()
    }

    /// `m` as held in memory; its content is appended to the texts unless `text` says where
    /// the same content already is.
    pub(super) fn held(&self, id: &Uuid) -> Option<&Held> {
        self.extras.get(id).map(|h| &**h)
    }

    /// Takes out what `id` holds beyond its packed state (`keep` puts the new one back).
    pub(super) fn take_held(&mut self, id: &Uuid) -> Option<Box<Held>> {
        self.extras.remove(id)
    }

    /// Puts back the metadata of a memory read from its sealed state.
    fn set_metadata(&mut self, id: Uuid, metadata: String) {
        let parsed = serde_json::from_str(&metadata).ok();
        let held = self.extras.entry(id).or_insert_with(|| {
            Box::new(Held {
                extra: Extra::default(),
                metadata: None,
            })
        });
        held.extra.metadata = Some(metadata);
        held.metadata = parsed;
    }

    pub(super) fn extra(&self, id: &Uuid) -> Option<&Extra> {
        self.held(id).map(|h| &h.extra)
    }

    /// `m` (either form, see `sealing`) as held in memory; its text (sealed, or its content
    /// when it has no seal) is appended to the texts unless `text` says where it already is.
    pub(super) fn keep(&mut self, m: StoredMemory, home: Home, text: Option<TextRef>) -> Box<Kept> {
        let mut kept = Box::new(Kept {
            text_at: 0,
            versions: Box::default(),
            importance: 0.0,
            created_at: 0,
            updated_at: 0,
            deleted_at: NOT_DELETED,
            vector_seq: 0,
            home_seq: 0,
            home_part: SINGLE_PART,
            tenant: 0,
            model: 0,
            text_len: 0,
            memory_type: m.memory_type,
            erased: false,
            sealed_text: false,
        });
        self.keep_in(&mut kept, m, home, text);
        kept
    }

    /// [`Self::keep`] into the memory's [`Kept`] as it is held: every field replaced, no
    /// allocation but the versions' (a large erasure lands 10,000 states on the applier, which
    /// every tenant's next answer waits for).
    pub(super) fn keep_in(
        &mut self,
        kept: &mut Kept,
        m: StoredMemory,
        home: Home,
        text: Option<TextRef>,
    ) {
        let sealed_text = m.sealed.is_some();
        let text = text.unwrap_or_else(|| self.texts.push_bytes(&sealing::text_bytes(&m)));
        match m.extra {
            Some(extra) => {
                let metadata = extra
                    .metadata
                    .as_deref()
                    .and_then(|t| serde_json::from_str(t).ok());
                self.extras.insert(m.id, Box::new(Held { extra, metadata }));
            }
            None => {
                self.extras.remove(&m.id);
            }
        }
        if m.vector.is_empty() {
            // Taken out once a later state (which never carries one) replaces it.
            self.old_vectors.remove(&m.id);
        } else {
            self.old_vectors.insert(m.id, m.vector.into_boxed_slice());
        }
        // The tenant and model a state keeps are usually those it had: no look-up then.
        if self.tenants.get(kept.tenant) != Some(&m.tenant_id) {
            kept.tenant = self.tenants.index_of(&m.tenant_id);
        }
        if self.models.get(kept.model).map(String::as_str) != Some(m.model.as_str()) {
            kept.model = self.models.index_of(m.model.as_str());
        }
        kept.text_at = text.at;
        kept.text_len = text.len;
        kept.versions = m.versions.into_boxed_slice();
        kept.importance = m.importance;
        kept.created_at = m.created_at;
        kept.updated_at = m.updated_at;
        kept.deleted_at = m.deleted_at.unwrap_or(NOT_DELETED);
        kept.vector_seq = m.vector_seq;
        kept.memory_type = m.memory_type;
        kept.erased = m.erased;
        kept.sealed_text = sealed_text;
        kept.set_home(home);
    }

    /// The memory's content: `Ok(None)` when it is erased, or its keys are gone.
    pub(super) fn content(
        &self,
        id: &Uuid,
        k: &Kept,
        ring: &dyn Keyring,
    ) -> io::Result<Option<String>> {
        if k.erased {
            return Ok(None);
        }
        match sealing::text_of(self.texts.read_bytes(k.text())?, k.sealed_text)? {
            sealing::Text::Clear(c) => Ok(Some(c)),
            sealing::Text::Sealed(s) => Ok(sealing::open_sealed(&s, id, ring)?.map(|(c, _)| c)),
        }
    }

    /// The memory as the API shows it; `Ok(None)` when its content does not open (erased).
    pub(super) fn view(
        &self,
        id: Uuid,
        k: &Kept,
        ring: &dyn Keyring,
    ) -> io::Result<Option<MemoryView>> {
        let Some(content) = self.content(&id, k, ring)? else {
            return Ok(None);
        };
        Ok(Some(MemoryView {
            id,
            content,
            memory_type: k.memory_type,
            importance: k.importance,
            created_at: k.created_at,
            updated_at: k.updated_at,
            extra: self.extra(&id).cloned(),
        }))
    }

    /// The memory's state in the sealed form (see `sealing`; the open form for a memory that
    /// predates sealing): nothing is opened.
    /// The model a memory was last embedded with.
    pub(super) fn model(&self, k: &Kept) -> &str {
        self.models.get(k.model).map_or("", String::as_str)
    }

    pub(super) fn stored(&self, id: Uuid, k: &Kept) -> io::Result<StoredMemory> {
        // An erased memory keeps nothing of its personal fields, sealed or not.
        let (content, sealed) = match k.erased {
            true => (String::new(), None),
            false => match sealing::text_of(self.texts.read_bytes(k.text())?, k.sealed_text)? {
                sealing::Text::Clear(c) => (c, None),
                sealing::Text::Sealed(s) => (String::new(), Some(s)),
            },
        };
        Ok(self.stored_with(id, k, content, sealed, self.extra(&id).cloned()))
    }

    /// The memory's state erased (see `sealing::erase`), its text not read: what an erasure
    /// that names it folds it into. Its metadata is not copied to be dropped.
    pub(super) fn stored_erased(&self, id: Uuid, k: &Kept) -> StoredMemory {
        let extra = self.extra(&id).and_then(|x| {
            Extra {
                user_id: x.user_id.clone(),
                agent_id: x.agent_id.clone(),
                session_id: x.session_id.clone(),
                metadata: None,
                expires_at: x.expires_at,
                superseded_by: x.superseded_by,
                superseded_at: x.superseded_at,
                occurred_at: x.occurred_at,
            }
            .or_none()
        });
        let mut m = self.stored_with(id, k, String::new(), None, extra);
        sealing::erase(&mut m);
        m
    }

    fn stored_with(
        &self,
        id: Uuid,
        k: &Kept,
        content: String,
        sealed: Option<crate::seal::Sealed>,
        extra: Option<Extra>,
    ) -> StoredMemory {
        // Room for the version of the event that changes it (what it is read for).
        let mut versions = Vec::with_capacity(k.versions.len() + 1);
        versions.extend_from_slice(&k.versions);
        StoredMemory {
            id,
            tenant_id: self.tenant(k.tenant),
            content,
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
            versions,
            deleted_at: k.is_deleted().then_some(k.deleted_at),
            vector_seq: k.vector_seq,
            extra,
            keys: sealed.as_ref().map(|s| s.keys.clone()).unwrap_or_default(),
            sealed,
            erased: k.erased,
        }
    }
}

#[derive(Default)]
pub(super) struct State {
    /// Every memory ever created, deleted ones too (their history stays readable). A B-tree:
    /// a hash table doubles at once when it fills (a step of megabytes in RSS at the soak's
    /// size), a B-tree grows a node at a time. Boxed: a node moves its slots on insert.
    pub(super) all: BTreeMap<Uuid, Box<Kept>>,
    /// A B-tree for the reason `all` is one: a group commit writes a block, so there are
    /// about as many blocks as group commits, and a hash table would double at once.
    pub(super) blocks: BTreeMap<BlockId, BlockUse>,
    /// Blocks that held no current state at open: a crash between the sled batches of a large
    /// commit left them (its new blocks landed, not its removals). The next batch removes them.
    pub(super) unused: Vec<BlockId>,
    pub(super) names: Names,
    pub(super) tenants: FastMap<Uuid, TenantMemories>,
    /// Where large tenants' vector tables keep their f32 rows (see `vector_table`).
    pub(super) spill: Option<Spill>,
}

impl State {
    /// An empty state whose large vector tables and contents go where `spill` says.
    pub(super) fn new(spill: Option<Spill>) -> Self {
        Self {
            names: Names {
                texts: Texts::new(spill.as_ref().map(|s| s.dir.as_path())),
                ..Names::default()
            },
            spill,
            ..Self::default()
        }
    }

    /// Opens every live memory's sealed state once, at open: its metadata goes back beside
    /// its state (filters read it), and its content is returned for the keyword index. A
    /// memory whose keys are gone is erased here. Contents of memories that predate sealing
    /// are read as they are.
    pub(super) fn open_live(&mut self, ring: &dyn Keyring) -> io::Result<FastMap<Uuid, String>> {
        use rayon::prelude::*;
        let live: Vec<(Uuid, &Kept)> = self
            .all
            .iter()
            .filter(|(_, k)| k.is_live())
            .map(|(id, k)| (*id, &**k))
            .collect();
        // Each open is a key derivation and a decryption: on every core.
        let names = &self.names;
        let opened: Vec<(Uuid, io::Result<Option<sealing::Personal>>)> = live
            .par_iter()
            .map(|(id, k)| {
                let text = names
                    .texts
                    .read_bytes(k.text())
                    .and_then(|b| sealing::text_of(b, k.sealed_text));
                let personal = match text {
                    Err(e) => Err(e),
                    Ok(sealing::Text::Clear(c)) => Ok(Some((c, None))),
                    Ok(sealing::Text::Sealed(s)) => sealing::open_sealed(&s, id, ring),
                };
                (*id, personal)
            })
            .collect();
        let mut contents = FastMap::default();
        for (id, personal) in opened {
            match personal? {
                Some((content, metadata)) => {
                    // A clear state's metadata is held already; a sealed one's was not stored.
                    if let Some(md) = metadata {
                        self.names.set_metadata(id, md);
                    }
                    contents.insert(id, content);
                }
                None => {
                    if let Some(k) = self.all.get_mut(&id) {
                        k.erased = true;
                    }
                    if let Some(h) = self.names.extras.get_mut(&id) {
                        h.extra.metadata = None;
                        h.metadata = None;
                    }
                }
            }
        }
        Ok(contents)
    }

    pub(super) fn live(&self, tenant: &Uuid, id: &Uuid) -> Option<&Kept> {
        self.all
            .get(id)
            .map(|k| &**k)
            .filter(|m| m.is_live() && self.names.tenant(m.tenant) == *tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
