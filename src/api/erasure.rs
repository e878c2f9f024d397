//! `POST /v1/erasures`: a subject of the caller's tenant erased for good, answered with a
//! receipt (the handler of `crate::command::erase`).
//!
//! The gate appends the erasure event with the request's audit entry, as for every operation;
//! folding it retires the keys and the erasures projection's shredder destroys them
//! (`auditmem_projections::erasures`). The receipt names where the event is and a checkpoint
//! that covers it, which exist only after that append: its body is written then, as the
//! response is sent (a one-item stream), once the keys are destroyed, so by the time the
//! receipt is read the event is durable and the keys are gone. The entry records no response
//! body, as for an export download.
//!
//! Deciding reads the subject's every memory (a keyring look-up each): on the blocking pool,
//! never on a runtime worker that other tenants' requests wait for, and not niced, since each
//! look-up takes the keyring's lock that every request sealing an entry takes too (a niced
//! thread preempted while holding it would keep them all waiting). The receipt counts the
//! tenant's every audit entry (a log read a chunk of them, no shared lock held): its reads of
//! the log on a thread in the idle scheduling class, so that other tenants' requests keep the
//! cores while it runs.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Extension;
use base64::Engine;

use super::error::ApiError;
use super::extract::Json;
use super::gate::{Caller, Recorded};
use super::state::AppState;
use auditmem_projections::event::LastKeys;
use auditmem_projections::seal::KeyId;
use auditmem_projections::Event;

use crate::command::erase::{self, Planned};
use crate::command::Context;
use crate::log::checkpoint::Checkpoint;
use crate::log::record::RecordRef;
use crate::log::LogError;
use crate::tlog::proof::ErasureProof;
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::erasure::{Erased, ErasureReceipt, ErasureRequest};

type ErasureReceiptEnvelope = Data<ErasureReceipt>;

#[utoipa::path(post, path = "/v1/erasures", tag = "memory", security(("api_key" = [])),
    request_body = ErasureRequest,
    responses((status = 201, description = "erased: the receipt", body = ErasureReceiptEnvelope), (status = 400, description = "not exactly one subject, an invalid one, or a memory id the tenant does not have (4000)", body = ErrorEnvelope), (status = 403, description = "permission memory.erase (4030)", body = ErrorEnvelope)))]
pub(crate) async fn create_erasure(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(target): Json<ErasureRequest>,
) -> Result<Recorded<Response>, ApiError> {
    let projections = state.projections.clone();
    let tenant = caller.tenant.id;
    let decision = tokio::task::spawn_blocking(move || {
        erase::erase(&Context::service(&projections), tenant, target)
    })
    .await
    .map_err(ApiError::internal)??;
    let planned = decision.answer.clone();
    let mut recorded = Recorded::decided(decision, |_| receipt_response(state, planned));
    recorded.ops.streamed = true;
    Ok(recorded)
}

