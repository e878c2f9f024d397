//! Memory extraction: turning a conversation or a free text into candidate
//! memories (rule / fact / context, with an importance). Owns the
//! [`Extractor`] abstraction, the model-free [`RuleExtractor`] used by
//! default, and [`OpenAiChatExtractor`] for an OpenAI-compatible chat model; and deciding
//! whether a new memory contradicts or duplicates existing ones ([`relate`], [`resolve`]).
//! What each one catches is documented in docs/EXTRACTION.md.

mod conflict;
mod cues;
#[cfg(test)]
mod eval;
mod lexicon;
mod openai;
mod person;
mod rules;

use auditmem_projections::MemoryType;
use serde::{Deserialize, Serialize};

pub use conflict::{
    relate, resolve, ChatConflictJudge, ConflictKind, Relation, Resolution, Resolver, RuleResolver,
    CONFLICT_PROMPT,
};
pub use openai::{OpenAiChatConfig, OpenAiChatExtractor, SYSTEM_PROMPT};
pub use rules::RuleExtractor;

/// Longest memory content, in characters: a memory's content and a search query hold at most
/// this many (after trimming; `wire::memory` refuses more), and extracted statements are cut to
/// it so that one pasted document cannot become one giant memory.
pub const MAX_CONTENT_CHARS: usize = 10_000;

/// The roles of the messages extraction reads, in any case ("User" is `user`). The rule
/// extractor reads only `user` turns; the others are context (the chat extractor shows the
/// model the whole conversation). A message of any other role is skipped.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::VariantArray,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase", ascii_case_insensitive)]
pub enum ChatRole {
    System,
    /// OpenAI's name for the system role of its newer models.
    Developer,
    User,
    Assistant,
    Tool,
    /// OpenAI's older name for a tool's answer.
    Function,
}

/// A message of a conversation to extract from, as the extractors read it: its role in
/// lowercase, and its text (the text parts of a message given as content parts, joined by
/// newlines; empty for a message without content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    #[schema(value_type = ChatRole)]
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtractInput {
    Messages(Vec<ChatMessage>),
    Text(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub content: String,
    pub memory_type: MemoryType,
    /// In [0, 1], rounded to 2 decimals.
    pub importance: f32,
}

/// A candidate and the messages it was drawn from: their indexes in the conversation the
/// extractor read (`ExtractInput::Messages`), ascending. None for a text, or when the
/// extractor cannot say (a model that named none): the memory then takes the request's
/// `occurred_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced {
    pub candidate: Candidate,
    pub messages: Vec<usize>,
}

/// Blocking (may call a remote model): async callers use `spawn_blocking`.
pub trait Extractor: Send + Sync {
    fn name(&self) -> &str;
    fn extract(&self, input: &ExtractInput) -> Result<Vec<Candidate>, ExtractError>;
    /// [`Extractor::extract`] for a caller that may go away (its request timed out, its client
    /// disconnected): `gone()` is asked before any work past the first attempt, and once it says
    /// so no further work is started ([`ExtractError::Gone`]). The default does its work in one go.
    fn extract_unless_gone(
        &self,
        input: &ExtractInput,
        gone: &dyn Fn() -> bool,
    ) -> Result<Vec<Candidate>, ExtractError> {
        let _ = gone;
        self.extract(input)
    }
    /// [`Extractor::extract_unless_gone`] with the messages each candidate was drawn from. The
    /// default names none.
    fn extract_sourced(
        &self,
        input: &ExtractInput,
        gone: &dyn Fn() -> bool,
    ) -> Result<Vec<Sourced>, ExtractError> {
        Ok(self
            .extract_unless_gone(input, gone)?
            .into_iter()
            .map(|candidate| Sourced {
                candidate,
                messages: Vec::new(),
            })
            .collect())
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ExtractError {
    /// The extraction provider failed or answered nonsense; an HTTP layer
    /// should report this as 502 Bad Gateway.
    #[error("extraction provider failed: {0}")]
    Provider(String),
    /// The extractor could not be set up from its configuration.
    #[error("extractor misconfigured: {0}")]
    Config(String),
    /// The caller went away, and the work it still needed was not started.
    #[error("the caller has gone; no further extraction work was started")]
    Gone,
}

/// Clamps to [0, 1] and rounds to 2 decimals so that the same input always
/// stores the same number, whichever extractor produced it.
pub(crate) fn normalize_importance(x: f32) -> f32 {
    let x = if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    };
    (x * 100.0).round() / 100.0
}

/// Trims and caps at [`MAX_CONTENT_CHARS`] on a char boundary.
pub(crate) fn cap_content(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(MAX_CONTENT_CHARS) {
        Some((cut, _)) => s[..cut].trim_end().to_string(),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn importance_is_clamped_and_rounded() {
        assert_eq!(normalize_importance(1.7), 1.0);
        assert_eq!(normalize_importance(-0.2), 0.0);
        assert_eq!(normalize_importance(0.456), 0.46);
        assert_eq!(normalize_importance(f32::NAN), 0.0);
    }

    #[test]
    fn content_is_capped_on_char_boundary() {
        let long = "é".repeat(MAX_CONTENT_CHARS + 5);
        assert_eq!(cap_content(&long).chars().count(), MAX_CONTENT_CHARS);
        assert_eq!(cap_content("  x  "), "x");
    }

    #[test]
    fn candidate_serializes_with_lowercase_type() {
        let c = Candidate {
            content: "I am vegan".into(),
            memory_type: MemoryType::Fact,
            importance: 0.6,
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["memory_type"], "fact");
    }
}
