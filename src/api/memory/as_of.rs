//! Reads `as_of` a log position: the tenant's memory store as it stood right after it.
//!
//! The memories projection holds, per tenant, the seqs of the events that changed its memories
//! (`Memories::history_up_to`); a read `as_of` position `p` reads those up to `p` from the log
//! and folds them into a store of its own (`Memories::past`, on a temporary database, expiry
//! judged at the time of record `p`), then asks it what the current store is asked. So the
//! cost is the tenant's history up to `p` (one log read and one fold per event), never the
//! log's; at most [`MAX_REPLAYED`] events are replayed (more: 400).
//!
//! Kept for the next look: a store folded from a tenant's whole history up to `p` (list,
//! query, search; not get, which folds one memory's events) is kept, and the tenant's next read
//! as of `p` asks it instead of folding again (the console's "replay this search" and a second
//! look at it ask the same position). Kept stores are bounded ([`KEPT_BYTES`] in all,
//! [`KEPT_PER_TENANT`] a tenant, least recently used out first) and only ever handed to their
//! own tenant. A kept store is dropped, and the position folded again, once it may no longer be
//! what a fold would give: when the keyring has retired or destroyed a key since it was folded
//! (its sealed values were opened before; `Keyring::retirements`), or when a memory it holds
//! unerased is erased in the current store (an erasure of memories that predate sealing
//! destroys no key).
//!
//! Other tenants first: a replay (the fold, the question asked of the folded store, and
//! freeing or keeping it) and a question asked of a kept store run on a thread of their own
//! whose nice value is raised by [`REPLAY_NICE`], as the bulk embedding lanes' are, so a
//! request at the process's priority takes a core from it whenever it wants one. No lock is
//! held across a fold: it takes the keyring's cache lock once per sealed event and the current
//! store's read lock once per memory it created, each for a map lookup, so a niced thread never
//! keeps a request at the process's priority waiting for longer than that.
//!
//! [`CONCURRENT_REPLAYS`] fold runs at a time, in the order they asked (a fair semaphore); a
//! tenant has at most [`REPLAYS_PER_TENANT`] reads as of a position running or waiting their
//! turn, and one more is refused 429 (4290) with `Retry-After`, so one tenant has at most two
//! places in the queue whatever it sends, and another tenant's fold waits for at most two of
//! its. A read answered by a kept store takes its tenant's place but waits for no turn.
//!
//! A tenant's pace: a read as of a position also takes a token of its tenant's bucket
//! ([`READS_PER_SEC`], [`READS_BURST`]) before any of its work (the query's embedding, the
//! fold or the kept store's search), and when the bucket is empty it waits, holding its place,
//! for the next token to come. A read a kept store answers is an ordinary search's work at the
//! process's priority around a niced search (HTTP, the query, its audit entry): without a pace,
//! two clients replaying back to back ask hundreds a second and take a core from the other
//! tenants. With it, one tenant's reads as of a position are at most [`READS_PER_SEC`] a second
//! after a burst, and a read waits at most `REPLAYS_PER_TENANT / READS_PER_SEC` for its token
//! (the queue is its tenant's places).
//!
//! ```text
//! handler: slot (≤ 2 per tenant, else 429), token (wait for it) ─┬─ kept? ─▶ thread (+10): ask
//!    ▲                                  └─ turn (1 at a time) ─▶ thread "as-of-replay" (+10):
//!    │                                                           fold, ask,
//!    └──────────────────────── the answer ◀───────────────────── free the slot, answer;
//!                                                                keep or free the store,
//!                                                                free the turn
//! ```
//!
//! Erased stays erased: the past store opens sealed values with the service's keyring, so a
//! memory whose keys were destroyed since is erased in it from its first event; a memory the
//! current store holds erased for another reason (its events predate sealing) is erased in the
//! past store as the last event folded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use auditmem_projections::event::SubjectsErased;
use auditmem_projections::memories::Memories;
use auditmem_projections::{Applied, Event, Projection};
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::rate_limit::RateLimiter;
use crate::api::state::AppState;
use crate::registry::ErrorCode;
use crate::wire::memory::{AsOf, AsOfShown};
use crate::wire::time::Time;

