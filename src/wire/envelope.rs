//! The envelopes every answer is wrapped in, as the interface defines them: audit endpoints
//! answer `{"success": true, "code": 1000, "message": "ok", "data": ...}`, memory and admin
//! endpoints `{"success": true, "data": ...}`, and every error
//! `{"success": false, "code": N, "message": "...", "data": null}`.
//!
//! The success envelopes are generic over their payload; their OpenAPI schemas are named after
//! it (`MemoryEnvelope` wraps `Memory`), which is why [`PartialSchema`] and [`ToSchema`] are
//! written here instead of derived (utoipa names a derived generic schema `Data_Memory` and
//! inlines its payload).

use std::borrow::Cow;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

/// The `code` of every success.
pub const SUCCESS_CODE: i64 = 1000;

/// A response payload: its envelope's schema is named `<payload>Envelope` unless it says
/// otherwise.
pub trait Payload: ToSchema {
    fn envelope_name() -> Cow<'static, str> {
        Cow::Owned(format!("{}Envelope", Self::name()))
    }
}

/// `{"success": true, "code": 1000, "message": "ok", "data": T}`.
pub struct AuditOk<T>(pub T);

/// `{"success": true, "data": T}`.
pub struct Data<T>(pub T);

impl<T: Serialize> Serialize for AuditOk<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("AuditOk", 4)?;
        st.serialize_field("success", &true)?;
        st.serialize_field("code", &SUCCESS_CODE)?;
        st.serialize_field("message", "ok")?;
        st.serialize_field("data", &self.0)?;
        st.end()
    }
}

impl<T: Serialize> Serialize for Data<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Data", 2)?;
        st.serialize_field("success", &true)?;
        st.serialize_field("data", &self.0)?;
        st.end()
    }
}

fn boolean() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Boolean)
}

/// The payload's schema as a reference, and its own schemas collected.
fn payload<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

impl<T: Payload> PartialSchema for AuditOk<T> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property("success", boolean())
            .required("success")
            .property(
                "code",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                        utoipa::openapi::KnownFormat::Int64,
                    )))
                    .description(Some(SUCCESS_CODE.to_string())),
            )
            .required("code")
            .property("message", ObjectBuilder::new().schema_type(Type::String))
            .required("message")
            .property("data", Ref::from_schema_name(T::name()))
            .required("data")
            .into()
    }
}

impl<T: Payload> ToSchema for AuditOk<T> {
    fn name() -> Cow<'static, str> {
        T::envelope_name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        payload::<T>(schemas);
    }
}

impl<T: Payload> PartialSchema for Data<T> {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property("success", boolean())
            .required("success")
            .property("data", Ref::from_schema_name(T::name()))
            .required("data")
            .into()
    }
}

impl<T: Payload> ToSchema for Data<T> {
    fn name() -> Cow<'static, str> {
        T::envelope_name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        payload::<T>(schemas);
    }
}

/// Every error: `{"success": false, "code": N, "message": "...", "data": null}`.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize, ToSchema)]
pub struct ErrorEnvelope {
    pub success: bool,
    /// A code of the error registry (docs/API.md).
    pub code: i64,
    pub message: String,
    pub data: Option<()>,
}

impl ErrorEnvelope {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            success: false,
            code,
            message: message.into(),
            data: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_the_interfaces() {
        assert_eq!(
            serde_json::to_value(AuditOk(5)).expect("json"),
            serde_json::json!({"success": true, "code": 1000, "message": "ok", "data": 5})
        );
        assert_eq!(
            serde_json::to_value(Data("x")).expect("json"),
            serde_json::json!({"success": true, "data": "x"})
        );
        assert_eq!(
            serde_json::to_value(ErrorEnvelope::new(4040, "no such route")).expect("json"),
            serde_json::json!({"success": false, "code": 4040, "message": "no such route", "data": null})
        );
    }
}
