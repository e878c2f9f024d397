//! Extraction by an OpenAI-compatible chat model
//! (`POST {base_url}/v1/chat/completions`) asked for a JSON object, over http or https
//! (rustls), following no redirect. The prompt and the JSON contract are documented in
//! docs/EXTRACTION.md. Its errors name the endpoint without credentials and hold at most the
//! start of the provider's body: they are for the server log, never for a tenant's answer.

use std::str::FromStr;
use std::time::Duration;

use auditmem_projections::MemoryType;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http_client::{chain, redacted, refused_redirect, ExtraRoots};
use crate::openai_compat::snippet;

use super::{
    cap_content, normalize_importance, Candidate, ChatMessage, ExtractError, ExtractInput,
    Extractor, Sourced,
};

/// Sent as the system message; the user message carries the input.
pub const SYSTEM_PROMPT: &str = r#"You extract long-term memories about the user from a conversation or a text.
Return ONLY a JSON object of the form:
{"memories": [{"content": "...", "memory_type": "rule" | "fact" | "context", "importance": 0.0-1.0, "messages": [0]}]}
- "rule": an instruction or preference about how the assistant should behave (e.g. "The user wants answers in French").
- "fact": a stable fact about the user or their world (name, where they live or work, family, allergies and diet, tools they use).
- "context": the user's current task or situation (what they are working on now, deadlines).
Write each memory as one standalone statement in the third person, in English whatever the language of the conversation, starting with "The user" (e.g. "The user's name is Dana", "The user lives in Lisbon", "The user prefers answers in Spanish"). Keep names, places and titles as written.
Split a message that says several things into one memory per statement ("I'm Dana and I live in Lisbon" is two memories).
Only what the user says about themselves is a memory. The assistant's, the system's and tools' messages are context for understanding the user (e.g. what "that" refers to), never facts about the user. Skip questions, hypotheticals ("if I lived in Paris"), negated statements unless they state a lasting fact ("I don't eat pork" is one), statements about other people ("my sister lives in Rome"), greetings, thanks and small talk.
messages: in a conversation, the position in the array (from 0) of each message the memory was drawn from (leave it out for a text).
importance: 0.9-1.0 for safety/health facts and hard rules ("always", "never"), about 0.7 for rules, 0.6 for facts, 0.4 for context.
If there is nothing worth remembering, return {"memories": []}."#;

#[derive(Debug, Clone)]
pub struct OpenAiChatConfig {
    /// e.g. `http://127.0.0.1:11434`; `/v1/chat/completions` is appended (a
    /// trailing `/v1` in the base is accepted and not doubled).
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Per attempt, connection included.
    pub timeout: Duration,
    /// Pause before the single retry.
    pub retry_backoff: Duration,
    /// Certificates trusted for an https provider besides the built-in roots.
    pub roots: ExtraRoots,
}

impl OpenAiChatConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            retry_backoff: Duration::from_millis(250),
            roots: ExtraRoots::default(),
        }
    }
}

pub struct OpenAiChatExtractor {
    client: reqwest::blocking::Client,
    url: String,
    /// `url` as errors name it: without user, password or query.
    shown_url: String,
    model: String,
    api_key: Option<String>,
    retry_backoff: Duration,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<ChatMessage>,
    response_format: ResponseFormat,
    temperature: f32,
}

#[derive(Serialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: AssistantMessage,
}

#[derive(Deserialize)]
struct AssistantMessage {
    content: Option<String>,
}

/// Outcome of one HTTP attempt; only `Retryable` gets a second try.
enum Attempt {
    Done(String),
    Retryable(String),
    Fatal(String),
}

