//! `PATCH /v1/memories/{id}` and `PATCH /v1/memories/batch`: memories changed.
//!
//! Two steps around the embedder: [`plan`] finds the memory (404 whatever the values) and
//! checks the values (400), and says which content changed and so needs a new vector;
//! [`decide`] takes that vector and gives the `MemoryUpdated`. A batch does the same for every
//! item, all found, then all checked, then embedded as one batch, then decided in one append.

use auditmem_projections::memories::{Extra, MemoryView};
use auditmem_projections::{vector_to_bytes, AuditDetail, Event, MemoryUpdated};
use uuid::Uuid;

use super::create::batch_answer;
use super::{all_subjects, owned, view_subjects, Embedding};
use crate::command::{Context, Decision, Refusal};
use crate::wire::memory::{BatchUpdate, Changes, Memory, MemoryBatch, MemoryUpdate};

/// An update found and checked, waiting for the vector of its changed content.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    memory: MemoryView,
    changes: Changes,
    /// The new content when it differs from the stored one: only that is embedded again.
    changed: Option<String>,
}

impl Planned {
    /// The text to embed before deciding, if the content changed.
    pub fn to_embed(&self) -> Option<&str> {
        self.changed.as_deref()
    }

    fn of(memory: MemoryView, changes: Changes) -> Self {
        let changed = changes
            .content
            .as_ref()
            .filter(|c| **c != memory.content)
            .cloned();
        Planned {
            memory,
            changes,
            changed,
        }
    }
}

/// The tenant's memory `id`, and `update`'s values checked once it is found.
pub fn plan(
    ctx: &Context<'_>,
    tenant: Uuid,
    id: &str,
    update: MemoryUpdate,
) -> Result<Planned, Refusal> {
    let memory = owned(ctx, tenant, id)?;
    Ok(Planned::of(memory, update.check()?))
}

/// The update's event and the memory as it becomes; `embedding` is the changed content's
/// (ignored when the content did not change).
pub fn decide(
    ctx: &Context<'_>,
    tenant: Uuid,
    planned: Planned,
    embedding: Option<Embedding<'_>>,
) -> Result<Decision<Memory>, Refusal> {
    let written = planned.changes.content.clone();
    let (event, memory) = updated(ctx, tenant, planned, embedding, ctx.now_stored())?;
    let detail = AuditDetail {
        memory_query: written.map(|c| vec![c]),
        memory_results: Some(vec![memory.audited()]),
        ..Default::default()
    };
    let subjects = all_subjects(tenant, [&memory]);
    let mut d = Decision::new(memory, vec![event]).recording(detail);
    d.audit.subjects = subjects;
    Ok(d)
}

/// One update's event, what it sets of the personal fields sealed under the memory's
/// subjects (its scopes never change), and the memory it gives.
fn updated(
    ctx: &Context<'_>,
    tenant: Uuid,
    planned: Planned,
    embedding: Option<Embedding<'_>>,
    at: i64,
) -> Result<(Event, Memory), Refusal> {
    let Planned {
        memory: m,
        changes: Changes {
            importance, amend, ..
        },
        changed,
    } = planned;
    let embedding = embedding.filter(|_| changed.is_some());
    let subjects = view_subjects(tenant, &m);
    let event = MemoryUpdated {
        memory_id: m.id,
        tenant_id: tenant,
        content: changed.clone(),
        importance,
        updated_at: at,
        model: embedding.map(|e| e.model.to_string()),
        vector: embedding.map(|e| vector_to_bytes(e.vector)),
        amend: amend.clone(),
        sealed: None,
    }
    .sealed_for(&*ctx.projections.keys, &subjects)
    .map_err(Refusal::from)?;
    let event = Event::MemoryUpdated(event);
    let extra = Extra::amended(m.extra.clone(), amend.as_ref());
    let memory = Memory::from(MemoryView {
        content: changed.unwrap_or_else(|| m.content.clone()),
        importance: importance.unwrap_or(m.importance),
        updated_at: at,
        extra,
        ..m
    });
    Ok((event, memory))
}

