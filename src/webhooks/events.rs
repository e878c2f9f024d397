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
use auditmem_projections::tenant_events;
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

/// The type of `event`, and its tenant, for the types webhooks send. Every one but an audit
/// entry is one the tenant events index lists (its tenant is read through that index's own
/// `tenant_of`), so [`next`] finds each of them there.
fn type_of(event: &Event) -> Option<(Uuid, WebhookEventType)> {
    use WebhookEventType as T;
    if let Event::AuditRecorded(e) = event {
        return Some((e.tenant_id, T::AuditEntry));
    }
    let tenant = tenant_events::tenant_of(event)?;
    let kind = match event {
        Event::MemoryCreated(_) => T::MemoryCreated,
        Event::MemoryUpdated(_) => T::MemoryUpdated,
        Event::MemoryDeleted(_) | Event::MemoriesDeletedByType(_) | Event::MemoriesDeleted(_) => {
            T::MemoryDeleted
        }
        Event::MemorySuperseded(_) => T::MemorySuperseded,
        Event::MemoriesExpired(_) => T::MemoryExpired,
        Event::SubjectsErased(_) => T::ErasureCompleted,
        Event::ExportCompleted(_) => T::ExportCompleted,
        _ => return None,
    };
    Some((tenant, kind))
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

/// The endpoint's first wanted event after `after`, no further than `head`. Its candidates
/// are its tenant's positions in log order: its audit entries from the audit index (those of
/// its actions, by the index's action key, then exactly by the entry itself) if it is sent
/// `audit.entry`, its other events from the tenant events index if it is sent any other type;
/// at most `max_scan` from each list. Only candidates are read from the log, so a lookup
/// costs the tenant's own events, however busy the rest of the log is.
pub fn next(
    state: &AppState,
    endpoint: &WebhookEndpoint,
    after: u64,
    head: u64,
    max_scan: usize,
) -> Result<Scan, String> {
    let audit = WebhookEventType::AuditEntry.name();
    let types = &endpoint.event_types;
    let tenant = &endpoint.tenant_id;
    let p = &state.projections;
    let (entries, entries_reached) = if types.iter().any(|t| t == audit) {
        p.audit
            .tenant_after(tenant, after, head, max_scan)
            .map_err(|e| e.to_string())?
    } else {
        (Vec::new(), head)
    };
    let (others, others_reached) = if types.iter().any(|t| t != audit) {
        p.events
            .tenant_after(tenant, after, head, max_scan)
            .map_err(|e| e.to_string())?
    } else {
        (Vec::new(), head)
    };
    // Each list is complete up to how far it read, so together they are up to the nearer.
    let reached = entries_reached.min(others_reached);
    let actions: Vec<u64> = endpoint
        .audit_actions
        .iter()
        .map(|a| action_key(a))
        .collect();
    let mut candidates: Vec<u64> = entries
        .iter()
        .filter(|r| actions.is_empty() || actions.contains(&r.action_key))
        .map(|r| r.seq)
        .chain(others)
        .filter(|&seq| seq <= reached)
        .collect();
    candidates.sort_unstable();
    for seq in candidates {
        metrics::counter!("auditmem_webhook_records_read_total").increment(1);
        let Some((record, event)) = state.log.event(seq).map_err(|e| e.to_string())? else {
            continue;
        };
        if wanted(endpoint, &event) {
            if let Some(m) = message(state, endpoint.tenant_id, seq, record.ts_micros, &event)? {
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