/// The most memory events a read `as_of` replays: a store of that many memories holds ~140 MB
/// while it is answered (per memory a 384-dimension f32 row, its int8 copy, its state and
/// postings: ~2.8 KB).
pub const MAX_REPLAYED: usize = 50_000;

/// Replays that run at once; others wait their turn. One: a replay then takes at most one core
/// from the other tenants' requests, and one replayed store is held at a time.
pub const CONCURRENT_REPLAYS: usize = 1;

/// A tenant's replays running or waiting their turn at once; one more is refused 429.
pub const REPLAYS_PER_TENANT: usize = 2;

/// How much a replay thread's nice value is raised: as much as the bulk embedding lanes'
/// (beside a busy thread at the process's priority it gets about a tenth of a core).
pub const REPLAY_NICE: i32 = 10;

/// The `Retry-After` of a replay refused for its tenant's queue: a replay of a few thousand
/// events takes a fraction of a second, and the header counts whole seconds.
const RETRY_AFTER_SECS: u64 = 1;

/// A tenant's reads as of a position a second, sustained (module doc): a person replaying
/// recorded searches from the console, or a script replaying an audit trail one position
/// after another (each a fold of 85-180 ms at 3,000 events), asks fewer; two clients asking a
/// kept store back to back would ask 200-250.
pub const READS_PER_SEC: f64 = 10.0;

/// A tenant's reads as of a position at once after it has been idle for a second.
pub const READS_BURST: u32 = 10;

/// Tenants whose pace is remembered at once (least recently used forgotten first: it starts
/// again with a full burst, as a tenant that has been idle for a second would).
const PACED_TENANTS: usize = 16_384;

/// What every read `as_of` of one service shares (held in its `AppState`): the replays'
/// turns, each tenant's places in the queue, and the kept stores.
pub struct Replays {
    /// [`CONCURRENT_REPLAYS`] turns, taken in the order asked (a fair semaphore).
    turns: Arc<tokio::sync::Semaphore>,
    /// Per tenant, its replays running or waiting (no entry: none).
    queued: Arc<Mutex<HashMap<Uuid, usize>>>,
    /// Per tenant, its pace ([`READS_PER_SEC`]).
    paced: RateLimiter<Uuid>,
    kept: Arc<Mutex<Kept>>,
}

impl Replays {
    /// Replays whose tenants read as of a position at most `per_sec` a second after a burst of
    /// `burst` (0 for `per_sec`: no pace).
    pub fn paced(per_sec: f64, burst: u32) -> Self {
        Self {
            turns: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_REPLAYS)),
            queued: Arc::default(),
            paced: RateLimiter::with_capacity(per_sec, burst, PACED_TENANTS),
            kept: Arc::default(),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A list of stores: consistent after a panic elsewhere.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A read as of a position let in: one of its tenant's places, held until it is answered, and
/// its turn of the tenant's pace. [`admit`] gives it, before the read's work.
pub struct Pass {
    tenant: Uuid,
    slot: Slot,
}

/// Lets in a read of `tenant`'s as of a position: refused 429 (4290) when the tenant already
/// has [`REPLAYS_PER_TENANT`] running or waiting; otherwise waits, holding its place, for its
/// turn of the tenant's pace ([`READS_PER_SEC`]).
pub async fn admit(state: &AppState, tenant: Uuid) -> Result<Pass, ApiError> {
    admitted(&state.as_of, tenant).await
}

async fn admitted(replays: &Replays, tenant: Uuid) -> Result<Pass, ApiError> {
    let slot = Slot::take(replays, tenant)?;
    let wait = replays.paced.reserve(tenant);
    if !wait.is_zero() {
        metrics::counter!("auditmem_as_of_reads_paced_total").increment(1);
        tokio::time::sleep(wait).await;
    }
    Ok(Pass { tenant, slot })
}

/// One of a tenant's [`REPLAYS_PER_TENANT`] places, given back when dropped.
struct Slot {
    tenant: Uuid,
    queued: Arc<Mutex<HashMap<Uuid, usize>>>,
}

impl Slot {
    fn take(replays: &Replays, tenant: Uuid) -> Result<Slot, ApiError> {
        let mut queued = replays.queued.lock().unwrap_or_else(|p| p.into_inner());
        let n = queued.entry(tenant).or_insert(0);
        if *n >= REPLAYS_PER_TENANT {
            return Err(ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "this tenant already has {REPLAYS_PER_TENANT} reads as_of a position running or waiting, the most it may; retry after {RETRY_AFTER_SECS} s"
                ),
            )
            .retry_after(RETRY_AFTER_SECS));
        }
        *n += 1;
        Ok(Slot {
            tenant,
            queued: Arc::clone(&replays.queued),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = queued.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                queued.remove(&self.tenant);
            }
        }
    }
}

