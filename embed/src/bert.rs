//! The BERT encoder forward pass for sentence embeddings, on our own kernels
//! ([`crate::kernels`]), with the weights read from a safetensors file and packed once at load.
//!
//! Sequences of a batch are not padded: their tokens are stacked into one matrix for every
//! dense layer (so no compute goes to padding) and attention runs per sequence and head. With
//! padding and a mask, as candle's `BertModel` does it, the masked positions get weight
//! exactly zero, so the two compute the same function; `tests/it/embed_model.rs` checks that
//! they agree to 1e-5 on every component.

use std::path::Path;
use std::sync::Mutex;

use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};

use super::kernels::{add_layer_norm, attend, gelu, Head, PackedLinear};

/// What the model's `config.json` must say for this forward pass to apply.
#[derive(Clone, Debug)]
pub struct BertShape {
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

/// The word-embedding table: vocabulary x hidden, about half the model's bytes (47 MB of
/// MiniLM's 91), of which a text reads one row per token.
enum WordTable {
    Owned(Vec<f32>),
    /// Rows read from the weights file at their offset, per token: the table needs no memory
    /// of the process (the kernel's page cache keeps the rows in use), a row costs one
    /// `pread` of `hidden * 4` bytes, nothing beside a forward pass.
    File {
        file: std::fs::File,
        offset: u64,
    },
}

/// A BERT encoder with its weights packed for our kernels.
pub struct Bert {
    shape: BertShape,
    word: WordTable,
    vocab: usize,
    position: Vec<f32>,
    /// Segment 0's embedding: single-sentence inputs use no other.
    segment0: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
    /// The activation buffers of the passes not running: one per pass that ran at once (the
    /// embedding service's workers), kept between passes ([`Scratch`]).
    idle: Mutex<Vec<Scratch>>,
}

/// A scratch set keeps its memory between passes up to this many tokens' worth (15 x hidden
/// floats a token: 22.5 MiB for MiniLM's 384 dimensions), more than a batch of the embedding
/// service (16 texts or 2 KiB of text, ~500 tokens) or one text at the 256-token truncation
/// needs. A larger pass (up to `TOKENS_PER_PASS`, 4,096, through `Embedder::embed_batch`
/// called directly) frees what it grew past that when it ends, so a huge batch does not pin
/// its memory.
const KEEP_TOKENS: usize = 1024;

/// The activations of one forward pass, kept across passes: `serve` has mimalloc hand freed
/// pages back to the OS within 10 ms (`auditmem::purge_freed_pages_soon`), so buffers
/// allocated afresh each pass would be faulted in and cleared again every batch (~15% of the
/// server's CPU under batch create when pages were purged at once, docs/PERFORMANCE.md,
/// "Batch create"). Each buffer is sized per pass;
/// what a pass reads it has written first, so leftovers of an earlier pass never matter.
#[derive(Default)]
struct Scratch {
    /// The hidden states entering a layer (tokens x hidden).
    x: Vec<f32>,
    /// Stacked query, key and value projections (tokens x 3 hidden).
    qkv: Vec<f32>,
    /// Attention context (tokens x hidden).
    context: Vec<f32>,
    /// Attention output, normalised (tokens x hidden).
    a: Vec<f32>,
    /// The intermediate layer (tokens x intermediate).
    up: Vec<f32>,
    /// The layer's output (tokens x hidden); becomes `x` for the next layer.
    out: Vec<f32>,
    /// The dense layers' per-thread column blocks, and attention's per-head blocks (tokens x
    /// the widest layer).
    blocks: Vec<f32>,
}

/// `v` as `len` values, reallocated (without copying what it held) only when it is too small.
fn sized(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.capacity() < len {
        *v = Vec::with_capacity(len);
    }
    v.resize(len, 0.0);
    &mut v[..]
}

impl Scratch {
    /// Frees each buffer that holds more than `KEEP_TOKENS` tokens' worth of its width.
    fn trim(&mut self, shape: &BertShape) {
        let h = shape.hidden;
        let widest = (3 * h).max(shape.intermediate);
        for (v, width) in [
            (&mut self.x, h),
            (&mut self.qkv, 3 * h),
            (&mut self.context, h),
            (&mut self.a, h),
            (&mut self.up, shape.intermediate),
            (&mut self.out, h),
            (&mut self.blocks, widest),
        ] {
            if v.capacity() > KEEP_TOKENS * width {
                *v = Vec::new();
            }
        }
    }
}

/// The safetensors file's tensors by name.
struct Weights<'a> {
    tensors: SafeTensors<'a>,
    /// "" or "bert.": checkpoints exported from a pre-training head prefix every name.
    prefix: &'static str,
}

