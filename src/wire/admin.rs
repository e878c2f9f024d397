//! The admin API's shapes: tenants, keys, and the log's head, checkpoint and public key.

use auditmem_projections::tenants::Tenant as TenantState;
use auditmem_projections::{KeyScope, Permission, Plan};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ArrayBuilder, Schema};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use uuid::Uuid;

use super::envelope::Payload;
use super::field::{optional, Check, Field, Invalid};
use super::memory::fields::{double, int64, trimmed_text, AgentId, SessionId, UserId};
use super::time::Time;
use super::{Body, Params};

/// Characters of a tenant's or a key's name at most, after trimming.
pub const MAX_NAME_CHARS: usize = 200;
/// A tenant's credits at least.
pub const MIN_CREDITS: f64 = 0.0;
/// Permissions a key carries at least.
pub const MIN_PERMISSIONS: usize = 1;
/// The first seq of the log.
pub const FIRST_SEQ: u64 = 1;

/// A tenant's or a key's name: 1 to [`MAX_NAME_CHARS`] characters after trimming (stored
/// trimmed).
#[derive(Clone, Debug, PartialEq)]
pub struct Name(pub String);

impl Check for Name {
    type Raw = String;

    fn check(raw: String) -> Result<Self, Invalid> {
        let n = raw.trim();
        if n.is_empty() || n.chars().count() > MAX_NAME_CHARS {
            return Err(Invalid(format!(
                "name must be 1 to {MAX_NAME_CHARS} characters"
            )));
        }
        Ok(Name(n.to_string()))
    }
}

impl PartialSchema for Name {
    fn schema() -> RefOr<Schema> {
        trimmed_text(MAX_NAME_CHARS)
    }
}

impl ToSchema for Name {}

/// A tenant's credits: a finite number of at least [`MIN_CREDITS`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Credits(pub f64);

impl Check for Credits {
    type Raw = f64;

    fn check(raw: f64) -> Result<Self, Invalid> {
        if raw.is_finite() && raw >= MIN_CREDITS {
            Ok(Credits(raw))
        } else {
            Err(Invalid(format!(
                "credits must be a number of at least {MIN_CREDITS}"
            )))
        }
    }
}

impl PartialSchema for Credits {
    fn schema() -> RefOr<Schema> {
        double().minimum(Some(MIN_CREDITS)).into()
    }
}

impl ToSchema for Credits {}

impl Check for Plan {
    type Raw = String;
    const BY_NAME: bool = true;

    fn check(raw: String) -> Result<Self, Invalid> {
        raw.parse().map_err(|e| Invalid(format!("plan: {e}")))
    }
}

impl Check for Permission {
    type Raw = String;
    const BY_NAME: bool = true;

    fn check(raw: String) -> Result<Self, Invalid> {
        raw.parse()
            .map_err(|e| Invalid(format!("permissions: {e}")))
    }
}

/// A key's permissions: at least [`MIN_PERMISSIONS`], each checked, deduplicated and sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct Permissions(pub Vec<Permission>);

impl Check for Permissions {
    type Raw = Vec<Field<Permission>>;

    fn check(raw: Vec<Field<Permission>>) -> Result<Self, Invalid> {
        if raw.len() < MIN_PERMISSIONS {
            return Err(Invalid::new("permissions must name at least one of audit.read, audit.export, memory.read, memory.write, memory.erase, webhooks.manage"));
        }
        let mut permissions = Vec::new();
        for p in raw {
            let p = p.value()?;
            if !permissions.contains(&p) {
                permissions.push(p);
            }
        }
        permissions.sort();
        Ok(Permissions(permissions))
    }
}

impl PartialSchema for Permissions {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new()
            .items(Ref::from_schema_name(Permission::name()))
            .min_items(Some(MIN_PERMISSIONS))
            .into()
    }
}

impl ToSchema for Permissions {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Permission::name().into_owned(), Permission::schema()));
    }
}

/// `POST /admin/v1/tenants`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "`POST /admin/v1/tenants`.")]
pub struct CreateTenantRequest {
    /// 1 to 200 characters after trimming.
    #[schema(inline)]
    pub name: Field<Name>,
    #[schema(inline)]
    pub plan: Field<Plan>,
    /// Default true.
    #[serde(default)]
    pub subscription_active: Option<bool>,
    /// Default 0.
    #[serde(default)]
    #[schema(inline)]
    pub credits: Option<Field<Credits>>,
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
            name: self.name.value()?.0,
            plan: self.plan.value()?,
            subscription_active: self.subscription_active.unwrap_or(true),
            credits: optional(self.credits)?.map_or(MIN_CREDITS, |c| c.0),
        })
    }
}

