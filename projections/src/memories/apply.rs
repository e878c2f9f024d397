//! How a batch of events changes the memories: [`fold`] takes each event into the latest
//! state of every memory it touched, [`plan`] turns those into stored blocks, and once the
//! batch is committed the in-memory state takes them.
//!
//! Invariant: `apply` is the only writer, so the state read while folding and planning is
//! still current when the batch lands; the tree is committed before memory changes, so a
//! failed commit leaves memory as it was.

use std::io;

use uuid::Uuid;

use super::block::plan;
use super::state::{Home, State};
use super::tenant::TenantMemories;
use super::{Extra, Memories, StoredMemory, TREE};
use crate::event::{vector_from_bytes, Event};
use crate::overlay::fold_new;
use crate::projection::{Applied, Projection, Result};
use crate::{FastMap, FastSet};

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
                extra: e.extra.clone().and_then(|x| Extra::from(x).or_none()),
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
                m.extra = Extra::amended(m.extra.take(), e.amend.as_ref());
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
        Event::MemoriesDeleted(e) => {
            for id in &e.memory_ids {
                update(finals, id, &mut |m| m.deleted_at = Some(e.deleted_at))?;
            }
        }
        // An expired memory is gone as a deleted one is; its history says why.
        Event::MemoriesExpired(e) => {
            for id in &e.memory_ids {
                update(finals, id, &mut |m| m.deleted_at = Some(e.expired_at))?;
            }
        }
        Event::MemorySuperseded(e) => update(finals, &e.memory_id, &mut |m| {
            let mut x = m.extra.take().unwrap_or_default();
            x.superseded_by = Some(e.superseded_by);
            x.superseded_at = Some(e.superseded_at);
            m.extra = Some(x);
        })?,
        _ => {}
    }
    Ok(())
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
                fold(&state, &mut finals, &mut new_vectors, &mut new_texts, a)?;
                Ok(())
            })?
            else {
                return Ok(());
            };
            let plan = plan(&self.tree, &state, &finals, last, &mut ov)?;
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
            // A new or changed content is indexed again for keyword search.
            let content = (text.is_none() && m.deleted_at.is_none()).then(|| m.content.clone());
            // What the memory was indexed under by its scopes and metadata, if it was live.
            let indexed = state.names.take_held(&id);
            let kept = state.names.keep(m, home, text);
            let held = state.names.held(&id);
            let t = TenantMemories::of(&mut state.tenants, state.spill.as_ref(), tenant);
            if kept.is_deleted() {
                t.drop_memory(id, &kept, indexed.as_deref())?;
            } else {
                let vector = new_vectors
                    .get(&id)
                    .and_then(|seq| vector_in(events, *seq))
                    .map(vector_from_bytes);
                t.put(
                    id,
                    &kept,
                    indexed.as_deref(),
                    held,
                    content.as_deref(),
                    vector.as_deref(),
                )?;
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
