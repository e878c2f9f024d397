//! The audit log's shapes: the entry as lists, details and exports show it, the list's query
//! and page, and the gateway's ingestion body; [`bounds`], the bounds on what callers put in an
//! entry.

pub mod bounds;
pub mod entry;
pub mod ingest;
pub mod list;

pub use entry::*;
pub use ingest::*;
pub use list::*;

use auditmem_projections::seal::Subject;
use serde_json::Value;
use uuid::Uuid;

/// The scope subjects `query` (a URL query) and `body` (a JSON object's top level) name, of
/// `tenant`: one per `user_id`, `agent_id` and `session_id` given as a non-empty string.
pub fn scope_of(tenant: Uuid, query: Option<&str>, body: Option<&Value>) -> Vec<Subject> {
    let mut named: Vec<(String, String)> = query
        .and_then(|q| {
            let uri = format!("/?{q}").parse::<axum::http::Uri>().ok()?;
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
                .ok()
                .map(|q| q.0)
        })
        .unwrap_or_default();
    if let Some(Value::Object(m)) = body {
        for k in ["user_id", "agent_id", "session_id"] {
            if let Some(Value::String(v)) = m.get(k) {
                named.push((k.to_string(), v.clone()));
            }
        }
    }
    let mut subjects: Vec<Subject> = named
        .into_iter()
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
}
