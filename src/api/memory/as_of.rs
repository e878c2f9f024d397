//! Reads `as_of` a log position: the tenant's memory store as it stood right after it.
//!
//! Nothing is kept for this. The memories projection holds, per tenant, the seqs of the events
//! that changed its memories (`Memories::history_up_to`); a read `as_of` position `p` reads
//! those up to `p` from the log and folds them into a store of its own
//! (`Memories::past`, on a temporary database, expiry judged at the time of record `p`), then
//! asks it what the current store is asked. So the cost is the tenant's history up to `p`
//! (one log read and one fold per event), never the log's; at most [`MAX_REPLAYED`] events are
//! replayed (more: 400), and [`CONCURRENT_REPLAYS`] replay runs at a time, on the blocking
//! pool, so that replays cannot take both cores from other tenants' requests.
//!
//! Erased stays erased: the past store opens sealed values with the service's keyring, so a
//! memory whose keys were destroyed since is erased in it from its first event; a memory the
//! current store holds erased for another reason (its events predate sealing) is erased in the
//! past store as the last event folded.

use std::sync::Arc;

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

static REPLAYS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENT_REPLAYS);

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

/// The tenant's store as it stood right after `then`, folded from the events at `seqs`
/// (the tenant's, ascending), on the blocking pool, [`CONCURRENT_REPLAYS`] at a time.
pub async fn past(
    state: &AppState,
    tenant: Uuid,
    then: Then,
    seqs: Vec<u64>,
) -> Result<Memories, ApiError> {
    let _turn = REPLAYS
        .acquire()
        .await
        .map_err(|e| ApiError::internal(format!("as_of: {e}")))?;
    let state = state.clone();
    tokio::task::spawn_blocking(move || fold(&state, tenant, then, &seqs))
        .await
        .map_err(|e| ApiError::internal(format!("as_of: the replay stopped: {e}")))?
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
