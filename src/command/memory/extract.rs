//! `POST /v1/memories/extract`: memories found in a conversation or a text, stored and
//! charged.
//!
//! The decisions, in the order the handler takes them around its providers: the input's
//! [`price`] (400 over the size limit); the extractor's candidates [`at_most`] the cap (400);
//! once embedded, which candidates are kept ([`sort`]: with `deduplicate`, one as similar as
//! the threshold to a stored memory of its type and scope, or to one kept earlier in the call,
//! is skipped); with `resolve`, each kept one's resolution (the resolver, through
//! [`super::resolve`]); then [`decide`]: the memories created, the superseded ones, the charge
//! (`CreditsConsumed`) and the precondition that the tenant's credits still cover it when the
//! append is sealed ([`credits_cover`], 402).

use auditmem_projections::memories::filter::Filter;
use auditmem_projections::memories::MemoryQuery;
use auditmem_projections::{
    AuditDetail, CreditsConsumed, Event, MemoryExtra, MemoryType, Projections,
};
use serde_json::Value;
use uuid::Uuid;

use auditmem_projections::seal::Subject;

use super::{all_subjects, new_memory, resolve, scope_filter, view_subjects, Embedding, Fresh};
use crate::command::{Audit, Context, Decision, Refusal};
use crate::extract::{Candidate, Resolution};
use crate::log::appender::{Precondition, Rejection};
use crate::registry::ErrorCode;
use crate::wire::memory::{Extracted, Memory, MemoryResolution, SkippedMemory, SkippedMessage};

/// What extraction costs: a base per call plus a rate per started 1,000 input characters,
/// in credits, and the USD a credit is worth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pricing {
    pub credits_per_call: f64,
    pub credits_per_1k_chars: f64,
    pub usd_per_credit: f64,
}

/// What one extraction is charged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Charge {
    pub credits: f64,
    pub usd: f64,
}

/// The charge for `input_chars` characters.
pub fn cost(pricing: &Pricing, input_chars: usize) -> Charge {
    let credits =
        pricing.credits_per_call + pricing.credits_per_1k_chars * input_chars.div_ceil(1000) as f64;
    Charge {
        credits,
        usd: ((credits * pricing.usd_per_credit) * 1e6).round() / 1e6,
    }
}

/// The charge for extracting from `input_text`, refused when it is over `max_chars`.
pub fn price(pricing: &Pricing, max_chars: usize, input_text: &str) -> Result<Charge, Refusal> {
    let input_chars = input_text.chars().count();
    if input_chars > max_chars {
        return Err(Refusal::bad_request(format!(
            "the input is {input_chars} characters; at most {max_chars} are allowed"
        )));
    }
    Ok(cost(pricing, input_chars))
}

/// 402: the charge is more than the tenant has.
pub fn insufficient(needed: f64, have: f64) -> Refusal {
    Refusal::new(
        ErrorCode::InsufficientCredits,
        format!("extraction needs {needed} credits; the tenant has {have}"),
    )
}

/// The extractor found `found` memories; one call stores at most `most`.
pub fn at_most(found: usize, most: usize) -> Result<(), Refusal> {
    if found > most {
        return Err(Refusal::bad_request(format!(
            "the input holds {found} memories; at most {most} are extracted in one call (nothing was stored or charged)"
        )));
    }
    Ok(())
}

/// The candidates kept, by index, each with its new id; and the ones skipped.
#[derive(Debug)]
pub struct Sorted {
    kept: Vec<(usize, Uuid)>,
    skipped: Vec<SkippedMemory>,
}

impl Sorted {
    /// The indexes of the candidates kept, in order: the ones a resolving call resolves.
    pub fn kept(&self) -> impl Iterator<Item = usize> + '_ {
        self.kept.iter().map(|(i, _)| *i)
    }
}

