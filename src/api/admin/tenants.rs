//! Tenants: create, list, read, change.

use crate::api::position::Position;
use auditmem_projections::tenants::Tenant as TenantState;
use auditmem_projections::{Event, TenantCreated, TenantUpdated};
use axum::extract::{Path, State};
use uuid::Uuid;

use crate::api::envelope::Created;
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::state::AppState;
use crate::wire::admin::{
    CreateTenantRequest, NewTenant, Tenant, TenantChanges, TenantList, UpdateTenantRequest,
};
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::time::now_stored;

type TenantEnvelope = Data<Tenant>;
type TenantListEnvelope = Data<TenantList>;

/// The tenant `id` names in a path; an id that is no id is a tenant that does not exist.
pub(super) fn tenant_by_path(state: &AppState, id: &str) -> Result<TenantState, ApiError> {
    let not_found = || ApiError::not_found("tenant not found");
    let id = Uuid::parse_str(id).map_err(|_| not_found())?;
    state.projections.tenants.tenant(&id)?.ok_or_else(not_found)
}

#[utoipa::path(post, path = "/admin/v1/tenants", tag = "admin", security(("admin_token" = [])), request_body = CreateTenantRequest,
    responses((status = 201, description = "the tenant", body = TenantEnvelope)))]
pub(crate) async fn create_tenant(
    State(state): State<AppState>,
    Json(new): Json<CreateTenantRequest>,
) -> Result<(Position, Created<Tenant>), ApiError> {
    let NewTenant {
        name,
        plan,
        subscription_active,
        credits,
    } = new;
    let id = Uuid::now_v7();
    let event = Event::TenantCreated(TenantCreated {
        tenant_id: id,
        name,
        plan,
        subscription_active,
        credits,
        created_at: now_stored(),
    });
    let c = state.appender.append(vec![event]).await?;
    let t = tenant_by_path(&state, &id.to_string())
        .map_err(|_| ApiError::internal("tenant missing after create"))?;
    Ok((Position(c.last_seq), Created(Tenant::from(&t))))
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
    let t = tenant_by_path(&state, &id)?;
    let TenantChanges {
        name,
        plan,
        subscription_active,
        credits,
    } = update.changes()?;
    let event = Event::TenantUpdated(TenantUpdated {
        tenant_id: t.id,
        name,
        plan,
        subscription_active,
        credits,
        updated_at: now_stored(),
    });
    let c = state.appender.append(vec![event]).await?;
    Ok((
        Position(c.last_seq),
        Data(Tenant::from(&tenant_by_path(&state, &id)?)),
    ))
}
