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

#[derive(Serialize, ToSchema)]
pub struct ExportRequest {
    pub start_time: Option<String>,
    pub end_time: Option<String>,
    /// csv (default) or json.
    pub format: Option<String>,
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
    /// rule, fact or context.
    pub memory_type: String,
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
pub struct MemoryCreateRequest {
    /// 1 to 10,000 characters after trimming.
    pub content: String,
    pub memory_type: String,
    /// 0.0 to 1.0, default 0.5.
    pub importance: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryUpdateRequest {
    pub content: Option<String>,
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
pub struct BatchDeleteRequest {
    pub memory_type: String,
}

#[derive(Serialize, ToSchema)]
pub struct BatchDeleted {
    pub memory_type: String,
    pub deleted: u64,
}

#[derive(Serialize, ToSchema)]
pub struct BatchDeletedEnvelope {
    pub success: bool,
    pub data: BatchDeleted,
}

#[derive(Serialize, ToSchema)]
pub struct SearchRequest {
    pub query: String,
    /// 1 to 100, default 5.
    pub top_k: Option<u64>,
    /// Default 0.
    pub min_similarity: Option<f64>,
    pub memory_type: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct SearchResult {
    pub id: String,
    pub content: String,
    pub memory_type: String,
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
    /// system, user, assistant or tool.
    pub role: String,
    pub content: String,
}

#[derive(Serialize, ToSchema)]
pub struct ExtractRequest {
    pub messages: Option<Vec<ChatMessage>>,
    pub text: Option<String>,
    pub deduplicate: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub struct SkippedMemory {
    pub content: String,
    pub memory_type: String,
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
    modifiers(&BearerAuth, &RateLimitResponses),
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
