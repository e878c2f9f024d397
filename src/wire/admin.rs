//! The admin API's shapes: tenants, keys, and the log's head, checkpoint and public key.

use auditmem_projections::tenants::Tenant as TenantState;
use auditmem_projections::{Permission, Plan};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::envelope::Payload;
use super::field::{Check, Field, Invalid};
use super::time::Time;
use super::{Body, Params};

/// A tenant's or a key's name: 1 to 200 characters after trimming (stored trimmed).
fn check_name(name: &str) -> Result<String, Invalid> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > 200 {
        return Err(Invalid::new("name must be 1 to 200 characters"));
    }
    Ok(n.to_string())
}

fn check_credits(c: f64) -> Result<f64, Invalid> {
    if c.is_finite() && c >= 0.0 {
        Ok(c)
    } else {
        Err(Invalid::new("credits must be a number of at least 0"))
    }
}

impl Check for Plan {
    type Raw = String;

    fn check(raw: String) -> Result<Self, Invalid> {
        raw.parse().map_err(|e| Invalid(format!("plan: {e}")))
    }
}

impl Check for Permission {
    type Raw = String;

    fn check(raw: String) -> Result<Self, Invalid> {
        raw.parse()
            .map_err(|e| Invalid(format!("permissions: {e}")))
    }
}

/// `POST /admin/v1/tenants`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "`POST /admin/v1/tenants`.")]
pub struct CreateTenantRequest {
    /// 1 to 200 characters after trimming.
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: String,
    #[schema(value_type = Plan)]
    pub plan: Field<Plan>,
    /// Default true.
    #[serde(default)]
    pub subscription_active: Option<bool>,
    /// Default 0.
    #[serde(default)]
    #[schema(minimum = 0.0)]
    pub credits: Option<f64>,
}

/// A tenant to create, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTenant {
    pub name: String,
    pub plan: Plan,
    pub subscription_active: bool,
    pub credits: f64,
}

impl Body for CreateTenantRequest {
    type Checked = NewTenant;

    fn check(self) -> Result<NewTenant, Invalid> {
        Ok(NewTenant {
            name: check_name(&self.name)?,
            plan: self.plan.value()?,
            subscription_active: self.subscription_active.unwrap_or(true),
            credits: check_credits(self.credits.unwrap_or(0.0))?,
        })
    }
}

/// `PATCH /admin/v1/tenants/{id}`: at least one field that is not null.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "`PATCH /admin/v1/tenants/{id}`: at least one field that is not null.")]
pub struct UpdateTenantRequest {
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Plan>)]
    pub plan: Option<Field<Plan>>,
    #[serde(default)]
    pub subscription_active: Option<bool>,
    #[serde(default)]
    #[schema(minimum = 0.0)]
    pub credits: Option<f64>,
}

/// A tenant's changes, checked (each `None` leaves that field as it is).
#[derive(Clone, Debug, PartialEq)]
pub struct TenantChanges {
    pub name: Option<String>,
    pub plan: Option<Plan>,
    pub subscription_active: Option<bool>,
    pub credits: Option<f64>,
}

/// The tenant is looked up first (an update of a missing tenant is 404 whatever its values),
/// so the values are checked by [`UpdateTenantRequest::changes`].
impl Body for UpdateTenantRequest {
    type Checked = Self;

    fn check(self) -> Result<Self, Invalid> {
        Ok(self)
    }
}

impl UpdateTenantRequest {
    pub fn changes(self) -> Result<TenantChanges, Invalid> {
        if self.name.is_none()
            && self.plan.is_none()
            && self.subscription_active.is_none()
            && self.credits.is_none()
        {
            return Err(Invalid::new(
                "give at least one of name, plan, subscription_active, credits",
            ));
        }
        Ok(TenantChanges {
            name: self.name.as_deref().map(check_name).transpose()?,
            plan: self.plan.map(Field::value).transpose()?,
            subscription_active: self.subscription_active,
            credits: self.credits.map(check_credits).transpose()?,
        })
    }
}

/// `POST /admin/v1/tenants/{id}/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "`POST /admin/v1/tenants/{id}/keys`.")]
pub struct CreateKeyRequest {
    #[schema(value_type = Vec<Permission>, min_items = 1)]
    pub permissions: Vec<Field<Permission>>,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"\S")]
    pub name: Option<String>,
}

