//! `GET /v1/memories/{id}/history`: every version of a memory, read from the log.

use auditmem_projections::Event;
use axum::extract::{Path, State};
use axum::Extension;

use crate::api::error::ApiError;
use crate::api::gate::Caller;
use crate::api::state::AppState;
use crate::command::memory::{not_found, parse_id};
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{MemoryHistory, MemoryVersion};
use crate::wire::time::Time;

type MemoryHistoryEnvelope = Data<MemoryHistory>;

/// What the event at a version's seq changed; `None` for an event that is no memory's change.
fn version(event: &Event, seq: u64, at: i64) -> Option<MemoryVersion> {
    let blank = |change| MemoryVersion {
        change,
        seq,
        audit_id: None,
        at: Time(at),
        content: None,
        memory_type: None,
        importance: None,
        batch_memory_type: None,
        user_id: None,
        agent_id: None,
        session_id: None,
        metadata: None,
        expires_at: None,
        superseded_by: None,
    };
    let metadata = |t: &Option<String>| -> Option<serde_json::Value> {
        Some(
            t.as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(serde_json::Value::Null),
        )
    };
    Some(match event {
        Event::MemoryCreated(e) => {
            let x = e.extra.clone().unwrap_or_default();
            MemoryVersion {
                content: Some(Some(e.content.clone())),
                memory_type: Some(e.memory_type),
                importance: Some(Some(e.importance)),
                user_id: x.user_id,
                agent_id: x.agent_id,
                session_id: x.session_id,
                metadata: x
                    .metadata
                    .is_some()
                    .then(|| metadata(&x.metadata))
                    .flatten(),
                expires_at: x.expires_at.map(|t| Some(Time(t))),
                ..blank("created")
            }
        }
        Event::MemoryUpdated(e) => {
            let a = e.amend.clone().unwrap_or_default();
            MemoryVersion {
                content: Some(e.content.clone()),
                importance: Some(e.importance),
                metadata: a.set_metadata.then(|| metadata(&a.metadata)).flatten(),
                expires_at: a.set_expires_at.then_some(a.expires_at.map(Time)),
                ..blank("updated")
            }
        }
        Event::MemoryDeleted(_) | Event::MemoriesDeleted(_) => blank("deleted"),
        Event::MemoriesExpired(_) => blank("expired"),
        Event::MemorySuperseded(e) => MemoryVersion {
            superseded_by: Some(e.superseded_by),
            ..blank("superseded")
        },
        Event::MemoriesDeletedByType(e) => MemoryVersion {
            batch_memory_type: Some(e.memory_type),
            ..blank("deleted")
        },
        _ => return None,
    })
}

#[utoipa::path(get, path = "/v1/memories/{id}/history", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id")),
    responses((status = 200, description = "every version, from the log", body = MemoryHistoryEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn memory_history(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Data<MemoryHistory>, ApiError> {
    let id = parse_id(&id)?;
    let stored = state
        .projections
        .memories
        .stored(&id)?
        .filter(|m| m.tenant_id == caller.tenant.id)
        .ok_or_else(not_found)?;
    let mut versions = Vec::new();
    for seq in &stored.versions {
        let Some((record, event)) = state.log.event(*seq)? else {
            continue;
        };
        let Some(mut v) = version(&event, *seq, record.ts_micros) else {
            continue;
        };
        // The audit entry is the last event of the same atomic submission, right after.
        let mut at = *seq + 1;
        while let Some((_, e)) = state.log.event(at)? {
            if let Event::AuditRecorded(a) = e {
                if a.tenant_id == caller.tenant.id {
                    v.audit_id = Some(a.entry.id);
                }
                break;
            }
            at += 1;
        }
        versions.push(v);
    }
    Ok(Data(MemoryHistory {
        id,
        deleted: stored.deleted_at.is_some(),
        versions,
    }))
}
