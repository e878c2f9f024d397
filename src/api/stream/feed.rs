//! The shared head of one tenant's tails: a follower reads the tenant's new entries once and
//! renders each once per form its tails want, into a bounded window the tails copy from.
//!
//! **Who reads.** While a tenant has open streams it has one [`Feed`]: a task (the follower)
//! that, each time the log's head moves, reads the tenant's entries up to the head
//! ([`AuditIndex::tenant_after`], on a blocking thread) and opens and renders each one once
//! per [`Form`] some open tail wants it in (a form only when one of those tails' filters keeps
//! the entry). Fifty tails of one tenant so cost one read and one render of each entry, and a
//! wake-up and a copy each.
//!
//! **The window.** The feed holds every one of the tenant's entries with a position in
//! `(start, through]`, in order, and nothing else. It grows at `through` as the follower
//! reads and is cut at `start` to at most [`FEED_ENTRIES`] entries and [`FEED_BYTES`] of
//! rendered bytes, and to its share of [`ALL_FEEDS_BYTES`] across every tenant's feed. It
//! never waits for a tail: a tail whose next entries were cut (a slow reader, or one resuming
//! from further back) reads them itself, as any stream reads a backfill, until it reaches
//! the window again. A slow tail so holds at most one batch, never the window.
//!
//! **Erasure.** Rendered bytes carry the keyring's retirement count read before their entry
//! was opened ([`Keyring::retirements`]); a tail sends them only while the count still stands
//! there. An erasure retires its keys (the count moves once they are let go) before its
//! receipt is answered, so no bytes opened before an erasure are sent after it: a tail finding
//! a stale entry reads that batch itself, and the follower empties a stale window at its next
//! read.
//!
//! [`AuditIndex::tenant_after`]: auditmem_projections::audit_index::AuditIndex::tenant_after
//! [`Keyring::retirements`]: auditmem_projections::seal::Keyring::retirements

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use auditmem_projections::audit_index::AuditRef;
use auditmem_projections::event::KeyCache;
use axum::body::Bytes;
use tokio::sync::{watch, Notify};
use uuid::Uuid;

use super::{event_data, frame, Filtering, BATCH};
use crate::api::audit::load_list_entry;
use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::wire::audit::stream::StreamFormat;

/// Most entries a feed's window holds.
pub const FEED_ENTRIES: usize = 4096;
/// Most rendered bytes a feed's window holds.
pub const FEED_BYTES: usize = 4 << 20;
/// Most rendered bytes every tenant's feed holds together: each is cut to an equal share.
pub const ALL_FEEDS_BYTES: usize = 64 << 20;
/// What an entry of the window costs besides its rendered bytes (its ref, the Arc, the Vec).
const ENTRY_OVERHEAD: usize = 256;

/// What changes an entry's event data (the framing only wraps it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Form {
    pub show_hash: bool,
    pub format: StreamFormat,
}

impl Form {
    pub(super) fn of(filter: &Filtering) -> Form {
        Form {
            show_hash: filter.show_hash,
            format: filter.format,
        }
    }
}

/// One entry of a window: its ref and its event data in each form a tail wanted it in.
pub(super) struct Shared {
    r: AuditRef,
    /// The keyring's retirement count read before the entry was opened.
    retirements: u64,
    forms: Vec<(Form, Bytes)>,
}

impl Shared {
    fn data(&self, form: Form) -> Option<&Bytes> {
        self.forms.iter().find(|(f, _)| *f == form).map(|(_, d)| d)
    }

    fn cost(&self) -> usize {
        ENTRY_OVERHEAD + self.forms.iter().map(|(_, d)| d.len()).sum::<usize>()
    }
}

/// One tenant's shared head (see the module doc).
pub(super) struct Feed {
    tenant: Uuid,
    window: Mutex<Window>,
    /// The window's `through`, sent each time the follower moved it (or gave up).
    moved: watch::Sender<u64>,
    /// Wakes the follower when the last tail left.
    closing: Notify,
}

struct Window {
    /// Every entry of the tenant with `start < seq <= through` is in `entries`, in order.
    start: u64,
    through: u64,
    entries: VecDeque<Arc<Shared>>,
    bytes: usize,
    /// The open tails' filters, each with how many tails have it.
    tails: Vec<(Filtering, usize)>,
    /// No tail is left: the follower stops, and a new tail starts a new feed.
    closed: bool,
    /// A read failed: the follower stopped, and its tails read for themselves.
    failed: bool,
}

