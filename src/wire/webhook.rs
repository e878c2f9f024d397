//! Webhooks on the wire: the bodies of `POST`/`PATCH /v1/webhooks`, an endpoint and its
//! deliveries as the API shows them (docs/WEBHOOKS.md). What needs the operator's settings
//! (whether a plain-HTTP or private target is allowed) is checked by the command, not here.

use auditmem_projections::event::SignatureScheme;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::envelope::Payload;
use super::field::Invalid;
use super::time::Time;
use super::{empty_refused, unknown_field_named, Body, Refusal};

/// Longest URL an endpoint may have.
pub const MAX_URL: usize = 2048;
/// Most actions an `audit.entry` filter names.
pub const MAX_AUDIT_ACTIONS: usize = 32;
/// Longest action name in a filter.
pub const MAX_ACTION: usize = 64;
/// What a PATCH naming `signature_scheme` answers.
pub const SCHEME_FIXED: &str = "signature_scheme cannot be changed; create a new webhook with the scheme wanted, then delete this one (rotate-secret renews the key of the same scheme)";

/// What an endpoint is sent.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
pub enum WebhookEventType {
    /// Every audit entry of the tenant (or those of `audit_actions`).
    #[serde(rename = "audit.entry")]
    #[strum(serialize = "audit.entry")]
    AuditEntry,
    #[serde(rename = "memory.created")]
    #[strum(serialize = "memory.created")]
    MemoryCreated,
    #[serde(rename = "memory.updated")]
    #[strum(serialize = "memory.updated")]
    MemoryUpdated,
    /// One memory, memories of a type, or memories matching a filter, deleted.
    #[serde(rename = "memory.deleted")]
    #[strum(serialize = "memory.deleted")]
    MemoryDeleted,
    #[serde(rename = "memory.superseded")]
    #[strum(serialize = "memory.superseded")]
    MemorySuperseded,
    #[serde(rename = "memory.expired")]
    #[strum(serialize = "memory.expired")]
    MemoryExpired,
    #[serde(rename = "erasure.completed")]
    #[strum(serialize = "erasure.completed")]
    ErasureCompleted,
    #[serde(rename = "export.completed")]
    #[strum(serialize = "export.completed")]
    ExportCompleted,
}

impl WebhookEventType {
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// How an endpoint's deliveries are signed (Standard Webhooks). Chosen at create; a PATCH
/// cannot change it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum WebhookSignatureScheme {
    /// `v1,`: HMAC-SHA256 under the `whsec_` secret shown at create.
    #[default]
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    /// `v1a,`: Ed25519 under a private key the service keeps; the receiver verifies with the
    /// `whpk_` public key.
    #[serde(rename = "ed25519")]
    Ed25519,
}

impl From<WebhookSignatureScheme> for SignatureScheme {
    fn from(s: WebhookSignatureScheme) -> Self {
        match s {
            WebhookSignatureScheme::HmacSha256 => SignatureScheme::HmacSha256,
            WebhookSignatureScheme::Ed25519 => SignatureScheme::Ed25519,
        }
    }
}

impl From<SignatureScheme> for WebhookSignatureScheme {
    fn from(s: SignatureScheme) -> Self {
        match s {
            SignatureScheme::HmacSha256 => WebhookSignatureScheme::HmacSha256,
            SignatureScheme::Ed25519 => WebhookSignatureScheme::Ed25519,
        }
    }
}

/// `POST /v1/webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where events are posted: `https://...` (at most 2048 characters). A plain `http://` URL,
    /// or a host on a private, loopback or link-local address, only where the operator allows
    /// it (`--webhooks-allow-private-targets`).
    pub url: String,
    /// The events sent: at least one, each named once.
    pub event_types: Vec<WebhookEventType>,
    /// `audit.entry` only for entries with one of these actions (at most 32; every action when
    /// absent or empty).
    #[serde(default)]
    #[schema(nullable = false)]
    pub audit_actions: Option<Vec<String>>,
    /// Whether events are sent (default true).
    #[serde(default)]
    #[schema(nullable = false)]
    pub enabled: Option<bool>,
    /// How deliveries are signed: `hmac-sha256` (the default; a `whsec_` secret is answered)
    /// or `ed25519` (a `whpk_` public key is answered). Fixed for the endpoint's life.
    #[serde(default)]
    #[schema(nullable = false)]
    pub signature_scheme: Option<WebhookSignatureScheme>,
}

/// `PATCH /v1/webhooks/{id}`: at least one field; what is absent stays as it is.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateWebhook {
    #[schema(nullable = false)]
    pub url: Option<String>,
    #[schema(nullable = false)]
    pub event_types: Option<Vec<WebhookEventType>>,
    #[schema(nullable = false)]
    pub audit_actions: Option<Vec<String>>,
    /// Enabling a disabled endpoint sends what it missed, from the first event not delivered.
    #[schema(nullable = false)]
    pub enabled: Option<bool>,
}

/// A checked endpoint definition (every field given, for a create), or a change (for a
/// patch).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WebhookChange {
    pub url: Option<String>,
    pub event_types: Option<Vec<WebhookEventType>>,
    pub audit_actions: Option<Vec<String>>,
    pub enabled: Option<bool>,
    /// Only a create sets it.
    pub signature_scheme: Option<SignatureScheme>,
}

