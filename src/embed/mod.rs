//! Text embeddings: the [`Embedder`] abstraction, its two implementations
//! (in-process [`MiniLm`] and the remote [`OpenAiEmbedder`]) and the async
//! [`EmbedService`] front that batches concurrent callers on one worker
//! thread and caches repeated texts.
//!
//! The trait, its error and [`MiniLm`] (the BERT forward pass and its kernels) live in the
//! `auditmem-embed` crate, which the development profile optimises on its own; they are
//! re-exported here, so `auditmem::embed` is the one path callers use.
//!
//! Every vector that leaves this module is L2-normalised, so cosine
//! similarity is a plain dot product for callers.

mod openai;
mod service;

pub use auditmem_embed::{
    cosine, l2_normalize, EmbedError, Embedder, MiniLm, ModelFiles, MINILM_DIM, MINILM_MAX_TOKENS,
    MINILM_MODEL_ID,
};
pub use openai::{OpenAiEmbedConfig, OpenAiEmbedder};
pub use service::{EmbedService, EmbedServiceConfig};
