//! The BERT encoder forward pass for sentence embeddings, on our own kernels
//! ([`super::kernels`]), with the weights packed once at load.
//!
//! Sequences of a batch are not padded: their tokens are stacked into one matrix for every
//! dense layer (so no compute goes to padding) and attention runs per sequence and head. With
//! padding and a mask, as candle's `BertModel` does it, the masked positions get weight
//! exactly zero, so the two compute the same function; `tests/embed_model.rs` checks that they
//! agree to 1e-5 on every component.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::kernels::{add_layer_norm, attend, gelu, Head, PackedLinear};

/// What the model's `config.json` must say for this forward pass to apply.
#[derive(Clone, Debug)]
pub(crate) struct BertShape {
    pub hidden: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub max_positions: usize,
    pub layer_norm_eps: f32,
}

struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    /// Query, key and value projections stacked into one 3h x h layer: one pass over the
    /// input instead of three.
    qkv: PackedLinear,
    attn_out: PackedLinear,
    attn_norm: Norm,
    up: PackedLinear,
    down: PackedLinear,
    out_norm: Norm,
}

pub(crate) struct Bert {
    shape: BertShape,
    word: Vec<f32>,
    position: Vec<f32>,
    /// Segment 0's embedding: single-sentence inputs use no other.
    segment0: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

/// The safetensors file's tensors by name, as f32 values.
struct Weights {
    tensors: HashMap<String, Tensor>,
    /// "" or "bert.": checkpoints exported from a pre-training head prefix every name.
    prefix: &'static str,
}

impl Weights {
    fn get(&self, name: &str, len: usize) -> Result<Vec<f32>, String> {
        let full = format!("{}{name}", self.prefix);
        let t = self
            .tensors
            .get(&full)
            .ok_or_else(|| format!("tensor {full} is missing"))?;
        let v = t
            .flatten_all()
            .and_then(|t| t.to_dtype(candle_core::DType::F32))
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| format!("tensor {full}: {e}"))?;
        if v.len() != len {
            return Err(format!(
                "tensor {full} has {} values, expected {len}",
                v.len()
            ));
        }
        Ok(v)
    }

    fn norm(&self, name: &str, h: usize) -> Result<Norm, String> {
        Ok(Norm {
            gamma: self.get(&format!("{name}.weight"), h)?,
            beta: self.get(&format!("{name}.bias"), h)?,
        })
    }

    fn linear(&self, name: &str, n: usize, k: usize) -> Result<PackedLinear, String> {
        let w = self.get(&format!("{name}.weight"), n * k)?;
        let b = self.get(&format!("{name}.bias"), n)?;
        PackedLinear::new(&w, &b, n, k).map_err(|e| format!("{name}: {e}"))
    }
}

