//! Every route of the API, declared once: its handler, whose `#[utoipa::path]` gives its
//! method, path and documentation, and who may call it. A tenant route cannot be written
//! without the permission it needs and the action its audit entries carry; the router, the
//! gate's policy and the OpenAPI document are all built from this table.
//!
//! Adding an endpoint is one row here and its handler (with its typed request and response).

use auditmem_projections::Permission;
use axum::http::{Method, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::openapi::path::PathItem;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use super::gate::{self, Gate, Policy};
use super::state::AppState;
use super::{admin, audit, erasure, export, memory, stream, transparency, webhooks};

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A tenant's API key with the policy's permission, through the `/v1` gate: every call is
    /// one of the tenant's audit entries.
    Tenant(Policy),
    /// The operator, with the admin token (off, 404, while none is set).
    Admin,
}

/// A row of the table.
pub struct Route {
    pub handler: UtoipaMethodRouter<AppState>,
    pub access: Access,
}

fn tenant(
    handler: UtoipaMethodRouter<AppState>,
    action: &'static str,
    permission: Permission,
) -> Route {
    Route {
        handler,
        access: Access::Tenant(Policy { action, permission }),
    }
}

fn admin(handler: UtoipaMethodRouter<AppState>) -> Route {
    Route {
        handler,
        access: Access::Admin,
    }
}

/// The routes.
pub fn table() -> Vec<Route> {
    use Permission::*;
    vec![
        tenant(routes!(audit::list_logs), "audit.list", AuditRead),
        tenant(routes!(audit::get_log), "audit.read", AuditRead),
        tenant(routes!(stream::stream_logs), "audit.stream", AuditRead),
        tenant(
            routes!(transparency::inclusion_proof),
            "audit.proof",
            AuditRead,
        ),
        tenant(
            routes!(transparency::export_proofs),
            "audit.export.proofs",
            AuditExport,
        ),
        tenant(
            routes!(transparency::consistency_proof),
            "audit.consistency",
            AuditRead,
        ),
        tenant(routes!(export::create_export), "audit.export", AuditExport),
        tenant(
            routes!(export::export_status),
            "audit.export_status",
            AuditExport,
        ),
        tenant(
            routes!(export::download_export),
            "audit.export_download",
            AuditExport,
        ),
        tenant(
            routes!(export::export_manifest),
            "audit.export_manifest",
            AuditExport,
        ),
        tenant(
            routes!(memory::crud::create_memory),
            "memory.write",
            MemoryWrite,
        ),
        tenant(
            routes!(memory::crud::list_memories),
            "memory.list",
            MemoryRead,
        ),
        tenant(
            routes!(memory::crud::query_memories),
            "memory.query",
            MemoryRead,
        ),
        tenant(
            routes!(memory::batch::create_batch),
            "memory.batch_create",
            MemoryWrite,
        ),
        tenant(
            routes!(memory::batch::update_batch),
            "memory.batch_update",
            MemoryWrite,
        ),
        tenant(
            routes!(memory::crud::delete_by_type),
            "memory.batch_delete",
            MemoryWrite,
        ),
        tenant(routes!(memory::crud::get_memory), "memory.read", MemoryRead),
        tenant(
            routes!(memory::crud::update_memory),
            "memory.update",
            MemoryWrite,
        ),
        tenant(
            routes!(memory::crud::delete_memory),
            "memory.delete",
            MemoryWrite,
        ),
        tenant(
            routes!(memory::history::memory_history),
            "memory.history",
            MemoryRead,
        ),
        tenant(
            routes!(memory::search::search_memories),
            "memory.search",
            MemoryRead,
        ),
        tenant(
            routes!(memory::extract::extract_memories),
            "memory.extract",
            MemoryWrite,
        ),
        tenant(
            routes!(erasure::create_erasure),
            "memory.erase",
            MemoryErase,
        ),
        tenant(
            routes!(webhooks::create_webhook),
            "webhook.create",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::list_webhooks),
            "webhook.list",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::get_webhook),
            "webhook.read",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::update_webhook),
            "webhook.update",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::delete_webhook),
            "webhook.delete",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::rotate_secret),
            "webhook.rotate_secret",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::list_deliveries),
            "webhook.deliveries_list",
            WebhooksManage,
        ),
        tenant(
            routes!(webhooks::redeliver),
            "webhook.redeliver",
            WebhooksManage,
        ),
        admin(routes!(admin::tenants::create_tenant)),
        admin(routes!(admin::tenants::list_tenants)),
        admin(routes!(admin::tenants::get_tenant)),
        admin(routes!(admin::tenants::update_tenant)),
        admin(routes!(admin::erasures::erase_tenant)),
        admin(routes!(admin::keys::create_key)),
        admin(routes!(admin::keys::revoke_key)),
        admin(routes!(admin::ingest::ingest_audit)),
        admin(routes!(admin::log::stream_log)),
        admin(routes!(admin::log::log_head)),
        admin(routes!(admin::log::latest_checkpoint)),
        admin(routes!(admin::log::sign_checkpoint)),
        admin(routes!(admin::log::public_key)),
        admin(routes!(transparency::admin_consistency_proof)),
    ]
}