impl OpenAiChatExtractor {
    /// Builds the client; does not contact the provider.
    pub fn new(config: OpenAiChatConfig) -> Result<Self, ExtractError> {
        let client =
            crate::openai_compat::blocking_client(config.timeout, &config.roots).map_err(|e| {
                ExtractError::Config(format!("cannot build HTTP client: {}", chain(&e)))
            })?;
        let url = crate::openai_compat::endpoint(&config.base_url, "chat/completions");
        Ok(Self {
            client,
            shown_url: redacted(&url),
            url,
            model: config.model,
            api_key: config.api_key,
            retry_backoff: config.retry_backoff,
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn attempt(&self, body: &ChatRequest<'_>) -> Attempt {
        let mut req = self.client.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let at = &self.shown_url;
        let resp = match req.send() {
            Ok(r) => r,
            // Timeouts, refused and reset connections are worth one retry;
            // anything else (bad URL, TLS) will fail the same way again.
            Err(e) if e.is_timeout() || e.is_connect() || e.is_request() => {
                return Attempt::Retryable(format!("POST {at}: {}", chain(&e.without_url())))
            }
            Err(e) => return Attempt::Fatal(format!("POST {at}: {}", chain(&e.without_url()))),
        };
        let status = resp.status();
        if status.is_redirection() {
            return Attempt::Fatal(format!(
                "POST {at}: {}",
                refused_redirect(status, resp.headers())
            ));
        }
        let text = match resp.text() {
            Ok(t) => t,
            Err(e) if e.is_timeout() => {
                return Attempt::Retryable(format!(
                    "POST {at}: reading the answer: {}",
                    chain(&e.without_url())
                ))
            }
            Err(e) => {
                return Attempt::Fatal(format!(
                    "POST {at}: reading the answer: {}",
                    chain(&e.without_url())
                ))
            }
        };
        if status.is_server_error() {
            Attempt::Retryable(format!(
                "POST {at}: HTTP {}: {}",
                status.as_u16(),
                snippet(&text)
            ))
        } else if !status.is_success() {
            Attempt::Fatal(format!(
                "POST {at}: HTTP {}: {}",
                status.as_u16(),
                snippet(&text)
            ))
        } else {
            Attempt::Done(text)
        }
    }
}

impl Extractor for OpenAiChatExtractor {
    fn name(&self) -> &str {
        "openai-chat"
    }

    fn extract(&self, input: &ExtractInput) -> Result<Vec<Candidate>, ExtractError> {
        self.extract_unless_gone(input, &|| false)
    }

    /// The one retry is not made for a caller that has gone.
    fn extract_unless_gone(
        &self,
        input: &ExtractInput,
        gone: &dyn Fn() -> bool,
    ) -> Result<Vec<Candidate>, ExtractError> {
        let sourced = self.extract_sourced(input, gone)?;
        Ok(sourced.into_iter().map(|s| s.candidate).collect())
    }

    fn extract_sourced(
        &self,
        input: &ExtractInput,
        gone: &dyn Fn() -> bool,
    ) -> Result<Vec<Sourced>, ExtractError> {
        let user_content = match render_input(input)? {
            Some(c) => c,
            None => return Ok(Vec::new()),
        };
        let text = self.complete(SYSTEM_PROMPT, user_content, gone)?;
        let mut sourced = parse_sourced(&text)?;
        // Only a message the conversation holds is a source; a text has none.
        let held = match input {
            ExtractInput::Messages(m) => m.len(),
            ExtractInput::Text(_) => 0,
        };
        for s in &mut sourced {
            s.messages.retain(|&i| i < held);
        }
        Ok(sourced)
    }
}

impl OpenAiChatExtractor {
    /// One chat completion asking for a JSON object: the system prompt and one user message,
    /// temperature 0, one retry (not for a caller that has gone) on a timeout, a connection
    /// error or a 5xx. The completion's body as received; every failure is
    /// [`ExtractError::Provider`] (or [`ExtractError::Gone`]). Shared by extraction and the
    /// conflict judge (`super::conflict`), so both fail the same way.
    pub(crate) fn complete(
        &self,
        system: &str,
        user_content: String,
        gone: &dyn Fn() -> bool,
    ) -> Result<String, ExtractError> {
        let body = ChatRequest {
            model: &self.model,
            messages: vec![
                ChatMessage {
                    role: "system".into(),
                    content: system.into(),
                },
                ChatMessage {
                    role: "user".into(),
                    content: user_content,
                },
            ],
            response_format: ResponseFormat {
                kind: "json_object",
            },
            // Extraction should be repeatable, not creative.
            temperature: 0.0,
        };
        match self.attempt(&body) {
            Attempt::Done(t) => Ok(t),
            Attempt::Fatal(e) => Err(ExtractError::Provider(e)),
            Attempt::Retryable(first) => {
                if gone() {
                    return Err(ExtractError::Gone);
                }
                tracing::warn!(error = %first, "extraction provider failed, retrying once");
                std::thread::sleep(self.retry_backoff);
                if gone() {
                    return Err(ExtractError::Gone);
                }
                match self.attempt(&body) {
                    Attempt::Done(t) => Ok(t),
                    Attempt::Fatal(e) | Attempt::Retryable(e) => Err(ExtractError::Provider(
                        format!("{e} (after retry; first attempt: {first})"),
                    )),
                }
            }
        }
    }
}

/// The model sees the whole conversation (so it can resolve "that" or "it")
/// as JSON, which keeps message boundaries unambiguous even when a message
/// itself contains "user:". `None` when there is nothing to send.
fn render_input(input: &ExtractInput) -> Result<Option<String>, ExtractError> {
    match input {
        ExtractInput::Text(t) if t.trim().is_empty() => Ok(None),
        ExtractInput::Text(t) => Ok(Some(format!("Text:\n{t}"))),
        ExtractInput::Messages(m) if m.iter().all(|m| m.content.trim().is_empty()) => Ok(None),
        ExtractInput::Messages(m) => {
            let json = serde_json::to_string_pretty(m)
                .map_err(|e| ExtractError::Provider(format!("cannot encode messages: {e}")))?;
            Ok(Some(format!(
                "Conversation (JSON array of messages):\n{json}"
            )))
        }
    }
}

/// [`parse_sourced`]'s candidates alone.
#[cfg(test)]
pub(crate) fn parse_response(body: &str) -> Result<Vec<Candidate>, ExtractError> {
    Ok(parse_sourced(body)?
        .into_iter()
        .map(|s| s.candidate)
        .collect())
}

/// Parses a chat completion body into candidates, each with the messages the model named as
/// its sources. Items with an unknown `memory_type`, an empty `content` or a non-numeric
/// `importance` are skipped (models occasionally invent a category); a body that is not a
/// completion, or content that is not the `{"memories": [...]}` object, is an error.
fn parse_sourced(body: &str) -> Result<Vec<Sourced>, ExtractError> {
    let content = completion_content(body)?;
    let json = strip_fence(&content);
    let value: Value = serde_json::from_str(json).map_err(|e| {
        ExtractError::Provider(format!(
            "model output is not JSON: {e}; content: {}",
            snippet(&content)
        ))
    })?;
    let items = value
        .get("memories")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ExtractError::Provider(format!(
                "model output lacks a \"memories\" array: {}",
                snippet(&content)
            ))
        })?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match parse_item(item) {
            Some(c) => out.push(c),
            None => tracing::warn!(item = %item, "skipping invalid memory from extraction model"),
        }
    }
    Ok(out)
}

