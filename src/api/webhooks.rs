//! `/v1/webhooks`: a tenant's webhook endpoints and their delivery logs (the handlers of
//! `crate::command::webhook`; delivery itself is `crate::webhooks`). Every route needs
//! `webhooks.manage`; another tenant's endpoint answers as a missing one (404, 4040).
//!
//! The two answers that show a secret (create, rotate) are not copied into the request's
//! audit entry: whoever reads the audit log does not learn the secret.

use auditmem_projections::webhooks::{WebhookDelivery, WebhookEndpoint};
use axum::extract::{Path, State};
use axum::Extension;
use uuid::Uuid;

use super::envelope::Created;
use super::error::ApiError;
use super::extract::Json;
use super::gate::{Caller, Recorded};
use super::state::AppState;
use crate::command::webhook::{self, excerpt_aad, SECRET_BYTES};
use crate::command::{Context, Refusal};
use crate::wire::envelope::{Data, ErrorEnvelope};
use crate::wire::time::Time;
use crate::wire::webhook::{
    CreateWebhook, DeliveryList, DeliveryView, UpdateWebhook, WebhookChange, WebhookCreated,
    WebhookDeletedView, WebhookList, WebhookView,
};

type WebhookEnvelope = Data<WebhookView>;
type WebhookCreatedEnvelope = Data<WebhookCreated>;
type WebhookListEnvelope = Data<WebhookList>;
type DeliveryListEnvelope = Data<DeliveryList>;
type DeliveryEnvelope = Data<DeliveryView>;
type WebhookDeletedEnvelope = Data<WebhookDeletedView>;

/// Most deliveries the delivery log shows: all an endpoint keeps, unless more than that many
/// are pending at once.
pub const DELIVERIES_SHOWN: usize = auditmem_projections::webhooks::DELIVERY_LOG_KEPT;

fn view(e: &WebhookEndpoint) -> WebhookView {
    let overlap = e.previous_until.filter(|u| *u > crate::wire::time::now());
    WebhookView {
        id: e.endpoint_id,
        url: e.url.clone(),
        event_types: e.event_types.clone(),
        audit_actions: e.audit_actions.clone(),
        enabled: e.enabled,
        disabled_reason: e.disabled_reason.clone(),
        delivered_through: e.cursor,
        previous_secret_expires_at: overlap.map(Time),
        signature_scheme: e.scheme.into(),
        public_key: e.public_key.clone(),
        previous_public_key: overlap.and(e.previous_public_key.clone()),
        created_at: Time(e.created_at),
        updated_at: Time(e.updated_at),
    }
}

/// A delivery as the API shows it, its answer's excerpt opened (`null` once the tenant's key
/// is destroyed).
fn delivery_view(state: &AppState, d: WebhookDelivery) -> DeliveryView {
    let aad = excerpt_aad(&d.endpoint_id, &d.delivery_id);
    let response_excerpt = d.response_excerpt.as_ref().and_then(|s| {
        let opened = s.open_with(&*state.projections.keys, &aad);
        opened
            .map_err(|e| tracing::warn!(error = %e, "opening a webhook answer's excerpt"))
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    });
    DeliveryView {
        id: d.delivery_id,
        position: d.position,
        event_type: d.event_type,
        status: d.status,
        attempts: d.attempts,
        response_status: d.response_status,
        response_excerpt,
        error: d.error,
        next_try: d.next_try.map(Time),
        redelivery_of: d.redelivery_of,
        created_at: Time(d.created_at),
        updated_at: Time(d.updated_at),
    }
}

fn parse(id: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id.trim()).map_err(|_| ApiError::not_found(format!("{what} not found")))
}

/// 32 random bytes for a new secret.
fn new_secret() -> [u8; SECRET_BYTES] {
    let mut bytes = [0u8; SECRET_BYTES];
    auditmem_projections::seal::fill_random(&mut bytes);
    bytes
}

/// A URL the operator's settings allow, its host resolved now (a refusal is 400, 4000).
async fn allowed(state: &AppState, change: &WebhookChange) -> Result<(), ApiError> {
    if let Some(url) = &change.url {
        crate::webhooks::target::resolve(url, state.webhooks.allow_private)
            .await
            .map_err(ApiError::bad_request)?;
    }
    Ok(())
}

