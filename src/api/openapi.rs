//! The OpenAPI 3.1 document: the paths and schemas of the route table (`api::routes`), each
//! operation documented by its handler's `#[utoipa::path]` and each schema derived from the wire
//! type it describes (`crate::wire`), plus what no single handler says (below). Served at
//! `/openapi.json` and checked into `docs/openapi.json`; a test fails when the two differ.

use std::collections::BTreeSet;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

/// An error response of `description`, in the error envelope.
fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                .build(),
        )
        .build()
}

/// An error response of `description`, in the error envelope, with a `Retry-After` header of
/// `retry_after` (whole seconds).
fn retry_after_response(description: &str, retry_after: &str) -> Response {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::{Object, Type};
    ResponseBuilder::new()
        .description(description)
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Object::with_type(Type::Integer))
                .description(Some(retry_after))
                .build(),
        )
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                .build(),
        )
        .build()
}

/// Every operation of a path item, with its method.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = (&'static str, &mut utoipa::openapi::path::Operation)> {
    [
        ("GET", &mut item.get),
        ("POST", &mut item.post),
        ("PATCH", &mut item.patch),
        ("PUT", &mut item.put),
        ("DELETE", &mut item.delete),
    ]
    .into_iter()
    .filter_map(|(method, op)| Some((method, op.as_mut()?)))
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// What the gate and the admin token answer for every operation behind them, rather than any
/// handler: on `/v1`, 401 (the key) and 429 (the per-key rate limit, with `Retry-After`); on
/// `/admin/v1`, 401 (the token), 400 (a request it refuses), 429 (a source throttled after
/// failed authentications, with `Retry-After`: checked before any token, so on every admin
/// route) and 403 (the ingest token, on every admin route but the one it opens).
struct GuardResponses;

impl Modify for GuardResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use super::admin::INGEST_ROUTE;
        let unknown_key = error_response("missing, unknown or revoked key (4010)");
        let wrong_token = error_response("missing or wrong admin token (4010)");
        let invalid = error_response("invalid request (4000)");
        let ingest_only = error_response(
            "the ingest token (AUDITMEM_INGEST_TOKEN) may only call POST /admin/v1/audit/logs (4030)",
        );
        let rate_limited = retry_after_response(
            "rate limit of the API key exceeded (4290)",
            "whole seconds to wait, at least 1",
        );
        let throttled = retry_after_response(
            "too many failed admin authentications from this source (4290); refused before the token is compared",
            "whole seconds until the source may try again, at least 1",
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            let tenant = path.starts_with("/v1/");
            for (method, op) in operations(item) {
                let mut added = if tenant {
                    vec![("401", &unknown_key), ("429", &rate_limited)]
                } else {
                    vec![
                        ("401", &wrong_token),
                        ("400", &invalid),
                        ("429", &throttled),
                    ]
                };
                // The ingest token opens ingestion; every other admin route refuses it.
                let ingestion = method == "POST" && path == INGEST_ROUTE;
                if !tenant && !ingestion {
                    added.push(("403", &ingest_only));
                }
                for (status, response) in added {
                    op.responses
                        .responses
                        .entry(status.to_string())
                        .or_insert_with(|| response.clone().into());
                }
            }
        }
    }
}

/// What the annotations cannot say: every operation that takes a JSON body can also answer 413
/// (the body limit, checked before any handler runs) and 415 (a body not sent as JSON); a
/// memory or webhook update needs at least one field (utoipa's `min_properties` emits `maxProperties`); and
/// the export's body may be left out (`Option<ExportRequest>` would instead allow a JSON `null`,
/// which the handler refuses).
struct BodyResponses;

impl Modify for BodyResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{RefOr, Schema};
        let too_large = error_response("the body exceeds --max-body-bytes (4130)");
        let not_json = error_response("the body is not sent as application/json (4150)");
        for item in openapi.paths.paths.values_mut() {
            for (_, op) in operations(item) {
                if op.request_body.is_none() {
                    continue;
                }
                op.responses
                    .responses
                    .insert("413".to_string(), too_large.clone().into());
                op.responses
                    .responses
                    .insert("415".to_string(), not_json.clone().into());
            }
        }
        if let Some(body) = openapi
            .paths
            .paths
            .get_mut("/v1/audit/logs/export")
            .and_then(|item| item.post.as_mut())
            .and_then(|op| op.request_body.as_mut())
        {
            body.required = Some(utoipa::openapi::Required::False);
        }
        if let Some(components) = openapi.components.as_mut() {
            if let Some(RefOr::T(Schema::Object(o))) =
                components.schemas.get_mut("MemoryUpdateRequest")
            {
                o.min_properties = Some(1);
            }
            if let Some(RefOr::T(Schema::Object(o))) = components.schemas.get_mut("UpdateWebhook") {
                o.min_properties = Some(1);
            }
        }
    }
}

/// How the document writes a field whose schema its checked type gives (`wire::field`): the
/// derive wraps a schema it writes in place in a `oneOf`, to add `null` or a description; these
/// are written as the derive writes any other field (`"type": ["string", "null"]` with the
/// description beside it, a description on the reference itself). And the schemas the derive
/// registers for those types, which nothing refers to, are left out: the document holds the
/// schemas its operations refer to.
struct FieldSchemas;

impl Modify for FieldSchemas {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{RefOr, Schema};
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for schema in components.schemas.values_mut() {
            if let RefOr::T(Schema::Object(object)) = schema {
                object.properties.values_mut().for_each(write_plainly);
            }
        }
        let mut reached = BTreeSet::new();
        let mut next = Vec::new();
        referred(
            &serde_json::to_value(&openapi.paths).unwrap_or_default(),
            &mut next,
        );
        while let Some(name) = next.pop() {
            if !reached.insert(name.clone()) {
                continue;
            }
            if let Some(schema) = components.schemas.get(&name) {
                referred(&serde_json::to_value(schema).unwrap_or_default(), &mut next);
            }
        }
        components.schemas.retain(|name, _| reached.contains(name));
    }
}

