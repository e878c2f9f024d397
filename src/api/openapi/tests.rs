//! The document's bounds are the checks' bounds: every bound the served document states on a
//! request body's field or a query parameter (a length, a range, a pattern, a set of values, a
//! count of items or fields, a required field, no other field) is tried at its edges through the
//! reading path a request takes (`api::extract::read` and `params`, then the checks the handler
//! runs after it). The value just inside must be taken; the one just outside must be refused
//! with a 400 whose message names the field. A bound changed on one side only fails here.

use std::collections::HashMap;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::extract::{params, read};
use crate::registry::ErrorCode;
use crate::wire::admin::{CreateKeyRequest, CreateTenantRequest, LogQuery, UpdateTenantRequest};
use crate::wire::audit::stream::AuditStreamQuery;
use crate::wire::audit::{AuditListQuery, IngestRequest};
use crate::wire::erasure::ErasureRequest;
use crate::wire::export::ExportRequest;
use crate::wire::memory::{
    AsOfQuery, BatchDeleteRequest, ExtractRequest, MemoryBatchCreateRequest,
    MemoryBatchUpdateRequest, MemoryCreateRequest, MemoryListQuery, MemoryQueryRequest,
    MemoryUpdateRequest, SearchRequest,
};
use crate::wire::transparency::{ConsistencyQuery, ProofQuery};

/// The keywords a probe tries; any other keyword that is not an annotation fails the test, so a
/// bound the document gains is never left untried.
const PROBED: [&str; 11] = [
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "enum",
    "minItems",
    "maxItems",
    "minProperties",
];
const ANNOTATIONS: [&str; 10] = [
    "type",
    "format",
    "description",
    "example",
    "examples",
    "title",
    "$ref",
    "oneOf",
    "items",
    "default",
];

/// A distance below every bound's granularity, for the numbers just past a real-valued bound.
const EPSILON: f64 = 1e-9;

/// The served document, as JSON.
fn document() -> Value {
    serde_json::from_str(&super::document()).expect("the document is JSON")
}

/// A place in a body: a key, or an index of an array.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// What is at `path` in `body`, if anything.
fn get<'v>(body: &'v Value, path: &[Step]) -> Option<&'v Value> {
    path.iter().try_fold(body, |v, step| match step {
        Step::Key(k) => v.get(k.as_str()),
        Step::Index(i) => v.get(*i),
    })
}

/// `body` with `value` at `path` (whose parent is there), or with `path` left out when `value`
/// is `None`.
fn with(body: &Value, path: &[Step], value: Option<Value>) -> Value {
    let mut body = body.clone();
    let Some((Step::Key(last), parent)) = path.split_last() else {
        panic!("a field's path ends with its name: {path:?}");
    };
    let object = parent
        .iter()
        .try_fold(&mut body, |v, step| match step {
            Step::Key(k) => v.get_mut(k.as_str()),
            Step::Index(i) => v.get_mut(*i),
        })
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {parent:?}"));
    match value {
        Some(v) => object.insert(last.clone(), v),
        None => object.remove(last),
    };
    body
}

/// `path` as the messages write it: `memories[0].content`.
fn written(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => out.push_str(&format!(".{k}")),
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// An item a request's array holds, valid as it is; `i` makes items of one array distinct where
/// the check wants them so (a batch updates a memory once).
fn item(schema: &str, i: usize) -> Value {
    let id = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + i as u128);
    match schema {
        "MemoryCreateRequest" => json!({"content": "a fact", "memory_type": "fact"}),
        "MemoryBatchUpdateItem" => json!({"id": id, "importance": 0.5}),
        "IngestEntry" => json!({"tenant_id": id, "action": "gateway.chat", "http_status": 200}),
        "GivenMessage" => json!({"role": "user", "content": "I live in Lisbon."}),
        "Tokens" => json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
        "MemoryId" => json!(id),
        "KeyScopeRequest" => json!({"user_id": "dana"}),
        other => panic!("no valid {other} to build a request of: add one here"),
    }
}

