//! auditmem: a tamper-evident audit log and memory store.
//!
//! Every operation is an event appended to one blake3-hash-chained log ([`log`]); the read
//! models ([`auditmem_projections`]) are folded from it; the HTTP API ([`api`]) decides, the
//! appender commits, the projections answer.

pub mod api;
pub mod cli;
pub mod config;
pub mod embed;
pub mod export;
pub mod extract;
pub mod log;
mod openai_compat;
pub mod registry;
pub mod state;

pub use auditmem_projections as projections;
