//! Tenants: create, list, read, change.

use auditmem_projections::tenants::Tenant as TenantState;
use axum::extract::{Path, State};

use super::{context, record};
use crate::api::envelope::Created;
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::position::Position;
use crate::api::state::AppState;
use crate::command::admin;
use crate::wire::admin::{CreateTenantRequest, Tenant, TenantList, UpdateTenantRequest};
use crate::wire::envelope::{Data, ErrorEnvelope};

type TenantEnvelope = Data<Tenant>;
type TenantListEnvelope = Data<TenantList>;

/// The tenant `id` names in a path; an id that is no id is a tenant that does not exist.
fn tenant_by_path(state: &AppState, id: &str) -> Result<TenantState, ApiError> {
    Ok(admin::tenant_by_path(&context(state), id)?)
}

#[utoipa::path(post, path = "/admin/v1/tenants", tag = "admin", security(("admin_token" = [])), request_body = CreateTenantRequest,
    responses((status = 201, description = "the tenant", body = TenantEnvelope)))]
pub(crate) async fn create_tenant(
    State(state): State<AppState>,
    Json(new): Json<CreateTenantRequest>,
) -> Result<(Position, Created<Tenant>), ApiError> {
    let decision = admin::create_tenant(&context(&state), new);
    let (position, tenant) = record(&state, decision).await?;
    Ok((position, Created(tenant)))
}

#[utoipa::path(get, path = "/admin/v1/tenants", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, description = "every tenant", body = TenantListEnvelope)))]
pub(crate) async fn list_tenants(
    State(state): State<AppState>,
) -> Result<Data<TenantList>, ApiError> {
    let tenants: Vec<Tenant> = state
        .projections
        .tenants
        .tenants()?
        .iter()
        .map(Tenant::from)
        .collect();
    Ok(Data(TenantList {
        total: tenants.len(),
        tenants,
    }))
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")),
    responses((status = 200, description = "the tenant", body = TenantEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_tenant(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Data<Tenant>, ApiError> {
    Ok(Data(Tenant::from(&tenant_by_path(&state, &id)?)))
}

#[utoipa::path(patch, path = "/admin/v1/tenants/{id}", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")), request_body = UpdateTenantRequest,
    responses((status = 200, description = "the tenant", body = TenantEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn update_tenant(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(update): Json<UpdateTenantRequest>,
) -> Result<(Position, Data<Tenant>), ApiError> {
    let decision = admin::update_tenant(&context(&state), &id, update)?;
    let (position, tenant) = record(&state, decision).await?;
    Ok((position, Data(tenant)))
}
