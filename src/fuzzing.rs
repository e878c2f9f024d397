//! Entry points for the cargo-fuzz targets in `tests/fuzz` (not an API: hidden from the docs).
//!
//! [`request()`](crate::fuzzing::request) runs an input through what the handler of that
//! request runs on it before it touches any state: the same reading and checks
//! ([`read`](crate::api::extract::read) for a body, [`params`](crate::api::extract::params)
//! for a query string) and the checks a handler runs after a lookup. A crash found here is a
//! crash of the server. What needs the state (does the tenant exist, retention, credits, the
//! embedder) is left out.

use std::collections::HashMap;

use auditmem_projections::{AuditRecorded, Event, KeyIssued, TenantCreated, TenantUpdated};
use axum::http::Uri;
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::extract::{params, read};
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

/// Parses and checks `input` as the body (or query string) of `request`, sent as
/// `Content-Type: application/json`. Returns the events the handler would append where the
/// checks build them (the admin requests; ids nil, time [`NOW_MICROS`]), else none.
pub fn request(request: Request, input: &[u8]) -> Result<Vec<Event>, ApiError> {
    let id = Uuid::nil();
    Ok(match request {
        Request::CreateTenant => {
            let t = read::<CreateTenantRequest>(true, input)?;
            vec![Event::TenantCreated(TenantCreated {
                tenant_id: id,
                name: t.name,
                plan: t.plan,
                subscription_active: t.subscription_active,
                credits: t.credits,
                created_at: NOW_MICROS,
            })]
        }
        Request::UpdateTenant => {
            let t = read::<UpdateTenantRequest>(true, input)?.changes()?;
            vec![Event::TenantUpdated(TenantUpdated {
                tenant_id: id,
                name: t.name,
                plan: t.plan,
                subscription_active: t.subscription_active,
                credits: t.credits,
                updated_at: NOW_MICROS,
            })]
        }
        Request::CreateKey => {
            let k = read::<CreateKeyRequest>(true, input)?.key()?;
            vec![Event::KeyIssued(KeyIssued {
                key_id: id,
                tenant_id: id,
                key_hash: [0; 32],
                permissions: k.permissions,
                name: k.name,
                created_at: NOW_MICROS,
            })]
        }
        Request::IngestAudit => {
            let entries = read::<IngestRequest>(true, input)?;
            let mut events = Vec::with_capacity(entries.len());
            for (i, e) in entries.into_iter().enumerate() {
                // The service's default `--audit-body-limit`.
                let rec: AuditRecorded = e.check(i, id, NOW_MICROS, 64 * 1024)?;
                events.push(Event::AuditRecorded(Box::new(rec)));
            }
            events
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
            read::<ExportRequest>(true, input)?;
            Vec::new()
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
