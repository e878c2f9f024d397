//! The stored form of the memories' states and its compaction.
//!
//! Tree `proj_memories` holds the states in blocks: each `apply` writes the states it changed
//! as `b|last seq|part` → up to [`BLOCK_STATES`] [`StoredMemory`]s (MessagePack, named
//! fields; a sealed memory's content and metadata only in its `sealed` value), one sled value per few hundred memories instead of one per memory (a sled insert
//! costs ~10 µs here, as much as the whole budget of a replayed event). Trees written by
//! older builds also hold one `m|id` key per memory, read as the oldest states and removed as
//! their memories change.
//!
//! Invariants: block keys sort by the seq of the batch that wrote them, so reading them in
//! order leaves each memory's latest state; a memory's current state is in exactly the block
//! (or `m|id` key) its [`Home`] names. A block whose states were all superseded is removed in
//! the batch that superseded the last; one that falls below a quarter current has its current
//! states carried into the batch being written, so the tree stays within 4x of the live data.

use std::io;

use serde::Deserialize;
use uuid::Uuid;

use super::sealing::at_rest;
use super::state::{Home, State};
use super::{StoredMemory, TREE};
use crate::overlay::{prefixed, Overlay};
use crate::projection::{corrupt, Result};
use crate::FastMap;

/// States per block value: ~250 bytes each, so a block stays well below sled's large-value
/// threshold while a replay writes a few hundred values per 100,000 memories.
pub(super) const BLOCK_STATES: usize = 256;

/// A block: the seq of the last event of the batch that wrote it, and its part number.
pub(super) type BlockId = (u64, u32);

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

/// What a block holds: how many states were written into it, and how many of them are still
/// their memory's current state. Which memories they are is read from the block itself when
/// compaction needs it (rarely): a group commit writes a block, so there can be about one
/// per memory, and a list of members in memory would cost each memory its id again.
pub(super) struct BlockUse {
    pub(super) len: u32,
    pub(super) current: u32,
}

fn dec(bytes: &[u8]) -> Result<StoredMemory> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("memory: {e}")))
}

pub(super) fn dec_block(bytes: &[u8]) -> Result<Vec<StoredMemory>> {
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
    // What is sealed is stored sealed only (`sealing::at_rest`).
    let states: Vec<_> = states.iter().map(|m| at_rest(m)).collect();
    // Plain structs of strings, numbers and bytes: encoding into a Vec cannot fail.
    rmp_serde::to_vec_named(&states).unwrap_or_default()
}

/// Reads every stored state into `state` (empty before), and counts each block's states that
/// are still current.
pub(super) fn read_states(tree: &sled::Tree, state: &mut State) -> Result<()> {
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
    state.unused = (state.blocks.iter())
        .filter(|(_, u)| u.current == 0)
        .map(|(b, _)| *b)
        .collect();
    Ok(())
}

/// Plans the blocks of a batch into `ov`: the changed states (`finals`) and any carried by
/// compaction go into new blocks at `last`; blocks left without a current state are
/// removed, as are the `m|id` keys of changed older-build records. Returns the moves for
/// [`Plan::land`], once the batch is stored.
pub(super) fn plan(
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
    // Blocks a crash left without a current state (see `State::unused`).
    emptied.extend_from_slice(&state.unused);
    for &b in &emptied {
        ov.remove(block_key(b));
    }
    let carried: Vec<StoredMemory> = carried
        .iter()
        .filter_map(|id| state.all.get(id).map(|k| state.names.stored(*id, k)))
        .collect::<io::Result<_>>()?;
    let states: Vec<&StoredMemory> = finals.values().chain(&carried).collect();
    // Parts after any block already stored at `last`: a crash between the sled batches of a
    // large commit at `last` leaves its first blocks there under the old checkpoint, and the
    // fold again may not rewrite every state they hold (a memory it created is not created
    // twice), so they are not written over.
    let first = (state.blocks.range((last, 0)..=(last, u32::MAX)))
        .next_back()
        .map_or(0, |(&(_, part), _)| part + 1);
    let mut written = Vec::new();
    for (part, chunk) in (first..).zip(states.chunks(BLOCK_STATES)) {
        let b = (last, part);
        ov.insert(block_key(b), enc_block(chunk));
        written.push((b, chunk.iter().map(|m| m.id).collect()));
    }
    Ok(Plan {
        leaving,
        emptied,
        written,
    })
}

/// The block moves of one batch, applied to memory once the batch is stored.
pub(super) struct Plan {
    leaving: FastMap<BlockId, usize>,
    emptied: Vec<BlockId>,
    written: Vec<(BlockId, Box<[Uuid]>)>,
}

impl Plan {
    pub(super) fn land(self, state: &mut State) {
        // The plan removed every one of them.
        state.unused.clear();
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
