//! The conflict decision by an OpenAI-compatible chat model ([`ChatConflictJudge`]), instead
//! of the rules: the prompt, the call and the reading of its answer.

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::{Resolution, Resolver};
use crate::extract::openai::{completion_content, strip_fence};
use crate::extract::{ExtractError, OpenAiChatConfig, OpenAiChatExtractor};
use crate::openai_compat::snippet;

/// Sent as the system message of the conflict judge; the user message carries the new memory
/// and the candidates as JSON.
pub const CONFLICT_PROMPT: &str = r#"You compare a new memory about a user with existing memories about the same user.
The input is a JSON object: {"new": "<new memory>", "existing": [{"id": "<id>", "content": "<memory>"}]}.
Return ONLY a JSON object of the form:
{"contradicts": ["<id>", ...], "duplicates": ["<id>", ...]}
- "contradicts": the existing memories the new one makes out of date because it states a different value for the same single-valued fact about the user: their name, where they live, where or as what they work, their diet (vegan, vegetarian...), an allergy they no longer have, a preference between alternatives (tea or coffee, tabs or spaces, the language of answers), their current project.
- "duplicates": the existing memories that say the same thing as the new one, in any words or language.
Facts that can both be true are neither: two different allergies, liking two things, a city and its country, someone else's fact (e.g. "my sister lives in Rome").
Use only ids from the input. If none apply, return {"contradicts": [], "duplicates": []}."#;

/// The conflict decision by an OpenAI-compatible chat model: one call per candidate batch,
/// through the same client, timeout, retry and errors as [`OpenAiChatExtractor`], so a
/// failure is [`ExtractError::Provider`] (502 at the HTTP layer) as extraction's is.
pub struct ChatConflictJudge {
    chat: OpenAiChatExtractor,
}

impl ChatConflictJudge {
    /// Builds the client; does not contact the provider.
    pub fn new(config: OpenAiChatConfig) -> Result<Self, ExtractError> {
        Ok(Self {
            chat: OpenAiChatExtractor::new(config)?,
        })
    }
}

#[derive(Serialize)]
struct JudgeInput<'a> {
    new: &'a str,
    existing: Vec<JudgeCandidate<'a>>,
}

#[derive(Serialize)]
struct JudgeCandidate<'a> {
    id: String,
    content: &'a str,
}

impl Resolver for ChatConflictJudge {
    fn resolve(
        &self,
        new: &str,
        existing: &[(Uuid, &str)],
        gone: &dyn Fn() -> bool,
    ) -> Result<Resolution, ExtractError> {
        // Nothing to compare with: no call, no cost.
        if existing.is_empty() {
            return Ok(Resolution::default());
        }
        let input = JudgeInput {
            new,
            existing: existing
                .iter()
                .map(|(id, content)| JudgeCandidate {
                    id: id.to_string(),
                    content,
                })
                .collect(),
        };
        let user = serde_json::to_string(&input)
            .map_err(|e| ExtractError::Provider(format!("cannot encode the candidates: {e}")))?;
        let body = self.chat.complete(CONFLICT_PROMPT, user, gone)?;
        parse_judgement(&body, existing)
    }
}

/// The model's answer as a [`Resolution`] over `batch`. The content must be a JSON object with
/// `contradicts` and `duplicates` arrays of strings (else a provider error: the model did not
/// answer the question); an id that is not one of the batch's is ignored (a model may invent
/// or mangle one, and it must never name another memory). The result is in batch order, as
/// the rules give it: the first duplicate, or every contradicted one.
fn parse_judgement(body: &str, batch: &[(Uuid, &str)]) -> Result<Resolution, ExtractError> {
    let content = completion_content(body)?;
    let value: Value = serde_json::from_str(strip_fence(&content)).map_err(|e| {
        ExtractError::Provider(format!(
            "model output is not JSON: {e}; content: {}",
            snippet(&content)
        ))
    })?;
    let ids = |field: &str| -> Result<Vec<Uuid>, ExtractError> {
        let items = value.get(field).and_then(Value::as_array).ok_or_else(|| {
            ExtractError::Provider(format!(
                "model output lacks a \"{field}\" array: {}",
                snippet(&content)
            ))
        })?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let id = item.as_str().ok_or_else(|| {
                ExtractError::Provider(format!(
                    "model output's \"{field}\" holds a non-string: {}",
                    snippet(&content)
                ))
            })?;
            match Uuid::parse_str(id.trim()) {
                Ok(id) if batch.iter().any(|(b, _)| *b == id) => out.push(id),
                _ => tracing::warn!(id, field, "ignoring an id the conflict model was not given"),
            }
        }
        Ok(out)
    };
    let contradicts = ids("contradicts")?;
    let duplicates = ids("duplicates")?;
    if let Some((id, _)) = batch.iter().find(|(b, _)| duplicates.contains(b)) {
        return Ok(Resolution {
            supersedes: Vec::new(),
            duplicate_of: Some(*id),
        });
    }
    Ok(Resolution {
        supersedes: batch
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| contradicts.contains(id))
            .collect(),
        duplicate_of: None,
    })
}