/// Every item's memory found (a missing one is 404, named by its index, whatever the values),
/// then every item's values checked (400, each named by its index): nothing is stored unless
/// every item passes.
pub fn plan_batch(
    ctx: &Context<'_>,
    tenant: Uuid,
    batch: Vec<BatchUpdate>,
) -> Result<Vec<Planned>, Refusal> {
    let mut found = Vec::with_capacity(batch.len());
    let mut missing = Vec::new();
    for (i, BatchUpdate { id, update }) in batch.into_iter().enumerate() {
        // The index names the item; the id is not echoed (it may be another tenant's).
        match ctx.projections.memories.get(&tenant, &id)? {
            Some(m) => found.push((i, m, update)),
            None => missing.push(format!("memories[{i}]: memory not found")),
        }
    }
    if !missing.is_empty() {
        return Err(Refusal::not_found(format!(
            "{}; nothing was stored",
            missing.join("; ")
        )));
    }
    let mut planned = Vec::with_capacity(found.len());
    let mut refused = Vec::new();
    for (i, m, update) in found {
        match update.check() {
            Ok(changes) => planned.push(Planned::of(m, changes)),
            Err(e) => refused.push(format!("memories[{i}]: {}", e.0)),
        }
    }
    if !refused.is_empty() {
        return Err(Refusal::bad_request(format!(
            "{}; nothing was stored",
            refused.join("; ")
        )));
    }
    Ok(planned)
}

