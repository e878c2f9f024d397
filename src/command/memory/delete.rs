//! `DELETE /v1/memories/{id}` and `DELETE /v1/memories`: one memory deleted, or every memory
//! of a type, or every memory a filter matches. The events name the exact ids decided here, so
//! replay deletes the same memories whatever is created later.

use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::{
    AuditDetail, Event, MemoriesDeleted, MemoriesDeletedByType, MemoryDeleted,
};
use uuid::Uuid;

use super::{owned, view_subjects};
use crate::command::{Context, Decision, Refusal};
use crate::wire::memory::{BatchDelete, BatchDeleted, DeletedMemory, Memory};

/// Memories listed in one audit entry's `memory_results` at most (batch deletes can be large).
pub const MAX_AUDITED_RESULTS: usize = 1000;

/// The tenant's memory `id` deleted; its audit entry records it as it was.
pub fn delete_one(
    ctx: &Context<'_>,
    tenant: Uuid,
    id: &str,
) -> Result<Decision<DeletedMemory>, Refusal> {
    let m = owned(ctx, tenant, id)?;
    let id = m.id;
    let subjects = view_subjects(tenant, &m);
    let event = Event::MemoryDeleted(MemoryDeleted {
        memory_id: id,
        tenant_id: tenant,
        deleted_at: ctx.now_stored(),
    });
    let detail = AuditDetail {
        memory_results: Some(vec![Memory::from(m).audited()]),
        ..Default::default()
    };
    let mut d = Decision::new(DeletedMemory { id, deleted: true }, vec![event]).recording(detail);
    d.audit.subjects = subjects;
    Ok(d)
}

/// Every live memory of the tenant the delete takes (of its type, matching its filter,
/// superseded ones too); none taken appends nothing.
pub fn delete_many(
    ctx: &Context<'_>,
    tenant: Uuid,
    delete: BatchDelete,
) -> Result<Decision<BatchDeleted>, Refusal> {
    let BatchDelete {
        memory_type,
        filter,
    } = delete;
    let memories = &ctx.projections.memories;
    let ids = match (&filter, memory_type) {
        (None, Some(t)) => memories.ids_of_type(&tenant, t),
        _ => memories.ids_matching(
            &tenant,
            &MemoryQuery {
                memory_type,
                filter: filter.as_ref(),
                include_superseded: true,
            },
        ),
    };
    let mut audited = Vec::new();
    // The entry is about the memories it shows.
    let mut subjects = Vec::new();
    for id in ids.iter().take(MAX_AUDITED_RESULTS) {
        if let Some(m) = memories.get(&tenant, id)? {
            subjects.extend(view_subjects(tenant, &m));
            audited.push(Memory::from(m).audited());
        }
    }
    subjects.sort();
    subjects.dedup();
    let deleted = ids.len();
    let mut events = Vec::new();
    if deleted > 0 {
        let deleted_at = ctx.now_stored();
        events.push(match (filter, memory_type) {
            // A delete by type alone is the event it always was.
            (None, Some(memory_type)) => Event::MemoriesDeletedByType(MemoriesDeletedByType {
                tenant_id: tenant,
                memory_type,
                memory_ids: ids,
                deleted_at,
            }),
            _ => Event::MemoriesDeleted(MemoriesDeleted {
                tenant_id: tenant,
                memory_ids: ids,
                deleted_at,
            }),
        });
    }
    let detail = AuditDetail {
        memory_results: Some(audited),
        ..Default::default()
    };
    let mut d = Decision::new(
        BatchDeleted {
            memory_type,
            deleted,
        },
        events,
    )
    .recording(detail);
    d.audit.subjects = subjects;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use auditmem_projections::memories::filter::{Filter, FilterField, FilterOp, Operand};
    use auditmem_projections::{MemoryExtra, MemoryType, Plan};
    use serde_json::json;

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, tenant, unit, OTHER, TENANT};

    fn given() -> Given {
        let user = |u: &str| MemoryExtra {
            user_id: Some(u.into()),
            ..Default::default()
        };
        Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            memory(
                TENANT,
                Uuid::from_u128(1),
                "a",
                MemoryType::Fact,
                &unit(0, 0.0),
                user("u1"),
                NOON - 3,
            ),
            memory(
                TENANT,
                Uuid::from_u128(2),
                "b",
                MemoryType::Rule,
                &unit(1, 0.0),
                user("u1"),
                NOON - 2,
            ),
            memory(
                TENANT,
                Uuid::from_u128(3),
                "c",
                MemoryType::Fact,
                &unit(2, 0.0),
                user("u2"),
                NOON - 1,
            ),
            memory(
                OTHER,
                Uuid::from_u128(4),
                "d",
                MemoryType::Fact,
                &unit(3, 0.0),
                user("u1"),
                NOON,
            ),
        ])
        .expect("given")
    }

    #[test]
    fn given_memories_when_one_is_deleted_then_its_event_names_it_and_another_tenants_is_404() {
        let given = given();
        let ids = Counter::new();
        let ctx = given.at(NOON + 1_500, &ids);
        let d = delete_one(&ctx, TENANT, &Uuid::from_u128(2).to_string()).expect("decided");
        assert_eq!(
            d.events,
            vec![Event::MemoryDeleted(MemoryDeleted {
                memory_id: Uuid::from_u128(2),
                tenant_id: TENANT,
                deleted_at: NOON + 1_000,
            })]
        );
        assert_eq!(
            d.audit.detail.memory_results.expect("results")[0]["content"],
            json!("b")
        );
        assert_eq!(
            delete_one(&ctx, TENANT, &Uuid::from_u128(4).to_string()).err(),
            Some(Refusal::not_found("memory not found"))
        );
        assert_eq!(
            delete_one(&ctx, TENANT, "not-an-id").err(),
            Some(Refusal::not_found("memory not found"))
        );
    }

    #[test]
    fn given_memories_when_deleted_by_type_or_filter_then_exactly_those_ids_and_none_is_no_event() {
        let given = given();
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let d = delete_many(
            &ctx,
            TENANT,
            BatchDelete {
                memory_type: Some(MemoryType::Fact),
                filter: None,
            },
        )
        .expect("decided");
        assert_eq!(
            d.events,
            vec![Event::MemoriesDeletedByType(MemoriesDeletedByType {
                tenant_id: TENANT,
                memory_type: MemoryType::Fact,
                memory_ids: vec![Uuid::from_u128(1), Uuid::from_u128(3)],
                deleted_at: NOON,
            })]
        );
        assert_eq!(d.answer.deleted, 2);
        let by_user = Filter::Cond {
            field: FilterField::UserId,
            op: FilterOp::Eq,
            operand: Operand::One(json!("u1")),
        };
        let d = delete_many(
            &ctx,
            TENANT,
            BatchDelete {
                memory_type: None,
                filter: Some(by_user),
            },
        )
        .expect("decided");
        assert_eq!(
            d.events,
            vec![Event::MemoriesDeleted(MemoriesDeleted {
                tenant_id: TENANT,
                memory_ids: vec![Uuid::from_u128(1), Uuid::from_u128(2)],
                deleted_at: NOON,
            })]
        );
        let d = delete_many(
            &ctx,
            OTHER,
            BatchDelete {
                memory_type: Some(MemoryType::Rule),
                filter: None,
            },
        )
        .expect("decided");
        assert!(d.events.is_empty());
        assert_eq!(d.answer.deleted, 0);
        assert_eq!(d.audit.detail.memory_results, Some(Vec::new()));
    }
}
