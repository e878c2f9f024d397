//! Extraction: `POST /v1/memories/extract`, the conversation or text it reads, and what it
//! stored and skipped.

use auditmem_projections::{MemoryExtra, MemoryType};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ArrayBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::answer::{json_of, Memory};
use super::fields::{extra_of, typed, AgentId, Metadata, OccurredAt, Resolve, SessionId, UserId};
use crate::extract::{ChatMessage, ChatRole, ExtractInput};
use crate::wire::envelope::Payload;
use crate::wire::field::{optional, Check, Field, Invalid, NOT_BLANK};
use crate::wire::time::parse_time;
use crate::wire::{empty_refused, unknown_field_named, Body, Refusal};

/// A conversation to extract from: 1 or more messages in OpenAI's chat format, kept also as
/// given (the audit entry's `input_content`). `list` holds the messages of known roles, read
/// into text; a message of an unknown role is in `skipped` instead of refusing the call, so
/// that a transcript from another tool still gives what it can.
#[derive(Clone, Debug, PartialEq)]
pub struct Messages {
    pub list: Vec<ChatMessage>,
    /// Per message of `list`, its own `occurred_at`, if it gives one.
    pub times: Vec<Option<i64>>,
    pub skipped: Vec<SkippedMessage>,
    pub given: Value,
}

/// A message of a conversation in OpenAI's chat format.
// Only for the OpenAPI document: `Messages::check` reads the JSON itself, to name the part
// that is wrong.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct GivenMessage {
    /// system, developer, user, assistant, tool or function, in any case. A message of
    /// another role is skipped and named in the answer's `skipped_messages`.
    role: String,
    /// A string; null or left out (no text, e.g. an assistant's tool call); or content
    /// parts, of which the `text` parts are read (joined by newlines) and the others (images,
    /// audio, files) ignored. Other fields of a message (`name`, `tool_calls`,
    /// `tool_call_id`) are ignored.
    content: Option<GivenContent>,
    /// ISO 8601: when this message was said. A memory extracted from it takes this time (from
    /// several messages: the latest of theirs); a message without one counts as the request's
    /// `occurred_at`.
    occurred_at: Option<String>,
}

/// A message's content: a string or content parts.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum GivenContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// A content part: `{"type": "text", "text": "..."}` is read; a part of another type is
/// ignored.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// A message extraction did not read, and why.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct SkippedMessage {
    /// Its position in `messages`, from 0.
    pub index: usize,
    /// e.g. `unknown role "narrator"`.
    pub reason: String,
}

/// Messages a conversation holds at least.
pub const MIN_MESSAGES: usize = 1;

impl Check for Messages {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        let Value::Array(items) = &raw else {
            return Err(Invalid::new(
                "messages must be a list of {role, content} messages",
            ));
        };
        if items.len() < MIN_MESSAGES {
            return Err(Invalid::new("messages must not be empty"));
        }
        let mut list = Vec::with_capacity(items.len());
        let mut times = Vec::with_capacity(items.len());
        let mut skipped = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Value::Object(m) = item else {
                return Err(Invalid(format!(
                    "messages[{i}] must be an object with role and content"
                )));
            };
            let Some(Value::String(role)) = m.get("role") else {
                return Err(Invalid(format!("messages[{i}].role must be a string")));
            };
            let content = message_text(i, m.get("content"))?;
            let occurred_at = message_time(i, m.get("occurred_at"))?;
            match role.parse::<ChatRole>() {
                Ok(known) => {
                    list.push(ChatMessage {
                        role: <&str>::from(known).to_string(),
                        content,
                    });
                    times.push(occurred_at);
                }
                Err(_) => skipped.push(SkippedMessage {
                    index: i,
                    reason: format!("unknown role {}", Value::String(role.clone())),
                }),
            }
        }
        Ok(Messages {
            list,
            times,
            skipped,
            given: raw,
        })
    }
}

