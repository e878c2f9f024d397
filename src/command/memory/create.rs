//! `POST /v1/memories` and `POST /v1/memories/batch`: memories created, each with its vector.
//!
//! With `resolve: true` a create is decided by its resolution ([`super::resolve`]): a
//! duplicate stores nothing and answers the stored memory it duplicates; otherwise the memory
//! is stored and supersedes what the resolution names, in the same append.

use auditmem_projections::{AuditDetail, Event};
use uuid::Uuid;

use auditmem_projections::seal::Subject;

use super::{
    all_subjects, new_memory, owned, resolve, subjects_of, view_subjects, Embedding, Fresh,
};
use crate::command::{Context, Decision, Refusal};
use crate::extract::Resolution;
use crate::wire::memory::{Memory, MemoryBatch, MemoryResolution, NewMemory};

impl From<NewMemory> for Fresh {
    fn from(m: NewMemory) -> Self {
        Fresh {
            content: m.content,
            memory_type: m.memory_type,
            importance: m.importance,
            extra: m.extra,
        }
    }
}

/// The answer of one memory, which its audit entry records in `memory_results`, with the
/// content written in `memory_query`; the entry is about the answered memory's subjects and
/// `more` (the memories the create changed).
fn answered(
    tenant: Uuid,
    memory: Memory,
    content: String,
    events: Vec<Event>,
    more: Vec<Subject>,
) -> Decision<Memory> {
    let detail = AuditDetail {
        memory_query: Some(vec![content]),
        memory_results: Some(vec![memory.audited()]),
        ..Default::default()
    };
    let mut subjects = subjects_of(tenant, &memory);
    subjects.extend(more);
    subjects.sort();
    subjects.dedup();
    let mut d = Decision::new(memory, events).recording(detail);
    d.audit.subjects = subjects;
    d
}

/// Stores `new`, embedded as `embedding`. When `new.resolve`, `resolution` is what
/// [`resolve::decide`] found for it (none: nothing stored was near it).
pub fn create(
    ctx: &Context<'_>,
    tenant: Uuid,
    new: NewMemory,
    embedding: Embedding<'_>,
    resolution: Option<Resolution>,
) -> Result<Decision<Memory>, Refusal> {
    let content = new.content.clone();
    let at = ctx.now_stored();
    if !new.resolve {
        let (event, memory) = new_memory(ctx, tenant, ctx.id(), at, new.into(), embedding)?;
        return Ok(answered(tenant, memory, content, vec![event], Vec::new()));
    }
    let resolution = resolution.unwrap_or_default();
    if let Some(dup) = resolution.duplicate_of {
        // Nothing is stored: the answer is the stored memory it duplicates.
        let mut memory = Memory::from(owned(ctx, tenant, &dup.to_string())?);
        memory.resolution = Some(MemoryResolution {
            stored: false,
            superseded: Vec::new(),
            duplicate_of: Some(dup),
        });
        return Ok(answered(tenant, memory, content, Vec::new(), Vec::new()));
    }
    let (event, mut memory) = new_memory(ctx, tenant, ctx.id(), at, new.into(), embedding)?;
    let mut events = vec![event];
    events.extend(resolve::superseded(
        tenant,
        &resolution.supersedes,
        memory.id,
        at,
    ));
    // The superseded memories change: the entry is about them too.
    let mut changed = Vec::new();
    for id in &resolution.supersedes {
        match ctx.projections.memories.get(&tenant, id)? {
            Some(m) => changed.extend(view_subjects(tenant, &m)),
            None => changed.push(Subject::Memory(tenant, *id)),
        }
    }
    memory.resolution = Some(MemoryResolution {
        stored: true,
        superseded: resolution.supersedes,
        duplicate_of: None,
    });
    Ok(answered(tenant, memory, content, events, changed))
}

/// Stores every memory of a batch, each with its vector (in the same order), in one append.
pub fn create_batch(
    ctx: &Context<'_>,
    tenant: Uuid,
    batch: Vec<NewMemory>,
    model: &str,
    vectors: &[Vec<f32>],
) -> Result<Decision<MemoryBatch>, Refusal> {
    if vectors.len() != batch.len() {
        return Err(Refusal::internal(format!(
            "{} vectors for {} memories",
            vectors.len(),
            batch.len()
        )));
    }
    let at = ctx.now_stored();
    let mut events = Vec::with_capacity(batch.len());
    let mut memories = Vec::with_capacity(batch.len());
    let mut written = Vec::with_capacity(batch.len());
    for (new, vector) in batch.into_iter().zip(vectors) {
        let embedding = Embedding { model, vector };
        let (event, memory) = new_memory(ctx, tenant, ctx.id(), at, new.into(), embedding)?;
        written.push(memory.content.clone());
        events.push(event);
        memories.push(memory);
    }
    Ok(batch_answer(tenant, memories, written, events))
}