/// The batch's events and memories; `vectors` are the changed contents' (the items'
/// [`Planned::to_embed`], in order).
pub fn decide_batch(
    ctx: &Context<'_>,
    tenant: Uuid,
    planned: Vec<Planned>,
    model: &str,
    vectors: &[Vec<f32>],
) -> Result<Decision<MemoryBatch>, Refusal> {
    let wanted = planned.iter().filter(|p| p.changed.is_some()).count();
    if vectors.len() != wanted {
        return Err(Refusal::internal(format!(
            "{} vectors for {wanted} changed contents",
            vectors.len()
        )));
    }
    let at = ctx.now_stored();
    let mut vectors = vectors.iter();
    let mut events = Vec::with_capacity(planned.len());
    let mut memories = Vec::with_capacity(planned.len());
    let mut written = Vec::new();
    for p in planned {
        let embedding = p
            .changed
            .as_ref()
            .and_then(|_| vectors.next())
            .map(|v| Embedding { model, vector: v });
        written.extend(p.changes.content.clone());
        let (event, memory) = updated(ctx, tenant, p, embedding, at)?;
        events.push(event);
        memories.push(memory);
    }
    Ok(batch_answer(tenant, memories, written, events))
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{MemoryAmend, MemoryExtra, MemoryType, Plan};
    use serde_json::json;

    use super::*;
    use crate::api::extract::read;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, opened, tenant, unit, MODEL, OTHER, TENANT};
    use crate::wire::memory::{MemoryBatchUpdateRequest, MemoryUpdateRequest};

    fn given() -> Given {
        Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            memory(
                TENANT,
                Uuid::from_u128(1),
                "likes tea",
                MemoryType::Fact,
                &unit(0, 0.0),
                MemoryExtra::default(),
                NOON - 10_000,
            ),
            memory(
                OTHER,
                Uuid::from_u128(2),
                "likes coffee",
                MemoryType::Fact,
                &unit(1, 0.0),
                MemoryExtra::default(),
                NOON - 10_000,
            ),
        ])
        .expect("given")
    }

    fn update(body: serde_json::Value) -> MemoryUpdate {
        read::<MemoryUpdateRequest>(true, body.to_string().as_bytes()).expect("a valid shape")
    }

    #[test]
    fn given_a_memory_when_its_content_changes_then_only_that_is_embedded_and_carried() {
        let given = given();
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let id = Uuid::from_u128(1).to_string();
        // The same content and an importance: nothing to embed, no vector in the event.
        let p = plan(
            &ctx,
            TENANT,
            &id,
            update(json!({"content": "likes tea", "importance": 0.9})),
        )
        .expect("planned");
        assert_eq!(p.to_embed(), None);
        let d = decide(&ctx, TENANT, p, None).expect("decided");
        assert_eq!(
            d.events,
            vec![Event::MemoryUpdated(MemoryUpdated {
                memory_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                content: None,
                importance: Some(0.9),
                updated_at: NOON,
                model: None,
                vector: None,
                amend: None,
                sealed: None,
            })]
        );
        assert_eq!(
            d.audit.detail.memory_query,
            Some(vec!["likes tea".to_string()])
        );
        // A new content and an expiry: embedded, carried with its model.
        let p = plan(
            &ctx,
            TENANT,
            &id,
            update(json!({"content": "likes green tea", "expires_at": null})),
        )
        .expect("planned");
        assert_eq!(p.to_embed(), Some("likes green tea"));
        let v = unit(0, 0.1);
        let d = decide(
            &ctx,
            TENANT,
            p,
            Some(Embedding {
                model: MODEL,
                vector: &v,
            }),
        )
        .expect("decided");
        assert_eq!(
            opened(&d.events, &*given.projections.keys),
            vec![Event::MemoryUpdated(MemoryUpdated {
                memory_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                content: Some("likes green tea".into()),
                importance: None,
                updated_at: NOON,
                model: Some(MODEL.into()),
                vector: Some(vector_to_bytes(&v)),
                amend: Some(MemoryAmend {
                    set_metadata: false,
                    metadata: None,
                    set_expires_at: true,
                    expires_at: None,
                    ..MemoryAmend::default()
                }),
                sealed: None,
            })]
        );
        assert_eq!(d.answer.content, "likes green tea");
        assert_eq!(d.answer.importance, 0.5);
    }

    #[test]
    fn given_another_tenants_memory_when_updated_then_404_before_its_values_are_checked() {
        let given = given();
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let foreign = Uuid::from_u128(2).to_string();
        let bad = update(json!({"importance": 7}));
        assert_eq!(
            plan(&ctx, TENANT, &foreign, bad).err(),
            Some(Refusal::not_found("memory not found"))
        );
        let bad = update(json!({"importance": 7}));
        assert_eq!(
            plan(&ctx, TENANT, &Uuid::from_u128(1).to_string(), bad)
                .err()
                .map(|r| r.code()),
            Some(crate::registry::ErrorCode::BadRequest)
        );
    }

    #[test]
    fn given_a_batch_when_one_item_is_missing_then_404_names_it_and_nothing_is_decided() {
        let given = given();
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let batch = read::<MemoryBatchUpdateRequest>(
            true,
            json!({"memories": [
                {"id": Uuid::from_u128(1).to_string(), "importance": 0.2},
                {"id": Uuid::from_u128(2).to_string(), "importance": 0.3},
            ]})
            .to_string()
            .as_bytes(),
        )
        .expect("shape");
        assert_eq!(
            plan_batch(&ctx, TENANT, batch).err(),
            Some(Refusal::not_found(
                "memories[1]: memory not found; nothing was stored"
            ))
        );
        let batch = read::<MemoryBatchUpdateRequest>(
            true,
            json!({"memories": [
                {"id": Uuid::from_u128(1).to_string(), "content": "likes oolong"},
            ]})
            .to_string()
            .as_bytes(),
        )
        .expect("shape");
        let planned = plan_batch(&ctx, TENANT, batch).expect("planned");
        let texts: Vec<&str> = planned.iter().filter_map(Planned::to_embed).collect();
        assert_eq!(texts, vec!["likes oolong"]);
        let v = unit(3, 0.0);
        let d =
            decide_batch(&ctx, TENANT, planned, MODEL, std::slice::from_ref(&v)).expect("decided");
        assert!(matches!(
            &opened(&d.events, &*given.projections.keys)[..],
            [Event::MemoryUpdated(u)] if u.vector == Some(vector_to_bytes(&v)) && u.updated_at == NOON
        ));
        assert_eq!(d.answer.memories[0].content, "likes oolong");
    }
}
