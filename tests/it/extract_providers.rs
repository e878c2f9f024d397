//! OpenAiChatExtractor against a real local HTTP server speaking the
//! `/v1/chat/completions` protocol. The first path segment picks the
//! server's behaviour; requests are counted per behaviour to observe retries.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem::extract::{
    ChatMessage, ExtractError, ExtractInput, Extractor, OpenAiChatConfig, OpenAiChatExtractor,
};
use auditmem_projections::MemoryType;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Default)]
struct Seen {
    calls: HashMap<String, usize>,
    requests: Vec<(Option<String>, Value)>,
}
type Shared = Arc<Mutex<Seen>>;

const MEMORIES: &str = r#"{"memories": [
  {"content": "I am allergic to peanuts", "memory_type": "fact", "importance": 0.9},
  {"content": "Always answer in French", "memory_type": "rule", "importance": 1.4}]}"#;

fn completion(content: &str) -> String {
    json!({"id": "x", "object": "chat.completion",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
    .to_string()
}

async fn chat(
    State(seen): State<Shared>,
    Path(mode): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, String) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let call = {
        let mut s = seen.lock().unwrap();
        s.requests.push((auth, body));
        let n = s.calls.entry(mode.clone()).or_default();
        *n += 1;
        *n
    };
    let error = (
        StatusCode::INTERNAL_SERVER_ERROR,
        "upstream exploded".to_string(),
    );
    match (mode.as_str(), call) {
        ("flaky", 1) | ("down", _) => error,
        ("slow", 1) => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            (StatusCode::OK, completion(MEMORIES))
        }
        ("garbage", _) => (
            StatusCode::OK,
            completion("Sure! Here are the memories: none"),
        ),
        ("fenced", _) => (
            StatusCode::OK,
            completion(&format!("```json\n{MEMORIES}\n```")),
        ),
        _ => (StatusCode::OK, completion(MEMORIES)),
    }
}

/// The protocol server on a loopback port.
fn start_server() -> (SocketAddr, Shared) {
    let seen: Shared = Arc::default();
    let app = Router::new()
        .route("/{mode}/v1/chat/completions", post(chat))
        .with_state(seen.clone());
    (common::serve_in_background(app), seen)
}

fn extractor(addr: SocketAddr, mode: &str) -> OpenAiChatExtractor {
    let mut cfg = OpenAiChatConfig::new(format!("http://{addr}/{mode}"), "gpt-test");
    cfg.api_key = Some("sk-chat".into());
    cfg.timeout = Duration::from_millis(1500);
    cfg.retry_backoff = Duration::from_millis(10);
    OpenAiChatExtractor::new(cfg).unwrap()
}

fn input() -> ExtractInput {
    ExtractInput::Messages(vec![ChatMessage {
        role: "user".into(),
        content: "I'm allergic to peanuts. Always answer in French.".into(),
    }])
}

fn expected() -> Vec<(String, MemoryType, f32)> {
    vec![
        ("I am allergic to peanuts".into(), MemoryType::Fact, 0.9),
        ("Always answer in French".into(), MemoryType::Rule, 1.0),
    ]
}

fn summary(
    r: Result<Vec<auditmem::extract::Candidate>, ExtractError>,
) -> Vec<(String, MemoryType, f32)> {
    r.unwrap()
        .into_iter()
        .map(|c| (c.content, c.memory_type, c.importance))
        .collect()
}

fn calls(seen: &Shared, mode: &str) -> usize {
    seen.lock().unwrap().calls.get(mode).copied().unwrap_or(0)
}

#[test]
fn success_sends_model_prompt_and_key() {
    let (addr, seen) = start_server();
    let x = extractor(addr, "ok");
    assert_eq!(summary(x.extract(&input())), expected());
    let s = seen.lock().unwrap();
    let (auth, body) = &s.requests[0];
    assert_eq!(auth.as_deref(), Some("Bearer sk-chat"));
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(body["messages"][0]["content"]
        .as_str()
        .is_some_and(|p| p.contains("\"memories\"")));
    assert_eq!(body["messages"][1]["role"], "user");
    assert!(body["messages"][1]["content"]
        .as_str()
        .is_some_and(|c| c.contains("allergic to peanuts")));
}

#[test]
fn fenced_content_is_accepted() {
    let (addr, _) = start_server();
    assert_eq!(
        summary(extractor(addr, "fenced").extract(&input())),
        expected()
    );
}

#[test]
fn first_500_is_retried_once() {
    let (addr, seen) = start_server();
    assert_eq!(
        summary(extractor(addr, "flaky").extract(&input())),
        expected()
    );
    assert_eq!(calls(&seen, "flaky"), 2);
}

#[test]
fn timeout_is_retried_once() {
    let (addr, seen) = start_server();
    assert_eq!(
        summary(extractor(addr, "slow").extract(&input())),
        expected()
    );
    assert_eq!(calls(&seen, "slow"), 2);
}

#[test]
fn persistent_500_is_a_provider_error_after_one_retry() {
    let (addr, seen) = start_server();
    match extractor(addr, "down").extract(&input()) {
        Err(ExtractError::Provider(m)) => assert!(m.contains("HTTP 500"), "{m}"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(calls(&seen, "down"), 2);
}

#[test]
fn malformed_content_is_a_provider_error_without_retry() {
    let (addr, seen) = start_server();
    let r = extractor(addr, "garbage").extract(&ExtractInput::Text("I live in Oslo".into()));
    assert!(matches!(r, Err(ExtractError::Provider(_))), "{r:?}");
    assert_eq!(calls(&seen, "garbage"), 1);
}
