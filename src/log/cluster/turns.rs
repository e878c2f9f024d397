//! The turn order: which node publishes on the stream's next sequence.
//!
//! After a message published by node X, the turn goes to the next node after X, in name order,
//! among the busy nodes that published in the last [`ACTIVE_MS`] (and this one), then around.
//! A node says on a plain (not stored) subject when its queue runs empty (`idle`) and when a
//! write arrives again (`busy`); idle nodes are skipped. Under load every node always has a
//! group ready, so the nodes take the stream in rounds instead of racing for each sequence (a
//! lost race costs a round trip, a catch-up, a second seal and a second publish); under light
//! load the others are idle and a write is published at once. It is advice, not safety: a
//! publish still lands only on the sequence it was sealed on, and a node that disagrees (a
//! signal not yet heard) or a turn held by a node that died costs one race.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// How long a node counts as publishing after its last message, ms.
pub(crate) const ACTIVE_MS: u64 = 500;
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

/// One node's view of the turn order: who published what, what the others said, and what
/// this node said last. The stream client feeds it what it hears ([`heard`](Self::heard)).
pub(crate) struct TurnOrder {
    /// This node's name among the nodes (the `Auditmem-Node` header of what it publishes).
    node: String,
    turns: Turns,
    /// Moves whenever another node says it is idle or busy, so a node waiting for its turn
    /// looks again.
    changed: watch::Sender<u64>,
    /// Whether this node last said it is idle.
    said_idle: AtomicBool,
}

impl TurnOrder {
    pub(crate) fn new(node: String) -> TurnOrder {
        TurnOrder {
            node,
            turns: Turns::default(),
            changed: watch::channel(0).0,
            said_idle: AtomicBool::new(false),
        }
    }

    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// Message `seq` of the stream was published by `node` (`None`: without the header).
    pub(crate) fn published(&self, seq: u64, node: Option<&str>) {
        self.turns.published(seq, node, now_ms());
    }

    /// This node's own message was stored at `seq`.
    pub(crate) fn stored_mine(&self, seq: u64) {
        self.turns.published(seq, Some(&self.node), now_ms());
    }

    /// Whose turn it is to publish next, as this node sees it.
    pub(crate) fn turn(&self) -> Turn {
        self.turns.turn(&self.node, now_ms())
    }

    /// Changes whenever another node says it is idle or busy.
    pub(crate) fn signals(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A signal heard on the side channel (this node's own are ignored).
    pub(crate) fn heard(&self, payload: &[u8]) {
        if let Some((from, idle)) = parse_signal(payload) {
            if from != self.node {
                self.turns.said(from, idle);
                self.changed.send_modify(|n| *n += 1);
            }
        }
    }

    /// The signal to send for this node being idle or busy, if that is news.
    pub(crate) fn say(&self, idle: bool) -> Option<String> {
        if self.said_idle.swap(idle, Ordering::Relaxed) == idle {
            return None;
        }
        let word = if idle { IDLE } else { BUSY };
        Some(format!("{} {word}", self.node))
    }
}

/// The turn order's state (see the module's documentation).
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

    #[test]
    fn a_node_says_only_what_changed_and_hears_only_the_others() {
        let a = TurnOrder::new("a".into());
        let mut signals = a.signals();
        // A node starts busy: saying so again is no news.
        assert_eq!(a.say(false), None);
        assert_eq!(a.say(true).as_deref(), Some("a idle"));
        assert_eq!(a.say(true), None);
        assert_eq!(a.say(false).as_deref(), Some("a busy"));
        // Its own signal, heard back on the side channel, changes nothing.
        a.heard(b"a idle");
        assert_eq!(signals.has_changed().ok(), Some(false));
        a.published(2, Some("a"));
        a.published(3, Some("b"));
        a.published(4, Some("a"));
        // After a, b (busy) is next.
        assert_eq!(a.turn(), Turn::Theirs);
        a.heard(b"b idle");
        assert_eq!(signals.has_changed().ok(), Some(true));
        signals.mark_unchanged();
        // b is idle: a goes again.
        assert_eq!(a.turn(), Turn::Mine);
        a.heard(b"b busy");
        assert_eq!(signals.has_changed().ok(), Some(true));
        assert_eq!(a.turn(), Turn::Theirs);
        // Not a signal: nothing heard.
        signals.mark_unchanged();
        a.heard(b"b pass");
        assert_eq!(signals.has_changed().ok(), Some(false));
        assert_eq!(a.turn(), Turn::Theirs);
    }
}
