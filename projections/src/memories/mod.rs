//! The memory store and its vector tables, folded from `MemoryCreated`, `MemoryUpdated`,
//! `MemoryDeleted`, `MemoriesDeletedByType`, `MemoriesDeleted`, `MemoriesExpired`,
//! `MemorySuperseded` and `SubjectsErased`.
//!
//! Sealed at rest: a memory whose events are sealed keeps its content and metadata in the
//! tree and the texts file only sealed under its subjects' keys (`sealing`), opened with the
//! projections' keyring when a read, the keyword index or the filters need them. A memory an
//! erasure names, or whose keys are gone, is *erased*: in no index (vectors, postings,
//! scopes), never shown, its history saying `erased`.
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
//! - `sealing`: a state's sealed and open forms, and what the tree and texts file keep;
//! - [`neighbours`]: the lift a hybrid search gives a found `context` memory's stream
//!   neighbours; [`when`]: the periods a query names and the boost of memories in them;
//! - here: [`Memories`] and its queries.

use std::io;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::MemoryType;
use crate::keyword::{fuse, Fusion};
use crate::projection::Result;
use crate::seal::{KeyId, Keyring, Sealed};
use crate::vector_table::{
    candidates_for, Hit, RowFilter, Spill, IMPORTANCE_WEIGHT, SIMILARITY_WEIGHT,
};

mod apply;
mod block;
#[cfg(test)]
mod crash_tests;
pub mod filter;
pub mod neighbours;
mod scopes;
#[cfg(test)]
mod sealed_tests;
mod sealing;
mod state;
mod tenant;
#[cfg(test)]
mod tests;
pub mod when;

use filter::{Filter, Subject};
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
    /// Scope, metadata, expiry and supersession, when the memory has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Extra>,
    /// The content and metadata sealed under the memory's keys (see `sealing`): in the stored
    /// form, `content` is then empty and `extra.metadata` absent. Absent for a memory whose
    /// events predate sealing (its fields are in the clear) and for an erased one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<Sealed>,
    /// Its sealed fields no longer open (a key of one of its subjects was destroyed), or an
    /// erasure named it: it is in no index and answers nothing; its history says `erased`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub erased: bool,
    /// While a batch is applied, with the content and metadata in the clear: the keys they are
    /// sealed under before they are stored (none: a memory that predates sealing). Never
    /// stored: the stored form names them in `sealed`.
    #[serde(skip)]
    pub keys: Vec<KeyId>,
}

/// What a memory may carry beyond the interface's fields. Held beside the packed states, only
/// for the memories that have any (see `state::Names::extras`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The metadata object as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_at: Option<i64>,
    /// When what it says happened (the caller's `occurred_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<i64>,
}

impl Extra {
    /// `None` when it carries nothing.
    pub fn or_none(self) -> Option<Self> {
        (self != Self::default()).then_some(self)
    }

    /// `extra` with an update's metadata, expiry and occurrence time changes, if it has any.
    pub fn amended(
        extra: Option<Extra>,
        amend: Option<&crate::event::MemoryAmend>,
    ) -> Option<Extra> {
        let Some(amend) = amend else {
            return extra;
        };
        let mut x = extra.unwrap_or_default();
        if amend.set_metadata {
            x.metadata = amend.metadata.clone();
        }
        if amend.set_expires_at {
            x.expires_at = amend.expires_at;
        }
        if amend.set_occurred_at {
            x.occurred_at = amend.occurred_at;
        }
        x.or_none()
    }

    /// The metadata object (stored as the JSON text it was checked as).
    pub fn metadata_value(&self) -> Option<serde_json::Value> {
        self.metadata
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
    }

    /// Whether the memory has expired at `now`.
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|t| t <= now)
    }
}

impl From<crate::event::MemoryExtra> for Extra {
    fn from(e: crate::event::MemoryExtra) -> Self {
        Extra {
            user_id: e.user_id,
            agent_id: e.agent_id,
            session_id: e.session_id,
            metadata: e.metadata,
            expires_at: e.expires_at,
            superseded_by: None,
            superseded_at: None,
            occurred_at: e.occurred_at,
        }
    }
}

/// Which of a tenant's memories a list, search or delete takes: of a type, matching a
/// filter, superseded ones too or not. Expired ones never.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryQuery<'a> {
    pub memory_type: Option<MemoryType>,
    pub filter: Option<&'a Filter>,
    pub include_superseded: bool,
}

impl From<Option<MemoryType>> for MemoryQuery<'_> {
    fn from(memory_type: Option<MemoryType>) -> Self {
        Self {
            memory_type,
            ..Self::default()
        }
    }
}