/// A body of `schema`, valid as it is, to try `field` (a top-level field) in.
fn base(schema: &str, field: &str) -> Value {
    match schema {
        "MemoryCreateRequest" => item(schema, 0),
        "MemoryUpdateRequest" => json!({"importance": 0.5}),
        "MemoryBatchCreateRequest" => json!({"memories": [item("MemoryCreateRequest", 0)]}),
        "MemoryBatchUpdateRequest" => json!({"memories": [item("MemoryBatchUpdateItem", 0)]}),
        "BatchDeleteRequest" => json!({"memory_type": "fact"}),
        "MemoryQueryRequest" | "ExportRequest" => json!({}),
        "SearchRequest" => json!({"query": "where does Dana live?"}),
        // Exactly one of the two inputs.
        "ExtractRequest" if field == "messages" => {
            json!({"messages": [item("GivenMessage", 0)]})
        }
        "ExtractRequest" => json!({"text": "I live in Lisbon."}),
        // Exactly one subject: the field tried alone.
        "ErasureRequest" => match field {
            "memory_ids" => json!({"memory_ids": [item("MemoryId", 0)]}),
            "agent_id" | "session_id" => json!({field: "alice"}),
            _ => json!({"user_id": "alice"}),
        },
        "CreateTenantRequest" => json!({"name": "acme", "plan": "pro"}),
        "UpdateTenantRequest" => json!({"credits": 1}),
        "CreateKeyRequest" => json!({"permissions": ["audit.read"]}),
        "IngestRequest" => json!({"entries": [item("IngestEntry", 0)]}),
        "CreateWebhook" => {
            json!({"url": "https://hooks.example/h", "event_types": ["audit.entry"]})
        }
        "UpdateWebhook" => json!({"enabled": false}),
        other => panic!("no valid {other} to try: add one here"),
    }
}

/// `body` read as the body `schema` names, through the reading path and every check its
/// handler runs after it (those that need no state).
fn take(schema: &str, body: &Value) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(body).expect("json");
    match schema {
        "MemoryCreateRequest" => read::<MemoryCreateRequest>(true, &bytes).map(drop),
        "MemoryUpdateRequest" => {
            read::<MemoryUpdateRequest>(true, &bytes)?.check()?;
            Ok(())
        }
        "MemoryBatchCreateRequest" => read::<MemoryBatchCreateRequest>(true, &bytes).map(drop),
        "MemoryBatchUpdateRequest" => {
            // The handler checks each update once its memory is found, naming the item.
            for (i, item) in read::<MemoryBatchUpdateRequest>(true, &bytes)?
                .into_iter()
                .enumerate()
            {
                item.update
                    .check()
                    .map_err(|e| ApiError::bad_request(format!("memories[{i}]: {}", e.0)))?;
            }
            Ok(())
        }
        "BatchDeleteRequest" => read::<BatchDeleteRequest>(true, &bytes).map(drop),
        "MemoryQueryRequest" => read::<MemoryQueryRequest>(true, &bytes).map(drop),
        "SearchRequest" => read::<SearchRequest>(true, &bytes).map(drop),
        "ExtractRequest" => read::<ExtractRequest>(true, &bytes).map(drop),
        "ExportRequest" => read::<ExportRequest>(true, &bytes).map(drop),
        "ErasureRequest" => read::<ErasureRequest>(true, &bytes).map(drop),
        "CreateTenantRequest" => read::<CreateTenantRequest>(true, &bytes).map(drop),
        "UpdateTenantRequest" => {
            read::<UpdateTenantRequest>(true, &bytes)?.changes()?;
            Ok(())
        }
        "CreateKeyRequest" => {
            read::<CreateKeyRequest>(true, &bytes)?.key()?;
            Ok(())
        }
        "CreateWebhook" => read::<crate::wire::webhook::CreateWebhook>(true, &bytes).map(drop),
        "UpdateWebhook" => read::<crate::wire::webhook::UpdateWebhook>(true, &bytes).map(drop),
        "IngestRequest" => {
            let now = crate::wire::time::now();
            for (i, entry) in read::<IngestRequest>(true, &bytes)?.into_iter().enumerate() {
                entry.check(i, Uuid::now_v7(), now, 64 * 1024)?;
            }
            Ok(())
        }
        other => panic!("no reading path for {other}: add it here"),
    }
}

/// The query parameters of the operation at `path`, valid as they are.
fn base_params(path: &str) -> Map<String, Value> {
    match path {
        "/v1/audit/consistency" | "/admin/v1/log/consistency" => {
            Map::from_iter([("from".to_string(), json!("0"))])
        }
        _ => Map::new(),
    }
}

/// Query parameters read as the operation at `path` reads them.
fn take_params(path: &str, given: &Value) -> Result<(), ApiError> {
    let map: HashMap<String, String> = given
        .as_object()
        .expect("parameters")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("a parameter is text").into()))
        .collect();
    match path {
        "/v1/memories" => params::<MemoryListQuery>(&map).map(drop),
        "/v1/memories/{id}" | "/v1/memories/{id}/history" => params::<AsOfQuery>(&map).map(drop),
        "/v1/audit/logs" => params::<AuditListQuery>(&map).map(drop),
        "/v1/audit/logs/stream" => params::<AuditStreamQuery>(&map).map(drop),
        "/v1/audit/logs/{audit_id}/proof" => params::<ProofQuery>(&map).map(drop),
        "/v1/audit/consistency" | "/admin/v1/log/consistency" => {
            params::<ConsistencyQuery>(&map).map(drop)
        }
        "/admin/v1/log" => params::<LogQuery>(&map).map(drop),
        other => panic!("no reading path for the query of {other}: add it here"),
    }
}

