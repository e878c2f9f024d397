//! The writer: the one thread that seals records on the chain's head.
//!
//! It takes what is queued (up to a bounded group), checks each submission's precondition with
//! everything before it applied, seals the group on the head in one timestamp, has the log of
//! record store it ([`LogOfRecord::store`]) and hands the stored group to the applier. When the
//! log moved under the group (another writer stored first: [`StoreError::Moved`]), it checks
//! the group's precondition again on the new head, seals anew and stores again. It knows
//! nothing of where the records are of record.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use auditmem_projections::{Event, Projections};
use tokio::sync::mpsc;

use super::applier::ApplyJob;
use super::seam::{Chain, Failure, LogOfRecord, Sealed, StoreError, Stored};
use super::{AppendError, Committed, Msg, SpaceGuard, Submission};
use crate::log::record::Chunker;
use crate::log::Head;

/// How many events one group commit takes at most.
const MAX_GROUP_EVENTS: usize = 4096;

/// The bytes a record adds to its event's: seq, time and hashes (~90).
const RECORD_OVERHEAD: usize = 96;

pub(super) struct Writer<L> {
    log: L,
    chain: Chain,
    projections: Arc<Projections>,
    space: SpaceGuard,
}

impl<L: LogOfRecord> Writer<L> {
    pub(super) fn new(
        log: L,
        chain: Chain,
        projections: Arc<Projections>,
        space: SpaceGuard,
    ) -> Self {
        Writer {
            log,
            chain,
            projections,
            space,
        }
    }

