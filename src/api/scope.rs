//! Scope binding: the one end user (and optionally agent and session) a caller is confined to.
//!
//! A caller is bound by its key (`KeyIssued::scope`, set when the operator issues it) and, on
//! MCP, by the connection (the host's `X-Auditmem-User-Id`, `-Agent-Id`, `-Session-Id`
//! headers: `crate::mcp`). The gate merges the two into [`Caller::scope`]: a connection may
//! narrow a key's scope, never leave it (a different id is 403). Nothing in a request body or
//! a tool's arguments widens it:
//!
//! - writes: a scope id left out is the bound one; a different one is refused (403, 4030);
//! - lists, queries, searches, deletes by filter: the request's own filter is AND-ed with the
//!   bound ids, so naming another user's id finds nothing;
//! - reads, changes and deletes by id: a memory outside the scope is 404, as a missing one;
//! - routes that reach beyond one scope (the audit log, exports, erasures, batch updates) are
//!   refused to a bound caller (403, 4030).
//!
//! The handlers call these rules; the gate refuses the routes.

use auditmem_projections::memories::filter::{Filter, FilterField, FilterOp, Operand};
use auditmem_projections::memories::Extra;
use auditmem_projections::{KeyScope, MemoryExtra};
use serde_json::Value;

use super::error::ApiError;
use super::gate::Caller;

/// The actions a bound caller may take: those about memories it can confine to its scope.
const SCOPED_ACTIONS: &[&str] = &[
    "memory.write",
    "memory.list",
    "memory.query",
    "memory.batch_create",
    "memory.batch_delete",
    "memory.read",
    "memory.update",
    "memory.delete",
    "memory.history",
    "memory.search",
    "memory.extract",
];

/// Whether a caller bound to a scope may call the route of `action`.
pub fn allows(action: &str) -> bool {
    SCOPED_ACTIONS.contains(&action)
}

/// The refusal of a route a bound caller may not call.
pub fn refused_route(scope: &KeyScope) -> ApiError {
    ApiError::forbidden(format!(
        "this caller is bound to user_id '{}'; this route reaches beyond one scope",
        scope.user_id
    ))
}

/// The scope of a key and a connection together: the connection may add an agent or a
/// session, or repeat the key's ids; any id that differs from the key's is refused.
pub fn merge(
    key: Option<&KeyScope>,
    connection: Option<&KeyScope>,
) -> Result<Option<KeyScope>, ApiError> {
    let (key, conn) = match (key, connection) {
        (None, c) => return Ok(c.cloned()),
        (k, None) => return Ok(k.cloned()),
        (Some(k), Some(c)) => (k, c),
    };
    let pick = |name: &str, k: Option<&String>, c: Option<&String>| match (k, c) {
        (Some(k), Some(c)) if k != c => Err(ApiError::forbidden(format!(
            "this API key is restricted to {name} '{k}'; the connection is bound to '{c}'"
        ))),
        (Some(k), _) => Ok(Some(k.clone())),
        (None, c) => Ok(c.cloned()),
    };
    Ok(Some(KeyScope {
        user_id: pick("user_id", Some(&key.user_id), Some(&conn.user_id))?.unwrap_or_default(),
        agent_id: pick("agent_id", key.agent_id.as_ref(), conn.agent_id.as_ref())?,
        session_id: pick(
            "session_id",
            key.session_id.as_ref(),
            conn.session_id.as_ref(),
        )?,
    }))
}

fn ids(scope: &KeyScope) -> [(&'static str, FilterField, Option<&String>); 3] {
    [
        ("user_id", FilterField::UserId, Some(&scope.user_id)),
        ("agent_id", FilterField::AgentId, scope.agent_id.as_ref()),
        (
            "session_id",
            FilterField::SessionId,
            scope.session_id.as_ref(),
        ),
    ]
}

impl Caller {
    /// `filter` confined to the caller's scope.
    pub fn narrow(&self, filter: Option<Filter>) -> Option<Filter> {
        let Some(scope) = &self.scope else {
            return filter;
        };
        let mut parts: Vec<Filter> = ids(scope)
            .into_iter()
            .filter_map(|(_, field, id)| {
                id.map(|id| Filter::Cond {
                    field,
                    op: FilterOp::Eq,
                    operand: Operand::One(Value::String(id.clone())),
                })
            })
            .collect();
        parts.extend(filter);
        Some(Filter::And(parts))
    }

    /// The scope ids of a memory to write: the bound ones filled in, a different one refused.
    pub fn confine(&self, extra: &mut MemoryExtra) -> Result<(), ApiError> {
        let Some(scope) = &self.scope else {
            return Ok(());
        };
        for (name, _, bound) in ids(scope) {
            let Some(bound) = bound else { continue };
            let given = match name {
                "user_id" => &mut extra.user_id,
                "agent_id" => &mut extra.agent_id,
                _ => &mut extra.session_id,
            };
            match given {
                Some(g) if g != bound => {
                    return Err(ApiError::forbidden(format!(
                        "this caller is bound to {name} '{bound}'; a memory of {name} '{g}' is outside it"
                    )))
                }
                _ => *given = Some(bound.clone()),
            }
        }
        Ok(())
    }

    /// Whether a memory with these scope ids is within the caller's scope.
    pub fn sees(&self, extra: Option<&Extra>) -> bool {
        let Some(scope) = &self.scope else {
            return true;
        };
        ids(scope).into_iter().all(|(name, _, bound)| {
            let Some(bound) = bound else { return true };
            let has = extra.and_then(|e| match name {
                "user_id" => e.user_id.as_ref(),
                "agent_id" => e.agent_id.as_ref(),
                _ => e.session_id.as_ref(),
            });
            has == Some(bound)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(user: &str, agent: Option<&str>) -> KeyScope {
        KeyScope {
            user_id: user.into(),
            agent_id: agent.map(Into::into),
            session_id: None,
        }
    }

    #[test]
    fn a_connection_narrows_a_key_scope_and_never_leaves_it() {
        let key = scope("alice", None);
        assert_eq!(
            merge(Some(&key), Some(&scope("alice", Some("bot")))).ok(),
            Some(Some(scope("alice", Some("bot"))))
        );
        let refused = merge(Some(&key), Some(&scope("bob", None)))
            .err()
            .map(|e| e.message);
        assert_eq!(
            refused.as_deref(),
            Some("this API key is restricted to user_id 'alice'; the connection is bound to 'bob'")
        );
        assert_eq!(merge(None, None).ok(), Some(None));
        assert_eq!(merge(None, Some(&key)).ok(), Some(Some(key.clone())));
    }
}