/// What one probe sends, and whether it must be taken.
struct Probe {
    what: String,
    value: Option<Value>,
    taken: bool,
}

fn probe(what: impl Into<String>, value: Option<Value>, taken: bool) -> Probe {
    Probe {
        what: what.into(),
        value,
        taken,
    }
}

/// The JSON type a schema names, null aside.
fn json_type(schema: &Value) -> Option<&str> {
    match &schema["type"] {
        Value::String(t) => Some(t.as_str()),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    }
}

/// A schema with its reference followed (a component, or the one item of a nullable `oneOf`).
fn resolved<'d>(doc: &'d Value, schema: &'d Value) -> &'d Value {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return &doc["components"]["schemas"][name];
    }
    if let Some(items) = schema["oneOf"].as_array() {
        let not_null: Vec<&Value> = items.iter().filter(|s| s["type"] != "null").collect();
        if let [one] = not_null.as_slice() {
            return resolved(doc, one);
        }
    }
    schema
}

/// The name of the component schema `schema` refers to, directly or as its nullable `oneOf`.
fn component(schema: &Value) -> Option<&str> {
    if let Some(r) = schema["$ref"].as_str() {
        return Some(r.trim_start_matches("#/components/schemas/"));
    }
    let items = schema["oneOf"].as_array()?;
    items.iter().find_map(|s| component(s))
}

/// A number just past `bound` (`by` above or below it), as the schema's type writes it.
fn beside(bound: &Value, by: f64, integer: bool) -> Value {
    let b = bound.as_f64().expect("a numeric bound");
    if integer {
        json!(b as i64 + by.signum() as i64)
    } else {
        json!(b + by)
    }
}

/// A text of `n` characters that is not blank.
fn text(n: usize) -> Value {
    json!("x".repeat(n))
}

/// The probes of a value whose schema is `schema`, each kind of bound tried listed in `kinds`.
fn value_probes(doc: &Value, schema: &Value, kinds: &mut Vec<String>) -> Vec<Probe> {
    let s = resolved(doc, schema);
    let integer = json_type(s) == Some("integer");
    let mut probes = Vec::new();
    for (keyword, bound) in s.as_object().into_iter().flatten() {
        let k = keyword.as_str();
        // An object's own keywords are tried with its fields (`try_object`).
        let of_object = [
            "properties",
            "required",
            "additionalProperties",
            "minProperties",
        ];
        if ANNOTATIONS.contains(&k) || of_object.contains(&k) {
            continue;
        }
        assert!(PROBED.contains(&k), "no probe for `{k}` in {s}: add one");
        kinds.push(k.to_string());
        let n = bound.as_u64().map(|n| n as usize);
        let mut both = |inside: Value, outside: Option<Value>| {
            probes.push(probe(k, Some(inside), true));
            if let Some(outside) = outside {
                probes.push(probe(k, Some(outside), false));
            }
        };
        match k {
            "minLength" => {
                let n = n.expect("a length");
                both(text(n.max(1)), n.checked_sub(1).map(text));
            }
            "maxLength" => {
                let n = n.expect("a length");
                both(text(n), Some(text(n + 1)));
            }
            "pattern" => {
                // The patterns the document uses, each with a text it takes and one it does not.
                let (inside, outside) = match bound.as_str() {
                    Some(r"\S") => ("x", " \t "),
                    other => panic!("no probe for the pattern {other:?}: add one"),
                };
                both(json!(inside), Some(json!(outside)));
            }
            "minimum" => both(bound.clone(), Some(beside(bound, -EPSILON, integer))),
            "maximum" => both(bound.clone(), Some(beside(bound, EPSILON, integer))),
            "exclusiveMinimum" => both(beside(bound, EPSILON, integer), Some(bound.clone())),
            "exclusiveMaximum" => both(beside(bound, -EPSILON, integer), Some(bound.clone())),
            "enum" => {
                let values = bound.as_array().expect("enum values");
                for v in values.iter().filter(|v| !v.is_null()) {
                    probes.push(probe(format!("enum {v}"), Some(v.clone()), true));
                }
                assert!(!values.contains(&json!("none-of-these")));
                probes.push(probe("enum", Some(json!("none-of-these")), false));
            }
            "minItems" | "maxItems" => {
                let n = n.expect("a count");
                let list = |len: usize| {
                    Value::Array((0..len).map(|i| an_item(doc, &s["items"], i)).collect())
                };
                if k == "minItems" {
                    both(list(n.max(1)), n.checked_sub(1).map(list));
                } else {
                    both(list(n), Some(list(n + 1)));
                }
            }
            _ => unreachable!("{k} is probed above"),
        }
    }
    // The bounds of an array's items that are values (not objects), each tried in an array of
    // one item.
    let items = resolved(doc, &s["items"]);
    if items.is_object() && !items["properties"].is_object() {
        for p in value_probes(doc, items, kinds) {
            let value = p.value.map(|v| json!([v]));
            probes.push(Probe { value, ..p });
        }
    }
    probes
}

