//! The webhook events: a tenant's endpoints (`WebhookSaved`, `WebhookDeleted`) and each
//! delivery attempt the delivery worker made (`WebhookAttempted`) or a caller asked for
//! (`WebhookRedeliveryRequested`), and on a cluster the node that delivers (`WebhookLeaseTaken`).
//!
//! An endpoint's signing secret is never in the clear here: `WebhookSaved` carries it sealed
//! under the tenant's data key, bound to the endpoint (`webhook-secret/v1 || endpoint id`).
//! For an Ed25519 endpoint that secret is the private key's 32-byte seed; its public key,
//! which is no secret, is carried in the clear. A `WebhookSaved` written before endpoints had
//! a scheme reads as HMAC-SHA256 with no public key (the fields default).
//! Every node of a cluster folds the same events, so every node knows every endpoint and how
//! far its deliveries went.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::seal::Sealed;

/// An endpoint's whole definition, as created, changed, rotated or disabled: the last one
/// folded is the endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookSaved {
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub url: String,
    /// The event types delivered (`audit.entry`, `memory.created`, ...).
    pub event_types: Vec<String>,
    /// `audit.entry` only for these actions; every action when empty.
    pub audit_actions: Vec<String>,
    pub enabled: bool,
    /// Why the service disabled it (a 410 answer), when it did.
    pub disabled_reason: Option<String>,
    /// The signing secret's bytes, sealed.
    pub secret: Sealed,
    /// The secret before the last rotation, which still signs until `previous_until`.
    pub previous_secret: Option<Sealed>,
    pub previous_until: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// How deliveries are signed. Last fields, defaulted: events are encoded as arrays, and
    /// older ones end before them.
    #[serde(default)]
    pub scheme: SignatureScheme,
    /// Ed25519 only: the public key of `secret` (`whpk_` and the base64 of its 32 bytes).
    #[serde(default)]
    pub public_key: Option<String>,
    /// Ed25519 only: the public key of `previous_secret`.
    #[serde(default)]
    pub previous_public_key: Option<String>,
}

/// How an endpoint's deliveries are signed (Standard Webhooks): `v1,` HMAC-SHA256 under a
/// shared `whsec_` secret, or `v1a,` Ed25519 under a private key whose public key the
/// receiver holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignatureScheme {
    #[default]
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    #[serde(rename = "ed25519")]
    Ed25519,
}

impl SignatureScheme {
    /// The name the API uses.
    pub fn name(self) -> &'static str {
        match self {
            SignatureScheme::HmacSha256 => "hmac-sha256",
            SignatureScheme::Ed25519 => "ed25519",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookDeleted {
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub deleted_at: i64,
}

/// One attempt to deliver the event at log position `position` to an endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookAttempted {
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub delivery_id: Uuid,
    pub position: u64,
    pub event_type: String,
    /// 1 for the first attempt of the delivery.
    pub attempt: u32,
    /// The endpoint answered 2xx.
    pub delivered: bool,
    pub response_status: Option<u16>,
    /// At most the first KiB of the answer's body, sealed under the tenant's key: a receiver
    /// may echo what it was sent, personal fields included, and the log keeps no clear copy.
    pub response_excerpt: Option<Sealed>,
    /// Why no answer came (refused target, timeout, connection error).
    pub error: Option<String>,
    /// When the next attempt is due; none when there is none (delivered, or given up).
    pub next_try: Option<i64>,
    /// The endpoint is disabled by this attempt (a 410), with this reason.
    pub disable: Option<String>,
    /// A redelivery asked by hand: it does not move the endpoint's cursor.
    pub redelivery: bool,
    pub at: i64,
}

/// A caller asked for the event of an earlier delivery to be sent again, as a new delivery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookRedeliveryRequested {
    pub tenant_id: Uuid,
    pub endpoint_id: Uuid,
    pub delivery_id: Uuid,
    /// The delivery whose event is sent again.
    pub of: Uuid,
    pub position: u64,
    pub event_type: String,
    pub requested_at: i64,
}

/// On a cluster: `node_id` (a random id per process) delivers every endpoint's events until
/// `until`. A node takes or renews the lease under a precondition that it is as the node read
/// it, so exactly one node holds it at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookLeaseTaken {
    pub node_id: Uuid,
    pub until: i64,
    pub at: i64,
}