impl Bert {
    /// Loads the encoder from the bytes of a safetensors file.
    pub fn load(safetensors: &[u8], shape: BertShape) -> Result<Self, String> {
        if shape.heads == 0 || shape.hidden % shape.heads != 0 {
            return Err(format!(
                "hidden size {} is not a multiple of {} heads",
                shape.hidden, shape.heads
            ));
        }
        let tensors = candle_core::safetensors::load_buffer(safetensors, &Device::Cpu)
            .map_err(|e| e.to_string())?;
        let prefix = if tensors.contains_key("embeddings.word_embeddings.weight") {
            ""
        } else {
            "bert."
        };
        let w = Weights { tensors, prefix };
        let h = shape.hidden;
        let word_table = w
            .tensors
            .get(&format!("{prefix}embeddings.word_embeddings.weight"))
            .ok_or("tensor embeddings.word_embeddings.weight is missing")?;
        let vocab = word_table.elem_count() / h;
        let word = w.get("embeddings.word_embeddings.weight", vocab * h)?;
        let position = w.get(
            "embeddings.position_embeddings.weight",
            shape.max_positions * h,
        )?;
        let types = w.get("embeddings.token_type_embeddings.weight", 2 * h)?;
        let embed_norm = w.norm("embeddings.LayerNorm", h)?;
        let mut layers = Vec::with_capacity(shape.layers);
        for l in 0..shape.layers {
            let p = format!("encoder.layer.{l}");
            let mut qkv_w = Vec::with_capacity(3 * h * h);
            let mut qkv_b = Vec::with_capacity(3 * h);
            for part in ["query", "key", "value"] {
                qkv_w.extend(w.get(&format!("{p}.attention.self.{part}.weight"), h * h)?);
                qkv_b.extend(w.get(&format!("{p}.attention.self.{part}.bias"), h)?);
            }
            let i = shape.intermediate;
            layers.push(Layer {
                qkv: PackedLinear::new(&qkv_w, &qkv_b, 3 * h, h)?,
                attn_out: w.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: w.norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                up: w.linear(&format!("{p}.intermediate.dense"), i, h)?,
                down: w.linear(&format!("{p}.output.dense"), h, i)?,
                out_norm: w.norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        Ok(Self {
            word,
            position,
            segment0: types[..h].to_vec(),
            embed_norm,
            layers,
            shape,
        })
    }

    /// Mean-pooled (not yet normalised) last hidden states of each token-id sequence. Every
    /// sequence must be non-empty and at most `max_positions` long.
    pub fn pooled(&self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, String> {
        let h = self.shape.hidden;
        let vocab = self.word.len() / h;
        let mut spans = Vec::with_capacity(sequences.len());
        let mut total = 0;
        for s in sequences {
            if s.is_empty() || s.len() > self.shape.max_positions {
                return Err(format!(
                    "a sequence of {} tokens (1 to {} allowed)",
                    s.len(),
                    self.shape.max_positions
                ));
            }
            spans.push((total, s.len()));
            total += s.len();
        }

        let mut x = vec![0f32; total * h];
        for (s, &(start, _)) in sequences.iter().zip(&spans) {
            for (pos, &id) in s.iter().enumerate() {
                let id = id as usize;
                if id >= vocab {
                    return Err(format!("token id {id} outside the vocabulary of {vocab}"));
                }
                let row = &mut x[(start + pos) * h..(start + pos + 1) * h];
                let word = &self.word[id * h..(id + 1) * h];
                let posn = &self.position[pos * h..(pos + 1) * h];
                for (((o, a), b), c) in row.iter_mut().zip(word).zip(posn).zip(&self.segment0) {
                    *o = a + b + c;
                }
            }
        }
        let eps = self.shape.layer_norm_eps;
        add_layer_norm(
            &mut x,
            &[],
            &self.embed_norm.gamma,
            &self.embed_norm.beta,
            eps,
        );

        for layer in &self.layers {
            let qkv = layer.qkv.forward(&x, total);
            let context = self.attention(&qkv, &spans, total);
            let mut a = layer.attn_out.forward(&context, total);
            add_layer_norm(
                &mut a,
                &x,
                &layer.attn_norm.gamma,
                &layer.attn_norm.beta,
                eps,
            );
            let mut up = layer.up.forward(&a, total);
            gelu(&mut up);
            let mut out = layer.down.forward(&up, total);
            add_layer_norm(
                &mut out,
                &a,
                &layer.out_norm.gamma,
                &layer.out_norm.beta,
                eps,
            );
            x = out;
        }

        Ok(spans
            .iter()
            .map(|&(start, len)| {
                let mut mean = vec![0f32; h];
                for row in x[start * h..(start + len) * h].chunks_exact(h) {
                    for (m, v) in mean.iter_mut().zip(row) {
                        *m += v;
                    }
                }
                for m in &mut mean {
                    *m /= len as f32;
                }
                mean
            })
            .collect())
    }

    /// Multi-head self-attention of every sequence: one task per (sequence, head), each
    /// writing its own block, gathered into the `total x hidden` context.
    fn attention(&self, qkv: &[f32], spans: &[(usize, usize)], total: usize) -> Vec<f32> {
        let h = self.shape.hidden;
        let heads = self.shape.heads;
        let d = h / heads;
        // Rows of the stacked query, key and value projections.
        let stride = 3 * h;
        let tasks: Vec<(usize, usize)> = (0..spans.len())
            .flat_map(|s| (0..heads).map(move |hd| (s, hd)))
            .collect();
        let blocks: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(s, hd)| {
                let (start, len) = spans[s];
                let base = start * stride + hd * d;
                let mut out = vec![0f32; len * d];
                let head = Head {
                    stride,
                    q: base,
                    k: base + h,
                    v: base + 2 * h,
                    len,
                    size: d,
                };
                attend(qkv, head, &mut out);
                out
            })
            .collect();
        let mut context = vec![0f32; total * h];
        for (&(s, hd), block) in tasks.iter().zip(&blocks) {
            let (start, _) = spans[s];
            for (i, src) in block.chunks_exact(d).enumerate() {
                let at = (start + i) * h + hd * d;
                context[at..at + d].copy_from_slice(src);
            }
        }
        context
    }
}
