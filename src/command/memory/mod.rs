//! The memory store's commands, one file each: [`create`] (one or a batch), [`resolve`],
//! [`update`] (one or a batch), [`delete`] (one, by type, filtered), [`extract`], [`search`]
//! and the [`expiry`] sweep.
//!
//! Vectors come in with the commands (the handler embedded the texts, on the embedding
//! worker) and go out in the events, so replay never calls a model. What every command here
//! shares: the tenant's memory a path names, and the one way a new memory becomes an event.

pub mod create;
pub mod delete;
pub mod expiry;
pub mod extract;
pub mod resolve;
pub mod search;
pub mod update;

use auditmem_projections::event::memory_subjects;
use auditmem_projections::memories::filter::Filter;
use auditmem_projections::memories::{Extra, MemoryView};
use auditmem_projections::seal::Subject;
use auditmem_projections::{vector_to_bytes, Event, MemoryCreated, MemoryExtra, MemoryType};
use uuid::Uuid;

use super::{Context, Refusal};
use crate::wire::memory::Memory;

/// A text's vector and the model that made it, as the events carry them.
#[derive(Clone, Copy, Debug)]
pub struct Embedding<'a> {
    pub model: &'a str,
    pub vector: &'a [f32],
}

/// A memory id from a path; one that is no id is a memory that does not exist.
pub fn parse_id(id: &str) -> Result<Uuid, Refusal> {
    Uuid::parse_str(id.trim()).map_err(|_| not_found())
}

pub fn not_found() -> Refusal {
    Refusal::not_found("memory not found")
}

/// The tenant's live memory `id`; another tenant's is as missing as one that never existed.
pub fn owned(ctx: &Context<'_>, tenant: Uuid, id: &str) -> Result<MemoryView, Refusal> {
    let id = parse_id(id)?;
    ctx.projections
        .memories
        .get(&tenant, &id)?
        .ok_or_else(not_found)
}

/// A memory to create, from a request or from an extraction.
#[derive(Clone, Debug, PartialEq)]
pub struct Fresh {
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub extra: MemoryExtra,
}

/// A new memory's creation event, its personal fields sealed under the memory's subjects,
/// and the memory the answer shows: the one place either is built, for a create, a batch and
/// an extraction. A keyring that fails is an internal refusal.
pub fn new_memory(
    ctx: &Context<'_>,
    tenant: Uuid,
    id: Uuid,
    at: i64,
    fresh: Fresh,
    embedding: Embedding<'_>,
) -> Result<(Event, Memory), Refusal> {
    let Fresh {
        content,
        memory_type,
        importance,
        extra,
    } = fresh;
    let extra = extra.or_none();
    let created = MemoryCreated {
        memory_id: id,
        tenant_id: tenant,
        content: content.clone(),
        memory_type,
        importance,
        created_at: at,
        model: embedding.model.to_string(),
        vector: vector_to_bytes(embedding.vector),
        extra: extra.clone(),
        sealed: None,
    };
    let subjects = created.subjects();
    let event = Event::MemoryCreated(
        created
            .sealed_for(&*ctx.projections.keys, &subjects)
            .map_err(Refusal::from)?,
    );
    let memory = Memory::from(MemoryView {
        id,
        content,
        memory_type,
        importance,
        created_at: at,
        updated_at: at,
        extra: extra.and_then(|x| Extra::from(x).or_none()),
    });
    Ok((event, memory))
}

/// The subjects of a memory as the API shows it (see `memory_subjects`): the audit entry that
/// shows it is sealed under them too.
pub fn subjects_of(tenant: Uuid, m: &Memory) -> Vec<Subject> {
    memory_subjects(
        tenant,
        m.id,
        m.user_id.as_deref(),
        m.agent_id.as_deref(),
        m.session_id.as_deref(),
    )
}

