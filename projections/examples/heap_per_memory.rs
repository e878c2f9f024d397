//! Heap bytes the memory store holds per memory, measured rather than estimated.
//!
//! Creates `COUNT` memories (384 dimensions, ten tenants, the load driver's kind of content)
//! through `Memories::apply`, `BATCH` per batch as group commits hand them over, then detaches
//! the store from its database and counts what dropping it frees: the store's whole heap, sled's
//! excluded. Run it for two counts and subtract to get the bytes each further memory adds (what
//! the soak grows by, docs/RELIABILITY.md, "Soak"):
//!
//! ```sh
//! cargo run --release -p auditmem-projections --example heap_per_memory -- 1 100000
//! cargo run --release -p auditmem-projections --example heap_per_memory -- 1 122000
//! ```
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use auditmem_projections::event::{vector_to_bytes, Event, MemoryCreated, MemoryType};
use auditmem_projections::memories::Memories;
use auditmem_projections::vector_table::Spill;
use auditmem_projections::{Applied, Projection};
use uuid::Uuid;

/// The system allocator, counting the bytes asked for and not yet given back.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to `System` unchanged; only a counter is kept beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as for `dealloc`, and `new_size` as the caller gave it.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .map(|s| s.parse().expect("arguments: BATCH COUNT (numbers)"))
        .unwrap_or(default)
}

fn main() {
    let batch = arg(1, 1).max(1) as usize;
    let count = arg(2, 100_000);
    let dir = tempfile::tempdir().expect("temporary dir");
    // The service's segment size (src/log/mod.rs): with sled's 512 KiB default, sled 0.34's
    // segment truncation can deadlock under this many small commits (docs/RELIABILITY.md,
    // "Known limits").
    let db = sled::Config::new()
        .path(dir.path().join("db"))
        .segment_size(8 << 20)
        .cache_capacity(16 << 20)
        .open()
        .expect("sled");
    let spill = Spill {
        dir: dir.path().to_path_buf(),
        rows: 10_000,
    };
    let store = Memories::open(&db, &|_| Ok(None), Some(spill), ring()).expect("memory store");
    let tenants: Vec<Uuid> = (0..10).map(|i| Uuid::from_u128(1_000 + i)).collect();
    let mut pending = Vec::with_capacity(batch);
    let mut seq = 0u64;
    for i in 0..count {
        let vector: Vec<f32> = (0..384)
            .map(|j| ((i * 31 + j) % 97) as f32 / 97.0 - 0.5)
            .collect();
        pending.push(Event::MemoryCreated(MemoryCreated {
            memory_id: Uuid::from_u128(u128::from(i) * 7_919 + 17),
            tenant_id: tenants[(i % 10) as usize],
            content: format!(
                "The on-call engineer deploys to Kubernetes on Fridays only after review as noted in meeting {}.",
                i / 576
            ),
            memory_type: <MemoryType as strum::VariantArray>::VARIANTS[(i % 3) as usize],
            importance: 0.5,
            created_at: 1_700_000_000_000 + i as i64,
            model: "local-minilm-l6-v2".into(),
            vector: vector_to_bytes(&vector),
            extra: None,
            sealed: None,
        }));
        if pending.len() == batch || i + 1 == count {
            let applied: Vec<Applied<'_>> = pending
                .iter()
                .map(|event| {
                    seq += 1;
                    Applied {
                        seq,
                        ts_micros: 0,
                        event,
                        prepared: None,
                    }
                })
                .collect();
            store.apply(&applied).expect("apply");
            pending.clear();
        }
    }
    let (held, vector_bytes) = store.footprint();
    let detached = store.detach();
    drop(db);
    let before = LIVE.load(Ordering::Relaxed);
    drop(detached);
    let store_bytes = before - LIVE.load(Ordering::Relaxed);
    let other = store_bytes - vector_bytes as isize;
    println!(
        "batch {batch}, {held} memories: the store holds {store_bytes} B, \
         {vector_bytes} B of them in vector tables; the rest {} B a memory",
        other / held.max(1) as isize
    );
}

/// The keyring the store opens sealed memories with (this example's are in the clear).
fn ring() -> std::sync::Arc<dyn auditmem_projections::seal::Keyring> {
    std::sync::Arc::new(auditmem_projections::seal::MemoryKeyring::default())
}
