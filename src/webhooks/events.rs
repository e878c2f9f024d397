//! What an endpoint is sent: the log's events of its tenant that its event types name, each
//! as a Standard Webhooks payload `{"type", "timestamp", "data"}` whose `data` carries the
//! event's log `position` (to deduplicate, and to fetch its inclusion proof).
//!
//! Which event is which type:
//!
//! | log event | type |
//! |---|---|
//! | `AuditRecorded` | `audit.entry` (optionally only some actions) |
//! | `MemoryCreated` | `memory.created` |
//! | `MemoryUpdated` | `memory.updated` |
//! | `MemoryDeleted`, `MemoriesDeletedByType`, `MemoriesDeleted` | `memory.deleted` |
//! | `MemorySuperseded` | `memory.superseded` |
//! | `MemoriesExpired` | `memory.expired` |
//! | `SubjectsErased` | `erasure.completed` |
//! | `ExportCompleted` | `export.completed` |
//!
//! Nothing personal travels but an audit entry's own fields, opened when the payload is made:
//! an entry whose subject was erased by then goes out in its erased form (personal fields
//! null, `"erased": true`), as the list shows it. Memory events carry ids, types and times,
//! never a content or metadata; an erasure carries its id and the memories it took, never
//! the scope it named.

use auditmem_projections::audit_index::action_key;
use auditmem_projections::audit_view::format_time;
use auditmem_projections::event::{Event, KeyCache};
use auditmem_projections::webhooks::WebhookEndpoint;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::api::audit::load_list_entry;
use crate::api::state::AppState;
use crate::wire::audit::ListedEntry;
use crate::wire::webhook::WebhookEventType;

/// One event to send.
#[derive(Clone, Debug)]
pub struct Message {
    pub position: u64,
    pub event_type: &'static str,
    /// The payload's JSON bytes.
    pub body: Vec<u8>,
}

/// The type of `event`, and its tenant, for the types webhooks send.
fn type_of(event: &Event) -> Option<(Uuid, WebhookEventType)> {
    use WebhookEventType as T;
    Some(match event {
        Event::AuditRecorded(e) => (e.tenant_id, T::AuditEntry),
        Event::MemoryCreated(e) => (e.tenant_id, T::MemoryCreated),
        Event::MemoryUpdated(e) => (e.tenant_id, T::MemoryUpdated),
        Event::MemoryDeleted(e) => (e.tenant_id, T::MemoryDeleted),
        Event::MemoriesDeletedByType(e) => (e.tenant_id, T::MemoryDeleted),
        Event::MemoriesDeleted(e) => (e.tenant_id, T::MemoryDeleted),
        Event::MemorySuperseded(e) => (e.tenant_id, T::MemorySuperseded),
        Event::MemoriesExpired(e) => (e.tenant_id, T::MemoryExpired),
        Event::SubjectsErased(e) => (e.tenant_id, T::ErasureCompleted),
        Event::ExportCompleted(e) => (e.tenant_id, T::ExportCompleted),
        _ => return None,
    })
}

/// Whether `endpoint` is sent `event`.
pub fn wanted(endpoint: &WebhookEndpoint, event: &Event) -> bool {
    let Some((tenant, kind)) = type_of(event) else {
        return false;
    };
    if tenant != endpoint.tenant_id || !endpoint.event_types.iter().any(|t| t == kind.name()) {
        return false;
    }
    match event {
        Event::AuditRecorded(e) if !endpoint.audit_actions.is_empty() => {
            endpoint.audit_actions.contains(&e.entry.action)
        }
        _ => true,
    }
}

