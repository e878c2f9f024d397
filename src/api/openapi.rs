//! The OpenAPI 3.1 document, generated from the handlers' `#[utoipa::path]` annotations and the
//! schema types below (which mirror the JSON the handlers build). Served at `/openapi.json` and
//! checked into `docs/openapi.json`; a test fails when the two differ.

use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// Every error: `{"success": false, "code": N, "message": "...", "data": null}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorEnvelope {
    pub success: bool,
    /// A code of the error registry (docs/API.md).
    pub code: i64,
    pub message: String,
    pub data: Option<()>,
}

#[derive(Serialize, ToSchema)]
pub struct Tokens {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// An audit log entry (list item).
#[derive(Serialize, ToSchema)]
pub struct AuditLogEntry {
    pub id: String,
    pub action: String,
    pub model_id: Option<String>,
    pub project_id: Option<String>,
    pub gateway_id: Option<String>,
    pub ip_address: Option<String>,
    pub user_agent: Option<String>,
    pub http_status: u16,
    pub is_success: bool,
    pub is_cache_hit: bool,
    pub error_code: Option<i64>,
    pub error_msg: Option<String>,
    /// Milliseconds.
    pub duration: Option<f64>,
    pub credits_consumed: f64,
    pub balance_consumed_usd: f64,
    pub tokens: Option<Tokens>,
    pub metadata: Option<serde_json::Value>,
    /// Per-tenant chain hash (hex) for business and custom plans; null otherwise.
    pub hash: Option<String>,
    /// RFC 3339 UTC, milliseconds.
    pub created_at: String,
}

/// An audit log entry with its detail fields.
#[derive(Serialize, ToSchema)]
pub struct AuditLogDetail {
    #[serde(flatten)]
    pub entry: AuditLogEntry,
    pub request_body: Option<serde_json::Value>,
    pub response_body: Option<serde_json::Value>,
    pub input_content: Option<serde_json::Value>,
    pub output_content: Option<serde_json::Value>,
    pub rag_query: Option<Vec<String>>,
    pub rag_results: Option<Vec<serde_json::Value>>,
    pub memory_query: Option<Vec<String>>,
    pub memory_results: Option<Vec<serde_json::Value>>,
}

/// One entry of `POST /admin/v1/audit/logs`; `tenant_id`, `action` and `http_status` are
/// required. `created_at` defaults to now and may lie at most 5 minutes ahead.
#[derive(Serialize, ToSchema)]
pub struct IngestEntry {
    pub tenant_id: String,
    pub action: String,
    pub created_at: Option<String>,
    pub model_id: Option<String>,
    pub project_id: Option<String>,
    pub gateway_id: Option<String>,
    pub ip_address: Option<String>,
    pub user_agent: Option<String>,
    pub http_status: u16,
    pub error_code: Option<i64>,
    pub error_msg: Option<String>,
    pub duration: Option<f64>,
    pub credits_consumed: Option<f64>,
    pub balance_consumed_usd: Option<f64>,
    pub is_cache_hit: Option<bool>,
    pub tokens: Option<Tokens>,
    pub metadata: Option<serde_json::Value>,
    pub request_body: Option<serde_json::Value>,
    pub response_body: Option<serde_json::Value>,
    pub input_content: Option<serde_json::Value>,
    pub output_content: Option<serde_json::Value>,
    pub rag_query: Option<Vec<String>>,
    pub rag_results: Option<Vec<serde_json::Value>>,
}

/// `POST /admin/v1/audit/logs`: 1 to 1,000 entries, appended atomically.
#[derive(Serialize, ToSchema)]
pub struct IngestRequest {
    pub entries: Vec<IngestEntry>,
}

#[derive(Serialize, ToSchema)]
pub struct AuditLogPage {
    pub logs: Vec<AuditLogEntry>,
    pub total: u64,
    pub page: u64,
    pub page_size: u64,
    pub next_cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct AuditLogPageEnvelope {
    pub success: bool,
    /// 1000
    pub code: i64,
    pub message: String,
    pub data: AuditLogPage,
}

#[derive(Serialize, ToSchema)]
pub struct AuditLogDetailEnvelope {
    pub success: bool,
    pub code: i64,
    pub message: String,
    pub data: AuditLogDetail,
}

/// The body may be left out: every field is optional.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExportRequest {
    /// ISO 8601; default: the start of the plan's retention window.
    pub start_time: Option<String>,
    /// ISO 8601; default: now.
    pub end_time: Option<String>,
    /// csv (default) or json.
    pub format: Option<ExportFormatName>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormatName {
    Csv,
    Json,
}

/// The three memory types of the interface.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryTypeName {
    Rule,
    Fact,
    Context,
}

#[derive(Serialize, ToSchema)]
pub struct ExportCreated {
    pub export_id: String,
    pub status: String,
    pub estimated_records: u64,
    pub download_url: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ExportCreatedEnvelope {
    pub success: bool,
    pub code: i64,
    pub message: String,
    pub data: ExportCreated,
}

#[derive(Serialize, ToSchema)]
pub struct ExportTask {
    pub export_id: String,
    /// processing, completed, failed or expired.
    pub status: String,
    pub format: String,
    pub start_time: String,
    pub end_time: String,
    pub estimated_records: u64,
    pub records: Option<u64>,
    pub file_size: Option<u64>,
    pub file_blake3: Option<String>,
    pub download_url: Option<String>,
    pub created_at: String,
    pub completed_at: Option<String>,
    pub expires_at: Option<String>,
    pub error: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ExportTaskEnvelope {
    pub success: bool,
    pub code: i64,
    pub message: String,
    pub data: ExportTask,
}

#[derive(Serialize, ToSchema)]
pub struct Memory {
    pub id: String,
    pub content: String,
    pub memory_type: MemoryTypeName,
    pub importance: f64,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryEnvelope {
    pub success: bool,
    pub data: Memory,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryCreateRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(min_length = 1, max_length = 10000, pattern = r"\S")]
    pub content: String,
    pub memory_type: MemoryTypeName,
    /// 0.0 to 1.0, default 0.5.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub importance: Option<f64>,
}

/// At least one of the two fields (only these two can be updated); neither may be null.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryUpdateRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(nullable = false, min_length = 1, max_length = 10000, pattern = r"\S")]
    pub content: Option<String>,
    /// 0.0 to 1.0.
    #[schema(nullable = false, minimum = 0.0, maximum = 1.0)]
    pub importance: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryPage {
    pub memories: Vec<Memory>,
    pub total: u64,
    pub page: u64,
    pub page_size: u64,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryPageEnvelope {
    pub success: bool,
    pub data: MemoryPage,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryDeleted {
    pub id: String,
    pub deleted: bool,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryDeletedEnvelope {
    pub success: bool,
    pub data: MemoryDeleted,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchDeleteRequest {
    pub memory_type: MemoryTypeName,
}

#[derive(Serialize, ToSchema)]
pub struct BatchDeleted {
    pub memory_type: MemoryTypeName,
    pub deleted: u64,
}

#[derive(Serialize, ToSchema)]
pub struct BatchDeletedEnvelope {
    pub success: bool,
    pub data: BatchDeleted,
}

#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(min_length = 1, max_length = 10000, pattern = r"\S")]
    pub query: String,
    /// 1 to 100, default 5; a whole number written as 5.0 is 5.
    #[schema(minimum = 1, maximum = 100)]
    pub top_k: Option<u64>,
    /// -1.0 to 1.0, default 0.
    #[schema(minimum = -1.0, maximum = 1.0)]
    pub min_similarity: Option<f64>,
    pub memory_type: Option<MemoryTypeName>,
}

#[derive(Serialize, ToSchema)]
pub struct SearchResult {
    pub id: String,
    pub content: String,
    pub memory_type: MemoryTypeName,
    pub importance: f64,
    /// Cosine similarity.
    pub score: f64,
}

#[derive(Serialize, ToSchema)]
pub struct SearchResults {
    pub results: Vec<SearchResult>,
}

#[derive(Serialize, ToSchema)]
pub struct SearchEnvelope {
    pub success: bool,
    pub data: SearchResults,
}

#[derive(Serialize, ToSchema)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    System,
    User,
    Assistant,
    Tool,
}

/// Exactly one of `messages` and `text` (at most 100,000 characters in all).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractRequest {
    #[schema(nullable = false, min_items = 1)]
    pub messages: Option<Vec<ChatMessage>>,
    #[schema(nullable = false, min_length = 1, pattern = r"\S")]
    pub text: Option<String>,
    /// Default false.
    pub deduplicate: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub struct SkippedMemory {
    pub content: String,
    pub memory_type: MemoryTypeName,
    pub reason: String,
    pub duplicate_of: String,
}

#[derive(Serialize, ToSchema)]
pub struct Extracted {
    pub memories: Vec<Memory>,
    pub skipped: Vec<SkippedMemory>,
    pub credits_consumed: f64,
}

#[derive(Serialize, ToSchema)]
pub struct ExtractEnvelope {
    pub success: bool,
    pub data: Extracted,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryVersion {
    /// created, updated or deleted.
    pub change: String,
    pub seq: u64,
    pub audit_id: Option<String>,
    pub at: String,
    pub content: Option<String>,
    pub importance: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryHistory {
    pub id: String,
    pub deleted: bool,
    pub versions: Vec<MemoryVersion>,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryHistoryEnvelope {
    pub success: bool,
    pub data: MemoryHistory,
}

/// `POST /admin/v1/tenants`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantRequest {
    /// 1 to 200 characters after trimming.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    pub plan: PlanName,
    /// Default true.
    pub subscription_active: Option<bool>,
    /// Default 0.
    #[schema(minimum = 0.0)]
    pub credits: Option<f64>,
}

/// `PATCH /admin/v1/tenants/{id}`: at least one field that is not null.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTenantRequest {
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: Option<String>,
    pub plan: Option<PlanName>,
    pub subscription_active: Option<bool>,
    #[schema(minimum = 0.0)]
    pub credits: Option<f64>,
}

/// `POST /admin/v1/tenants/{id}/keys`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    #[schema(min_items = 1)]
    pub permissions: Vec<PermissionName>,
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PlanName {
    Free,
    Basic,
    Pro,
    Business,
    Custom,
}

#[derive(Serialize, ToSchema)]
pub enum PermissionName {
    #[serde(rename = "audit.read")]
    AuditRead,
    #[serde(rename = "audit.export")]
    AuditExport,
    #[serde(rename = "memory.read")]
    MemoryRead,
    #[serde(rename = "memory.write")]
    MemoryWrite,
}

#[derive(Serialize, ToSchema)]
pub struct Tenant {
    pub id: String,
    pub name: String,
    pub plan: PlanName,
    pub subscription_active: bool,
    pub credits: f64,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct TenantEnvelope {
    pub success: bool,
    pub data: Tenant,
}

#[derive(Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
    pub total: u64,
}

#[derive(Serialize, ToSchema)]
pub struct TenantListEnvelope {
    pub success: bool,
    pub data: TenantList,
}

/// A new key; `api_key` is shown here only.
#[derive(Serialize, ToSchema)]
pub struct IssuedKey {
    pub id: String,
    pub tenant_id: String,
    pub name: Option<String>,
    pub api_key: String,
    pub permissions: Vec<PermissionName>,
    pub created_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct IssuedKeyEnvelope {
    pub success: bool,
    pub data: IssuedKey,
}

#[derive(Serialize, ToSchema)]
pub struct RevokedKey {
    pub id: String,
    pub revoked: bool,
    pub revoked_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct RevokedKeyEnvelope {
    pub success: bool,
    pub data: RevokedKey,
}

/// `{"success": true, "data": {...}}` of the admin API (see docs/API.md for each shape).
#[derive(Serialize, ToSchema)]
pub struct AdminEnvelope {
    pub success: bool,
    pub data: serde_json::Value,
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

/// Every `/v1` operation can answer 429 (the per-key rate limit, in the gate rather than in
/// any handler), so it is added here once instead of in each handler's annotation.
struct RateLimitResponses;

impl Modify for RateLimitResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::header::HeaderBuilder;
        use utoipa::openapi::{ContentBuilder, Object, Ref, ResponseBuilder, Type};
        let response = ResponseBuilder::new()
            .description("rate limit of the API key exceeded (4290)")
            .header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(Object::with_type(Type::Integer))
                    .description(Some("whole seconds to wait, at least 1"))
                    .build(),
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                    .build(),
            )
            .build();
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.patch,
                &mut item.put,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                op.responses
                    .responses
                    .insert("429".to_string(), response.clone().into());
            }
        }
    }
}

/// What the annotations cannot say: every operation that takes a JSON body can also answer 413
/// (the body limit, a layer in front of every handler) and 415 (a body not sent as JSON); a
/// memory update needs at least one field (utoipa's `min_properties` emits `maxProperties`); and
/// the export's body may be left out (`Option<ExportRequest>` would instead allow a JSON `null`,
/// which the handler refuses).
struct BodyResponses;

impl Modify for BodyResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, Schema};
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                        .build(),
                )
                .build()
        };
        let too_large = error("the body exceeds --max-body-bytes (4130)");
        let not_json = error("the body is not sent as application/json (4150)");
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.post,
                &mut item.patch,
                &mut item.put,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
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
        }
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
        let table: [LinkRow; 4] = [
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
    paths(
        super::audit::list_logs,
        super::audit::get_log,
        super::export::create_export,
        super::export::export_status,
        super::export::download_export,
        super::memory::create_memory,
        super::memory::list_memories,
        super::memory::get_memory,
        super::memory::update_memory,
        super::memory::delete_memory,
        super::memory::delete_by_type,
        super::memory::search_memories,
        super::memory::extract_memories,
        super::memory::memory_history,
        super::admin::create_tenant,
        super::admin::list_tenants,
        super::admin::get_tenant,
        super::admin::update_tenant,
        super::admin::create_key,
        super::admin::revoke_key,
        super::admin::ingest_audit,
        super::admin::stream_log,
        super::admin::log_head,
        super::admin::latest_checkpoint,
        super::admin::sign_checkpoint,
        super::admin::public_key,
    ),
    modifiers(&BearerAuth, &RateLimitResponses, &BodyResponses, &Links),
    tags(
        (name = "audit", description = "The audit log"),
        (name = "memory", description = "The memory store"),
        (name = "admin", description = "Operator API, enabled by AUDITMEM_ADMIN_TOKEN"),
    )
)]
pub struct ApiDoc;