/// Events folded into the past store at a time, as catch-up folds them.
const FOLD_CHUNK: usize = 4_096;

/// A resolved `as_of`: the position, and when its record was written (none for 0).
#[derive(Clone, Copy, Debug)]
pub struct Then {
    pub position: u64,
    pub at: Option<i64>,
}

impl Then {
    /// The echo of an answer that replayed `events` memory events.
    pub fn shown(&self, events: usize) -> AsOfShown {
        AsOfShown {
            position: self.position,
            at: self.at.map(Time),
            events_replayed: events as u64,
            query_model: None,
            memory_models: None,
            embedder_changed: None,
        }
    }
}

fn refused(message: String) -> ApiError {
    ApiError::new(ErrorCode::BadRequest, message)
}

/// The position `as_of` stands for: a position must be at most the log's head; a time must
/// not be in the future and stands for the last position whose record was written at or
/// before it (records' times never decrease along the log, so a binary search finds it).
pub fn resolve(state: &AppState, as_of: AsOf) -> Result<Then, ApiError> {
    let head = state.appender.head().seq;
    let ts = |seq: u64| -> Result<i64, ApiError> {
        match state.log.get(seq)? {
            Some(r) => Ok(r.ts_micros),
            None => Err(ApiError::internal(format!(
                "as_of: record {seq} is missing"
            ))),
        }
    };
    let position = match as_of {
        AsOf::Position(p) if p > head => {
            return Err(refused(format!(
                "as_of {p} is beyond the log's head ({head}): a position is at most the head"
            )))
        }
        AsOf::Position(p) => p,
        AsOf::Time(t) if t > crate::wire::time::now() => {
            return Err(refused(
                "as_of must not be a time in the future".to_string(),
            ))
        }
        AsOf::Time(t) => {
            // The last seq in 1..=head written at or before `t`; 0 when none is.
            let (mut lo, mut hi) = (0u64, head);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if ts(mid)? <= t {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            lo
        }
    };
    let at = match position {
        0 => None,
        p => Some(ts(p)?),
    };
    Ok(Then { position, at })
}

/// The seqs of the tenant's memory events up to `then`, refused past [`MAX_REPLAYED`].
pub fn history(state: &AppState, tenant: Uuid, then: &Then) -> Result<Vec<u64>, ApiError> {
    state
        .projections
        .memories
        .history_up_to(&tenant, then.position, MAX_REPLAYED)
        .map_err(|n| too_many(then, n))
}

/// `n` events to replay for `then`, refused past [`MAX_REPLAYED`].
pub fn bounded(then: &Then, n: usize) -> Result<(), ApiError> {
    match n > MAX_REPLAYED {
        true => Err(too_many(then, n)),
        false => Ok(()),
    }
}

fn too_many(then: &Then, n: usize) -> ApiError {
    refused(format!(
        "as_of {} needs {n} of this tenant's memory events replayed; at most {MAX_REPLAYED} are: ask for an earlier position, or read one memory or its history as of it",
        then.position
    ))
}

/// Asks `ask` of the tenant's store as it stood right after `then`, folded from `seqs` (the
/// seqs of the tenant's whole history up to it, ascending) or asked of that store kept from an
/// earlier read as of the same position (module doc), for the read `pass` let in; a fold waits
/// its turn ([`CONCURRENT_REPLAYS`] at a time).
pub async fn replay<T, F>(
    state: &AppState,
    pass: Pass,
    then: Then,
    seqs: Vec<u64>,
    ask: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Memories) -> Result<T, ApiError> + Send + 'static,
{
    replayed(state, pass, then, seqs, true, ask).await
}

/// [`replay`] of some of the tenant's events up to `then` (one memory's): the store folded
/// from them is not the tenant's, so it is neither taken from nor kept for the next read.
pub async fn replay_part<T, F>(
    state: &AppState,
    pass: Pass,
    then: Then,
    seqs: Vec<u64>,
    ask: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Memories) -> Result<T, ApiError> + Send + 'static,
{
    replayed(state, pass, then, seqs, false, ask).await
}

async fn replayed<T, F>(
    state: &AppState,
    pass: Pass,
    then: Then,
    seqs: Vec<u64>,
    whole: bool,
    ask: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Memories) -> Result<T, ApiError> + Send + 'static,
{
    let Pass { tenant, slot } = pass;
    if whole {
        if let Some(store) = kept(state, tenant, then.position) {
            return ask_kept(slot, store, ask).await;
        }
    }
    let turn = Arc::clone(&state.as_of.turns)
        .acquire_owned()
        .await
        .map_err(|e| ApiError::internal(format!("as_of: {e}")))?;
    if whole {
        // The same position may have been folded while this read waited its turn.
        if let Some(store) = kept(state, tenant, then.position) {
            drop(turn);
            return ask_kept(slot, store, ask).await;
        }
    }
    // Read before the fold opens anything: a key retired during the fold moves it, and the
    // store is then not kept.
    let retirements = state.projections.keys.retirements().filter(|_| whole);
    let state = state.clone();
    niced(move |answer| {
        let folded = fold(&state, tenant, then, &seqs);
        let asked = folded
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|(past, _)| ask(past));
        // The tenant's place is free once it has its answer (its next read may queue at
        // once); the turn only once the store is kept or freed, so one store is folded at a
        // time and a read waiting for the same position finds it kept.
        drop(slot);
        metrics::counter!("auditmem_as_of_reads_total", "store" => "folded").increment(1);
        let _ = answer.send(asked);
        if let (Ok((past, unerased)), Some(retirements)) = (folded, retirements) {
            let entry = Entry {
                tenant,
                position: then.position,
                bytes: STORE_BASE_BYTES + seqs.len().saturating_mul(STORE_BYTES_PER_EVENT),
                store: Arc::new(past),
                unerased: unerased.into(),
                retirements,
                used: 0,
            };
            // Still what a fold would give only if no key was retired since it began.
            if state.projections.keys.retirements() == Some(retirements) {
                let evicted = state.as_of.kept().keep(entry);
                drop(evicted);
            }
        }
        drop(turn);
    })
    .await
}