/// A batch's answer, which its audit entry records in `memory_results` (and the contents
/// written in `memory_query`), about every answered memory's subjects.
pub(super) fn batch_answer(
    tenant: Uuid,
    memories: Vec<Memory>,
    written: Vec<String>,
    events: Vec<Event>,
) -> Decision<MemoryBatch> {
    let detail = AuditDetail {
        memory_query: (!written.is_empty()).then_some(written),
        memory_results: Some(memories.iter().map(Memory::audited).collect()),
        ..Default::default()
    };
    let subjects = all_subjects(tenant, &memories);
    let mut d = Decision::new(MemoryBatch { memories }, events).recording(detail);
    d.audit.subjects = subjects;
    d
}

#[cfg(test)]
mod tests {
    use auditmem_projections::{
        vector_to_bytes, Event, MemoryCreated, MemoryExtra, MemorySuperseded, MemoryType, Plan,
    };
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::command::given::{Counter, Given, NOON};
    use crate::command::memory::cases::{memory, opened, tenant, unit, MODEL, TENANT};

    fn new(content: &str, resolve: bool) -> NewMemory {
        NewMemory {
            content: content.into(),
            memory_type: MemoryType::Fact,
            importance: 0.8,
            extra: MemoryExtra {
                user_id: Some("u1".into()),
                ..Default::default()
            },
            resolve,
        }
    }

    #[test]
    fn given_a_tenant_when_a_memory_is_created_then_one_event_carries_it_and_its_vector() {
        let given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON + 123, &ids);
        let v = unit(0, 0.0);
        let d = create(
            &ctx,
            TENANT,
            new("lives in Porto", false),
            Embedding {
                model: MODEL,
                vector: &v,
            },
            None,
        )
        .expect("decided");
        let at = NOON; // now_stored: whole milliseconds
        assert_eq!(
            opened(&d.events, &*given.projections.keys),
            vec![Event::MemoryCreated(MemoryCreated {
                memory_id: Uuid::from_u128(1),
                tenant_id: TENANT,
                content: "lives in Porto".into(),
                memory_type: MemoryType::Fact,
                importance: 0.8,
                created_at: at,
                model: MODEL.into(),
                vector: vector_to_bytes(&v),
                extra: Some(MemoryExtra {
                    user_id: Some("u1".into()),
                    ..Default::default()
                }),
                sealed: None,
            })]
        );
        assert!(d.check.is_none());
        assert_eq!(d.answer.id, Uuid::from_u128(1));
        assert!(d.answer.resolution.is_none());
        assert_eq!(
            d.audit.detail.memory_query,
            Some(vec!["lives in Porto".to_string()])
        );
        let results = d.audit.detail.memory_results.expect("results");
        assert_eq!(results.len(), 1);
        assert_eq!(results[0]["user_id"], json!("u1"));
        assert_eq!(results[0]["created_at"], json!("2026-11-23T12:00:00.000Z"));