/// Keeps every candidate, or with `deduplicate` skips one as similar as `threshold` to a
/// memory of the same type already stored (of the scope `extra` names) or kept earlier in this
/// call. `vectors` are the candidates' embeddings, in order.
pub fn sort(
    ctx: &Context<'_>,
    tenant: Uuid,
    candidates: &[Candidate],
    vectors: &[Vec<f32>],
    deduplicate: bool,
    extra: &MemoryExtra,
    threshold: f32,
) -> Result<Sorted, Refusal> {
    if vectors.len() != candidates.len() {
        return Err(Refusal::internal(format!(
            "{} vectors for {} candidates",
            vectors.len(),
            candidates.len()
        )));
    }
    let scope = scope_filter(extra);
    let mut sorted = Sorted {
        kept: Vec::new(),
        skipped: Vec::new(),
    };
    for (i, (c, v)) in candidates.iter().zip(vectors).enumerate() {
        if deduplicate {
            let kept: Vec<(Uuid, MemoryType, &[f32])> = sorted
                .kept
                .iter()
                .map(|(k, id)| (*id, candidates[*k].memory_type, vectors[*k].as_slice()))
                .collect();
            let dup = duplicate(
                ctx.projections,
                tenant,
                &kept,
                c.memory_type,
                scope.as_ref(),
                v,
                threshold,
            )?;
            if let Some(dup) = dup {
                sorted.skipped.push(duplicate_of(c, dup));
                continue;
            }
        }
        sorted.kept.push((i, ctx.id()));
    }
    Ok(sorted)
}

/// A candidate not stored because it duplicates the stored memory `dup`.
fn duplicate_of(c: &Candidate, dup: Uuid) -> SkippedMemory {
    SkippedMemory {
        content: c.content.clone(),
        memory_type: c.memory_type,
        reason: "duplicate",
        duplicate_of: dup,
    }
}

/// The memory `v` duplicates: a stored one of the tenant's first, else one kept in this call.
fn duplicate(
    projections: &Projections,
    tenant: Uuid,
    kept: &[(Uuid, MemoryType, &[f32])],
    memory_type: MemoryType,
    scope: Option<&Filter>,
    v: &[f32],
    threshold: f32,
) -> Result<Option<Uuid>, Refusal> {
    let stored = projections
        .memories
        .nearest(
            &tenant,
            v,
            MemoryQuery {
                memory_type: Some(memory_type),
                filter: scope,
                include_superseded: false,
            },
        )?
        .filter(|(_, s)| *s >= threshold);
    let within = kept
        .iter()
        .filter(|(_, t, _)| *t == memory_type)
        .map(|(id, _, kv)| (*id, auditmem_projections::vector_table::dot(kv, v)))
        .filter(|(_, s)| *s >= threshold)
        .max_by(|a, b| a.1.total_cmp(&b.1));
    Ok(stored.or(within).map(|(id, _)| id))
}

/// What the extraction found, embedded by `model` (one vector per candidate, in order).
pub struct Found<'a> {
    pub candidates: &'a [Candidate],
    /// Per candidate, the messages it was drawn from (none: the request's `occurred_at`).
    pub sources: &'a [Vec<usize>],
    pub vectors: &'a [Vec<f32>],
    pub model: &'a str,
}

/// What the request gave besides its input, and what its audit entry records of it.
pub struct Asked {
    /// Scope, metadata and occurrence time every memory extracted is given.
    pub extra: MemoryExtra,
    /// Per message the extractor read, its own `occurred_at` (none: the request's): a memory
    /// drawn from messages takes the latest of theirs ([`occurred_at`]).
    pub message_times: Vec<Option<i64>>,
    /// The messages not read, answered as they are.
    pub skipped_messages: Vec<SkippedMessage>,
    /// The input as it was given (the entry's `input_content`).
    pub input_value: Value,
    /// The input as text: what was measured and charged (the entry's `memory_query`).
    pub input_text: String,
}

/// When what a candidate drawn from `messages` says happened: the latest of their times, a
/// message without its own `occurred_at` counting as the request's `default`; `default` when
/// it names no message (a text, or a model that said none).
pub fn occurred_at(
    messages: &[usize],
    message_times: &[Option<i64>],
    default: Option<i64>,
) -> Option<i64> {
    messages
        .iter()
        .filter_map(|&i| message_times.get(i).copied())
        .map(|own| own.or(default))
        .max()
        .unwrap_or(default)
}

