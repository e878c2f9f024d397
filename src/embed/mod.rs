//! Text embeddings: the [`Embedder`] abstraction, its two implementations
//! (in-process [`MiniLm`] and the remote [`OpenAiEmbedder`]) and the async
//! [`EmbedService`] front that batches concurrent callers on one worker
//! thread and caches repeated texts.
//!
//! [`MiniLm`] runs the BERT forward pass of the `auditmem-embed` crate (our own kernels),
//! which the development profile optimises on its own: the tokenizer, the files and the
//! batching stay here, built at the default debug level like the rest of the service.
//!
//! Every vector that leaves this module is L2-normalised, so cosine
//! similarity is a plain dot product for callers.

mod minilm;
mod openai;
mod service;

pub use minilm::{MiniLm, ModelFiles, MINILM_DIM, MINILM_MAX_TOKENS, MINILM_MODEL_ID};
pub use openai::{OpenAiEmbedConfig, OpenAiEmbedder};
pub use service::lower_priority;
pub(crate) use service::{run_idle, spawn_niced};
pub use service::{EmbedService, EmbedServiceConfig};

/// Produces sentence embeddings. Blocking: implementations may run a model or
/// do network I/O, so async code must go through [`EmbedService`].
pub trait Embedder: Send + Sync {
    /// Stable identifier of the model; stored next to vectors so that vectors
    /// from different models are never compared.
    fn model_id(&self) -> &str;
    /// Length of every vector returned; 0 if not known yet (a remote provider
    /// whose dimension was not configured learns it from its first answer).
    fn dim(&self) -> usize;
    /// One L2-normalised vector per input text, in input order.
    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Whether a batch runs on this host's cores (a model in the process), so that background
    /// work gives way to a short one (`niced::give_way`); a remote provider's does not.
    fn uses_cores(&self) -> bool {
        true
    }
}

/// Why an embedding could not be produced. `Clone` because one failed batch
/// is reported to every caller whose texts were in it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model could not be loaded: {0}")]
    ModelLoad(String),
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    #[error("embedding inference failed: {0}")]
    Inference(String),
    /// The remote provider could not be reached or answered with an error
    /// status (`status` is `None` for transport failures such as timeouts).
    #[error("embedding provider request failed{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    ProviderHttp {
        status: Option<u16>,
        message: String,
    },
    /// The remote provider answered 2xx but not with what the protocol says.
    #[error("embedding provider answered with an invalid response: {0}")]
    ProviderProtocol(String),
    /// The embedding worker thread is gone (it panicked or was shut down).
    #[error("embedding worker unavailable: {0}")]
    WorkerUnavailable(String),
}

/// Scales `v` to unit length in place. A zero vector is left as is because
/// there is no direction to preserve and NaNs would poison every comparison.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > f32::EPSILON {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

/// Dot product; equals cosine similarity for the normalised vectors this
/// module returns.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_gives_unit_length_and_leaves_zero_alone() {
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        let mut z = vec![0.0, 0.0];
        l2_normalize(&mut z);
        assert_eq!(z, vec![0.0, 0.0]);
    }

    #[test]
    fn provider_http_error_mentions_status() {
        let e = EmbedError::ProviderHttp {
            status: Some(500),
            message: "boom".into(),
        };
        assert_eq!(
            e.to_string(),
            "embedding provider request failed (HTTP 500): boom"
        );
    }
}