/// Asks `ask` of a kept store on a niced thread, as a fold's question is asked.
async fn ask_kept<T, F>(slot: Slot, store: Arc<Memories>, ask: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Memories) -> Result<T, ApiError> + Send + 'static,
{
    niced(move |answer| {
        let asked = ask(&store);
        drop(slot);
        metrics::counter!("auditmem_as_of_reads_total", "store" => "kept").increment(1);
        let _ = answer.send(asked);
        // A store evicted while it was asked is freed here, not on a request's thread.
        drop(store);
    })
    .await
}

/// The tenant's store as of `position` if one is kept and is still what a fold would give
/// (module doc); a kept store that is not is dropped (freed on a niced thread).
fn kept(state: &AppState, tenant: Uuid, position: u64) -> Option<Arc<Memories>> {
    let (store, unerased, retirements) = state.as_of.kept().get(tenant, position)?;
    let current = &state.projections.memories;
    let fresh =
        state.projections.keys.retirements() == Some(retirements) && !current.any_erased(&unerased);
    if fresh {
        return Some(store);
    }
    let dropped = state.as_of.kept().remove(&store);
    drop(store);
    if let Some(dropped) = dropped {
        // Freeing a store of thousands of memories is the replay's work, not the request's.
        let _ = spawn_niced(move || drop(dropped));
    }
    None
}

