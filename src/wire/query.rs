//! Query strings: read into typed query structs from the parameters axum parsed (the last
//! value of a repeated parameter wins), and the paging the lists share.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::field::{optional, Check, Field, Invalid};
use super::known::{self, UnknownField};
use super::memory::fields::int64;

/// The first page, and the smallest page size.
pub const MIN_PAGE: usize = 1;
/// Every list's largest page; larger sizes are clamped to it, not refused.
pub const MAX_PAGE_SIZE: usize = 100;

/// A query struct from the request's parameters, read from strings (every query value is one).
/// A parameter the struct does not name is refused, naming it and those it does name; with
/// several, the first in byte order.
pub fn from_map<T: for<'de> Deserialize<'de>>(
    params: &HashMap<String, String>,
) -> Result<T, Invalid> {
    // Through a JSON object (sorted by key), whose deserialiser reads a present value as `Some`
    // (serde's plain string deserialiser does not take `Option`).
    let object = params
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    known::read::<T, _>(Value::Object(object)).map_err(|e| match e.unknown {
        Some(UnknownField { name, allowed }) => Invalid(format!(
            "unknown query parameter '{name}' (allowed: {})",
            allowed.join(", ")
        )),
        None => Invalid(format!("invalid query: {}", e.error.inner())),
    })
}

/// A parameter given with an empty value is not given.
pub fn given(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// A page of a list: its number from 1 and its size, clamped to [`MAX_PAGE_SIZE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Paging {
    pub page: usize,
    pub page_size: usize,
}

impl Paging {
    /// Reads `page` (default 1) and `page_size` (default `default_size`); each must be an
    /// integer of at least 1.
    pub fn check(
        page: Option<String>,
        page_size: Option<String>,
        default_size: usize,
    ) -> Result<Paging, Invalid> {
        Ok(Paging {
            page: page.map_or(Ok(MIN_PAGE), |p| positive("page", &p))?,
            page_size: page_size
                .map_or(Ok(default_size), |s| positive("page_size", &s))?
                .min(MAX_PAGE_SIZE),
        })
    }

    /// The paging of a query or body that gave `page` and `page_size` (each checked already),
    /// or left them out.
    pub fn of(
        page: Option<Field<Page>>,
        page_size: Option<Field<PageSize>>,
        default_size: usize,
    ) -> Result<Paging, Invalid> {
        Ok(Paging {
            page: optional(page)?.map_or(MIN_PAGE, |p| p.0),
            page_size: optional(page_size)?
                .map_or(default_size, |s| s.0)
                .min(MAX_PAGE_SIZE),
        })
    }

    /// How many items come before this page.
    pub fn offset(&self) -> usize {
        (self.page - 1).saturating_mul(self.page_size)
    }
}

fn positive(field: &str, s: &str) -> Result<usize, Invalid> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= MIN_PAGE as i64 => Ok(n as usize),
        _ => Err(Invalid(format!(
            "{field} must be an integer of at least {MIN_PAGE}, got '{s}'"
        ))),
    }
}

/// A page number or size as given: a query string's text, or in a body a JSON number or a
/// string as in a query.
fn given_number(raw: &Value) -> String {
    match raw {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `page`: an integer of at least [`MIN_PAGE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page(pub usize);

/// `page_size`: an integer of at least [`MIN_PAGE`], clamped to [`MAX_PAGE_SIZE`] when read
/// (so the schema names no maximum: a larger size is taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSize(pub usize);

impl Check for Page {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        positive("page", &given_number(&raw)).map(Page)
    }
}

impl Check for PageSize {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        positive("page_size", &given_number(&raw)).map(PageSize)
    }
}

impl PartialSchema for Page {
    fn schema() -> RefOr<Schema> {
        int64().minimum(Some(MIN_PAGE)).into()
    }
}

impl ToSchema for Page {}

impl PartialSchema for PageSize {
    fn schema() -> RefOr<Schema> {
        int64().minimum(Some(MIN_PAGE)).into()
    }
}

impl ToSchema for PageSize {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_default_clamp_and_refuse_naming_the_parameter() {
        let p = |page: Option<&str>, size: Option<&str>| {
            Paging::check(page.map(str::to_string), size.map(str::to_string), 20)
        };
        assert_eq!(
            p(None, None),
            Ok(Paging {
                page: 1,
                page_size: 20
            })
        );
        assert_eq!(
            p(Some(" 3"), Some("500")),
            Ok(Paging {
                page: 3,
                page_size: 100
            })
        );
        assert_eq!(
            p(Some("0"), None),
            Err(Invalid::new(
                "page must be an integer of at least 1, got '0'"
            ))
        );
        assert_eq!(
            p(None, Some("")),
            Err(Invalid::new(
                "page_size must be an integer of at least 1, got ''"
            ))
        );
        assert_eq!(p(Some("3"), Some("10")).map(|p| p.offset()), Ok(20));
    }
}
