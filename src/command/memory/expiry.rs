//! The expiry sweep: memories whose `expires_at` has passed are taken out of the store by an
//! appended `MemoriesExpired`, one per tenant, so that their history says when and `replay`
//! gives the same store.
//!
//! Each sweep's event carries a precondition: every memory it names is still live and still
//! expired when the event is sealed. On a cluster every node sweeps, and a node may read its
//! projections before it folded another node's sweep of the same memories; the appender checks
//! the precondition again on the state the event is sealed on, so the second sweep is refused
//! and each memory is expired by exactly one event. A refused sweep leaves the rest of its
//! memories to the next one (reads hide them meanwhile); a sweep that finds nothing appends
//! nothing.

use auditmem_projections::{Event, MemoriesExpired, Projections};
use uuid::Uuid;

use crate::command::{Context, Decision};
use crate::log::appender::{Precondition, Rejection};
use crate::registry::ErrorCode;

/// Memories one sweep takes out at most (the rest wait for the next).
pub const SWEEP_MAX: usize = 10_000;

/// What one tenant's sweep takes out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    pub tenant: Uuid,
    pub memories: usize,
}

/// One decision per tenant with memories expired at `ctx.now`, at most `limit` memories in
/// all; none when nothing has expired.
pub fn sweep(ctx: &Context<'_>, limit: usize) -> Vec<Decision<Swept>> {
    let now = ctx.now;
    ctx.projections
        .memories
        .expired(now, limit)
        .into_iter()
        .map(|(tenant, memory_ids)| {
            let swept = Swept {
                tenant,
                memories: memory_ids.len(),
            };
            let check = still_expired(tenant, memory_ids.clone(), now);
            let event = Event::MemoriesExpired(MemoriesExpired {
                tenant_id: tenant,
                memory_ids,
                expired_at: ctx.now_stored(),
            });
            let mut d = Decision::new(swept, vec![event]);
            d.check = Some(check);
            d
        })
        .collect()
}

/// The sweep's precondition: every one of `ids` is still a live memory of `tenant` that
/// expired by `now` (not deleted, expired by another sweep, or given a later expiry since).
pub fn still_expired(tenant: Uuid, ids: Vec<Uuid>, now: i64) -> Precondition {
    Box::new(move |p: &Projections| {
        if p.memories.all_expired(&tenant, &ids, now) {
            Ok(())
        } else {
            Err(Rejection {
                code: ErrorCode::Conflict,
                message: "memories the sweep read as expired were changed or taken out since"
                    .into(),
                retry_after: None,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{
        MemoryAmend, MemoryDeleted, MemoryExtra, MemoryType, MemoryUpdated, Plan,
    };

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, tenant, unit, OTHER, TENANT};

    fn expiring(tenant: Uuid, n: u128, at: i64) -> Event {
        memory(
            tenant,
            Uuid::from_u128(n),
            &format!("m{n}"),
            MemoryType::Context,
            &unit(n as usize, 0.0),
            MemoryExtra {
                expires_at: Some(at),
                ..Default::default()
            },
            NOON - 60_000_000,
        )
    }

    fn given() -> Given {
        Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            tenant(OTHER, Plan::Pro, 0.0),
            expiring(TENANT, 1, NOON - 2_000),
            expiring(TENANT, 2, NOON),
            expiring(TENANT, 3, NOON + 1_000),
            expiring(OTHER, 4, NOON - 1),
        ])
        .expect("given")
    }

    #[test]
    fn given_expired_memories_when_swept_then_one_event_per_tenant_names_exactly_the_due_ones() {
        let given = given();
        let ids = Counter::new();
        let ctx = given.at(NOON + 500, &ids);
        let mut decisions = sweep(&ctx, SWEEP_MAX);
        decisions.sort_by_key(|d| d.answer.tenant);
        let events: Vec<Event> = decisions.iter().flat_map(|d| d.events.clone()).collect();
        assert_eq!(
            events,
            vec![
                Event::MemoriesExpired(MemoriesExpired {
                    tenant_id: TENANT,
                    memory_ids: vec![Uuid::from_u128(1), Uuid::from_u128(2)],
                    expired_at: NOON,
                }),
                Event::MemoriesExpired(MemoriesExpired {
                    tenant_id: OTHER,
                    memory_ids: vec![Uuid::from_u128(4)],
                    expired_at: NOON,
                }),
            ]
        );
        for d in &decisions {
            let check = d.check.as_ref().expect("a precondition");
            assert_eq!(check(&given.projections), Ok(()));
        }
        // The limit counts memories across tenants.
        assert_eq!(
            sweep(&ctx, 1)
                .iter()
                .map(|d| d.answer.memories)
                .sum::<usize>(),
            1
        );
        // Before anything expired: nothing to append.
        let early = given.at(NOON - 3_000, &ids);
        assert!(sweep(&early, SWEEP_MAX).is_empty());
    }

    #[test]
    fn given_a_sweep_landed_when_another_node_sweeps_the_same_read_then_its_precondition_refuses() {
        let mut given = given();
        let ids = Counter::new();
        // Two nodes read the same state and decide the same sweep.
        let (first, second) = {
            let ctx = given.at(NOON + 500, &ids);
            (sweep(&ctx, SWEEP_MAX), sweep(&ctx, SWEEP_MAX))
        };
        let mine = |ds: Vec<Decision<Swept>>| {
            ds.into_iter()
                .find(|d| d.answer.tenant == TENANT)
                .expect("a sweep of the tenant")
        };
        let (first, second) = (mine(first), mine(second));
        // The first lands.
        let check = first.check.expect("a precondition");
        assert_eq!(check(&given.projections), Ok(()));
        given.apply(&first.events).expect("apply");
        // The second is refused on the state it would be sealed on.
        let check = second.check.expect("a precondition");
        let refused = check(&given.projections).expect_err("refused");
        assert_eq!(refused.code, ErrorCode::Conflict);
        // And the next sweep, reading that state, finds nothing of the tenant's.
        let ctx = given.at(NOON + 500, &ids);
        assert!(sweep(&ctx, SWEEP_MAX)
            .iter()
            .all(|d| d.answer.tenant != TENANT));
    }

    #[test]
    fn given_a_sweep_read_when_a_memory_is_deleted_or_given_a_later_expiry_then_it_is_refused() {
        for change in [
            Event::MemoryDeleted(MemoryDeleted {
                memory_id: Uuid::from_u128(2),
                tenant_id: TENANT,
                deleted_at: NOON + 100,
            }),
            Event::MemoryUpdated(MemoryUpdated {
                memory_id: Uuid::from_u128(2),
                tenant_id: TENANT,
                content: None,
                importance: None,
                updated_at: NOON + 100,
                model: None,
                vector: None,
                amend: Some(MemoryAmend {
                    set_metadata: false,
                    metadata: None,
                    set_expires_at: true,
                    expires_at: Some(NOON + 86_400_000_000),
                    ..MemoryAmend::default()
                }),
                sealed: None,
            }),
        ] {
            let mut given = given();
            let ids = Counter::new();
            let d = {
                let ctx = given.at(NOON + 500, &ids);
                sweep(&ctx, SWEEP_MAX)
                    .into_iter()
                    .find(|d| d.answer.tenant == TENANT)
                    .expect("a sweep")
            };
            given.apply(std::slice::from_ref(&change)).expect("apply");
            let check = d.check.expect("a precondition");
            assert_eq!(
                check(&given.projections).map_err(|r| r.code),
                Err(ErrorCode::Conflict),
                "{change:?}"
            );
        }
    }
}