/// 201 whose body, the receipt, is made when the response is sent: after the gate appended
/// the event (a failed append answers the failure instead, and this body is never read).
fn receipt_response(state: AppState, planned: Planned) -> Response {
    let body = futures_util::stream::once(async move {
        let erasure_id = planned.erasure_id;
        let made = receipt_made(state, planned).await;
        match made {
            Ok(r) => serde_json::to_vec(&Data(r))
                .map(Bytes::from)
                .map_err(std::io::Error::other),
            Err(e) => {
                tracing::error!(error = %e.message, erasure_id = %erasure_id, "erasure receipt");
                Err(std::io::Error::other(e.message))
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(body));
    *resp.status_mut() = StatusCode::CREATED;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// [`receipt`] on a thread of its own (it blocks until the keys are destroyed and then reads
/// the log), its pass over the tenant's entries in the idle scheduling class ([`touched`]).
pub(crate) async fn receipt_made(
    state: AppState,
    planned: Planned,
) -> Result<ErasureReceipt, ApiError> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("erasure-receipt".into())
        .spawn(move || {
            let _ = answer.send(receipt(&state, &planned));
        })
        .map_err(|e| ApiError::internal(format!("erasure: no receipt thread: {e}")))?;
    answered
        .await
        .map_err(|_| ApiError::internal("erasure: the receipt's thread stopped before answering"))?
}

/// The receipt of an erasure whose event is in the log: its position, and a checkpoint that
/// covers it (the latest when it does, else one signed now at the head). Blocks until the
/// erasure's keys are destroyed in the key store and its memories are out of every index.
fn receipt(state: &AppState, planned: &Planned) -> Result<ErasureReceipt, ApiError> {
    let erasures = &state.projections.erasures;
    let view = erasures
        .get(&planned.erasure_id)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::internal("the erasure event is not folded"))?;
    erasures
        .wait_destroyed(view.seq)
        .map_err(ApiError::internal)?;
    // Its memories leave the in-memory indexes after the fold, on a thread of their own.
    state
        .projections
        .memories
        .wait_unindexed()
        .map_err(ApiError::internal)?;
    let checkpoint = match state.signer.latest() {
        Some(cp) if cp.seq >= view.seq => cp,
        _ => state
            .signer
            .sign(state.appender.head())
            .map_err(ApiError::internal)?,
    };
    let proof = erasure_proof(state, planned, view.seq, &checkpoint)?;
    let (audit_entries, exports) = touched(state, view.tenant_id, &planned.key_ids, view.seq)?;
    let notice = (planned.predate_encryption > 0).then(|| {
        format!(
            "{} records predate encryption and cannot be shredded",
            planned.predate_encryption
        )
    });
    Ok(ErasureReceipt {
        erasure_id: planned.erasure_id,
        erased: Erased {
            memories: planned.memories,
            keys: planned.keys,
            audit_entries,
            exports,
        },
        predate_encryption: planned.predate_encryption,
        notice,
        erased_at: auditmem_projections::audit_view::format_time(planned.erased_at),
        seq: view.seq,
        checkpoint,
        proof,
    })
}

/// How many of the tenant's audit entries logged before the erasure (`before_seq`) are
/// sealed under one of `key_ids`, and how many export files (completed and not expired, or
/// being written) hold at least one of them: a pass over the tenant's entries in the audit
/// index, reading each entry's time and key set from the log (nothing is opened or decoded
/// beyond them), a log read per chunk of the tenant's entries.
fn touched(
    state: &AppState,
    tenant: uuid::Uuid,
    key_ids: &[KeyId],
    before_seq: u64,
) -> Result<(usize, usize), ApiError> {
    if key_ids.is_empty() {
        return Ok((0, 0));
    }
    let filter = auditmem_projections::audit_index::Filter {
        tenant_id: tenant,
        action: None,
        from: i64::MIN,
        to: i64::MAX,
    };
    // (seq, created_at) of every entry an erased key sealed.
    let mut erased: Vec<(u64, i64)> = Vec::new();
    let mut keys = SealedUnder::new(key_ids);
    let mut give_way = auditmem_projections::niced::GiveWay::new(GIVE_WAY_EACH, GIVE_WAY_TOTAL);
    let mut visited = 0usize;
    let mut after = None;
    loop {
        let seqs = state
            .projections
            .audit
            .in_log_order(&filter, after, before_seq, TOUCHED_WINDOW)
            .map_err(ApiError::internal)?;
        let Some(last) = seqs.last().copied() else {
            break;
        };
        // The window's records are read by a thread in the idle scheduling class: ~3 µs of a
        // core an entry (sled reading the log's leaves), which at nice 19 still slowed another
        // tenant's query embedding 1.5-2x (its matrix products wait at each split of their
        // work for the core the niced thread holds until its slice ends). It takes no lock a
        // request takes; reading the audit index (its lock) stays on this thread.
        crate::embed::run_idle("erasure-count", || {
            state.log.visit_records(&seqs, |seq, r| {
                // Even in the idle class the pass slows a query embedded beside it (the
                // cores' caches and memory): it steps aside every ~1 ms of its work.
                visited += 1;
                if visited.is_multiple_of(GIVE_WAY_EVERY) {
                    give_way.step();
                }
                if let Some(created_at) = keys.erased_at(seq, r.event)? {
                    erased.push((seq, created_at));
                }
                Ok(())
            })
        })
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
        after = Some(last);
    }
    let exports = &state.projections.exports;
    let now = crate::wire::time::now();
    let mut files = exports.live_completed(now).map_err(ApiError::internal)?;
    files.extend(exports.processing().map_err(ApiError::internal)?);
    let holding = files
        .iter()
        .filter(|x| x.tenant_id == tenant)
        .filter(|x| {
            erased
                .iter()
                .any(|(seq, at)| *seq < x.request_seq && (x.start_time..=x.end_time).contains(at))
        })
        .count();
    Ok((erased.len(), holding))
}

/// Whether an audit record is sealed under one of an erasure's keys, read without decoding
/// the entry (`Event::audit_time_and_keys`), the last key set kept as `verify` keeps it
/// ([`LastKeys`]).
struct SealedUnder<'a> {
    key_ids: &'a [KeyId],
    last: LastKeys,
}

impl<'a> SealedUnder<'a> {
    fn new(key_ids: &'a [KeyId]) -> Self {
        SealedUnder {
            key_ids,
            last: LastKeys::default(),
        }
    }

    /// The `created_at` of the audit record `event` at `seq` when one of the keys sealed it;
    /// `None` when none did, or it is not an audit record.
    fn erased_at(&mut self, seq: u64, event: &[u8]) -> Result<Option<i64>, LogError> {
        let undecodable = |why: String| LogError::Undecodable { seq, why };
        let Some(parts) = Event::audit_time_and_keys(event) else {
            // Another event, or an entry these bytes do not hold as expected: the full
            // decode says which (an error names the record).
            return match Event::decode_audit_head(event) {
                Ok(None) => Ok(None),
                Ok(Some(head)) => Ok(head
                    .sealed
                    .is_some_and(|s| self.any(&s.keys))
                    .then_some(head.entry.created_at)),
                Err(e) => Err(undecodable(e.to_string())),
            };
        };
        let under = match parts.keys {
            None => false,
            Some(keys) => {
                let ids = self
                    .last
                    .ids(keys)
                    .ok_or_else(|| undecodable("its sealed part's key ids do not decode".into()))?;
                self.any(&ids)
            }
        };
        Ok(under.then_some(parts.created_at))
    }

    fn any(&self, ids: &[KeyId]) -> bool {
        ids.iter().any(|k| self.key_ids.contains(k))
    }
}

/// How often the count of an erasure's entries waits for queries being embedded
/// (`niced::give_way`): every 256 entries read (~1 ms of a core), at most 50 ms each time and
/// 5 s in all (the pass alone: 0.2-0.5 s for 100,000 entries).
const GIVE_WAY_EVERY: usize = 256;
const GIVE_WAY_EACH: std::time::Duration = std::time::Duration::from_millis(50);
const GIVE_WAY_TOTAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The tenant's entries read per pass of the audit index when counting an erasure's.
const TOUCHED_WINDOW: usize = 65_536;

/// The erasure event's record at `seq` and its inclusion path in the tree `checkpoint` signs.
fn erasure_proof(
    state: &AppState,
    planned: &Planned,
    seq: u64,
    checkpoint: &Checkpoint,
) -> Result<ErasureProof, ApiError> {
    let (Some(note), Some(root)) = (&checkpoint.note, &checkpoint.root) else {
        return Err(ApiError::internal(
            "the checkpoint covering the erasure signs no tree root",
        ));
    };
    let record = match state.log.records_from(seq).next() {
        Some(Ok((found, record))) if found == seq => record,
        Some(Ok((found, _))) => {
            return Err(ApiError::internal(format!(
                "record {seq} is missing (the next is {found})"
            )))
        }
        Some(Err(e)) => return Err(ApiError::internal(e)),
        None => return Err(ApiError::internal(format!("record {seq} is missing"))),
    };
    let r = RecordRef::decode(&record).map_err(ApiError::internal)?;
    let path = state
        .appender
        .tlog()
        .inclusion(seq - 1, checkpoint.seq)
        .map_err(ApiError::internal)?;
    Ok(ErasureProof {
        erasure_id: planned.erasure_id,
        seq,
        leaf_index: seq - 1,
        record: base64::engine::general_purpose::STANDARD.encode(&record),
        record_hash: hex::encode(r.hash),
        tree_size: checkpoint.seq,
        root_hash: root.clone(),
        inclusion: path.iter().map(ToString::to_string).collect(),
        checkpoint: note.clone(),
    })
}
