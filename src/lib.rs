//! auditmem: a tamper-evident audit log and memory store.
//!
//! Every operation is an event appended to one blake3-hash-chained log ([`log`]); the read
//! models ([`auditmem_projections`]) are folded from it; the HTTP API ([`api`]) reads requests
//! and hands them to the commands ([`command`]), which decide; the appender commits, the
//! projections answer.

// Every `unsafe` says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod api;
pub mod cli;
pub mod command;
pub mod compat;
pub mod config;
pub mod embed;
pub mod export;
pub mod extract;
/// Entry points for the fuzz targets in `tests/fuzz`; not an API.
#[doc(hidden)]
pub mod fuzzing;
pub mod http_client;
pub mod keys;
pub mod locomo;
#[cfg(test)]
mod locomo_ablation;
#[cfg(test)]
mod locomo_context;
#[cfg(test)]
mod locomo_feedback;
pub mod log;
pub mod mcp;
mod openai_compat;
pub mod registry;
#[cfg(test)]
mod search_eval;
pub mod service;
pub mod tlog;
pub mod webhooks;
pub mod wire;
pub mod witness;

pub use auditmem_projections as projections;

/// glibc's malloc serialises the appender, the applier and the request threads on its arena
/// locks; mimalloc's thread-local free lists do not. Declared in the library so the binary, the
/// benches and the tests all run on the same allocator.
#[cfg(not(feature = "heap-stats"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "heap-stats")]
#[global_allocator]
static GLOBAL: heap_stats::Counting = heap_stats::Counting;

/// Bytes the program holds allocated right now, with the `heap-stats` feature; `None` without.
/// Set against RSS it separates what the service keeps from what the allocator keeps for it
/// (docs/RELIABILITY.md, "Soak"); exported as `auditmem_heap_live_bytes`.
pub fn heap_live_bytes() -> Option<u64> {
    #[cfg(feature = "heap-stats")]
    return Some(heap_stats::live());
    #[cfg(not(feature = "heap-stats"))]
    None
}

/// mimalloc with a count of the bytes allocated and not yet freed: a diagnostic build only, as
/// every allocation then also updates one shared counter.
#[cfg(feature = "heap-stats")]
mod heap_stats {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

    /// Signed so that a subtraction can never wrap; read as at least 0.
    static LIVE: AtomicI64 = AtomicI64::new(0);

    pub(crate) fn live() -> u64 {
        LIVE.load(Relaxed).max(0) as u64
    }

    pub struct Counting;

    // SAFETY: every method forwards to mimalloc with the caller's arguments unchanged; the
    // counter is bookkeeping beside it and touches no allocated memory.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract for `alloc`, passed on as it came.
            let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
            if !p.is_null() {
                LIVE.fetch_add(layout.size() as i64, Relaxed);
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract for `alloc_zeroed`, passed on as it came.
            let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
            if !p.is_null() {
                LIVE.fetch_add(layout.size() as i64, Relaxed);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size() as i64, Relaxed);
            // SAFETY: `ptr` came from this allocator (mimalloc underneath) with `layout`.
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller's contract for `realloc`, passed on as it came.
            let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
            // On failure the old block is still allocated and the count stays as it was.
            if !p.is_null() {
                LIVE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
            }
            p
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_count_follows_an_allocation_and_its_free() {
            // Other tests' threads allocate too, so compare with a margin far below 8 MiB.
            let before = super::live();
            // black_box: an allocation never read may be elided by the optimiser.
            let block = std::hint::black_box(vec![1u8; 8 << 20]);
            let during = super::live();
            assert!(during >= before + (7 << 20), "{before} -> {during}");
            drop(block);
            let after = super::live();
            assert!(after + (7 << 20) <= during, "{during} -> {after}");
            assert!(crate::heap_live_bytes().is_some());
        }
    }
}

/// Stops the kernel from backing this process's memory with transparent huge pages.
///
/// mimalloc reserves its heap as 1 GiB arenas that the kernel may back with 2 MiB pages even
/// in THP's `madvise` mode. A huge page is resident whole once any byte of it is touched, and
/// freeing part of one splits it: with them the server starts larger and grows faster under
/// load, and no search or list is faster for it (docs/PERFORMANCE.md, "Transparent huge
/// pages"). Process-wide and kept across exec; a kernel without the option (before 3.15) keeps
/// its default, which is only a memory cost.
pub fn disable_transparent_huge_pages() -> bool {
    rustix::thread::disable_transparent_huge_pages(true).is_ok()
}

/// mimalloc's `mi_option_purge_delay` (v3's `mi_option_e`; the bindings name no constant).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps a page it freed before handing it back to the OS, in milliseconds,
/// as `serve` sets it (docs/PERFORMANCE.md, "Sealing"; docs/RELIABILITY.md, "Soak").
pub const PURGE_DELAY_MS: i64 = 10;

/// Has mimalloc hand pages it frees back to the OS [`PURGE_DELAY_MS`] later, instead of 1 s
/// later (its v3 default), unless `MIMALLOC_PURGE_DELAY` says otherwise. Under steady load a
/// 1 s delay keeps freed pages resident in bulk, so RSS runs further over the live heap and
/// grows faster; purging at once (0) hands back pages that the next requests fault in again,
/// which cost ingestion ~13% of its CPU an entry. 10 ms keeps a page that is about to be
/// reused and returns the rest. Returns whether it set the option.
pub fn purge_freed_pages_soon() -> bool {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return false;
    }
    // SAFETY: setting an allocator option takes plain integers; mimalloc reads it at each purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) };
    true
}

/// Hands the memory freed so far back to the operating system. mimalloc keeps freed pages in
/// the heap of the thread that freed them until that thread allocates again; start-up frees a
/// lot on threads that then idle (the log records decoded to rebuild the vector table, the
/// model file and its unpacked tensors), which would otherwise stay in an idle server's RSS.
/// Collects the calling thread's heap and every rayon worker's.
pub fn release_free_memory() {
    // SAFETY: `mi_collect` only returns free pages to the OS; it is safe to call on any
    // thread at any time (it touches only the calling thread's heap and abandoned segments).
    rayon::broadcast(|_| {
        // SAFETY: as above, on each rayon worker's own heap.
        unsafe { libmimalloc_sys::mi_collect(true) }
    });
    // SAFETY: as above, on this thread's heap.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_purge_delay_is_the_option_set_to_10_ms() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            // The environment decides, and the function leaves it alone.
            assert!(!super::purge_freed_pages_soon());
            return;
        }
        // mimalloc v3's purge delay defaults to 1000 ms, which no neighbouring option does, so
        // the index names the option; setting it turns it to 10.
        // SAFETY: reading an allocator option takes and returns plain integers.
        let get = || unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(get(), 1000);
        assert!(super::purge_freed_pages_soon());
        assert_eq!(get(), 10);
    }
}
