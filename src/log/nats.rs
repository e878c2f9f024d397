//! The log of record on a NATS JetStream stream (`--log nats://...`, docs/SCALING.md).
//!
//! One stream holds the one global chain. A message is one group commit: its sealed records
//! back to back, exactly the bytes a chunk of the `log` tree holds (`record::pieces` splits
//! both). A node publishes with `Nats-Expected-Last-Sequence` = the last stream sequence it
//! folded, so a message lands only on the head its records were sealed on, and with
//! `Nats-Msg-Id` = the hex of its last record's hash, so a publish retried after a lost
//! acknowledgement is stored once. Every node follows the stream with an ordered consumer and
//! folds what others published into its own `log` tree (the mirror) and projections. The nodes
//! take turns at publishing ([`Turns`]), so under load they do not race for each sequence.
//!
//! The stream's first message is an empty genesis message: JetStream skips the
//! expected-last-sequence check when the expected value is 0, so without it two nodes could
//! both store a first group on an empty stream.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use futures_util::StreamExt;
use tokio::sync::watch;

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
    /// This process's name among the nodes (the `Auditmem-Node` header of what it publishes).
    node: String,
    /// Whose turn it is to publish next, as this node sees the stream.
    turns: Arc<Turns>,
    /// Moves whenever another node says it is idle or busy, so a node waiting for its turn
    /// looks again.
    heard: watch::Sender<u64>,
    /// Whether this node last said it is idle.
    said_idle: Arc<AtomicBool>,
}

/// The header naming the node that published a message: the stream's own record of who wrote
/// when, from which every node derives the same turn order.
pub const NODE_HEADER: &str = "Auditmem-Node";
/// How long a node counts as publishing after its last message, ms.
const ACTIVE_MS: u64 = 500;
/// How long a node with something to publish waits for the node whose turn it is before it
/// publishes anyway (racing for the sequence, as when nodes disagree on the turn).
pub const TURN_WAIT: Duration = Duration::from_millis(50);

/// Whose turn it is to publish on the stream's next sequence.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// This node's: publish now.
    Mine,
    /// Nobody's in particular (nothing is known of who published last): publish now.
    Open,
    /// Another node's: wait until the stream moves, that node goes idle, or [`TURN_WAIT`].
    Theirs,
}

/// The turn order: after a message published by node X, the turn goes to the next node after X,
/// in name order, among the busy nodes that published in the last [`ACTIVE_MS`] (and this one),
/// then around. A node says on a plain (not stored) subject when its queue runs empty (`idle`)
/// and when a write arrives again (`busy`); idle nodes are skipped. Under load every node always
/// has a group ready, so the nodes take the stream in rounds instead of racing for each
/// sequence (a lost race costs a round trip, a catch-up, a second seal and a second publish);
/// under light load the others are idle and a write is published at once. It is advice, not
/// safety: a publish still lands only on the sequence it was sealed on, and a node that
/// disagrees (a signal not yet heard) or a turn held by a node that died costs one race.
#[derive(Default)]
struct Turns(std::sync::Mutex<TurnState>);

#[derive(Default)]
struct TurnState {
    /// Each publishing node and when its last message was folded here (ms since the epoch).
    active: std::collections::HashMap<String, u64>,
    /// The stream's last message as folded here, and who published it.
    last: Option<(u64, String)>,
    /// The nodes that last said they are idle.
    idle: std::collections::HashSet<String>,
}

