//! The numeric core of auditmem's in-process sentence embedder: the BERT encoder's forward
//! pass ([`Bert`]: token ids in, mean-pooled hidden states out) on our own kernels, with the
//! weights read from a safetensors file and packed once at load.
//!
//! A crate of its own so that the development profile can optimise it alone: unoptimised, an
//! embedding takes ~50x longer and every test that stores memories with the real model crawls,
//! while the service builds at the default debug level. It holds only the numeric code: the
//! tokenizer, the model files and the `Embedder` trait stay in the service (`auditmem::embed`),
//! since their generic code (the tokenizer's JSON decoding above all) compiled here at `-O3`
//! would cost the build more than it saves.

// Every `unsafe` says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

mod bert;
mod kernels;

pub use bert::{Bert, BertShape};
