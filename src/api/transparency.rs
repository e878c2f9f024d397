//! The transparency log's routes (`crate::tlog`): a tenant's inclusion proofs and consistency
//! proofs, the admin's consistency proofs, and the public C2SP tlog-tiles read API (the
//! latest checkpoint and the hash tiles), which reveals hashes only.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::Engine;

use crate::api::error::ApiError;
use crate::api::extract::Query;
use crate::api::gate::Caller;
use crate::api::state::AppState;
use crate::tlog::proof::{ConsistencyProof, InclusionProof};
use crate::tlog::{TlogError, TILE_HEIGHT};
use crate::wire::envelope::{AuditOk, Data, ErrorEnvelope};
use crate::wire::transparency::{ConsistencyQuery, ProofQuery};

type InclusionEnvelope = AuditOk<InclusionProof>;
type ConsistencyEnvelope = AuditOk<ConsistencyProof>;
type AdminConsistencyEnvelope = Data<ConsistencyProof>;

fn tree_error(e: TlogError) -> ApiError {
    match e {
        TlogError::OutOfRange { .. } => ApiError::bad_request(e.to_string()),
        other => ApiError::internal(other),
    }
}

/// The latest signed checkpoint note covering the record `seq`: when the entry is newer than
/// the last checkpoint, one is signed at the head (at most one a second for all callers; the
/// others wait for it).
async fn covering_note(state: &AppState, seq: u64) -> Result<(u64, String), ApiError> {
    loop {
        if let Some((size, note)) = state.signer.latest_note() {
            if size >= seq {
                return Ok((size, note));
            }
        }
        match state.signer.claim_on_demand() {
            Ok(()) => {
                let head = state.appender.head();
                let signer = state.signer.clone();
                tokio::task::spawn_blocking(move || signer.sign(head))
                    .await
                    .map_err(ApiError::internal)?
                    .map_err(ApiError::internal)?;
                if head.seq < seq {
                    // The head always holds an entry the caller could read; not reached.
                    return Err(ApiError::internal(
                        "the log head is behind a readable entry",
                    ));
                }
            }
            Err(wait) => tokio::time::sleep(wait).await,
        }
    }
}

#[utoipa::path(get, path = "/v1/audit/logs/{audit_id}/proof", tag = "audit", security(("api_key" = [])),
    params(("audit_id" = String, Path, description = "audit log id"), ProofQuery),
    responses((status = 200, description = "the entry's record, its leaf index and RFC 6962 inclusion path, and the signed checkpoint of the tree it is proven in (docs/VERIFYING.md)", body = InclusionEnvelope),
        (status = 400, description = "tree_size malformed, below the entry's seq or beyond the tree (4000)", body = ErrorEnvelope),
        (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope),
        (status = 404, description = "missing, foreign or outside retention (4040)", body = ErrorEnvelope)))]
pub(crate) async fn inclusion_proof(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(audit_id): Path<String>,
    Query(tree_size): Query<ProofQuery>,
) -> Result<AuditOk<InclusionProof>, ApiError> {
    let (_, r) = crate::api::audit::owned_entry(&state, &caller, &audit_id)?;
    let tlog = state.appender.tlog().clone();
    let (size, checkpoint) = match tree_size {
        Some(n) => {
            if n < r.seq {
                return Err(ApiError::bad_request(format!(
                    "tree_size {n} does not hold this entry (its record is seq {})",
                    r.seq
                )));
            }
            (n, state.signer.note_at(n))
        }
        None => {
            let (n, note) = covering_note(&state, r.seq).await?;
            (n, Some(note))
        }
    };
    // A size beyond the tree is the caller's error (400), found here before the record is read.
    let root = tlog.root(size).map_err(tree_error)?;
    let mut proof =
        row_proof(&state, &tlog, r.seq, size, &root.to_string()).map_err(ApiError::internal)?;
    proof.checkpoint = checkpoint;
    Ok(AuditOk(proof))
}

/// The consistency proof between `from` and `to` (default: the latest checkpoint's size, or
/// the tree's when none is signed yet).
fn consistency(
    state: &AppState,
    (from, to): (u64, Option<u64>),
) -> Result<ConsistencyProof, ApiError> {
    let tlog = state.appender.tlog();
    let to = to.unwrap_or_else(|| {
        state
            .signer
            .latest_note()
            .map_or_else(|| tlog.size(), |(n, _)| n)
    });
    if from > to {
        return Err(ApiError::bad_request(format!(
            "from ({from}) must not be larger than to ({to})"
        )));
    }
    let proof = tlog.consistency(from, to).map_err(tree_error)?;
    Ok(ConsistencyProof {
        from,
        to,
        from_root: tlog.root(from).map_err(tree_error)?.to_string(),
        to_root: tlog.root(to).map_err(tree_error)?.to_string(),
        proof: proof.iter().map(ToString::to_string).collect(),
        checkpoint: state.signer.note_at(to),
    })
}

