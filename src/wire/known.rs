//! The keys a shape knows. A body or a query string is read through [`read`], which refuses a
//! key of its top-level object that the type does not name as the deserialiser meets it, and
//! says so as a value ([`UnknownField`]: the key and the names allowed), so that the API words
//! the refusal itself instead of reading serde's text.
//!
//! The refusal stops the read where serde's `deny_unknown_fields` would stop it (at the key,
//! before its value is parsed), and the error it returns is serde's own
//! (`de::Error::unknown_field`), so a caller that words it as serde does sees the same message,
//! position included. Only the top level is watched: nested objects are either read by the
//! API's own checks (filters, messages) or by derived structs that deny unknown fields
//! themselves (an ingested entry), and a batch reads each of its items through [`read`].

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::Deserialize;

/// A key the shape does not name, and the names it does, in the shape's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownField {
    pub name: String,
    pub allowed: &'static [&'static str],
}

/// A shape's read that failed: serde's error with the path of what it refused, and, when what
/// it refused is a key the shape does not know, that key.
#[derive(Debug)]
pub struct Refusal<E> {
    pub error: serde_path_to_error::Error<E>,
    pub unknown: Option<UnknownField>,
}

/// `T` from `de`, a key of its top-level object it does not name refused (see the module).
pub fn read<'de, T, D>(de: D) -> Result<T, Refusal<D::Error>>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    let found = Cell::new(None);
    let mut track = serde_path_to_error::Track::new();
    let read = T::deserialize(Known {
        de: serde_path_to_error::Deserializer::new(de, &mut track),
        found: &found,
    });
    read.map_err(|e| Refusal {
        error: serde_path_to_error::Error::new(track.path(), e),
        unknown: found.take(),
    })
}

/// The deserialiser [`read`] reads through: `de` itself, but for a struct, whose map it watches.
struct Known<'f, D> {
    de: D,
    found: &'f Cell<Option<UnknownField>>,
}

/// A struct's visitor, given the map through [`KnownKeys`].
struct KnownVisitor<'f, V> {
    visitor: V,
    fields: &'static [&'static str],
    found: &'f Cell<Option<UnknownField>>,
}

/// A struct's map, whose keys are checked against the struct's field names as they are read.
struct KnownKeys<'f, A> {
    map: A,
    fields: &'static [&'static str],
    found: &'f Cell<Option<UnknownField>>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KnownVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(KnownKeys {
            map,
            fields: self.fields,
            found: self.found,
        })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(seq)
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for KnownKeys<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.map.next_key_seed(KnownKey {
            seed,
            fields: self.fields,
            found: self.found,
        })
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A key of a struct's map: read as a string, refused unless the struct names it, else handed
/// to the struct's own key seed. The refusal is raised while the key is read, so the error's
/// path ends at the key, as serde's own refusal's does.
struct KnownKey<'f, K> {
    seed: K,
    fields: &'static [&'static str],
    found: &'f Cell<Option<UnknownField>>,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KnownKey<'_, K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<K::Value, D::Error> {
        let key = String::deserialize(de)?;
        if !self.fields.contains(&key.as_str()) {
            let refused = de::Error::unknown_field(&key, self.fields);
            self.found.set(Some(UnknownField {
                name: key,
                allowed: self.fields,
            }));
            return Err(refused);
        }
        let key: de::value::StringDeserializer<D::Error> = key.into_deserializer();
        self.seed.deserialize(key)
    }
}

/// Every method but `deserialize_struct` hands the visitor to `de` as it is.
macro_rules! forward {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.de.$method(visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Known<'_, D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_struct(
            name,
            fields,
            KnownVisitor {
                visitor,
                fields,
                found: self.found,
            },
        )
    }

    forward!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Shape {
        a: Option<u32>,
        #[serde(default)]
        inner: Option<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        b: u32,
    }

    fn through_known(text: &str) -> Result<Shape, Refusal<serde_json::Error>> {
        read(&mut serde_json::Deserializer::from_str(text))
    }

    fn through_serde(text: &str) -> String {
        let mut de = serde_json::Deserializer::from_str(text);
        match serde_path_to_error::deserialize::<_, Shape>(&mut de) {
            Ok(v) => format!("accepted {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn an_unknown_top_level_key_is_found_as_a_value() {
        let refused = through_known(r#"{"a": 1, "colour": {"x": [1, 2]}, "a": "late"}"#)
            .expect_err("refused");
        assert_eq!(
            refused.unknown,
            Some(UnknownField {
                name: "colour".into(),
                allowed: &["a", "inner"],
            })
        );
        assert_eq!(
            through_known(r#"{"a": 1, "inner": {"b": 2}}"#).map_err(|e| e.error.to_string()),
            Ok(Shape {
                a: Some(1),
                inner: Some(Inner { b: 2 })
            })
        );
    }

    #[test]
    fn every_refusal_reads_as_serdes_own() {
        for text in [
            r#"{"colour": 1}"#,
            r#"{"a": 1, "colour": 1}"#,
            r#"{"a": 1,
                "colour": 1}"#,
            r#"{"a": "x"}"#,
            r#"{"a": 1, "a": 2}"#,
            r#"{"inner": {"b": 1, "c": 2}}"#,
            r#"{"inner": {"b": "x"}}"#,
            r#"{"a": tru}"#,
            r#"[1]"#,
            r#"5"#,
        ] {
            let known = match through_known(text) {
                Ok(v) => format!("accepted {v:?}"),
                Err(e) => e.error.to_string(),
            };
            assert_eq!(known, through_serde(text), "{text}");
            // Only a top-level key is found as a value; a nested one stays serde's refusal.
            let found = through_known(text).err().and_then(|e| e.unknown);
            assert_eq!(found.is_some(), text.contains("colour"), "{text}");
        }
    }
}