/// How a search finds memories: by meaning (the interface's search), by BM25 over the
/// contents, or both fused by reciprocal rank (the default: on LoCoMo it finds the most,
/// docs/SEARCH.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "schema",
    derive(utoipa::ToSchema),
    schema(as = SearchModeName, rename_all = "lowercase")
)]
pub enum SearchMode {
    Semantic,
    Keyword,
    #[default]
    Hybrid,
}

/// Candidates each list gives a hybrid search's fusion (as `search_eval` measured it).
pub const HYBRID_DEPTH: usize = 50;

/// One result of [`Memories::search_in_mode`].
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub memory: MemoryView,
    /// Cosine similarity of the query and the memory.
    pub score: f32,
    /// What results are ranked by: the semantic final score, the BM25 score or the fused
    /// score, by mode.
    pub final_score: f32,
    /// `0.85 * score + 0.15 * importance`, the semantic ranking key.
    pub semantic_final_score: f32,
    /// The BM25 score, when keyword search contributed the result.
    pub keyword_score: Option<f32>,
    /// 1-based places in the semantic and keyword lists the result was in.
    pub semantic_rank: Option<usize>,
    pub keyword_rank: Option<usize>,
}

/// Now, in microseconds since the epoch: expiry is decided by the reader's clock.
fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
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
    pub extra: Option<Extra>,
}

/// The memories projection: tree `proj_memories` and the in-memory state folded from it.
pub struct Memories {
    tree: sled::Tree,
    /// Shared with the threads that take a large batch's dropped memories out of the indexes
    /// after it landed (see `apply`).
    state: Arc<RwLock<State>>,
    /// Those threads' progress.
    unindexing: Arc<apply::Unindexing>,
    /// Opens the memories' sealed contents and metadata (see `sealing`).
    keys: Arc<dyn Keyring>,
    /// The time expiry is judged at: the reader's clock (`None`), or a fixed time for a store
    /// rebuilt as it stood at a log position ([`Memories::past`]).
    clock: Option<i64>,
}

/// [`Memories`]' in-memory part, detached from its tree.
pub struct Detached(State, Arc<dyn Keyring>);

impl Memories {
    /// The in-memory state without the tree handle (see `Projections::detach`).
    pub fn detach(self) -> Result<Detached> {
        // No thread holds the state once none is unindexing (each lets go of it first).
        self.wait_unindexed()?;
        let state = Arc::try_unwrap(self.state).map_err(|_| {
            io::Error::other("the memories' state is still shared by an unindexing thread")
        })?;
        Ok(Detached(
            state.into_inner().unwrap_or_else(|p| p.into_inner()),
            self.keys,
        ))
    }

