//! OpenAiEmbedder against a real local HTTP server speaking the
//! `/v1/embeddings` protocol. The first path segment picks the server's
//! behaviour, so one server serves every case.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem::embed::{EmbedError, Embedder, OpenAiEmbedConfig, OpenAiEmbedder};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

async fn embeddings(
    State(seen): State<Seen>,
    Path(mode): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, String) {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    seen.lock().unwrap().push((auth.clone(), body.clone()));
    match mode.as_str() {
        "fail500" => return (StatusCode::INTERNAL_SERVER_ERROR, "model overloaded".into()),
        "badjson" => return (StatusCode::OK, "{\"data\": [".into()),
        _ => {}
    }
    if auth.as_deref() != Some("Bearer sk-test") {
        return (StatusCode::UNAUTHORIZED, "bad key".into());
    }
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    // Deterministic, unnormalised vectors, listed in reverse order so the
    // client has to sort by index.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| {
            let len = t.as_str().map_or(0, str::len) as f32;
            json!({"object": "embedding", "index": i, "embedding": [len, (i + 1) as f32, 2.0, 0.0]})
        })
        .collect();
    let answer = json!({"object": "list", "data": data, "model": body["model"], "usage": {}});
    (StatusCode::OK, answer.to_string())
}

/// The protocol server on a loopback port.
fn start_server() -> (SocketAddr, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new()
        .route("/{mode}/v1/embeddings", post(embeddings))
        .with_state(seen.clone());
    (common::serve_in_background(app), seen)
}

fn embedder(addr: SocketAddr, mode: &str, dim: Option<usize>) -> OpenAiEmbedder {
    let mut cfg = OpenAiEmbedConfig::new(format!("http://{addr}/{mode}"), "text-embed-test");
    cfg.api_key = Some("sk-test".into());
    cfg.timeout = Duration::from_secs(5);
    cfg.dim = dim;
    OpenAiEmbedder::new(cfg).unwrap()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[test]
fn embeds_in_input_order_normalised_and_learns_dim() {
    let (addr, seen) = start_server();
    let e = embedder(addr, "ok", None);
    assert_eq!(e.dim(), 0);
    assert_eq!(e.model_id(), "text-embed-test");
    let texts = vec!["a".to_string(), "bbb".to_string(), "cc".to_string()];
    let got = e.embed_batch(&texts).unwrap();
    assert_eq!(e.dim(), 4);
    for (i, (v, t)) in got.iter().zip(&texts).enumerate() {
        assert!((norm(v) - 1.0).abs() < 1e-6);
        let raw = [t.len() as f32, (i + 1) as f32, 2.0, 0.0];
        let n = norm(&raw);
        for (a, b) in v.iter().zip(raw) {
            assert!((a - b / n).abs() < 1e-6, "text {t:?}: {v:?}");
        }
    }
    let seen = seen.lock().unwrap();
    let (auth, body) = &seen[0];
    assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
    assert_eq!(
        body,
        &json!({"model": "text-embed-test", "input": ["a", "bbb", "cc"]})
    );
}

#[test]
fn server_error_maps_to_provider_http_with_status() {
    let (addr, _) = start_server();
    match embedder(addr, "fail500", None).embed_batch(&["x".into()]) {
        Err(EmbedError::ProviderHttp {
            status: Some(500),
            message,
        }) => assert!(message.contains("model overloaded"), "{message}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn malformed_json_maps_to_provider_protocol() {
    let (addr, _) = start_server();
    let r = embedder(addr, "badjson", None).embed_batch(&["x".into()]);
    assert!(matches!(r, Err(EmbedError::ProviderProtocol(_))), "{r:?}");
}

#[test]
fn wrong_key_and_wrong_dim_are_errors() {
    let (addr, _) = start_server();
    let mut cfg = OpenAiEmbedConfig::new(format!("http://{addr}/ok"), "m");
    cfg.api_key = Some("wrong".into());
    let r = OpenAiEmbedder::new(cfg).unwrap().embed_batch(&["x".into()]);
    assert!(
        matches!(
            r,
            Err(EmbedError::ProviderHttp {
                status: Some(401),
                ..
            })
        ),
        "{r:?}"
    );
    let r = embedder(addr, "ok", Some(384)).embed_batch(&["x".into()]);
    assert!(matches!(r, Err(EmbedError::ProviderProtocol(_))), "{r:?}");
}