impl Feed {
    fn lock(&self) -> MutexGuard<'_, Window> {
        // A window and counters: consistent after a panic elsewhere.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a tail gets from its feed.
pub(super) enum Take {
    /// The events past the tail's position, framed, and how far they cover.
    Sent { bytes: Vec<u8>, reached: u64 },
    /// The tail has everything the window holds: it waits for the window to move.
    Wait,
    /// The window does not hold the tail's next entries as it would send them (they were cut,
    /// or rendered before a key was retired, or not in its form): it reads them itself, up
    /// to `upto`.
    Own { upto: u64 },
    /// The follower stopped on an error: the tail reads for itself from now on.
    Failed,
}

/// Every tenant's feed.
#[derive(Default)]
pub(super) struct Feeds {
    map: Arc<Mutex<HashMap<Uuid, Arc<Feed>>>>,
    /// How many feeds there are, for each one's share of [`ALL_FEEDS_BYTES`].
    count: Arc<AtomicUsize>,
}

/// A tail's membership of its tenant's feed; leaving it when dropped.
pub(super) struct Member {
    feed: Arc<Feed>,
    filter: Filtering,
    map: Arc<Mutex<HashMap<Uuid, Arc<Feed>>>>,
    count: Arc<AtomicUsize>,
    pub moved: watch::Receiver<u64>,
}

impl Feeds {
    /// Joins `tenant`'s feed with `filter`, starting it (at the log's head `head`) when the
    /// tenant has none. None when the keyring does not count retirements: then nothing
    /// rendered may be shared, and the tail reads for itself.
    pub(super) fn join(
        &self,
        state: &AppState,
        tenant: Uuid,
        filter: Filtering,
        head: watch::Receiver<crate::log::Head>,
    ) -> Option<Member> {
        state.projections.keys.retirements()?;
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let live = map.get(&tenant).filter(|f| {
            let mut w = f.lock();
            if w.closed || w.failed {
                return false;
            }
            add_tail(&mut w.tails, filter);
            true
        });
        let feed = match live {
            Some(f) => f.clone(),
            None => {
                let at = head.borrow().seq;
                let feed = Arc::new(Feed {
                    tenant,
                    window: Mutex::new(Window {
                        start: at,
                        through: at,
                        entries: VecDeque::new(),
                        bytes: 0,
                        tails: vec![(filter, 1)],
                        closed: false,
                        failed: false,
                    }),
                    moved: watch::channel(at).0,
                    closing: Notify::new(),
                });
                map.insert(tenant, feed.clone());
                self.count.store(map.len(), Ordering::Relaxed);
                tokio::spawn(follow(
                    feed.clone(),
                    state.clone(),
                    head,
                    state.streams.stop.clone(),
                    self.count.clone(),
                ));
                feed
            }
        };
        Some(Member {
            moved: feed.moved.subscribe(),
            feed,
            filter,
            map: self.map.clone(),
            count: self.count.clone(),
        })
    }
}

fn add_tail(tails: &mut Vec<(Filtering, usize)>, filter: Filtering) {
    match tails.iter_mut().find(|(f, _)| *f == filter) {
        Some((_, n)) => *n += 1,
        None => tails.push((filter, 1)),
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let mut w = self.feed.lock();
        if let Some(i) = w.tails.iter().position(|(f, _)| *f == self.filter) {
            w.tails[i].1 -= 1;
            if w.tails[i].1 == 0 {
                w.tails.swap_remove(i);
            }
        }
        if w.tails.is_empty() {
            w.closed = true;
            w.entries.clear();
            drop(w);
            if map
                .get(&self.feed.tenant)
                .is_some_and(|f| Arc::ptr_eq(f, &self.feed))
            {
                map.remove(&self.feed.tenant);
                self.count.store(map.len(), Ordering::Relaxed);
            }
            self.feed.closing.notify_one();
        }
    }
}

impl Member {
    /// The tail's next events past `after` from the window, framed as it sends them.
    /// `retirements` is the keyring's count now; `from` the earliest `created_at` the tail
    /// sends (its filter and its plan's retention).
    pub(super) fn take(&self, after: u64, retirements: Option<u64>, from: i64) -> Take {
        let w = self.feed.lock();
        if w.failed {
            return Take::Failed;
        }
        if after < w.start {
            return Take::Own { upto: w.start };
        }
        if after >= w.through {
            return Take::Wait;
        }
        let first = w.entries.partition_point(|e| e.r.seq <= after);
        let picked: Vec<Arc<Shared>> = w.entries.range(first..).take(BATCH).cloned().collect();
        let reached = match picked.last() {
            Some(last) if first + picked.len() < w.entries.len() => last.r.seq,
            _ => w.through,
        };
        drop(w);
        let form = Form::of(&self.filter);
        let mut bytes = Vec::new();
        for e in &picked {
            if !self.filter.keeps(&e.r, from) {
                continue;
            }
            match e.data(form) {
                Some(data) if Some(e.retirements) == retirements => {
                    frame(&mut bytes, e.r.seq, data, self.filter.framing);
                }
                _ => return Take::Own { upto: reached },
            }
        }
        Take::Sent { bytes, reached }
    }
}

/// The follower of `feed`: reads the tenant's entries up to the head each time it moves, until
/// the last tail leaves, the service stops, or a read fails.
async fn follow(
    feed: Arc<Feed>,
    state: AppState,
    mut head: watch::Receiver<crate::log::Head>,
    mut stop: watch::Receiver<bool>,
    count: Arc<AtomicUsize>,
) {
    loop {
        let (through, tails) = {
            let w = feed.lock();
            if w.closed {
                return;
            }
            (
                w.through,
                w.tails.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            )
        };
        let upto = head.borrow_and_update().seq;
        if through < upto {
            // Read before any entry is opened: what it opens is stale once the count moves.
            let Some(retirements) = state.projections.keys.retirements() else {
                return;
            };
            let (st, tenant) = (state.clone(), feed.tenant);
            let read = tokio::task::spawn_blocking(move || {
                read_shared(&st, tenant, through, upto, &tails, retirements)
            })
            .await
            .map_err(|e| ApiError::internal(format!("a stream feed's read: {e}")))
            .and_then(|r| r);
            match read {
                Ok((entries, reached)) => {
                    let share = ALL_FEEDS_BYTES / count.load(Ordering::Relaxed).max(1);
                    push(&feed, entries, reached, retirements, share.min(FEED_BYTES));
                }
                Err(e) => {
                    tracing::error!(error = %e.message, "a stream feed's read failed; its tails read for themselves");
                    let mut w = feed.lock();
                    w.failed = true;
                    w.entries.clear();
                    let through = w.through;
                    drop(w);
                    feed.moved.send_replace(through);
                    return;
                }
            }
            continue;
        }
        tokio::select! {
            changed = head.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = stop.wait_for(|s| *s) => return,
            _ = feed.closing.notified() => {}
        }
    }
}

/// Adds what the follower read to the window and cuts the window to its bounds.
fn push(feed: &Feed, entries: Vec<Arc<Shared>>, reached: u64, retirements: u64, bytes_cap: usize) {
    let mut w = feed.lock();
    if w.closed {
        return;
    }
    // A key was retired since the window's entries were opened: they are of no use to anyone.
    if w.entries
        .front()
        .is_some_and(|e| e.retirements != retirements)
    {
        w.entries.clear();
        w.bytes = 0;
        w.start = w.through;
    }
    for e in entries {
        w.bytes += e.cost();
        w.entries.push_back(e);
    }
    w.through = reached;
    while w.entries.len() > FEED_ENTRIES || (w.bytes > bytes_cap && !w.entries.is_empty()) {
        if let Some(e) = w.entries.pop_front() {
            w.bytes -= e.cost();
            w.start = e.r.seq;
        }
    }
    let through = w.through;
    drop(w);
    feed.moved.send_replace(through);
}

/// The tenant's entries with `after < seq <= upto` (a batch of them), each rendered in every
/// form one of `tails` keeps it in; and how far that read.
fn read_shared(
    state: &AppState,
    tenant: Uuid,
    after: u64,
    upto: u64,
    tails: &[Filtering],
    retirements: u64,
) -> Result<(Vec<Arc<Shared>>, u64), ApiError> {
    let (refs, reached) = state
        .projections
        .audit
        .tenant_after(&tenant, after, upto, BATCH)?;
    let from: Vec<i64> = tails.iter().map(|f| f.earliest(state)).collect();
    let mut keys = KeyCache::new(&*state.projections.keys);
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        let mut wanted: Vec<Form> = Vec::new();
        for (f, from) in tails.iter().zip(&from) {
            let form = Form::of(f);
            if f.keeps(&r, *from) && !wanted.contains(&form) {
                wanted.push(form);
            }
        }
        let mut forms = Vec::with_capacity(wanted.len());
        if !wanted.is_empty() {
            let (entry, personal) = load_list_entry(state, &mut keys, r.seq)?;
            for form in wanted {
                let data = event_data(entry.clone(), personal, &r, form)?;
                forms.push((form, Bytes::from(data)));
            }
        }
        out.push(Arc::new(Shared {
            r,
            retirements,
            forms,
        }));
    }
    Ok((out, reached))
}
