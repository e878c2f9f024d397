//! In-process all-MiniLM-L6-v2 (BERT, 6 layers, 384 dims), producing the same
//! vectors as sentence-transformers: mean pooling over real (non-padding)
//! tokens, then L2 normalisation.
//!
//! [`MiniLm`] runs our own forward pass (`auditmem_embed::Bert`) with weights packed once at
//! load. [`ModelFiles`] is public so that the tests' reference, candle's `BertModel`
//! (tests/it/candle_reference.rs), reads the same files the same way.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use auditmem_embed::{Bert, BertShape};

use super::{l2_normalize, EmbedError, Embedder};

pub const MINILM_MODEL_ID: &str = "all-MiniLM-L6-v2";
pub const MINILM_DIM: usize = 384;
/// sentence-transformers' `max_seq_length` for this model; longer inputs are
/// truncated (special tokens included), exactly as the reference does.
pub const MINILM_MAX_TOKENS: usize = 256;

const SETUP_HINT: &str = "run `bash .ci/setup` from the repository root to fetch it";

/// The fields of a BERT `config.json` that our forward pass needs; the others
/// (dropout, vocabulary size: the weights give it) do not change inference.
#[derive(Debug, Deserialize)]
struct BertConfig {
    hidden_size: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f64,
    hidden_act: String,
}

/// The files of a model directory, read and checked.
pub struct ModelFiles {
    config: BertConfig,
    /// `tokenizer.json`, set to truncate at [`MINILM_MAX_TOKENS`] and to pad as
    /// [`ModelFiles::read`] was asked.
    pub tokenizer: Tokenizer,
    /// The bytes of `model.safetensors`.
    pub weights: Vec<u8>,
    /// Where `weights` were read from.
    pub weights_path: PathBuf,
    /// `config.json`, for a forward pass that reads more of it than [`MiniLm`] does.
    pub config_path: PathBuf,
}

impl ModelFiles {
    /// Reads `model.safetensors`, `tokenizer.json` and `config.json` from
    /// `model_dir` (as laid out by `.ci/setup`). `pad` keeps sentence-transformers'
    /// batch-longest padding, which a padded forward pass needs.
    pub fn read(model_dir: &Path, pad: bool) -> Result<Self, EmbedError> {
        if !model_dir.is_dir() {
            return Err(EmbedError::ModelLoad(format!(
                "model directory {} does not exist; {SETUP_HINT}",
                model_dir.display()
            )));
        }
        let file = |name: &str| -> Result<PathBuf, EmbedError> {
            let p = model_dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(EmbedError::ModelLoad(format!(
                    "{} is missing; {SETUP_HINT}",
                    p.display()
                )))
            }
        };
        let weights_path = file("model.safetensors")?;
        let tokenizer_path = file("tokenizer.json")?;
        let config_path = file("config.json")?;

        let config_text = std::fs::read_to_string(&config_path).map_err(|e| {
            EmbedError::ModelLoad(format!("cannot read {}: {e}", config_path.display()))
        })?;
        let config: BertConfig = serde_json::from_str(&config_text).map_err(|e| {
            EmbedError::ModelLoad(format!("invalid {}: {e}", config_path.display()))
        })?;
        if config.hidden_size != MINILM_DIM {
            return Err(EmbedError::ModelLoad(format!(
                "{} has hidden_size {}, expected {MINILM_DIM} for {MINILM_MODEL_ID}",
                config_path.display(),
                config.hidden_size
            )));
        }

        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| {
            EmbedError::Tokenizer(format!("cannot load {}: {e}", tokenizer_path.display()))
        })?;
        // The shipped tokenizer pads every input to a fixed 128 tokens and
        // truncates at 128; sentence-transformers pads to the longest input of
        // the batch and truncates at 256, and we must match its vectors.
        // The unpadded forward pass takes each text's own tokens.
        tokenizer.with_padding(pad.then(|| PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MINILM_MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| EmbedError::Tokenizer(format!("cannot set truncation: {e}")))?;

        // Read into memory instead of mmap: mmap needs `unsafe` and the
        // weights are only ~90 MB.
        let weights = std::fs::read(&weights_path).map_err(|e| {
            EmbedError::ModelLoad(format!("cannot read {}: {e}", weights_path.display()))
        })?;
        Ok(Self {
            config,
            tokenizer,
            weights,
            weights_path,
            config_path,
        })
    }

    /// A load error: the weights do not fit the config, for the reason `e`.
    pub fn mismatch(&self, e: impl std::fmt::Display) -> EmbedError {
        EmbedError::ModelLoad(format!(
            "{} does not hold a BERT model matching {}: {e}",
            self.weights_path.display(),
            self.config_path.display()
        ))
    }
}

