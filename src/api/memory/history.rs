//! `GET /v1/memories/{id}/history`: every version of a memory, read from the log.

use auditmem_projections::event::memory_subjects;
use auditmem_projections::seal::{KeyError, Keyring};
use auditmem_projections::Event;
use axum::extract::{Path, State};
use axum::Extension;

use super::as_of;
use crate::api::error::ApiError;
use crate::api::extract::Query;
use crate::api::gate::{Caller, PendingOps, Recorded};
use crate::api::state::AppState;
use crate::command::memory::{not_found, parse_id};
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::memory::{AsOfQuery, MemoryHistory, MemoryVersion};
use crate::wire::time::Time;

type MemoryHistoryEnvelope = Data<MemoryHistory>;

/// What the event at a version's seq changed, its sealed fields opened with `keys`; `None` for
/// an event that is no memory's change. A version whose fields no longer open (the memory was
/// erased) is kept with `erased: true` and its personal fields null; the erasure itself is a
/// version `erased`.
fn version(
    event: &Event,
    seq: u64,
    at: i64,
    keys: &dyn Keyring,
) -> Result<Option<MemoryVersion>, KeyError> {
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
        occurred_at: None,
        superseded_by: None,
        erased: false,
    };
    let metadata = |t: &Option<String>| -> Option<serde_json::Value> {
        Some(
            t.as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(serde_json::Value::Null),
        )
    };
    Ok(Some(match event {
        Event::MemoryCreated(e) => {
            let Some(e) = e.opened(keys)? else {
                let x = e.extra.clone().unwrap_or_default();
                return Ok(Some(MemoryVersion {
                    content: Some(None),
                    memory_type: Some(e.memory_type),
                    importance: Some(Some(e.importance)),
                    user_id: x.user_id,
                    agent_id: x.agent_id,
                    session_id: x.session_id,
                    metadata: Some(serde_json::Value::Null),
                    expires_at: x.expires_at.map(|t| Some(Time(t))),
                    occurred_at: x.occurred_at.map(|t| Some(Time(t))),
                    erased: true,
                    ..blank("created")
                }));
            };
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
                occurred_at: x.occurred_at.map(|t| Some(Time(t))),
                ..blank("created")
            }
        }
        Event::MemoryUpdated(e) => {
            let Some(e) = e.opened(keys)? else {
                let a = e.amend.clone().unwrap_or_default();
                return Ok(Some(MemoryVersion {
                    content: Some(None),
                    importance: Some(e.importance),
                    metadata: Some(serde_json::Value::Null),
                    expires_at: a.set_expires_at.then_some(a.expires_at.map(Time)),
                    occurred_at: a.set_occurred_at.then_some(a.occurred_at.map(Time)),
                    erased: true,
                    ..blank("updated")
                }));
            };
            let a = e.amend.clone().unwrap_or_default();
            MemoryVersion {
                content: Some(e.content.clone()),
                importance: Some(e.importance),
                metadata: a.set_metadata.then(|| metadata(&a.metadata)).flatten(),
                expires_at: a.set_expires_at.then_some(a.expires_at.map(Time)),
                occurred_at: a.set_occurred_at.then_some(a.occurred_at.map(Time)),
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
        Event::SubjectsErased(_) => MemoryVersion {
            erased: true,
            ..blank("erased")
        },
        _ => return Ok(None),
    }))
}

#[utoipa::path(get, path = "/v1/memories/{id}/history", tag = "memory", security(("api_key" = [])),
    params(("id" = String, Path, description = "memory id"), AsOfQuery),
    responses((status = 200, description = "every version, from the log (up to `as_of`, when given)", body = MemoryHistoryEnvelope), (status = 400, description = "`as_of` malformed, beyond the head or in the future (4000)", body = ErrorEnvelope), (status = 403, description = "permission (4030)", body = ErrorEnvelope), (status = 404, description = "missing or foreign (4040)", body = ErrorEnvelope)))]
