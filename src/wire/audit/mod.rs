//! The audit log's shapes: the entry as lists, details and exports show it, the list's query
//! and page, and the gateway's ingestion body; [`bounds`], the bounds on what callers put in an
//! entry.

pub mod bounds;
pub mod entry;
pub mod ingest;
pub mod list;
pub mod stream;

pub use entry::*;
pub use ingest::*;
pub use list::*;

use auditmem_projections::seal::Subject;
use serde_json::Value;
use uuid::Uuid;

/// The scope subjects `query` (a URL query) and `body` (a JSON object's top level and its
/// `filters`) name, of
/// `tenant`: one per `user_id`, `agent_id` and `session_id` given as a string not blank.
pub fn scope_of(tenant: Uuid, query: Option<&str>, body: Option<&Value>) -> Vec<Subject> {
    let mut named: Vec<(String, String)> = query
        .and_then(|q| {
            let uri = format!("/?{q}").parse::<axum::http::Uri>().ok()?;
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
                .ok()
                .map(|q| q.0)
        })
        .unwrap_or_default();
    // A write names its scope at the top level, a search or a query in its `filters`.
    let filters = body.and_then(|b| b.get("filters"));
    for m in [body, filters].into_iter().flatten() {
        let Value::Object(m) = m else { continue };
        for k in ["user_id", "agent_id", "session_id"] {
            if let Some(Value::String(v)) = m.get(k) {
                named.push((k.to_string(), v.clone()));
            }
        }
    }
    // Trimmed as the memory routes store scope ids, so both name one subject.
    let mut subjects: Vec<Subject> = named
        .into_iter()
        .map(|(k, v)| (k, v.trim().to_string()))
        .filter(|(_, v)| !v.is_empty())
        .filter_map(|(k, v)| match k.as_str() {
            "user_id" => Some(Subject::User(tenant, v)),
            "agent_id" => Some(Subject::Agent(tenant, v)),
            "session_id" => Some(Subject::Session(tenant, v)),
            _ => None,
        })
        .collect();
    subjects.sort();
    subjects.dedup();
    subjects
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{scope_of, Subject};
    use auditmem_projections::audit_index::AuditRef;
    use auditmem_projections::{AuditEntry, Tokens};
    use serde_json::json;
    use uuid::Uuid;

    /// An entry with every kind of cell (text needing CSV quoting, nulls, nested objects,
    /// small floats) and its ref; shared with the export rows' tests.
    pub(crate) fn sample() -> (AuditEntry, AuditRef) {
        let entry = AuditEntry {
            id: Uuid::now_v7(),
            action: "gateway.chat".into(),
            model_id: Some("m, \"quoted\"".into()),
            project_id: None,
            gateway_id: Some("g\nline".into()),
            ip_address: Some("10.0.0.1".into()),
            user_agent: None,
            http_status: 429,
            is_success: false,
            is_cache_hit: true,
            error_code: Some(4290),
            error_msg: Some("slow down".into()),
            duration: Some(100.0),
            credits_consumed: 0.25,
            balance_consumed_usd: 1e-7,
            tokens: Some(Tokens {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
            }),
            metadata: Some(json!({"b": [1, 2.5], "a": null})),
            created_at: 1_700_000_000_123_000,
            detail_hash: Some([4; 32]),
        };
        let r = AuditRef {
            id: entry.id,
            seq: 7,
            tenant_id: Uuid::now_v7(),
            created_at: entry.created_at,
            action_key: 1,
            chain_index: 3,
            hash: [7; 32],
            prev_hash: [9; 32],
        };
        (entry, r)
    }

    #[test]
    fn a_request_names_its_scope_in_its_query_its_body_or_its_filters() {
        let t = Uuid::nil();
        let user = |u: &str| Subject::User(t, u.into());
        assert_eq!(scope_of(t, None, None), vec![]);
        assert_eq!(
            scope_of(
                t,
                Some("user_id=%20alice%20&agent_id=&page=2"),
                Some(&json!({"user_id": "alice", "session_id": "s-1", "content": "x"}))
            ),
            vec![user("alice"), Subject::Session(t, "s-1".into())]
        );
        assert_eq!(
            scope_of(
                t,
                None,
                Some(&json!({"query": "q", "filters": {"user_id": "bob", "agent_id": "bot"}}))
            ),
            vec![user("bob"), Subject::Agent(t, "bot".into())]
        );
        // Blank or non-string ids name no one; a body that is no object names no one.
        assert_eq!(
            scope_of(t, None, Some(&json!({"user_id": "  ", "agent_id": 7}))),
            vec![]
        );
        assert_eq!(scope_of(t, None, Some(&json!(["user_id"]))), vec![]);
    }
}
