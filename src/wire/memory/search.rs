//! Search: `POST /v1/memories/search`, its results, and what its audit entry records.

use auditmem_projections::keyword::Fusion;
use auditmem_projections::memories::filter::Filter;
use auditmem_projections::memories::SearchMode;
use auditmem_projections::MemoryType;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::as_of::{AsOf, AsOfShown};
use super::fields::{double, int64, trimmed_text, Explain, Filters, IncludeSuperseded};
use crate::extract::MAX_CONTENT_CHARS;
use crate::wire::envelope::Payload;
use crate::wire::field::{optional, required, whole_number, Check, Field, Invalid};
use crate::wire::time::Time;
use crate::wire::{empty_refused, unknown_field_named, Body, Refusal};

/// Search's result count: default 5, 1 to 100.
pub const DEFAULT_TOP_K: usize = 5;
pub const MIN_TOP_K: usize = 1;
pub const MAX_TOP_K: usize = 100;
/// The lowest similarity a search may ask for, from this to [`MAX_SIMILARITY`].
pub const MIN_SIMILARITY: f64 = -1.0;
pub const MAX_SIMILARITY: f64 = 1.0;

/// A search query: 1 to [`MAX_CONTENT_CHARS`] characters after trimming.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchText(pub String);

impl Check for SearchText {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        let query = match raw {
            Value::String(s) if !s.trim().is_empty() => s.trim().to_string(),
            Value::String(_) => return Err(Invalid::new("query must not be empty")),
            Value::Null => return Err(Invalid::new("query is required")),
            _ => return Err(Invalid::new("query must be a string")),
        };
        if query.chars().count() > MAX_CONTENT_CHARS {
            return Err(Invalid(format!(
                "query is longer than {MAX_CONTENT_CHARS} characters"
            )));
        }
        Ok(SearchText(query))
    }
}

impl PartialSchema for SearchText {
    fn schema() -> RefOr<Schema> {
        trimmed_text(MAX_CONTENT_CHARS)
    }
}

impl ToSchema for SearchText {}

/// How many results a search returns: [`MIN_TOP_K`] to [`MAX_TOP_K`]; the interface calls it a
/// number, so a whole one written as 5.0 is 5 (as JSON Schema's `integer` takes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopK(pub usize);

impl Check for TopK {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_number().and_then(whole_number) {
            Some(k) if (MIN_TOP_K as i128..=MAX_TOP_K as i128).contains(&k) => Ok(TopK(k as usize)),
            _ => Err(Invalid(format!(
                "top_k must be an integer from {MIN_TOP_K} to {MAX_TOP_K}"
            ))),
        }
    }
}

impl PartialSchema for TopK {
    fn schema() -> RefOr<Schema> {
        int64()
            .minimum(Some(MIN_TOP_K))
            .maximum(Some(MAX_TOP_K))
            .into()
    }
}

impl ToSchema for TopK {}

/// The lowest similarity a search result may have, [`MIN_SIMILARITY`] to [`MAX_SIMILARITY`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinSimilarity(pub f64);

impl Check for MinSimilarity {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_f64() {
            Some(x) if (MIN_SIMILARITY..=MAX_SIMILARITY).contains(&x) => Ok(MinSimilarity(x)),
            _ => Err(Invalid::new(
                "min_similarity must be a number from -1.0 to 1.0",
            )),
        }
    }
}

impl PartialSchema for MinSimilarity {
    fn schema() -> RefOr<Schema> {
        double()
            .minimum(Some(MIN_SIMILARITY))
            .maximum(Some(MAX_SIMILARITY))
            .into()
    }
}

impl ToSchema for MinSimilarity {}

impl Check for SearchMode {
    type Raw = Value;
    const BY_NAME: bool = true;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw.as_str() {
            Some("semantic") => Ok(SearchMode::Semantic),
            Some("keyword") => Ok(SearchMode::Keyword),
            Some("hybrid") => Ok(SearchMode::Hybrid),
            _ => Err(Invalid::new(
                "search_mode must be one of semantic, keyword, hybrid",
            )),
        }
    }
}

