//! Per tenant: the order of its live memories by creation, each with its type, the count of
//! each type, and its [`VectorTable`].
//!
//! Invariants: exactly the tenant's live memories are listed in `order` and counted in
//! `per_type`, and the vector table has a row for each of them whose vector has the table's
//! dimension (another model's is refused); a memory's creation time and type never change,
//! so its place in `order` never moves. Rebuilt at open from the states and the vectors in
//! the log ([`read_tenants`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use strum::VariantArray as _;

use rayon::prelude::*;
use uuid::Uuid;

use super::scopes::{Candidates, ScopeIndex};
use super::state::{Held, Kept, State};
use super::{Extra, MemoryQuery, VectorSource, TREE};
use crate::event::{vector_from_bytes, MemoryType};
use crate::keyword::KeywordIndex;
use crate::projection::{corrupt, Result};
use crate::vector_table::{FastSearch, Hit, RowFilter, Spill, VectorTable};
use crate::FastMap;

/// One tenant's live memories: their order, counts per type, and vectors.
pub(super) struct TenantMemories {
    /// The tenant's live memories by creation, each with its type: a list of one type walks
    /// this order and passes over the others, as a page at an offset already walked to it.
    /// (A second B-tree per type would hold every memory's key once more.)
    pub(super) order: BTreeMap<(i64, Uuid), MemoryType>,
    /// Live memories of each type (by `MemoryType as usize`), a typed list's total.
    pub(super) per_type: [usize; MemoryType::VARIANTS.len()],
    pub(super) vectors: VectorTable,
    /// BM25 over the live memories' contents: the tenant's own statistics, so no other
    /// tenant's memories weigh in its keyword scores.
    pub(super) keywords: KeywordIndex,
    /// The live memories that expire or are superseded, as last put.
    marks: BTreeMap<Uuid, Mark>,
    /// The live memories that expire, by when: the ones due are hidden until swept.
    pub(super) expiring: BTreeSet<(i64, Uuid)>,
    /// Live memories superseded by another (hidden unless asked for), per type.
    superseded: [usize; MemoryType::VARIANTS.len()],
    /// The live memories of each scope value, which a search filtered by scope scores alone.
    pub(super) scopes: ScopeIndex,
    /// The seqs of every event that changed one of the tenant's memories, live or not (the
    /// union of their versions), ascending: what a read `as_of` a position replays, so that
    /// its cost is the tenant's own history up to there, never the log's.
    pub(super) history: Vec<u64>,
    /// Memories taken off the order and counts but still in the vectors, scopes and keyword
    /// index (a large batch's drops, see `apply`): while any are, every query checks each
    /// memory it meets (`State::admits` turns them away).
    pub(super) unindexing: usize,
}

/// What makes a live memory hidden from a list or search: its expiry, its supersession.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Mark {
    expires_at: Option<i64>,
    superseded: bool,
}

impl Mark {
    pub(super) fn of(extra: Option<&Extra>) -> Self {
        extra.map_or_else(Self::default, |e| Self {
            expires_at: e.expires_at,
            superseded: e.superseded_by.is_some(),
        })
    }
}