/// Message `i`'s own `occurred_at`: an ISO 8601 time as the request's takes, or null or left
/// out for none.
fn message_time(i: usize, given: Option<&Value>) -> Result<Option<i64>, Invalid> {
    let field = format!("messages[{i}].occurred_at");
    match given {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_time(&field, s).map(Some),
        Some(_) => Err(Invalid(format!(
            "{field} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, or null"
        ))),
    }
}

/// The text of message `i`'s content: a string as it is, null or absent as no text, content
/// parts as their text parts joined by newlines (a newline ends a statement, as a part does).
fn message_text(i: usize, content: Option<&Value>) -> Result<String, Invalid> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                let Value::Object(p) = part else {
                    return Err(Invalid(format!(
                        "messages[{i}].content[{j}] must be an object with a type"
                    )));
                };
                match (p.get("type"), p.get("text")) {
                    (Some(Value::String(t)), Some(Value::String(text))) if t == "text" => {
                        texts.push(text.as_str())
                    }
                    (Some(Value::String(t)), _) if t == "text" => {
                        return Err(Invalid(format!(
                            "messages[{i}].content[{j}].text must be a string"
                        )))
                    }
                    (Some(Value::String(_)), _) => {}
                    _ => {
                        return Err(Invalid(format!(
                            "messages[{i}].content[{j}].type must be a string"
                        )))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(Invalid(format!(
            "messages[{i}].content must be a string, null or a list of content parts"
        ))),
    }
}

/// At least [`MIN_MESSAGES`] messages, each a [`GivenMessage`].
impl PartialSchema for Messages {
    fn schema() -> RefOr<Schema> {
        ArrayBuilder::new()
            .items(Ref::from_schema_name(GivenMessage::name()))
            .min_items(Some(MIN_MESSAGES))
            .into()
    }
}

impl ToSchema for Messages {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((GivenMessage::name().into_owned(), GivenMessage::schema()));
        GivenMessage::schemas(schemas);
    }
}

/// A text to extract from: not blank.
#[derive(Clone, Debug, PartialEq)]
pub struct Text(pub String);

impl Check for Text {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::String(t) if !t.trim().is_empty() => Ok(Text(t)),
            _ => Err(Invalid::new("text must be a non-empty string")),
        }
    }
}

impl PartialSchema for Text {
    fn schema() -> RefOr<Schema> {
        typed(Type::String)
            .min_length(Some(1))
            .pattern(Some(NOT_BLANK))
            .into()
    }
}

impl ToSchema for Text {}

/// Whether extraction skips what duplicates a memory already stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deduplicate(pub bool);

impl Check for Deduplicate {
    type Raw = Value;

    fn check(raw: Value) -> Result<Self, Invalid> {
        match raw {
            Value::Bool(b) => Ok(Deduplicate(b)),
            _ => Err(Invalid::new("deduplicate must be a boolean")),
        }
    }
}

impl PartialSchema for Deduplicate {
    fn schema() -> RefOr<Schema> {
        typed(Type::Boolean).into()
    }
}

impl ToSchema for Deduplicate {}

/// `POST /v1/memories/extract`: exactly one of `messages` and `text` (at most
/// `--max-extract-chars` characters in all, 20,000 by default); `null` is "not given".
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(
    description = "Exactly one of `messages` and `text` (at most 20,000 characters in all by default; an input in which more than 50 memories are found, by default, is refused)."
)]
pub struct ExtractRequest {
    #[schema(inline, nullable = false)]
    pub messages: Option<Field<Messages>>,
    #[schema(inline, nullable = false)]
    pub text: Option<Field<Text>>,
    /// Default false.
    #[schema(inline)]
    pub deduplicate: Option<Field<Deduplicate>>,
    /// Given to every memory extracted.
    #[schema(inline)]
    pub user_id: Option<Field<UserId>>,
    #[schema(inline)]
    pub agent_id: Option<Field<AgentId>>,
    #[schema(inline)]
    pub session_id: Option<Field<SessionId>>,
    #[schema(inline)]
    pub metadata: Option<Field<Metadata>>,
    /// ISO 8601: when the conversation or text took place, given to every memory extracted
    /// but one drawn from messages that give their own `occurred_at`.
    #[schema(inline)]
    pub occurred_at: Option<Field<OccurredAt>>,
    /// Default false. True: each memory found supersedes the stored ones of its scope it
    /// contradicts, and one equal in meaning to a stored one is skipped (`skipped`).
    #[schema(inline)]
    pub resolve: Option<Field<Resolve>>,
}