/// [`subjects_of`] for a memory as the projection holds it.
pub fn view_subjects(tenant: Uuid, m: &MemoryView) -> Vec<Subject> {
    let x = m.extra.as_ref();
    memory_subjects(
        tenant,
        m.id,
        x.and_then(|x| x.user_id.as_deref()),
        x.and_then(|x| x.agent_id.as_deref()),
        x.and_then(|x| x.session_id.as_deref()),
    )
}

/// The subjects of every memory in `memories`, each once, in a stable order.
pub fn all_subjects<'m>(
    tenant: Uuid,
    memories: impl IntoIterator<Item = &'m Memory>,
) -> Vec<Subject> {
    let mut all: Vec<Subject> = memories
        .into_iter()
        .flat_map(|m| subjects_of(tenant, m))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// The memories a new one's duplicates and contradictions are looked for among: those of the
/// same end user and agent when it names them (another user's identical fact is no duplicate),
/// else all the tenant's.
pub fn scope_filter(extra: &MemoryExtra) -> Option<Filter> {
    use auditmem_projections::memories::filter::{FilterField, FilterOp, Operand};
    let conds: Vec<Filter> = [
        (FilterField::UserId, &extra.user_id),
        (FilterField::AgentId, &extra.agent_id),
    ]
    .into_iter()
    .filter_map(|(field, v)| {
        v.as_ref().map(|v| Filter::Cond {
            field,
            op: FilterOp::Eq,
            operand: Operand::One(serde_json::Value::String(v.clone())),
        })
    })
    .collect();
    (!conds.is_empty()).then_some(Filter::And(conds))
}

#[cfg(test)]
pub(crate) mod cases {
    //! What the memory commands' tests share: a tenant, memories as events, unit vectors.

    use auditmem_projections::{
        vector_to_bytes, Event, MemoryCreated, MemoryExtra, MemoryType, Plan, TenantCreated,
    };
    use uuid::Uuid;

    use crate::command::given::NOON;

    pub const MODEL: &str = "test-model";
    pub const TENANT: Uuid = Uuid::from_u128(0xA);
    pub const OTHER: Uuid = Uuid::from_u128(0xB);

    /// A unit vector of 4 dimensions along `axis`, tilted towards the next axis by `tilt`.
    pub fn unit(axis: usize, tilt: f32) -> Vec<f32> {
        let mut v = [0.0; 4];
        v[axis % 4] = 1.0;
        v[(axis + 1) % 4] = tilt;
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    pub fn tenant(id: Uuid, plan: Plan, credits: f64) -> Event {
        Event::TenantCreated(TenantCreated {
            tenant_id: id,
            name: format!("t{id}"),
            plan,
            subscription_active: true,
            credits,
            created_at: NOON - 1_000,
        })
    }

    /// `events` with every sealed memory event opened (its personal fields in the clear, no
    /// seal): what a test compares with the events it expects.
    pub fn opened(events: &[Event], keys: &dyn auditmem_projections::seal::Keyring) -> Vec<Event> {
        events
            .iter()
            .map(|e| match e {
                Event::MemoryCreated(c) => Event::MemoryCreated(
                    c.opened(keys)
                        .expect("keyring")
                        .expect("not erased")
                        .into_owned(),
                ),
                Event::MemoryUpdated(u) => Event::MemoryUpdated(
                    u.opened(keys)
                        .expect("keyring")
                        .expect("not erased")
                        .into_owned(),
                ),
                other => other.clone(),
            })
            .collect()
    }

    /// A memory of `tenant` created at `at`.
    pub fn memory(
        tenant: Uuid,
        id: Uuid,
        content: &str,
        memory_type: MemoryType,
        vector: &[f32],
        extra: MemoryExtra,
        at: i64,
    ) -> Event {
        Event::MemoryCreated(MemoryCreated {
            memory_id: id,
            tenant_id: tenant,
            content: content.into(),
            memory_type,
            importance: 0.5,
            created_at: at,
            model: MODEL.into(),
            vector: vector_to_bytes(vector),
            extra: extra.or_none(),
            sealed: None,
        })
    }
}