/// A number of the fusion's settings from `$lo` to `$hi`, its refusal naming it.
macro_rules! ranged_field {
    ($name:ident, $field:literal, $lo:expr, $hi:expr, $range:literal) => {
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name(pub f32);

        impl Check for $name {
            type Raw = Value;

            fn check(raw: Value) -> Result<Self, Invalid> {
                match raw.as_f64() {
                    Some(x) if raw.is_number() && ($lo..=$hi).contains(&x) => Ok($name(x as f32)),
                    _ => Err(Invalid::new(concat!($field, " must be a number ", $range))),
                }
            }
        }

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                double().minimum(Some($lo)).maximum(Some($hi)).into()
            }
        }

        impl ToSchema for $name {}
    };
}

ranged_field!(RrfK, "rrf_k", 0.0, 1000.0, "from 0 to 1000");
ranged_field!(
    SemanticWeight,
    "semantic_weight",
    0.0,
    10.0,
    "from 0.0 to 10.0"
);
ranged_field!(
    KeywordWeight,
    "keyword_weight",
    0.0,
    10.0,
    "from 0.0 to 10.0"
);

/// `POST /v1/memories/search`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// 1 to 10,000 characters after trimming.
    #[schema(inline, required = true, nullable = false)]
    pub query: Option<Field<SearchText>>,
    /// 1 to 100, default 5; a whole number written as 5.0 is 5.
    #[schema(inline)]
    pub top_k: Option<Field<TopK>>,
    /// -1.0 to 1.0, default 0.
    #[schema(inline)]
    pub min_similarity: Option<Field<MinSimilarity>>,
    #[schema(inline)]
    pub memory_type: Option<Field<MemoryType>>,
    /// Only memories this filter matches (see `POST /v1/memories/query`).
    #[schema(inline)]
    pub filters: Option<Field<Filters>>,
    /// Default false: memories another superseded are left out.
    #[schema(inline)]
    pub include_superseded: Option<Field<IncludeSuperseded>>,
    /// `semantic` (by meaning), `keyword` (BM25 over the contents) or `hybrid` (both, fused by
    /// reciprocal rank; the default).
    #[schema(inline)]
    pub search_mode: Option<Field<SearchMode>>,
    /// Default false: true adds each result's ranking breakdown (`explain`).
    #[schema(inline)]
    pub explain: Option<Field<Explain>>,
    /// Hybrid: the fusion's constant added to every rank (0 to 1000, default 2).
    #[schema(inline)]
    pub rrf_k: Option<Field<RrfK>>,
    /// Hybrid: the semantic list's weight (0 to 10, default 1).
    #[schema(inline)]
    pub semantic_weight: Option<Field<SemanticWeight>>,
    /// Hybrid: the keyword list's weight (0 to 10, default 1.5).
    #[schema(inline)]
    pub keyword_weight: Option<Field<KeywordWeight>>,
    /// A log position or an RFC 3339 time: the answer as the store stood right after it
    /// (docs/API.md, "Reading the past").
    #[schema(inline)]
    pub as_of: Option<Field<AsOf>>,
}

/// A search, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    pub query: String,
    pub top_k: usize,
    pub min_similarity: f64,
    pub memory_type: Option<MemoryType>,
    pub filter: Option<Filter>,
    pub include_superseded: bool,
    pub mode: SearchMode,
    pub explain: bool,
    pub fusion: Fusion,
    pub as_of: Option<AsOf>,
}