/// A key to issue, checked: its permissions deduplicated and sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct NewKey {
    pub permissions: Vec<Permission>,
    pub name: Option<String>,
}

/// The tenant is looked up first (a key for a missing tenant is 404 whatever its values), so
/// the values are checked by [`CreateKeyRequest::key`].
impl Body for CreateKeyRequest {
    type Checked = Self;

    fn check(self) -> Result<Self, Invalid> {
        Ok(self)
    }
}

impl CreateKeyRequest {
    pub fn key(self) -> Result<NewKey, Invalid> {
        if self.permissions.is_empty() {
            return Err(Invalid::new("permissions must name at least one of audit.read, audit.export, memory.read, memory.write"));
        }
        let mut permissions = Vec::new();
        for p in self.permissions {
            let p = p.value()?;
            if !permissions.contains(&p) {
                permissions.push(p);
            }
        }
        permissions.sort();
        Ok(NewKey {
            permissions,
            name: self.name.as_deref().map(check_name).transpose()?,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Tenant {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub name: String,
    pub plan: Plan,
    pub subscription_active: bool,
    pub credits: f64,
    #[schema(value_type = String)]
    pub created_at: Time,
    #[schema(value_type = String)]
    pub updated_at: Time,
}

impl From<&TenantState> for Tenant {
    fn from(t: &TenantState) -> Self {
        Tenant {
            id: t.id,
            name: t.name.clone(),
            plan: t.plan,
            subscription_active: t.subscription_active,
            credits: t.credits,
            created_at: Time(t.created_at),
            updated_at: Time(t.updated_at),
        }
    }
}

impl Payload for Tenant {}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
    #[schema(value_type = u64)]
    pub total: usize,
}

impl Payload for TenantList {}

/// A new key; `api_key` is shown here only.
#[derive(Debug, Serialize, ToSchema)]
#[schema(description = "A new key; `api_key` is shown here only.")]
pub struct IssuedKey {
    #[schema(value_type = String)]
    pub id: Uuid,
    #[schema(value_type = String)]
    pub tenant_id: Uuid,
    pub name: Option<String>,
    pub api_key: String,
    pub permissions: Vec<Permission>,
    #[schema(value_type = String)]
    pub created_at: Time,
}

impl Payload for IssuedKey {}

#[derive(Debug, Serialize, ToSchema)]
pub struct RevokedKey {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub revoked: bool,
    #[schema(value_type = String)]
    pub revoked_at: Time,
}

impl Payload for RevokedKey {}

/// The log's head: the last record's seq and hash (hex).
#[derive(Debug, Serialize, ToSchema)]
pub struct LogHead {
    pub seq: u64,
    pub hash: String,
}

impl Payload for LogHead {}

/// The key checkpoints are signed with.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicKey {
    /// Lower-case hex.
    pub public_key: String,
    /// Always `ed25519`.
    pub algorithm: &'static str,
    /// The checkpoints' origin, the name of the key in their signed notes.
    pub origin: Option<String>,
    /// The key as a C2SP signed-note verifier key (`<origin>+<key id>+<base64>`): what
    /// `auditmem verify --pubkey`, Go's `note.NewVerifier` and witnesses take.
    pub verifier_key: Option<String>,
}

impl Payload for PublicKey {}

impl Payload for crate::log::checkpoint::Checkpoint {}

/// The query of `GET /admin/v1/log`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// first seq, default 1
    #[param(value_type = Option<u64>, minimum = 1)]
    from: Option<String>,
}

impl Params for LogQuery {
    type Checked = u64;

    fn check(self) -> Result<u64, Invalid> {
        match self.from {
            None => Ok(1),
            Some(s) => s
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| Invalid::new("from must be a seq of at least 1")),
        }
    }
}

/// One line of `GET /admin/v1/log`: a stored record, base64.
#[derive(Debug, Serialize)]
pub struct LogLine {
    pub seq: u64,
    pub record: String,
}

/// `GET /healthz`: whether the log takes writes, and its head.
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
    pub head_seq: u64,
}
