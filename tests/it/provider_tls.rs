//! Provider calls and the CLI at the network edge: https through a private CA (a CA and a
//! certificate for 127.0.0.1 made here with rcgen), redirects not followed, and a provider's
//! failure reaching the tenant and its audit entry as a generic message with the request id,
//! its detail (the endpoint without credentials, the status, the provider's body) only in the
//! server's log.
//!
//! One OpenAI-protocol server serves every case; the first path segment picks its behaviour:
//! `ok` answers, `fail` answers 500 with a body that must not travel, `redirect` answers 307 to
//! `ok` on a second server that counts what reaches it.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem::embed::{EmbedError, Embedder, OpenAiEmbedConfig, OpenAiEmbedder};
use auditmem::extract::{
    ExtractError, ExtractInput, Extractor, OpenAiChatConfig, OpenAiChatExtractor,
};
use auditmem::http_client::ExtraRoots;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use common::{assert_error, cli, path_str, Server, ADMIN_TOKEN};
use serde_json::{json, Value};
use tokio_rustls::rustls;

/// What the provider's error body says: it must reach no tenant and no audit entry.
const SECRET_BODY: &str = "SECRET-BODY internal trace id 7f3e, upstream pool gpu-4";
/// The password in the providers' URLs: in no answer, no audit entry, no log line.
const URL_PASSWORD: &str = "hunter2pass";

/// A private CA, written as a PEM file, and a server certificate it signed for 127.0.0.1.
struct Pki {
    _dir: tempfile::TempDir,
    ca_file: PathBuf,
    server: Arc<rustls::ServerConfig>,
}

fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "auditmem test CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca.self_signed(&ca_key).expect("CA certificate");
    let key = rcgen::KeyPair::generate().expect("server key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("server params")
        .signed_by(&key, &ca, &ca_key)
        .expect("server certificate");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .expect("server TLS config");
    Pki {
        _dir: dir,
        ca_file,
        server: Arc::new(server),
    }
}

/// A TLS listener for `axum::serve`: a handshake a client refuses (it does not trust the CA)
/// is skipped, and the next connection awaited.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    tls: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(stream) = self.tls.accept(tcp).await {
                return (stream, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// Serves `app` over https on 127.0.0.1, from a runtime on a thread of its own.
fn serve_tls(app: Router, pki: &Pki) -> SocketAddr {
    let tls = tokio_rustls::TlsAcceptor::from(pki.server.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async move {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(tcp.local_addr().expect("addr")).expect("send");
            axum::serve(TlsListener { tcp, tls }, app)
                .await
                .expect("serve");
        });
    });
    rx.recv().expect("https address")
}

/// An https front for `upstream` (plain http): TLS ends here, bytes go on as they are.
fn tls_proxy(upstream: &str, pki: &Pki) -> SocketAddr {
    let upstream: SocketAddr = upstream
        .trim_start_matches("http://")
        .parse()
        .expect("upstream address");
    let tls = tokio_rustls::TlsAcceptor::from(pki.server.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async move {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(tcp.local_addr().expect("addr")).expect("send");
            loop {
                let Ok((conn, _)) = tcp.accept().await else {
                    continue;
                };
                let tls = tls.clone();
                tokio::spawn(async move {
                    let Ok(mut front) = tls.accept(conn).await else {
                        return;
                    };
                    if let Ok(mut back) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut front, &mut back).await;
                    }
                });
            }
        });
    });
    rx.recv().expect("proxy address")
}

/// Requests reaching the provider, by mode.
type Hits = Arc<Mutex<HashMap<String, usize>>>;

#[derive(Clone)]
struct Provider {
    hits: Hits,
    /// Where `redirect` points.
    elsewhere: String,
}

impl Provider {
    fn hit(&self, mode: &str) {
        *self
            .hits
            .lock()
            .expect("hits")
            .entry(mode.to_string())
            .or_default() += 1;
    }

