//! The query strings of the transparency log's routes (`crate::api::transparency`).

use serde::Deserialize;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};

use super::field::{optional, required, Check, Field, Invalid};
use super::memory::fields::int64;
use super::Params;
use crate::tlog::proof::{ConsistencyProof, InclusionProof};

impl super::envelope::Payload for InclusionProof {}
impl super::envelope::Payload for ConsistencyProof {}

/// The smallest tree an entry is proven in: the tree of its own record, one leaf at least.
pub const MIN_PROVEN_SIZE: u64 = 1;

/// A tree size, `$field`: an integer of at least `$min`.
macro_rules! size_field {
    ($name:ident, $field:literal, $min:expr, $what:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(pub u64);

        impl Check for $name {
            type Raw = String;

            fn check(raw: String) -> Result<Self, Invalid> {
                raw.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= $min)
                    .map($name)
                    .ok_or_else(|| Invalid::new(concat!($field, " must be ", $what)))
            }
        }

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                int64().minimum(Some($min)).into()
            }
        }

        impl ToSchema for $name {}
    };
}

size_field!(
    ProvenSize,
    "tree_size",
    MIN_PROVEN_SIZE,
    "a tree size of at least 1 (an integer)"
);
size_field!(FromSize, "from", u64::MIN, "a tree size (an integer >= 0)");
size_field!(ToSize, "to", u64::MIN, "a tree size (an integer >= 0)");

/// `GET /v1/audit/logs/{audit_id}/proof`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProofQuery {
    /// The tree size to prove inclusion in (default: the latest signed checkpoint's, signed
    /// now when the entry is newer than it); at least the entry's seq, at most the tree's size.
    #[param(inline)]
    tree_size: Option<Field<ProvenSize>>,
}

impl Params for ProofQuery {
    type Checked = Option<u64>;

    fn check(self) -> Result<Option<u64>, Invalid> {
        Ok(optional(self.tree_size)?.map(|s| s.0))
    }
}

/// `GET /v1/audit/consistency`, `GET /admin/v1/log/consistency`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyQuery {
    /// The older tree size (required; 0 is the empty tree).
    #[param(inline, required = true)]
    from: Option<Field<FromSize>>,
    /// The newer tree size (default: the latest signed checkpoint's).
    #[param(inline)]
    to: Option<Field<ToSize>>,
}

impl Params for ConsistencyQuery {
    type Checked = (u64, Option<u64>);

    fn check(self) -> Result<(u64, Option<u64>), Invalid> {
        let from = required(self.from, "from is required")?.0;
        let to = optional(self.to)?.map(|s| s.0);
        if let Some(to) = to {
            if from > to {
                return Err(Invalid::new(format!(
                    "from ({from}) must not be larger than to ({to})"
                )));
            }
        }
        Ok((from, to))
    }
}