        // Applied, the memory reads back as the answer showed it.
        let mut given = given;
        given.apply(&d.events).expect("apply");
        let stored = given
            .projections
            .memories
            .get(&TENANT, &Uuid::from_u128(1))
            .expect("read")
            .expect("stored");
        assert_eq!(
            serde_json::to_value(Memory::from(stored)).expect("json"),
            serde_json::to_value(&d.answer).expect("json")
        );
    }

    #[test]
    fn given_a_memory_when_created_then_its_event_is_sealed_under_its_subjects_and_the_audit_names_them(
    ) {
        use auditmem_projections::seal::Subject;
        let given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let v = unit(0, 0.0);
        let mut asked = new("ssn 078-05-1120", false);
        asked.extra.metadata = Some(r#"{"card":"4111-1111"}"#.into());
        let embedding = Embedding {
            model: MODEL,
            vector: &v,
        };
        let d = create(&ctx, TENANT, asked, embedding, None).expect("decided");
        let id = Uuid::from_u128(1);
        let subjects = vec![
            Subject::User(TENANT, "u1".into()),
            Subject::Memory(TENANT, id),
        ];
        let keys = &*given.projections.keys;
        let [Event::MemoryCreated(c)] = &d.events[..] else {
            panic!("{:?}", d.events)
        };
        // In the clear: no content, no metadata, no vector; the scope and the rest stay.
        assert_eq!((c.content.as_str(), c.vector.len()), ("", 0));
        let x = c.extra.clone().expect("scope");
        assert_eq!((x.user_id.as_deref(), x.metadata), (Some("u1"), None));
        let encoded = d.events[0].encode().expect("encode");
        for secret in ["078-05-1120", "4111-1111"] {
            assert!(!encoded
                .windows(secret.len())
                .any(|w| w == secret.as_bytes()));
        }
        // Sealed under the keys of exactly its subjects.
        let mut want: Vec<_> = subjects
            .iter()
            .map(|s| keys.find(s).expect("ring").expect("a key"))
            .collect();
        want.sort();
        assert_eq!(c.sealed.as_ref().map(|s| s.keys.clone()), Some(want));
        let open = c.opened(keys).expect("ring").expect("opens");
        assert_eq!(open.content, "ssn 078-05-1120");
        assert_eq!(
            open.extra.as_ref().and_then(|x| x.metadata.as_deref()),
            Some(r#"{"card":"4111-1111"}"#)
        );
        assert_eq!(open.vector, vector_to_bytes(&v));
        assert_eq!(d.audit.subjects, subjects);
    }

    /// A keyring whose store is down.
    struct Down;

    impl auditmem_projections::seal::Keyring for Down {
        fn key_of(
            &self,
            _: &auditmem_projections::seal::Subject,
        ) -> Result<auditmem_projections::seal::KeyId, auditmem_projections::seal::KeyError>
        {
            Err(auditmem_projections::seal::KeyError::Store("down".into()))
        }
        fn find(
            &self,
            _: &auditmem_projections::seal::Subject,
        ) -> Result<Option<auditmem_projections::seal::KeyId>, auditmem_projections::seal::KeyError>
        {
            Err(auditmem_projections::seal::KeyError::Store("down".into()))
        }
        fn seal_key(
            &self,
            _: &[auditmem_projections::seal::KeyId],
        ) -> Result<Option<auditmem_projections::seal::SealKey>, auditmem_projections::seal::KeyError>
        {
            Err(auditmem_projections::seal::KeyError::Store("down".into()))
        }
        fn destroy(
            &self,
            _: &[auditmem_projections::seal::KeyId],
        ) -> Result<usize, auditmem_projections::seal::KeyError> {
            Err(auditmem_projections::seal::KeyError::Store("down".into()))
        }
        fn keys_of_tenant(
            &self,
            _: Uuid,
        ) -> Result<
            Vec<(
                auditmem_projections::seal::Subject,
                auditmem_projections::seal::KeyId,
            )>,
            auditmem_projections::seal::KeyError,
        > {
            Err(auditmem_projections::seal::KeyError::Store("down".into()))
        }
    }

    #[test]
    fn given_a_keyring_that_fails_when_created_then_an_internal_refusal_and_nothing_decided() {
        let mut given = Given::with_keys(std::sync::Arc::new(Down)).expect("given");
        given
            .apply(&[tenant(TENANT, Plan::Pro, 0.0)])
            .expect("tenant");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let v = unit(0, 0.0);
        let embedding = Embedding {
            model: MODEL,
            vector: &v,
        };
        let refused = create(&ctx, TENANT, new("lives in Porto", false), embedding, None).err();
        assert!(
            matches!(&refused, Some(Refusal::Internal(why)) if why.contains("down")),
            "{refused:?}"
        );
        assert_eq!(
            refused.map(|r| r.code()),
            Some(crate::registry::ErrorCode::Internal)
        );
        let batch = create_batch(
            &ctx,
            TENANT,
            vec![new("a", false)],
            MODEL,
            std::slice::from_ref(&v),
        )
        .err();
        assert!(matches!(batch, Some(Refusal::Internal(_))), "{batch:?}");
    }

    #[test]
    fn given_a_duplicate_resolution_when_created_then_nothing_is_stored_and_the_stored_one_answers()
    {
        let dup = Uuid::from_u128(0xD);
        let v = unit(0, 0.0);
        let given = Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            memory(
                TENANT,
                dup,
                "lives in Porto",
                MemoryType::Fact,
                &v,
                MemoryExtra::default(),
                NOON - 5_000,
            ),
        ])
        .expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let d = create(
            &ctx,
            TENANT,
            new("lives in Porto.", true),
            Embedding {
                model: MODEL,
                vector: &v,
            },
            Some(Resolution {
                supersedes: Vec::new(),
                duplicate_of: Some(dup),
            }),
        )
        .expect("decided");
        assert!(d.events.is_empty(), "a duplicate stores nothing");
        assert_eq!(d.answer.id, dup);
        assert_eq!(d.answer.content, "lives in Porto");
        let r = d.answer.resolution.as_ref().expect("resolution");
        assert_eq!(
            (r.stored, r.superseded.clone(), r.duplicate_of),
            (false, Vec::new(), Some(dup))
        );
        // No id was taken for a memory that was not stored.
        assert_eq!(ids.next(), Uuid::from_u128(1));
    }

    #[test]
    fn given_a_supersede_resolution_when_created_then_the_new_memory_supersedes_exactly_those() {
        let (old1, old2) = (Uuid::from_u128(0xE1), Uuid::from_u128(0xE2));
        let given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let v = unit(1, 0.0);
        let d = create(
            &ctx,
            TENANT,
            new("lives in Lisbon", true),
            Embedding {
                model: MODEL,
                vector: &v,
            },
            Some(Resolution {
                supersedes: vec![old1, old2],
                duplicate_of: None,
            }),
        )
        .expect("decided");
        let new_id = Uuid::from_u128(1);
        assert!(matches!(&d.events[0], Event::MemoryCreated(c) if c.memory_id == new_id));
        assert_eq!(
            d.events[1..],
            [old1, old2].map(|id| Event::MemorySuperseded(MemorySuperseded {
                memory_id: id,
                tenant_id: TENANT,
                superseded_by: new_id,
                superseded_at: NOON,
            }))
        );
        let r = d.answer.resolution.as_ref().expect("resolution");
        assert_eq!(
            (r.stored, r.superseded.clone(), r.duplicate_of),
            (true, vec![old1, old2], None)
        );
    }

    #[test]
    fn given_a_duplicate_of_another_tenants_memory_when_created_then_404() {
        let foreign = Uuid::from_u128(0xF);
        let v = unit(0, 0.0);
        let given = Given::with(&[
            tenant(TENANT, Plan::Pro, 0.0),
            memory(
                crate::command::memory::cases::OTHER,
                foreign,
                "x",
                MemoryType::Fact,
                &v,
                MemoryExtra::default(),
                NOON,
            ),
        ])
        .expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let refused = create(
            &ctx,
            TENANT,
            new("x", true),
            Embedding {
                model: MODEL,
                vector: &v,
            },
            Some(Resolution {
                supersedes: Vec::new(),
                duplicate_of: Some(foreign),
            }),
        )
        .err();
        assert_eq!(refused, Some(Refusal::not_found("memory not found")));
    }

    #[test]
    fn given_a_batch_when_created_then_one_event_each_in_order_at_one_time() {
        let given = Given::with(&[tenant(TENANT, Plan::Pro, 0.0)]).expect("given");
        let ids = Counter::new();
        let ctx = given.at(NOON, &ids);
        let vectors = vec![unit(0, 0.0), unit(1, 0.0)];
        let d = create_batch(
            &ctx,
            TENANT,
            vec![new("a", false), new("b", false)],
            MODEL,
            &vectors,
        )
        .expect("decided");
        let created: Vec<(Uuid, String, i64, Vec<u8>)> =
            opened(&d.events, &*given.projections.keys)
                .iter()
                .map(|e| match e {
                    Event::MemoryCreated(c) => (
                        c.memory_id,
                        c.content.clone(),
                        c.created_at,
                        c.vector.clone(),
                    ),
                    other => panic!("{other:?}"),
                })
                .collect();
        assert_eq!(
            created,
            vec![
                (
                    Uuid::from_u128(1),
                    "a".into(),
                    NOON,
                    vector_to_bytes(&vectors[0])
                ),
                (
                    Uuid::from_u128(2),
                    "b".into(),
                    NOON,
                    vector_to_bytes(&vectors[1])
                ),
            ]
        );
        assert_eq!(
            d.audit.detail.memory_query,
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(d.answer.memories.len(), 2);
        // A vector short is an internal failure, never a memory without one.
        let short = create_batch(&ctx, TENANT, vec![new("a", false)], MODEL, &[]);
        assert!(matches!(short, Err(Refusal::Internal(_))));
    }
}
