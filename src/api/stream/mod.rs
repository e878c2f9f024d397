//! `GET /v1/audit/logs/stream`: a tenant's audit entries as a live tail, Server-Sent Events or
//! NDJSON, resumable at any log position (docs/STREAMING.md).
//!
//! **Positions.** Each event's id is the log position of its entry: the global seq of its
//! record, numbered alike on every node of a cluster. A stream sends the tenant's entries
//! with a position past `after` (`Last-Event-ID`, else `?after=`, else the head when the stream
//! opened) in increasing order, and nothing else, so a client that resumes after the last id
//! it got has no gap and no duplicate, whichever node or server process answers it: a
//! position names the same entry everywhere.
//!
//! **Reading.** The audit index keeps each tenant's entries in log order
//! ([`AuditIndex::tenant_after`]): a read of a tenant's entries after a position costs those
//! entries, never the other tenants' in between, so a backfill from position 0 of a tenant
//! with few entries in a busy log is as short as its own entries.
//! A tenant's open streams share a feed (`feed.rs`): one follower reads the tenant's entries
//! up to the head each time it moves and renders each once per form a stream wants, into a
//! bounded window; a stream whose next entries are there copies them, framed its way. A
//! stream whose next entries are not (it resumes from further back, or the window moved past
//! it) reads them itself from its position, a batch of at most [`BATCH`] entries at a time,
//! on a blocking thread, until it reaches the window. Refs up to the head are always stored
//! (the applier folds a group before the head moves), so once a stream has everything up to
//! the head it waits for the feed (or, without one, the head) to move, sending a heartbeat
//! comment each `--stream-heartbeat-secs` meanwhile.
//!
//! **Pacing.** The body is a stream hyper polls when the connection has taken what was
//! written: the next batch is read only then. A slow reader holds one batch and hyper's
//! buffer, never more; it holds no lock and no writer waits for it.
//!
//! **Limits.** At most `--max-streams-per-tenant` open streams per tenant (429, 4290, with
//! `Retry-After`); a stream ends when the server stops (the client resumes on the next one),
//! and when its key is revoked or its tenant's subscription ends (checked before each read and
//! each wait). Retention and the time and action filters are the list's,
//! applied to each entry as it is read.
//!
//! [`AuditIndex::tenant_after`]: auditmem_projections::audit_index::AuditIndex::tenant_after

mod feed;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem_projections::audit_index::{action_key, AuditRef};
use auditmem_projections::event::{AuditEntry, KeyCache};
use auditmem_projections::Plan;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use tokio::sync::watch;
use uuid::Uuid;

use super::audit::load_list_entry;
use super::error::{refusal_response, ApiError};
use super::extract::Query;
use super::gate::{Caller, PendingOps, Recorded};
use super::state::AppState;
use crate::registry::ErrorCode;
use crate::wire::audit::stream::{parse_position, AuditStreamQuery, StreamFormat, StreamQuery};
use crate::wire::audit::{ListedEntry, Personal};
use crate::wire::envelope::ErrorEnvelope;
use crate::wire::ocsf;
use feed::{Feeds, Form, Member, Take};

/// Most entries one read sends.
pub const BATCH: usize = 256;

/// The request line an audit tail's connection opens with: such a connection is served on
/// [`TailRuntime`] (docs/STREAMING.md, "What tails cost writers").
pub const REQUEST_LINE: &[u8] = b"GET /v1/audit/logs/stream";

/// The runtime that serves the audit tails' connections: one worker thread, and blocking
/// threads for the tails' reads, all niced by `--stream-nice`. Each head move wakes every
/// open tail at the moment the writers whose entries moved it are to be answered; on a
/// runtime of their own the tails' wakeups queue behind each other, never ahead of the
/// writers' answers, and the kernel gives the writers' workers the cores first. Public for the
/// load driver, whose stand-ins for remote tail readers run on one the same way.
pub struct TailRuntime {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl TailRuntime {
    pub fn start(nice: i32) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("auditmem-tails")
            .on_thread_start(move || crate::embed::lower_priority(nice))
            .enable_all()
            .build()?;
        Ok(TailRuntime {
            handle: rt.handle().clone(),
            rt: Some(rt),
        })
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// Stops the runtime, waiting a moment for its tasks to end. Blocks: call it off any
    /// runtime.
    pub fn stop(mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }

    /// What the listener needs to move a tail's connection here.
    pub fn aside(&self) -> crate::api::listener::Aside {
        crate::api::listener::Aside {
            runtime: self.handle.clone(),
            prefix: REQUEST_LINE,
        }
    }
}

impl Drop for TailRuntime {
    fn drop(&mut self) {
        // Dropped where it may not block (a start that failed, or inside another runtime).
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The open streams, per tenant, and what every stream shares.
pub struct Streams {
    /// Most open streams a tenant may have (`--max-streams-per-tenant`).
    pub per_tenant: usize,
    /// How long an idle stream waits before a heartbeat comment (`--stream-heartbeat-secs`).
    pub heartbeat: Duration,
    /// Turns true when the service stops: every stream ends.
    pub stop: watch::Receiver<bool>,
    open: Arc<Mutex<HashMap<Uuid, usize>>>,
    /// Each tenant's shared head, while it has open streams.
    feeds: Feeds,
}

impl Streams {
    pub fn new(per_tenant: usize, heartbeat: Duration, stop: watch::Receiver<bool>) -> Self {
        Streams {
            per_tenant,
            heartbeat,
            stop,
            open: Arc::default(),
            feeds: Feeds::default(),
        }
    }

    /// A slot for one more of `tenant`'s streams, or None at its limit.
    fn acquire(&self, tenant: Uuid) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(tenant).or_insert(0);
        if *n >= self.per_tenant {
            return None;
        }
        *n += 1;
        metrics::gauge!("auditmem_audit_streams_open").increment(1.0);
        Some(Slot {
            open: self.open.clone(),
            tenant,
        })
    }
}

/// One open stream of a tenant, given back when the stream's body is dropped.
struct Slot {
    open: Arc<Mutex<HashMap<Uuid, usize>>>,
    tenant: Uuid,
}

impl Drop for Slot {
    fn drop(&mut self) {
        metrics::gauge!("auditmem_audit_streams_open").decrement(1.0);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

/// How the events are framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Sse,
    Ndjson,
}

/// One stream's reading state.
struct Tail {
    state: AppState,
    tenant: Uuid,
    key: Uuid,
    filter: Filtering,
    /// Every entry of the tenant up to here was sent or filtered out.
    position: u64,
    head: watch::Receiver<crate::log::Head>,
    stop: watch::Receiver<bool>,
    heartbeat: Duration,
    /// The tenant's shared head, which the stream reads from once it is there; None when
    /// nothing rendered may be shared, or the feed failed.
    member: Option<Member>,
    /// Whether the first bytes (a heartbeat, so the client sees the stream open at once) went.
    opened: bool,
    ended: bool,
    _slot: Slot,
}

/// What one read gave: the bytes to send, and how far it read.
struct Read {
    bytes: Vec<u8>,
    reached: u64,
}

/// The event bytes of the entries of `refs` that pass the stream's filters.
fn render(
    state: &AppState,
    refs: &[AuditRef],
    filter: &Filtering,
    out: &mut Vec<u8>,
) -> Result<(), ApiError> {
    let from = filter.earliest(state);
    let form = Form::of(filter);
    let mut keys = KeyCache::new(&*state.projections.keys);
    for r in refs {
        if !filter.keeps(r, from) {
            continue;
        }
        let (entry, personal) = load_list_entry(state, &mut keys, r.seq)?;
        let data = event_data(entry, personal, r, form)?;
        frame(out, r.seq, &data, filter.framing);
    }
    Ok(())
}

/// An entry's event data in `form`: compact JSON, as the list shows it or as its OCSF event.
fn event_data(
    entry: AuditEntry,
    personal: Personal,
    r: &AuditRef,
    form: Form,
) -> Result<Vec<u8>, ApiError> {
    let created_at = entry.created_at;
    let listed = ListedEntry::with(entry, personal, r, form.show_hash);
    let data = match form.format {
        StreamFormat::Json => serde_json::to_value(&listed),
        StreamFormat::Ocsf => serde_json::to_value(&listed).map(|v| match v {
            serde_json::Value::Object(row) => {
                ocsf::event(&row, r.tenant_id, created_at, Some(r.seq))
            }
            other => other,
        }),
    }
    .map_err(|e| ApiError::internal(format!("rendering a streamed entry: {e}")))?;
    serde_json::to_vec(&data).map_err(|e| ApiError::internal(format!("rendering an event: {e}")))
}

/// Writes one event, its data already rendered, as `framing` frames it: an SSE event with the
/// position as its id, or an NDJSON line `{"position":N,"entry":DATA}`, the position first so a
/// line-oriented tool finds it at the start.
fn frame(out: &mut Vec<u8>, seq: u64, data: &[u8], framing: Framing) {
    match framing {
        Framing::Sse => {
            out.extend_from_slice(format!("id: {seq}\ndata: ").as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\n\n");
        }
        Framing::Ndjson => {
            out.extend_from_slice(format!("{{\"position\":{seq},\"entry\":").as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"}\n");
        }
    }
}

/// What a stream sends and how: its filters (the plan's retention among them) and its form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Filtering {
    plan: Plan,
    show_hash: bool,
    action: Option<u64>,
    from: Option<i64>,
    to: i64,
    format: StreamFormat,
    framing: Framing,
}

impl Filtering {
    /// The earliest `created_at` the stream sends now: its start time, or its plan's retention.
    fn earliest(&self, state: &AppState) -> i64 {
        let window = state.settings.retention_start(self.plan);
        self.from.unwrap_or(window).max(window)
    }

