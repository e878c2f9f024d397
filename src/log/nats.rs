//! The log of record on a NATS JetStream stream (`--log nats://...`, docs/SCALING.md).
//!
//! One stream holds the one global chain. A message is one group commit: its sealed records
//! back to back, exactly the bytes a chunk of the `log` tree holds (`record::pieces` splits
//! both). A node publishes with `Nats-Expected-Last-Sequence` = the last stream sequence it
//! folded, so a message lands only on the head its records were sealed on, and with
//! `Nats-Msg-Id` = the hex of its last record's hash, so a publish retried after a lost
//! acknowledgement is stored once. Every node follows the stream with an ordered consumer and
//! folds what others published into its own `log` tree (the mirror) and projections.
//!
//! The stream's first message is an empty genesis message: JetStream skips the
//! expected-last-sequence check when the expected value is 0, so without it two nodes could
//! both store a first group on an empty stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use futures_util::StreamExt;

/// The header naming the first and last log seq a message holds (for people reading the
/// stream; folding and verifying read the records themselves).
pub const FIRST_SEQ_HEADER: &str = "Auditmem-First-Seq";
pub const LAST_SEQ_HEADER: &str = "Auditmem-Last-Seq";
/// The genesis message's id: every node that finds the stream empty publishes it, and the
/// stream's duplicate window stores it once.
const GENESIS_ID: &str = "auditmem-genesis";
/// What a message's headers and protocol line may take of the server's `max_payload`.
const HEADER_ROOM: usize = 24 * 1024;
/// Pause between publish attempts while the cluster has no leader or no quorum.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Where the log lives in JetStream.
#[derive(Clone, Debug)]
pub struct NatsConfig {
    pub servers: Vec<String>,
    pub stream: String,
    pub subject: String,
    pub replicas: usize,
    /// How long a publish (retries included) or a catch-up may take before the write is
    /// answered 503.
    pub timeout: Duration,
}

/// The outcome of publishing one group.
#[derive(Debug)]
pub enum Published {
    /// Stored at this stream sequence (or found stored already: a retried publish).
    Stored(u64),
    /// The stream moved past the expected sequence: another node published first.
    Conflict,
    /// No acknowledgement within the deadline (no leader, no quorum, no connection): the
    /// message may still be stored later; folding will find it.
    Unavailable(String),
    /// JetStream refused the message for good (e.g. larger than the server's max_payload).
    Refused(String),
}

/// A connected JetStream context and the stream's names.
#[derive(Clone)]
pub struct NatsLog {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub config: NatsConfig,
    /// This process's name among the nodes (for the waiting signal).
    node: String,
    /// When another node last said it lost a race for the stream (ms since the epoch).
    others_waiting: Arc<Waiting>,
}

/// The other nodes' waiting signal as this node heard it: the time of the latest, or 0.
#[derive(Default)]
struct Waiting(AtomicU64);

impl Waiting {
    /// A message on the waiting subject, heard at `now`: another node's signal, or its `done`
    /// that clears it; this node's own are ignored.
    fn heard(&self, payload: &[u8], me: &str, now: u64) {
        if payload.starts_with(me.as_bytes()) {
            return;
        }
        let done = payload.ends_with(DONE_SUFFIX.as_bytes());
        self.0.store(if done { 0 } else { now }, Ordering::Relaxed);
    }

    /// The time of a signal still fresh at `now`.
    fn at(&self, now: u64) -> Option<u64> {
        let at = self.0.load(Ordering::Relaxed);
        (at > 0 && now.saturating_sub(at) < WAITING_FRESH_MS).then_some(at)
    }