/// The endpoint as the projection holds it after the gate appended its event.
fn saved_view(saved: &auditmem_projections::event::WebhookSaved, cursor: u64) -> WebhookView {
    let e = WebhookEndpoint {
        tenant_id: saved.tenant_id,
        endpoint_id: saved.endpoint_id,
        url: saved.url.clone(),
        event_types: saved.event_types.clone(),
        audit_actions: saved.audit_actions.clone(),
        enabled: saved.enabled,
        disabled_reason: saved.disabled_reason.clone(),
        secret: saved.secret.clone(),
        previous_secret: saved.previous_secret.clone(),
        previous_until: saved.previous_until,
        created_at: saved.created_at,
        updated_at: saved.updated_at,
        cursor,
        retrying: None,
        redeliveries: Vec::new(),
        scheme: saved.scheme,
        public_key: saved.public_key.clone(),
        previous_public_key: saved.previous_public_key.clone(),
    };
    view(&e)
}

#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", security(("api_key" = [])),
    request_body = CreateWebhook,
    responses((status = 201, description = "created: the endpoint and its secret (hmac-sha256), shown this once, or its public key (ed25519)", body = WebhookCreatedEnvelope), (status = 400, description = "invalid field, or a URL the operator's settings refuse (4000)", body = ErrorEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 409, description = "the tenant has 16 webhooks already (4090)", body = ErrorEnvelope)))]
pub(crate) async fn create_webhook(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(change): Json<CreateWebhook>,
) -> Result<Recorded<Created<WebhookCreated>>, ApiError> {
    allowed(&state, &change).await?;
    let ctx = Context::service(&state.projections);
    let decision = webhook::create(&ctx, caller.tenant.id, change, &new_secret())?;
    // The cursor starts at the endpoint's own event, which the gate appends: until then the
    // head is the closest figure the answer can show.
    let head = state.appender.head().seq;
    let mut recorded = Recorded::decided(decision, |w| {
        Created(WebhookCreated {
            webhook: saved_view(&w.saved, head),
            secret: w.secret,
        })
    });
    recorded.ops.streamed = true;
    Ok(recorded)
}

#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks", security(("api_key" = [])),
    responses((status = 200, description = "the tenant's webhooks, oldest first", body = WebhookListEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope)))]
pub(crate) async fn list_webhooks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Recorded<Data<WebhookList>>, ApiError> {
    let endpoints = state
        .projections
        .tenants
        .webhooks_of(&caller.tenant.id)
        .map_err(|e| ApiError::from(Refusal::internal(e)))?;
    let list = WebhookList {
        webhooks: endpoints.iter().map(view).collect(),
    };
    Ok(Recorded::new(Data(list), Default::default()))
}

#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks", security(("api_key" = [])),
    params(("id" = String, Path, description = "webhook id")),
    responses((status = 200, description = "the webhook", body = WebhookEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 404, description = "missing or another tenant's (4040)", body = ErrorEnvelope)))]
pub(crate) async fn get_webhook(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<WebhookView>>, ApiError> {
    let ctx = Context::service(&state.projections);
    let e = webhook::endpoint(&ctx, caller.tenant.id, parse(&id, "webhook")?)?;
    Ok(Recorded::new(Data(view(&e)), Default::default()))
}

#[utoipa::path(patch, path = "/v1/webhooks/{id}", tag = "webhooks", security(("api_key" = [])),
    params(("id" = String, Path, description = "webhook id")),
    request_body = UpdateWebhook,
    responses((status = 200, description = "the webhook as changed", body = WebhookEnvelope), (status = 400, description = "invalid field, no field, signature_scheme (fixed at create), or a URL the operator's settings refuse (4000)", body = ErrorEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 404, description = "missing or another tenant's (4040)", body = ErrorEnvelope)))]
pub(crate) async fn update_webhook(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Json(change): Json<UpdateWebhook>,
) -> Result<Recorded<Data<WebhookView>>, ApiError> {
    let id = parse(&id, "webhook")?;
    allowed(&state, &change).await?;
    let ctx = Context::service(&state.projections);
    let cursor = webhook::endpoint(&ctx, caller.tenant.id, id)?.cursor;
    let decision = webhook::update(&ctx, caller.tenant.id, id, change)?;
    Ok(Recorded::decided(decision, |saved| {
        Data(saved_view(&saved, cursor))
    }))
}

#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", security(("api_key" = [])),
    params(("id" = String, Path, description = "webhook id")),
    responses((status = 200, description = "deleted: nothing more is sent to it", body = WebhookDeletedEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 404, description = "missing or another tenant's (4040)", body = ErrorEnvelope)))]