/// Whether a path item has an operation for `method`.
fn has_method(item: &PathItem, method: &Method) -> bool {
    let op = match *method {
        Method::GET => &item.get,
        Method::POST => &item.post,
        Method::PUT => &item.put,
        Method::PATCH => &item.patch,
        Method::DELETE => &item.delete,
        Method::HEAD => &item.head,
        Method::OPTIONS => &item.options,
        Method::TRACE => &item.trace,
        _ => return false,
    };
    op.is_some()
}

/// The policy of the tenant route `method path` (`path` as the table writes it, e.g.
/// `/v1/memories/{id}`), if there is one.
pub fn policy(method: &Method, path: &str) -> Option<Policy> {
    table().into_iter().find_map(|route| {
        let item = route.handler.1.paths.get(path)?;
        match route.access {
            Access::Tenant(policy) if has_method(item, method) => Some(policy),
            _ => None,
        }
    })
}

/// The table's routes with what guards them: the gate on tenant routes; the admin token, the
/// body limit and the timeout on admin routes (left out without an admin token). Tenant routes
/// are under neither layer: the gate refuses the same bodies once the key is known and times
/// out the same requests itself, so that each refusal is recorded in the tenant's audit log,
/// and a timeout never cuts off the recording of an operation that was done.
pub fn router(state: &AppState) -> Router<AppState> {
    let mut api = OpenApiRouter::new();
    for Route { handler, access } in table() {
        let (schemas, paths, method_router) = handler;
        let method_router = match access {
            Access::Tenant(policy) => method_router.route_layer(from_fn_with_state(
                Gate {
                    state: state.clone(),
                    policy,
                },
                gate::v1_gate,
            )),
            Access::Admin => method_router
                .route_layer(from_fn_with_state(state.clone(), admin::require_admin))
                .layer::<_, std::convert::Infallible>(RequestBodyLimitLayer::new(
                    state.settings.max_body_bytes,
                ))
                .layer::<_, std::convert::Infallible>(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    state.settings.request_timeout,
                )),
        };
        api = api.routes((schemas, paths, method_router));
    }
    api.split_for_parts().0
}

/// The OpenAPI paths and schemas of every route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    table()
        .into_iter()
        .fold(OpenApiRouter::<AppState>::new(), |api, route| {
            api.routes(route.handler)
        })
        .into_openapi()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tenant_route_is_under_v1_and_every_admin_route_under_admin() {
        for route in table() {
            for path in route.handler.1.paths.keys() {
                let prefix = match route.access {
                    Access::Tenant(_) => "/v1/",
                    Access::Admin => "/admin/v1/",
                };
                assert!(path.starts_with(prefix), "{path}");
            }
        }
        assert_eq!(
            policy(&Method::PATCH, "/v1/memories/{id}"),
            Some(Policy {
                action: "memory.update",
                permission: Permission::MemoryWrite
            })
        );
        assert_eq!(policy(&Method::PUT, "/v1/memories/{id}"), None);
        assert_eq!(policy(&Method::GET, "/admin/v1/tenants"), None);
    }
}
