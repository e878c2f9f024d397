//! How a batch of events changes the memories: [`fold`] takes each event into the latest
//! state of every memory it touched, [`plan`] turns those into stored blocks, and once the
//! batch is committed the in-memory state takes them.
//!
//! Invariant: `apply` is the only writer, so the state read while folding and planning is
//! still current when the batch lands; the tree is committed before memory changes, so a
//! failed commit leaves memory as it was. A large commit lands in several sled batches
//! ([`BATCH_SPLIT`]), the checkpoint in the last: a start after a crash between them folds
//! the batch again over what landed, which the fold takes to the same states (`note_version`,
//! docs/ARCHITECTURE.md). A batch of more than [`LAND_CHUNK`] memories lands in chunks, the
//! state's lock released between them: the memories it drops land first, each hidden from
//! every read in the hold that lands it, so a read between two chunks sees some of the
//! batch's drops and none of its other changes.
//!
//! `apply` runs on the appender's applier, which every tenant's next answer waits for (each
//! request's audit entry is folded before it is answered). So the memories a large batch
//! drops are taken out of the in-memory indexes (vectors, scopes, keyword postings) by a
//! niced thread of their own after `apply` returned ([`Unindexing`]), a chunk a hold of the
//! lock and the postings in one last hold: hidden until then, as between chunks. The indexes
//! are rebuilt from the committed states at open, so a stop before that thread is done loses
//! nothing. An erased memory's state is built without reading its text, which the erasure
//! drops.

use std::collections::btree_map::Entry;
use std::io;
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::Duration;

use uuid::Uuid;

use super::block::plan;
use super::state::{Held, Home, Kept, State};
use super::tenant::TenantMemories;
use super::{sealing, Extra, Memories, StoredMemory, TREE};
use crate::event::{vector_from_bytes, Event};
use crate::overlay::{fold_new, Split};
use crate::projection::{Applied, Projection, Result};
use crate::seal::Keyring;
use crate::vector_table::Spill;
use crate::{FastMap, FastSet};

/// What a batch's fold learned beside the memories' latest states.
#[derive(Default)]
struct Learned {
    /// The new vector (f32 LE, opened) of each touched memory that was given one.
    vectors: FastMap<Uuid, Vec<u8>>,
    /// The memories given a content (indexed again for keyword search).
    texts: FastSet<Uuid>,
}