impl Body for SearchRequest {
    type Checked = Search;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Search, Invalid> {
        Ok(Search {
            query: required(self.query, "query is required")?.0,
            top_k: optional(self.top_k)?.map_or(DEFAULT_TOP_K, |k| k.0),
            min_similarity: optional(self.min_similarity)?.map_or(0.0, |m| m.0),
            memory_type: optional(self.memory_type)?,
            filter: optional(self.filters)?.map(|f| f.0),
            include_superseded: optional(self.include_superseded)?.is_some_and(|f| f.0),
            mode: optional(self.search_mode)?.unwrap_or_default(),
            explain: optional(self.explain)?.is_some_and(|e| e.0),
            fusion: {
                let d = Fusion::default();
                Fusion {
                    k: optional(self.rrf_k)?.map_or(d.k, |v| v.0),
                    semantic_weight: optional(self.semantic_weight)?
                        .map_or(d.semantic_weight, |v| v.0),
                    keyword_weight: optional(self.keyword_weight)?
                        .map_or(d.keyword_weight, |v| v.0),
                    ..d
                }
            },
            as_of: optional(self.as_of)?,
        })
    }
}

/// A similarity as the API shows it: six decimals.
pub fn shown_score(s: f32) -> f64 {
    ((s as f64) * 1e6).round() / 1e6
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResult {
    #[schema(value_type = String)]
    pub id: Uuid,
    pub content: String,
    pub memory_type: MemoryType,
    pub importance: f64,
    /// Cosine similarity.
    pub score: f64,
    /// The value results are ranked by: `0.85 * score + 0.15 * importance` (semantic), the
    /// BM25 score (keyword) or the fused score (hybrid).
    pub final_score: f64,
    /// The BM25 score, where keyword search contributed the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_score: Option<f64>,
    /// The ranking's breakdown, when the search asked for `explain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<SearchExplain>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// When what it says happened, as the caller gave it (`occurred_at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub occurred_at: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub superseded_by: Option<Uuid>,
}

/// How a result came to its place.
#[derive(Debug, Serialize, ToSchema)]
pub struct SearchExplain {
    pub search_mode: &'static str,
    /// Its place in the semantic list (from 1), if it was in it.
    pub semantic_rank: Option<usize>,
    /// `0.85 * score + 0.15 * importance`.
    pub semantic_final_score: f64,
    /// Its place in the keyword list (from 1), if it was in it.
    pub keyword_rank: Option<usize>,
    pub keyword_score: Option<f64>,
    /// Hybrid: the fusion's constant and weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rrf_k: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_weight: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_weight: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResults {
    pub results: Vec<SearchResult>,
    /// A search `as_of`: the position it was answered as of, and whether the embedder differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_of: Option<AsOfShown>,
}

impl Payload for SearchResults {
    fn envelope_name() -> std::borrow::Cow<'static, str> {
        "SearchEnvelope".into()
    }
}

/// A search result as the search's audit entry records it (`memory_results`): its ranking too.
#[derive(Debug, Serialize)]
pub struct AuditedHit<'a> {
    pub id: Uuid,
    pub content: &'a str,
    pub memory_type: MemoryType,
    pub importance: f64,
    pub similarity: f64,
    pub final_score: f64,
    /// How the memory was found: `semantic` (by meaning), `keyword` (BM25) or `hybrid` (by
    /// both lists of a hybrid search).
    pub source: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_score: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_field_is_named_with_the_allowed_ones() {
        let refused = |body: &str| {
            let mut de = serde_json::Deserializer::from_str(body);
            match crate::wire::known::read::<SearchRequest, _>(&mut de) {
                Err(e) => <SearchRequest as Body>::refused(e).0,
                Ok(_) => String::from("accepted"),
            }
        };
        assert_eq!(
            refused(r#"{"query": "x", "z": 1}"#),
            "unknown field 'z' (allowed: query, top_k, min_similarity, memory_type, filters, include_superseded, search_mode, explain, rrf_k, semantic_weight, keyword_weight, as_of)"
        );
        assert_eq!(
            refused(r#"{"query": tru}"#),
            "invalid JSON body: query: expected ident at line 1 column 14"
        );
    }
}