/// An extraction, checked: its input as the extractor takes it, as it is audited, and as text
/// (what is measured and charged).
#[derive(Clone, Debug, PartialEq)]
pub struct Extraction {
    pub deduplicate: bool,
    pub resolve: bool,
    /// Scope, metadata and occurrence time every memory extracted is given.
    pub extra: MemoryExtra,
    pub input: ExtractInput,
    /// Per message of the input, its own `occurred_at` (empty for a text).
    pub message_times: Vec<Option<i64>>,
    /// The messages not read (an unknown role), answered as `skipped_messages`.
    pub skipped_messages: Vec<SkippedMessage>,
    pub input_value: Value,
    pub input_text: String,
}

impl Body for ExtractRequest {
    type Checked = Extraction;

    fn when_empty() -> Option<Result<Self, Invalid>> {
        empty_refused()
    }

    fn refused(e: Refusal<serde_json::Error>) -> Invalid {
        unknown_field_named(e)
    }

    fn check(self) -> Result<Extraction, Invalid> {
        let deduplicate = optional(self.deduplicate)?.is_some_and(|d| d.0);
        let extra = extra_of(
            self.user_id,
            self.agent_id,
            self.session_id,
            self.metadata,
            None,
            self.occurred_at,
        )?;
        let mut skipped_messages = Vec::new();
        let mut message_times = Vec::new();
        let (input, input_value, input_text) = match (self.messages, self.text) {
            (Some(_), Some(_)) => {
                return Err(Invalid::new(
                    "give exactly one of messages or text, not both",
                ))
            }
            (None, None) => return Err(Invalid::new("give exactly one of messages or text")),
            (Some(m), None) => {
                let Messages {
                    list,
                    times,
                    skipped,
                    given,
                } = m.value()?;
                skipped_messages = skipped;
                message_times = times;
                // What is measured and charged is the text of the messages read.
                let text = list
                    .iter()
                    .map(|m| m.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n");
                (ExtractInput::Messages(list), given, text)
            }
            // The audit detail's input_content is an object or an array (the interface), so
            // the text is recorded as the object it came in.
            (None, Some(t)) => {
                let Text(t) = t.value()?;
                (
                    ExtractInput::Text(t.clone()),
                    serde_json::json!({ "text": t }),
                    t,
                )
            }
        };
        Ok(Extraction {
            deduplicate,
            resolve: optional(self.resolve)?.is_some_and(|r| r.0),
            extra,
            input,
            message_times,
            skipped_messages,
            input_value,
            input_text,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedMemory {
    pub content: String,
    pub memory_type: MemoryType,
    // Why it was not stored: `duplicate`.
    pub reason: &'static str,
    #[schema(value_type = String)]
    pub duplicate_of: Uuid,
}

/// What an extraction stored and skipped, and what it cost.
#[derive(Debug, Serialize, ToSchema)]
pub struct Extracted {
    pub memories: Vec<Memory>,
    pub skipped: Vec<SkippedMemory>,
    pub credits_consumed: f64,
    /// The messages not read, each with its index and why (an unknown role); empty for a
    /// text.
    pub skipped_messages: Vec<SkippedMessage>,
}

impl Extracted {
    /// What the extraction's audit entry records as its `output_content`: the memories stored
    /// and skipped (the charge is the entry's own `credits_consumed`).
    pub fn output(&self) -> Value {
        #[derive(Serialize)]
        struct Output<'a> {
            memories: &'a [Memory],
            skipped: &'a [SkippedMemory],
            skipped_messages: &'a [SkippedMessage],
        }
        json_of(&Output {
            memories: &self.memories,
            skipped: &self.skipped,
            skipped_messages: &self.skipped_messages,
        })
    }
}

impl Payload for Extracted {
    fn envelope_name() -> std::borrow::Cow<'static, str> {
        "ExtractEnvelope".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::memory::parse;

    #[test]
    fn roles_are_the_schemas() {
        let names: Vec<&str> = <ChatRole as strum::VariantArray>::VARIANTS
            .iter()
            .map(|r| r.into())
            .collect();
        assert_eq!(
            names,
            [
                "system",
                "developer",
                "user",
                "assistant",
                "tool",
                "function"
            ]
        );
    }

    fn extraction(body: Value) -> Result<Extraction, String> {
        parse::<ExtractRequest>(body).check().map_err(|e| e.0)
    }

    #[test]
    fn a_transcript_is_read_as_openai_sends_it() {
        // Given roles in any case, null content, content parts and an unknown role
        let got = extraction(serde_json::json!({"messages": [
            {"role": "SYSTEM", "content": "Be brief."},
            {"role": "User", "content": [
                {"type": "text", "text": "My name is Dana."},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "I live in Lisbon."}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
            {"role": "narrator", "content": "Meanwhile..."},
            {"role": "function", "name": "f"}
        ]}))
        .expect("accepted");
        // Then the known ones are read into text and the unknown one is skipped
        let m = |role: &str, content: &str| ChatMessage {
            role: role.into(),
            content: content.into(),
        };
        assert_eq!(
            got.input,
            ExtractInput::Messages(vec![
                m("system", "Be brief."),
                m("user", "My name is Dana.\nI live in Lisbon."),
                m("assistant", ""),
                m("tool", "42"),
                m("function", ""),
            ])
        );
        assert_eq!(
            got.skipped_messages,
            vec![SkippedMessage {
                index: 4,
                reason: "unknown role \"narrator\"".into()
            }]
        );
        assert_eq!(
            got.input_text,
            "Be brief.\nMy name is Dana.\nI live in Lisbon.\n\n42\n"
        );
    }

    #[test]
    fn a_malformed_message_is_named() {
        for (messages, message) in [
            (
                serde_json::json!({"role": "user"}),
                "messages must be a list of {role, content} messages",
            ),
            (serde_json::json!([]), "messages must not be empty"),
            (
                serde_json::json!(["hi"]),
                "messages[0] must be an object with role and content",
            ),
            (
                serde_json::json!([{"content": "x"}]),
                "messages[0].role must be a string",
            ),
            (
                serde_json::json!([{"role": "user", "content": "a"}, {"role": "user", "content": 5}]),
                "messages[1].content must be a string, null or a list of content parts",
            ),
            (
                serde_json::json!([{"role": "user", "content": ["x"]}]),
                "messages[0].content[0] must be an object with a type",
            ),
            (
                serde_json::json!([{"role": "user", "content": [{"type": "text", "text": 1}]}]),
                "messages[0].content[0].text must be a string",
            ),
            (
                serde_json::json!([{"role": "user", "content": [{"text": "x"}]}]),
                "messages[0].content[0].type must be a string",
            ),
        ] {
            assert_eq!(
                extraction(serde_json::json!({ "messages": messages })).map(|_| ()),
                Err(message.to_string()),
                "{messages}"
            );
        }
    }

    #[test]
    fn an_extractions_occurred_at_is_given_to_every_memory_it_finds() {
        let got = extraction(
            serde_json::json!({"text": "I adopted a dog.", "user_id": "u",
            "occurred_at": "2023-05-08T13:56:00+02:00"}),
        )
        .expect("checked");
        assert_eq!(got.extra.occurred_at, Some(1_683_546_960_000_000));
        assert_eq!(got.extra.user_id.as_deref(), Some("u"));
        assert_eq!(
            extraction(serde_json::json!({"text": "t", "occurred_at": "then"})).map(|_| ()),
            Err(
                "occurred_at must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got 'then'"
                    .into()
            )
        );
    }
}