/// The bytes a replayed store is counted as holding, an event folded: the estimate
/// [`MAX_REPLAYED`] is sized by (an event creates at most one memory).
pub const STORE_BYTES_PER_EVENT: usize = 2_800;

/// The bytes a replayed store is counted as holding whatever it folded: its temporary
/// database's write buffers (sled's are a 512 KiB segment each), so that many small stores
/// are bounded too.
pub const STORE_BASE_BYTES: usize = 1 << 20;

/// The bytes of the stores kept at once (~45,000 events' worth, or 128 empty stores).
pub const KEPT_BYTES: usize = 128 << 20;

/// A tenant's stores kept at once: its latest positions, so that one tenant's many positions
/// evict its own stores before other tenants'.
pub const KEPT_PER_TENANT: usize = 2;

/// The largest store kept: a quarter of [`KEPT_BYTES`] (~11,600 events), so that one tenant's
/// largest stores leave room for others'.
pub const KEPT_MAX_STORE_BYTES: usize = KEPT_BYTES / 4;

/// A replayed store kept for its tenant's next read as of the same position.
struct Entry {
    tenant: Uuid,
    position: u64,
    store: Arc<Memories>,
    /// The memories created in its history and not erased in it: one erased in the current
    /// store since makes it stale.
    unerased: Arc<[Uuid]>,
    /// The keyring's retirements when its fold began.
    retirements: u64,
    bytes: usize,
    /// When it was last kept or asked, on [`Kept::tick`]'s clock.
    used: u64,
}

/// The kept stores, least recently used evicted first.
#[derive(Default)]
struct Kept {
    entries: Vec<Entry>,
    bytes: usize,
    tick: u64,
}

impl Kept {
    /// The tenant's store as of `position`, with what says whether it is still fresh.
    fn get(&mut self, tenant: Uuid, position: u64) -> Option<(Arc<Memories>, Arc<[Uuid]>, u64)> {
        self.tick += 1;
        let tick = self.tick;
        let e = self
            .entries
            .iter_mut()
            .find(|e| e.tenant == tenant && e.position == position)?;
        e.used = tick;
        Some((Arc::clone(&e.store), Arc::clone(&e.unerased), e.retirements))
    }

    /// Keeps `entry` (replacing its tenant's store as of the same position), evicting the
    /// tenant's least recently used past [`KEPT_PER_TENANT`], then anyone's past [`KEPT_BYTES`].
    /// Returns what it let go of (with `entry` itself when it is too large), for the caller
    /// to free outside the lock.
    fn keep(&mut self, mut entry: Entry) -> Vec<Entry> {
        if entry.bytes > KEPT_MAX_STORE_BYTES {
            return vec![entry];
        }
        self.tick += 1;
        entry.used = self.tick;
        let mut evicted = Vec::new();
        let same = |e: &Entry| e.tenant == entry.tenant && e.position == entry.position;
        if let Some(i) = self.entries.iter().position(same) {
            evicted.push(self.take(i));
        }
        while self
            .entries
            .iter()
            .filter(|e| e.tenant == entry.tenant)
            .count()
            >= KEPT_PER_TENANT
        {
            let oldest = self.oldest(|e| e.tenant == entry.tenant);
            evicted.extend(oldest.map(|i| self.take(i)));
        }
        while self.bytes + entry.bytes > KEPT_BYTES {
            match self.oldest(|_| true) {
                Some(i) => evicted.push(self.take(i)),
                None => break,
            }
        }
        self.bytes += entry.bytes;
        self.entries.push(entry);
        metrics::gauge!("auditmem_as_of_kept_bytes").set(self.bytes as f64);
        evicted
    }