pub(crate) async fn memory_history(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(as_of): Query<AsOfQuery>,
) -> Result<Recorded<Data<MemoryHistory>>, ApiError> {
    let id = parse_id(&id)?;
    let then = as_of.map(|a| as_of::resolve(&state, a)).transpose()?;
    let stored = state
        .projections
        .memories
        .stored(&id)?
        .filter(|m| m.tenant_id == caller.tenant.id && caller.sees(m.extra.as_ref()))
        .ok_or_else(not_found)?;
    // As of a position: the versions up to it; a memory created after it did not exist.
    let until = then.map_or(u64::MAX, |t| t.position);
    let shown: Vec<u64> = stored
        .versions
        .iter()
        .copied()
        .take_while(|s| *s <= until)
        .collect();
    if shown.is_empty() {
        return Err(not_found().into());
    }
    let mut deleted = stored.deleted_at.is_some();
    let mut versions = Vec::new();
    for seq in &shown {
        let Some((record, event)) = state.log.event(*seq)? else {
            continue;
        };
        let keys = &*state.projections.keys;
        let version = version(&event, *seq, record.ts_micros, keys)
            .map_err(|e| ApiError::internal(format!("memory {id}: opening version {seq}: {e}")))?;
        let Some(mut v) = version else {
            continue;
        };
        if stored.erased {
            // Every version of an erased memory says so, even one whose keys still exist
            // (an erasure destroys them once its event is applied).
            if v.content.is_some() {
                v.content = Some(None);
            }
            if v.metadata.is_some() {
                v.metadata = Some(serde_json::Value::Null);
            }
            v.erased = true;
        }
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
    // The entry is about the memory whose versions it shows (by its scopes, which never
    // change: its first version names them).
    let x = stored.extra.clone().unwrap_or_default();
    let ops = PendingOps {
        subjects: memory_subjects(
            caller.tenant.id,
            id,
            x.user_id.as_deref(),
            x.agent_id.as_deref(),
            x.session_id.as_deref(),
        ),
        ..Default::default()
    };
    if then.is_some() {
        // Deleted then: a version up to the position took it out (an erasure does too).
        deleted = versions
            .iter()
            .any(|v| matches!(v.change, "deleted" | "expired" | "erased"));
    }
    let history = MemoryHistory {
        id,
        deleted,
        erased: stored.erased,
        as_of: then.map(|t| t.shown(shown.len())),
        versions,
    };
    Ok(Recorded::new(Data(history), ops))
}

#[cfg(test)]
mod tests {
    use auditmem_projections::seal::{MemoryKeyring, Subject};
    use auditmem_projections::{
        vector_to_bytes, Event, MemoryAmend, MemoryCreated, MemoryType, MemoryUpdated,
    };
    use serde_json::json;
    use uuid::Uuid;

    use super::*;

    const T: Uuid = Uuid::from_u128(1);
    const ID: Uuid = Uuid::from_u128(2);

    fn created(ring: &MemoryKeyring) -> Event {
        let e = MemoryCreated {
            memory_id: ID,
            tenant_id: T,
            content: "kestrel-secret-5150".into(),
            memory_type: MemoryType::Fact,
            importance: 0.5,
            created_at: 10,
            model: "m".into(),
            vector: vector_to_bytes(&[1.0, 0.0]),
            extra: None,
            sealed: None,
        };
        let subjects = e.subjects();
        Event::MemoryCreated(e.sealed_for(ring, &subjects).expect("seal"))
    }

    fn updated(ring: &MemoryKeyring) -> Event {
        let e = MemoryUpdated {
            memory_id: ID,
            tenant_id: T,
            content: Some("kestrel-later-6161".into()),
            importance: Some(0.7),
            updated_at: 20,
            model: None,
            vector: None,
            amend: Some(MemoryAmend {
                set_metadata: true,
                metadata: Some(r#"{"k":"v"}"#.into()),
                ..MemoryAmend::default()
            }),
            sealed: None,
        };
        let subjects = [Subject::Memory(T, ID)];
        Event::MemoryUpdated(e.sealed_for(ring, &subjects).expect("seal"))
    }

    fn shown(v: Option<MemoryVersion>) -> serde_json::Value {
        serde_json::to_value(v.expect("a version")).expect("json")
    }

    #[test]
    fn versions_open_while_the_keys_exist_and_say_erased_once_they_are_gone() {
        let ring = MemoryKeyring::default();
        let (c, u) = (created(&ring), updated(&ring));
        let open = shown(version(&c, 1, 10, &ring).expect("ring"));
        assert_eq!(open["content"], json!("kestrel-secret-5150"));
        assert!(open.get("erased").is_none(), "{open}");
        let open = shown(version(&u, 2, 20, &ring).expect("ring"));
        assert_eq!(
            (open["content"].clone(), open["metadata"].clone()),
            (json!("kestrel-later-6161"), json!({"k": "v"}))
        );
        let key = ring
            .find(&Subject::Memory(T, ID))
            .expect("ring")
            .expect("a key");
        ring.destroy(&[key]).expect("destroy");
        assert_eq!(
            shown(version(&c, 1, 10, &ring).expect("ring")),
            json!({"change": "created", "seq": 1, "audit_id": null, "at": "1970-01-01T00:00:00.000Z",
                   "content": null, "memory_type": "fact", "importance": 0.5, "metadata": null,
                   "erased": true})
        );
        assert_eq!(
            shown(version(&u, 2, 20, &ring).expect("ring")),
            json!({"change": "updated", "seq": 2, "audit_id": null, "at": "1970-01-01T00:00:00.000Z",
                   "content": null, "importance": 0.7, "metadata": null, "erased": true})
        );
        let erasure = Event::SubjectsErased(auditmem_projections::event::SubjectsErased {
            erasure_id: Uuid::from_u128(9),
            tenant_id: T,
            subjects: vec![Subject::Memory(T, ID)],
            key_ids: vec![key],
            memory_ids: vec![ID],
            erased_at: 30,
        });
        assert_eq!(
            shown(version(&erasure, 3, 30, &ring).expect("ring")),
            json!({"change": "erased", "seq": 3, "audit_id": null, "at": "1970-01-01T00:00:00.000Z",
                   "erased": true})
        );
    }
}
