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

/// glibc's malloc serialises the appender, the applier and the request threads on its arena
/// locks and spent about a third of the append benchmark's CPU time (perf, docs/PERFORMANCE.md);
/// mimalloc's thread-local free lists remove that. Declared in the library so the binary, the
/// benches and the tests all run on the same allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
