//! Real transcripts through `POST /v1/memories/extract`, the real binary on a loopback port:
//! OpenAI's message format (roles in any case, null content, content parts, tool and function
//! turns), unknown roles skipped and named, and what the rule extractor stores from it; then
//! the same transcript as a chat provider (a real local server speaking the protocol)
//! receives it.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::routing::post;
use axum::{Json, Router};
use common::{assert_error, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// A conversation as an OpenAI client logs it.
fn transcript() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "USER", "content": [
            {"type": "text", "text": "Hi! I'm Dana and I live in Lisbon."},
            {"type": "image_url", "image_url": {"url": "https://example.com/photo.png"}},
            {"type": "text", "text": "Prefiero respuestas en español."}
        ]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "I live in the cloud."},
        {"role": "function", "name": "weather", "content": "My name is Sunny."},
        {"role": "narrator", "content": "My name is Bob."},
        {"role": "Assistant", "content": [{"type": "text", "text": "¡Claro, Dana! I am allergic to nothing."}]}
    ])
}

fn contents(v: &Value) -> Vec<(String, String)> {
    v["data"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| {
            (
                m["content"].as_str().expect("content").to_string(),
                m["memory_type"].as_str().expect("type").to_string(),
            )
        })
        .collect()
}

#[test]
fn extract_a_real_transcript_in_the_third_person_naming_what_was_skipped() {
    let s = Server::start();
    let tenant = s.create_tenant("pro");
    let key = s.create_key(&tenant, &["audit.read", "memory.read", "memory.write"]);

    // When a transcript in OpenAI's format is extracted
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": transcript()}),
    );

    // Then the user's statements are stored in the third person, the assistant's, tools' and
    // the unknown role's are not, and the unknown role is named rather than refused
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        contents(&v),
        vec![
            ("The user's name is Dana".to_string(), "fact".to_string()),
            ("The user lives in Lisbon".to_string(), "fact".to_string()),
            (
                "The user prefers respuestas en español".to_string(),
                "rule".to_string()
            ),
        ]
    );
    let skipped_messages = json!([{"index": 5, "reason": "unknown role \"narrator\""}]);
    assert_eq!(v["data"]["skipped_messages"], skipped_messages);
    assert_eq!(v["data"]["skipped"], json!([]));
    assert_eq!(v["data"]["credits_consumed"], json!(2.0));

    // And the audit entry records the transcript as given and what was skipped
    let (_, list) = s.get("/v1/audit/logs?action=memory.extract&page_size=1", &key);
    let id = list["data"]["logs"][0]["id"].as_str().expect("id");
    let (_, d) = s.get(&format!("/v1/audit/logs/{id}"), &key);
    assert_eq!(d["data"]["input_content"], transcript());
    assert_eq!(
        d["data"]["output_content"]["skipped_messages"],
        skipped_messages
    );

    // A text gives the same statements and skips no message
    let (status, t) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "Je m'appelle Léa et j'habite à Nantes. Ich bin allergisch gegen Erdnüsse."}),
    );
    assert_eq!(status, 200, "{t}");
    assert_eq!(
        contents(&t),
        vec![
            ("The user's name is Léa".to_string(), "fact".to_string()),
            ("The user lives in Nantes".to_string(), "fact".to_string()),
            (
                "The user is allergic to Erdnüsse".to_string(),
                "fact".to_string()
            ),
        ]
    );
    assert_eq!(t["data"]["skipped_messages"], json!([]));
}

#[test]
fn extract_counts_only_text_parts_against_the_limit_and_names_a_malformed_message() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");

    // An inline image far larger than the character limit does not count against it
    let image = format!("data:image/png;base64,{}", "A".repeat(40_000));
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": image}},
            {"type": "text", "text": "I live in Oslo."}
        ]}]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        contents(&v),
        vec![("The user lives in Oslo".to_string(), "fact".to_string())]
    );
    assert_eq!(v["data"]["credits_consumed"], json!(2.0));

    // Text parts do, joined by a newline: 10,000 + 1 + 10,000 characters
    let resp = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a".repeat(10_000)},
            {"type": "text", "text": "b".repeat(10_000)}
        ]}]}),
    );
    assert_error(&resp, 400, 4000);
    assert_eq!(
        resp.1["message"],
        json!("the input is 20001 characters; at most 20000 are allowed")
    );

    // Only unknown roles: nothing to read, each named, and the call's base price
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": [{"role": "robot", "content": "I live in Oslo."}, {"role": "", "content": "x"}]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["memories"], json!([]));
    assert_eq!(
        v["data"]["skipped_messages"],
        json!([{"index": 0, "reason": "unknown role \"robot\""}, {"index": 1, "reason": "unknown role \"\""}])
    );
    assert_eq!(v["data"]["credits_consumed"], json!(1.0));

    for (messages, message) in [
        (
            json!([{"role": "user", "content": 5}]),
            "messages[0].content must be a string, null or a list of content parts",
        ),
        (
            json!([{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": null}]}]),
            "messages[1].content[0].text must be a string",
        ),
        (
            json!([{"role": 1, "content": "a"}]),
            "messages[0].role must be a string",
        ),
    ] {
        let resp = s.post(
            "/v1/memories/extract",
            &key,
            json!({ "messages": messages }),
        );
        assert_error(&resp, 400, 4000);
        assert_eq!(resp.1["message"], json!(message), "{messages}");
    }
    // Nothing of the refusals was stored.
    let (_, list) = s.call(Method::GET, "/v1/memories", Some(&key), None);
    assert_eq!(list["data"]["total"], json!(1));
}

#[test]
fn extract_sends_the_chat_provider_the_transcript_as_read_and_asks_for_third_person() {
    // Given a protocol server that records what it is sent
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorder = seen.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |Json(req): Json<Value>| {
            let recorder = recorder.clone();
            async move {
                recorder.lock().expect("lock").push(req);
                let content = json!({"memories": [
                    {"content": "The user's name is Dana", "memory_type": "fact", "importance": 0.7}
                ]})
                .to_string();
                Json(json!({"id": "x", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ]}))
            }
        }),
    );
    let url = format!("http://{}", common::serve_in_background(app));
    let s = Server::start_with(&[
        "--extractor",
        "openai",
        "--extract-url",
        &url,
        "--extract-model",
        "mini-llm",
    ]);
    let (_, key) = s.tenant_with_key("pro");

    // When the transcript is extracted through it
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"messages": transcript()}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["skipped_messages"],
        json!([{"index": 5, "reason": "unknown role \"narrator\""}])
    );

    // Then the model saw every known turn as text, roles in lowercase, without the
    // unknown one, and was asked for third-person English statements
    let requests = seen.lock().expect("lock");
    assert_eq!(requests.len(), 1);
    let system = requests[0]["messages"][0]["content"]
        .as_str()
        .expect("system prompt");
    assert!(
        system.contains("standalone statement in the third person, in English"),
        "{system}"
    );
    let user = requests[0]["messages"][1]["content"]
        .as_str()
        .expect("user message");
    let conversation = user
        .strip_prefix("Conversation (JSON array of messages):\n")
        .expect("the conversation");
    assert_eq!(
        serde_json::from_str::<Value>(conversation).expect("JSON"),
        json!([
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hi! I'm Dana and I live in Lisbon.\nPrefiero respuestas en español."},
            {"role": "assistant", "content": ""},
            {"role": "tool", "content": "I live in the cloud."},
            {"role": "function", "content": "My name is Sunny."},
            {"role": "assistant", "content": "¡Claro, Dana! I am allergic to nothing."}
        ])
    );
}