impl TenantMemories {
    /// The tenant's entry in `tenants`, new ones with a vector table that spills as `spill` says.
    pub(super) fn of<'a>(
        tenants: &'a mut FastMap<Uuid, TenantMemories>,
        spill: Option<&Spill>,
        id: Uuid,
    ) -> &'a mut TenantMemories {
        tenants.entry(id).or_insert_with(|| Self {
            order: BTreeMap::new(),
            per_type: [0; MemoryType::VARIANTS.len()],
            vectors: spill.map_or_else(VectorTable::default, |s| VectorTable::spilling(s.clone())),
            keywords: KeywordIndex::default(),
            marks: BTreeMap::new(),
            expiring: BTreeSet::new(),
            superseded: [0; MemoryType::VARIANTS.len()],
            scopes: ScopeIndex::default(),
            history: Vec::new(),
            unindexing: 0,
        })
    }

    /// Adds the seqs of a batch that changed the tenant's memories, each held once, in order.
    /// Batches come in log order, so they mostly go at the end; one folded again after a crash
    /// between the sled batches of its commit may find later seqs held already (those of the
    /// states that landed, read at open), and its others go in their places.
    pub(super) fn record_history(&mut self, mut seqs: Vec<u64>) {
        seqs.sort_unstable();
        seqs.dedup();
        for s in seqs {
            if self.history.last().is_none_or(|l| *l < s) {
                self.history.push(s);
            } else if let Err(at) = self.history.binary_search(&s) {
                self.history.insert(at, s);
            }
        }
    }

    /// Whether a query must look at each memory (a filter, or hidden memories it must pass
    /// over); when not, the order and counts answer it alone.
    pub(super) fn needs_check(&self, query: &MemoryQuery<'_>, now: i64) -> bool {
        query.filter.is_some()
            || self.unindexing > 0
            || (!query.include_superseded && self.superseded.iter().any(|n| *n > 0))
            || self.expiring.first().is_some_and(|(at, _)| *at <= now)
    }

    /// How many of the memories a list without a filter would count (of `memory_type`, or
    /// all) are hidden at `now`: the superseded ones unless they are asked for, and those
    /// expired but not swept yet (`type_of` gives a memory's type).
    pub(super) fn hidden(
        &self,
        memory_type: Option<MemoryType>,
        include_superseded: bool,
        now: i64,
        type_of: impl Fn(&Uuid) -> Option<MemoryType>,
    ) -> usize {
        let mut n = match (include_superseded, memory_type) {
            (true, _) => 0,
            (false, None) => self.superseded.iter().sum(),
            (false, Some(t)) => self.superseded[t as usize],
        };
        for (at, id) in &self.expiring {
            if *at > now {
                break;
            }
            let counted = !include_superseded && self.marks.get(id).is_some_and(|m| m.superseded);
            if !counted && memory_type.is_none_or(|t| type_of(id) == Some(t)) {
                n += 1;
            }
        }
        n
    }

    fn set_mark(&mut self, id: Uuid, memory_type: MemoryType, mark: Mark) {
        let old = if mark == Mark::default() {
            self.marks.remove(&id)
        } else {
            self.marks.insert(id, mark)
        }
        .unwrap_or_default();
        if let Some(at) = old.expires_at {
            self.expiring.remove(&(at, id));
        }
        if old.superseded {
            let n = &mut self.superseded[memory_type as usize];
            *n = n.saturating_sub(1);
        }
        if let Some(at) = mark.expires_at {
            self.expiring.insert((at, id));
        }
        if mark.superseded {
            self.superseded[memory_type as usize] += 1;
        }
    }

    /// Puts a live memory; `vector` is its new vector, or `None` when it did not change.
    /// Creation time and type never change, so a memory already listed keeps its places.
    /// Called for every memory a batch changes, from `apply` in another module: inlined there.
    #[inline]
    pub(super) fn put(
        &mut self,
        id: Uuid,
        m: &Kept,
        indexed: Option<&Held>,
        held: Option<&Held>,
        text: Option<&str>,
        vector: Option<&[f32]>,
    ) -> std::io::Result<()> {
        self.set_mark(id, m.memory_type, Mark::of(held.map(|h| &h.extra)));
        self.scopes.replace(id, indexed, held);
        if let Some(text) = text {
            self.keywords.upsert(id, text);
        }
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

    /// The semantic part of a search: among the memories its filter's indexed conditions
    /// narrow it to when they are at most a sixteenth of the table (see [`ScopeIndex`]), else
    /// over the whole table, over-fetching for the share they narrow to (scoring each
    /// candidate is a lookup of its row; above a sixteenth the scan of every row is faster).
    pub(super) fn semantic(
        &self,
        query: &[f32],
        which: &MemoryQuery<'_>,
        filter: RowFilter<'_>,
        min_similarity: f32,
        k: usize,
        candidates: Option<usize>,
    ) -> std::io::Result<Vec<Hit>> {
        let narrowed = which.filter.and_then(|f| self.scopes.candidates(f));
        let passing = narrowed.as_ref().map(Candidates::bound);
        if let (Some(c), Some(bound)) = (&narrowed, passing) {
            if bound <= self.vectors.len() / 16 {
                return self
                    .vectors
                    .search_among(query, c.ids(), filter, min_similarity, k);
            }
        }
        let how = FastSearch {
            passing,
            candidates,
        };
        self.vectors
            .search_fast_with(query, filter, min_similarity, k, how)
    }

    /// Drops memory `id` from the tenant's indexes, but for its keyword postings: its id is
    /// pushed on `unindexed`, for [`Self::unindex_keywords`] once the batch is applied.
    pub(super) fn drop_memory(
        &mut self,
        id: Uuid,
        m: &Kept,
        indexed: Option<&Held>,
        unindexed: &mut Vec<Uuid>,
    ) -> std::io::Result<()> {
        if self.unlist(id, m) {
            self.unindex(id, indexed, unindexed)?;
        }
        Ok(())
    }

    /// Takes memory `id` off the order, the counts and the marks (what lists and their totals
    /// read); whether it was listed. Its indexes keep it until [`Self::unindex`].
    pub(super) fn unlist(&mut self, id: Uuid, m: &Kept) -> bool {
        self.set_mark(id, m.memory_type, Mark::default());
        let Some(ty) = self.order.remove(&(m.created_at, id)) else {
            return false;
        };
        self.per_type[ty as usize] = self.per_type[ty as usize].saturating_sub(1);
        true
    }

    /// Takes memory `id`, unlisted, out of the scopes and the vectors; its id is pushed on
    /// `unindexed` for [`Self::unindex_keywords`].
    pub(super) fn unindex(
        &mut self,
        id: Uuid,
        indexed: Option<&Held>,
        unindexed: &mut Vec<Uuid>,
    ) -> std::io::Result<()> {
        self.scopes.replace(id, indexed, None);
        self.vectors.remove(&id)?;
        unindexed.push(id);
        Ok(())
    }

    /// Takes the memories [`Self::drop_memory`] dropped out of the keyword index, all at once.
    pub(super) fn unindex_keywords(&mut self, ids: &[Uuid]) {
        self.keywords.remove_many(ids);
    }
}