#[utoipa::path(get, path = "/v1/audit/consistency", tag = "audit", security(("api_key" = [])),
    params(ConsistencyQuery),
    responses((status = 200, description = "the RFC 6962 consistency proof that the tree of size `from` is a prefix of the tree of size `to`; it reveals no entry", body = ConsistencyEnvelope),
        (status = 400, description = "from missing or malformed, from > to, or a size beyond the tree (4000)", body = ErrorEnvelope),
        (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope)))]
pub(crate) async fn consistency_proof(
    State(state): State<AppState>,
    Query(q): Query<ConsistencyQuery>,
) -> Result<AuditOk<ConsistencyProof>, ApiError> {
    consistency(&state, q).map(AuditOk)
}

#[utoipa::path(get, path = "/admin/v1/log/consistency", tag = "admin", security(("admin_token" = [])),
    params(ConsistencyQuery),
    responses((status = 200, description = "the RFC 6962 consistency proof between two tree sizes", body = AdminConsistencyEnvelope),
        (status = 400, description = "from missing or malformed, from > to, or a size beyond the tree (4000)", body = ErrorEnvelope)))]
pub(crate) async fn admin_consistency_proof(
    State(state): State<AppState>,
    Query(q): Query<ConsistencyQuery>,
) -> Result<Data<ConsistencyProof>, ApiError> {
    consistency(&state, q).map(Data)
}

/// 429 (4290) with `Retry-After` for a source past `--log-rate-limit-per-sec` on `/log/*`.
pub(crate) async fn limit_per_source(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let source = crate::api::client_ip::of_request(&state.settings.proxy_trust, &req)
        .map(crate::api::client_ip::source);
    if let Some(source) = source {
        if let Err(wait) = state.log_rate_limiter.check(source) {
            let secs = crate::api::rate_limit::retry_after_secs(wait);
            let mut resp = ApiError::new(
                crate::registry::ErrorCode::RateLimited,
                format!("too many requests to /log from this address; retry after {secs} s"),
            )
            .into_response();
            resp.headers_mut()
                .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
            return resp;
        }
    }
    next.run(req).await
}

/// `GET /log/checkpoint`: the latest signed checkpoint note, with the cosignatures witnesses
/// returned for it (C2SP tlog-tiles' `<prefix>/checkpoint`).
pub(crate) async fn checkpoint(State(state): State<AppState>) -> Response {
    match state.signer.latest_note() {
        Some((_, note)) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            note,
        )
            .into_response(),
        None => ApiError::not_found("no checkpoint has been signed yet").into_response(),
    }
}

/// `GET /log/tile/<L>/<N>[.p/<W>]`: a hash tile (C2SP tlog-tiles, height 8). Entry tiles are
/// not served: a leaf's data is only the record's seq and hash, and tenants get their records
/// with their proofs.
pub(crate) async fn tile(State(state): State<AppState>, Path(path): Path<String>) -> Response {
    let not_found = |what: &str| ApiError::not_found(what.to_string()).into_response();
    if path.starts_with("entries/") {
        return not_found("entry tiles are not served: proofs carry the records");
    }
    // `Tile::new` asserts a width of at least 1, which a `.p/0` path would reach.
    if let Some((_, w)) = path.rsplit_once(".p/") {
        if !matches!(w.parse::<u32>(), Ok(1..=255)) {
            return not_found("no such tile");
        }
    }
    let Ok(tile) = tlog_tiles::Tile::from_path(&format!("tile/{TILE_HEIGHT}/{path}")) else {
        return not_found("no such tile");
    };
    let tlog = state.appender.tlog().clone();
    let size = tlog.size();
    match tokio::task::spawn_blocking(move || tlog.tile(&tile, size)).await {
        Ok(Ok(data)) => {
            let cache = if tile.width() == 1 << TILE_HEIGHT {
                "public, max-age=31536000, immutable"
            } else {
                "public, max-age=60"
            };
            (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CACHE_CONTROL, cache),
                ],
                data,
            )
                .into_response()
        }
        Ok(Err(TlogError::OutOfRange { .. })) => not_found("the tree does not hold this tile yet"),
        Ok(Err(e)) => ApiError::internal(e).into_response(),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// Seqs read from the audit index at a time.
const WINDOW: usize = 1 << 16;