/// The document as served and checked in (pretty JSON, with a trailing newline).
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
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
mod tests {
    use super::document;
    use crate::api::memory::CHAT_ROLES;
    use auditmem_projections::event::{ExportFormat, MemoryType, Permission, Plan};

    /// The values the document lists for the enum schema `name`.
    fn listed(doc: &serde_json::Value, name: &str) -> Vec<String> {
        doc["components"]["schemas"][name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("no enum schema {name} in the document"))
            .iter()
            .map(|v| v.as_str().expect("enum values are strings").to_string())
            .collect()
    }

    fn owned(values: impl IntoIterator<Item = &'static str>) -> Vec<String> {
        values.into_iter().map(str::to_string).collect()
    }

    // The schema enums are written out by hand beside the domain types (the projections crate
    // does not depend on utoipa); a value added to one and not the other must fail here.
    #[test]
    fn schema_enums_list_exactly_what_the_handlers_accept() {
        let doc: serde_json::Value =
            serde_json::from_str(&document()).expect("the document is JSON");
        let accepted = [
            ("PlanName", owned(Plan::ALL.map(|p| p.as_str()))),
            ("PermissionName", owned(Permission::ALL.map(|p| p.as_str()))),
            ("MemoryTypeName", owned(MemoryType::ALL.map(|t| t.as_str()))),
            (
                "ExportFormatName",
                owned(ExportFormat::ALL.map(|f| f.as_str())),
            ),
            ("ChatRole", owned(CHAT_ROLES)),
        ];
        for (schema, values) in accepted {
            assert_eq!(listed(&doc, schema), values, "{schema}");
        }
    }
}
