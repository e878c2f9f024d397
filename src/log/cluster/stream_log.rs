//! The stream as the writer's log of record: publishing a sealed group on the head it was
//! sealed on, folding what the other nodes publish, waiting for this node's turn, catching up
//! after a lost race.
//!
//! Everything here runs inside the writer's future on the writer's thread (see the appender's
//! module documentation); the stream's requests are awaited there, each within a deadline.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::fold;
use super::mirror::Mirror;
use super::stream::{LogStream, Outgoing, PublishError, StreamError, StreamMessage};
use super::turns::{Turn, TURN_WAIT};
use crate::log::appender::{Chain, Failure, LogOfRecord, Msg, Sealed, StoreError, Stored};

/// How long an idle writer waits before checking that its feed has not stalled.
const FEED_CHECK: Duration = Duration::from_secs(2);
/// Pause between publish attempts while the cluster has no leader or no quorum.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Pause before following the stream again when it cannot be followed.
const FOLLOW_PAUSE: Duration = Duration::from_millis(250);
/// The shortest wait a group gets for the stream, however long it queued.
const MIN_WAIT: Duration = Duration::from_millis(250);

/// Why a write or a fold on the cluster failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No acknowledgement before the deadline, retries included.
    #[error("the log cluster did not acknowledge the write in time ({0}); it was not acknowledged and may still land once the cluster recovers")]
    Unacknowledged(#[source] StreamError),
    /// After a lost race, what the stream holds could not be folded before the deadline.
    #[error("the log cluster did not acknowledge the write in time ({0}); it was not acknowledged and may still land once the cluster recovers")]
    Behind(#[source] CatchUpError),
    /// The stream stored this node's message elsewhere than the sequence it was sealed for: it
    /// holds a message this node has not folded.
    #[error("the stream stored this node's message at {stored}, expected {expected}")]
    Misplaced { stored: u64, expected: u64 },
    #[error("mirror write failed: {0}")]
    Mirror(#[source] sled::Error),
    #[error("the log stream does not continue this node's chain: {0}")]
    Diverged(#[source] fold::FoldError),
}

/// Why the stream could not be folded up to its last sequence.
#[derive(Debug, thiserror::Error)]
pub enum CatchUpError {
    #[error("no answer for the stream's state")]
    NoState,
    #[error("{0}")]
    State(#[source] StreamError),
    #[error("cannot follow the log stream")]
    NoFeed,
    #[error("the stream's messages up to {0} did not arrive")]
    Missing(u64),
}

/// The cluster's log of record over a stream `S`.
pub(crate) struct StreamLog<S: LogStream> {
    stream: S,
    /// The stream from the message after the mirror's position on; `None` until (re)created.
    feed: Option<S::Feed>,
    mirror: Mirror,
    /// How long a write waits for the stream (`--nats-timeout-ms`).
    timeout: Duration,
}

/// What the writer waiting for its queue got first.
enum Next<M> {
    /// A message of the feed (`None`: the feed ended).
    Fed(Option<Result<M, StreamError>>),
    /// There is no feed (the stream cannot be followed now).
    NoFeed,
    /// A message of the writer's queue (`None`: it closed).
    Queued(Option<Msg>),
    /// Nothing for [`FEED_CHECK`].
    Quiet,
}

impl<S: LogStream> StreamLog<S> {
    pub(crate) fn new(stream: S, mirror: Mirror, timeout: Duration) -> Self {
        StreamLog {
            stream,
            feed: None,
            mirror,
            timeout,
        }
    }

    /// (Re)creates the feed from the message after the mirror's position (nothing is skipped
    /// or folded twice).
    async fn ensure_feed(&mut self) {
        if self.feed.is_some() {
            return;
        }
        let from = self.mirror.position() + 1;
        match tokio::time::timeout(self.timeout, self.stream.follow(from)).await {
            Ok(Ok(feed)) => self.feed = Some(feed),
            Ok(Err(e)) => tracing::warn!(error = %e, from, "cannot follow the log stream yet"),
            Err(_) => tracing::warn!(from, "cannot follow the log stream yet: no answer in time"),
        }
    }

    /// After [`FEED_CHECK`] without a message or a submission: if the stream holds messages the
    /// feed has not delivered, the feed stalled (seen after a loss of quorum); follow it anew.
    async fn check_feed(&mut self) {
        let last = tokio::time::timeout(self.timeout, self.stream.last_sequence()).await;
        if let Ok(Ok(last)) = last {
            if last > self.mirror.position() {
                tracing::warn!(
                    stream_last = last,
                    folded = self.mirror.position(),
                    "the log stream's feed stalled; following it anew"
                );
                self.feed = None;
            }
        }
    }

    /// Folds a message of the stream into the mirror and the chain, unless this node folded it
    /// already (its own, acknowledged). A message that does not continue the chain stops every
    /// write (the chain fails).
    fn fold(&mut self, message: StreamMessage, chain: &mut Chain) {
        if message.seq <= self.mirror.position() || chain.failed() {
            return;
        }
        if let Err(why) = self.fold_records(&message, chain) {
            tracing::error!(error = %why, stream_seq = message.seq, "folding the log stream failed; the appender refuses further writes");
            chain.fail(why);
            return;
        }
        self.stream
            .turns()
            .published(message.seq, message.publisher.as_deref());
    }

    fn fold_records(&mut self, message: &StreamMessage, chain: &mut Chain) -> Result<(), Failure> {
        let folding = fold::fold(
            message.seq,
            &message.payload,
            chain.head(),
            self.mirror.log(),
        )
        .map_err(|e| Failure::log(ClusterError::Diverged(e)))?;
        self.mirror
            .write(folding.chunks.finish(), message.seq)
            .map_err(|e| Failure::log(ClusterError::Mirror(e)))?;
        chain.extend(folding.records)
    }

    /// While the turn to publish is another node's, folds what arrives, until the turn is this
    /// node's or open, that node says it is idle, or [`TURN_WAIT`] (or `deadline`) ran out:
    /// then this node publishes anyway and at worst loses one race.
    async fn await_turn(&mut self, chain: &mut Chain, deadline: Instant) {
        let until = (Instant::now() + TURN_WAIT).min(deadline);
        let mut signals = self.stream.turns().signals();
        loop {
            if self.stream.turns().turn() != Turn::Theirs {
                return;
            }
            self.ensure_feed().await;
            let left = until.saturating_duration_since(Instant::now());
            let stream = &self.stream;
            let Some(feed) = self.feed.as_mut() else {
                return;
            };
            if left.is_zero() {
                metrics::counter!("auditmem_cluster_turn_waits_expired_total").increment(1);
                return;
            }
            let next = tokio::select! {
                m = tokio::time::timeout(left, stream.next(feed)) => Some(m),
                // Another node said it is idle or busy: whose turn it is may have changed.
                _ = signals.changed() => None,
            };
            match next {
                None | Some(Ok(Some(Err(_)))) => {}
                Some(Ok(Some(Ok(message)))) => self.fold(message, chain),
                Some(Ok(None)) => self.feed = None,
                Some(Err(_)) => {
                    metrics::counter!("auditmem_cluster_turn_waits_expired_total").increment(1);
                    return;
                }
            }
        }
    }

    /// Folds the stream up to its last sequence, or fails at `deadline`.
    async fn catch_up(&mut self, chain: &mut Chain, deadline: Instant) -> Result<(), CatchUpError> {
        let left = deadline.saturating_duration_since(Instant::now());
        let last = tokio::time::timeout(left, self.stream.last_sequence())
            .await
            .map_err(|_| CatchUpError::NoState)?
            .map_err(CatchUpError::State)?;
        loop {
            if self.mirror.position() >= last || chain.failed() {
                return Ok(());
            }
            self.ensure_feed().await;
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(feed) = self.feed.as_mut() else {
                if left.is_zero() {
                    return Err(CatchUpError::NoFeed);
                }
                tokio::time::sleep(Duration::from_millis(100).min(left)).await;
                continue;
            };
            match tokio::time::timeout(left, self.stream.next(feed)).await {
                Err(_) => {
                    // A consumer that went quiet across a loss of quorum may never resume:
                    // the next attempt follows the stream anew from the mirror's position.
                    self.feed = None;
                    return Err(CatchUpError::Missing(last));
                }
                Ok(Some(Ok(message))) => self.fold(message, chain),
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "following the log stream; following it anew");
                    self.feed = None;
                }
                Ok(None) => self.feed = None,
            }
        }
    }

    /// Publishes `message`, retrying the same message (same id, same expectation) until it is
    /// acknowledged, refused, or `deadline`.
    async fn publish(
        &self,
        message: &Outgoing<'_>,
        deadline: Instant,
    ) -> Result<u64, PublishError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let error = match tokio::time::timeout(left, self.stream.publish(message)).await {
                Ok(Ok(stream_seq)) => return Ok(stream_seq),
                Ok(Err(PublishError::Unacknowledged(e))) => e,
                Ok(Err(e)) => return Err(e),
                Err(_) => StreamError::NoAnswer,
            };
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Err(PublishError::Unacknowledged(error));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    fn unavailable(why: ClusterError, submissions: usize) -> ClusterError {
        metrics::counter!("auditmem_cluster_unavailable_total").increment(submissions as u64);
        tracing::warn!(error = %why, "the log cluster did not acknowledge a write");
        why
    }
}

impl<S: LogStream> LogOfRecord for StreamLog<S> {
    /// Takes whichever comes first: a message another node published (folded into the mirror)
    /// or a submission. For a submission, waits for this node's turn before the writer gathers
    /// its group: what arrives meanwhile joins this group rather than waiting a whole round.
    async fn next(&mut self, queue: &mut mpsc::Receiver<Msg>, chain: &mut Chain) -> Option<Msg> {
        loop {
            self.ensure_feed().await;
            let next = {
                let stream = &self.stream;
                let feed = self.feed.as_mut();
                tokio::select! {
                    biased;
                    m = async {
                        match feed {
                            Some(f) => Next::Fed(stream.next(f).await),
                            None => {
                                tokio::time::sleep(FOLLOW_PAUSE).await;
                                Next::NoFeed
                            }
                        }
                    } => m,
                    m = queue.recv() => Next::Queued(m),
                    _ = tokio::time::sleep(FEED_CHECK) => Next::Quiet,
                }
            };
            match next {
                Next::Fed(Some(Ok(message))) => self.fold(message, chain),
                Next::Fed(Some(Err(e))) => {
                    tracing::warn!(error = %e, "following the log stream; following it anew");
                    self.feed = None;
                }
                Next::Fed(None) => self.feed = None,
                Next::NoFeed => {}
                Next::Quiet => self.check_feed().await,
                Next::Queued(None) => return None,
                Next::Queued(Some(m)) => {
                    if let Some(at) = m.submitted_at() {
                        self.stream.say_idle(false).await;
                        self.await_turn(chain, at + self.timeout).await;
                    }
                    return Some(m);
                }
            }
        }
    }

    fn max_group_bytes(&self) -> usize {
        self.stream.max_message_bytes()
    }

    /// From the oldest submission's arrival, `--nats-timeout-ms`; at least one short attempt.
    fn deadline(&self, oldest: Instant) -> Instant {
        (oldest + self.timeout).max(Instant::now() + MIN_WAIT)
    }

    async fn ready(&mut self, chain: &mut Chain, deadline: Instant) {
        self.await_turn(chain, deadline).await;
    }

    /// Publishes the group as one message expecting the mirror's position as the stream's last
    /// sequence. Only an acknowledged message is mirrored; after a lost race, folds what the
    /// stream holds, which may be this very group (an earlier attempt that was stored).
    async fn store(
        &mut self,
        sealed: &mut Sealed,
        chain: &mut Chain,
        deadline: Instant,
    ) -> Result<Stored, StoreError> {
        // The message is only published; a retry after a lost race seals anew.
        let values = std::mem::take(&mut sealed.chunks).finish();
        let mut payload = Vec::with_capacity(values.iter().map(|(_, v)| v.len()).sum());
        for (_, v) in &values {
            payload.extend_from_slice(v);
        }
        let expected = self.mirror.position();
        let id = hex::encode(sealed.head.hash);
        let message = Outgoing {
            payload: payload.into(),
            id: &id,
            expected_last: expected,
            seqs: sealed.seqs(),
        };
        let started = Instant::now();
        let published = self.publish(&message, deadline).await;
        let micros = started.elapsed().as_micros() as u64;
        let submissions = sealed.outcomes.len();
        match published {
            Ok(stream_seq) if stream_seq != expected + 1 => {
                // Nothing is answered from a head that may be wrong; folding will find out.
                Err(StoreError::Failed(Failure::log(ClusterError::Misplaced {
                    stored: stream_seq,
                    expected: expected + 1,
                })))
            }
            Ok(stream_seq) => {
                self.mirror
                    .write(values, stream_seq)
                    .map_err(|e| StoreError::Failed(Failure::log(ClusterError::Mirror(e))))?;
                metrics::histogram!("auditmem_cluster_publish_seconds").record(micros as f64 / 1e6);
                self.stream.turns().stored_mine(stream_seq);
                Ok(Stored::Appended { micros })
            }
            Err(PublishError::WrongLastSequence) => {
                metrics::counter!("auditmem_cluster_publish_conflicts_total").increment(1);
                if let Err(e) = self.catch_up(chain, deadline).await {
                    let why = Self::unavailable(ClusterError::Behind(e), submissions);
                    return Err(StoreError::Behind(Box::new(why)));
                }
                if !chain.failed() && self.mirror.holds(&sealed.head, chain.head()) {
                    // A retried publish whose first attempt was stored after all: folded as if
                    // another node's; only the answers are left.
                    return Ok(Stored::Found);
                }
                Err(StoreError::Moved)
            }
            Err(PublishError::Unacknowledged(e)) => {
                let why = Self::unavailable(ClusterError::Unacknowledged(e), submissions);
                Err(StoreError::Unacknowledged(Box::new(why)))
            }
            Err(PublishError::Refused(e)) => Err(StoreError::Refused(e)),
        }
    }

    async fn idle(&mut self) {
        self.stream.say_idle(true).await;
    }

    fn close(&mut self) {
        self.mirror.flush();
    }
}
