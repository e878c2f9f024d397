//! A stream in memory for the cluster's unit tests: what the writer relies on JetStream for
//! (sequences from 1 after an empty genesis message, the expected-last-sequence check,
//! message-id dedupe checked first, ordered feeds, the publisher header, the turn signals),
//! with nothing left to timing, and the faults a test stages: another node's message landing
//! right before a publish, an acknowledgement lost after the message was stored (with or
//! without its id kept), publishes held at a gate until the test lets each through.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;
use tokio::sync::{oneshot, watch};

use super::stream::{LogStream, Outgoing, PublishError, StreamError, StreamMessage};
use super::turns::TurnOrder;

/// One stream, shared by the clients of every node on it.
#[derive(Clone)]
pub(crate) struct FakeStream {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// How many messages the stream holds, for the feeds waiting for the next one.
    grown: watch::Sender<u64>,
    /// How many publishes wait at the gate.
    waiting: watch::Sender<usize>,
}

#[derive(Default)]
struct State {
    messages: Vec<StreamMessage>,
    /// Each stored message id and its sequence (the duplicate window never ends here).
    ids: HashMap<String, u64>,
    /// Messages (publisher, payload) stored right before a node's next publish is looked at.
    land_first: HashMap<String, Vec<(String, Bytes)>>,
    /// Per node, how its next publishes end once stored: lost acknowledgements.
    lost_acks: HashMap<String, Vec<LostAck>>,
    /// Publish attempts per node.
    attempts: HashMap<String, usize>,
    /// Whether publishes wait at the gate; those waiting, in arrival order.
    gate: bool,
    held: Vec<(String, oneshot::Sender<()>)>,
    /// Every node's turn order, to hear the others' signals.
    orders: Vec<Weak<TurnOrder>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostAck {
    /// Stored, its id kept: a retry is answered as a duplicate.
    IdKept,
    /// Stored, its id forgotten (as past JetStream's duplicate window): a retry is checked
    /// against the last sequence like any message.
    IdForgotten,
}

impl State {
    fn store(&mut self, publisher: Option<String>, payload: Bytes) -> u64 {
        let seq = self.messages.len() as u64 + 1;
        self.messages.push(StreamMessage {
            seq,
            publisher,
            payload,
        });
        seq
    }
}

impl FakeStream {
    /// A stream holding the genesis message, as the JetStream client leaves a new one.
    pub(crate) fn new() -> FakeStream {
        let mut state = State::default();
        state.store(None, Bytes::new());
        FakeStream {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                grown: watch::channel(1).0,
                waiting: watch::channel(0).0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn grew(&self, state: &State) {
        self.shared.grown.send_replace(state.messages.len() as u64);
    }

    /// The client of node `node`.
    pub(crate) fn client(&self, node: &str) -> FakeClient {
        let turns = Arc::new(TurnOrder::new(node.to_string()));
        self.state().orders.push(Arc::downgrade(&turns));
        FakeClient {
            stream: self.clone(),
            turns,
        }
    }

    /// Stores a message `publisher` published (a node that is no writer here).
    pub(crate) fn append(&self, publisher: &str, payload: Vec<u8>) -> u64 {
        let mut s = self.state();
        let seq = s.store(Some(publisher.to_string()), payload.into());
        self.grew(&s);
        seq
    }

    /// Stores `publisher`'s message right before `node`'s next publish is looked at: `node`
    /// loses the race for that sequence.
    pub(crate) fn land_before_next_publish_of(
        &self,
        node: &str,
        publisher: &str,
        payload: Vec<u8>,
    ) {
        self.state()
            .land_first
            .entry(node.to_string())
            .or_default()
            .push((publisher.to_string(), payload.into()));
    }

    /// `node`'s next stored message is not acknowledged.
    pub(crate) fn lose_next_ack_of(&self, node: &str, how: LostAck) {
        self.state()
            .lost_acks
            .entry(node.to_string())
            .or_default()
            .push(how);
    }

    /// From now on publishes wait at the gate until [`release`](Self::release)d.
    pub(crate) fn hold_publishes(&self) {
        self.state().gate = true;
    }

    /// Waits until `n` publishes wait at the gate.
    pub(crate) async fn wait_held(&self, n: usize) {
        let mut waiting = self.shared.waiting.subscribe();
        let _ = waiting.wait_for(|w| *w >= n).await;
    }

    /// Lets `node`'s publish waiting at the gate through.
    pub(crate) fn release(&self, node: &str) {
        let mut s = self.state();
        if let Some(at) = s.held.iter().position(|(n, _)| n == node) {
            let (_, go) = s.held.remove(at);
            let _ = go.send(());
            self.shared.waiting.send_replace(s.held.len());
        }
    }

    /// Every message the stream holds, in order.
    pub(crate) fn messages(&self) -> Vec<StreamMessage> {
        self.state().messages.clone()
    }

    /// How many times `node` tried to publish.
    pub(crate) fn attempts(&self, node: &str) -> usize {
        self.state().attempts.get(node).copied().unwrap_or(0)
    }
}

/// One node's client of a [`FakeStream`].
pub(crate) struct FakeClient {
    stream: FakeStream,
    turns: Arc<TurnOrder>,
}

/// A feed: the next sequence it delivers.
pub(crate) struct FakeFeed {
    next: u64,
}

impl LogStream for FakeClient {
    type Feed = FakeFeed;

    fn turns(&self) -> &TurnOrder {
        &self.turns
    }

    fn max_message_bytes(&self) -> usize {
        1 << 20
    }

    async fn publish(&self, m: &Outgoing<'_>) -> Result<u64, PublishError> {
        let node = self.turns.node().to_string();
        let gate = {
            let mut s = self.stream.state();
            *s.attempts.entry(node.clone()).or_default() += 1;
            s.gate.then(|| {
                let (go, wait) = oneshot::channel();
                s.held.push((node.clone(), go));
                self.stream.shared.waiting.send_replace(s.held.len());
                wait
            })
        };
        if let Some(wait) = gate {
            let _ = wait.await;
        }
        let mut s = self.stream.state();
        for (publisher, payload) in s.land_first.remove(&node).unwrap_or_default() {
            s.store(Some(publisher), payload);
        }
        // As JetStream: a duplicate is answered with its copy's sequence, before any check.
        if let Some(seq) = s.ids.get(m.id).copied() {
            self.stream.grew(&s);
            return Ok(seq);
        }
        if s.messages.len() as u64 != m.expected_last {
            self.stream.grew(&s);
            return Err(PublishError::WrongLastSequence);
        }
        let seq = s.store(Some(node.clone()), m.payload.clone());
        let lost = s
            .lost_acks
            .get_mut(&node)
            .and_then(|l| (!l.is_empty()).then(|| l.remove(0)));
        if lost != Some(LostAck::IdForgotten) {
            s.ids.insert(m.id.to_string(), seq);
        }
        self.stream.grew(&s);
        match lost {
            Some(_) => Err(PublishError::Unacknowledged(StreamError::NoAnswer)),
            None => Ok(seq),
        }
    }

    async fn last_sequence(&self) -> Result<u64, StreamError> {
        Ok(self.stream.state().messages.len() as u64)
    }

    async fn follow(&self, from: u64) -> Result<FakeFeed, StreamError> {
        Ok(FakeFeed { next: from.max(1) })
    }

    async fn next(&self, feed: &mut FakeFeed) -> Option<Result<StreamMessage, StreamError>> {
        let mut grown = self.stream.shared.grown.subscribe();
        loop {
            let at = usize::try_from(feed.next - 1).unwrap_or(usize::MAX);
            if let Some(m) = self.stream.state().messages.get(at).cloned() {
                feed.next += 1;
                return Some(Ok(m));
            }
            if grown.changed().await.is_err() {
                return None;
            }
        }
    }

    async fn say_idle(&self, idle: bool) {
        let Some(signal) = self.turns.say(idle) else {
            return;
        };
        let orders: Vec<_> = self
            .stream
            .state()
            .orders
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for order in orders {
            order.heard(signal.as_bytes());
        }
    }
}
