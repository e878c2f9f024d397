//! The query strings of the transparency log's routes (`crate::api::transparency`).

use serde::Deserialize;
use utoipa::IntoParams;

use super::field::Invalid;
use super::Params;
use crate::tlog::proof::{ConsistencyProof, InclusionProof};

impl super::envelope::Payload for InclusionProof {}
impl super::envelope::Payload for ConsistencyProof {}

fn size(name: &str, value: Option<String>) -> Result<Option<u64>, Invalid> {
    value
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .map_err(|_| Invalid::new(format!("{name} must be a tree size (an integer >= 0)")))
        })
        .transpose()
}

/// `GET /v1/audit/logs/{audit_id}/proof`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProofQuery {
    /// The tree size to prove inclusion in (default: the latest signed checkpoint's, signed
    /// now when the entry is newer than it); at least the entry's seq, at most the tree's size.
    #[param(value_type = Option<u64>, minimum = 1)]
    tree_size: Option<String>,
}

impl Params for ProofQuery {
    type Checked = Option<u64>;

    fn check(self) -> Result<Option<u64>, Invalid> {
        size("tree_size", self.tree_size)
    }
}

/// `GET /v1/audit/consistency`, `GET /admin/v1/log/consistency`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyQuery {
    /// The older tree size (required; 0 is the empty tree).
    #[param(value_type = u64, minimum = 0)]
    from: Option<String>,
    /// The newer tree size (default: the latest signed checkpoint's).
    #[param(value_type = Option<u64>, minimum = 0)]
    to: Option<String>,
}

impl Params for ConsistencyQuery {
    type Checked = (u64, Option<u64>);

    fn check(self) -> Result<(u64, Option<u64>), Invalid> {
        let from = size("from", self.from)?.ok_or_else(|| Invalid::new("from is required"))?;
        let to = size("to", self.to)?;
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