impl Turns {
    fn state(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Message `seq` of the stream, published by `node` (`None`: a message without the header),
    /// folded or acknowledged here at `now`.
    fn published(&self, seq: u64, node: Option<&str>, now: u64) {
        let mut s = self.state();
        if s.last.as_ref().is_some_and(|(last, _)| *last >= seq) {
            return;
        }
        match node {
            Some(n) => {
                s.active.insert(n.to_string(), now);
                s.last = Some((seq, n.to_string()));
            }
            None => s.last = None,
        }
        s.active.retain(|_, at| now.saturating_sub(*at) < ACTIVE_MS);
        let TurnState { active, idle, .. } = &mut *s;
        idle.retain(|n| active.contains_key(n));
    }

    /// `node` said it is idle (its queue ran empty) or busy (a write arrived).
    fn said(&self, node: &str, is_idle: bool) {
        let mut s = self.state();
        if is_idle {
            s.idle.insert(node.to_string());
        } else {
            s.idle.remove(node);
        }
    }

    /// Whose turn it is, for node `me` at `now`, after the last message folded here.
    fn turn(&self, me: &str, now: u64) -> Turn {
        let s = self.state();
        let Some((_, publisher)) = &s.last else {
            return Turn::Open;
        };
        let mut order: Vec<&str> = s
            .active
            .iter()
            .filter(|(_, at)| now.saturating_sub(**at) < ACTIVE_MS)
            .map(|(n, _)| n.as_str())
            .collect();
        for n in [me, publisher.as_str()] {
            if !order.contains(&n) {
                order.push(n);
            }
        }
        order.sort_unstable();
        let from = order
            .iter()
            .position(|n| *n == publisher.as_str())
            .unwrap_or(0);
        // The first node after the publisher, around, that is this one or busy: this one is in
        // the order, so the walk ends at it at the latest.
        let next = (1..=order.len())
            .map(|i| order[(from + i) % order.len()])
            .find(|n| *n == me || !s.idle.contains(*n));
        if next == Some(me) {
            Turn::Mine
        } else {
            Turn::Theirs
        }
    }
}

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
        let turns = Arc::new(Turns::default());
        let (heard, _) = watch::channel(0u64);
        let mut subscription = client
            .subscribe(turns_subject(&config.stream))
            .await
            .map_err(|e| anyhow::anyhow!("subscribing to the turn signal: {e}"))?;
        let (me, t, h) = (node.clone(), turns.clone(), heard.clone());
        tokio::spawn(async move {
            while let Some(m) = subscription.next().await {
                if let Some((from, is_idle)) = parse_signal(m.payload.as_ref()) {
                    if from != me {
                        t.said(from, is_idle);
                        h.send_modify(|n| *n += 1);
                    }
                }
            }
        });
        let log = NatsLog {
            client,
            js,
            config,
            node,
            turns,
            heard,
            said_idle: Arc::new(AtomicBool::new(false)),
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

    /// Message `seq` of the stream was published by `node` (its `Auditmem-Node` header).
    pub fn published(&self, seq: u64, node: Option<&str>) {
        self.turns.published(seq, node, now_ms());
    }

    /// This node's own message was stored at `seq`.
    pub fn stored_mine(&self, seq: u64) {
        self.turns.published(seq, Some(&self.node), now_ms());
    }

    /// The header value of a stream message's publisher.
    pub fn publisher(message: &jetstream::Message) -> Option<&str> {
        message
            .headers
            .as_ref()
            .and_then(|h| h.get(NODE_HEADER))
            .map(|v| v.as_str())
    }

    /// Whose turn it is to publish next, as this node sees it.
    pub fn turn(&self) -> Turn {
        self.turns.turn(&self.node, now_ms())
    }

    /// Tells the other nodes this one's queue ran empty (`true`) or a write arrived
    /// (`false`); only a change is said.
    pub async fn say_idle(&self, is_idle: bool) {
        if self.said_idle.swap(is_idle, Ordering::Relaxed) == is_idle {
            return;
        }
        let word = if is_idle { IDLE } else { BUSY };
        let _ = self
            .client
            .publish(
                turns_subject(&self.config.stream),
                bytes::Bytes::from(format!("{} {word}", self.node)),
            )
            .await;
    }

    /// Changes whenever another node says it is idle or busy.
    pub fn signals(&self) -> watch::Receiver<u64> {
        self.heard.subscribe()
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
                .header(NODE_HEADER, self.node.as_str())
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

fn turns_subject(stream: &str) -> String {
    format!("_AUDITMEM.{stream}.turns")
}

/// The words of the turn signals: `<node> idle`, `<node> busy`.
const IDLE: &str = "idle";
const BUSY: &str = "busy";

/// `(node, idle)` of a turn signal.
fn parse_signal(payload: &[u8]) -> Option<(&str, bool)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (node, word) = text.split_once(' ')?;
    match word {
        IDLE => Some((node, true)),
        BUSY => Some((node, false)),
        _ => None,
    }
}

/// The next message of `feed`, or `None` when it ended.
pub async fn next_message(feed: &mut Feed) -> Option<Result<jetstream::Message, String>> {
    feed.next().await.map(|r| r.map_err(|e| e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_take_the_stream_in_turns_in_name_order_skipping_the_idle() {
        let t = Turns::default();
        // Nothing known of who published last: anyone may.
        assert_eq!(t.turn("b", 1_000), Turn::Open);
        t.published(10, Some("a"), 1_000);
        t.published(11, Some("b"), 1_001);
        t.published(12, Some("c"), 1_002);
        // After c, around to a.
        assert_eq!(t.turn("a", 1_003), Turn::Mine);
        assert_eq!(t.turn("b", 1_003), Turn::Theirs);
        assert_eq!(t.turn("c", 1_003), Turn::Theirs);
        // a is idle: b's turn; busy again: a's.
        t.said("a", true);
        assert_eq!(t.turn("b", 1_003), Turn::Mine);
        assert_eq!(t.turn("c", 1_003), Turn::Theirs);
        t.said("a", false);
        assert_eq!(t.turn("b", 1_003), Turn::Theirs);
        // Both others idle: the publisher goes again.
        t.said("a", true);
        t.said("b", true);
        assert_eq!(t.turn("c", 1_003), Turn::Mine);
        t.said("a", false);
        t.said("b", false);
        // A newer message moves the turn; an older one changes nothing.
        t.published(13, Some("a"), 1_004);
        t.published(12, Some("c"), 1_004);
        assert_eq!(t.turn("b", 1_005), Turn::Mine);
        assert_eq!(t.turn("c", 1_005), Turn::Theirs);
        // A node that has not published for ACTIVE_MS is out of the order (b, c)...
        t.said("c", true);
        t.published(14, Some("a"), 1_004 + ACTIVE_MS);
        assert_eq!(t.turn("a", 1_004 + ACTIVE_MS), Turn::Mine);
        // ...but the asking node always counts itself in, busy or not.
        assert_eq!(t.turn("c", 1_004 + ACTIVE_MS), Turn::Mine);
        assert_eq!(t.turn("d", 1_004 + ACTIVE_MS), Turn::Mine);
        assert_eq!(t.turn("0", 1_004 + ACTIVE_MS), Turn::Mine);
        // What a node said is forgotten with it: back in the order, c is busy until it says.
        t.published(15, Some("c"), 1_600);
        t.published(16, Some("a"), 1_601);
        assert_eq!(t.turn("a", 1_601), Turn::Theirs);
        assert_eq!(t.turn("c", 1_601), Turn::Mine);
        // A message without a publisher opens the turn.
        t.published(17, None, 1_700);
        assert_eq!(t.turn("a", 1_700), Turn::Open);
    }

    #[test]
    fn turn_signals_parse_exactly() {
        assert_eq!(parse_signal(b"_INBOX.x idle"), Some(("_INBOX.x", true)));
        assert_eq!(parse_signal(b"_INBOX.x busy"), Some(("_INBOX.x", false)));
        assert_eq!(parse_signal(b"_INBOX.x"), None);
        assert_eq!(parse_signal(b"_INBOX.x pass 42"), None);
        assert_eq!(parse_signal(b"_INBOX.x idle 1"), None);
    }
}
