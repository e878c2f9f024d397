//! A whole tenant erased (`POST /admin/v1/tenants/{id}/erasures`): every key of the tenant
//! destroyed once the erasure event is durable, answered with the same receipt as
//! `POST /v1/erasures`.

use axum::extract::{Path, State};

use super::{context, record};
use crate::api::envelope::Created;
use crate::api::erasure::receipt_made;
use crate::api::error::ApiError;
use crate::api::position::Position;
use crate::api::state::AppState;
use crate::command::{admin, erase};
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::erasure::{ErasureReceipt, ErasureTarget};

type ErasureReceiptEnvelope = Data<ErasureReceipt>;

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/erasures", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")),
    responses((status = 201, description = "erased: the receipt", body = ErasureReceiptEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn erase_tenant(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<(Position, Created<ErasureReceipt>), ApiError> {
    let tenant = admin::tenant_by_path(&context(&state), &id)?;
    // Deciding reads every memory of the tenant: on the blocking pool; the receipt waits for
    // the keys' destroy and counts every entry, reading the log in the idle scheduling class,
    // as for `POST /v1/erasures`.
    let deciding = state.clone();
    let decision = tokio::task::spawn_blocking(move || {
        erase::erase(&context(&deciding), tenant.id, ErasureTarget::Tenant)
    })
    .await
    .map_err(ApiError::internal)??;
    let (position, planned) = record(&state, decision).await?;
    let receipt = receipt_made(state, planned).await?;
    Ok((position, Created(receipt)))
}