/// The extraction's memories, the memories they supersede and the charge, with the
/// precondition that the tenant's credits still cover it. `resolutions` holds one resolution
/// per kept candidate (in [`Sorted::kept`]'s order) when the call resolves, and is `None`
/// when it does not.
pub fn decide(
    ctx: &Context<'_>,
    tenant: Uuid,
    found: Found<'_>,
    sorted: Sorted,
    resolutions: Option<Vec<Resolution>>,
    asked: Asked,
    charge: Charge,
) -> Result<Decision<Extracted>, Refusal> {
    let Sorted { kept, mut skipped } = sorted;
    if resolutions.as_ref().is_some_and(|r| r.len() != kept.len()) {
        return Err(Refusal::internal("a resolution missing for a kept memory"));
    }
    let at = ctx.now_stored();
    let mut resolutions = resolutions.map(Vec::into_iter);
    let mut events = Vec::with_capacity(kept.len() + 1);
    let mut memories = Vec::with_capacity(kept.len());
    // The superseded memories change: the entry is about them too.
    let mut changed = Vec::new();
    for (i, id) in kept {
        let c = &found.candidates[i];
        let resolution = match resolutions.as_mut().and_then(Iterator::next) {
            Some(r) => {
                if let Some(dup) = r.duplicate_of {
                    skipped.push(duplicate_of(c, dup));
                    continue;
                }
                events.extend(resolve::superseded(tenant, &r.supersedes, id, at));
                for old in &r.supersedes {
                    match ctx.projections.memories.get(&tenant, old)? {
                        Some(m) => changed.extend(view_subjects(tenant, &m)),
                        None => changed.push(Subject::Memory(tenant, *old)),
                    }
                }
                Some(MemoryResolution {
                    stored: true,
                    superseded: r.supersedes,
                    duplicate_of: None,
                })
            }
            None => None,
        };
        let fresh = Fresh {
            content: c.content.clone(),
            memory_type: c.memory_type,
            importance: (c.importance as f64 * 100.0).round() / 100.0,
            extra: MemoryExtra {
                occurred_at: occurred_at(
                    found.sources.get(i).map_or(&[][..], Vec::as_slice),
                    &asked.message_times,
                    asked.extra.occurred_at,
                ),
                ..asked.extra.clone()
            },
        };
        let embedding = Embedding {
            model: found.model,
            vector: &found.vectors[i],
        };
        let (event, mut memory) = new_memory(ctx, tenant, id, at, fresh, embedding)?;
        events.push(event);
        memory.resolution = resolution;
        memories.push(memory);
    }
    events.push(Event::CreditsConsumed(CreditsConsumed {
        tenant_id: tenant,
        credits: charge.credits,
        usd: charge.usd,
        at,
    }));
    let answer = Extracted {
        memories,
        skipped,
        credits_consumed: charge.credits,
        skipped_messages: asked.skipped_messages,
    };
    let mut subjects = all_subjects(tenant, &answer.memories);
    subjects.extend(changed);
    subjects.sort();
    subjects.dedup();
    let audit = Audit {
        detail: AuditDetail {
            input_content: Some(asked.input_value),
            output_content: Some(answer.output()),
            memory_query: Some(vec![asked.input_text]),
            memory_results: Some(answer.memories.iter().map(Memory::audited).collect()),
            ..Default::default()
        },
        credits: charge.credits,
        usd: charge.usd,
        subjects,
    };
    Ok(Decision {
        answer,
        events,
        check: Some(credits_cover(tenant, charge.credits)),
        audit,
    })
}

/// The appender's check that the tenant's credits still cover the charge, against every charge
/// committed before it.
pub fn credits_cover(tenant_id: Uuid, credits: f64) -> Precondition {
    Box::new(move |p: &Projections| match p.tenants.tenant(&tenant_id) {
        Ok(Some(t)) if t.credits >= credits => Ok(()),
        Ok(Some(t)) => Err(rejection(insufficient(credits, t.credits))),
        Ok(None) => Err(Rejection {
            code: ErrorCode::Unauthorized,
            message: "unknown tenant".into(),
            retry_after: None,
        }),
        Err(e) => Err(Rejection {
            code: ErrorCode::Internal,
            message: format!("reading credits: {e}"),
            retry_after: None,
        }),
    })
}