    /// Until the queue closes or a stop: each time the log is ready, a group.
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        while let Some(first) = self.log.next(&mut rx, &mut self.chain).await {
            if self.take(first, &mut rx).await {
                break;
            }
            if rx.is_empty() {
                self.log.idle().await;
            }
        }
        self.log.close();
    }

    /// Commits `first` and what is queued after it; on a stop, everything queued. Whether the
    /// writer stops.
    async fn take(&mut self, first: Msg, rx: &mut mpsc::Receiver<Msg>) -> bool {
        let (group, stopping) = gather(first, rx);
        self.process(group).await;
        if stopping {
            self.drain(rx).await;
        }
        stopping
    }

    /// After a stop: commits what is still queued, one submission at a time.
    async fn drain(&mut self, rx: &mut mpsc::Receiver<Msg>) {
        rx.close();
        while let Ok(m) = rx.try_recv() {
            if let Msg::Append(s) = m {
                self.process(vec![s]).await;
            }
        }
    }

    /// Commits a group, evaluating preconditions with everything before them applied.
    async fn process(&mut self, group: Vec<Submission>) {
        let mut pending: Vec<Submission> = Vec::new();
        for s in group {
            if let Some(check) = &s.check {
                self.commit(std::mem::take(&mut pending)).await;
                self.wait_applied();
                if let Some(why) = &self.chain.failed {
                    let why = why.to_string();
                    s.answer(Err(AppendError::Storage(why)));
                    continue;
                }
                if let Err(r) = check(&self.projections) {
                    s.answer(Err(AppendError::Rejected(r)));
                    continue;
                }
            }
            pending.push(s);
        }
        self.commit(pending).await;
    }

    /// Blocks until the applier has folded everything written so far.
    fn wait_applied(&mut self) {
        let target = self.chain.head.seq;
        let progress = self.chain.progress.clone();
        let mut seq = progress.seq.lock().unwrap_or_else(|p| p.into_inner());
        while *seq < target {
            seq = progress.moved.wait(seq).unwrap_or_else(|p| p.into_inner());
        }
        drop(seq);
        if let Some(why) = progress.failure() {
            self.chain.failed.get_or_insert(why);
        }
    }

    /// The failure every write is refused for, the applier's included.
    fn failure(&mut self) -> Option<Failure> {
        if self.chain.failed.is_none() {
            self.chain.failed = self.chain.progress.failure();
        }
        self.chain.failed.clone()
    }

    /// Stores a group, in parts of whole submissions within what the log takes at once.
    async fn commit(&mut self, group: Vec<Submission>) {
        if group.is_empty() {
            return;
        }
        if let Some(why) = self.failure() {
            return answer_all(group, || AppendError::Storage(why.to_string()));
        }
        if let Err(why) = self.space.check() {
            metrics::counter!("auditmem_appender_refused_total").increment(group.len() as u64);
            tracing::warn!(reason = %why, "append refused before writing");
            return answer_all(group, || AppendError::NoSpace(why.clone()));
        }
        let max = self.log.max_group_bytes();
        let mut part = Vec::new();
        let mut bytes = 0usize;
        for s in group {
            let size: usize = s
                .events
                .iter()
                .map(|(_, b, _)| b.len() + RECORD_OVERHEAD)
                .sum();
            if !part.is_empty() && bytes.saturating_add(size) > max {
                self.store(std::mem::take(&mut part)).await;
                bytes = 0;
            }
            bytes = bytes.saturating_add(size);
            part.push(s);
        }
        self.store(part).await;
    }

    /// Seals `group` on the head and has the log of record store it; when the log moved under
    /// it, checks its precondition again on the new head and tries again.
    async fn store(&mut self, mut group: Vec<Submission>) {
        // From the oldest submission's arrival, so that a write queued behind a group that
        // waited for the log is not kept twice as long.
        let oldest = group
            .iter()
            .map(|s| s.at)
            .min()
            .unwrap_or_else(Instant::now);
        let deadline = self.log.deadline(oldest);
        // The group's precondition (only its first submission can have one, see `process`)
        // was evaluated on this head.
        let mut checked_at = self.chain.head.seq;
        loop {
            if group.is_empty() {
                return;
            }
            self.log.ready(&mut self.chain, deadline).await;
            if let Some(why) = self.failure() {
                return answer_all(group, || AppendError::Storage(why.to_string()));
            }
            // Records other writers stored since (folded while waiting to be ready, or after
            // the log moved) may have changed what the precondition decides (credits, one
            // export at a time: 2203): evaluate it again on the head the group is sealed on.
            if self.chain.head.seq != checked_at {
                checked_at = self.chain.head.seq;
                if let Some(check) = group.first().and_then(|s| s.check.as_ref()) {
                    self.wait_applied();
                    if let Err(r) = check(&self.projections) {
                        group.remove(0).answer(Err(AppendError::Rejected(r)));
                        continue;
                    }
                }
            }
            let mut sealed = self.seal(&group);
            match self.log.store(&mut sealed, &mut self.chain, deadline).await {
                Ok(Stored::Appended { micros }) => {
                    self.chain
                        .stats
                        .cluster_down
                        .store(false, Ordering::Relaxed);
                    return self.committed(group, sealed, micros);
                }
                Ok(Stored::Found) => return self.answer_found(group, sealed.outcomes),
                Err(StoreError::Moved) => {
                    if let Some(why) = self.failure() {
                        return answer_all(group, || AppendError::Storage(why.to_string()));
                    }
                }
                Err(StoreError::Unacknowledged(why)) => {
                    self.chain.stats.cluster_down.store(true, Ordering::Relaxed);
                    let why = why.to_string();
                    return answer_all(group, || AppendError::ClusterUnavailable(why.clone()));
                }
                Err(StoreError::Behind(why)) => {
                    let why = why.to_string();
                    return answer_all(group, || AppendError::ClusterUnavailable(why.clone()));
                }
                Err(StoreError::Refused(why)) => {
                    let why = why.to_string();
                    return answer_all(group, || AppendError::Storage(why.clone()));
                }
                Err(StoreError::Failed(why)) => {
                    // Stored or not, nothing more can be sealed safely on top of an unknown
                    // head: refuse writes until a restart re-reads it.
                    tracing::error!(error = %why, "the log of record failed; the appender refuses further writes");
                    return self.fail(why, group);
                }
            }
        }
    }

    /// Seals `group` on the current head, one timestamp for all of it.
    fn seal(&self, group: &[Submission]) -> Sealed {
        let ts = now_micros().max(self.chain.last_ts);
        let mut seq = self.chain.head.seq;
        let mut prev = self.chain.head.hash;
        let mut outcomes = Vec::with_capacity(group.len());
        let mut count = 0usize;
        let (records, event_bytes) = group
            .iter()
            .flat_map(|s| &s.events)
            .fold((0, 0), |(n, b), (_, bytes, _)| (n + 1, b + bytes.len()));
        let mut chunks = Chunker::expecting(records, event_bytes);
        let mut leaves = Vec::with_capacity(records);
        for s in group {
            let first = seq + 1;
            for (_, bytes, _) in &s.events {
                seq += 1;
                let hash = chunks.seal(seq, ts, &prev, bytes);
                prev = hash;
                leaves.push(hash);
                count += 1;
            }
            outcomes.push(Committed {
                first_seq: first,
                last_seq: seq,
                ts_micros: ts,
            });
        }
        let erasure = group.iter().any(|s| {
            s.events
                .iter()
                .any(|(e, _, _)| matches!(e, Event::SubjectsErased(_)))
        });
        Sealed {
            outcomes,
            chunks,
            head: Head { seq, hash: prev },
            ts,
            count,
            leaves,
            erasure,
        }
    }

    /// A stored group: the head moves, and the applier folds it and answers its callers.
    fn committed(&mut self, group: Vec<Submission>, sealed: Sealed, micros: u64) {
        let Sealed {
            outcomes,
            head,
            ts,
            count,
            leaves,
            ..
        } = sealed;
        self.chain.head = head;
        self.chain.last_ts = self.chain.last_ts.max(ts);
        metrics::histogram!("auditmem_appender_group_events").record(count as f64);
        metrics::histogram!("auditmem_appender_sync_seconds").record(micros as f64 / 1e6);
        metrics::counter!("auditmem_appender_events_total").increment(count as u64);
        let stats = &self.chain.stats;
        stats.groups.fetch_add(1, Ordering::Relaxed);
        stats.events.fetch_add(count as u64, Ordering::Relaxed);
        stats
            .last_group_events
            .store(count as u64, Ordering::Relaxed);
        stats.sync_micros_total.fetch_add(micros, Ordering::Relaxed);
        stats.last_sync_micros.store(micros, Ordering::Relaxed);
        self.hand_to_applier(group, outcomes, leaves);
    }

    /// Answers a group found in the log of record, once the applier has folded the log's copy.
    fn answer_found(&mut self, mut group: Vec<Submission>, outcomes: Vec<Committed>) {
        for s in &mut group {
            // Folded already from the log's copy: only the answers are left.
            s.events.clear();
        }
        self.hand_to_applier(group, outcomes, Vec::new());
    }

    /// Hands a stored group to the applier, which folds it and answers its callers; those
    /// who asked to hear once it is stored ([`Appender::append_read`]) hear now.
    fn hand_to_applier(
        &mut self,
        mut group: Vec<Submission>,
        outcomes: Vec<Committed>,
        leaves: Vec<[u8; 32]>,
    ) {
        for (s, outcome) in group.iter_mut().zip(&outcomes) {
            if s.early {
                if let Some(reply) = s.reply.take() {
                    // The applier still folds the events: they are freed there.
                    let _ = reply.send((Ok(*outcome), Vec::new()));
                }
            }
        }
        let job = ApplyJob {
            group,
            outcomes,
            head: self.chain.head,
            leaves,
        };
        if let Err(job) = self.chain.hand(job) {
            // The applier is gone (it only stops with us): the group is stored but cannot be
            // applied in this process; the next start catches the projections up.
            self.fail(Failure::ApplierStopped, job.group);
        }
    }

    fn fail(&mut self, why: Failure, group: Vec<Submission>) {
        let text = why.to_string();
        self.chain.fail(why);
        answer_all(group, || AppendError::Storage(text.clone()));
    }
}

fn answer_all(group: Vec<Submission>, error: impl Fn() -> AppendError) {
    for s in group {
        s.answer(Err(error()));
    }
}

fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Takes `first` and what is already queued after it, bounded (everything on stop).
fn gather(first: Msg, rx: &mut mpsc::Receiver<Msg>) -> (Vec<Submission>, bool) {
    let mut stopping = false;
    let mut group = Vec::new();
    let mut n = 0;
    match first {
        Msg::Stop => stopping = true,
        Msg::Append(s) => {
            n += s.events.len();
            group.push(s);
        }
    }
    while stopping || n < MAX_GROUP_EVENTS {
        match rx.try_recv() {
            Ok(Msg::Append(s)) => {
                n += s.events.len();
                group.push(s);
            }
            Ok(Msg::Stop) => stopping = true,
            Err(_) => break,
        }
        if n >= MAX_GROUP_EVENTS && !stopping {
            break;
        }
    }
    (group, stopping)
}
