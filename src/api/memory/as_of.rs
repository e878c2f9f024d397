//! Reads `as_of` a log position: the tenant's memory store as it stood right after it.
//!
//! Nothing is kept for this. The memories projection holds, per tenant, the seqs of the events
//! that changed its memories (`Memories::history_up_to`); a read `as_of` position `p` reads
//! those up to `p` from the log and folds them into a store of its own
//! (`Memories::past`, on a temporary database, expiry judged at the time of record `p`), then
//! asks it what the current store is asked. So the cost is the tenant's history up to `p`
//! (one log read and one fold per event), never the log's; at most [`MAX_REPLAYED`] events are
//! replayed (more: 400).
//!
//! Other tenants first: a replay (the fold, the question asked of the folded store, and
//! freeing it) runs on a thread of its own whose nice value is raised by [`REPLAY_NICE`], as
//! the bulk embedding lanes' are, so a request at the process's priority takes a core from it
//! whenever it wants one. [`CONCURRENT_REPLAYS`] replay runs at a time (one replayed store is
//! held at a time); a tenant has at most [`REPLAYS_PER_TENANT`] running or waiting their turn,
//! and one more is refused 429 (4290) with `Retry-After`, so one tenant cannot fill the queue.
//!
//! ```text
//! handler: slot (≤ 2 per tenant, else 429) ─▶ turn (1 at a time) ─▶ thread "as-of-replay" (+10):
//!    ▲                                                                fold, ask, free the slot,
//!    └──────────────────────── the answer ◀────────────────────────── send the answer;
//!                                                                     free the store, the turn
//! ```
//!
//! Erased stays erased: the past store opens sealed values with the service's keyring, so a
//! memory whose keys were destroyed since is erased in it from its first event; a memory the
//! current store holds erased for another reason (its events predate sealing) is erased in the
//! past store as the last event folded.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use auditmem_projections::event::SubjectsErased;
use auditmem_projections::memories::Memories;
use auditmem_projections::{Applied, Event, Projection};
use uuid::Uuid;

use crate::api::error::ApiError;
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

static REPLAYS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENT_REPLAYS);

/// Per tenant, its replays running or waiting (no entry: none).
static QUEUED: LazyLock<Mutex<HashMap<Uuid, usize>>> = LazyLock::new(Default::default);

/// One of a tenant's [`REPLAYS_PER_TENANT`] places, given back when dropped.
struct Slot(Uuid);

impl Slot {
    fn take(tenant: Uuid) -> Result<Slot, ApiError> {
        let mut queued = QUEUED.lock().unwrap_or_else(|p| p.into_inner());
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
        Ok(Slot(tenant))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut queued = QUEUED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = queued.get_mut(&self.0) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                queued.remove(&self.0);
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

/// Asks `ask` of the tenant's store as it stood right after `then`, folded from the events at
/// `seqs` (the tenant's, ascending), on a replay thread (module doc): refused 429 when the
/// tenant already has [`REPLAYS_PER_TENANT`] replays running or waiting, otherwise waits its
/// turn ([`CONCURRENT_REPLAYS`] at a time).
pub async fn replay<T, F>(
    state: &AppState,
    tenant: Uuid,
    then: Then,
    seqs: Vec<u64>,
    ask: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Memories) -> Result<T, ApiError> + Send + 'static,
{
    let slot = Slot::take(tenant)?;
    let turn = REPLAYS
        .acquire()
        .await
        .map_err(|e| ApiError::internal(format!("as_of: {e}")))?;
    let state = state.clone();
    niced(move |answer| {
        let folded = fold(&state, tenant, then, &seqs);
        let asked = folded.as_ref().map_err(Clone::clone).and_then(ask);
        // The tenant's place is free once it has its answer (its next read may queue at
        // once); the turn only once the store is freed, so one store is held at a time.
        drop(slot);
        let _ = answer.send(asked);
        drop(folded);
        drop(turn);
    })
    .await
}

/// Runs `job` on a new thread niced by [`REPLAY_NICE`] (its own: the nice value is per
/// thread, and the thread ends with the job) and waits for what it sends on its channel.
async fn niced<T, F>(job: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::oneshot::Sender<Result<T, ApiError>>) + Send + 'static,
{
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("as-of-replay".to_string())
        .spawn(move || {
            crate::embed::lower_priority(REPLAY_NICE);
            job(answer)
        })
        .map_err(|e| ApiError::internal(format!("as_of: no replay thread: {e}")))?;
    answered
        .await
        .map_err(|_| ApiError::internal("as_of: the replay stopped before answering"))?
}

/// The tenant whose memories a memory event changes; `None` for any other event.
fn tenant_of(event: &Event) -> Option<Uuid> {
    Some(match event {
        Event::MemoryCreated(e) => e.tenant_id,
        Event::MemoryUpdated(e) => e.tenant_id,
        Event::MemoryDeleted(e) => e.tenant_id,
        Event::MemoriesDeletedByType(e) => e.tenant_id,
        Event::MemoriesDeleted(e) => e.tenant_id,
        Event::MemoriesExpired(e) => e.tenant_id,
        Event::MemorySuperseded(e) => e.tenant_id,
        Event::SubjectsErased(e) => e.tenant_id,
        _ => return None,
    })
}

fn fold(state: &AppState, tenant: Uuid, then: Then, seqs: &[u64]) -> Result<Memories, ApiError> {
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
    let erased: Vec<Uuid> = created
        .into_iter()
        .filter(|id| current.is_erased(id) && !past.is_erased(id))
        .collect();
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
    Ok(past)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_has_two_places_and_a_third_is_refused_429_with_retry_after() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let first = Slot::take(a).expect("a first place");
        let _second = Slot::take(a).expect("a second place");
        let refused = Slot::take(a).err().expect("no third place");
        assert_eq!(refused.code, ErrorCode::RateLimited);
        assert_eq!(refused.retry_after, Some(1));
        assert_eq!(
            refused.message,
            "this tenant already has 2 reads as_of a position running or waiting, the most it may; retry after 1 s"
        );
        // Another tenant's places are its own.
        let _other = Slot::take(b).expect("another tenant's place");
        drop(first);
        let _again = Slot::take(a).expect("a place given back is taken again");
        assert!(Slot::take(a).is_err());
    }

    #[test]
    fn a_tenant_whose_places_are_all_given_back_is_forgotten() {
        let a = Uuid::new_v4();
        drop((Slot::take(a), Slot::take(a)));
        let queued = QUEUED.lock().unwrap_or_else(|p| p.into_inner());
        assert_eq!(queued.get(&a), None);
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