    /// Whether the stream sends the entry of `r`, `from` being [`Self::earliest`].
    fn keeps(&self, r: &AuditRef, from: i64) -> bool {
        r.created_at >= from
            && r.created_at <= self.to
            && self.action.is_none_or(|a| a == r.action_key)
    }
}

impl Tail {
    /// Reads the next batch past the stream's position, up to `head`, itself.
    async fn read(&self, head: u64) -> Result<Read, ApiError> {
        let state = self.state.clone();
        let (tenant, after, filter) = (self.tenant, self.position, self.filter);
        tokio::task::spawn_blocking(move || {
            let (refs, reached) = state
                .projections
                .audit
                .tenant_after(&tenant, after, head, BATCH)?;
            let mut bytes = Vec::new();
            render(&state, &refs, &filter, &mut bytes)?;
            Ok(Read { bytes, reached })
        })
        .await
        .map_err(|e| ApiError::internal(format!("a stream's read: {e}")))?
    }

    /// Whether the stream may go on: its key is not revoked and its tenant's subscription is
    /// active, as the gate requires of every audit call.
    fn still_allowed(&self) -> bool {
        let projections = &self.state.projections;
        matches!(
            projections.tenants.key_by_id(&self.key),
            Ok(Some(k)) if k.revoked_at.is_none()
        ) && matches!(
            projections.tenants.tenant(&self.tenant),
            Ok(Some(t)) if t.subscription_active
        )
    }

    fn heartbeat_bytes(&self) -> &'static [u8] {
        match self.filter.framing {
            Framing::Sse => b": heartbeat\n\n",
            Framing::Ndjson => b"\n",
        }
    }