fn check_url(url: String) -> Result<String, Invalid> {
    let n = url.chars().count();
    if n > MAX_URL {
        return Err(Invalid(format!(
            "url is {n} characters; at most {MAX_URL} are allowed"
        )));
    }
    let parsed =
        reqwest::Url::parse(&url).map_err(|e| Invalid(format!("url is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(Invalid::new("url must be an https:// URL"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Invalid::new("url must name a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Invalid::new(
            "url must not carry credentials; the signature authenticates the service",
        ));
    }
    Ok(url)
}

fn check_types(mut types: Vec<WebhookEventType>) -> Result<Vec<WebhookEventType>, Invalid> {
    if types.is_empty() {
        return Err(Invalid::new(
            "event_types must name at least one event type",
        ));
    }
    let n = types.len();
    types.sort();
    types.dedup();
    if types.len() != n {
        return Err(Invalid::new("event_types names an event type twice"));
    }
    Ok(types)
}

fn check_actions(actions: Vec<String>) -> Result<Vec<String>, Invalid> {
    if actions.len() > MAX_AUDIT_ACTIONS {
        return Err(Invalid(format!(
            "audit_actions names {} actions; at most {MAX_AUDIT_ACTIONS} are allowed",
            actions.len()
        )));
    }
    for (i, a) in actions.iter().enumerate() {
        let n = a.chars().count();
        if n == 0 || n > MAX_ACTION {
            return Err(Invalid(format!(
                "audit_actions[{i}] is {n} characters; 1 to {MAX_ACTION} are allowed"
            )));
        }
    }
    Ok(actions)
}

impl Body for CreateWebhook {
    type Checked = WebhookChange;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<WebhookChange, Invalid> {
        Ok(WebhookChange {
            url: Some(check_url(self.url)?),
            event_types: Some(check_types(self.event_types)?),
            audit_actions: Some(check_actions(self.audit_actions.unwrap_or_default())?),
            enabled: Some(self.enabled.unwrap_or(true)),
            signature_scheme: Some(self.signature_scheme.unwrap_or_default().into()),
        })
    }
}

impl Body for UpdateWebhook {
    type Checked = WebhookChange;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        // The scheme is fixed at create: a receiver verifying one scheme would reject every
        // delivery the moment it changed, so a change is a new endpoint, not a patch.
        if e.unknown
            .as_ref()
            .is_some_and(|u| u.name == "signature_scheme")
        {
            return Invalid::new(SCHEME_FIXED);
        }
        unknown_field_named(e)
    }

    fn check(self) -> Result<WebhookChange, Invalid> {
        let change = WebhookChange {
            url: self.url.map(check_url).transpose()?,
            event_types: self.event_types.map(check_types).transpose()?,
            audit_actions: self.audit_actions.map(check_actions).transpose()?,
            enabled: self.enabled,
            signature_scheme: None,
        };
        if change == WebhookChange::default() {
            return Err(Invalid::new(
                "give at least one of url, event_types, audit_actions, enabled",
            ));
        }
        Ok(change)
    }
}

/// An endpoint as the API shows it; its secret only in [`WebhookCreated`].
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct WebhookView {
    pub id: Uuid,
    pub url: String,
    #[schema(value_type = Vec<WebhookEventType>)]
    pub event_types: Vec<String>,
    pub audit_actions: Vec<String>,
    pub enabled: bool,
    /// Why the service disabled it (it answered 410 Gone).
    pub disabled_reason: Option<String>,
    /// Every event of the tenant up to this log position was delivered or given up on.
    pub delivered_through: u64,
    /// Until when the secret before the last rotation still signs too.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub previous_secret_expires_at: Option<Time>,
    pub signature_scheme: WebhookSignatureScheme,
    /// `ed25519` only: `whpk_` and the base64 of the 32-byte Ed25519 public key that verifies
    /// the `v1a,` signatures. Not a secret: shown on every read.
    pub public_key: Option<String>,
    /// `ed25519` only: the public key before the last rotation, while its key still signs too
    /// (until `previous_secret_expires_at`).
    pub previous_public_key: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Time,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Time,
}

impl Payload for WebhookView {}

/// `POST /v1/webhooks` and `POST /v1/webhooks/{id}/rotate-secret`: the endpoint and, for
/// `hmac-sha256`, its signing secret, shown this once.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// `hmac-sha256` only: `whsec_` and the base64 of 32 random bytes, the Standard Webhooks
    /// secret that signs every delivery. Shown once. An `ed25519` endpoint has no secret to
    /// show (its private key never leaves the service): it answers `public_key` instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub secret: Option<String>,
}

impl Payload for WebhookCreated {}

#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<WebhookView>,
}

impl Payload for WebhookList {}

/// One delivery of an event to an endpoint.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: Uuid,
    /// The log position of the event (its `webhook-id` is `msg_<endpoint>_<position>`).
    pub position: u64,
    #[schema(value_type = WebhookEventType)]
    pub event_type: String,
    /// `pending` (to be tried at `next_try`), `delivered` or `failed` (no more tries).
    pub status: String,
    pub attempts: u32,
    /// The HTTP status of the last answer.
    pub response_status: Option<u16>,
    /// At most the first 1024 bytes of the last answer's body.
    pub response_excerpt: Option<String>,
    /// Why the last attempt got no answer.
    pub error: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_try: Option<Time>,
    /// The delivery this one sends again, for a redelivery.
    pub redelivery_of: Option<Uuid>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Time,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Time,
}

impl Payload for DeliveryView {}

/// An endpoint's deliveries, newest first (the last 100).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryView>,
}

impl Payload for DeliveryList {}

/// What `DELETE /v1/webhooks/{id}` answers.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct WebhookDeletedView {
    pub id: Uuid,
    pub deleted: bool,
}

impl Payload for WebhookDeletedView {}