#[utoipa::path(get, path = "/v1/audit/logs/export/{export_id}/proofs", tag = "audit", security(("api_key" = [])),
    params(("export_id" = String, Path, description = "export id")),
    responses((status = 200, description = "NDJSON: a first line {export_id, rows, tree_size, root_hash, checkpoint}, then one inclusion proof per row of the export file, in the file's order, each as GET /v1/audit/logs/{audit_id}/proof answers it without `checkpoint` (what `auditmem verify --export-proofs` checks, docs/VERIFYING.md)", content_type = "application/x-ndjson"),
        (status = 403, description = "permission (4030), subscription (2200)", body = ErrorEnvelope),
        (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope),
        (status = 409, description = "not completed: processing or failed (4090)", body = ErrorEnvelope)))]
pub(crate) async fn export_proofs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    use auditmem_projections::exports::ExportStatus;
    let v = crate::api::export::owned_export(&state, &caller, &id)?;
    match v.status {
        ExportStatus::Completed => {}
        ExportStatus::Failed => {
            return Err(ApiError::new(
                crate::registry::ErrorCode::Conflict,
                "the export failed; it has no rows to prove",
            ))
        }
        _ => {
            return Err(ApiError::new(
                crate::registry::ErrorCode::Conflict,
                "the export is still processing; its proofs come with its file",
            ))
        }
    }
    // Every row was logged before the export was asked for.
    let (size, checkpoint) = covering_note(&state, v.request_seq).await?;
    let tlog = state.appender.tlog().clone();
    let root = tlog.root(size).map_err(tree_error)?;
    let filter = auditmem_projections::audit_index::Filter {
        tenant_id: v.tenant_id,
        action: None,
        from: v.start_time,
        to: v.end_time,
    };
    let root_hash = root.to_string();
    let head = crate::tlog::proof::ExportProofsHead {
        export_id: v.export_id,
        rows: v.records.unwrap_or(0),
        tree_size: size,
        root_hash: root_hash.clone(),
        checkpoint,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(16);
    let state2 = state.clone();
    tokio::task::spawn_blocking(move || {
        let fail = |e: String| {
            let _ = tx.blocking_send(Err(std::io::Error::other(e)));
        };
        let mut buf = Vec::with_capacity(crate::api::admin::log::STREAM_CHUNK);
        // Writing JSON of these structs into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut buf, &head);
        buf.push(b'\n');
        let mut after = None;
        loop {
            let seqs =
                match state2
                    .projections
                    .audit
                    .in_log_order(&filter, after, v.request_seq, WINDOW)
                {
                    Ok(s) => s,
                    Err(e) => return fail(format!("reading the audit index: {e}")),
                };
            for &seq in &seqs {
                match row_proof(&state2, &tlog, seq, size, &root_hash) {
                    Ok(p) => {
                        let _ = serde_json::to_writer(&mut buf, &p);
                        buf.push(b'\n');
                    }
                    Err(e) => return fail(e),
                }
                if buf.len() >= crate::api::admin::log::STREAM_CHUNK
                    && tx.blocking_send(Ok(std::mem::take(&mut buf))).is_err()
                {
                    return;
                }
            }
            match seqs.last() {
                Some(&last) if seqs.len() == WINDOW => after = Some(last),
                _ => break,
            }
        }
        if !buf.is_empty() {
            let _ = tx.blocking_send(Ok(buf));
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(
            header::CONTENT_DISPOSITION,
            format!(
                "attachment; filename=\"audit-export-{}.proofs.ndjson\"",
                v.export_id
            ),
        )
        .body(axum::body::Body::from_stream(stream))
        .map_err(ApiError::internal)
}

/// The inclusion proof of the record `seq` in the tree of `size` leaves (root `root_hash`),
/// without checkpoint: one entry's proof and each row of an export's.
fn row_proof(
    state: &AppState,
    tlog: &crate::tlog::MerkleTree,
    seq: u64,
    size: u64,
    root_hash: &str,
) -> Result<InclusionProof, String> {
    let (found, record) = match state.log.records_from(seq).next() {
        Some(Ok(kv)) => kv,
        Some(Err(e)) => return Err(e.to_string()),
        None => return Err(format!("record {seq} is missing")),
    };
    let r = crate::log::record::RecordRef::decode(&record)
        .map_err(|e| format!("record {found}: {e}"))?;
    let audit_id = match auditmem_projections::Event::decode_audit_entry(r.event) {
        Ok(Some((_, entry))) => entry.id,
        Ok(None) => return Err(format!("record {found} holds no audit entry")),
        Err(e) => return Err(format!("record {found}: {e}")),
    };
    let path = tlog.inclusion(found - 1, size).map_err(|e| e.to_string())?;
    Ok(InclusionProof {
        audit_id,
        seq: found,
        leaf_index: found - 1,
        record: base64::engine::general_purpose::STANDARD.encode(&record),
        record_hash: hex::encode(r.hash),
        tree_size: size,
        root_hash: root_hash.to_string(),
        inclusion: path.iter().map(ToString::to_string).collect(),
        checkpoint: None,
    })
}