/// Folds one event into `finals`, the latest state of each memory the batch touched (what
/// the stored and in-memory state take once the batch landed), opening sealed events with
/// `ring`. A state is taken in its sealed form and opened only when the event changes its
/// content or metadata (see `sealing`). Reads only the state before the batch (and contents
/// from the texts file).
fn fold(
    state: &State,
    ring: &dyn Keyring,
    finals: &mut FastMap<Uuid, StoredMemory>,
    learned: &mut Learned,
    a: &Applied<'_>,
) -> io::Result<()> {
    // The memory's latest state in `finals` (taken from `state` the first time), if it exists.
    let load = |finals: &mut FastMap<Uuid, StoredMemory>, id: &Uuid| -> io::Result<bool> {
        if !finals.contains_key(id) {
            let Some(k) = state.all.get(id) else {
                return Ok(false);
            };
            finals.insert(*id, state.names.stored(*id, k)?);
        }
        Ok(true)
    };
    // Applies `f` to the memory's latest state unless it is deleted or unknown; opened first
    // when `personal` (`f` changes its content or metadata).
    let update = |finals: &mut FastMap<Uuid, StoredMemory>,
                  id: &Uuid,
                  personal: bool,
                  f: &mut dyn FnMut(&mut StoredMemory)|
     -> io::Result<()> {
        if !load(finals, id)? {
            return Ok(());
        }
        let Some(current) = finals.get_mut(id) else {
            return Ok(());
        };
        if current.deleted_at.is_some() {
            return Ok(());
        }
        if personal {
            sealing::open_state(current, ring)?;
        }
        f(current);
        note_version(current, a.seq);
        Ok(())
    };
    match a.event {
        Event::MemoryCreated(e)
            if !state.all.contains_key(&e.memory_id) && !finals.contains_key(&e.memory_id) =>
        {
            let opened = e.opened(ring).map_err(sealing::key_err)?;
            let clear = opened.as_deref().unwrap_or(e);
            let mut m = StoredMemory {
                id: e.memory_id,
                tenant_id: e.tenant_id,
                content: clear.content.clone(),
                memory_type: e.memory_type,
                importance: e.importance,
                created_at: e.created_at,
                updated_at: e.created_at,
                model: e.model.clone(),
                vector: Vec::new(),
                versions: vec![a.seq],
                deleted_at: None,
                vector_seq: a.seq,
                extra: clear.extra.clone().and_then(|x| Extra::from(x).or_none()),
                sealed: None,
                erased: false,
                keys: e
                    .sealed
                    .as_ref()
                    .map(|s| s.keys.clone())
                    .unwrap_or_default(),
            };
            match opened {
                Some(clear) => {
                    learned
                        .vectors
                        .insert(e.memory_id, clear.into_owned().vector);
                    learned.texts.insert(e.memory_id);
                }
                // Its keys are gone (a replay after an erasure): erased from the start, its
                // clear fields still followed so that its history is what it was.
                None => sealing::erase(&mut m),
            }
            finals.insert(e.memory_id, m);
        }
        Event::MemoryUpdated(e) => {
            let opened = e.opened(ring).map_err(sealing::key_err)?;
            let erased = opened.is_none();
            let clear = opened.as_deref().unwrap_or(e);
            let personal = !erased && e.sealed.is_some()
                || clear.content.is_some()
                || clear.amend.as_ref().is_some_and(|a| a.set_metadata);
            let mut new_vector = false;
            update(finals, &e.memory_id, personal, &mut |m| {
                if let Some(s) = &e.sealed {
                    // A memory that predates sealing is sealed from its first sealed change.
                    m.keys = s.keys.clone();
                }
                if let Some(c) = &clear.content {
                    m.content = c.clone();
                    learned.texts.insert(e.memory_id);
                }
                if let Some(i) = clear.importance {
                    m.importance = i;
                }
                m.extra = Extra::amended(m.extra.take(), clear.amend.as_ref());
                if let Some(model) = &clear.model {
                    m.model = model.clone();
                    m.vector = Vec::new();
                    m.vector_seq = a.seq;
                    new_vector = clear.vector.is_some();
                }
                m.updated_at = e.updated_at;
                if erased {
                    sealing::erase(m);
                }
            })?;
            if new_vector {
                if let Some(v) = &clear.vector {
                    learned.vectors.insert(e.memory_id, v.clone());
                }
            }
        }
        Event::MemoryDeleted(e) => update(finals, &e.memory_id, false, &mut |m| {
            m.deleted_at = Some(e.deleted_at)
        })?,
        Event::MemoriesDeletedByType(e) => {
            for id in &e.memory_ids {
                update(finals, id, false, &mut |m| {
                    m.deleted_at = Some(e.deleted_at)
                })?;
            }
        }
        Event::MemoriesDeleted(e) => {
            for id in &e.memory_ids {
                update(finals, id, false, &mut |m| {
                    m.deleted_at = Some(e.deleted_at)
                })?;
            }
        }
        // An expired memory is gone as a deleted one is; its history says why.
        Event::MemoriesExpired(e) => {
            for id in &e.memory_ids {
                update(finals, id, false, &mut |m| {
                    m.deleted_at = Some(e.expired_at)
                })?;
            }
        }
        Event::MemorySuperseded(e) => update(finals, &e.memory_id, false, &mut |m| {
            let mut x = m.extra.take().unwrap_or_default();
            x.superseded_by = Some(e.superseded_by);
            x.superseded_at = Some(e.superseded_at);
            m.extra = Some(x);
        })?,
        // Erased at once, deleted ones too (their history shows their contents), while their
        // keys may still exist: the erasure destroys them once this is applied.
        Event::SubjectsErased(e) => {
            // Thousands of states at once: one allocation, not a doubling each time it fills.
            finals.reserve(e.memory_ids.len());
            for id in &e.memory_ids {
                // Its text is dropped here: not read (a file read and a decode a memory).
                if !finals.contains_key(id) {
                    let Some(k) = state
                        .all
                        .get(id)
                        .filter(|k| state.names.tenant(k.tenant) == e.tenant_id)
                    else {
                        continue;
                    };
                    finals.insert(*id, state.names.stored_erased(*id, k));
                }
                let Some(m) = finals.get_mut(id).filter(|m| m.tenant_id == e.tenant_id) else {
                    continue;
                };
                sealing::erase(m);
                m.deleted_at.get_or_insert(e.erased_at);
                note_version(m, a.seq);
                learned.vectors.remove(id);
                learned.texts.remove(id);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Adds `seq` to the memory's versions unless they already reach it: an event folded again
/// (a start after a crash between the batches of a large commit, see
/// [`Overlay::commit_in_batches`](crate::overlay::Overlay::commit_in_batches)) over a state that
/// already took it and the batch's later events adds nothing.
fn note_version(m: &mut StoredMemory, seq: u64) {
    if m.versions.last().is_none_or(|v| *v < seq) {
        m.versions.push(seq);
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
        // Lets the readers a hold of the lock kept waiting take it before the next hold does.
        self.apply_pausing(events, &mut std::thread::yield_now)
    }

    fn reset(&self) -> Result<()> {
        // What an unindexing thread holds is of the state being dropped.
        self.wait_unindexed()?;
        self.tree.clear()?;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        *state = State::new(state.spill.take());
        Ok(())
    }
}

impl Memories {
    /// [`Projection::apply`], calling `pause` between two holds of the state's write lock (a
    /// large batch lands its memories [`LAND_CHUNK`] a hold), with the lock free.
    ///
    /// It runs on the applier at the process's priority, large erasures included: every write
    /// folded after it waits for it, so a fold niced below the requests beside it would make
    /// every tenant's writes wait for the cores those requests leave.
    pub(super) fn apply_pausing(
        &self,
        events: &[Applied<'_>],
        pause: &mut dyn FnMut(),
    ) -> Result<()> {
        self.apply_split(events, pause, BATCH_SPLIT, usize::MAX)
    }

    /// [`Self::apply_pausing`] committing in sled batches as `split` says, and stopping after
    /// `batches` of them: what a crash between two leaves in the tree (a test's; an error,
    /// the in-memory state as it was).
    pub(super) fn apply_split(
        &self,
        events: &[Applied<'_>],
        pause: &mut dyn FnMut(),
        split: Split,
        batches: usize,
    ) -> Result<()> {
        let mut finals: FastMap<Uuid, StoredMemory> = FastMap::default();
        let mut learned = Learned::default();
        let mut resealed: FastSet<Uuid> = FastSet::default();
        let ring = &*self.keys;
        // `apply` is the only writer, so the state read here is still current when the batch
        // lands below.
        let (ov, last, plan) = {
            let state = self.state();
            let Some((mut ov, last)) = fold_new(&self.tree, TREE, events, |_, a| {
                fold(&state, ring, &mut finals, &mut learned, a)?;
                Ok(())
            })?
            else {
                return Ok(());
            };
            for m in finals.values_mut() {
                if sealing::seal_state(m, ring)? {
                    resealed.insert(m.id);
                }
            }
            let plan = plan(&self.tree, &state, &finals, last, &mut ov)?;
            (ov, last, plan)
        };
        let (_, landed) = ov.commit_in_batches(last, split, batches)?;
        if !landed {
            return Err(io::Error::other("stopped between the sled batches of a commit").into());
        }
        let first = events.first().map_or(0, |a| a.seq);
        let mut histories: FastMap<Uuid, Vec<u64>> = FastMap::default();
        for m in finals.values() {
            histories.entry(m.tenant_id).or_default().extend(
                m.versions
                    .iter()
                    .rev()
                    .take_while(|s| **s >= first)
                    .copied(),
            );
        }
        let mut finals: Vec<StoredMemory> = finals.into_values().collect();
        // The hidden memories' index entries, for the unindexing thread.
        let mut deferred: Vec<Unindex> = Vec::new();
        // A large batch (an erasure of thousands of memories) lands in chunks, the lock
        // released between them so that reads wait for one chunk at most. The memories it
        // drops land first, each hidden as it lands (see `land`), so that a read between two
        // holds sees some of the batch's drops and none of its other changes.
        if finals.len() > LAND_CHUNK {
            let (mut dropped, rest): (Vec<StoredMemory>, Vec<StoredMemory>) = finals
                .into_iter()
                .partition(|m| m.deleted_at.is_some() || m.erased);
            finals = rest;
            deferred.reserve(dropped.len());
            while !dropped.is_empty() {
                let chunk = dropped.split_off(dropped.len().saturating_sub(LAND_CHUNK));
                let mut guard = self.state.write().unwrap_or_else(|p| p.into_inner());
                land(&mut guard, chunk, &learned, &resealed, true, &mut deferred)?;
                drop(guard);
                pause();
            }
        }
        loop {
            let chunk = finals.split_off(finals.len().saturating_sub(LAND_CHUNK));
            let done = finals.is_empty();
            let mut guard = self.state.write().unwrap_or_else(|p| p.into_inner());
            let state = &mut *guard;
            land(state, chunk, &learned, &resealed, false, &mut deferred)?;
            if done {
                for (tenant, seqs) in std::mem::take(&mut histories) {
                    TenantMemories::of(&mut state.tenants, state.spill.as_ref(), tenant)
                        .record_history(seqs);
                }
                plan.land(state);
                drop(guard);
                self.unindex_later(deferred);
                return Ok(());
            }
            drop(guard);
            pause();
        }
    }
}

/// How a large commit (an erasure's blocks of thousands of states and the blocks they empty)
/// is split into sled batches, each of which holds every other write to the db (the log's
/// included) while it is applied. On the erasure of 10,000 memories (docs/PERFORMANCE.md) a
/// removal of an emptied block took 0.1-0.3 ms and a block of 256 erased states (~60 KB) up
/// to ~0.5 ms: a batch of either is a few milliseconds.
pub(super) const BATCH_SPLIT: Split = Split {
    keys: 16,
    bytes: 256 << 10,
};

/// Memories a batch lands under one hold of the state's write lock: what a read may wait for
/// (a few milliseconds of drops; 10,000 in one hold kept searches waiting ~0.3 s).
const LAND_CHUNK: usize = 256;

/// How long an unindexing thread waits, between two of its holds, for queries being embedded
/// (`niced::give_way`), and in all: 10,000 memories are 40 holds.
const GIVE_WAY_EACH: Duration = Duration::from_millis(50);
const GIVE_WAY_TOTAL: Duration = Duration::from_secs(2);

/// How much every unindexing thread is niced, so that the requests beside it keep the cores
/// (a thread niced by 10 weighs a tenth of one at the process's priority): nobody waits for it
/// but an erasure's receipt, and what it has not yet removed stays hidden.
const ERASE_NICE: i32 = 10;

/// Hides `m`, a state the batch being landed drops (deletes or erases), if its memory `k`
/// is live: marked deleted or erased and taken off its tenant's order and counts, so no get,
/// list or search shows it from then on; its tenant's queries check each memory (see
/// `TenantMemories::unindexing`) until the unindexing thread has taken it out of the indexes.
/// Whether it was hidden (and so is left to that thread).
fn hide_in(
    tenants: &mut FastMap<Uuid, TenantMemories>,
    spill: Option<&Spill>,
    m: &StoredMemory,
    k: &mut Kept,
) -> bool {
    if !k.is_live() {
        return false;
    }
    k.hide(m.deleted_at, m.erased);
    let t = TenantMemories::of(tenants, spill, m.tenant_id);
    if !t.unlist(m.id, k) {
        return false;
    }
    t.unindexing += 1;
    true
}

/// [`hide_in`] for the memory `m` is a state of, as a large batch's landing hides it.
#[cfg(test)]
pub(super) fn hide(state: &mut State, m: &StoredMemory) -> bool {
    let State {
        all,
        tenants,
        spill,
        ..
    } = state;
    all.get_mut(&m.id)
        .is_some_and(|k| hide_in(tenants, spill.as_ref(), m, k))
}

/// Lands `chunk`, states of a committed batch, in the in-memory state: each kept, and put in
/// its tenant's indexes or dropped from them. With `hide`, a dropped memory that was live is
/// hidden ([`hide_in`]) and pushed on `deferred`, for [`Memories::unindex_later`], rather
/// than taken out of the indexes here.
fn land(
    state: &mut State,
    chunk: Vec<StoredMemory>,
    learned: &Learned,
    resealed: &FastSet<Uuid>,
    hide: bool,
    deferred: &mut Vec<Unindex>,
) -> Result<()> {
    // Memories dropped, by tenant: their keyword postings go in one pass a tenant.
    let mut unindexed: FastMap<Uuid, Vec<Uuid>> = FastMap::default();
    for m in chunk {
        let id = m.id;
        let tenant = m.tenant_id;
        // A new or changed content is indexed again for keyword search.
        let live = m.deleted_at.is_none() && !m.erased;
        let content = (learned.texts.contains(&id) && live).then(|| m.content.clone());
        // What the memory was indexed under by its scopes and metadata, if it was live.
        let indexed = state.names.take_held(&id);
        // A state is replaced in place (one look-up, no allocation: see `keep_in`). The home
        // is set by the plan; a new memory starts without one. A text that did not change
        // stays where it is in the texts file; a state sealed in this batch changed (its
        // content, its metadata, or its first seal).
        let mut hidden = false;
        let kept: &Kept = match state.all.entry(id) {
            Entry::Occupied(o) => {
                let k = o.into_mut();
                hidden = hide && hide_in(&mut state.tenants, state.spill.as_ref(), &m, k);
                let text = (!learned.texts.contains(&id) && !resealed.contains(&id) && !m.erased)
                    .then(|| k.text());
                let home = k.home();
                state.names.keep_in(k, m, home, text);
                k
            }
            Entry::Vacant(v) => v.insert(state.names.keep(m, Home::Single, None)),
        };
        let t = TenantMemories::of(&mut state.tenants, state.spill.as_ref(), tenant);
        if hidden {
            // Off the order and counts; out of the indexes by the unindexing thread.
            deferred.push(Unindex {
                tenant,
                id,
                indexed,
            });
        } else if !kept.is_live() {
            t.drop_memory(
                id,
                kept,
                indexed.as_deref(),
                unindexed.entry(tenant).or_default(),
            )?;
        } else {
            let vector = learned.vectors.get(&id).map(|v| vector_from_bytes(v));
            t.put(
                id,
                kept,
                indexed.as_deref(),
                state.names.held(&id),
                content.as_deref(),
                vector.as_deref(),
            )?;
        }
    }
    for (tenant, ids) in unindexed {
        TenantMemories::of(&mut state.tenants, state.spill.as_ref(), tenant).unindex_keywords(&ids);
    }
    Ok(())
}

/// A memory a large batch hid, still in its tenant's indexes: what takes it out of them.
pub(super) struct Unindex {
    tenant: Uuid,
    id: Uuid,
    /// What its scopes and metadata indexed it under.
    indexed: Option<Box<Held>>,
}

/// How many unindexing threads are at work, and why the last removal failed, if one did.
#[derive(Default)]
pub(super) struct Unindexing {
    state: Mutex<UnindexState>,
    moved: Condvar,
}

#[derive(Default)]
struct UnindexState {
    running: usize,
    failed: Option<String>,
}

impl Unindexing {
    fn lock(&self) -> std::sync::MutexGuard<'_, UnindexState> {
        // A count and a string: still consistent after a panic elsewhere.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Memories {
    /// Takes `deferred` out of the indexes on a thread of its own (here when none can be
    /// started), so that the applier does not wait for it.
    fn unindex_later(&self, deferred: Vec<Unindex>) {
        if deferred.is_empty() {
            return;
        }
        self.unindexing.lock().running += 1;
        let (state, progress) = (Arc::clone(&self.state), Arc::clone(&self.unindexing));
        let started = std::thread::Builder::new()
            .name("memories-unindex".into())
            .spawn(move || {
                // Nobody waits for it but an erasure's receipt. Refused, it still runs.
                let _ = crate::niced::lower_priority(ERASE_NICE);
                let failed = unindex(&state, deferred).err();
                // The state is let go of before anyone hears it is done (`detach` unwraps it).
                drop(state);
                let mut s = progress.lock();
                s.running -= 1;
                if let Some(e) = failed {
                    s.failed = Some(e.to_string());
                }
                drop(s);
                progress.moved.notify_all();
            });
        if let Err(e) = started {
            // The closure, and the work it owned, are gone with the failed spawn.
            let mut s = self.unindexing.lock();
            s.running -= 1;
            s.failed = Some(format!("starting the unindexing thread: {e}"));
        }
    }

    /// Blocks until no memory a batch hid is left in an index; an error when a removal
    /// failed (that memory stays hidden: its tenant's queries keep checking each memory).
    pub fn wait_unindexed(&self) -> Result<()> {
        let mut s = self.unindexing.lock();
        while s.running > 0 {
            s = self
                .unindexing
                .moved
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match &s.failed {
            Some(why) => Err(io::Error::other(format!(
                "taking erased memories out of the indexes: {why}"
            ))
            .into()),
            None => Ok(()),
        }
    }
}

/// Takes `deferred` out of their tenants' scopes and vectors, [`LAND_CHUNK`] a hold of the
/// write lock, then out of their keyword postings in one hold, one pass over each posting list
/// they touch (a pass a chunk would scan a small vocabulary's every list once per chunk: ~40
/// times for 10,000 memories). Each stays counted in `unindexing` (hidden, its tenant's
/// queries checking each memory) until its postings are gone. A memory whose vector row cannot
/// be removed stays counted, and in its postings; the first such error is returned once the
/// rest is done.
fn unindex(state: &RwLock<State>, mut deferred: Vec<Unindex>) -> io::Result<()> {
    let mut failed = None;
    let mut give_way = crate::niced::GiveWay::new(GIVE_WAY_EACH, GIVE_WAY_TOTAL);
    // The memories out of their scopes and vectors, by tenant: their postings go last.
    let mut unindexed: FastMap<Uuid, Vec<Uuid>> = FastMap::default();
    while !deferred.is_empty() {
        let chunk = deferred.split_off(deferred.len().saturating_sub(LAND_CHUNK));
        let mut guard = state.write().unwrap_or_else(|p| p.into_inner());
        for u in chunk {
            let Some(t) = guard.tenants.get_mut(&u.tenant) else {
                continue;
            };
            let ids = unindexed.entry(u.tenant).or_default();
            if let Err(e) = t.unindex(u.id, u.indexed.as_deref(), ids) {
                failed.get_or_insert(e);
            }
        }
        drop(guard);
        // Lets the readers the chunk held up take the lock before the next one does, and a
        // query being embedded have the cores (`niced::give_way`).
        give_way.step();
        std::thread::yield_now();
    }
    let mut guard = state.write().unwrap_or_else(|p| p.into_inner());
    for (tenant, ids) in unindexed {
        if let Some(t) = guard.tenants.get_mut(&tenant) {
            t.unindex_keywords(&ids);
            t.unindexing = t.unindexing.saturating_sub(ids.len());
        }
    }
    drop(guard);
    failed.map_or(Ok(()), Err)
}
