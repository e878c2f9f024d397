//! The closed sets of the schema (plans, permissions, memory types, export formats): their
//! wire names, as events store them and the API shows them.

use serde::{Deserialize, Serialize};

/// The wire names of a closed set (plans, permissions, memory types, export formats): each
/// enum derives its list of variants and their names, and parses a name with a message that
/// lists the accepted ones.
pub trait Named: Copy + strum::VariantArray + Into<&'static str> + 'static {
    /// What a value of the set is called in messages ("plan", "memory_type").
    const WHAT: &'static str;

    /// The wire name, as serde writes it.
    fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The refusal of a name outside the set `T`: "unknown plan 'gold' (expected free, basic, pro,
/// business or custom)".
fn unknown<T: Named>(name: &str) -> String {
    let names: Vec<&str> = T::VARIANTS.iter().map(|v| v.as_str()).collect();
    let expected = match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    format!("unknown {} '{name}' (expected {expected})", T::WHAT)
}

/// Subscription plan of a tenant; decides audit retention and which features are open.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown::<Plan>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = PlanName))]
pub enum Plan {
    Free,
    Basic,
    Pro,
    Business,
    Custom,
}

impl Named for Plan {
    const WHAT: &'static str = "plan";
}

impl Plan {
    /// Pro, Business and Custom may export audit logs.
    pub fn can_export(&self) -> bool {
        matches!(self, Plan::Pro | Plan::Business | Plan::Custom)
    }

    /// Business and Custom see the per-tenant chain hash.
    pub fn shows_hash(&self) -> bool {
        matches!(self, Plan::Business | Plan::Custom)
    }
}

/// A permission an API key may carry.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[strum(parse_err_ty = String, parse_err_fn = unknown::<Permission>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = PermissionName))]
pub enum Permission {
    #[serde(rename = "audit.read")]
    #[strum(serialize = "audit.read")]
    AuditRead,
    #[serde(rename = "audit.export")]
    #[strum(serialize = "audit.export")]
    AuditExport,
    #[serde(rename = "memory.read")]
    #[strum(serialize = "memory.read")]
    MemoryRead,
    #[serde(rename = "memory.write")]
    #[strum(serialize = "memory.write")]
    MemoryWrite,
    /// Erasing a subject's data for good (`POST /v1/erasures`): apart from `memory.write`,
    /// since a delete hides and an erasure cannot be undone.
    #[serde(rename = "memory.erase")]
    #[strum(serialize = "memory.erase")]
    MemoryErase,
    /// Managing the tenant's webhook endpoints (`/v1/webhooks`): who may point the tenant's
    /// events at a URL, apart from reading them.
    #[serde(rename = "webhooks.manage")]
    #[strum(serialize = "webhooks.manage")]
    WebhooksManage,
}

impl Named for Permission {
    const WHAT: &'static str = "permission";
}

/// The three memory types of the interface.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    PartialOrd,
    Ord,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown::<MemoryType>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = MemoryTypeName))]
pub enum MemoryType {
    Rule,
    Fact,
    Context,
}

impl Named for MemoryType {
    const WHAT: &'static str = "memory_type";
}

impl MemoryType {
    /// Stable one-byte tag used in projection keys.
    pub fn tag(&self) -> u8 {
        match self {
            MemoryType::Rule => 1,
            MemoryType::Fact => 2,
            MemoryType::Context => 3,
        }
    }
}

/// File format of an audit export.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", parse_err_ty = String, parse_err_fn = unknown::<ExportFormat>)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema), schema(as = ExportFormatName))]
pub enum ExportFormat {
    Csv,
    Json,
    /// A JSON array of OCSF API Activity events, one per entry (docs/OCSF.md).
    Ocsf,
}

impl ExportFormat {
    /// Whether the file is a JSON array (`[`, rows joined by `,\n`, `]`).
    pub fn is_json_array(self) -> bool {
        matches!(self, ExportFormat::Json | ExportFormat::Ocsf)
    }
}

impl Named for ExportFormat {
    const WHAT: &'static str = "format";
}
