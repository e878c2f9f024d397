//! Entry points for the cargo-fuzz targets in `tests/fuzz` (not an API: hidden from the docs).
//!
//! [`request()`](crate::fuzzing::request) runs an input through what the handler of that
//! request runs on it: the same reading and checks ([`read`](crate::api::extract::read) for a
//! body, [`params`](crate::api::extract::params) for a query string) and, where the request
//! needs no provider, the same command (`crate::command`) on real projections holding one
//! tenant ([`TENANT`], on Pro), which builds the events the handler would append. A crash
//! found here is a crash of the server. What needs a provider (the embedder, the extractor)
//! is left out.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use auditmem_projections::{Event, Plan, TenantCreated};
use axum::http::Uri;
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::extract::{params, read};
use crate::command::export::{self, ExportRules};
use crate::command::given::Given;
use crate::command::{admin, Clock, Context, Ids, Refusal};
use crate::export::quota::Quota;
use crate::wire::admin::{CreateKeyRequest, CreateTenantRequest, UpdateTenantRequest};
use crate::wire::audit::{AuditListQuery, IngestRequest};
use crate::wire::export::ExportRequest;
use crate::wire::memory::{
    BatchDeleteRequest, ExtractRequest, MemoryCreateRequest, MemoryListQuery, MemoryUpdateRequest,
    SearchRequest,
};

/// The clock the checks see (2026-11-23T00:00:00Z): fixed, so a crash reproduces.
pub const NOW_MICROS: i64 = 1_795_392_000_000_000;

/// A request whose body or query string a handler parses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `POST /admin/v1/tenants`
    CreateTenant,
    /// `PATCH /admin/v1/tenants/{id}`
    UpdateTenant,
    /// `POST /admin/v1/tenants/{id}/keys`
    CreateKey,
    /// `POST /admin/v1/audit/logs`
    IngestAudit,
    /// `POST /v1/memories`
    CreateMemory,
    /// `PATCH /v1/memories/{id}`
    UpdateMemory,
    /// `DELETE /v1/memories`
    DeleteMemoriesByType,
    /// `POST /v1/memories/search`
    SearchMemories,
    /// `POST /v1/memories/extract`
    ExtractMemories,
    /// `POST /v1/audit/logs/export`
    CreateExport,
    /// `GET /v1/memories?...` (the input is the query string)
    ListMemories,
    /// `GET /v1/audit/logs?...` (the input is the query string)
    ListAuditLogs,
}

/// The admin API's bodies.
pub const ADMIN: [Request; 4] = [
    Request::CreateTenant,
    Request::UpdateTenant,
    Request::CreateKey,
    Request::IngestAudit,
];

/// The tenant API's bodies and query strings.
pub const V1: [Request; 8] = [
    Request::CreateMemory,
    Request::UpdateMemory,
    Request::DeleteMemoriesByType,
    Request::SearchMemories,
    Request::ExtractMemories,
    Request::CreateExport,
    Request::ListMemories,
    Request::ListAuditLogs,
];

/// The one tenant the commands find (the seeds' ingested entries name it): on Pro, so an
/// export request reaches its retention checks.
pub const TENANT: Uuid = Uuid::from_u128(0x0190b5a0_0000_7000_8000_000000000001);

/// The projections every input is decided against, made once per process.
fn given() -> Result<&'static Given, ApiError> {
    static GIVEN: OnceLock<Result<Given, String>> = OnceLock::new();
    GIVEN
        .get_or_init(|| {
            Given::with(&[Event::TenantCreated(TenantCreated {
                tenant_id: TENANT,
                name: "fuzz".into(),
                plan: Plan::Pro,
                subscription_active: true,
                credits: 0.0,
                created_at: NOW_MICROS,
            })])
            .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(ApiError::internal)
}

/// Parses and checks `input` as the body (or query string) of `request`, sent as
/// `Content-Type: application/json`, and decides it with the request's command where it needs
/// no provider. Returns the events the handler would append (ids nil, time [`NOW_MICROS`];
/// a path names [`TENANT`]), or none for a request decided by a provider's answer.
pub fn request(request: Request, input: &[u8]) -> Result<Vec<Event>, ApiError> {
    let given = given()?;
    let ctx = Context::new(
        &given.projections,
        NOW_MICROS,
        Clock::Fixed(NOW_MICROS),
        Ids::Nil,
    );
    let tenant = TENANT.to_string();
    Ok(match request {
        Request::CreateTenant => {
            admin::create_tenant(&ctx, read::<CreateTenantRequest>(true, input)?).events
        }
        Request::UpdateTenant => {
            let update = read::<UpdateTenantRequest>(true, input)?;
            admin::update_tenant(&ctx, &tenant, update)?.events
        }
        Request::CreateKey => {
            let key = read::<CreateKeyRequest>(true, input)?;
            let secret = admin::Secret {
                key: String::new(),
                hash: [0; 32],
            };
            admin::issue_key(&ctx, &tenant, key, secret)?.events
        }
        Request::IngestAudit => {
            let entries = read::<IngestRequest>(true, input)?;
            // The service's default `--audit-body-limit`.
            admin::ingest(&ctx, entries, 64 * 1024)?.events
        }
        Request::CreateMemory => {
            read::<MemoryCreateRequest>(true, input)?;
            Vec::new()
        }
        Request::UpdateMemory => {
            read::<MemoryUpdateRequest>(true, input)?.check()?;
            Vec::new()
        }
        Request::DeleteMemoriesByType => {
            read::<BatchDeleteRequest>(true, input)?;
            Vec::new()
        }
        Request::SearchMemories => {
            read::<SearchRequest>(true, input)?;
            Vec::new()
        }
        Request::ExtractMemories => {
            read::<ExtractRequest>(true, input)?;
            Vec::new()
        }
        Request::CreateExport => {
            let t = given
                .projections
                .tenants
                .tenant(&TENANT)?
                .ok_or_else(|| ApiError::internal("the fuzzing tenant is missing"))?;
            let rules = ExportRules {
                retention_days: 90,
                quota: Quota {
                    max_files: 0,
                    max_bytes: 0,
                    max_per_hour: 0,
                },
                ttl: Duration::from_secs(3600),
            };
            let asked = || read::<ExportRequest>(true, input).map_err(Refusal::from);
            export::create(&ctx, &t, asked, &rules)?.events
        }
        Request::ListMemories => {
            params::<MemoryListQuery>(&query("/v1/memories", input)?)?;
            Vec::new()
        }
        Request::ListAuditLogs => {
            params::<AuditListQuery>(&query("/v1/audit/logs", input)?)?;
            Vec::new()
        }
    })
}

/// The query string through axum's `Query`, the extractor the list handlers take it with. A
/// string that is no valid URI never reaches a handler (the HTTP server refuses it).
fn query(path: &str, input: &[u8]) -> Result<HashMap<String, String>, ApiError> {
    let uri = Uri::try_from([path.as_bytes(), b"?", input].concat())
        .map_err(|e| ApiError::bad_request(format!("not a URI: {e}")))?;
    axum::extract::Query::<HashMap<String, String>>::try_from_uri(&uri)
        .map(|axum::extract::Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}