/// A valid item `i` of an array whose items are `items`.
fn an_item(doc: &Value, items: &Value, i: usize) -> Value {
    let s = resolved(doc, items);
    match (component(items), s["enum"].get(0)) {
        (_, Some(first)) => first.clone(),
        (Some(name), None) => item(name, i),
        (None, None) => panic!("no item for {items}: add one"),
    }
}

/// What a body or a query string must do with a probe: be taken, or be refused with a 400 that
/// names `field` (and the outer field it is in).
fn expect(what: &str, probe: &Probe, field: &str, outer: &str, got: Result<(), ApiError>) {
    match got {
        Ok(()) => assert!(probe.taken, "{what}: taken, but the document refuses it"),
        Err(e) => {
            assert!(
                !probe.taken,
                "{what}: refused ({}), but the document takes it",
                e.message
            );
            assert_eq!(e.code, ErrorCode::BadRequest, "{what}: {}", e.message);
            for name in [field, outer] {
                assert!(
                    e.message.contains(name),
                    "{what}: the refusal does not name {name}: {}",
                    e.message
                );
            }
        }
    }
}

/// Tries every bound of the object `schema` (the component `name`) at `prefix` in a body of
/// `body_schema`, and of the objects its fields hold. `valid(field)` is a valid body with the
/// object in place, to try its field `field` in.
fn try_object(
    doc: &Value,
    body_schema: &str,
    name: &str,
    schema: &Value,
    prefix: &[Step],
    valid: &dyn Fn(&str) -> Value,
    tried: &mut Vec<String>,
) {
    let outer = match prefix.first() {
        Some(Step::Key(k)) => k.as_str(),
        _ => "",
    };
    let try_one = |path: &[Step], probe: &Probe, field: &str, body: &Value| {
        let sent = with(body, path, probe.value.clone());
        let what = format!("{body_schema} {} {}: {sent}", written(path), probe.what);
        expect(&what, probe, field, outer, take(body_schema, &sent));
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let fields = schema["properties"]
        .as_object()
        .expect("an object's fields");
    for (field, property) in fields {
        let top = if outer.is_empty() { field } else { outer };
        let body = valid(top);
        let mut path = prefix.to_vec();
        path.push(Step::Key(field.clone()));
        if required.contains(&field.as_str()) {
            tried.push(format!("{name}.{field} required"));
            try_one(&path, &probe("required", None, false), field, &body);
        }
        let mut kinds = Vec::new();
        for p in value_probes(doc, property, &mut kinds) {
            try_one(&path, &p, field, &body);
        }
        tried.extend(kinds.iter().map(|k| format!("{name}.{field} {k}")));
        // The object the field holds, as its value or as its array's first item.
        let value = resolved(doc, property);
        let items = resolved(doc, &value["items"]);
        let (object, holder, inner) = if value["properties"].is_object() {
            (value, component(property), path.clone())
        } else if items["properties"].is_object() {
            let mut inner = path.clone();
            inner.push(Step::Index(0));
            (items, component(&value["items"]), inner)
        } else {
            continue;
        };
        let holder = holder.expect("an object's schema is a component");
        let placed = |top: &str| {
            let body = valid(top);
            if get(&body, &inner).is_some() {
                return body;
            }
            let one = item(holder, 0);
            let value = if inner.len() > path.len() {
                json!([one])
            } else {
                one
            };
            with(&body, &path, Some(value))
        };
        try_object(doc, body_schema, holder, object, &inner, &placed, tried);
    }
    // The object's own bounds: no field it does not name; as few fields as it allows.
    let body = valid("");
    if schema["additionalProperties"] == json!(false) {
        tried.push(format!("{name} additionalProperties"));
        let mut path = prefix.to_vec();
        path.push(Step::Key("x_unknown".into()));
        let p = probe("additionalProperties", Some(json!(1)), false);
        try_one(&path, &p, "x_unknown", &body);
    }
    if let Some(n) = schema["minProperties"].as_u64() {
        tried.push(format!("{name} minProperties"));
        let here = get(&body, prefix)
            .and_then(Value::as_object)
            .expect("the object");
        assert_eq!(
            here.len() as u64,
            n,
            "{name}: a valid body with the fewest fields"
        );
        for field in here.keys() {
            let mut path = prefix.to_vec();
            path.push(Step::Key(field.clone()));
            let p = probe("minProperties", None, false);
            let sent = with(&body, &path, None);
            let what = format!("{body_schema} {} minProperties: {sent}", written(prefix));
            expect(&what, &p, "", outer, take(body_schema, &sent));
        }
    }
}

#[test]
fn every_bound_of_the_document_is_its_checks_bound() {
    let doc = document();
    let mut tried = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let body = &op["requestBody"]["content"]["application/json"]["schema"];
            if let Some(name) = component(body) {
                let valid = |field: &str| base(name, field);
                take(name, &valid("")).unwrap_or_else(|e| {
                    panic!("{method} {path}: the valid body is refused: {}", e.message)
                });
                try_object(
                    &doc,
                    name,
                    name,
                    resolved(&doc, body),
                    &[],
                    &valid,
                    &mut tried,
                );
            }
            for param in op["parameters"].as_array().into_iter().flatten() {
                if param["in"] == json!("query") {
                    try_parameter(&doc, path, method, param, &mut tried);
                }
            }
        }
    }
    // The walk reached the bounds it must, each kind at least once.
    for expected in [
        "MemoryCreateRequest.content maxLength",
        "MemoryCreateRequest.content pattern",
        "MemoryCreateRequest.content required",
        "MemoryCreateRequest.importance maximum",
        "MemoryCreateRequest.user_id maxLength",
        "MemoryCreateRequest.memory_type enum",
        "MemoryCreateRequest additionalProperties",
        "MemoryBatchCreateRequest.memories maxItems",
        "MemoryBatchUpdateItem.id required",
        "MemoryUpdateRequest minProperties",
        "SearchRequest.top_k minimum",
        "SearchRequest.search_mode enum",
        "SearchRequest.rrf_k maximum",
        "ExtractRequest.messages minItems",
        "GivenMessage.role required",
        "CreateTenantRequest.name maxLength",
        "CreateTenantRequest.credits minimum",
        "CreateKeyRequest.permissions minItems",
        "CreateKeyRequest.permissions enum",
        "ExportRequest.format enum",
        "IngestRequest.entries maxItems",
        "IngestEntry.http_status maximum",
        "Tokens.total_tokens minimum",
        "get /v1/memories user_id maxLength",
        "get /v1/memories memory_type enum",
        "get /v1/audit/logs page_size minimum",
        "get /v1/audit/logs/{audit_id}/proof tree_size minimum",
        "get /v1/audit/consistency from required",
        "get /admin/v1/log from minimum",
    ] {
        assert!(
            tried.iter().any(|t| t == expected),
            "{expected} was not tried: {tried:#?}"
        );
    }
}

