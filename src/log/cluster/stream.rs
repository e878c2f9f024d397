//! What the cluster's log of record needs of a stream: the JetStream client
//! ([`super::nats::NatsLog`]) implements it, and so does the tests' in-memory fake.
//!
//! A stream is a sequence of messages numbered from 1. A publish names the stream sequence it
//! expects to be the last one, and a message id: a message is stored only right after the
//! sequence it expects, and a message whose id the stream holds already is not stored again
//! (the stream answers with the sequence of the copy it holds, whatever the expectation), so a
//! publish retried after a lost acknowledgement is stored once.

use bytes::Bytes;

use super::turns::TurnOrder;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One message as a follower reads it.
#[derive(Clone, Debug)]
pub struct StreamMessage {
    /// Its stream sequence.
    pub seq: u64,
    /// The node that published it (the `Auditmem-Node` header; `None` for the genesis message).
    pub publisher: Option<String>,
    /// Its sealed records back to back.
    pub payload: Bytes,
}

/// One message to publish.
pub struct Outgoing<'a> {
    pub payload: Bytes,
    /// The message id: the hex of its last record's hash.
    pub id: &'a str,
    /// The stream sequence it must follow.
    pub expected_last: u64,
    /// The first and last log seq it holds (headers for people reading the stream).
    pub seqs: (u64, u64),
}

/// Why a stream request did not complete.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// No answer in time.
    #[error("no acknowledgement")]
    NoAnswer,
    /// The client or the servers failed the request (no connection, no leader, no quorum).
    #[error("{0}")]
    Client(#[source] BoxError),
}

/// Why a message was not (known to be) stored.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The stream's last sequence is not the expected one: another node published first
    /// (JetStream's error 10071). Nothing was stored.
    #[error("the stream's last sequence is not the expected one")]
    WrongLastSequence,
    /// The stream refused the message for good (larger than the servers' `max_payload`).
    #[error("{0}")]
    Refused(#[source] BoxError),
    /// No acknowledgement: the message may or may not be stored. Publishing the same message
    /// again is safe (its id).
    #[error(transparent)]
    Unacknowledged(StreamError),
}

/// A client of the stream that holds the log, one per node.
pub(crate) trait LogStream: Send + Sync + 'static {
    /// The stream's messages from some sequence on, in order.
    type Feed: Send;

    /// The turn order as this client hears it: it feeds what other nodes say into it.
    fn turns(&self) -> &TurnOrder;

    /// The most record bytes one message may carry.
    fn max_message_bytes(&self) -> usize;

    /// Publishes one message once: its stream sequence, once stored (or found stored).
    async fn publish(&self, message: &Outgoing<'_>) -> Result<u64, PublishError>;

    /// The stream's last sequence.
    async fn last_sequence(&self) -> Result<u64, StreamError>;

    /// The stream's messages from sequence `from` on.
    async fn follow(&self, from: u64) -> Result<Self::Feed, StreamError>;

    /// The next message of `feed` (`None`: the feed ended; follow anew).
    async fn next(&self, feed: &mut Self::Feed) -> Option<Result<StreamMessage, StreamError>>;

    /// Tells the other nodes, on a side channel the stream does not store, that this node's
    /// queue ran empty (`true`) or a write arrived (`false`); only a change is said.
    async fn say_idle(&self, idle: bool);
}