/// `choices[0].message.content` of a chat completion body.
pub(crate) fn completion_content(body: &str) -> Result<String, ExtractError> {
    let resp: ChatResponse = serde_json::from_str(body).map_err(|e| {
        ExtractError::Provider(format!(
            "response is not a chat completion: {e}; body: {}",
            snippet(body)
        ))
    })?;
    resp.choices
        .into_iter()
        .next()
        .and_then(|c| c.message.content)
        .ok_or_else(|| ExtractError::Provider("response has no choices[0].message.content".into()))
}

fn parse_item(item: &Value) -> Option<Sourced> {
    let content = cap_content(item.get("content")?.as_str()?);
    if content.is_empty() {
        return None;
    }
    let memory_type = MemoryType::from_str(
        item.get("memory_type")?
            .as_str()?
            .trim()
            .to_lowercase()
            .as_str(),
    )
    .ok()?;
    let importance = match item.get("importance") {
        None | Some(Value::Null) => default_importance(memory_type),
        Some(v) => v.as_f64()? as f32,
    };
    Some(Sourced {
        candidate: Candidate {
            content,
            memory_type,
            importance: normalize_importance(importance),
        },
        messages: sources(item.get("messages")),
    })
}

/// The indexes a memory names as its sources: a list of whole numbers, or one; anything else
/// names none (the memory is kept, with the request's `occurred_at`).
fn sources(given: Option<&Value>) -> Vec<usize> {
    let index = |v: &Value| v.as_u64().and_then(|i| usize::try_from(i).ok());
    let mut out: Vec<usize> = match given {
        Some(Value::Array(items)) => items.iter().filter_map(index).collect(),
        Some(v) => index(v).into_iter().collect(),
        None => Vec::new(),
    };
    out.sort_unstable();
    out.dedup();
    out
}