    /// The next bytes to send: a batch of events, a heartbeat, or None when the stream ends.
    async fn next(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.ended {
            return None;
        }
        if !self.opened {
            self.opened = true;
            return Some(Ok(Bytes::from_static(self.heartbeat_bytes())));
        }
        loop {
            if *self.stop.borrow() || !self.still_allowed() {
                return None;
            }
            let head = self.head.borrow_and_update().seq;
            if let Some(m) = &mut self.member {
                m.moved.borrow_and_update();
            }
            if self.position < head {
                let upto = match &self.member {
                    None => Some(head),
                    Some(m) => {
                        let from = self.filter.earliest(&self.state);
                        match m.take(
                            self.position,
                            self.state.projections.keys.retirements(),
                            from,
                        ) {
                            Take::Sent { bytes, reached } => {
                                self.position = reached;
                                if !bytes.is_empty() {
                                    return Some(Ok(Bytes::from(bytes)));
                                }
                                continue;
                            }
                            Take::Wait => None,
                            Take::Own { upto } => Some(upto.min(head)),
                            Take::Failed => {
                                self.member = None;
                                continue;
                            }
                        }
                    }
                };
                if let Some(upto) = upto.filter(|u| *u > self.position) {
                    match self.read(upto).await {
                        Ok(read) => {
                            self.position = read.reached;
                            if !read.bytes.is_empty() {
                                return Some(Ok(Bytes::from(read.bytes)));
                            }
                            continue;
                        }
                        Err(e) => {
                            // The client resumes after the last id it got.
                            self.ended = true;
                            tracing::error!(error = %e.message, "a stream's read failed; ending it");
                            return None;
                        }
                    }
                }
            }
            let beat = tokio::time::sleep(self.heartbeat);
            let heartbeat = self.heartbeat_bytes();
            // A member waits for its feed, which follows the head; a stream without one waits
            // for the head itself.
            let moved = async {
                match &mut self.member {
                    Some(m) => m.moved.changed().await.is_ok(),
                    None => self.head.changed().await.is_ok(),
                }
            };
            tokio::select! {
                ok = moved => {
                    if !ok {
                        return None;
                    }
                }
                _ = self.stop.wait_for(|s| *s) => return None,
                _ = beat => return Some(Ok(Bytes::from_static(heartbeat))),
            }
        }
    }
}

/// The position to resume after: `Last-Event-ID` (what an SSE client sends when it
/// reconnects), else `?after=`.
fn resume_after(headers: &HeaderMap, q: &StreamQuery) -> Result<Option<u64>, ApiError> {
    match headers.get("last-event-id") {
        Some(v) => {
            let text = v
                .to_str()
                .map_err(|_| ApiError::bad_request("Last-Event-ID must be a log position"))?;
            Ok(Some(parse_position("Last-Event-ID", text)?))
        }
        None => Ok(q.after),
    }
}

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/x-ndjson"))
}

/// 429 with `Retry-After`: the tenant has as many streams open as it may.
fn too_many_streams(limit: usize) -> Response {
    refusal_response(
        ErrorCode::RateLimited,
        &format!("this tenant has {limit} audit streams open, as many as it may; close one, or retry after 5 s"),
        Some(5),
    )
}

#[utoipa::path(get, path = "/v1/audit/logs/stream", tag = "audit", security(("api_key" = [])),
    params(AuditStreamQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "the log position to resume after; wins over `after`"),
        ("Accept" = Option<String>, Header, description = "`application/x-ndjson` for NDJSON lines `{\"position\": N, \"entry\": {...}}`; anything else: Server-Sent Events")),
    responses((status = 200, description = "Server-Sent Events (`id:` the entry's log position, `data:` the entry as the list shows it, or its OCSF event), or NDJSON; heartbeat comments while idle", content((String = "text/event-stream"), (String = "application/x-ndjson"))), (status = 400, description = "bad parameter or position (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030) or inactive subscription (2200)", body = ErrorEnvelope), (status = 429, description = "the tenant's open streams are at --max-streams-per-tenant, or the key's rate limit (4290)", body = ErrorEnvelope, headers(("Retry-After" = u64, description = "whole seconds")))))]
pub(crate) async fn stream_logs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Query(q): Query<AuditStreamQuery>,
) -> Result<Recorded<Response>, ApiError> {
    let after = resume_after(&headers, &q)?;
    let Some(slot) = state.streams.acquire(caller.tenant.id) else {
        return Ok(Recorded::new(
            too_many_streams(state.streams.per_tenant),
            PendingOps::default(),
        ));
    };
    let framing = if wants_ndjson(&headers) {
        Framing::Ndjson
    } else {
        Framing::Sse
    };
    let head = state.appender.subscribe();
    let position = after.unwrap_or_else(|| head.borrow().seq);
    let filter = Filtering {
        plan: caller.tenant.plan,
        show_hash: caller.tenant.plan.shows_hash(),
        action: q.action.as_deref().map(action_key),
        from: q.start,
        to: q.end.unwrap_or(i64::MAX),
        format: q.format,
        framing,
    };
    let member = state
        .streams
        .feeds
        .join(&state, caller.tenant.id, filter, head.clone());
    let tail = Tail {
        tenant: caller.tenant.id,
        key: caller.key.key_id,
        filter,
        member,
        position,
        head,
        stop: state.streams.stop.clone(),
        heartbeat: state.streams.heartbeat,
        opened: false,
        ended: false,
        _slot: slot,
        state: state.clone(),
    };
    let body = futures_util::stream::unfold(tail, |mut tail| async move {
        tail.next().await.map(|item| (item, tail))
    });
    let content_type = match framing {
        Framing::Sse => "text/event-stream",
        Framing::Ndjson => "application/x-ndjson",
    };
    let resp = (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            // Tells nginx-style proxies not to buffer the stream.
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response();
    Ok(Recorded::new(
        resp,
        PendingOps {
            streamed: true,
            ..Default::default()
        },
    ))
}
