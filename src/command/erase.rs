//! `POST /v1/erasures` and `POST /admin/v1/tenants/{id}/erasures`: what an erasure erases.
//!
//! An erasure names a subject (a user, agent or session scope, some memories, or the tenant)
//! and decides, from the keyring and the memories projection as they stand:
//! - the data keys to destroy: the named scope's live key, each named memory's own key, or
//!   every key of the tenant;
//! - the memories erased: every memory sealed under one of those keys (a scope's live memories
//!   by the projection's scope index, superseded ones too; the named memories, live or
//!   deleted; every memory of the tenant), which the memories projection drops when it folds
//!   the event;
//! - how many of them were stored before encryption: a memory with no key of its own was
//!   written in plaintext, and its records stay readable in the log whatever is destroyed.
//!
//! The decision is one `SubjectsErased` event. Destroying the keys is not the command's: the
//! erasures projection destroys them when it folds the event, that is once the event is
//! durable in the log (`auditmem_projections::erasures`).

use auditmem_projections::event::SubjectsErased;
use auditmem_projections::memories::filter::{Filter, FilterField, FilterOp, Operand};
use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::seal::{KeyId, Subject};
use auditmem_projections::Event;
use uuid::Uuid;

use super::{Context, Decision, Refusal};
use crate::wire::erasure::ErasureTarget;

/// What an erasure decided, before it is in the log.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    pub erasure_id: Uuid,
    pub memories: usize,
    pub keys: usize,
    /// The destroyed keys' ids, which the receipt counts the audit entries and exports of.
    pub key_ids: Vec<KeyId>,
    /// Records (the log records of erased memories) written before encryption.
    pub predate_encryption: usize,
    /// Microseconds since the Unix epoch, as stored.
    pub erased_at: i64,
}

/// The erasure of `target` in `tenant`.
pub fn erase(
    ctx: &Context<'_>,
    tenant: Uuid,
    target: ErasureTarget,
) -> Result<Decision<Planned>, Refusal> {
    let ring = ctx.projections.keys.as_ref();
    let memories = &ctx.projections.memories;
    let store = |e: auditmem_projections::seal::KeyError| Refusal::internal(e);
    let scope = |field: FilterField, value: &str| {
        let filter = Filter::Cond {
            field,
            op: FilterOp::Eq,
            operand: Operand::One(serde_json::Value::String(value.to_string())),
        };
        memories.ids_matching(
            &tenant,
            &MemoryQuery {
                memory_type: None,
                filter: Some(&filter),
                include_superseded: true,
            },
        )
    };
    let (subjects, mut key_ids, memory_ids): (Vec<Subject>, Vec<KeyId>, Vec<Uuid>) = match target {
        ErasureTarget::User(u) => {
            let ids = scope(FilterField::UserId, &u);
            let s = Subject::User(tenant, u);
            let keys = ring.find(&s).map_err(store)?.into_iter().collect();
            (vec![s], keys, ids)
        }
        ErasureTarget::Agent(a) => {
            let ids = scope(FilterField::AgentId, &a);
            let s = Subject::Agent(tenant, a);
            let keys = ring.find(&s).map_err(store)?.into_iter().collect();
            (vec![s], keys, ids)
        }
        ErasureTarget::Session(v) => {
            let ids = scope(FilterField::SessionId, &v);
            let s = Subject::Session(tenant, v);
            let keys = ring.find(&s).map_err(store)?.into_iter().collect();
            (vec![s], keys, ids)
        }
        ErasureTarget::Memories(ids) => {
            let mut subjects = Vec::with_capacity(ids.len());
            let mut keys = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                // Live or deleted, the tenant's own: another tenant's id is answered as one
                // that never existed.
                let owned = memories.stored(id)?.is_some_and(|m| m.tenant_id == tenant);
                if !owned {
                    return Err(Refusal::bad_request(format!(
                        "memory_ids[{i}]: no memory of this tenant has this id"
                    )));
                }
                let s = Subject::Memory(tenant, *id);
                keys.extend(ring.find(&s).map_err(store)?);
                subjects.push(s);
            }
            (subjects, keys, ids)
        }
        ErasureTarget::Tenant => {
            let keys = ring
                .keys_of_tenant(tenant)
                .map_err(store)?
                .into_iter()
                .map(|(_, id)| id)
                .collect();
            let ids = memories.ids_matching(
                &tenant,
                &MemoryQuery {
                    memory_type: None,
                    filter: None,
                    include_superseded: true,
                },
            );
            (vec![Subject::Tenant(tenant)], keys, ids)
        }
    };
    key_ids.sort();
    key_ids.dedup();
    // A memory sealed at rest always has a key of its own (`Subject::Memory`); one without
    // was written before encryption, and each of its log records keeps its fields in clear.
    let mut predate_encryption = 0;
    for id in &memory_ids {
        if ring
            .find(&Subject::Memory(tenant, *id))
            .map_err(store)?
            .is_none()
        {
            predate_encryption += memories.stored(id)?.map_or(0, |m| m.versions.len());
        }
    }
    let planned = Planned {
        erasure_id: ctx.id(),
        memories: memory_ids.len(),
        keys: key_ids.len(),
        key_ids: key_ids.clone(),
        predate_encryption,
        erased_at: ctx.now_stored(),
    };
    let event = Event::SubjectsErased(SubjectsErased {
        erasure_id: planned.erasure_id,
        tenant_id: tenant,
        subjects,
        key_ids,
        memory_ids,
        erased_at: planned.erased_at,
    });
    Ok(Decision::new(planned, vec![event]))
}

