//! auditmem's event schema and every read model folded from the log.
//!
//! Nothing here speaks HTTP or calls a provider: a projection is a pure fold of events into
//! sled trees, so `auditmem replay` can drop them all and rebuild the same answers.

// Every `unsafe` says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod audit_index;
pub mod audit_view;
pub mod erasures;
pub mod event;
pub mod exports;
pub mod keyword;
mod log_order;
pub mod memories;
pub mod niced;
mod overlay;
pub mod projection;
pub mod seal;
pub mod sorted_index;
pub mod tenant_events;
pub mod tenants;
pub mod texts;
pub mod unlinked;
pub mod vector_table;
pub mod webhooks;

pub use event::{
    vector_from_bytes, vector_to_bytes, CreditsConsumed, MemoriesDeleted, MemoriesDeletedByType,
    MemoriesExpired, MemoryAmend, MemoryCreated, MemoryDeleted, MemoryExtra, MemorySuperseded,
    MemoryUpdated,
};
pub use event::{
    AuditDetail, AuditEntry, AuditRecorded, ChainPoint, Event, ExportCompleted, ExportFailed,
    ExportFormat, ExportRequested, KeyIssued, KeyRevoked, KeyScope, MemoryType, Named, Permission,
    Plan, TenantCreated, TenantUpdated, Tokens,
};
pub use projection::{Applied, Prepared, Projection, ProjectionError};

/// The hash map of the in-memory indexes. Their keys are ids and seqs produced by the service
/// itself, so SipHash's defence against chosen keys buys nothing there, while its cost is
/// paid on every lookup of replay's apply thread; foldhash costs a fraction of it.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Every projection of the service, applied together in log order.
pub struct Projections {
    pub tenants: tenants::Tenants,
    pub audit: audit_index::AuditIndex,
    pub exports: exports::Exports,
    pub memories: memories::Memories,
    /// Per tenant, the log positions of its webhook events other than audit entries.
    pub events: tenant_events::TenantEvents,
    /// Every data key an erasure named: destroyed as each erasure is folded, and again at start.
    pub erasures: erasures::Erasures,
    /// The data keys personal fields are sealed under (`seal`): what the read paths open
    /// them with, and what erasure destroys.
    pub keys: std::sync::Arc<dyn seal::Keyring>,
}

/// The in-memory part of every projection, holding no handle on the database: what
/// [`Projections::detach`] keeps while the database is closed and opened again.
pub struct Detached {
    audit: audit_index::Detached,
    memories: memories::Detached,
    events: tenant_events::Detached,
    keys: std::sync::Arc<dyn seal::Keyring>,
}

impl Projections {
    /// Gives up every tree handle, keeping the in-memory state built at open.
    ///
    /// Why: sled 0.34 keeps in memory most of the nodes read through it, whatever its cache
    /// capacity (a known limit of that version). Opening reads every stored audit ref and every
    /// memory's vector, so what sled keeps of that reading grows with the log and stays
    /// resident, however small the cache. Closing the database frees it; the server then opens
    /// it again (a fraction of a second) and [`Projections::attach`]es the state.
    pub fn detach(self) -> projection::Result<Detached> {
        let Self {
            tenants,
            audit,
            exports,
            memories,
            events,
            erasures,
            keys,
        } = self;
        drop((tenants, exports, erasures));
        Ok(Detached {
            audit: audit.detach(),
            memories: memories.detach()?,
            events: events.detach(),
            keys,
        })
    }

    /// Projections over `db` with the state [`Projections::detach`] kept; `db` must be the
    /// database they were opened on, with nothing written to it in between.
    pub fn attach(db: &sled::Db, d: Detached) -> projection::Result<Self> {
        Ok(Self {
            tenants: tenants::Tenants::open(db)?,
            audit: audit_index::AuditIndex::attach(db, d.audit)?,
            exports: exports::Exports::open(db)?,
            memories: memories::Memories::attach(db, d.memories)?,
            events: tenant_events::TenantEvents::attach(db, d.events)?,
            erasures: erasures::Erasures::open(db, d.keys.clone())?,
            keys: d.keys,
        })
    }

    /// The sled tree of every projection (what `auditmem replay` drops).
    pub const TREES: [&'static str; 6] = [
        tenants::TREE,
        audit_index::TREE,
        exports::TREE,
        memories::TREE,
        tenant_events::TREE,
        erasures::TREE,
    ];

    /// Opens every projection; `vectors` reads a memory event's vector from the log, for the
    /// memories projection rebuilding its vector table; large vector tables keep their f32
    /// rows in files as `spill` says, and the audit index and the tenant events index their
    /// sealed blocks in a file each in the same directory (none: all on the heap). `keys` opens
    /// what is sealed.
    pub fn open(
        db: &sled::Db,
        vectors: memories::VectorSource<'_>,
        spill: Option<vector_table::Spill>,
        keys: std::sync::Arc<dyn seal::Keyring>,
    ) -> projection::Result<Self> {
        Ok(Self {
            tenants: tenants::Tenants::open(db)?,
            // The audit time indexes' and the tenant events lists' sealed blocks go where the
            // vector rows spill.
            audit: match &spill {
                Some(s) => audit_index::AuditIndex::open_in(db, &s.dir)?,
                None => audit_index::AuditIndex::open(db)?,
            },
            exports: exports::Exports::open(db)?,
            events: match &spill {
                Some(s) => tenant_events::TenantEvents::open_in(db, &s.dir)?,
                None => tenant_events::TenantEvents::open(db)?,
            },
            memories: memories::Memories::open(db, vectors, spill, keys.clone())?,
            erasures: erasures::Erasures::open(db, keys.clone())?,
            keys,
        })
    }

    /// The state-independent work of folding `event` into every projection.
    pub fn prepare(event: &Event) -> Prepared {
        match event {
            Event::AuditRecorded(rec) => Prepared {
                audit: Some((
                    audit_view::canonical_entry_bytes(&rec.entry, rec.sealed.is_some()),
                    audit_index::action_key(&rec.entry.action),
                )),
            },
            _ => Prepared::default(),
        }
    }

    /// Erasures come last: a group's erasure destroys its keys once every other projection
    /// has folded the group.
    pub fn all(&self) -> [&dyn Projection; 6] {
        [
            &self.tenants,
            &self.audit,
            &self.exports,
            &self.memories,
            &self.events,
            &self.erasures,
        ]
    }

    /// The lowest checkpoint: catch-up starts right after it.
    pub fn min_checkpoint(&self) -> projection::Result<u64> {
        let mut min = u64::MAX;
        for p in self.all() {
            min = min.min(p.checkpoint()?);
        }
        Ok(min)
    }

    pub fn apply(&self, events: &[Applied<'_>]) -> projection::Result<()> {
        for p in self.all() {
            p.apply(events)?;
        }
        Ok(())
    }

    /// Moves every checkpoint up to `seq`; only for a caller that applied everything up to it.
    pub fn settle(&self, seq: u64) -> projection::Result<()> {
        for p in self.all() {
            p.settle(seq)?;
        }
        Ok(())
    }

    pub fn reset(&self) -> projection::Result<()> {
        for p in self.all() {
            p.reset()?;
        }
        Ok(())
    }
}

/// Opens the sled database in `dir` again right after its last handle was dropped, waiting
/// (at most 10 s) for sled's background flusher to let go of the directory's lock, which on
/// a loaded machine it may hold a moment after the drop.
#[cfg(test)]
pub(crate) fn reopen_db(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::open(dir) {
            Ok(db) => return db,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("reopen {}: {e}", dir.display()),
        }
    }
}
