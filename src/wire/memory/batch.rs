//! Batches: creating and updating up to [`MAX_BATCH`] memories at once, and deleting by type or
//! filter.

use auditmem_projections::memories::filter::Filter;
use auditmem_projections::MemoryType;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ArrayBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::answer::Memory;
use super::fields::{typed, Content, ExpiresAt, Filters, Importance, Metadata, OccurredAt};
use super::write::{
    memory_type_required, MemoryCreateRequest, MemoryUpdate, MemoryUpdateRequest, NewMemory,
};
use crate::wire::envelope::Payload;
use crate::wire::field::{optional, present, required, Check, Field, Invalid};
use crate::wire::{empty_refused, known, unknown_field_named, Body, Refusal};

/// Memories one batch call creates or updates, at least and at most.
pub const MIN_BATCH: usize = 1;
pub const MAX_BATCH: usize = 100;
/// Invalid items a batch's 400 names at most (the first ones, by index).
const MAX_NAMED_ITEMS: usize = 10;

/// `POST /v1/memories/batch`: 1 to 100 memories, each as `POST /v1/memories` takes it; all are
/// created or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatchCreateRequest {
    /// 1 to 100 items, each a `MemoryCreateRequest`.
    #[schema(inline, required = true, nullable = false)]
    pub memories: Option<Field<NewMemories>>,
}

/// `PATCH /v1/memories/batch`: 1 to 100 updates, each the memory's `id` and the fields
/// `PATCH /v1/memories/{id}` takes; all are applied or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatchUpdateRequest {
    /// 1 to 100 items, each a `MemoryBatchUpdateItem`.
    #[schema(inline, required = true, nullable = false)]
    pub memories: Option<Field<BatchUpdates>>,
}

/// One update of a batch: which memory, and at least one of content and importance.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryBatchUpdateItem {
    #[schema(inline, required = true, nullable = false)]
    pub id: Option<Field<MemoryId>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    pub content: Option<Field<Content>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(inline, nullable = false)]
    pub importance: Option<Field<Importance>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(inline)]
    pub metadata: Option<Field<Metadata>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(inline)]
    pub expires_at: Option<Field<ExpiresAt>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(inline)]
    pub occurred_at: Option<Field<OccurredAt>>,
}

/// A batch update's item whose shape is checked; its values are checked once its memory is
/// found, as a single update's are.
#[derive(Debug)]
pub struct BatchUpdate {
    pub id: Uuid,
    pub update: MemoryUpdate,
}

/// The memories of a batch create, checked.
#[derive(Debug)]
pub struct NewMemories(pub Vec<NewMemory>);

/// The updates of a batch update, their shapes checked.
#[derive(Debug)]
pub struct BatchUpdates(pub Vec<BatchUpdate>);

impl Check for NewMemories {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        batch_items::<MemoryCreateRequest>(raw).map(NewMemories)
    }
}

impl PartialSchema for NewMemories {
    fn schema() -> RefOr<Schema> {
        batch_schema::<MemoryCreateRequest>()
    }
}

impl ToSchema for NewMemories {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        item_schemas::<MemoryCreateRequest>(schemas)
    }
}

impl Check for BatchUpdates {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        batch_items::<MemoryBatchUpdateItem>(raw).map(BatchUpdates)
    }
}

impl PartialSchema for BatchUpdates {
    fn schema() -> RefOr<Schema> {
        batch_schema::<MemoryBatchUpdateItem>()
    }
}

impl ToSchema for BatchUpdates {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        item_schemas::<MemoryBatchUpdateItem>(schemas)
    }
}

/// A batch's `memories`: [`MIN_BATCH`] to [`MAX_BATCH`] items, each a `T`.
fn batch_schema<T: ToSchema>() -> RefOr<Schema> {
    ArrayBuilder::new()
        .items(Ref::from_schema_name(T::name()))
        .min_items(Some(MIN_BATCH))
        .max_items(Some(MAX_BATCH))
        .into()
}

/// The item's schema, which [`batch_schema`] refers to, with those it refers to.
fn item_schemas<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

/// The memory a batch update's item names: a memory id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryId(pub Uuid);

impl Check for MemoryId {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::String(s) => Uuid::parse_str(s.trim())
                .map(MemoryId)
                .map_err(|_| Invalid(format!("id '{s}' is not a memory id"))),
            _ => Err(Invalid::new("id must be a string")),
        }
    }
}

impl PartialSchema for MemoryId {
    fn schema() -> RefOr<Schema> {
        typed(Type::String).into()
    }
}

