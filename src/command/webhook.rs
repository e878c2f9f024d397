//! Webhook commands: create, change, delete an endpoint, rotate its secret, ask for a
//! redelivery. Each decides the one event that makes it so; the handler gathered what needs
//! I/O first (the secret's random bytes, the check that the URL's host is a public address).
//!
//! For an `ed25519` endpoint the 32 random bytes are the Ed25519 private key's seed: sealed
//! the same way, never shown; its public key is what the answer shows.
//!
//! The secret is sealed under the tenant's data key, bound to the endpoint
//! (`webhook-secret/v1 || endpoint id`): the log never holds it in the clear, and erasing the
//! tenant destroys it with the rest of the tenant's data.

use auditmem_projections::event::{
    Event, SignatureScheme, WebhookDeleted, WebhookRedeliveryRequested, WebhookSaved,
};
use auditmem_projections::seal::{Sealed, Subject};
use auditmem_projections::webhooks::WebhookEndpoint;
use base64::Engine;
use uuid::Uuid;

use super::{Context, Decision, Refusal};
use crate::registry::ErrorCode;
use crate::wire::webhook::{WebhookChange, WebhookEventType};

/// Most endpoints a tenant may have.
pub const MAX_ENDPOINTS: usize = 16;

/// How long the secret before a rotation keeps signing beside the new one.
pub const ROTATION_OVERLAP_MICROS: i64 = 24 * 3600 * 1_000_000;

/// The secret's random bytes (32: Standard Webhooks allows 24 to 64; an Ed25519 seed is 32).
pub const SECRET_BYTES: usize = 32;

/// The associated data an endpoint's secret is sealed with.
pub fn secret_aad(endpoint: &Uuid) -> Vec<u8> {
    let mut aad = b"webhook-secret/v1".to_vec();
    aad.extend_from_slice(endpoint.as_bytes());
    aad
}

/// The associated data a delivery attempt's answer excerpt is sealed with.
pub fn excerpt_aad(endpoint: &Uuid, delivery: &Uuid) -> Vec<u8> {
    let mut aad = b"webhook-excerpt/v1".to_vec();
    aad.extend_from_slice(endpoint.as_bytes());
    aad.extend_from_slice(delivery.as_bytes());
    aad
}

/// The secret as shown to the caller: `whsec_` and its bytes in base64.
pub fn secret_text(bytes: &[u8]) -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A created or rotated endpoint: its state after the event, and (`hmac-sha256`) its secret in
/// the clear for the one answer that shows it.
pub struct WithSecret {
    pub saved: WebhookSaved,
    pub secret: Option<String>,
}

/// What the caller is shown of new key bytes under `scheme`: the `whsec_` secret, or the
/// `whpk_` public key of the Ed25519 seed.
fn shown(
    scheme: SignatureScheme,
    secret: &[u8],
) -> Result<(Option<String>, Option<String>), Refusal> {
    match scheme {
        SignatureScheme::HmacSha256 => Ok((Some(secret_text(secret)), None)),
        SignatureScheme::Ed25519 => {
            let key = crate::webhooks::sign::ed25519_key(secret)
                .ok_or_else(|| Refusal::internal("an Ed25519 seed must be 32 bytes"))?;
            Ok((None, Some(crate::webhooks::sign::public_key_text(&key))))
        }
    }
}

fn seal_secret(
    ctx: &Context<'_>,
    tenant: Uuid,
    endpoint: Uuid,
    secret: &[u8],
) -> Result<Sealed, Refusal> {
    Ok(Sealed::seal_for(
        &*ctx.projections.keys,
        &[Subject::Tenant(tenant)],
        &secret_aad(&endpoint),
        secret,
    )?)
}

fn names(types: &[WebhookEventType]) -> Vec<String> {
    types.iter().map(|t| t.name().to_owned()).collect()
}

/// The tenant's endpoint, or 404 (another tenant's is as missing as one that never existed).
pub fn endpoint(ctx: &Context<'_>, tenant: Uuid, id: Uuid) -> Result<WebhookEndpoint, Refusal> {
    ctx.projections
        .tenants
        .webhook(&tenant, &id)
        .map_err(Refusal::internal)?
        .ok_or_else(|| Refusal::not_found("webhook not found"))
}

/// `POST /v1/webhooks`. `change` has every field (the create body's check fills them).
pub fn create(
    ctx: &Context<'_>,
    tenant: Uuid,
    change: WebhookChange,
    secret: &[u8],
) -> Result<Decision<WithSecret>, Refusal> {
    let existing = ctx
        .projections
        .tenants
        .webhooks_of(&tenant)
        .map_err(Refusal::internal)?;
    if existing.len() >= MAX_ENDPOINTS {
        return Err(Refusal::new(
            ErrorCode::Conflict,
            format!(
                "the tenant has {MAX_ENDPOINTS} webhooks, the most it may have; delete one first"
            ),
        ));
    }
    let id = ctx.id();
    let now = ctx.now_stored();
    let scheme = change.signature_scheme.unwrap_or_default();
    let (shown_secret, public_key) = shown(scheme, secret)?;
    let saved = WebhookSaved {
        tenant_id: tenant,
        endpoint_id: id,
        url: change.url.unwrap_or_default(),
        event_types: names(&change.event_types.unwrap_or_default()),
        audit_actions: change.audit_actions.unwrap_or_default(),
        enabled: change.enabled.unwrap_or(true),
        disabled_reason: None,
        secret: seal_secret(ctx, tenant, id, secret)?,
        previous_secret: None,
        previous_until: None,
        created_at: now,
        updated_at: now,
        scheme,
        public_key,
        previous_public_key: None,
    };
    let event = Event::WebhookSaved(Box::new(saved.clone()));
    Ok(Decision::new(
        WithSecret {
            saved,
            secret: shown_secret,
        },
        vec![event],
    ))
}

