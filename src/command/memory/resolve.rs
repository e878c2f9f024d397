//! `resolve: true` on create and extract: a new memory that states a different value for the
//! same subject and scope as a stored one supersedes it, and one equal in meaning to a stored
//! one is not stored.
//!
//! Two steps around the resolver (the rules, or the chat model when extraction uses one),
//! which the handler calls in between since it may be a provider: [`nearby`] gives the stored
//! memories a new one is compared with; [`decide`] takes the resolver's verdict on them and
//! gives the resolution. Create and extract both resolve through these.

use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::{Event, MemoryExtra, MemorySuperseded};
use uuid::Uuid;

use super::scope_filter;
use crate::command::{Context, Refusal};
use crate::extract::Resolution;

/// Stored memories a new one is compared with: the nearest by meaning, of its scope.
pub const CANDIDATES: usize = 20;

/// The stored memories a new one is compared with, and the closest of them at or above the
/// deduplication threshold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Nearby {
    /// Id and content, nearest first: what the resolver is asked about.
    pub memories: Vec<(Uuid, String)>,
    close: Option<Uuid>,
}

impl Nearby {
    /// Nothing stored is near: the resolution is empty without asking the resolver.
    pub fn is_empty(&self) -> bool {
        self.memories.is_empty()
    }

    /// The memories as the resolver takes them.
    pub fn borrowed(&self) -> Vec<(Uuid, &str)> {
        self.memories
            .iter()
            .map(|(id, c)| (*id, c.as_str()))
            .collect()
    }
}

/// The stored memories a new memory (embedded as `vector`, scoped by `extra`) is compared
/// with: the tenant's [`CANDIDATES`] nearest of its scope, superseded ones left out.
pub fn nearby(
    ctx: &Context<'_>,
    tenant: Uuid,
    vector: &[f32],
    extra: &MemoryExtra,
    threshold: f32,
) -> Result<Nearby, Refusal> {
    let scope = scope_filter(extra);
    let nearest = ctx.projections.memories.search(
        &tenant,
        vector,
        MemoryQuery {
            memory_type: None,
            filter: scope.as_ref(),
            include_superseded: false,
        },
        -1.0,
        CANDIDATES,
    )?;
    // The closest at or above the deduplication threshold, should the resolver find nothing.
    let close = nearest
        .iter()
        .filter(|(_, h)| h.score >= threshold)
        .max_by(|a, b| a.1.score.total_cmp(&b.1.score))
        .map(|(m, _)| m.id);
    Ok(Nearby {
        memories: nearest
            .into_iter()
            .map(|(m, _)| (m.id, m.content))
            .collect(),
        close,
    })
}

/// What a new memory does to the stored ones: the resolver's `verdict` on `nearby` when it
/// found a contradiction or a duplicate, else a duplicate of the closest one at or above the
/// threshold, if any. A contradiction is decided first: "I live in Porto" and "I live in
/// Lisbon" can be close enough by cosine to pass for duplicates.
pub fn decide(nearby: &Nearby, verdict: Resolution) -> Resolution {
    if !verdict.supersedes.is_empty() || verdict.duplicate_of.is_some() {
        return verdict;
    }
    Resolution {
        supersedes: Vec::new(),
        duplicate_of: nearby.close,
    }
}

/// The events that mark `superseded` as superseded by `by`.
pub fn superseded(tenant: Uuid, superseded: &[Uuid], by: Uuid, at: i64) -> Vec<Event> {
    superseded
        .iter()
        .map(|id| {
            Event::MemorySuperseded(MemorySuperseded {
                memory_id: *id,
                tenant_id: tenant,
                superseded_by: by,
                superseded_at: at,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{MemoryExtra, MemoryType, Plan};
    use uuid::Uuid;

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, tenant, unit, OTHER, TENANT};
    use crate::extract::{Resolver, RuleResolver};

    fn scoped(user: &str) -> MemoryExtra {
        MemoryExtra {
            user_id: Some(user.into()),
            ..Default::default()
        }
    }

    #[test]
    fn given_stored_memories_when_a_contradicting_one_resolves_then_it_supersedes_the_right_ids() {
        let (porto, cats, porto_u2, foreign) = (
            Uuid::from_u128(1),
            Uuid::from_u128(2),
            Uuid::from_u128(3),
            Uuid::from_u128(4),
        );
        let mut events = vec![tenant(TENANT, Plan::Pro, 0.0)];
        for (id, who, content, v, extra) in [
            (porto, TENANT, "I live in Porto", unit(0, 0.2), scoped("u1")),
            (cats, TENANT, "I like cats", unit(2, 0.0), scoped("u1")),
            // Another user's and another tenant's statements are not compared.
            (
                porto_u2,
                TENANT,
                "I live in Porto",
                unit(0, 0.2),
                scoped("u2"),
            ),
            (
                foreign,
                OTHER,
                "I live in Porto",
                unit(0, 0.2),
                scoped("u1"),
            ),
        ] {
            events.push(memory(who, id, content, MemoryType::Fact, &v, extra, NOON));
        }
        let given = Given::with(&events).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let near = nearby(&ctx, TENANT, &unit(0, 0.25), &scoped("u1"), 0.95).expect("nearby");
        assert_eq!(
            near.memories,
            vec![
                (porto, "I live in Porto".into()),
                (cats, "I like cats".into())
            ]
        );
        let verdict = RuleResolver
            .resolve("I live in Lisbon", &near.borrowed(), &|| false)
            .expect("rules");
        let r = decide(&near, verdict);
        assert_eq!(
            r,
            Resolution {
                supersedes: vec![porto],
                duplicate_of: None
            }
        );
    }

    #[test]
    fn given_a_memory_that_close_when_the_resolver_finds_nothing_then_it_is_a_duplicate() {
        let stored = Uuid::from_u128(1);
        let given = Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            memory(
                TENANT,
                stored,
                "enjoys hiking on weekends",
                MemoryType::Fact,
                &unit(0, 0.0),
                MemoryExtra::default(),
                NOON,
            ),
        ])
        .expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let extra = MemoryExtra::default();
        // cos = 1/sqrt(1.0025) = 0.99875: at the 0.95 threshold, a duplicate.
        let near = nearby(&ctx, TENANT, &unit(0, 0.05), &extra, 0.95).expect("nearby");
        assert_eq!(
            decide(&near, Resolution::default()).duplicate_of,
            Some(stored)
        );
        // Below the threshold (cos 0.894): stored as new.
        let near = nearby(&ctx, TENANT, &unit(0, 0.5), &extra, 0.95).expect("nearby");
        assert_eq!(decide(&near, Resolution::default()), Resolution::default());
        // The resolver's contradiction wins over closeness.
        let near = nearby(&ctx, TENANT, &unit(0, 0.05), &extra, 0.95).expect("nearby");
        let verdict = Resolution {
            supersedes: vec![stored],
            duplicate_of: None,
        };
        assert_eq!(decide(&near, verdict.clone()), verdict);
        // Nothing stored near another tenant's vector space: no resolver call is needed.
        let near = nearby(&ctx, OTHER, &unit(0, 0.0), &extra, 0.95).expect("nearby");
        assert!(near.is_empty());
    }
}
