//! The stream on NATS JetStream (`--log nats://...`, docs/SCALING.md): the [`LogStream`] the
//! service runs with.
//!
//! One stream holds the one global chain. A message is one group commit: its sealed records
//! back to back, exactly the bytes a chunk of the `log` tree holds (`record::pieces` splits
//! both). A node publishes with `Nats-Expected-Last-Sequence` = the last stream sequence it
//! folded, so a message lands only on the head its records were sealed on, and with
//! `Nats-Msg-Id` = the hex of its last record's hash, so a publish retried after a lost
//! acknowledgement is stored once. Every node follows the stream with an ordered consumer.
//! The turn signals go on a plain subject, `_AUDITMEM.<stream>.turns`, that nothing stores.
//!
//! The stream's first message is an empty genesis message: JetStream skips the
//! expected-last-sequence check when the expected value is 0, so without it two nodes could
//! both store a first group on an empty stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use futures_util::StreamExt;

use super::stream::{LogStream, Outgoing, PublishError, StreamError, StreamMessage};
use super::turns::TurnOrder;

/// The header naming the first and last log seq a message holds (for people reading the
/// stream; folding and verifying read the records themselves).
pub const FIRST_SEQ_HEADER: &str = "Auditmem-First-Seq";
pub const LAST_SEQ_HEADER: &str = "Auditmem-Last-Seq";
/// The header naming the node that published a message: the stream's own record of who wrote
/// when, from which every node derives the same turn order.
pub const NODE_HEADER: &str = "Auditmem-Node";
/// The genesis message's id: every node that finds the stream empty publishes it, and the
/// stream's duplicate window stores it once.
const GENESIS_ID: &str = "auditmem-genesis";
/// What a message's headers and protocol line may take of the server's `max_payload`.
const HEADER_ROOM: usize = 24 * 1024;

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

/// A connected JetStream context and the stream's names.
#[derive(Clone)]
pub struct NatsLog {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub config: NatsConfig,
    /// Whose turn it is to publish next, as this node hears it.
    turns: Arc<TurnOrder>,
}

/// The stream's messages in order from a given sequence (an ordered consumer: recreated by the
/// client after a server or leader change, never skipping or repeating a message).
pub type Feed = consumer::push::Ordered;

fn client_error(e: impl std::error::Error + Send + Sync + 'static) -> StreamError {
    StreamError::Client(Box::new(e))
}

impl NatsLog {
    /// Connects (retrying the initial connection until `timeout`), creates the stream if
    /// missing and makes sure it starts with the genesis message.
    pub async fn connect(config: NatsConfig) -> anyhow::Result<NatsLog> {
        let (client, js) = connect_jetstream(&config, "auditmem").await?;
        let turns = Arc::new(TurnOrder::new(client.new_inbox()));
        let mut subscription = client
            .subscribe(turns_subject(&config.stream))
            .await
            .map_err(|e| anyhow::anyhow!("subscribing to the turn signal: {e}"))?;
        let heard = turns.clone();
        tokio::spawn(async move {
            while let Some(m) = subscription.next().await {
                heard.heard(m.payload.as_ref());
            }
        });
        let log = NatsLog {
            client,
            js,
            config,
            turns,
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
}

impl LogStream for NatsLog {
    type Feed = Feed;

    fn turns(&self) -> &TurnOrder {
        &self.turns
    }

    /// The server's `max_payload` (1 MiB by default) less room for the headers, at least
    /// 64 KiB.
    fn max_message_bytes(&self) -> usize {
        self.client
            .server_info()
            .max_payload
            .saturating_sub(HEADER_ROOM)
            .max(64 * 1024)
    }

    async fn publish(&self, m: &Outgoing<'_>) -> Result<u64, PublishError> {
        let message = PublishMessage::build()
            .payload(m.payload.clone())
            .message_id(m.id)
            .expected_last_sequence(m.expected_last)
            .header(NODE_HEADER, self.turns.node())
            .header(FIRST_SEQ_HEADER, m.seqs.0.to_string().as_str())
            .header(LAST_SEQ_HEADER, m.seqs.1.to_string().as_str());
        let acked = async {
            self.js
                .send_publish(self.config.subject.clone(), message)
                .await?
                .await
        };
        match acked.await {
            Ok(ack) => Ok(ack.sequence),
            Err(e) => Err(match e.kind() {
                PublishErrorKind::WrongLastSequence => PublishError::WrongLastSequence,
                PublishErrorKind::MaxPayloadExceeded => PublishError::Refused(Box::new(e)),
                _ => PublishError::Unacknowledged(client_error(e)),
            }),
        }
    }

    async fn last_sequence(&self) -> Result<u64, StreamError> {
        let mut stream = self
            .js
            .get_stream(&self.config.stream)
            .await
            .map_err(client_error)?;
        let info = stream.info().await.map_err(client_error)?;
        Ok(info.state.last_sequence)
    }

    async fn follow(&self, from: u64) -> Result<Feed, StreamError> {
        let stream = self
            .js
            .get_stream(&self.config.stream)
            .await
            .map_err(client_error)?;
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
            .map_err(client_error)?;
        consumer.messages().await.map_err(client_error)
    }

    async fn next(&self, feed: &mut Feed) -> Option<Result<StreamMessage, StreamError>> {
        loop {
            let message = match feed.next().await? {
                Ok(m) => m,
                Err(e) => return Some(Err(client_error(e))),
            };
            let seq = match message.info() {
                Ok(info) => info.stream_sequence,
                Err(e) => {
                    tracing::warn!(error = %e, "a log stream message without its metadata");
                    continue;
                }
            };
            let publisher = message
                .headers
                .as_ref()
                .and_then(|h| h.get(NODE_HEADER))
                .map(|v| v.as_str().to_string());
            return Some(Ok(StreamMessage {
                seq,
                publisher,
                payload: message.message.payload,
            }));
        }
    }

    async fn say_idle(&self, idle: bool) {
        if let Some(signal) = self.turns.say(idle) {
            let _ = self
                .client
                .publish(turns_subject(&self.config.stream), signal.into())
                .await;
        }
    }
}

/// A client of `config`'s servers named `name` (retrying the initial connection, reconnecting
/// for ever) and its JetStream context, both bounded by `config.timeout`: the log's and the
/// key store's connections.
pub async fn connect_jetstream(
    config: &NatsConfig,
    name: &str,
) -> anyhow::Result<(async_nats::Client, jetstream::Context)> {
    let client = async_nats::ConnectOptions::new()
        .name(name)
        .retry_on_initial_connect()
        .connection_timeout(config.timeout)
        .max_reconnects(None)
        .connect(config.servers.clone())
        .await?;
    let js = jetstream::ContextBuilder::new()
        .timeout(config.timeout)
        .build(client.clone());
    Ok((client, js))
}

fn turns_subject(stream: &str) -> String {
    format!("_AUDITMEM.{stream}.turns")
}