#[cfg(test)]
mod tests {
    use auditmem_projections::seal::Sealed;
    use auditmem_projections::{MemoryExtra, MemoryType, Plan};

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, tenant, unit, OTHER, TENANT};

    fn user(u: &str) -> MemoryExtra {
        MemoryExtra {
            user_id: Some(u.into()),
            ..Default::default()
        }
    }

    fn given() -> Given {
        Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            tenant(OTHER, Plan::Pro, 0.0),
            memory(
                TENANT,
                Uuid::from_u128(1),
                "alice one",
                MemoryType::Fact,
                &unit(0, 0.0),
                user("alice"),
                NOON - 3,
            ),
            memory(
                TENANT,
                Uuid::from_u128(2),
                "bob one",
                MemoryType::Fact,
                &unit(1, 0.0),
                user("bob"),
                NOON - 2,
            ),
            memory(
                OTHER,
                Uuid::from_u128(3),
                "other alice",
                MemoryType::Fact,
                &unit(2, 0.0),
                user("alice"),
                NOON - 1,
            ),
        ])
        .expect("given")
    }

    fn erased(decision: &Decision<Planned>) -> &SubjectsErased {
        match decision.events.as_slice() {
            [Event::SubjectsErased(e)] => e,
            other => panic!("one SubjectsErased expected, got {other:?}"),
        }
    }

    #[test]
    fn a_user_erasure_names_the_users_key_and_memories_of_its_tenant_only() {
        let g = given();
        let ring = g.projections.keys.clone();
        let alice = Subject::User(TENANT, "alice".into());
        let sealed =
            Sealed::seal_for(ring.as_ref(), std::slice::from_ref(&alice), b"", b"x").expect("seal");
        let counter = Counter::default();
        let d = erase(
            &g.at(NOON, &counter),
            TENANT,
            ErasureTarget::User("alice".into()),
        )
        .expect("decided");
        let e = erased(&d);
        assert_eq!(e.subjects, vec![alice]);
        assert_eq!(e.key_ids, sealed.keys);
        assert_eq!(e.memory_ids, vec![Uuid::from_u128(1)]);
        assert_eq!(e.tenant_id, TENANT);
        // Memory 1 has no key of its own: its one record predates encryption.
        assert_eq!((d.answer.memories, d.answer.keys), (1, 1));
        assert_eq!(d.answer.predate_encryption, 1);
        // Deciding destroys nothing: the projection does, once the event is in the log.
        assert!(sealed
            .open_with(ring.as_ref(), b"")
            .expect("ring")
            .is_some());
    }

    #[test]
    fn memory_ids_must_be_the_tenants_own() {
        let g = given();
        let counter = Counter::default();
        let refused = erase(
            &g.at(NOON, &counter),
            TENANT,
            ErasureTarget::Memories(vec![Uuid::from_u128(1), Uuid::from_u128(3)]),
        )
        .err()
        .expect("refused");
        assert_eq!(
            refused,
            Refusal::bad_request("memory_ids[1]: no memory of this tenant has this id")
        );
        let ring = g.projections.keys.clone();
        let own = ring
            .key_of(&Subject::Memory(TENANT, Uuid::from_u128(1)))
            .expect("key");
        let d = erase(
            &g.at(NOON, &counter),
            TENANT,
            ErasureTarget::Memories(vec![Uuid::from_u128(1)]),
        )
        .expect("decided");
        assert_eq!(erased(&d).key_ids, vec![own]);
        // It has a key of its own, so it does not count as written before encryption.
        assert_eq!(d.answer.predate_encryption, 0);
    }

    #[test]
    fn a_tenant_erasure_names_every_key_and_memory_of_the_tenant() {
        let g = given();
        let ring = g.projections.keys.clone();
        let a = ring
            .key_of(&Subject::User(TENANT, "alice".into()))
            .expect("a");
        let t = ring.key_of(&Subject::Tenant(TENANT)).expect("t");
        ring.key_of(&Subject::User(OTHER, "alice".into()))
            .expect("other");
        let counter = Counter::default();
        let d = erase(&g.at(NOON, &counter), TENANT, ErasureTarget::Tenant).expect("decided");
        let e = erased(&d);
        let mut want = vec![a, t];
        want.sort();
        assert_eq!(e.key_ids, want);
        let mut ids = e.memory_ids.clone();
        ids.sort();
        assert_eq!(ids, vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
    }
}
