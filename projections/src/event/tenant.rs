//! The tenant events: tenants, their API keys and the credits they consume.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Permission, Plan};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantCreated {
    pub tenant_id: Uuid,
    pub name: String,
    pub plan: Plan,
    pub subscription_active: bool,
    pub credits: f64,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantUpdated {
    pub tenant_id: Uuid,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub plan: Option<Plan>,
    #[serde(default)]
    pub subscription_active: Option<bool>,
    #[serde(default)]
    pub credits: Option<f64>,
    pub updated_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyIssued {
    pub key_id: Uuid,
    pub tenant_id: Uuid,
    /// blake3 of the key; the key itself is shown once and never stored.
    #[serde(with = "serde_bytes")]
    pub key_hash: [u8; 32],
    pub permissions: Vec<Permission>,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyRevoked {
    pub key_id: Uuid,
    pub tenant_id: Uuid,
    pub revoked_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreditsConsumed {
    pub tenant_id: Uuid,
    pub credits: f64,
    pub usd: f64,
    pub at: i64,
}
