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
    /// The one scope the key's memory calls are confined to; none for a tenant-wide key. Left
    /// out of the record when none, so a tenant-wide key's event is stored as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<KeyScope>,
}

/// The scope a key (or an MCP connection) is bound to: one end user, and optionally one agent
/// and one session of theirs. Every memory such a caller writes carries these ids, and it
/// reads, changes and deletes only memories that carry them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyScope {
    pub user_id: String,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
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
