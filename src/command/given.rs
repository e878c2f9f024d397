//! Real read models for the commands' tests and the fuzz targets: every projection opened on a
//! temporary sled database, with the events of a case applied as the appender's applier
//! applies them (each at the next seq). Nothing of our storage is imitated.

use auditmem_projections::{Applied, Event, ProjectionError, Projections};
use uuid::Uuid;

use super::{Clock, Context, Ids};

/// Projections over a temporary database, and the seq the next applied event gets.
pub struct Given {
    pub projections: Projections,
    next_seq: u64,
    // Dropped after the projections: sled removes a temporary database when its last handle goes.
    _db: sled::Db,
}

impl Given {
    /// Empty projections.
    pub fn new() -> Result<Given, ProjectionError> {
        Given::with_keys(std::sync::Arc::new(
            auditmem_projections::seal::MemoryKeyring::default(),
        ))
    }

    /// Empty projections whose sealed values are sealed and opened with `keys`.
    pub fn with_keys(
        keys: std::sync::Arc<dyn auditmem_projections::seal::Keyring>,
    ) -> Result<Given, ProjectionError> {
        let db = sled::Config::new().temporary(true).open()?;
        // Vectors come with the applied events; there is no log to read them back from.
        let projections = Projections::open(&db, &|_| Ok(None), None, keys)?;
        Ok(Given {
            projections,
            next_seq: 1,
            _db: db,
        })
    }

    /// Projections with `events` applied.
    pub fn with(events: &[Event]) -> Result<Given, ProjectionError> {
        let mut g = Given::new()?;
        g.apply(events)?;
        Ok(g)
    }

    /// Applies `events` at the next seqs, as one group.
    pub fn apply(&mut self, events: &[Event]) -> Result<(), ProjectionError> {
        let applied: Vec<Applied<'_>> = events
            .iter()
            .enumerate()
            .map(|(i, event)| Applied {
                seq: self.next_seq + i as u64,
                ts_micros: 0,
                event,
                prepared: None,
            })
            .collect();
        self.projections.apply(&applied)?;
        self.next_seq += events.len() as u64;
        Ok(())
    }

    /// A context on these projections at `now` (also what its preconditions read), its ids
    /// from `ids`.
    pub fn at<'a>(&'a self, now: i64, ids: &'a Counter) -> Context<'a> {
        Context::new(&self.projections, now, Clock::Fixed(now), Ids::Counted(ids))
    }
}

/// 2026-11-23T12:00:00Z, the time the cases decide at.
pub const NOON: i64 = 1_795_435_200_000_000;

/// Ids 1, 2, 3, ... in the order asked: `Uuid::from_u128(n)`.
#[derive(Debug)]
pub struct Counter(std::sync::atomic::AtomicU64);

impl Counter {
    pub fn new() -> Self {
        Counter(std::sync::atomic::AtomicU64::new(0))
    }

    pub fn next(&self) -> Uuid {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Uuid::from_u128(n as u128)
    }
}

impl Default for Counter {
    fn default() -> Self {
        Self::new()
    }
}