    /// Clears the signal of time `at`, unless a newer one came in since.
    fn turn_given(&self, at: u64) {
        let _ = self
            .0
            .compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Ends the waiting signal of a node that got its turn (see [`NatsLog::say_done`]).
const DONE_SUFFIX: &str = " done";
/// How long a node that lost a race counts as waiting, ms.
const WAITING_FRESH_MS: u64 = 200;
/// How long a node that may publish at once gives a waiting node to publish first.
pub const YIELD: Duration = Duration::from_millis(25);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The stream's messages in order from a given sequence (an ordered consumer: recreated by the
/// client after a server or leader change, never skipping or repeating a message).
pub type Feed = consumer::push::Ordered;

impl NatsLog {
    /// Connects (retrying the initial connection until `timeout`), creates the stream if
    /// missing and makes sure it starts with the genesis message.
    pub async fn connect(config: NatsConfig) -> anyhow::Result<NatsLog> {
        let client = async_nats::ConnectOptions::new()
            .name("auditmem")
            .retry_on_initial_connect()
            .connection_timeout(config.timeout)
            .max_reconnects(None)
            .connect(config.servers.clone())
            .await?;
        let js = jetstream::ContextBuilder::new()
            .timeout(config.timeout)
            .build(client.clone());
        let node = client.new_inbox();
        let others_waiting = Arc::new(Waiting::default());
        // Fairness, not correctness: a node that keeps winning the race for the stream's next
        // sequence (its next group is ready the moment its last is acknowledged) would starve
        // the others, whose retries always arrive one message late. A node that lost says so on
        // a plain (not stored) subject, and the others give it one turn (`YIELD`).
        let mut waiting = client
            .subscribe(waiting_subject(&config.stream))
            .await
            .map_err(|e| anyhow::anyhow!("subscribing to the waiting signal: {e}"))?;
        let (me, heard) = (node.clone(), others_waiting.clone());
        tokio::spawn(async move {
            while let Some(m) = waiting.next().await {
                heard.heard(m.payload.as_ref(), &me, now_ms());
            }
        });
        let log = NatsLog {
            client,
            js,
            config,
            node,
            others_waiting,
        };
        log.ensure_stream().await?;
        Ok(log)
    }

    /// Retried until a deadline: right after the servers start there may be no JetStream meta
    /// leader to create the stream, then no stream leader to store the genesis message.
    async fn ensure_stream(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.config.timeout.max(Duration::from_secs(30));
        loop {
            match self.try_ensure_stream().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() < deadline => {
                    tracing::info!(error = %e, "waiting for JetStream to hold the log stream");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    return Err(e.context(format!("the JetStream stream {}", self.config.stream)))
                }
            }
        }
    }

    async fn try_ensure_stream(&self) -> anyhow::Result<()> {
        let mut stream = self
            .js
            .get_or_create_stream(stream::Config {
                name: self.config.stream.clone(),
                subjects: vec![self.config.subject.clone()],
                num_replicas: self.config.replicas,
                storage: stream::StorageType::File,
                retention: stream::RetentionPolicy::Limits,
                discard: stream::DiscardPolicy::New,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await?;
        if stream.info().await?.state.last_sequence > 0 {
            return Ok(());
        }
        let ack = self
            .js
            .send_publish(
                self.config.subject.clone(),
                PublishMessage::build()
                    .payload(Default::default())
                    .message_id(GENESIS_ID),
            )
            .await?
            .await?;
        if ack.sequence != 1 {
            anyhow::bail!(
                "the log stream was empty yet its first message landed at {}",
                ack.sequence
            );
        }
        Ok(())
    }

    /// The most record bytes one message may carry: the server's `max_payload` (1 MiB by
    /// default) less room for the headers, at least 64 KiB.
    pub fn max_message_bytes(&self) -> usize {
        self.client
            .server_info()
            .max_payload
            .saturating_sub(HEADER_ROOM)
            .max(64 * 1024)
    }

    /// Tells the other nodes this one lost a race for the stream's next sequence.
    pub async fn say_waiting(&self) {
        let _ = self
            .client
            .publish(
                waiting_subject(&self.config.stream),
                bytes::Bytes::from(self.node.clone()),
            )
            .await;
    }

    /// This node, having lost a race, has now published: the others stop giving it turns (else
    /// each would wait up to [`YIELD`] for a message it no longer has to send).
    pub async fn say_done(&self) {
        let _ = self
            .client
            .publish(
                waiting_subject(&self.config.stream),
                bytes::Bytes::from(format!("{}{DONE_SUFFIX}", self.node)),
            )
            .await;
    }

    /// Whether another node lost a race lately and should get a turn; a signal answers yes
    /// once ([`Waiting::turn_given`]): a node that lost the race holds one group and publishes
    /// it on its next try, so yielding again for the same signal would only wait out
    /// [`YIELD`] (a ~25 ms stall of every write for 200 ms after each lost race).
    pub fn take_waiting_turn(&self) -> bool {
        let Some(at) = self.others_waiting.at(now_ms()) else {
            return false;
        };
        self.others_waiting.turn_given(at);
        true
    }

    /// The stream's last sequence.
    pub async fn last_sequence(&self) -> Result<u64, String> {
        let mut stream = self
            .js
            .get_stream(&self.config.stream)
            .await
            .map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        Ok(info.state.last_sequence)
    }

    /// The stream's messages from sequence `from` on.
    pub async fn follow(&self, from: u64) -> Result<Feed, String> {
        let stream = self
            .js
            .get_stream(&self.config.stream)
            .await
            .map_err(|e| e.to_string())?;
        let deliver_policy = if from <= 1 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: from,
            }
        };
        let consumer = stream
            .create_consumer(consumer::push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                filter_subject: self.config.subject.clone(),
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        consumer.messages().await.map_err(|e| e.to_string())
    }

    /// Publishes one group's records sealed on stream sequence `expected`, retrying the same
    /// message (same id, same expectation) until acknowledged or `deadline`.
    pub async fn publish(
        &self,
        payload: Vec<u8>,
        seqs: (u64, u64),
        last_hash: &[u8; 32],
        expected: u64,
        deadline: Instant,
    ) -> Published {
        let payload = bytes::Bytes::from(payload);
        let id = hex::encode(last_hash);
        loop {
            let message = PublishMessage::build()
                .payload(payload.clone())
                .message_id(&id)
                .expected_last_sequence(expected)
                .header(FIRST_SEQ_HEADER, seqs.0.to_string().as_str())
                .header(LAST_SEQ_HEADER, seqs.1.to_string().as_str());
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = async {
                self.js
                    .send_publish(self.config.subject.clone(), message)
                    .await?
                    .await
            };
            let last_error = match tokio::time::timeout(left, attempt).await {
                Ok(Ok(ack)) => return Published::Stored(ack.sequence),
                Ok(Err(e)) => match e.kind() {
                    PublishErrorKind::WrongLastSequence => return Published::Conflict,
                    PublishErrorKind::MaxPayloadExceeded => {
                        return Published::Refused(e.to_string())
                    }
                    _ => e.to_string(),
                },
                Err(_) => "no acknowledgement".to_string(),
            };
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Published::Unavailable(last_error);
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

fn waiting_subject(stream: &str) -> String {
    format!("_AUDITMEM.{stream}.waiting")
}

/// The next message of `feed`, or `None` when it ended.
pub async fn next_message(feed: &mut Feed) -> Option<Result<jetstream::Message, String>> {
    feed.next().await.map(|r| r.map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_signal_buys_one_turn_and_ends_when_its_node_published() {
        let w = Waiting::default();
        assert_eq!(w.at(1_000), None);
        // This node's own signal and its own `done` are not the others'.
        w.heard(b"_INBOX.me", "_INBOX.me", 1_000);
        assert_eq!(w.at(1_000), None);
        // Another node's signal is fresh for WAITING_FRESH_MS.
        w.heard(b"_INBOX.other", "_INBOX.me", 1_000);
        assert_eq!(w.at(1_000 + WAITING_FRESH_MS - 1), Some(1_000));
        assert_eq!(w.at(1_000 + WAITING_FRESH_MS), None);
        // Given its turn once, it asks for no more.
        w.turn_given(1_000);
        assert_eq!(w.at(1_001), None);
        // A turn given for an older signal leaves a newer one.
        w.heard(b"_INBOX.other", "_INBOX.me", 1_050);
        w.turn_given(1_000);
        assert_eq!(w.at(1_060), Some(1_050));
        // The waiting node said it published: nobody waits for it.
        w.heard(b"_INBOX.other done", "_INBOX.me", 1_070);
        assert_eq!(w.at(1_071), None);
    }
}
