//! Request fields whose value checks run after parsing, with the API's own messages.
//!
//! serde checks a body's syntax and shape (a JSON object, no unknown field, each field of a
//! kind it can hold) and stops at the first error it meets, in document order, in its own
//! words. The checks of a field's value (a trimmed length, a range, a name in a set) are the
//! API's, worded as the API documents them, and they run after parsing in the order the body
//! type lists its fields, so a body with several faults always names the same one first. A
//! [`Field`] is what makes that possible: it deserialises whatever serde read for the field
//! (its [`Check::Raw`]) into either the checked value or the refusal, and the body's check
//! returns the first refusal ([`Field::value`]).
//!
//! A checked type also documents itself: its [`ToSchema`] is the schema of the values its check
//! takes, written from the same constants the check compares against (`MAX_CONTENT_CHARS` is
//! both `content`'s `maxLength` and the length it refuses past), and a `Field<T>` in a derived
//! body or query schema, marked `#[schema(inline)]` (`#[param(inline)]`), shows `T`'s schema.
//! The OpenAPI document's bounds cannot drift from the checks; `api::openapi`'s tests feed
//! every bound's edges through the reading path to hold that.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::ToSchema;

/// A request the API refuses with 400, and why: the message names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

impl Invalid {
    pub fn new(message: impl Into<String>) -> Self {
        Invalid(message.into())
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A field value the API checks itself, and whose schema ([`ToSchema`]) says what the check
/// takes.
pub trait Check: Sized + ToSchema {
    /// What serde reads for the field: a typed value, whose wrong JSON kind is then serde's
    /// error, or `serde_json::Value` where the field's own message covers every kind.
    type Raw: for<'de> Deserialize<'de>;

    /// Whether a field of this type refers to the type's schema by its name (an enum the
    /// document names once, `MemoryTypeName`) rather than writing the schema in place.
    const BY_NAME: bool = false;

    fn check(raw: Self::Raw) -> Result<Self, Invalid>;
}

/// The pattern of a string holding a character that is not whitespace: what a check that trims
/// and refuses an empty result takes.
pub const NOT_BLANK: &str = r"\S";

/// A field as parsed: its checked value, or why it was refused.
#[derive(Clone, Debug, PartialEq)]
pub struct Field<T>(Result<T, Invalid>);

impl<T> Field<T> {
    /// The checked value, or the field's refusal.
    pub fn value(self) -> Result<T, Invalid> {
        self.0
    }

    /// A field checked already (tests, and callers that build bodies in code).
    pub fn of(value: T) -> Self {
        Field(Ok(value))
    }
}

// utoipa's derive asks a generic field type for its schema through `ComposeSchema`, the (hidden)
// trait it implements itself for every generic type it derives; the schemas of the type's
// arguments it passes are not needed, `T`'s own schema is the field's.
impl<T: Check> utoipa::__dev::ComposeSchema for Field<T> {
    fn compose(_: Vec<RefOr<Schema>>) -> RefOr<Schema> {
        if T::BY_NAME {
            Ref::from_schema_name(T::name()).into()
        } else {
            T::schema()
        }
    }
}

impl<T: Check> ToSchema for Field<T> {
    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        T::schemas(schemas)
    }
}

impl<'de, T: Check> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::Raw::deserialize(d).map(|raw| Field(T::check(raw)))
    }
}

/// The value of a field that must be given (present and not null).
pub fn required<T>(field: Option<Field<T>>, missing: &str) -> Result<T, Invalid> {
    field.ok_or_else(|| Invalid::new(missing))?.value()
}

/// The value of a field that may be left out (or null, where the body says so).
pub fn optional<T>(field: Option<Field<T>>) -> Result<Option<T>, Invalid> {
    field.map(Field::value).transpose()
}

/// For `#[serde(default, deserialize_with = "present")]`: a field left out is `None`, a field
/// given, `null` included, is `Some` (serde's own `Option` reads `null` as left out).
pub fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The whole number a JSON number stands for, if it is one: an integer, or a float with no
/// fraction (`5.0`, as encoders of floats write it and JSON Schema's "integer" admits) below
/// 2^63 in magnitude, where the conversion is exact. Fields the interface calls numbers that
/// hold counts or codes (`top_k`, `http_status`, ...) read through this.
pub fn whole_number(n: &serde_json::Number) -> Option<i128> {
    n.as_i128().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i128)
    })
}