/// The endpoint's definition as a `WebhookSaved` to change.
fn as_saved(e: &WebhookEndpoint, now: i64) -> WebhookSaved {
    WebhookSaved {
        tenant_id: e.tenant_id,
        endpoint_id: e.endpoint_id,
        url: e.url.clone(),
        event_types: e.event_types.clone(),
        audit_actions: e.audit_actions.clone(),
        enabled: e.enabled,
        disabled_reason: e.disabled_reason.clone(),
        secret: e.secret.clone(),
        previous_secret: e.previous_secret.clone(),
        previous_until: e.previous_until,
        created_at: e.created_at,
        updated_at: now,
        scheme: e.scheme,
        public_key: e.public_key.clone(),
        previous_public_key: e.previous_public_key.clone(),
    }
}

/// `PATCH /v1/webhooks/{id}`.
pub fn update(
    ctx: &Context<'_>,
    tenant: Uuid,
    id: Uuid,
    change: WebhookChange,
) -> Result<Decision<WebhookSaved>, Refusal> {
    let current = endpoint(ctx, tenant, id)?;
    let mut saved = as_saved(&current, ctx.now_stored());
    if let Some(url) = change.url {
        saved.url = url;
    }
    if let Some(types) = change.event_types {
        saved.event_types = names(&types);
    }
    if let Some(actions) = change.audit_actions {
        saved.audit_actions = actions;
    }
    if let Some(enabled) = change.enabled {
        saved.enabled = enabled;
        if enabled {
            saved.disabled_reason = None;
        }
    }
    let event = Event::WebhookSaved(Box::new(saved.clone()));
    Ok(Decision::new(saved, vec![event]))
}

/// `DELETE /v1/webhooks/{id}`.
pub fn delete(ctx: &Context<'_>, tenant: Uuid, id: Uuid) -> Result<Decision<Uuid>, Refusal> {
    endpoint(ctx, tenant, id)?;
    let event = Event::WebhookDeleted(WebhookDeleted {
        tenant_id: tenant,
        endpoint_id: id,
        deleted_at: ctx.now_stored(),
    });
    Ok(Decision::new(id, vec![event]))
}

/// `POST /v1/webhooks/{id}/rotate-secret`: `secret` signs from now on; the current one signs
/// too for [`ROTATION_OVERLAP_MICROS`]. The scheme stays: for `ed25519`, `secret` is the new
/// key pair's seed and the current public key is kept beside it for the overlap.
pub fn rotate(
    ctx: &Context<'_>,
    tenant: Uuid,
    id: Uuid,
    secret: &[u8],
) -> Result<Decision<WithSecret>, Refusal> {
    let current = endpoint(ctx, tenant, id)?;
    let now = ctx.now_stored();
    let mut saved = as_saved(&current, now);
    let (shown_secret, public_key) = shown(current.scheme, secret)?;
    saved.previous_secret = Some(current.secret.clone());
    saved.previous_until = Some(now + ROTATION_OVERLAP_MICROS);
    saved.secret = seal_secret(ctx, tenant, id, secret)?;
    saved.previous_public_key = current.public_key.clone();
    saved.public_key = public_key;
    let event = Event::WebhookSaved(Box::new(saved.clone()));
    Ok(Decision::new(
        WithSecret {
            saved,
            secret: shown_secret,
        },
        vec![event],
    ))
}

/// `POST /v1/webhooks/{id}/deliveries/{delivery_id}/redeliver`: the delivery's event sent
/// again, as a new delivery the worker makes before the endpoint's next event.
pub fn redeliver(
    ctx: &Context<'_>,
    tenant: Uuid,
    id: Uuid,
    delivery: Uuid,
) -> Result<Decision<WebhookRedeliveryRequested>, Refusal> {
    let current = endpoint(ctx, tenant, id)?;
    let of = ctx
        .projections
        .tenants
        .webhook_delivery(&tenant, &id, &delivery)
        .map_err(Refusal::internal)?
        .ok_or_else(|| Refusal::not_found("delivery not found"))?;
    if !current.enabled {
        return Err(Refusal::new(
            ErrorCode::Conflict,
            "the webhook is disabled; enable it before asking for a redelivery",
        ));
    }
    let requested = WebhookRedeliveryRequested {
        tenant_id: tenant,
        endpoint_id: id,
        delivery_id: ctx.id(),
        of: of.delivery_id,
        position: of.position,
        event_type: of.event_type,
        requested_at: ctx.now_stored(),
    };
    let event = Event::WebhookRedeliveryRequested(requested.clone());
    Ok(Decision::new(requested, vec![event]))
}
