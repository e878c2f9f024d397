//! API keys: issued to a tenant (shown once, stored only as a hash), and revoked.

use axum::extract::{Path, State};
use base64::Engine;
use rand::RngCore;

use super::{context, record};
use crate::api::envelope::Created;
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::position::Position;
use crate::api::state::AppState;
use crate::command::admin;
use crate::wire::admin::{CreateKeyRequest, IssuedKey, RevokedKey};
use crate::wire::envelope::{Data, ErrorEnvelope};

type IssuedKeyEnvelope = Data<IssuedKey>;
type RevokedKeyEnvelope = Data<RevokedKey>;

/// A new API key: 32 random bytes, shown once, stored only as its blake3 hash.
pub fn new_api_key() -> (String, [u8; 32]) {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let key = format!(
        "amk_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    let hash = *blake3::hash(key.as_bytes()).as_bytes();
    (key, hash)
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/keys", tag = "admin", security(("admin_token" = [])), params(("id" = String, Path, description = "id")), request_body = CreateKeyRequest,
    responses((status = 201, description = "the key, shown once", body = IssuedKeyEnvelope), (status = 404, description = "tenant not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Json(request): Json<CreateKeyRequest>,
) -> Result<(Position, Created<IssuedKey>), ApiError> {
    let (key, hash) = new_api_key();
    let secret = admin::Secret { key, hash };
    let decision = admin::issue_key(&context(&state), &id, request, secret)?;
    let (position, issued) = record(&state, decision).await?;
    Ok((position, Created(issued)))
}

#[utoipa::path(delete, path = "/admin/v1/keys/{key_id}", tag = "admin", security(("admin_token" = [])), params(("key_id" = String, Path, description = "key_id")),
    responses((status = 200, description = "revoked", body = RevokedKeyEnvelope), (status = 404, description = "key not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn revoke_key(
    State(state): State<AppState>,
    Path(key_id): Path<String>,
) -> Result<(Position, Data<RevokedKey>), ApiError> {
    let decision = admin::revoke_key(&context(&state), &key_id)?;
    let (position, revoked) = record(&state, decision).await?;
    Ok((position, Data(revoked)))
}