/// Texts are embedded in forward passes of at most this many tokens: bounds
/// the activations (~4096 x 1536 floats, 24 MiB, at the widest layer) for
/// large batches while keeping each pass big enough for every core.
const TOKENS_PER_PASS: usize = 4096;

/// The service's embedder: BERT on our own kernels (the `auditmem-embed` crate).
pub struct MiniLm {
    model: Bert,
    tokenizer: Tokenizer,
}

impl MiniLm {
    /// Loads `model.safetensors`, `tokenizer.json` and `config.json` from
    /// `model_dir` (as laid out by `.ci/setup`).
    pub fn load(model_dir: &Path) -> Result<Self, EmbedError> {
        let files = ModelFiles::read(model_dir, false)?;
        let c = &files.config;
        // Our forward pass implements BERT's exact (erf) GELU only.
        if c.hidden_act != "gelu" {
            return Err(files.mismatch(format!(
                "activation {:?}, only gelu is supported",
                c.hidden_act
            )));
        }
        let shape = BertShape {
            hidden: c.hidden_size,
            heads: c.num_attention_heads,
            intermediate: c.intermediate_size,
            layers: c.num_hidden_layers,
            max_positions: c.max_position_embeddings,
            layer_norm_eps: c.layer_norm_eps as f32,
        };
        let model = Bert::load(&files.weights, shape, Some(&files.weights_path))
            .map_err(|e| files.mismatch(e))?;
        Ok(Self {
            model,
            tokenizer: files.tokenizer,
        })
    }
}

impl Embedder for MiniLm {
    fn model_id(&self) -> &str {
        MINILM_MODEL_ID
    }

    fn dim(&self) -> usize {
        MINILM_DIM
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encodings = self
            .tokenizer
            .encode_batch(refs, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        // Truncation (256) keeps every sequence within the model's 512
        // positions; an empty text still has its [CLS] and [SEP].
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let mut out = Vec::with_capacity(texts.len());
        let mut start = 0;
        while start < ids.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < ids.len() && (end == start || tokens + ids[end].len() <= TOKENS_PER_PASS) {
                tokens += ids[end].len();
                end += 1;
            }
            let pooled = self
                .model
                .pooled(&ids[start..end])
                .map_err(EmbedError::Inference)?;
            for mut v in pooled {
                l2_normalize(&mut v);
                out.push(v);
            }
            start = end;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_dir_names_the_setup_command() {
        let dir = std::env::temp_dir().join("auditmem-no-such-model-dir-xyz");
        let err = MiniLm::load(&dir).err().map(|e| e.to_string());
        let msg = err.unwrap_or_default();
        assert!(msg.contains("bash .ci/setup"), "{msg}");
        assert!(msg.contains("does not exist"), "{msg}");
    }

    #[test]
    fn missing_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let msg = MiniLm::load(dir.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("model.safetensors is missing"), "{msg}");
        assert!(msg.contains("bash .ci/setup"), "{msg}");
    }

    #[test]
    fn corrupt_weights_are_a_load_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
        let config = std::fs::read(real.join("config.json"))
            .unwrap_or_else(|_| br#"{"vocab_size":30522,"hidden_size":384,"num_hidden_layers":6,"num_attention_heads":12,"intermediate_size":1536,"hidden_act":"gelu","hidden_dropout_prob":0.1,"max_position_embeddings":512,"type_vocab_size":2,"initializer_range":0.02,"layer_norm_eps":1e-12,"pad_token_id":0}"#.to_vec());
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        std::fs::write(dir.path().join("model.safetensors"), b"not safetensors").unwrap();
        match std::fs::read(real.join("tokenizer.json")) {
            Ok(t) => std::fs::write(dir.path().join("tokenizer.json"), t).unwrap(),
            // Without the real tokenizer the tokenizer error fires first;
            // still an error, which is what this test is about.
            Err(_) => std::fs::write(dir.path().join("tokenizer.json"), b"{}").unwrap(),
        }
        assert!(MiniLm::load(dir.path()).is_err());
    }
}