/// `PATCH /admin/v1/tenants/{id}`: at least one field that is not null.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "`PATCH /admin/v1/tenants/{id}`: at least one field that is not null.")]
pub struct UpdateTenantRequest {
    #[serde(default)]
    #[schema(inline)]
    pub name: Option<Field<Name>>,
    #[serde(default)]
    #[schema(inline)]
    pub plan: Option<Field<Plan>>,
    #[serde(default)]
    pub subscription_active: Option<bool>,
    #[serde(default)]
    #[schema(inline)]
    pub credits: Option<Field<Credits>>,
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
            name: optional(self.name)?.map(|n| n.0),
            plan: optional(self.plan)?,
            subscription_active: self.subscription_active,
            credits: optional(self.credits)?.map(|c| c.0),
        })
    }
}

/// `POST /admin/v1/tenants/{id}/keys`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "`POST /admin/v1/tenants/{id}/keys`.")]
pub struct CreateKeyRequest {
    #[schema(inline)]
    pub permissions: Field<Permissions>,
    #[serde(default)]
    #[schema(inline)]
    pub name: Option<Field<Name>>,
    /// Confines the key's memory calls to one end user (and optionally one agent and one
    /// session): it writes only memories with these ids and reads, changes and deletes only
    /// those; routes that reach beyond a scope (the audit log, exports, erasures, batch
    /// updates) refuse it (403, 4030). Left out: the key is tenant-wide.
    #[serde(default)]
    pub scope: Option<KeyScopeRequest>,
}

/// A key's scope as `POST /admin/v1/tenants/{id}/keys` takes it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyScopeRequest {
    #[schema(inline)]
    pub user_id: Field<UserId>,
    #[serde(default)]
    #[schema(inline)]
    pub agent_id: Option<Field<AgentId>>,
    #[serde(default)]
    #[schema(inline)]
    pub session_id: Option<Field<SessionId>>,
}

impl KeyScopeRequest {
    /// The scope, checked; a refusal names its field under `scope.`.
    fn scope(self) -> Result<KeyScope, Invalid> {
        let under = |e: Invalid| Invalid(format!("scope.{}", e.0));
        Ok(KeyScope {
            user_id: self.user_id.value().map_err(under)?.0,
            agent_id: optional(self.agent_id).map_err(under)?.map(|v| v.0),
            session_id: optional(self.session_id).map_err(under)?.map(|v| v.0),
        })
    }
}

/// A key's scope as answered.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct KeyScopeAnswer {
    pub user_id: String,
    pub agent_id: Option<String>,
    pub session_id: Option<String>,
}

impl From<KeyScope> for KeyScopeAnswer {
    fn from(s: KeyScope) -> Self {
        KeyScopeAnswer {
            user_id: s.user_id,
            agent_id: s.agent_id,
            session_id: s.session_id,
        }
    }
}

/// A key to issue, checked: its permissions deduplicated and sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct NewKey {
    pub permissions: Vec<Permission>,
    pub name: Option<String>,
    pub scope: Option<KeyScope>,
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
        Ok(NewKey {
            permissions: self.permissions.value()?.0,
            name: optional(self.name)?.map(|n| n.0),
            scope: self.scope.map(KeyScopeRequest::scope).transpose()?,
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
    /// The key's scope; absent for a tenant-wide key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<KeyScopeAnswer>,
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
    #[param(inline)]
    from: Option<Field<FirstSeq>>,
}

/// Where the log stream starts: a seq of at least [`FIRST_SEQ`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstSeq(pub u64);

impl Check for FirstSeq {
    type Raw = String;

    fn check(raw: String) -> Result<Self, Invalid> {
        raw.parse::<u64>()
            .ok()
            .filter(|n| *n >= FIRST_SEQ)
            .map(FirstSeq)
            .ok_or_else(|| Invalid(format!("from must be a seq of at least {FIRST_SEQ}")))
    }
}

impl PartialSchema for FirstSeq {
    fn schema() -> RefOr<Schema> {
        int64().minimum(Some(FIRST_SEQ)).into()
    }
}

impl ToSchema for FirstSeq {}

impl Params for LogQuery {
    type Checked = u64;

    fn check(self) -> Result<u64, Invalid> {
        Ok(optional(self.from)?.map_or(FIRST_SEQ, |f| f.0))
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
