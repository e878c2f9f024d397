//! all-MiniLM-L6-v2 on candle's `BertModel` (padded batches, masked): the reference the
//! service's forward pass (`auditmem::embed::MiniLm`) is held to. A module of the integration
//! tests (`embed_model`), also compiled into `benches/vectors.rs`; candle is a dev-dependency
//! only, so it is not in the service.

use std::path::Path;

use auditmem::embed::{
    l2_normalize, EmbedError, Embedder, ModelFiles, MINILM_DIM, MINILM_MODEL_ID,
};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};

/// Sequences per forward pass. Bounds peak memory for large inputs; inputs
/// are also grouped by length so short texts are not padded to a long one.
const CHUNK: usize = 32;

pub struct CandleMiniLm {
    model: BertModel,
    tokenizer: tokenizers::Tokenizer,
    device: Device,
}

impl CandleMiniLm {
    /// Loads the same files as `MiniLm::load`, with the tokenizer padding each batch to its
    /// longest input as sentence-transformers does.
    pub fn load(model_dir: &Path) -> Result<Self, EmbedError> {
        let files = ModelFiles::read(model_dir, true)?;
        let config: Config = std::fs::read_to_string(&files.config_path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
            .map_err(|e| {
                EmbedError::ModelLoad(format!("invalid {}: {e}", files.config_path.display()))
            })?;
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(files.weights.clone(), DTYPE, &device)
            .map_err(|e| {
                EmbedError::ModelLoad(format!("invalid {}: {e}", files.weights_path.display()))
            })?;
        let model = BertModel::load(vb, &config).map_err(|e| files.mismatch(e))?;
        Ok(Self {
            model,
            tokenizer: files.tokenizer,
            device,
        })
    }

    fn embed_chunk(&self, texts: Vec<&str>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        let batch = encodings.len();
        let seq_len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(batch * seq_len);
        let mut mask = Vec::with_capacity(batch * seq_len);
        for enc in &encodings {
            if enc.get_ids().len() != seq_len {
                return Err(EmbedError::Tokenizer(
                    "tokenizer returned sequences of different lengths despite padding".into(),
                ));
            }
            ids.extend_from_slice(enc.get_ids());
            mask.extend_from_slice(enc.get_attention_mask());
        }
        let inf = |e: candle_core::Error| EmbedError::Inference(e.to_string());
        let input_ids = Tensor::from_vec(ids, (batch, seq_len), &self.device).map_err(inf)?;
        let attention_mask = Tensor::from_vec(mask, (batch, seq_len), &self.device).map_err(inf)?;
        // Single-segment inputs: every token is segment 0, as in the reference.
        let token_type_ids = input_ids.zeros_like().map_err(inf)?;

        let hidden = self
            .model
            .forward(&input_ids, &token_type_ids, Some(&attention_mask))
            .map_err(inf)?;

        // Mean over real tokens only: padded positions still get hidden
        // states, and letting them into the mean would make a text's vector
        // depend on what it was batched with.
        let mask_f = attention_mask
            .to_dtype(DType::F32)
            .and_then(|m| m.unsqueeze(2))
            .map_err(inf)?;
        let summed = hidden
            .broadcast_mul(&mask_f)
            .and_then(|t| t.sum(1))
            .map_err(inf)?;
        let counts = mask_f
            .sum(1)
            .and_then(|c| c.clamp(1e-9f32, f32::MAX))
            .map_err(inf)?;
        let pooled = summed.broadcast_div(&counts).map_err(inf)?;
        let mut rows: Vec<Vec<f32>> = pooled.to_vec2().map_err(inf)?;
        for row in &mut rows {
            l2_normalize(row);
        }
        Ok(rows)
    }
}

impl Embedder for CandleMiniLm {
    fn model_id(&self) -> &str {
        MINILM_MODEL_ID
    }

    fn dim(&self) -> usize {
        MINILM_DIM
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Length-sorted chunks keep padding (wasted compute) small; results
        // are written back to their input positions.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(CHUNK) {
            let chunk_texts = chunk.iter().map(|&i| texts[i].as_str()).collect();
            let vectors = self.embed_chunk(chunk_texts)?;
            if vectors.len() != chunk.len() {
                return Err(EmbedError::Inference(format!(
                    "model returned {} vectors for {} texts",
                    vectors.len(),
                    chunk.len()
                )));
            }
            for (&i, v) in chunk.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
