//! Client for an OpenAI-compatible `POST {base_url}/v1/embeddings` endpoint
//! (OpenAI itself, vLLM, Ollama, llama.cpp server, text-embeddings-inference), over http or
//! https (rustls), following no redirect. Its errors name the endpoint without credentials and
//! hold at most the start of the provider's body: they are for the server log, never for a
//! tenant's answer (`api::memory` answers with a generic message and the request id).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{l2_normalize, EmbedError, Embedder};
use crate::http_client::{chain, redacted, refused_redirect, ExtraRoots};
use crate::openai_compat::snippet;

#[derive(Debug, Clone)]
pub struct OpenAiEmbedConfig {
    /// e.g. `http://127.0.0.1:8080`; `/v1/embeddings` is appended (a trailing
    /// `/v1` in the base is accepted and not doubled).
    pub base_url: String,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Whole-request timeout, connection included.
    pub timeout: Duration,
    /// Expected vector length; when `None` it is learned from the first
    /// answer and every later answer must match it.
    pub dim: Option<usize>,
    /// Certificates trusted for an https provider besides the built-in roots.
    pub roots: ExtraRoots,
}

impl OpenAiEmbedConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(30),
            dim: None,
            roots: ExtraRoots::default(),
        }
    }
}

pub struct OpenAiEmbedder {
    client: reqwest::blocking::Client,
    url: String,
    /// `url` as errors name it: without user, password or query.
    shown_url: String,
    model: String,
    api_key: Option<String>,
    /// 0 = not known yet.
    dim: AtomicUsize,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    input: &'a [String],
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    index: usize,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// Builds the client; does not contact the provider.
    pub fn new(config: OpenAiEmbedConfig) -> Result<Self, EmbedError> {
        let client =
            crate::openai_compat::blocking_client(config.timeout, &config.roots).map_err(|e| {
                EmbedError::ProviderHttp {
                    status: None,
                    message: format!("cannot build HTTP client: {}", chain(&e)),
                }
            })?;
        let url = crate::openai_compat::endpoint(&config.base_url, "embeddings");
        Ok(Self {
            client,
            shown_url: redacted(&url),
            url,
            model: config.model,
            api_key: config.api_key,
            dim: AtomicUsize::new(config.dim.unwrap_or(0)),
        })
    }

    /// The endpoint requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn check_dim(&self, got: usize) -> Result<(), EmbedError> {
        if got == 0 {
            return Err(EmbedError::ProviderProtocol("empty embedding".into()));
        }
        // First answer fixes the dimension when it was not configured; racing
        // first answers agree or one of them is rejected below.
        let _ = self
            .dim
            .compare_exchange(0, got, Ordering::SeqCst, Ordering::SeqCst);
        let want = self.dim.load(Ordering::SeqCst);
        if got != want {
            return Err(EmbedError::ProviderProtocol(format!(
                "embedding has {got} dimensions, expected {want}"
            )));
        }
        Ok(())
    }
}

impl Embedder for OpenAiEmbedder {
    fn uses_cores(&self) -> bool {
        false
    }
    fn model_id(&self) -> &str {
        &self.model
    }

    fn dim(&self) -> usize {
        self.dim.load(Ordering::SeqCst)
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut req = self.client.post(&self.url).json(&Request {
            model: &self.model,
            input: texts,
        });
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().map_err(|e| EmbedError::ProviderHttp {
            status: None,
            message: format!("POST {}: {}", self.shown_url, chain(&e.without_url())),
        })?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(EmbedError::ProviderHttp {
                status: Some(status.as_u16()),
                message: format!(
                    "POST {}: {}",
                    self.shown_url,
                    refused_redirect(status, resp.headers())
                ),
            });
        }
        let body = resp.text().map_err(|e| EmbedError::ProviderHttp {
            status: Some(status.as_u16()),
            message: format!(
                "POST {}: reading the answer: {}",
                self.shown_url,
                chain(&e.without_url())
            ),
        })?;
        if !status.is_success() {
            return Err(EmbedError::ProviderHttp {
                status: Some(status.as_u16()),
                message: format!("POST {}: {}", self.shown_url, snippet(&body)),
            });
        }
        let parsed: Response = serde_json::from_str(&body)
            .map_err(|e| EmbedError::ProviderProtocol(format!("{e}; body: {}", snippet(&body))))?;
        if parsed.data.len() != texts.len() {
            return Err(EmbedError::ProviderProtocol(format!(
                "{} embeddings for {} inputs",
                parsed.data.len(),
                texts.len()
            )));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in parsed.data {
            self.check_dim(item.embedding.len())?;
            let slot = out.get_mut(item.index).ok_or_else(|| {
                EmbedError::ProviderProtocol(format!("index {} out of range", item.index))
            })?;
            if slot.is_some() {
                return Err(EmbedError::ProviderProtocol(format!(
                    "index {} appears twice",
                    item.index
                )));
            }
            let mut v = item.embedding;
            l2_normalize(&mut v);
            *slot = Some(v);
        }
        // Every slot is filled: n distinct in-range indices for n slots.
        Ok(out.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_is_built_without_doubling_v1() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
        ] {
            let e = OpenAiEmbedder::new(OpenAiEmbedConfig::new(base, "m"));
            assert_eq!(
                e.as_ref().map(|e| e.url().to_string()).ok(),
                Some("http://h:1/v1/embeddings".to_string())
            );
        }
    }

    #[test]
    fn connection_refused_is_provider_http_without_status() {
        // Port 9 (discard) on loopback is essentially never listening.
        let mut cfg = OpenAiEmbedConfig::new("http://127.0.0.1:9", "m");
        cfg.timeout = Duration::from_secs(2);
        let e = OpenAiEmbedder::new(cfg).unwrap();
        match e.embed_batch(&["x".to_string()]) {
            Err(EmbedError::ProviderHttp { status: None, .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn empty_input_makes_no_request() {
        let e = OpenAiEmbedder::new(OpenAiEmbedConfig::new("http://127.0.0.1:9", "m")).unwrap();
        assert_eq!(e.embed_batch(&[]).ok(), Some(vec![]));
    }
}