/// Same base weights as the rule extractor, for models that omit the field.
fn default_importance(t: MemoryType) -> f32 {
    match t {
        MemoryType::Rule => 0.7,
        MemoryType::Fact => 0.6,
        MemoryType::Context => 0.4,
    }
}

/// Accepts output wrapped in a Markdown code fence (```json ... ```), which
/// some models emit despite `response_format`.
pub(crate) fn strip_fence(s: &str) -> &str {
    let t = s.trim();
    let Some(rest) = t.strip_prefix("```") else {
        return t;
    };
    let rest = rest.strip_prefix("json").unwrap_or(rest);
    let rest = rest.strip_prefix("JSON").unwrap_or(rest);
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(content: &str) -> String {
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
            .to_string()
    }

    #[test]
    fn fenced_output_is_accepted() {
        let c = "```json\n{\"memories\": [{\"content\": \"I am vegan\", \"memory_type\": \"fact\", \"importance\": 0.66666}]}\n```";
        let got = parse_response(&completion(c)).unwrap();
        assert_eq!(
            got,
            vec![Candidate {
                content: "I am vegan".into(),
                memory_type: MemoryType::Fact,
                importance: 0.67
            }]
        );
    }

    #[test]
    fn invalid_items_are_skipped_and_importance_clamped() {
        let c = r#"{"memories": [
            {"content": "A", "memory_type": "Rule", "importance": 3},
            {"content": "B", "memory_type": "preference", "importance": 0.5},
            {"content": "  ", "memory_type": "fact"},
            {"content": "C", "memory_type": "context"},
            {"content": "D", "memory_type": "fact", "importance": "high"}
        ]}"#;
        let got = parse_response(&completion(c)).unwrap();
        let summary: Vec<(&str, MemoryType, f32)> = got
            .iter()
            .map(|c| (c.content.as_str(), c.memory_type, c.importance))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("A", MemoryType::Rule, 1.0),
                ("C", MemoryType::Context, 0.4)
            ]
        );
    }

    #[test]
    fn wrong_shapes_are_provider_errors() {
        for body in [
            "not json".to_string(),
            r#"{"choices": []}"#.to_string(),
            r#"{"choices": [{"message": {"content": null}}]}"#.to_string(),
            completion("I think you like cats"),
            completion(r#"{"memory": []}"#),
            completion(r#"{"memories": {"content": "x"}}"#),
        ] {
            assert!(
                matches!(parse_response(&body), Err(ExtractError::Provider(_))),
                "{body}"
            );
        }
    }

    #[test]
    fn empty_input_makes_no_request() {
        let x = OpenAiChatExtractor::new(OpenAiChatConfig::new("http://127.0.0.1:9", "m")).unwrap();
        assert_eq!(x.extract(&ExtractInput::Text("  ".into())).unwrap(), vec![]);
        assert_eq!(x.extract(&ExtractInput::Messages(vec![])).unwrap(), vec![]);
    }

    #[test]
    fn url_is_built_without_doubling_v1() {
        let x = OpenAiChatExtractor::new(OpenAiChatConfig::new("http://h:1/v1/", "m")).unwrap();
        assert_eq!(x.url(), "http://h:1/v1/chat/completions");
    }
}