impl Weights<'_> {
    /// The values of tensor `name` (after the prefix) as f32, which must number `len`.
    fn get(&self, name: &str, len: usize) -> Result<Vec<f32>, String> {
        let full = format!("{}{name}", self.prefix);
        let v = self
            .tensors
            .tensor(&full)
            .map_err(|_| format!("tensor {full} is missing"))
            .and_then(|t| to_f32(t.dtype(), t.data()).map_err(|e| format!("tensor {full}: {e}")))?;
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

impl WordTable {
    /// The table `name` of the safetensors file at `path` (whose bytes are `safetensors`),
    /// read from the file per row; `table` is its loaded copy, checked against the file.
    fn from_file(
        path: &Path,
        safetensors: &[u8],
        name: &str,
        table: &[f32],
        h: usize,
    ) -> Result<Self, String> {
        let (offset, len) =
            tensor_span(safetensors, name)?.ok_or_else(|| format!("tensor {name} is missing"))?;
        if len != table.len() * 4 {
            return Err(format!(
                "the word embeddings take {len} bytes in the file, expected {}",
                table.len() * 4
            ));
        }
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let from_file = WordTable::File { file, offset };
        // The file could have been replaced since its bytes were read: its first and last
        // rows must be the ones just loaded.
        let mut row = vec![0f32; h];
        for id in [0, table.len() / h - 1] {
            from_file.row(id, &mut row)?;
            if row[..] != table[id * h..(id + 1) * h] {
                return Err(format!("{} changed while it was loaded", path.display()));
            }
        }
        Ok(from_file)
    }

    /// Copies row `id` (in the vocabulary, checked by the caller) into `out` (hidden long).
    fn row(&self, id: usize, out: &mut [f32]) -> Result<(), String> {
        let h = out.len();
        match self {
            WordTable::Owned(t) => out.copy_from_slice(&t[id * h..(id + 1) * h]),
            WordTable::File { file, offset } => {
                use std::os::unix::fs::FileExt;
                // A stack buffer: this runs once per token of every text. One read per row
                // up to 1,024 dimensions (MiniLM has 384).
                let mut buf = [0u8; 4096];
                let start = offset + (id * h * 4) as u64;
                for (i, part) in out.chunks_mut(buf.len() / 4).enumerate() {
                    let bytes = &mut buf[..part.len() * 4];
                    file.read_exact_at(bytes, start + (i * 4096) as u64)
                        .map_err(|e| {
                            format!("reading word embedding {id} from the weights file: {e}")
                        })?;
                    for (o, b) in part.iter_mut().zip(bytes.chunks_exact(4)) {
                        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Little-endian tensor data of type `dtype` as f32 values: the float types checkpoints are
/// published in, widened exactly (f64 rounded to nearest).
fn to_f32(dtype: Dtype, data: &[u8]) -> Result<Vec<f32>, String> {
    Ok(match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32)
            .collect(),
        other => return Err(format!("dtype {other} (F32, F16, BF16 or F64 expected)")),
    })
}

/// Where tensor `name`'s data sits in the safetensors file `file`: (offset from the file's
/// start, bytes); `None` when there is no such tensor, an error unless it is f32. The header
/// is checked as a whole (`SafeTensors::read_metadata`): every tensor's bytes lie within the
/// file and match its shape and type.
fn tensor_span(file: &[u8], name: &str) -> Result<Option<(u64, usize)>, String> {
    let (header_len, metadata) =
        SafeTensors::read_metadata(file).map_err(|e| format!("the weights file: {e}"))?;
    let Some(info) = metadata.info(name) else {
        return Ok(None);
    };
    if info.dtype != Dtype::F32 {
        return Err(format!("tensor {name} is not f32"));
    }
    let (begin, end) = info.data_offsets;
    // The data follows the 8-byte header length and the header.
    let start = 8 + header_len + begin;
    Ok(Some((start as u64, end - begin)))
}

impl Bert {
    /// Loads the encoder from the bytes of a safetensors file. With `words_file`, the file
    /// those bytes were read from, the word embeddings are read from it per token instead of
    /// held (see [`WordTable::File`]).
    pub fn load(
        safetensors: &[u8],
        shape: BertShape,
        words_file: Option<&Path>,
    ) -> Result<Self, String> {
        if shape.heads == 0 || shape.hidden == 0 || !shape.hidden.is_multiple_of(shape.heads) {
            return Err(format!(
                "hidden size {} is not a multiple of {} heads",
                shape.hidden, shape.heads
            ));
        }
        let tensors =
            SafeTensors::deserialize(safetensors).map_err(|e| format!("the weights file: {e}"))?;
        let prefix = if tensors.tensor("embeddings.word_embeddings.weight").is_ok() {
            ""
        } else {
            "bert."
        };
        let w = Weights { tensors, prefix };
        let h = shape.hidden;
        let word_table = w
            .tensors
            .tensor(&format!("{prefix}embeddings.word_embeddings.weight"))
            .map_err(|_| "tensor embeddings.word_embeddings.weight is missing")?;
        let vocab = word_table.shape().iter().product::<usize>() / h;
        if vocab == 0 {
            return Err("tensor embeddings.word_embeddings.weight is empty".into());
        }
        let table = w.get("embeddings.word_embeddings.weight", vocab * h)?;
        let word = match words_file {
            None => WordTable::Owned(table),
            Some(path) => WordTable::from_file(
                path,
                safetensors,
                &format!("{prefix}embeddings.word_embeddings.weight"),
                &table,
                h,
            )?,
        };
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
            vocab,
            position,
            segment0: types[..h].to_vec(),
            embed_norm,
            layers,
            shape,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// Mean-pooled (not yet normalised) last hidden states of each token-id sequence. Every
    /// sequence must be non-empty and at most `max_positions` long.
    pub fn pooled(&self, sequences: &[&[u32]]) -> Result<Vec<Vec<f32>>, String> {
        // A pass that panics drops its scratch; the lock is never held across a pass.
        let idle = || self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut scratch = idle().pop().unwrap_or_default();
        let result = self.pooled_with(sequences, &mut scratch);
        scratch.trim(&self.shape);
        idle().push(scratch);
        result
    }

    fn pooled_with(
        &self,
        sequences: &[&[u32]],
        scratch: &mut Scratch,
    ) -> Result<Vec<Vec<f32>>, String> {
        let h = self.shape.hidden;
        let vocab = self.vocab;
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

        let widest = (3 * h).max(self.shape.intermediate);
        sized(&mut scratch.blocks, total * widest);
        let x = sized(&mut scratch.x, total * h);
        for (s, &(start, _)) in sequences.iter().zip(&spans) {
            for (pos, &id) in s.iter().enumerate() {
                let id = id as usize;
                if id >= vocab {
                    return Err(format!("token id {id} outside the vocabulary of {vocab}"));
                }
                let row = &mut x[(start + pos) * h..(start + pos + 1) * h];
                self.word.row(id, row)?;
                let posn = &self.position[pos * h..(pos + 1) * h];
                for ((o, b), c) in row.iter_mut().zip(posn).zip(&self.segment0) {
                    // The same order of additions as word + position + segment.
                    *o = *o + b + c;
                }
            }
        }
        let eps = self.shape.layer_norm_eps;
        add_layer_norm(x, &[], &self.embed_norm.gamma, &self.embed_norm.beta, eps);

        for layer in &self.layers {
            let Scratch {
                x,
                qkv,
                context,
                a,
                up,
                out,
                blocks,
            } = &mut *scratch;
            let qkv = sized(qkv, total * 3 * h);
            layer.qkv.forward_into(x, total, qkv, blocks);
            let context = sized(context, total * h);
            self.attention(qkv, &spans, context, blocks);
            let a = sized(a, total * h);
            layer.attn_out.forward_into(context, total, a, blocks);
            add_layer_norm(a, x, &layer.attn_norm.gamma, &layer.attn_norm.beta, eps);
            let up = sized(up, total * self.shape.intermediate);
            layer.up.forward_into(a, total, up, blocks);
            gelu(up);
            let out = sized(out, total * h);
            layer.down.forward_into(up, total, out, blocks);
            add_layer_norm(out, a, &layer.out_norm.gamma, &layer.out_norm.beta, eps);
            std::mem::swap(&mut scratch.x, &mut scratch.out);
        }

        let x = &scratch.x;
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

    /// Multi-head self-attention of every sequence into `context` (tokens x hidden): one task
    /// per (sequence, head), each writing its own block of `blocks` (at least tokens x hidden),
    /// gathered into the context.
    fn attention(
        &self,
        qkv: &[f32],
        spans: &[(usize, usize)],
        context: &mut [f32],
        blocks: &mut [f32],
    ) {
        let h = self.shape.hidden;
        let heads = self.shape.heads;
        let d = h / heads;
        // Rows of the stacked query, key and value projections.
        let stride = 3 * h;
        // Sequence s's heads' blocks (len x d each, in head order) fill its rows' share of
        // `blocks`, start * h .. (start + len) * h.
        let mut tasks: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(spans.len() * heads);
        let mut rest = &mut blocks[..context.len()];
        for (s, &(_, len)) in spans.iter().enumerate() {
            for hd in 0..heads {
                let (block, tail) = rest.split_at_mut(len * d);
                rest = tail;
                tasks.push((s, hd, block));
            }
        }
        tasks.par_iter_mut().for_each(|(s, hd, out)| {
            let (start, len) = spans[*s];
            let base = start * stride + *hd * d;
            let head = Head {
                stride,
                q: base,
                k: base + h,
                v: base + 2 * h,
                len,
                size: d,
            };
            attend(qkv, head, out);
        });
        for (s, hd, block) in &tasks {
            let (start, _) = spans[*s];
            for (i, src) in block.chunks_exact(d).enumerate() {
                let at = (start + i) * h + hd * d;
                context[at..at + d].copy_from_slice(src);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file of the given header JSON and data bytes.
    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn tensor_spans_are_found_past_the_header() {
        let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
        let f = file(header, &[0u8; 12]);
        let start = 8 + header.len() as u64;
        assert_eq!(tensor_span(&f, "a"), Ok(Some((start, 4))));
        assert_eq!(tensor_span(&f, "b"), Ok(Some((start + 4, 8))));
        assert_eq!(tensor_span(&f, "c"), Ok(None));
    }

    #[test]
    fn malformed_weight_files_are_errors_not_panics() {
        let f16 = r#"{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}"#;
        assert_eq!(
            tensor_span(&file(f16, &[0u8; 4]), "a"),
            Err("tensor a is not f32".to_string())
        );
        let is_refused = |f: &[u8], why: &str| {
            let got = tensor_span(f, "a");
            assert_eq!(got, Err(format!("the weights file: {why}")), "{why}");
            let load = Bert::load(f, tiny_shape(), None).err();
            assert_eq!(load, Some(format!("the weights file: {why}")), "{why}");
        };
        let past_end = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        is_refused(
            &file(past_end, &[0u8; 8]),
            "incomplete metadata, file not fully covered",
        );
        let reversed = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}"#;
        is_refused(&file(reversed, &[0u8; 8]), "invalid offset for tensor `a`");
        let wrong_size = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
        is_refused(
            &file(wrong_size, &[0u8; 8]),
            "invalid shape, data type, or offset for tensor",
        );
        is_refused(&[1, 2, 3], "header too small");
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        is_refused(&huge, "header too large");
        let f = file("not json", &[]);
        assert!(tensor_span(&f, "a").is_err_and(|e| e.starts_with("the weights file: ")));
        assert!(
            Bert::load(&f, tiny_shape(), None).is_err_and(|e| e.starts_with("the weights file: "))
        );
    }

    /// A 16-wide, one-layer BERT's shape (16 is the kernels' panel width).
    fn tiny_shape() -> BertShape {
        BertShape {
            hidden: 16,
            heads: 2,
            intermediate: 32,
            layers: 1,
            max_positions: 8,
            layer_norm_eps: 1e-12,
        }
    }

    /// A safetensors file of a random model of [`tiny_shape`] with `vocab` words.
    fn tiny_model(vocab: usize) -> Vec<u8> {
        let s = tiny_shape();
        let (h, i) = (s.hidden, s.intermediate);
        let mut tensors: Vec<(String, Vec<usize>)> = vec![
            ("embeddings.word_embeddings.weight".into(), vec![vocab, h]),
            (
                "embeddings.position_embeddings.weight".into(),
                vec![s.max_positions, h],
            ),
            ("embeddings.token_type_embeddings.weight".into(), vec![2, h]),
            ("embeddings.LayerNorm.weight".into(), vec![h]),
            ("embeddings.LayerNorm.bias".into(), vec![h]),
        ];
        for l in 0..s.layers {
            let p = format!("encoder.layer.{l}");
            for (name, shape) in [
                ("attention.self.query", [h, h]),
                ("attention.self.key", [h, h]),
                ("attention.self.value", [h, h]),
                ("attention.output.dense", [h, h]),
                ("intermediate.dense", [i, h]),
                ("output.dense", [h, i]),
            ] {
                tensors.push((format!("{p}.{name}.weight"), shape.to_vec()));
                tensors.push((format!("{p}.{name}.bias"), vec![shape[0]]));
            }
            for name in ["attention.output.LayerNorm", "output.LayerNorm"] {
                tensors.push((format!("{p}.{name}.weight"), vec![h]));
                tensors.push((format!("{p}.{name}.bias"), vec![h]));
            }
        }
        let (mut header, mut data) = (Vec::new(), Vec::new());
        let mut seed = 7u64;
        for (name, shape) in tensors {
            let len: usize = shape.iter().product();
            let begin = data.len();
            for _ in 0..len {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let v = ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
                data.extend_from_slice(&v.to_le_bytes());
            }
            header.push(format!(
                r#""{name}":{{"dtype":"F32","shape":{shape:?},"data_offsets":[{begin},{}]}}"#,
                data.len()
            ));
        }
        file(&format!("{{{}}}", header.join(",")), &data)
    }

    #[test]
    fn passes_reusing_scratch_give_the_bits_of_a_fresh_model() {
        let weights = tiny_model(50);
        let bits = |v: Vec<Vec<f32>>| -> Vec<Vec<u32>> {
            v.into_iter()
                .map(|r| r.into_iter().map(f32::to_bits).collect())
                .collect()
        };
        let one: &[u32] = &[1, 7, 3, 2];
        let long: &[u32] = &[4, 9, 9, 20, 31, 49, 0, 5];
        let fresh = Bert::load(&weights, tiny_shape(), None).expect("load");
        let want_one = bits(fresh.pooled(&[one]).expect("one"));
        let want_long = bits(fresh.pooled(&[long]).expect("long"));

        let model = Bert::load(&weights, tiny_shape(), None).expect("load");
        // A larger batch first, then a smaller one, then a failing one: each leaves its
        // values in the buffers the next pass reuses.
        let batch = bits(model.pooled(&[long, one, long]).expect("batch"));
        assert_eq!(
            batch,
            [want_long.clone(), want_one.clone(), want_long.clone()].concat()
        );
        assert_eq!(bits(model.pooled(&[one]).expect("one")), want_one);
        let unknown: &[u32] = &[1, 50];
        assert!(model.pooled(&[unknown]).is_err());
        assert_eq!(bits(model.pooled(&[long]).expect("long")), want_long);
        assert_eq!(model.idle.lock().expect("idle").len(), 1);
    }

    #[test]
    fn a_huge_pass_does_not_keep_its_buffers() {
        let model = Bert::load(&tiny_model(50), tiny_shape(), None).expect("load");
        let long: &[u32] = &[4, 9, 9, 20, 31, 49, 0, 5];
        let capacity = |m: &Bert| -> usize {
            let idle = m.idle.lock().expect("idle");
            idle.iter()
                .map(|s| [&s.x, &s.qkv, &s.context, &s.a, &s.up, &s.out, &s.blocks])
                .flat_map(|b| b.map(Vec::capacity))
                .sum()
        };
        model.pooled(&[long; 16]).expect("normal");
        let normal = capacity(&model);
        // 128 tokens x (16 + 48 + 16 + 16 + 32 + 16 + 48) values.
        assert!(normal >= 128 * 192, "{normal}");
        // Past KEEP_TOKENS tokens: the pass frees its buffers when it ends ...
        model
            .pooled(&vec![long; 2 * KEEP_TOKENS / 8])
            .expect("huge");
        assert_eq!(capacity(&model), 0);
        // ... and the next normal one grows them back once.
        model.pooled(&[long; 16]).expect("normal");
        assert_eq!(capacity(&model), normal);
    }

    #[test]
    fn weights_of_every_float_type_load_and_others_are_refused() {
        let values = [1.5f32, -0.25, 3.0, 0.0];
        let header = |dtype: &str, bytes: usize| {
            format!(r#"{{"a":{{"dtype":"{dtype}","shape":[4],"data_offsets":[0,{bytes}]}}}}"#)
        };
        let f32s: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f16s: Vec<u8> = values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect();
        let bf16s: Vec<u8> = values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect();
        let f64s: Vec<u8> = values
            .iter()
            .flat_map(|&v| f64::from(v).to_le_bytes())
            .collect();
        for (dtype, data) in [("F32", f32s), ("F16", f16s), ("BF16", bf16s), ("F64", f64s)] {
            let bytes = file(&header(dtype, data.len()), &data);
            let tensors = SafeTensors::deserialize(&bytes).expect(dtype);
            let w = Weights {
                tensors,
                prefix: "",
            };
            assert_eq!(w.get("a", 4), Ok(values.to_vec()), "{dtype}");
            assert_eq!(
                w.get("a", 5),
                Err("tensor a has 4 values, expected 5".to_string())
            );
            assert_eq!(w.get("b", 4), Err("tensor b is missing".to_string()));
        }
        let bytes = file(&header("I32", 16), &[0u8; 16]);
        let tensors = SafeTensors::deserialize(&bytes).expect("I32");
        let w = Weights {
            tensors,
            prefix: "",
        };
        assert_eq!(
            w.get("a", 4),
            Err("tensor a: dtype I32 (F32, F16, BF16 or F64 expected)".to_string())
        );
    }

    #[test]
    fn rows_wider_than_one_read_come_back_whole() {
        // 1,500 dimensions: two reads of the row's stack buffer.
        let h = 1500;
        let values: Vec<f32> = (0..2 * h).map(|i| i as f32 * 0.25).collect();
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let header = format!(
            r#"{{"w":{{"dtype":"F32","shape":[2,{h}],"data_offsets":[0,{}]}}}}"#,
            data.len()
        );
        let bytes = file(&header, &data);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.safetensors");
        std::fs::write(&path, &bytes).expect("write");
        let table = WordTable::from_file(&path, &bytes, "w", &values, h).expect("from file");
        let mut row = vec![0f32; h];
        table.row(1, &mut row).expect("row");
        assert_eq!(row[..], values[h..]);
        // A loaded copy that differs from the file is refused.
        let mut changed = values.clone();
        changed[2 * h - 1] += 1.0;
        assert!(WordTable::from_file(&path, &bytes, "w", &changed, h)
            .is_err_and(|e| e.ends_with("changed while it was loaded")));
    }

    #[test]
    fn rows_read_from_the_file_equal_the_table_in_memory() {
        let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 1.25).collect();
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let header = r#"{"w":{"dtype":"F32","shape":[4,3],"data_offsets":[0,48]}}"#;
        let bytes = file(header, &data);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.safetensors");
        std::fs::write(&path, &bytes).expect("write");
        let (offset, len) = tensor_span(&bytes, "w").expect("span").expect("present");
        assert_eq!(len, 48);
        let owned = WordTable::Owned(values.clone());
        let from_file = WordTable::File {
            file: std::fs::File::open(&path).expect("open"),
            offset,
        };
        for id in 0..4 {
            let (mut a, mut b) = ([0f32; 3], [0f32; 3]);
            owned.row(id, &mut a).expect("owned row");
            from_file.row(id, &mut b).expect("file row");
            assert_eq!(a, b);
            assert_eq!(a[..], values[id * 3..id * 3 + 3]);
        }
        // A row past a truncated file is an error.
        std::fs::write(&path, &bytes[..bytes.len() - 4]).expect("truncate");
        let mut row = [0f32; 3];
        assert!(from_file
            .row(3, &mut row)
            .is_err_and(|e| e.starts_with("reading word embedding 3 from the weights file")));
    }
}