    /// The answer of a mode other than `ok`, if it has its own.
    fn special(&self, mode: &str, path: &str) -> Option<Response> {
        match mode {
            "fail" => Some((StatusCode::INTERNAL_SERVER_ERROR, SECRET_BODY).into_response()),
            "redirect" => Some(
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, format!("{}/ok/v1/{path}", self.elsewhere))],
                )
                    .into_response(),
            ),
            _ => None,
        }
    }
}

async fn embeddings(
    State(p): State<Provider>,
    Path(mode): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    p.hit(&mode);
    if let Some(r) = p.special(&mode, "embeddings") {
        return r;
    }
    let data: Vec<Value> = body["input"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let len = t.as_str().map_or(0, str::len) as f32;
            json!({"object": "embedding", "index": i, "embedding": [len, 1.0, (i % 7) as f32, 0.5]})
        })
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response()
}

async fn chat(State(p): State<Provider>, Path(mode): Path<String>, _: HeaderMap) -> Response {
    p.hit(&mode);
    if let Some(r) = p.special(&mode, "chat/completions") {
        return r;
    }
    let content = json!({"memories": [
        {"content": "The user's name is Dana", "memory_type": "fact", "importance": 0.8}
    ]})
    .to_string();
    Json(json!({"id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}))
    .into_response()
}

fn provider_app(p: Provider) -> Router {
    Router::new()
        .route("/{mode}/v1/embeddings", post(embeddings))
        .route("/{mode}/v1/chat/completions", post(chat))
        .with_state(p)
}

/// A plain provider (where redirects point) and its hits.
fn plain_provider() -> (String, Hits) {
    let hits = Hits::default();
    let app = provider_app(Provider {
        hits: hits.clone(),
        elsewhere: String::new(),
    });
    (format!("http://{}", common::serve_in_background(app)), hits)
}

fn count(h: &Hits, mode: &str) -> usize {
    h.lock().expect("hits").get(mode).copied().unwrap_or(0)
}

fn roots(pki: &Pki) -> ExtraRoots {
    ExtraRoots::load(Some(&pki.ca_file)).expect("CA bundle")
}

#[test]
fn https_providers_are_trusted_through_the_ca_bundle_and_only_through_it() {
    let pki = pki();
    let hits = Hits::default();
    let addr = serve_tls(
        provider_app(Provider {
            hits: hits.clone(),
            elsewhere: String::new(),
        }),
        &pki,
    );
    let base = format!("https://127.0.0.1:{}/ok", addr.port());

    let mut cfg = OpenAiEmbedConfig::new(base.clone(), "m");
    cfg.timeout = Duration::from_secs(5);
    cfg.roots = roots(&pki);
    let v = OpenAiEmbedder::new(cfg.clone())
        .expect("embedder")
        .embed_batch(&["abc".into()])
        .expect("https with the CA");
    assert_eq!(v.len(), 1);
    cfg.roots = ExtraRoots::default();
    match OpenAiEmbedder::new(cfg)
        .expect("embedder")
        .embed_batch(&["abc".into()])
    {
        Err(EmbedError::ProviderHttp {
            status: None,
            message,
        }) => assert!(message.contains("UnknownIssuer"), "{message}"),
        other => panic!("an unknown CA was trusted: {other:?}"),
    }

    let mut cfg = OpenAiChatConfig::new(base, "m");
    cfg.timeout = Duration::from_secs(5);
    cfg.retry_backoff = Duration::from_millis(10);
    cfg.roots = roots(&pki);
    let text = ExtractInput::Text("My name is Dana.".into());
    let got = OpenAiChatExtractor::new(cfg.clone())
        .expect("extractor")
        .extract(&text)
        .expect("https with the CA");
    assert_eq!(got[0].content, "The user's name is Dana");
    cfg.roots = ExtraRoots::default();
    match OpenAiChatExtractor::new(cfg)
        .expect("extractor")
        .extract(&text)
    {
        Err(ExtractError::Provider(m)) => assert!(m.contains("UnknownIssuer"), "{m}"),
        other => panic!("an unknown CA was trusted: {other:?}"),
    }
    // Only the calls that trusted the CA got through the handshake.
    assert_eq!(count(&hits, "ok"), 2);
}

#[test]
fn a_server_reaches_https_providers_with_its_provider_ca_file() {
    let pki = pki();
    let addr = serve_tls(
        provider_app(Provider {
            hits: Hits::default(),
            elsewhere: String::new(),
        }),
        &pki,
    );
    let base = format!("https://127.0.0.1:{}/ok", addr.port());
    let flags = |ca: Option<&str>| {
        let mut v = vec![
            "--embedder".to_string(),
            "openai".into(),
            "--embed-url".into(),
            base.clone(),
            "--extractor".into(),
            "openai".into(),
            "--extract-url".into(),
            base.clone(),
        ];
        if let Some(ca) = ca {
            v.extend(["--provider-ca-file".to_string(), ca.to_string()]);
        }
        v
    };
    let with_ca = flags(Some(path_str(&pki.ca_file)));
    let s = Server::start_with(&with_ca.iter().map(String::as_str).collect::<Vec<_>>());
    let (_, key) = s.tenant_with_key("pro");
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "I like tea", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "Hi, I'm Dana."}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["data"]["memories"][0]["content"],
        json!("The user's name is Dana")
    );

    let without = flags(None);
    let s = Server::start_with(&without.iter().map(String::as_str).collect::<Vec<_>>());
    let (_, key) = s.tenant_with_key("pro");
    let resp = s.post(
        "/v1/memories",
        &key,
        json!({"content": "I like tea", "memory_type": "fact"}),
    );
    assert_error(&resp, 502, 5020);

    // A CA bundle that cannot be read stops the server at start, naming it.
    let dir = pki.ca_file.parent().expect("dir");
    let missing = dir.join("missing.pem");
    let (code, _, err) = cli(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            path_str(&dir.join("data")),
            "--signing-key",
            path_str(&dir.join("signing.key")),
            "--checkpoints-file",
            path_str(&dir.join("checkpoints.ndjson")),
            "--embedder",
            "openai",
            "--embed-url",
            &base,
            "--provider-ca-file",
            path_str(&missing),
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--provider-ca-file: reading the CA bundle") && err.contains("missing.pem"),
        "{err}"
    );
}

/// Posts as `key` and returns (status, body text, x-request-id).
fn post_raw(s: &Server, path: &str, key: &str, body: Value) -> (u16, String, String) {
    let resp = s
        .raw()
        .post(format!("{}{path}", s.url))
        .bearer_auth(key)
        .json(&body)
        .send()
        .expect("request");
    let status = resp.status().as_u16();
    let id = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-request-id")
        .to_string();
    (status, resp.text().expect("body"), id)
}

#[test]
fn a_provider_failure_reaches_the_tenant_and_the_audit_entry_as_a_generic_message_with_the_request_id(
) {
    let (plain, _) = plain_provider();
    let port = plain.rsplit(':').next().expect("port").to_string();
    let failing = format!("http://tenantsee:{URL_PASSWORD}@127.0.0.1:{port}/fail");
    let s = Server::start_capturing_log(&[
        "--embedder",
        "openai",
        "--embed-url",
        &failing,
        "--extractor",
        "openai",
        "--extract-url",
        &failing,
    ]);
    let (_, key) = s.tenant_with_key("pro");
    for (path, body, provider) in [
        (
            "/v1/memories/extract",
            json!({"text": "I live in Oslo."}),
            "extraction",
        ),
        (
            "/v1/memories",
            json!({"content": "I like tea", "memory_type": "fact"}),
            "embedding",
        ),
    ] {
        let (status, text, id) = post_raw(&s, path, &key, body);
        assert_eq!(status, 502, "{text}");
        let v: Value = serde_json::from_str(&text).expect("JSON");
        assert_error(&(status, v.clone()), 502, 5020);
        assert_eq!(
            v["message"],
            json!(format!(
                "the {provider} provider failed; nothing was stored (request {id}: the server log has the detail)"
            ))
        );
        // The audit entry: its error message and everything else it holds.
        let (_, logs) = s.get("/v1/audit/logs?page_size=1", &key);
        let entry = &logs["data"]["logs"][0];
        assert_eq!(entry["http_status"], json!(502), "{logs}");
        assert_eq!(entry["error_msg"], v["message"], "{logs}");
        let (_, detail) = s.get(
            &format!("/v1/audit/logs/{}", entry["id"].as_str().expect("id")),
            &key,
        );
        for shown in [text.as_str(), &detail.to_string()] {
            for secret in [SECRET_BODY, URL_PASSWORD, "tenantsee", &format!(":{port}")] {
                assert!(
                    !shown.contains(secret),
                    "{secret:?} reached the tenant: {shown}"
                );
            }
        }
        // The log has the detail under the request id, with the endpoint redacted.
        let log = std::fs::read_to_string(s.log_file.as_ref().expect("log")).expect("log");
        let line = log
            .lines()
            .find(|l| l.contains(&id) && l.contains("provider call failed"))
            .unwrap_or_else(|| panic!("no log line for {id}:\n{log}"));
        assert!(line.contains(SECRET_BODY), "{line}");
        assert!(
            line.contains("HTTP 500") || line.contains("(HTTP 500)"),
            "{line}"
        );
        assert!(
            line.contains(&format!("http://127.0.0.1:{port}/fail/v1/")),
            "{line}"
        );
        assert!(!log.contains(URL_PASSWORD), "the URL's password was logged");
    }
}

#[test]
fn providers_follow_no_redirect() {
    let (target, target_hits) = plain_provider();
    let redirector = Provider {
        hits: Hits::default(),
        elsewhere: target,
    };
    let hits = redirector.hits.clone();
    let base = format!(
        "http://{}/redirect",
        common::serve_in_background(provider_app(redirector))
    );
    let s = Server::start_with(&[
        "--embedder",
        "openai",
        "--embed-url",
        &base,
        "--extractor",
        "openai",
        "--extract-url",
        &base,
    ]);
    let (_, key) = s.tenant_with_key("pro");
    let resp = s.post(
        "/v1/memories/extract",
        &key,
        json!({"text": "I live in Oslo."}),
    );
    assert_error(&resp, 502, 5020);
    let resp = s.post(
        "/v1/memories",
        &key,
        json!({"content": "I like tea", "memory_type": "fact"}),
    );
    assert_error(&resp, 502, 5020);
    // A redirect is a failure, not retried: one call of each provider, none followed.
    assert_eq!(count(&hits, "redirect"), 2);
    assert_eq!(count(&target_hits, "ok"), 0, "a redirect was followed");
}

#[test]
fn verify_and_admin_reach_an_https_server_through_the_ca_file() {
    let pki = pki();
    let s = Server::start();
    let (_, key) = s.tenant_with_key("pro");
    let (status, v) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "I like tea", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    let https = format!("https://127.0.0.1:{}", tls_proxy(&s.url, &pki).port());
    let ca = path_str(&pki.ca_file);
    let token = [("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)];

    let (code, out, err) = cli(
        &["verify", "--url", &https, "--ca-file", ca, "--json"],
        &token,
    );
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(report["clean"], json!(true), "{out}");

    let (code, out, err) = cli(&["admin", "--url", &https, "--ca-file", ca, "head"], &token);
    assert_eq!(code, 0, "{out}{err}");
    let head: Value = serde_json::from_str(&out).expect("JSON head");
    assert_eq!(head["seq"], json!(s.head().0), "{out}");

    // Without the CA the server's certificate is refused, and nothing is sent to it.
    let (code, out, err) = cli(&["verify", "--url", &https, "--json"], &token);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
    let (code, out, err) = cli(&["admin", "--url", &https, "head"], &token);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
}