    pub fn attach(db: &sled::Db, d: Detached) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
            state: Arc::new(RwLock::new(d.0)),
            unindexing: Arc::default(),
            keys: d.1,
            clock: None,
        })
    }

    /// Opens the store over `db`, reading each live memory's vector through `vectors` and
    /// opening its sealed content with `keys` (a memory whose keys are gone is erased); large
    /// tenants' f32 rows go to files as `spill` says (none: every row stays on the heap).
    pub fn open(
        db: &sled::Db,
        vectors: VectorSource<'_>,
        spill: Option<Spill>,
        keys: Arc<dyn Keyring>,
    ) -> Result<Self> {
        let tree = db.open_tree(TREE)?;
        let mut state = State::new(spill);
        block::read_states(&tree, &mut state)?;
        let contents = state.open_live(&*keys)?;
        state.tenants = tenant::read_tenants(&state, vectors, contents)?;
        Ok(Self {
            tree,
            state: Arc::new(RwLock::new(state)),
            unindexing: Arc::default(),
            keys,
            clock: None,
        })
    }

    /// An empty store on a temporary database of its own, whose reads judge expiry at `at`:
    /// what a read `as_of` a log position folds that tenant's history into. Its sealed values
    /// open with `keys`, so a memory whose keys were destroyed since is erased in it too.
    pub fn past(keys: Arc<dyn Keyring>, at: i64) -> Result<Self> {
        // Never flushed: it is gone once answered, and a flusher thread would work beside
        // the other tenants' requests at the process's priority.
        let db = sled::Config::new()
            .temporary(true)
            .flush_every_ms(None)
            .open()?;
        let mut past = Self::open(&db, &|_| Ok(None), None, keys)?;
        past.clock = Some(at);
        Ok(past)
    }

    /// The seqs of the events that changed the tenant's memories up to `position`, ascending;
    /// `Err(n)` when there are `n`, more than `limit`. A binary search of the tenant's
    /// history: its cost does not grow with the log.
    pub fn history_up_to(
        &self,
        tenant: &Uuid,
        position: u64,
        limit: usize,
    ) -> std::result::Result<Vec<u64>, usize> {
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok(Vec::new());
        };
        let n = t.history.partition_point(|s| *s <= position);
        if n > limit {
            return Err(n);
        }
        Ok(t.history[..n].to_vec())
    }

    /// The embedding models of the tenant's live memories (the one each was embedded with),
    /// each once, sorted.
    pub fn live_models(&self, tenant: &Uuid) -> Vec<String> {
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Vec::new();
        };
        let mut models: Vec<String> = t
            .order
            .keys()
            .filter_map(|(_, id)| state.all.get(id))
            .map(|k| state.names.model(k).to_string())
            .collect();
        models.sort_unstable();
        models.dedup();
        models
    }

    /// Whether memory `id` (of any tenant) is erased.
    pub fn is_erased(&self, id: &Uuid) -> bool {
        self.state().all.get(id).is_some_and(|k| k.is_erased())
    }

    /// Whether any of `ids` is erased: [`Self::is_erased`] of each, under one hold of the
    /// state's lock.
    pub fn any_erased(&self, ids: &[Uuid]) -> bool {
        let state = self.state();
        ids.iter()
            .any(|id| state.all.get(id).is_some_and(|k| k.is_erased()))
    }

    /// The time expiry is judged at now.
    fn now(&self) -> i64 {
        self.clock.unwrap_or_else(now_micros)
    }

    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A live memory of the tenant.
    pub fn get(&self, tenant: &Uuid, id: &Uuid) -> io::Result<Option<MemoryView>> {
        let state = self.state();
        let now = self.now();
        state
            .live(tenant, id)
            .filter(|_| !state.names.extra(id).is_some_and(|e| e.expired(now)))
            .map(|m| state.names.view(*id, m, &*self.keys))
            .transpose()
            .map(Option::flatten)
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
    pub fn list<'a>(
        &self,
        tenant: &Uuid,
        query: impl Into<MemoryQuery<'a>>,
        offset: usize,
        limit: usize,
    ) -> io::Result<(usize, Vec<MemoryView>)> {
        let query = query.into();
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok((0, Vec::new()));
        };
        let memory_type = query.memory_type;
        let now = self.now();
        let check = t.needs_check(&query, now);
        let of_type = |ty: &MemoryType| memory_type.is_none_or(|want| *ty == want);
        if query.filter.is_none() {
            // The total from the counts; the page walks only as far as it reaches, passing
            // over the hidden memories it meets.
            let all = match memory_type {
                None => t.order.len(),
                Some(ty) => t.per_type[ty as usize],
            };
            let hidden = t.hidden(memory_type, query.include_superseded, now, |id| {
                state.all.get(id).map(|k| k.memory_type)
            });
            let page = t
                .order
                .iter()
                .rev()
                .filter(|((_, id), ty)| of_type(ty) && (!check || state.admits(id, &query, now)))
                .skip(offset)
                .take(limit)
                .filter_map(|((_, id), _)| {
                    state
                        .live(tenant, id)
                        .map(|m| state.names.view(*id, m, &*self.keys))
                })
                .collect::<io::Result<Vec<_>>>()?
                .into_iter()
                .flatten()
                .collect();
            return Ok((all.saturating_sub(hidden), page));
        }
        // A filter: every memory is looked at for the total.
        let mut total = 0;
        let mut page = Vec::new();
        for ((_, id), ty) in t.order.iter().rev() {
            if !of_type(ty) || !state.admits(id, &query, now) {
                continue;
            }
            if total >= offset && page.len() < limit {
                if let Some(m) = state.live(tenant, id) {
                    page.extend(state.names.view(*id, m, &*self.keys)?);
                }
            }
            total += 1;
        }
        Ok((total, page))
    }

    /// Ids of the tenant's live memories a query takes (a filtered batch delete).
    pub fn ids_matching(&self, tenant: &Uuid, query: &MemoryQuery<'_>) -> Vec<Uuid> {
        let state = self.state();
        let now = self.now();
        state
            .tenants
            .get(tenant)
            .map(|t| {
                t.order
                    .iter()
                    .filter(|(_, ty)| query.memory_type.is_none_or(|want| **ty == want))
                    .map(|((_, id), _)| *id)
                    .filter(|id| state.admits(id, query, now))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every tenant's live memories whose `expires_at` is at or before `now`, by tenant, at
    /// most `limit` in all (the sweeper takes them out).
    pub fn expired(&self, now: i64, limit: usize) -> Vec<(Uuid, Vec<Uuid>)> {
        let state = self.state();
        let mut out = Vec::new();
        let mut left = limit;
        for (tenant, t) in &state.tenants {
            if left == 0 {
                break;
            }
            let ids: Vec<Uuid> = t
                .expiring
                .iter()
                .take_while(|(at, _)| *at <= now)
                .take(left)
                .map(|(_, id)| *id)
                .collect();
            if !ids.is_empty() {
                left -= ids.len();
                out.push((*tenant, ids));
            }
        }
        out
    }

    /// Whether every one of `ids` is a live memory of the tenant whose `expires_at` is at or
    /// before `now`: what the sweeper's precondition asks right before its event is sealed.
    pub fn all_expired(&self, tenant: &Uuid, ids: &[Uuid], now: i64) -> bool {
        let state = self.state();
        ids.iter().all(|id| {
            state.live(tenant, id).is_some()
                && state.names.extra(id).is_some_and(|e| e.expired(now))
        })
    }

    /// Ids of the tenant's live memories of a type (superseded ones too; not expired ones).
    pub fn ids_of_type(&self, tenant: &Uuid, memory_type: MemoryType) -> Vec<Uuid> {
        self.ids_matching(
            tenant,
            &MemoryQuery {
                memory_type: Some(memory_type),
                filter: None,
                include_superseded: true,
            },
        )
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
    pub fn search<'a>(
        &self,
        tenant: &Uuid,
        query: &[f32],
        which: impl Into<MemoryQuery<'a>>,
        min_similarity: f32,
        k: usize,
    ) -> std::io::Result<Vec<(MemoryView, Hit)>> {
        let which = which.into();
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok(Vec::new());
        };
        let now = self.now();
        let admit = |id: &Uuid| state.admits(id, &which, now);
        let filter = RowFilter {
            memory_type: which.memory_type,
            admit: t
                .needs_check(&which, now)
                .then_some(&admit as &(dyn Fn(&Uuid) -> bool + Sync)),
        };
        t.semantic(query, &which, filter, min_similarity, k, None)?
            .into_iter()
            .filter_map(|h| {
                state.live(tenant, &h.id).and_then(|m| {
                    state
                        .names
                        .view(h.id, m, &*self.keys)
                        .transpose()
                        .map(|v| v.map(|v| (v, h)))
                })
            })
            .collect()
    }

    /// A search in any [`SearchMode`]: `text` is the query for BM25, `vector` its embedding.
    /// Semantic results are what [`Self::search`] returns; keyword results are ranked by BM25;
    /// hybrid fuses the best [`HYBRID_DEPTH`] (at least `k`) of each by `fusion`, lifts the
    /// `context` memories written next to a candidate in its stream ([`neighbours`]) and the
    /// memories whose `occurred_at` is in a period the query names ([`when`]). Every result
    /// carries its cosine similarity. `min_similarity` bounds the semantic part only.
    #[allow(clippy::too_many_arguments)]
    pub fn search_in_mode<'a>(
        &self,
        tenant: &Uuid,
        text: &str,
        vector: &[f32],
        which: impl Into<MemoryQuery<'a>>,
        min_similarity: f32,
        k: usize,
        mode: SearchMode,
        fusion: &Fusion,
    ) -> std::io::Result<Vec<Found>> {
        let which = which.into();
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok(Vec::new());
        };
        let now = self.now();
        let admit = |id: &Uuid| state.admits(id, &which, now);
        let depth = match mode {
            SearchMode::Hybrid => k.max(HYBRID_DEPTH),
            _ => k,
        };
        let semantic = match mode {
            SearchMode::Keyword => Vec::new(),
            _ => {
                let filter = RowFilter {
                    memory_type: which.memory_type,
                    admit: t
                        .needs_check(&which, now)
                        .then_some(&admit as &(dyn Fn(&Uuid) -> bool + Sync)),
                };
                // Ranked `depth` deep, but only the best `k` are shown: rescored as many
                // candidates as a search for `k` rescores (the rest only give ranks to fuse).
                let candidates = (mode == SearchMode::Hybrid).then(|| candidates_for(k));
                t.semantic(vector, &which, filter, min_similarity, depth, candidates)?
            }
        };
        let keyword = match mode {
            SearchMode::Semantic => Vec::new(),
            _ => t.keywords.search(text, depth, admit),
        };
        // The keyword hits a hybrid search fuses: those the gate lets through.
        let gated: Option<Vec<Uuid>> = (mode == SearchMode::Hybrid)
            .then(|| fusion.keyword_ranking(&keyword, t.keywords.query_weight(text)));
        let mut ranked: Vec<(Uuid, f32)> = match (mode, &gated) {
            (SearchMode::Semantic, _) => semantic.iter().map(|h| (h.id, h.final_score)).collect(),
            (_, Some(kw)) => {
                let sem: Vec<Uuid> = semantic.iter().map(|h| h.id).collect();
                fuse(&sem, kw, fusion)
            }
            _ => keyword.clone(),
        };
        if mode == SearchMode::Hybrid {
            neighbours::lift(
                &mut ranked,
                |id| neighbours::of(&state, t, id, admit),
                neighbours::NEIGHBOUR_SHARE,
            );
            // A relative time ("last week") is read against the store's clock: the time of
            // the position of a search `as_of`, else now.
            if let Some(period) = when::named_period_at(text, Some(now)) {
                // The memories that say when they happened, in the period the query names.
                let occurred = |id: &Uuid| state.names.extra(id).and_then(|e| e.occurred_at);
                when::boost(
                    &mut ranked,
                    |id| occurred(id).is_some_and(|t| period.holds(t)),
                    fusion.k,
                    when::TIME_WEIGHT,
                );
            }
        }
        let mut out = Vec::with_capacity(k.min(ranked.len()));
        for (id, final_score) in ranked.into_iter().take(k) {
            let Some(m) = state.live(tenant, &id) else {
                continue;
            };
            let Some(memory) = state.names.view(id, m, &*self.keys)? else {
                continue;
            };
            let sem = semantic.iter().position(|h| h.id == id);
            let kw = match &gated {
                Some(g) => g.iter().position(|g| *g == id),
                None => keyword.iter().position(|h| h.0 == id),
            };
            let score = match sem {
                Some(i) => semantic[i].score,
                None => match t.vectors.vector(&id)? {
                    Some(row) => crate::vector_table::dot(&row, vector),
                    None => 0.0,
                },
            };
            out.push(Found {
                memory,
                score,
                final_score,
                semantic_final_score: SIMILARITY_WEIGHT * score
                    + IMPORTANCE_WEIGHT * m.importance as f32,
                keyword_score: kw.and_then(|_| keyword.iter().find(|h| h.0 == id).map(|h| h.1)),
                semantic_rank: sem.map(|i| i + 1),
                keyword_rank: kw.map(|i| i + 1),
            });
        }
        Ok(out)
    }

    /// The most similar memory of the tenant that list and search show (of a type, if given)
    /// and its cosine.
    pub fn nearest<'a>(
        &self,
        tenant: &Uuid,
        query: &[f32],
        which: impl Into<MemoryQuery<'a>>,
    ) -> std::io::Result<Option<(Uuid, f32)>> {
        let which = which.into();
        let state = self.state();
        let Some(t) = state.tenants.get(tenant) else {
            return Ok(None);
        };
        let now = self.now();
        let admit = |id: &Uuid| state.admits(id, &which, now);
        let filter = RowFilter {
            memory_type: which.memory_type,
            admit: t
                .needs_check(&which, now)
                .then_some(&admit as &(dyn Fn(&Uuid) -> bool + Sync)),
        };
        // Similarity alone: importance must not decide what counts as a duplicate.
        t.vectors.most_similar(query, filter)
    }
}

impl State {
    /// Whether memory `id` (one of the tenant's live ones) is taken by `query` at `now`.
    fn admits(&self, id: &Uuid, query: &MemoryQuery<'_>, now: i64) -> bool {
        // Not live: dropped by a batch that is still taking it out of the indexes.
        let Some(k) = self.all.get(id).filter(|k| k.is_live()) else {
            return false;
        };
        let held = self.names.held(id);
        if let Some(h) = held {
            if h.extra.expired(now)
                || (!query.include_superseded && h.extra.superseded_by.is_some())
            {
                return false;
            }
        }
        if query.memory_type.is_some_and(|t| k.memory_type != t) {
            return false;
        }
        query.filter.is_none_or(|f| {
            f.matches(&Subject {
                memory_type: k.memory_type,
                importance: k.importance,
                created_at: k.created_at,
                updated_at: k.updated_at(),
                extra: held.map(|h| &h.extra),
                metadata: held.and_then(|h| h.metadata.as_ref()),
            })
        })
    }
}