/// A property the derive wrapped in a `oneOf` of `null` and a schema, or of a schema alone (to
/// carry a description), written as that schema: with `null` among its types, or with the
/// description on the reference.
fn write_plainly(property: &mut utoipa::openapi::RefOr<utoipa::openapi::Schema>) {
    use utoipa::openapi::schema::{SchemaType, Type};
    use utoipa::openapi::{RefOr, Schema};
    let RefOr::T(Schema::OneOf(one_of)) = property else {
        return;
    };
    let is_null = |s: &RefOr<Schema>| matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
    let nullable = match one_of.items.as_slice() {
        [first, _] if is_null(first) => true,
        [_] => false,
        _ => return,
    };
    let description = one_of.description.take();
    let with_null = |t: &SchemaType| match t {
        SchemaType::Type(t) if nullable => SchemaType::from_iter([t.clone(), Type::Null]),
        other => other.clone(),
    };
    let plain = match one_of.items.last_mut() {
        // A reference stays in its `oneOf` when it may be null; the description goes on it.
        Some(RefOr::Ref(r)) => {
            if let Some(d) = description {
                r.description = d;
            }
            if nullable {
                return;
            }
            RefOr::Ref(r.clone())
        }
        Some(RefOr::T(Schema::Object(o))) => {
            let mut o = o.clone();
            o.schema_type = with_null(&o.schema_type);
            if let (true, Some(values)) = (nullable, o.enum_values.as_mut()) {
                values.push(serde_json::Value::Null);
            }
            o.description = description.or(o.description);
            RefOr::T(Schema::Object(o))
        }
        Some(RefOr::T(Schema::Array(a))) => {
            let mut a = a.clone();
            a.schema_type = with_null(&a.schema_type);
            a.description = description.or(a.description);
            RefOr::T(Schema::Array(a))
        }
        _ => {
            one_of.description = description;
            return;
        }
    };
    *property = plain;
}

/// The names of the component schemas `value` refers to.
fn referred(value: &serde_json::Value, names: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(serde_json::Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                names.push(name.to_string());
            }
            map.values().for_each(|v| referred(v, names));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| referred(v, names)),
        _ => {}
    }
}

/// OpenAPI links from each operation that creates something to the operations that take its id,
/// so clients and generators (the Schemathesis run in tests/schemathesis follows them) can go
/// from a created memory, export, tenant or key to reading, changing and deleting it.
struct Links;

type LinkRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

impl Modify for Links {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::link::LinkBuilder;
        use utoipa::openapi::RefOr;
        // (creating POST operation, its status, the id in its body, parameter, operations taking it)
        let table: [LinkRow; 5] = [
            (
                "/v1/memories",
                "200",
                "/data/id",
                "id",
                &[
                    "get_memory",
                    "update_memory",
                    "delete_memory",
                    "memory_history",
                ],
            ),
            (
                "/v1/audit/logs/export",
                "200",
                "/data/export_id",
                "export_id",
                &["export_status", "download_export"],
            ),
            (
                "/v1/webhooks",
                "201",
                "/data/id",
                "id",
                &[
                    "get_webhook",
                    "update_webhook",
                    "delete_webhook",
                    "rotate_secret",
                    "list_deliveries",
                ],
            ),
            (
                "/admin/v1/tenants",
                "201",
                "/data/id",
                "id",
                &["get_tenant", "update_tenant", "create_key"],
            ),
            (
                "/admin/v1/tenants/{id}/keys",
                "201",
                "/data/id",
                "key_id",
                &["revoke_key"],
            ),
        ];
        for (path, status, pointer, parameter, targets) in table {
            let op = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| item.post.as_mut());
            let Some(RefOr::T(response)) = op.and_then(|op| op.responses.responses.get_mut(status))
            else {
                continue;
            };
            for target in targets {
                // utoipa 5.5 serialises `Link::operation_id` as `operation_id`, a field no
                // OpenAPI reader knows; the extensions map is written verbatim, so the
                // `operationId` of the specification goes there.
                let mut id = utoipa::openapi::extensions::Extensions::default();
                id.insert("operationId".to_string(), serde_json::json!(target));
                let link = LinkBuilder::new()
                    .parameter(parameter, format!("$response.body#{pointer}"))
                    .extensions(Some(id))
                    .build();
                response.links.insert(target.to_string(), link.into());
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "auditmem", description = "Tamper-evident audit log and memory store", license(name = "Apache-2.0")),
    tags(
        (name = "audit", description = "The audit log"),
        (name = "memory", description = "The memory store"),
        (name = "webhooks", description = "Signed webhooks: a tenant's events posted to its endpoints"),
        (name = "admin", description = "Operator API, enabled by AUDITMEM_ADMIN_TOKEN"),
    )
)]
struct ApiDoc;

/// The document as served and checked in (pretty JSON, with a trailing newline).
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    doc.merge(super::routes::openapi());
    for m in [
        &FieldSchemas as &dyn Modify,
        &BearerAuth,
        &GuardResponses,
        &BodyResponses,
        &Links,
    ] {
        m.modify(&mut doc);
    }
    // The version comes from Cargo; pin the info so the checked-in file only changes with the API.
    doc.info.version = "1".into();
    let mut s = doc.to_pretty_json().unwrap_or_else(|_| "{}".into());
    s.push('\n');
    s
}

pub async fn serve_document() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document(),
    )
}

#[cfg(test)]
mod tests;
