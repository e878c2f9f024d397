//! The shapes on the wire: every request and response body of the API, its query strings, and
//! the audit entry as lists, details and exports show it.
//!
//! Each shape is one type, written once: it derives `Serialize`/`Deserialize` and
//! `utoipa::ToSchema`, the handlers take and return it, the export writes it, and the OpenAPI
//! document (`docs/openapi.json`) is generated from it. A request type's `check` turns what
//! serde read into the checked value a handler works with; every refusal is an [`Invalid`]
//! whose message names the field. Nothing here speaks HTTP: the API layer (`crate::api`) wraps
//! these in envelopes and status codes.

pub mod admin;
pub mod audit;
pub mod envelope;
pub mod erasure;
pub mod export;
pub mod field;
pub mod filter;
pub mod known;
pub mod memory;
pub mod ocsf;
pub mod query;
pub mod time;
pub mod transparency;
pub mod webhook;

pub use field::Invalid;
pub use known::{Refusal, UnknownField};

use serde::de::DeserializeOwned;

/// A request body shape.
pub trait Body: DeserializeOwned {
    /// What the handler takes once the body is checked.
    type Checked;

    /// The checks serde does not do, in the order of the fields.
    fn check(self) -> Result<Self::Checked, Invalid>;

    /// How an empty (or all-whitespace) body is taken, whatever its media type: `None` reads it
    /// as any other body (a JSON body that is not an object), `Some` answers it.
    fn when_empty() -> Option<Result<Self, Invalid>> {
        None
    }

    /// The message of a body serde refused, given with the path of what it refused (and the
    /// key, when it refused a key the body does not know).
    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        refused(e.error)
    }
}

/// The message of a body serde refused: `invalid JSON body: <path>: <serde's message>`.
pub fn refused(e: serde_path_to_error::Error<serde_json::Error>) -> Invalid {
    Invalid(format!("invalid JSON body: {e}"))
}

/// A query string shape: every field read from a string (as every query value is); a parameter
/// it does not name is refused (`unknown query parameter 'x' (allowed: a, b)`).
pub trait Params: DeserializeOwned {
    type Checked;

    fn check(self) -> Result<Self::Checked, Invalid>;
}

/// What a body that must say what to do answers when it is empty.
pub(crate) fn empty_refused<T>() -> Option<Result<T, Invalid>> {
    Some(Err(Invalid::new(
        "the request body is empty; a JSON object is required",
    )))
}

/// The memory API's message for a field it does not know, `unknown field 'x' (allowed: a, b)`;
/// any other refusal as [`refused`] words it.
pub(crate) fn unknown_field_named(e: Refusal<serde_json::Error>) -> Invalid {
    match e.unknown {
        Some(UnknownField { name, allowed }) => Invalid(format!(
            "unknown field '{name}' (allowed: {})",
            allowed.join(", ")
        )),
        None => refused(e.error),
    }
}
