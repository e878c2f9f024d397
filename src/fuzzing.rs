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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use auditmem_projections::{ExportFormat, ExportRequested, KeyIssued, Permission};

    use super::*;
    use crate::registry::ErrorCode;

    /// A fuzz target's seed, run as the target runs it: the first byte picks the request.
    fn seed(target: &str, name: &str, pick: &[Request]) -> Result<Vec<Event>, ApiError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz/seeds")
            .join(target)
            .join(name);
        let bytes = std::fs::read(&path).expect("a seed");
        let (&p, input) = bytes.split_first().expect("a pick byte");
        request(pick[p as usize % pick.len()], input)
    }

    #[test]
    fn the_seeds_are_decided_by_the_commands_against_the_fuzzing_tenant() {
        assert_eq!(
            seed("admin_bodies", "create_tenant.json", &ADMIN).expect("decided"),
            vec![Event::TenantCreated(TenantCreated {
                tenant_id: Uuid::nil(),
                name: "acme".into(),
                plan: Plan::Pro,
                subscription_active: true,
                credits: 12.5,
                created_at: NOW_MICROS,
            })]
        );
        assert_eq!(
            seed("admin_bodies", "create_key.json", &ADMIN).expect("decided"),
            vec![Event::KeyIssued(KeyIssued {
                key_id: Uuid::nil(),
                tenant_id: TENANT,
                key_hash: [0; 32],
                permissions: vec![Permission::AuditRead, Permission::MemoryWrite],
                name: Some("ci".into()),
                created_at: NOW_MICROS,
                scope: None,
            })]
        );
        // "enterprise" is no plan: refused once the tenant was found.
        assert_eq!(
            seed("admin_bodies", "update_tenant.json", &ADMIN).map_err(|e| e.code),
            Err(ErrorCode::BadRequest)
        );
        assert_eq!(
            seed("admin_bodies", "ingest.json", &ADMIN),
            Err(ApiError::bad_request(
                "entries[0]: response_body must be a JSON object or null"
            ))
        );
        let events = seed("admin_bodies", "ingest_error.json", &ADMIN).expect("decided");
        let recorded: Vec<(Uuid, Uuid, Option<i64>)> = events
            .iter()
            .map(|e| match e {
                Event::AuditRecorded(r) => (r.tenant_id, r.entry.id, r.entry.error_code),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(recorded, vec![(TENANT, Uuid::nil(), Some(4290))]);
        // 2026-11-01T00:00:00Z to 2026-11-22T12:00:00.5Z, within Pro's 90 days.
        assert_eq!(
            seed("v1_requests", "export.json", &V1).expect("decided"),
            vec![Event::ExportRequested(ExportRequested {
                export_id: Uuid::nil(),
                tenant_id: TENANT,
                format: ExportFormat::Json,
                start_time: 1_793_491_200_000_000,
                end_time: 1_795_348_800_500_000,
                estimated_records: 0,
                with_chain: false,
                requested_at: NOW_MICROS,
            })]
        );
        assert_eq!(
            seed("v1_requests", "export_empty.json", &V1).expect("decided"),
            vec![Event::ExportRequested(ExportRequested {
                export_id: Uuid::nil(),
                tenant_id: TENANT,
                format: ExportFormat::Csv,
                start_time: NOW_MICROS - 90 * 86_400_000_000,
                end_time: NOW_MICROS,
                estimated_records: 0,
                with_chain: false,
                requested_at: NOW_MICROS,
            })]
        );
        // A request decided by a provider's answer is read and checked only.
        assert_eq!(
            seed("v1_requests", "create_memory.json", &V1).expect("read"),
            Vec::new()
        );
    }
}