fn rejection(r: Refusal) -> Rejection {
    let code = r.code();
    Rejection {
        code,
        message: r.to_string(),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{CreditsConsumed, MemoryExtra, MemorySuperseded, Plan};
    use serde_json::json;

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, tenant, unit, MODEL, TENANT};

    const PRICING: Pricing = Pricing {
        credits_per_call: 1.0,
        credits_per_1k_chars: 0.5,
        usd_per_credit: 0.01,
    };

    fn candidate(content: &str, memory_type: MemoryType) -> Candidate {
        Candidate {
            content: content.into(),
            memory_type,
            importance: 0.666,
        }
    }

    fn asked() -> Asked {
        Asked {
            extra: MemoryExtra {
                user_id: Some("u1".into()),
                ..Default::default()
            },
            message_times: Vec::new(),
            skipped_messages: Vec::new(),
            input_value: json!({"text": "..."}),
            input_text: "...".into(),
        }
    }

    #[test]
    fn a_memory_takes_the_latest_time_of_the_messages_it_was_drawn_from() {
        let times = [Some(100), None, Some(300), Some(50)];
        // One message: its own time; without one, the request's.
        assert_eq!(occurred_at(&[0], &times, Some(200)), Some(100));
        assert_eq!(occurred_at(&[1], &times, Some(200)), Some(200));
        assert_eq!(occurred_at(&[1], &times, None), None);
        // Several: the latest, the request's counting for a message without its own.
        assert_eq!(occurred_at(&[0, 2, 3], &times, Some(200)), Some(300));
        assert_eq!(occurred_at(&[0, 1, 3], &times, Some(200)), Some(200));
        assert_eq!(occurred_at(&[0, 1, 3], &times, None), Some(100));
        // None named, or only indexes the conversation does not hold: the request's.
        assert_eq!(occurred_at(&[], &times, Some(200)), Some(200));
        assert_eq!(occurred_at(&[9], &times, Some(200)), Some(200));
    }

    #[test]
    fn the_price_is_per_call_and_per_started_thousand_characters() {
        assert_eq!(
            price(&PRICING, 3000, &"x".repeat(1001)),
            Ok(Charge {
                credits: 2.0,
                usd: 0.02
            })
        );
        assert_eq!(
            price(&PRICING, 3000, ""),
            Ok(Charge {
                credits: 1.0,
                usd: 0.01
            })
        );
        assert_eq!(
            price(&PRICING, 3000, &"é".repeat(3001)),
            Err(Refusal::bad_request(
                "the input is 3001 characters; at most 3000 are allowed"
            ))
        );
        assert_eq!(at_most(20, 20), Ok(()));
        assert_eq!(
            at_most(21, 20).err().map(|r| r.code()),
            Some(ErrorCode::BadRequest)
        );
    }

    #[test]
    fn given_a_stored_memory_when_deduplicating_then_its_duplicate_and_a_repeat_are_skipped() {
        let stored = Uuid::from_u128(0x51);
        let given = Given::with(&[
            tenant(TENANT, Plan::Pro, 10.0),
            memory(
                TENANT,
                stored,
                "likes tea",
                MemoryType::Fact,
                &unit(0, 0.0),
                MemoryExtra {
                    user_id: Some("u1".into()),
                    ..Default::default()
                },
                NOON,
            ),
        ])
        .expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let candidates = vec![
            candidate("likes tea a lot", MemoryType::Fact),
            candidate("has a dog", MemoryType::Fact),
            candidate("has a dog named Rex", MemoryType::Fact),
            // Same vector as the stored fact but another type: not its duplicate.
            candidate("always answer about tea", MemoryType::Rule),
        ];
        let vectors = vec![unit(0, 0.01), unit(1, 0.0), unit(1, 0.01), unit(0, 0.0)];
        let extra = asked().extra;
        let sorted = sort(&ctx, TENANT, &candidates, &vectors, true, &extra, 0.95).expect("sorted");
        assert_eq!(sorted.kept().collect::<Vec<_>>(), vec![1, 3]);
        let skipped: Vec<(String, Uuid)> = sorted
            .skipped
            .iter()
            .map(|s| (s.content.clone(), s.duplicate_of))
            .collect();
        assert_eq!(
            skipped,
            vec![
                ("likes tea a lot".into(), stored),
                // A duplicate of the one kept earlier in the call, by its new id.
                ("has a dog named Rex".into(), Uuid::from_u128(1)),
            ]
        );
        // Without deduplicate every candidate is kept.
        let all = sort(&ctx, TENANT, &candidates, &vectors, false, &extra, 0.95).expect("sorted");
        assert_eq!(all.kept().count(), 4);
    }

    #[test]
    fn given_credits_when_extracted_then_memories_and_one_charge_and_the_credits_precondition() {
        let mut given = Given::with(&[tenant(TENANT, Plan::Pro, 2.5)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let candidates = vec![
            candidate("lives in Lisbon", MemoryType::Fact),
            candidate("likes jazz", MemoryType::Fact),
        ];
        let vectors = vec![unit(0, 0.0), unit(2, 0.0)];
        let sorted = sort(
            &ctx,
            TENANT,
            &candidates,
            &vectors,
            false,
            &asked().extra,
            0.95,
        )
        .expect("sorted");
        let old = Uuid::from_u128(0x01D);
        let resolutions = vec![
            Resolution {
                supersedes: vec![old],
                duplicate_of: None,
            },
            Resolution {
                supersedes: Vec::new(),
                duplicate_of: Some(Uuid::from_u128(0xD0)),
            },
        ];
        let charge = Charge {
            credits: 2.0,
            usd: 0.02,
        };
        let found = Found {
            candidates: &candidates,
            sources: &[],
            vectors: &vectors,
            model: MODEL,
        };
        let d = decide(
            &ctx,
            TENANT,
            found,
            sorted,
            Some(resolutions),
            asked(),
            charge,
        )
        .expect("decided");
        let lisbon = Uuid::from_u128(1);
        assert_eq!(d.events.len(), 3, "{:?}", d.events);
        assert_eq!(
            d.events[0],
            Event::MemorySuperseded(MemorySuperseded {
                memory_id: old,
                tenant_id: TENANT,
                superseded_by: lisbon,
                superseded_at: NOON,
            })
        );
        assert!(matches!(&d.events[1], Event::MemoryCreated(c)
            if c.memory_id == lisbon && c.importance == 0.67
                && c.extra.as_ref().and_then(|x| x.user_id.as_deref()) == Some("u1")));
        assert_eq!(
            d.events[2],
            Event::CreditsConsumed(CreditsConsumed {
                tenant_id: TENANT,
                credits: 2.0,
                usd: 0.02,
                at: NOON,
            })
        );
        assert_eq!(d.answer.memories.len(), 1);
        assert_eq!(d.answer.skipped[0].content, "likes jazz");
        assert_eq!((d.audit.credits, d.audit.usd), (2.0, 0.02));
        assert_eq!(d.audit.detail.memory_query, Some(vec!["...".to_string()]));

        // The precondition passes on 2.5 credits, and refuses (402) once an admin lowered
        // them below the charge.
        let check = d.check.expect("a precondition");
        assert_eq!(check(&given.projections), Ok(()));
        given
            .apply(&[Event::TenantUpdated(auditmem_projections::TenantUpdated {
                tenant_id: TENANT,
                name: None,
                plan: None,
                subscription_active: None,
                credits: Some(1.5),
                updated_at: NOON,
            })])
            .expect("apply");
        assert_eq!(
            check(&given.projections),
            Err(Rejection {
                code: ErrorCode::InsufficientCredits,
                message: "extraction needs 2 credits; the tenant has 1.5".into(),
                retry_after: None,
            })
        );
    }
}