impl ToSchema for MemoryId {}

/// The items of a batch body: each read as `T` and checked, every refusal named by its index
/// (`memories[3]: content is required`), the first [`MAX_NAMED_ITEMS`] of them in one message.
fn batch_items<T: Body>(memories: Value) -> Result<Vec<T::Checked>, Invalid> {
    let Value::Array(items) = memories else {
        return Err(Invalid::new("memories must be an array"));
    };
    if !(MIN_BATCH..=MAX_BATCH).contains(&items.len()) {
        return Err(Invalid(format!(
            "memories holds {} items; a batch holds {MIN_BATCH} to {MAX_BATCH}",
            items.len()
        )));
    }
    let mut checked = Vec::with_capacity(items.len());
    let mut refused = Vec::new();
    let mut refusals = 0usize;
    for (i, item) in items.into_iter().enumerate() {
        let result = if item.is_object() {
            known::read::<T, _>(item)
                .map_err(T::refused)
                .and_then(T::check)
        } else {
            Err(Invalid::new("must be an object"))
        };
        match result {
            Ok(c) => checked.push(c),
            Err(Invalid(why)) => {
                refusals += 1;
                if refused.len() < MAX_NAMED_ITEMS {
                    refused.push(format!("memories[{i}]: {why}"));
                }
            }
        }
    }
    if refusals > 0 {
        let mut message = refused.join("; ");
        if refusals > refused.len() {
            message.push_str(&format!(" (and {} more)", refusals - refused.len()));
        }
        return Err(Invalid(format!("{message}; nothing was stored")));
    }
    Ok(checked)
}

impl Body for MemoryBatchCreateRequest {
    type Checked = Vec<NewMemory>;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Vec<NewMemory>, Invalid> {
        let items = required(self.memories, "memories is required")?.0;
        if let Some(i) = items.iter().position(|m| m.resolve) {
            return Err(Invalid(format!(
                "memories[{i}]: resolve is taken by POST /v1/memories and extraction, not by a batch; nothing was stored"
            )));
        }
        Ok(items)
    }
}

impl Body for MemoryBatchUpdateItem {
    type Checked = BatchUpdate;

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<BatchUpdate, Invalid> {
        let id = required(self.id, "id is required")?.0;
        let update = MemoryUpdateRequest {
            content: self.content,
            importance: self.importance,
            metadata: self.metadata,
            expires_at: self.expires_at,
            occurred_at: self.occurred_at,
        };
        Ok(BatchUpdate {
            id,
            update: Body::check(update)?,
        })
    }
}

impl Body for MemoryBatchUpdateRequest {
    type Checked = Vec<BatchUpdate>;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Vec<BatchUpdate>, Invalid> {
        let updates = required(self.memories, "memories is required")?.0;
        let mut seen = std::collections::HashMap::with_capacity(updates.len());
        for (i, u) in updates.iter().enumerate() {
            if let Some(first) = seen.insert(u.id, i) {
                return Err(Invalid(format!(
                    "memories[{i}]: id {} is memories[{first}]'s too; a batch updates a memory once; nothing was stored",
                    u.id
                )));
            }
        }
        Ok(updates)
    }
}

/// What a batch created or updated, in the order asked.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryBatch {
    pub memories: Vec<Memory>,
}

impl Payload for MemoryBatch {}

/// `DELETE /v1/memories`: every memory of one type, or every memory a filter matches (both:
/// those of the type the filter matches). There is no "delete everything": an empty body, or
/// a filter without a condition, is refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchDeleteRequest {
    #[schema(inline)]
    pub memory_type: Option<Field<MemoryType>>,
    /// A filter (see `POST /v1/memories/query`); superseded memories it matches go too.
    #[schema(inline)]
    pub filters: Option<Field<Filters>>,
}

/// A batch delete, checked: at least one of the two.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchDelete {
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
}

impl Body for BatchDeleteRequest {
    type Checked = BatchDelete;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<BatchDelete, Invalid> {
        if self.filters.is_none() {
            return Ok(BatchDelete {
                memory_type: Some(memory_type_required(self.memory_type)?),
                filter: None,
            });
        }
        Ok(BatchDelete {
            memory_type: optional(self.memory_type)?,
            filter: optional(self.filters)?.map(|f| f.0),
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchDeleted {
    /// The type asked for (absent when only `filters` was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_type: Option<MemoryType>,
    #[schema(value_type = u64)]
    pub deleted: usize,
}

impl Payload for BatchDeleted {}
