//! Listing memories: `GET /v1/memories` and `POST /v1/memories/query`, and their page.

use std::borrow::Cow;

use auditmem_projections::memories::filter::{Filter, FilterField, FilterOp, Operand};
use auditmem_projections::MemoryType;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::answer::Memory;
use super::as_of::{AsOf, AsOfShown};
use super::fields::{AgentId, Filters, IncludeSuperseded, SessionId, UserId};
use crate::wire::envelope::Payload;
use crate::wire::field::{optional, Check, Field, Invalid};
use crate::wire::filter::parse_filter;
use crate::wire::query::{self, Page, PageSize, Paging};
use crate::wire::time::parse_time;
use crate::wire::{unknown_field_named, Body, Params, Refusal};

/// The memory list's page size: default 20, at most 100 (larger is clamped).
pub const DEFAULT_PAGE_SIZE: usize = 20;

/// `POST /v1/memories/query`: the tenant's memories a filter matches, newest first, paged as
/// `GET /v1/memories` is.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryQueryRequest {
    #[schema(inline)]
    pub filters: Option<Field<Filters>>,
    #[schema(inline)]
    pub memory_type: Option<Field<MemoryType>>,
    /// Default false: memories another superseded are left out.
    #[schema(inline)]
    pub include_superseded: Option<Field<IncludeSuperseded>>,
    /// Default 1.
    #[schema(inline)]
    pub page: Option<Field<Page>>,
    /// Default 20, above 100 clamped.
    #[schema(inline)]
    pub page_size: Option<Field<PageSize>>,
    /// A log position or an RFC 3339 time: the answer as the store stood right after it
    /// (docs/API.md, "Reading the past").
    #[schema(inline)]
    pub as_of: Option<Field<AsOf>>,
}

/// A memory query, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryQuerying {
    pub paging: Paging,
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
    pub include_superseded: bool,
    pub as_of: Option<AsOf>,
}

impl Body for MemoryQueryRequest {
    type Checked = MemoryQuerying;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        Some(Ok(Self::default()))
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<MemoryQuerying, Invalid> {
        let filter = optional(self.filters)?.map(|f| f.0);
        let memory_type = optional(self.memory_type)?;
        let include_superseded = optional(self.include_superseded)?.is_some_and(|f| f.0);
        let paging = Paging::of(self.page, self.page_size, DEFAULT_PAGE_SIZE)?;
        let as_of = optional(self.as_of)?;
        Ok(MemoryQuerying {
            paging,
            memory_type,
            filter,
            include_superseded,
            as_of,
        })
    }
}

/// The query of `GET /v1/memories`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoryListQuery {
    /// rule, fact or context
    #[param(inline)]
    memory_type: Option<Field<ListedType>>,
    /// default 1
    #[param(inline)]
    page: Option<Field<Page>>,
    /// default 20, above 100 clamped
    #[param(inline)]
    page_size: Option<Field<PageSize>>,
    /// only the memories of this end user
    #[param(inline)]
    user_id: Option<Field<UserId>>,
    /// only the memories of this agent
    #[param(inline)]
    agent_id: Option<Field<AgentId>>,
    /// only the memories of this session
    #[param(inline)]
    session_id: Option<Field<SessionId>>,
    /// only the memories whose occurred_at is at or after this ISO 8601 time
    #[param(inline)]
    occurred_after: Option<Field<OccurredAfter>>,
    /// only the memories whose occurred_at is before this ISO 8601 time
    #[param(inline)]
    occurred_before: Option<Field<OccurredBefore>>,
    /// a log position, or an RFC 3339 time: the page as the store stood then
    #[param(inline)]
    as_of: Option<Field<AsOf>>,
}

/// A bound of the list's `occurred_at` range, in µs; its refusal names the parameter.
macro_rules! occurred_bound {
    ($name:ident, $field:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub i64);

        impl Check for $name {
            type Raw = String;

            fn check(raw: String) -> Result<Self, Invalid> {
                parse_time($field, &raw).map($name)
            }
        }

        /// A string: ISO 8601 in more forms than the `date-time` format names.
        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .into()
            }
        }

        impl ToSchema for $name {}
    };
}

occurred_bound!(OccurredAfter, "occurred_after");
occurred_bound!(OccurredBefore, "occurred_before");

/// The list's `memory_type`: a memory type, or nothing when left empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListedType(pub Option<MemoryType>);

impl Check for ListedType {
    type Raw = String;
    const BY_NAME: bool = true;

    fn check(raw: String) -> Result<Self, Invalid> {
        query::given(Some(raw.trim().to_string()))
            .map(|t| t.parse::<MemoryType>().map_err(Invalid))
            .transpose()
            .map(ListedType)
    }
}

/// The memory type's schema, by its name.
impl PartialSchema for ListedType {
    fn schema() -> RefOr<Schema> {
        MemoryType::schema()
    }
}

impl ToSchema for ListedType {
    fn name() -> Cow<'static, str> {
        MemoryType::name()
    }
}

/// A memory list, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryListing {
    pub paging: Paging,
    pub memory_type: Option<MemoryType>,
    /// The scopes asked for, as a filter.
    pub filter: Option<Filter>,
    pub as_of: Option<AsOf>,
}

impl Params for MemoryListQuery {
    type Checked = MemoryListing;

    fn check(self) -> Result<MemoryListing, Invalid> {
        let paging = Paging::of(self.page, self.page_size, DEFAULT_PAGE_SIZE)?;
        let memory_type = optional(self.memory_type)?.and_then(|t| t.0);
        let mut scopes = serde_json::Map::new();
        for (name, v) in [
            ("user_id", optional(self.user_id)?.map(|v| v.0)),
            ("agent_id", optional(self.agent_id)?.map(|v| v.0)),
            ("session_id", optional(self.session_id)?.map(|v| v.0)),
        ] {
            if let Some(v) = v {
                scopes.insert(name.into(), Value::String(v));
            }
        }
        let mut conds: Vec<Filter> = (!scopes.is_empty())
            .then(|| parse_filter(&Value::Object(scopes)))
            .transpose()?
            .into_iter()
            .collect();
        for (op, at) in [
            (FilterOp::Gte, optional(self.occurred_after)?.map(|t| t.0)),
            (FilterOp::Lt, optional(self.occurred_before)?.map(|t| t.0)),
        ] {
            if let Some(at) = at {
                conds.push(Filter::Cond {
                    field: FilterField::OccurredAt,
                    op,
                    operand: Operand::One(Value::from(at)),
                });
            }
        }
        let filter = match conds.len() {
            0 => None,
            1 => conds.pop(),
            _ => Some(Filter::And(conds)),
        };
        let as_of = optional(self.as_of)?;
        Ok(MemoryListing {
            paging,
            memory_type,
            filter,
            as_of,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryPage {
    pub memories: Vec<Memory>,
    #[schema(value_type = u64)]
    pub total: usize,
    #[schema(value_type = u64)]
    pub page: usize,
    #[schema(value_type = u64)]
    pub page_size: usize,
    /// A page `as_of`: the position it was answered as of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<AsOfShown>,
}

impl Payload for MemoryPage {}