/// The message of `event`, recorded at `position` at `ts_micros`, for an endpoint of
/// `tenant`; `None` for an event of another tenant or of no webhook type.
pub fn message(
    state: &AppState,
    tenant: Uuid,
    position: u64,
    ts_micros: i64,
    event: &Event,
) -> Result<Option<Message>, String> {
    let Some((of, kind)) = type_of(event) else {
        return Ok(None);
    };
    if of != tenant {
        return Ok(None);
    }
    let time = |t: i64| Value::String(format_time(t));
    let mut data = match event {
        Event::AuditRecorded(_) => {
            let mut keys = KeyCache::new(&*state.projections.keys);
            let (entry, personal) =
                load_list_entry(state, &mut keys, position).map_err(|e| e.message)?;
            let r = state
                .projections
                .audit
                .at_seq(position)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("seq {position} missing from the audit index"))?;
            let listed = ListedEntry::with(entry, personal, &r, false);
            json!({ "entry": serde_json::to_value(&listed).map_err(|e| e.to_string())? })
        }
        Event::MemoryCreated(e) => json!({
            "memory_id": e.memory_id,
            "memory_type": e.memory_type,
            "created_at": time(e.created_at),
        }),
        Event::MemoryUpdated(e) => json!({
            "memory_id": e.memory_id,
            "updated_at": time(e.updated_at),
        }),
        Event::MemoryDeleted(e) => json!({
            "memory_ids": [e.memory_id],
            "deleted_at": time(e.deleted_at),
        }),
        Event::MemoriesDeletedByType(e) => json!({
            "memory_ids": e.memory_ids,
            "memory_type": e.memory_type,
            "deleted_at": time(e.deleted_at),
        }),
        Event::MemoriesDeleted(e) => json!({
            "memory_ids": e.memory_ids,
            "deleted_at": time(e.deleted_at),
        }),
        Event::MemorySuperseded(e) => json!({
            "memory_id": e.memory_id,
            "superseded_by": e.superseded_by,
            "superseded_at": time(e.superseded_at),
        }),
        Event::MemoriesExpired(e) => json!({
            "memory_ids": e.memory_ids,
            "expired_at": time(e.expired_at),
        }),
        Event::SubjectsErased(e) => json!({
            "erasure_id": e.erasure_id,
            "memory_ids": e.memory_ids,
            "erased_at": time(e.erased_at),
        }),
        Event::ExportCompleted(e) => json!({
            "export_id": e.export_id,
            "records": e.records,
            "bytes": e.bytes,
            "completed_at": time(e.completed_at),
            "expires_at": time(e.expires_at),
        }),
        _ => return Ok(None),
    };
    if let Value::Object(map) = &mut data {
        map.insert("position".into(), json!(position));
    }
    let body = serde_json::to_vec(&json!({
        "type": kind.name(),
        "timestamp": time(ts_micros),
        "data": data,
    }))
    .map_err(|e| e.to_string())?;
    Ok(Some(Message {
        position,
        event_type: kind.name(),
        body,
    }))
}

/// How far a scan for an endpoint's next event went.
pub enum Scan {
    /// The first event the endpoint wants after the position scanned from.
    Found(Message),
    /// No such event up to this position.
    Reached(u64),
}

/// The endpoint's first wanted event after `after`, no further than `head`. An endpoint sent
/// only `audit.entry` reads its tenant's entries in the audit index's per-tenant log order, at
/// most `max_scan` of them: a read costs its own tenant's entries. Any other reads the log's
/// records, every tenant's, at most `max_scan` of them (memory, erasure and export events are
/// in no per-tenant index).
pub fn next(
    state: &AppState,
    endpoint: &WebhookEndpoint,
    after: u64,
    head: u64,
    max_scan: usize,
) -> Result<Scan, String> {
    let audit = WebhookEventType::AuditEntry.name();
    if !endpoint.event_types.is_empty() && endpoint.event_types.iter().all(|t| t == audit) {
        return next_entry(state, endpoint, after, head, max_scan);
    }
    let mut reached = after;
    for item in state.log.records_from(after + 1).take(max_scan) {
        let (seq, bytes) = item.map_err(|e| e.to_string())?;
        if seq > head {
            break;
        }
        let record = crate::log::record::RecordRef::decode(&bytes)
            .map_err(|e| format!("record {seq}: {e}"))?;
        let event = Event::decode(record.event).map_err(|e| format!("record {seq}: {e}"))?;
        if wanted(endpoint, &event) {
            if let Some(m) = message(state, endpoint.tenant_id, seq, record.ts_micros, &event)? {
                return Ok(Scan::Found(m));
            }
        }
        reached = seq;
    }
    Ok(Scan::Reached(reached))
}

/// [`next`] for an endpoint sent only audit entries: its tenant's entries past `after`, those
/// of its actions (by the index's action key, then exactly by the entry itself).
fn next_entry(
    state: &AppState,
    endpoint: &WebhookEndpoint,
    after: u64,
    head: u64,
    max_scan: usize,
) -> Result<Scan, String> {
    let actions: Vec<u64> = endpoint
        .audit_actions
        .iter()
        .map(|a| action_key(a))
        .collect();
    let (refs, reached) = state
        .projections
        .audit
        .tenant_after(&endpoint.tenant_id, after, head, max_scan)
        .map_err(|e| e.to_string())?;
    for r in refs {
        if !actions.is_empty() && !actions.contains(&r.action_key) {
            continue;
        }
        let Some((record, event)) = state.log.event(r.seq).map_err(|e| e.to_string())? else {
            continue;
        };
        if wanted(endpoint, &event) {
            if let Some(m) = message(state, endpoint.tenant_id, r.seq, record.ts_micros, &event)? {
                return Ok(Scan::Found(m));
            }
        }
    }
    Ok(Scan::Reached(reached))
}

/// The message at `position` again (a retry or a redelivery), whatever the endpoint's types
/// are now; `None` when the position holds nothing for its tenant.
pub fn at(state: &AppState, tenant: Uuid, position: u64) -> Result<Option<Message>, String> {
    let Some((record, event)) = state.log.event(position).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    message(state, tenant, position, record.ts_micros, &event)
}