/// Every tenant's entry for the live memories of `state`, each memory's vector read back
/// through `vectors` (or from an older build's copy in the state) and its content taken from
/// `contents` (see `State::open_live`).
pub(super) fn read_tenants(
    state: &State,
    vectors: VectorSource<'_>,
    mut contents: crate::FastMap<Uuid, String>,
) -> Result<FastMap<Uuid, TenantMemories>> {
    // Reading the vectors back from the log is random reads and decoding: on every core.
    let mut live: Vec<(Uuid, &Kept)> = state
        .all
        .iter()
        .map(|(id, k)| (*id, &**k))
        .filter(|(_, m)| m.is_live())
        .collect();
    // In log order: each leaf of the log is paged in once and read in one go. Read in
    // random order, sled keeps many more of the log's nodes in memory after opening, though
    // its cache is capped.
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
    let mut tenants: FastMap<Uuid, TenantMemories> = FastMap::default();
    // Every memory's versions, deleted and erased ones too: each tenant's history.
    let mut histories: HashMap<u32, Vec<u64>> = HashMap::new();
    for m in state.all.values() {
        histories
            .entry(m.tenant)
            .or_default()
            .extend_from_slice(m.versions());
    }
    for (tenant, seqs) in histories {
        TenantMemories::of(
            &mut tenants,
            state.spill.as_ref(),
            state.names.tenant(tenant),
        )
        .record_history(seqs);
    }
    for ((id, m), v) in live.iter().zip(found) {
        let content = contents
            .remove(id)
            .ok_or_else(|| corrupt(TREE, format!("memory {id}: content not read at open")))?;
        TenantMemories::of(
            &mut tenants,
            state.spill.as_ref(),
            state.names.tenant(m.tenant),
        )
        .put(
            *id,
            m,
            None,
            state.names.held(id),
            Some(&content),
            Some(&v?),
        )?;
    }
    Ok(tenants)
}
