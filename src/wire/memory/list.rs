//! Listing memories: `GET /v1/memories` and `POST /v1/memories/query`, and their page.

use auditmem_projections::memories::filter::Filter;
use auditmem_projections::MemoryType;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::answer::Memory;
use super::fields::{scope_id, Filters, IncludeSuperseded};
use crate::wire::envelope::Payload;
use crate::wire::field::{optional, Field, Invalid};
use crate::wire::filter::parse_filter;
use crate::wire::query::{self, Paging};
use crate::wire::{unknown_field_named, Body, Params, Refusal};

/// The memory list's page size: default 20, at most 100 (larger is clamped).
pub const DEFAULT_PAGE_SIZE: usize = 20;

/// `POST /v1/memories/query`: the tenant's memories a filter matches, newest first, paged as
/// `GET /v1/memories` is.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryQueryRequest {
    #[schema(value_type = Option<Object>)]
    pub filters: Option<Field<Filters>>,
    #[schema(value_type = Option<MemoryType>)]
    pub memory_type: Option<Field<MemoryType>>,
    /// Default false: memories another superseded are left out.
    #[schema(value_type = Option<bool>)]
    pub include_superseded: Option<Field<IncludeSuperseded>>,
    /// Default 1.
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub page: Option<Value>,
    /// Default 20, above 100 clamped.
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub page_size: Option<Value>,
}

/// A memory query, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryQuerying {
    pub paging: Paging,
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
    pub include_superseded: bool,
}

/// A page number given in a body: a JSON number, or a string as in a query.
fn body_number(v: Option<Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    }
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
        let paging = Paging::check(
            body_number(self.page),
            body_number(self.page_size),
            DEFAULT_PAGE_SIZE,
        )?;
        Ok(MemoryQuerying {
            paging,
            memory_type,
            filter,
            include_superseded,
        })
    }
}

/// The query of `GET /v1/memories`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoryListQuery {
    /// rule, fact or context
    #[param(value_type = Option<MemoryType>)]
    memory_type: Option<String>,
    /// default 1
    #[param(value_type = Option<u64>, minimum = 1)]
    page: Option<String>,
    /// default 20, above 100 clamped
    #[param(value_type = Option<u64>, minimum = 1)]
    page_size: Option<String>,
    /// only the memories of this end user
    user_id: Option<String>,
    /// only the memories of this agent
    agent_id: Option<String>,
    /// only the memories of this session
    session_id: Option<String>,
}

/// A memory list, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryListing {
    pub paging: Paging,
    pub memory_type: Option<MemoryType>,
    /// The scopes asked for, as a filter.
    pub filter: Option<Filter>,
}

impl Params for MemoryListQuery {
    type Checked = MemoryListing;

    fn check(self) -> Result<MemoryListing, Invalid> {
        let paging = Paging::check(self.page, self.page_size, DEFAULT_PAGE_SIZE)?;
        let memory_type = query::given(self.memory_type.map(|t| t.trim().to_string()))
            .map(|t| t.parse::<MemoryType>().map_err(Invalid))
            .transpose()?;
        let mut scopes = serde_json::Map::new();
        for (name, v) in [
            ("user_id", self.user_id),
            ("agent_id", self.agent_id),
            ("session_id", self.session_id),
        ] {
            if let Some(v) = v {
                scopes.insert(
                    name.into(),
                    Value::String(scope_id(name, Value::String(v))?),
                );
            }
        }
        let filter = (!scopes.is_empty())
            .then(|| parse_filter(&Value::Object(scopes)))
            .transpose()?;
        Ok(MemoryListing {
            paging,
            memory_type,
            filter,
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
}

impl Payload for MemoryPage {}
