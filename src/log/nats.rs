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
    others_waiting_at: Arc<AtomicU64>,
}

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
        let others_waiting_at = Arc::new(AtomicU64::new(0));
        // Fairness, not correctness: a node that keeps winning the race for the stream's next
        // sequence (its next group is ready the moment its last is acknowledged) would starve
        // the others, whose retries always arrive one message late. A node that lost says so on
        // a plain (not stored) subject, and the others give it one turn (`YIELD`).
        let mut waiting = client
            .subscribe(waiting_subject(&config.stream))
            .await
            .map_err(|e| anyhow::anyhow!("subscribing to the waiting signal: {e}"))?;
        let (me, at) = (node.clone(), others_waiting_at.clone());
        tokio::spawn(async move {
            while let Some(m) = waiting.next().await {
                if m.payload.as_ref() != me.as_bytes() {
                    at.store(now_ms(), Ordering::Relaxed);
                }
            }
        });
        let log = NatsLog {
            client,
            js,
            config,
            node,
            others_waiting_at,
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

    /// Whether another node lost a race lately (and should get a turn).
    pub fn others_waiting(&self) -> bool {
        now_ms().saturating_sub(self.others_waiting_at.load(Ordering::Relaxed)) < WAITING_FRESH_MS
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
