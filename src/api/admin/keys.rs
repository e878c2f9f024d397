//! API keys: issued to a tenant (shown once, stored only as a hash), and revoked.

use crate::api::position::Position;
use auditmem_projections::{Event, KeyIssued, KeyRevoked};
use axum::extract::{Path, State};
use base64::Engine;
use rand::RngCore;
use uuid::Uuid;

use super::tenants::tenant_by_path;
use crate::api::envelope::Created;
use crate::api::error::ApiError;
use crate::api::extract::Json;
use crate::api::state::AppState;
use crate::wire::admin::{CreateKeyRequest, IssuedKey, NewKey, RevokedKey};
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::time::{now_stored, Time};

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
    let t = tenant_by_path(&state, &id)?;
    let NewKey { permissions, name } = request.key()?;
    let (api_key, key_hash) = new_api_key();
    let key_id = Uuid::now_v7();
    let created_at = now_stored();
    let event = Event::KeyIssued(KeyIssued {
        key_id,
        tenant_id: t.id,
        key_hash,
        permissions: permissions.clone(),
        name: name.clone(),
        created_at,
    });
    let c = state.appender.append(vec![event]).await?;
    Ok((
        Position(c.last_seq),
        Created(IssuedKey {
            id: key_id,
            tenant_id: t.id,
            name,
            api_key,
            permissions,
            created_at: Time(created_at),
        }),
    ))
}

#[utoipa::path(delete, path = "/admin/v1/keys/{key_id}", tag = "admin", security(("admin_token" = [])), params(("key_id" = String, Path, description = "key_id")),
    responses((status = 200, description = "revoked", body = RevokedKeyEnvelope), (status = 404, description = "key not found (4040)", body = ErrorEnvelope)))]
pub(crate) async fn revoke_key(
    State(state): State<AppState>,
    Path(key_id): Path<String>,
) -> Result<(Position, Data<RevokedKey>), ApiError> {
    let not_found = || ApiError::not_found("key not found");
    let id = Uuid::parse_str(&key_id).map_err(|_| not_found())?;
    let key = state
        .projections
        .tenants
        .key_by_id(&id)?
        .ok_or_else(not_found)?;
    // Revoking again answers the first revocation.
    let (revoked_at, position) = match key.revoked_at {
        Some(at) => (at, state.appender.head().seq),
        None => {
            let at = now_stored();
            let c = state
                .appender
                .append(vec![Event::KeyRevoked(KeyRevoked {
                    key_id: id,
                    tenant_id: key.tenant_id,
                    revoked_at: at,
                })])
                .await?;
            (at, c.last_seq)
        }
    };
    Ok((
        Position(position),
        Data(RevokedKey {
            id,
            revoked: true,
            revoked_at: Time(revoked_at),
        }),
    ))
}