    /// Takes out the entry holding `store`, if it is still kept.
    fn remove(&mut self, store: &Arc<Memories>) -> Option<Entry> {
        let i = self
            .entries
            .iter()
            .position(|e| Arc::ptr_eq(&e.store, store))?;
        let entry = self.take(i);
        metrics::gauge!("auditmem_as_of_kept_bytes").set(self.bytes as f64);
        Some(entry)
    }

    fn oldest(&self, which: impl Fn(&Entry) -> bool) -> Option<usize> {
        (0..self.entries.len())
            .filter(|&i| which(&self.entries[i]))
            .min_by_key(|&i| self.entries[i].used)
    }

    fn take(&mut self, i: usize) -> Entry {
        let entry = self.entries.swap_remove(i);
        self.bytes -= entry.bytes;
        entry
    }
}

/// Runs `job` on a new thread niced by [`REPLAY_NICE`] (its own: the nice value is per
/// thread, and the thread ends with the job) and waits for what it sends on its channel.
async fn niced<T, F>(job: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::oneshot::Sender<Result<T, ApiError>>) + Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    spawn_niced(move || job(answer))
        .map_err(|e| ApiError::internal(format!("as_of: no replay thread: {e}")))?;
    answered
        .await
        .map_err(|_| ApiError::internal("as_of: the replay stopped before answering"))?
}

/// Starts `job` on a new thread niced by [`REPLAY_NICE`]. When no thread can be started the
/// job is dropped unrun, here.
fn spawn_niced(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    crate::embed::spawn_niced("as-of-replay", REPLAY_NICE, job)
}

/// The tenant whose memories a memory event changes (the tenant events index's events but an
/// export's completion); `None` for any other event.
fn tenant_of(event: &Event) -> Option<Uuid> {
    match event {
        Event::ExportCompleted(_) => None,
        e => auditmem_projections::tenant_events::tenant_of(e),
    }
}