pub(crate) async fn delete_webhook(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<WebhookDeletedView>>, ApiError> {
    let ctx = Context::service(&state.projections);
    let decision = webhook::delete(&ctx, caller.tenant.id, parse(&id, "webhook")?)?;
    Ok(Recorded::decided(decision, |id| {
        Data(WebhookDeletedView { id, deleted: true })
    }))
}

#[utoipa::path(post, path = "/v1/webhooks/{id}/rotate-secret", tag = "webhooks", security(("api_key" = [])),
    params(("id" = String, Path, description = "webhook id")),
    responses((status = 200, description = "the new secret (hmac-sha256), shown this once, or the new public key (ed25519); the old key signs too for 24 hours", body = WebhookCreatedEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 404, description = "missing or another tenant's (4040)", body = ErrorEnvelope)))]
pub(crate) async fn rotate_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<WebhookCreated>>, ApiError> {
    let id = parse(&id, "webhook")?;
    let ctx = Context::service(&state.projections);
    let cursor = webhook::endpoint(&ctx, caller.tenant.id, id)?.cursor;
    let decision = webhook::rotate(&ctx, caller.tenant.id, id, &new_secret())?;
    let mut recorded = Recorded::decided(decision, |w| {
        Data(WebhookCreated {
            webhook: saved_view(&w.saved, cursor),
            secret: w.secret,
        })
    });
    recorded.ops.streamed = true;
    Ok(recorded)
}

#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks", security(("api_key" = [])),
    params(("id" = String, Path, description = "webhook id")),
    responses((status = 200, description = "the endpoint's last 100 deliveries, newest first", body = DeliveryListEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 404, description = "missing or another tenant's (4040)", body = ErrorEnvelope)))]
pub(crate) async fn list_deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Recorded<Data<DeliveryList>>, ApiError> {
    let id = parse(&id, "webhook")?;
    let ctx = Context::service(&state.projections);
    webhook::endpoint(&ctx, caller.tenant.id, id)?;
    let deliveries = state
        .projections
        .tenants
        .webhook_deliveries(&caller.tenant.id, &id, DELIVERIES_SHOWN)
        .map_err(|e| ApiError::from(Refusal::internal(e)))?;
    let list = DeliveryList {
        deliveries: deliveries
            .into_iter()
            .map(|d| delivery_view(&state, d))
            .collect(),
    };
    Ok(Recorded::new(Data(list), Default::default()))
}

#[utoipa::path(post, path = "/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver", tag = "webhooks", security(("api_key" = [])),
    params(("id" = String, Path, description = "webhook id"), ("delivery_id" = String, Path, description = "delivery id")),
    responses((status = 202, description = "queued: the new delivery, sent before the endpoint's next event", body = DeliveryEnvelope), (status = 403, description = "permission webhooks.manage (4030)", body = ErrorEnvelope), (status = 404, description = "webhook or delivery missing or another tenant's (4040)", body = ErrorEnvelope), (status = 409, description = "the webhook is disabled (4090)", body = ErrorEnvelope)))]
pub(crate) async fn redeliver(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, delivery)): Path<(String, String)>,
) -> Result<Recorded<Accepted<DeliveryView>>, ApiError> {
    let id = parse(&id, "webhook")?;
    let delivery = parse(&delivery, "delivery")?;
    let ctx = Context::service(&state.projections);
    let decision = webhook::redeliver(&ctx, caller.tenant.id, id, delivery)?;
    Ok(Recorded::decided(decision, |e| {
        Accepted(DeliveryView {
            id: e.delivery_id,
            position: e.position,
            event_type: e.event_type,
            status: "pending".into(),
            attempts: 0,
            response_status: None,
            response_excerpt: None,
            error: None,
            next_try: Some(Time(e.requested_at)),
            redelivery_of: Some(e.of),
            created_at: Time(e.requested_at),
            updated_at: Time(e.requested_at),
        })
    }))
}

/// `{"success": true, "data": T}` with 202: queued.
pub struct Accepted<T>(pub T);

impl<T: serde::Serialize> axum::response::IntoResponse for Accepted<T> {
    fn into_response(self) -> axum::response::Response {
        super::envelope::json_response(axum::http::StatusCode::ACCEPTED, &Data(self.0))
    }
}
