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
/// Entry points for the fuzz targets in `tests/fuzz`; not an API.
#[doc(hidden)]
pub mod fuzzing;
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

/// Hands the memory freed so far back to the operating system. mimalloc keeps freed pages in
/// the heap of the thread that freed them until that thread allocates again; start-up frees a
/// lot on threads that then idle (the log records decoded to rebuild the vector table, the
/// model file and its unpacked tensors): ~130 MB of an idle server's RSS with 100,000
/// memories, measured. Collects the calling thread's heap and every rayon worker's.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` only returns free pages to the OS; it is safe to call on any
    // thread at any time (it touches only the calling thread's heap and abandoned segments).
    rayon::broadcast(|_| unsafe { libmimalloc_sys::mi_collect(true) });
    unsafe { libmimalloc_sys::mi_collect(true) };
}
