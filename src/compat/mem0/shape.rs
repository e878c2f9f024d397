//! mem0's shapes and ours: its v2 filters as our filters, its scope names as ours, and our
//! memories, search results and histories as mem0's client returns them to a script.
//!
//! Pure functions of JSON: no call, no state. A field of mem0's that has no counterpart here
//! is refused with 400 naming it, never dropped in silence (docs/COMPAT.md lists them).

use serde_json::{json, Map, Value};

use super::Refused;

/// mem0's scope fields and ours: `run_id` is our `session_id`.
pub const SCOPES: [(&str, &str); 3] = [
    ("user_id", "user_id"),
    ("agent_id", "agent_id"),
    ("run_id", "session_id"),
];

/// A mem0 v2 filter as ours (docs/API.md, "Scopes, metadata and filters"): `AND`, `OR`,
/// `NOT`, the scope ids (`run_id` as `session_id`), `created_at`, `updated_at` and
/// `metadata: {key: value}` (each key as `metadata.<key>`); operators as ours, `icontains` as
/// `contains`. Anything else (`app_id`, `categories`, `keywords`, the `*` wildcard) is refused.
/// Our filter parser checks the rest and names the path of what it refuses.
pub fn filters(v: &Value, path: &str) -> Result<Value, Refused> {
    let Value::Object(m) = v else {
        return Err(Refused::bad_request(format!("{path} must be an object")));
    };
    let mut out = Map::new();
    for (key, val) in m {
        let here = format!("{path}.{key}");
        match key.as_str() {
            "AND" | "OR" => {
                let Value::Array(parts) = val else {
                    return Err(Refused::bad_request(format!("{here} must be an array")));
                };
                let parts = parts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| filters(p, &format!("{here}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?;
                out.insert(key.clone(), Value::Array(parts));
            }
            "NOT" => {
                let not = match val {
                    Value::Array(parts) => Value::Array(
                        parts
                            .iter()
                            .enumerate()
                            .map(|(i, p)| filters(p, &format!("{here}[{i}]")))
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                    other => filters(other, &here)?,
                };
                out.insert(key.clone(), not);
            }
            "metadata" => {
                let Value::Object(meta) = val else {
                    return Err(Refused::bad_request(format!(
                        "{here} must be an object of metadata keys and values"
                    )));
                };
                for (k, v) in meta {
                    out.insert(
                        format!("metadata.{k}"),
                        condition(v, &format!("{here}.{k}"))?,
                    );
                }
            }
            "created_at" | "updated_at" => {
                out.insert(key.clone(), condition(val, &here)?);
            }
            other => match SCOPES.iter().find(|(theirs, _)| *theirs == other) {
                Some((_, ours)) => {
                    out.insert((*ours).to_string(), condition(val, &here)?);
                }
                None => return Err(Refused::unsupported(&format!("the filter field {here}"))),
            },
        }
    }
    Ok(Value::Object(out))
}

/// A field's condition: a value or an object of operators.
fn condition(v: &Value, path: &str) -> Result<Value, Refused> {
    match v {
        Value::String(s) if s == "*" => {
            Err(Refused::unsupported(&format!("the wildcard '*' ({path})")))
        }
        Value::Object(ops) => {
            let mut out = Map::new();
            for (op, operand) in ops {
                let op = match op.as_str() {
                    "icontains" => "contains",
                    other => other,
                };
                out.insert(op.to_string(), operand.clone());
            }
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

/// The scope of an add: mem0's ids at the top level of the body or in its `filters` (the
/// client's typed options put them there), as ours. The same id given in both places twice
/// with different values is refused.
pub fn add_scope(body: &Map<String, Value>) -> Result<Map<String, Value>, Refused> {
    let in_filters = match body.get("filters") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(f)) => f.clone(),
        Some(_) => return Err(Refused::bad_request("filters must be an object")),
    };
    if let Some(k) = in_filters
        .keys()
        .find(|k| !SCOPES.iter().any(|(theirs, _)| theirs == k))
    {
        return Err(Refused::unsupported(&format!("the add filter {k}")));
    }
    let mut out = Map::new();
    for (theirs, ours) in SCOPES {
        let top = body.get(theirs).filter(|v| !v.is_null());
        let nested = in_filters.get(theirs).filter(|v| !v.is_null());
        let id = match (top, nested) {
            (Some(a), Some(b)) if a != b => {
                return Err(Refused::bad_request(format!(
                    "{theirs} is given twice with different values"
                )))
            }
            (Some(a), _) | (None, Some(a)) => a.clone(),
            (None, None) => continue,
        };
        out.insert(ours.to_string(), id);
    }
    Ok(out)
}

/// mem0's `timestamp` of an add (whole Unix seconds), as our `occurred_at` (RFC 3339, UTC).
pub fn occurred_at(timestamp: Option<&Value>) -> Result<Option<String>, Refused> {
    let secs = match timestamp {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v.as_i64(),
    };
    secs.and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| Some(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
        .ok_or_else(|| Refused::bad_request("timestamp must be whole Unix seconds"))
}

/// An ISO 8601 date as mem0 gives `expiration_date` (`2026-12-31`), as our `expires_at`: the
/// end of that day in UTC. A full time is passed on as it is.
pub fn expires_at(v: &Value) -> Result<Value, Refused> {
    match v {
        Value::Null => Ok(Value::Null),
        Value::String(s) if s.len() == 10 => Ok(Value::String(format!("{s}T23:59:59Z"))),
        Value::String(s) => Ok(Value::String(s.clone())),
        _ => Err(Refused::bad_request(
            "expiration_date must be a date (YYYY-MM-DD) or null",
        )),
    }
}

/// Our memory as mem0's client returns it.
pub fn memory(m: &Value) -> Value {
    let field = |k: &str| m.get(k).cloned().unwrap_or(Value::Null);
    let expiration = m
        .get("expires_at")
        .and_then(Value::as_str)
        .map(|t| Value::String(t.chars().take(10).collect()))
        .unwrap_or(Value::Null);
    json!({
        "id": field("id"),
        "memory": field("content"),
        "user_id": field("user_id"),
        "agent_id": field("agent_id"),
        "app_id": null,
        "run_id": field("session_id"),
        "metadata": field("metadata"),
        "categories": [],
        "created_at": field("created_at"),
        "updated_at": field("updated_at"),
        "expiration_date": expiration,
    })
}

/// A search result as mem0's: the memory and its `score` (our cosine similarity).
pub fn search_result(r: &Value) -> Value {
    let mut out = memory(r);
    if let Value::Object(o) = &mut out {
        o.insert(
            "score".into(),
            r.get("score").cloned().unwrap_or(Value::Null),
        );
    }
    out
}

/// The memories of an add, as mem0's `results`: each memory written an `ADD`, each memory
/// one of them superseded a `DELETE` (its `memory` the text it had).
pub fn add_results(written: &[Value], superseded: &[(String, Value)]) -> Value {
    let mut results: Vec<Value> = written
        .iter()
        .map(|m| json!({"id": m.get("id"), "event": "ADD", "memory": m.get("content")}))
        .collect();
    results.extend(
        superseded
            .iter()
            .map(|(id, text)| json!({"id": id, "event": "DELETE", "memory": text})),
    );
    json!({ "results": results })
}

/// Our history (`{id, versions: [...]}`) as mem0's: a list of events, oldest first, each with
/// the memory's text before and after. `created` is `ADD`; `updated` is `UPDATE`;
/// `superseded`, `deleted`, `expired` and `erased` take the memory out of lists and searches
/// and are `DELETE`.
pub fn history(h: &Value) -> Value {
    let id = h.get("id").cloned().unwrap_or(Value::Null);
    let versions = h.get("versions").and_then(Value::as_array);
    let mut current = Value::Null;
    let mut user_id = Value::Null;
    let mut out = Vec::new();
    for v in versions.into_iter().flatten() {
        let change = v.get("change").and_then(Value::as_str).unwrap_or("");
        let old = current.clone();
        let event = match change {
            "created" => {
                current = v.get("content").cloned().unwrap_or(Value::Null);
                user_id = v.get("user_id").cloned().unwrap_or(Value::Null);
                "ADD"
            }
            "updated" => {
                if let Some(c) = v.get("content").filter(|c| !c.is_null()) {
                    current = c.clone();
                }
                "UPDATE"
            }
            _ => {
                current = Value::Null;
                "DELETE"
            }
        };
        let at = v.get("at").cloned().unwrap_or(Value::Null);
        out.push(json!({
            "id": v.get("audit_id"),
            "memory_id": id,
            "event": event,
            "old_memory": old,
            "new_memory": current,
            "user_id": user_id,
            "metadata": v.get("metadata"),
            "categories": [],
            "created_at": at,
            "updated_at": at,
        }));
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem0_filters_become_ours() {
        let theirs = json!({"AND": [
            {"user_id": "alice"},
            {"OR": [{"run_id": "s1"}, {"agent_id": {"in": ["a", "b"]}}]},
            {"metadata": {"topic": "food"}},
            {"created_at": {"gte": "2026-01-01"}},
            {"NOT": {"user_id": {"icontains": "bo"}}}
        ]});
        let ours = filters(&theirs, "filters").ok();
        assert_eq!(
            ours,
            Some(json!({"AND": [
                {"user_id": "alice"},
                {"OR": [{"session_id": "s1"}, {"agent_id": {"in": ["a", "b"]}}]},
                {"metadata.topic": "food"},
                {"created_at": {"gte": "2026-01-01"}},
                {"NOT": {"user_id": {"contains": "bo"}}}
            ]}))
        );
    }

    #[test]
    fn unmapped_filter_fields_are_refused_by_name() {
        let refused = |v: Value| filters(&v, "filters").err().map(|r| r.message);
        assert_eq!(
            refused(json!({"AND": [{"app_id": "x"}]})).as_deref(),
            Some("the filter field filters.AND[0].app_id is not supported by auditmem's mem0 compatibility API (docs/COMPAT.md)")
        );
        assert_eq!(
            refused(json!({"user_id": "*"})).as_deref(),
            Some("the wildcard '*' (filters.user_id) is not supported by auditmem's mem0 compatibility API (docs/COMPAT.md)")
        );
    }

    #[test]
    fn a_history_reads_as_mem0_events() {
        let ours = json!({"id": "m1", "deleted": true, "versions": [
            {"change": "created", "audit_id": "a1", "at": "t1", "content": "x", "user_id": "u"},
            {"change": "updated", "audit_id": "a2", "at": "t2", "content": "y"},
            {"change": "deleted", "audit_id": "a3", "at": "t3"}
        ]});
        let events: Vec<(Value, Value, Value)> = history(&ours)
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["event"].clone(),
                    e["old_memory"].clone(),
                    e["new_memory"].clone(),
                )
            })
            .collect();
        assert_eq!(
            events,
            vec![
                (json!("ADD"), Value::Null, json!("x")),
                (json!("UPDATE"), json!("x"), json!("y")),
                (json!("DELETE"), json!("y"), Value::Null),
            ]
        );
    }
}