/// The tenant's store folded from the events at `seqs`, and the memories created there that
/// it holds unerased.
fn fold(
    state: &AppState,
    tenant: Uuid,
    then: Then,
    seqs: &[u64],
) -> Result<(Memories, Vec<Uuid>), ApiError> {
    let keys = Arc::clone(&state.projections.keys);
    let past = Memories::past(keys, then.at.unwrap_or(0))?;
    let mut created = Vec::new();
    for chunk in seqs.chunks(FOLD_CHUNK) {
        let mut events = Vec::with_capacity(chunk.len());
        for &seq in chunk {
            let Some((record, event)) = state.log.event(seq)? else {
                return Err(ApiError::internal(format!(
                    "as_of: record {seq} is missing"
                )));
            };
            // Only this tenant's memory events: the index names no other, and a read of the
            // past must not be able to show another tenant's.
            if tenant_of(&event) != Some(tenant) {
                continue;
            }
            if let Event::MemoryCreated(e) = &event {
                created.push(e.memory_id);
            }
            events.push((seq, record.ts_micros, event));
        }
        let applied: Vec<Applied<'_>> = events
            .iter()
            .map(|(seq, ts_micros, event)| Applied {
                seq: *seq,
                ts_micros: *ts_micros,
                event,
                prepared: None,
            })
            .collect();
        past.apply(&applied)?;
    }
    // Erased now is erased then, whatever made it so.
    let current = &state.projections.memories;
    let (erased, unerased): (Vec<Uuid>, Vec<Uuid>) = created
        .into_iter()
        .filter(|id| !past.is_erased(id))
        .partition(|id| current.is_erased(id));
    if !erased.is_empty() {
        let event = Event::SubjectsErased(SubjectsErased {
            erasure_id: Uuid::nil(),
            tenant_id: tenant,
            subjects: Vec::new(),
            key_ids: Vec::new(),
            memory_ids: erased,
            erased_at: then.at.unwrap_or(0),
        });
        past.apply(&[Applied {
            seq: then.position + 1,
            ts_micros: then.at.unwrap_or(0),
            event: &event,
            prepared: None,
        }])?;
    }
    Ok((past, unerased))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_has_two_places_and_a_third_is_refused_429_with_retry_after() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let r = Replays::paced(READS_PER_SEC, READS_BURST);
        let first = Slot::take(&r, a).expect("a first place");
        let _second = Slot::take(&r, a).expect("a second place");
        let refused = Slot::take(&r, a).err().expect("no third place");
        assert_eq!(refused.code, ErrorCode::RateLimited);
        assert_eq!(refused.retry_after, Some(1));
        assert_eq!(
            refused.message,
            "this tenant already has 2 reads as_of a position running or waiting, the most it may; retry after 1 s"
        );
        // Another tenant's places are its own.
        let _other = Slot::take(&r, b).expect("another tenant's place");
        drop(first);
        let _again = Slot::take(&r, a).expect("a place given back is taken again");
        assert!(Slot::take(&r, a).is_err());
    }

    #[tokio::test]
    async fn a_read_past_its_tenants_burst_waits_for_its_turn_of_the_pace() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let r = Replays::paced(READS_PER_SEC, READS_BURST);
        let started = std::time::Instant::now();
        for _ in 0..READS_BURST {
            drop(admitted(&r, a).await.expect("a read of the burst"));
        }
        assert!(
            started.elapsed() < std::time::Duration::from_millis(100),
            "the burst waits for nothing: {:?}",
            started.elapsed()
        );
        // The bucket is empty: the next read waits a token's refill (1 / READS_PER_SEC).
        let before = std::time::Instant::now();
        let waited = admitted(&r, a).await.expect("a read past the burst");
        assert!(
            before.elapsed() >= std::time::Duration::from_millis(95),
            "a read past the burst waited {:?}",
            before.elapsed()
        );
        // Another tenant's pace is its own.
        let before = std::time::Instant::now();
        drop(admitted(&r, b).await.expect("another tenant's read"));
        assert!(before.elapsed() < std::time::Duration::from_millis(90));
        // A read waiting for its turn holds its place: with one held and one waiting, a third
        // is refused at once.
        let r = Arc::new(r);
        let waiting = tokio::spawn({
            let r = Arc::clone(&r);
            async move { admitted(&r, a).await.map(|_| ()) }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let refused = admitted(&r, a).await.err().expect("no third place");
        assert_eq!(refused.code, ErrorCode::RateLimited);
        assert_eq!(refused.retry_after, Some(1));
        drop(waited);
        waiting.await.expect("joined").expect("its turn came");
    }

    #[test]
    fn a_tenant_whose_places_are_all_given_back_is_forgotten() {
        let a = Uuid::new_v4();
        let r = Replays::paced(READS_PER_SEC, READS_BURST);
        drop((Slot::take(&r, a), Slot::take(&r, a)));
        let queued = r.queued.lock().unwrap_or_else(|p| p.into_inner());
        assert_eq!(queued.get(&a), None);
    }

    fn entry(tenant: Uuid, position: u64, bytes: usize) -> Entry {
        let keys = Arc::new(auditmem_projections::seal::MemoryKeyring::default());
        Entry {
            tenant,
            position,
            store: Arc::new(Memories::past(keys, 0).expect("a past store")),
            unerased: Arc::from(Vec::new()),
            retirements: 0,
            bytes,
            used: 0,
        }
    }

    /// The (tenant, position) of each kept store, in a fixed order.
    fn held(kept: &Kept) -> Vec<(Uuid, u64)> {
        let mut held: Vec<_> = kept
            .entries
            .iter()
            .map(|e| (e.tenant, e.position))
            .collect();
        held.sort();
        held
    }

    #[test]
    fn a_kept_store_is_found_by_its_own_tenant_and_position_only() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let mut kept = Kept::default();
        let e = entry(a, 7, 1_000);
        let store = Arc::clone(&e.store);
        assert!(kept.keep(e).is_empty());
        let (found, _, _) = kept.get(a, 7).expect("a's store as of 7");
        assert!(Arc::ptr_eq(&found, &store));
        assert!(
            kept.get(b, 7).is_none(),
            "another tenant at the same position"
        );
        assert!(kept.get(a, 6).is_none(), "another position");
        assert!(kept.get(a, 8).is_none(), "another position");
    }

    #[test]
    fn a_tenant_keeps_two_stores_its_least_recently_used_out_first() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let mut kept = Kept::default();
        kept.keep(entry(b, 1, 1_000));
        kept.keep(entry(a, 1, 1_000));
        kept.keep(entry(a, 2, 1_000));
        kept.get(a, 1);
        let evicted = kept.keep(entry(a, 3, 1_000));
        assert_eq!(
            evicted
                .iter()
                .map(|e| (e.tenant, e.position))
                .collect::<Vec<_>>(),
            vec![(a, 2)]
        );
        let mut want = vec![(a, 1), (a, 3), (b, 1)];
        want.sort();
        assert_eq!(held(&kept), want);
        assert_eq!(kept.bytes, 3_000);
        // The same position again replaces its store.
        let evicted = kept.keep(entry(a, 3, 2_000));
        assert_eq!(evicted.len(), 1);
        assert_eq!(kept.bytes, 4_000);
        assert_eq!(held(&kept), want);
    }

    #[test]
    fn kept_stores_stay_within_their_bytes_the_least_recently_used_out_first() {
        let t: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        let mut kept = Kept::default();
        let quarter = KEPT_MAX_STORE_BYTES;
        for (i, tenant) in t.iter().take(4).enumerate() {
            assert!(kept.keep(entry(*tenant, i as u64, quarter)).is_empty());
        }
        assert_eq!(kept.bytes, KEPT_BYTES);
        kept.get(t[0], 0);
        let evicted = kept.keep(entry(t[4], 4, 1));
        assert_eq!(
            evicted
                .iter()
                .map(|e| (e.tenant, e.position))
                .collect::<Vec<_>>(),
            vec![(t[1], 1)]
        );
        assert_eq!(kept.bytes, 3 * quarter + 1);
        // A store larger than a quarter is not kept, and evicts nothing.
        let too_large = kept.keep(entry(t[1], 9, quarter + 1));
        assert_eq!(too_large.len(), 1);
        assert!(kept.get(t[1], 9).is_none());
        assert_eq!(kept.bytes, 3 * quarter + 1);
    }

    #[test]
    fn a_removed_store_is_found_no_more() {
        let a = Uuid::new_v4();
        let mut kept = Kept::default();
        kept.keep(entry(a, 1, 10));
        let (store, _, _) = kept.get(a, 1).expect("kept");
        assert!(kept.remove(&store).is_some());
        assert!(kept.get(a, 1).is_none());
        assert!(kept.remove(&store).is_none());
        assert_eq!(kept.bytes, 0);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_replay_runs_on_a_thread_of_its_own_niced_by_ten() {
        let process = rustix::process::getpriority_process(None).expect("this thread's nice");
        let (name, nice) = niced(|answer| {
            let nice = rustix::process::getpriority_process(None)
                .map_err(|e| ApiError::internal(e.to_string()));
            let name = std::thread::current().name().map(str::to_string);
            let _ = answer.send(nice.map(|n| (name, n)));
        })
        .await
        .expect("an answer");
        assert_eq!(name.as_deref(), Some("as-of-replay"));
        assert_eq!(nice, (process + REPLAY_NICE).min(19));
        // This thread's own value is left as it was.
        assert_eq!(
            rustix::process::getpriority_process(None).expect("this thread's nice"),
            process
        );
    }
}
