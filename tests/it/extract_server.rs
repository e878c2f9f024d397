//! Extraction through an OpenAI-compatible chat provider, end to end: a real local server
//! speaking the protocol, the real auditmem binary in front of it.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::routing::post;
use axum::{Json, Router};
use common::{assert_error, Server};
use serde_json::{json, Value};

struct Provider {
    failing: AtomicBool,
    /// Answers only after this many milliseconds (0: at once).
    delay_ms: AtomicUsize,
    calls: AtomicUsize,
}

/// Starts the protocol server on a loopback port; returns its base URL.
fn start_provider(state: Arc<Provider>) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let app = Router::new().route(
                "/v1/chat/completions",
                post(move |headers: axum::http::HeaderMap, Json(req): Json<Value>| {
                    let state = state.clone();
                    async move {
                        state.calls.fetch_add(1, Ordering::SeqCst);
                        let delay = state.delay_ms.load(Ordering::SeqCst) as u64;
                        tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                        let authorized = headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer sk-test");
                        if state.failing.load(Ordering::SeqCst) || !authorized || req["model"] != json!("mini-llm") {
                            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": {"message": "down"}})));
                        }
                        let content = json!({"memories": [
                            {"content": "The user's name is Dana", "memory_type": "fact", "importance": 0.8},
                            {"content": "Reply in Spanish", "memory_type": "rule", "importance": 0.9}
                        ]})
                        .to_string();
                        (
                            axum::http::StatusCode::OK,
                            Json(json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})),
                        )
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("addr")).expect("send");
            axum::serve(listener, app).await.expect("serve");
        });
    });
    format!("http://{}", rx.recv().expect("provider address"))
}

/// A protocol server answering after `delay_ms`, an auditmem extracting through it (plus
/// `extra` flags), and a pro tenant with a memory key: (provider, server, tenant, key).
fn setup(delay_ms: usize, extra: &[&str]) -> (Arc<Provider>, Server, String, String) {
    let provider = Arc::new(Provider {
        failing: AtomicBool::new(false),
        delay_ms: AtomicUsize::new(delay_ms),
        calls: AtomicUsize::new(0),
    });
    let url = start_provider(provider.clone());
    let mut args = vec![
        "--extractor",
        "openai",
        "--extract-url",
        &url,
        "--extract-model",
        "mini-llm",
        "--extract-api-key",
        "sk-test",
    ];
    args.extend_from_slice(extra);
    let s = Server::start_with(&args);
    let tenant = s.create_tenant("pro");
    let key = s.create_key(&tenant, &["memory.read", "memory.write", "audit.read"]);
    (provider, s, tenant, key)
}

/// The tenant's credits as the admin API reports them.
fn credits_of(s: &Server, tenant: &str) -> Value {
    let (_, t) = s.admin(
        reqwest::Method::GET,
        &format!("/admin/v1/tenants/{tenant}"),
        None,
    );
    t["data"]["credits"].clone()
}

#[test]
fn extraction_uses_the_chat_provider_and_a_provider_failure_stores_nothing() {
    let (provider, s, tenant, key) = setup(0, &[]);

    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "Hola, soy Dana. Contesta en español."}),
    );
    assert_eq!(status, 200, "{v}");
    let contents: Vec<&str> = v["data"]["memories"]
        .as_array()
        .expect("memories")
        .iter()
        .map(|m| m["content"].as_str().expect("content"))
        .collect();
    assert_eq!(
        contents,
        vec!["The user's name is Dana", "Reply in Spanish"]
    );
    assert_eq!(v["data"]["memories"][1]["importance"], json!(0.9));
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);

    provider.failing.store(true, Ordering::SeqCst);
    let resp = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I live in Oslo."}),
    );
    assert_error(&resp, 502, 5020);
    assert_eq!(
        provider.calls.load(Ordering::SeqCst),
        3,
        "one retry, then the failure"
    );
    let (_, list) = s.get("/v1/memories", &key);
    assert_eq!(
        list["data"]["total"],
        json!(2),
        "nothing stored by the failed call"
    );
    let (_, t) = s.admin(
        reqwest::Method::GET,
        &format!("/admin/v1/tenants/{tenant}"),
        None,
    );
    assert_eq!(
        t["data"]["credits"],
        json!(98.0),
        "the failed call charged nothing"
    );
    let (_, audit) = s.get("/v1/audit/logs?action=memory.extract&page_size=1", &key);
    assert_eq!(
        (
            audit["data"]["logs"][0]["http_status"].clone(),
            audit["data"]["logs"][0]["error_code"].clone()
        ),
        (json!(502), json!(5020))
    );
}

/// A provider slower than `--provider-timeout-secs`: the extraction ends in 502 (5020) after its
/// one retry, stores and charges nothing, and other writes go through while it waits (the
/// provider is called outside the appender).
#[test]
fn a_slow_provider_times_out_with_502_and_blocks_no_other_write() {
    let (provider, s, tenant, key) = setup(5_000, &["--provider-timeout-secs", "1"]);
    let s = Arc::new(s);

    let done = Arc::new(AtomicBool::new(false));
    let slow = {
        let (s, key, done) = (s.clone(), key.clone(), done.clone());
        std::thread::spawn(move || {
            let resp = s.post(
                "/v1/memories/extract",
                &key,
                json!({"text": "I live in Oslo and I prefer short answers."}),
            );
            done.store(true, Ordering::SeqCst);
            resp
        })
    };
    // Wait until the provider holds the call, then write beside it.
    while provider.calls.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "Written while the provider stalls", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    assert!(
        !done.load(Ordering::SeqCst),
        "the create answered only after the stalled extraction"
    );

    let resp = slow.join().expect("extract thread");
    assert_error(&resp, 502, 5020);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 2, "one retry");
    let (_, list) = s.get("/v1/memories", &key);
    assert_eq!(list["data"]["total"], json!(1), "only the plain create");
    assert_eq!(credits_of(&s, &tenant), json!(100.0), "nothing charged");
}

#[test]
fn a_request_past_the_timeout_is_answered_408_recorded_and_stores_nothing() {
    // The provider would answer within its own timeout, the request's is shorter: the gate
    // answers 408 and records it, and the extraction's memories and charge are not stored.
    let (provider, s, tenant, key) = setup(
        3_000,
        &[
            "--provider-timeout-secs",
            "10",
            "--request-timeout-secs",
            "1",
        ],
    );
    let resp = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I live in Oslo and I prefer short answers."}),
    );
    assert_error(&resp, 408, 4080);
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);
    let (status, logs) = s.get("/v1/audit/logs?action=memory.extract", &key);
    assert_eq!(status, 200, "{logs}");
    assert_eq!(logs["data"]["total"], json!(1), "{logs}");
    let entry = &logs["data"]["logs"][0];
    assert_eq!(entry["http_status"], json!(408), "{logs}");
    assert_eq!(entry["error_code"], json!(4080), "{logs}");
    assert_eq!(entry["credits_consumed"], json!(0.0), "{logs}");
    // Even once the provider has answered, nothing of the extraction is stored or charged.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let (_, list) = s.get("/v1/memories", &key);
    assert_eq!(list["data"]["total"], json!(0), "{list}");
    assert_eq!(credits_of(&s, &tenant), json!(100.0), "nothing charged");
}
