//! Entry points for the cargo-fuzz targets in `tests/fuzz` (not an API: hidden from the docs).
//!
//! [`request()`](crate::fuzzing::request) runs an input through what the handler of that request runs on it before it
//! touches any state: the same extractor ([`ApiJson`](crate::api::envelope::ApiJson) or the query-string parser), the same
//! parse and check functions, split out of the handlers for this. A crash found here is a
//! crash of the server. What needs the state (does the tenant exist, retention, credits, the
//! embedder) is left out.

use std::collections::HashMap;

use auditmem_projections::Event;
use axum::extract::{FromRequest, Query};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Uri};
use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::api::envelope::ApiJson;
use crate::api::error::ApiError;
use crate::api::{admin, audit, export, memory};

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
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let id = Uuid::nil();
    Ok(match request {
        Request::CreateTenant => vec![Event::TenantCreated(
            api_json::<admin::CreateTenant>(input)?.checked(id, NOW_MICROS)?,
        )],
        Request::UpdateTenant => vec![Event::TenantUpdated(
            api_json::<admin::UpdateTenant>(input)?.checked(id, NOW_MICROS)?,
        )],
        Request::CreateKey => vec![Event::KeyIssued(
            api_json::<admin::CreateKey>(input)?.checked(id, id, [0; 32], NOW_MICROS)?,
        )],
        Request::IngestAudit => {
            let body = admin::parse_ingest(&headers, input)?;
            let mut events = Vec::with_capacity(body.entries.len());
            for (i, e) in body.entries.into_iter().enumerate() {
                events.push(Event::AuditRecorded(Box::new(
                    e.checked(i, id, NOW_MICROS)?,
                )));
            }
            events
        }
        Request::CreateMemory => {
            memory::create_fields(&headers, input)?;
            Vec::new()
        }
        Request::UpdateMemory => {
            memory::update_fields(&memory::update_body(&headers, input)?)?;
            Vec::new()
        }
        Request::DeleteMemoriesByType => {
            memory::delete_by_type_field(&headers, input)?;
            Vec::new()
        }
        Request::SearchMemories => {
            memory::search_params(&headers, input)?;
            Vec::new()
        }
        Request::ExtractMemories => {
            memory::extract_request(&headers, input)?;
            Vec::new()
        }
        Request::CreateExport => {
            export::create_export_fields(&headers, input)?;
            Vec::new()
        }
        Request::ListMemories => {
            memory::list_params(&query("/v1/memories", input)?)?;
            Vec::new()
        }
        Request::ListAuditLogs => {
            audit::ListQuery::parse(&query("/v1/audit/logs", input)?)?;
            Vec::new()
        }
    })
}

/// The body through [`ApiJson`], the extractor the admin handlers take it with.
fn api_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let req = axum::http::Request::builder()
        .header(CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_vec()))
        .map_err(ApiError::internal)?;
    // A body held in memory is read without waiting: the extractor completes on first poll.
    match ApiJson::<T>::from_request(req, &()).now_or_never() {
        Some(parsed) => parsed.map(|ApiJson(v)| v),
        None => Err(ApiError::internal(
            "the JSON extractor waited on a full body",
        )),
    }
}

/// The query string through axum's `Query`, the extractor the list handlers take it with. A
/// string that is no valid URI never reaches a handler (the HTTP server refuses it).
fn query(path: &str, input: &[u8]) -> Result<HashMap<String, String>, ApiError> {
    let uri = Uri::try_from([path.as_bytes(), b"?", input].concat())
        .map_err(|e| ApiError::bad_request(format!("not a URI: {e}")))?;
    Query::<HashMap<String, String>>::try_from_uri(&uri)
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}