/// Tries the bounds of the query parameter `param` of the operation `method path`.
fn try_parameter(doc: &Value, path: &str, method: &str, param: &Value, tried: &mut Vec<String>) {
    let field = param["name"].as_str().expect("a name");
    let valid = Value::Object(base_params(path));
    take_params(path, &valid)
        .unwrap_or_else(|e| panic!("{method} {path}: the valid query is refused: {}", e.message));
    let label = |what: &str| format!("{method} {path} {field} {what}");
    let sent_with = |value: Option<Value>| {
        let mut sent = valid.clone();
        if let Some(m) = sent.as_object_mut() {
            match value {
                // A query's values are text.
                Some(Value::String(s)) => m.insert(field.to_string(), json!(s)),
                Some(other) => m.insert(field.to_string(), json!(other.to_string())),
                None => m.remove(field),
            };
        }
        sent
    };
    if param["required"] == json!(true) {
        tried.push(label("required"));
        let p = probe("required", None, false);
        let sent = sent_with(None);
        expect(
            &label(&format!("required: {sent}")),
            &p,
            field,
            "",
            take_params(path, &sent),
        );
    }
    let mut kinds = Vec::new();
    for p in value_probes(doc, &param["schema"], &mut kinds) {
        let sent = sent_with(p.value.clone());
        let what = label(&format!("{}: {sent}", p.what));
        expect(&what, &p, field, "", take_params(path, &sent));
    }
    tried.extend(kinds.iter().map(|k| label(k)));
}
