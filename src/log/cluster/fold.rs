//! Folding a stream message: its records checked one by one against the chain they must
//! continue, before anything of them is mirrored or applied.
//!
//! Each record is decoded, its hash recomputed from its own bytes and its event decoded, on
//! every core (the next node to publish waits for this fold, by the turn order); then, in
//! order, each must follow the one before it: the next seq, and the previous record's hash as
//! its `prev`. A record the mirror holds already (a restart between the mirror's write and its
//! position) must be the mirror's own. A message that fails any of this does not continue this
//! node's chain, and nothing of it is kept.

use auditmem_projections::{Event, Prepared, Projections};
use rayon::prelude::*;

use crate::log::appender::Folded;
use crate::log::record::{self, Chunker};
use crate::log::{Head, LogError, LogReader};

/// Why a stream message does not continue this node's chain.
#[derive(Debug, thiserror::Error)]
pub enum FoldError {
    #[error("stream message {stream_seq}: {why}")]
    Undecodable { stream_seq: u64, why: String },
    #[error("stream message {stream_seq}: record {seq} does not match its hash")]
    Hash { stream_seq: u64, seq: u64 },
    #[error("stream message {stream_seq}: record {seq}: {source}")]
    Event {
        stream_seq: u64,
        seq: u64,
        source: auditmem_projections::event::EventCodecError,
    },
    #[error("stream message {stream_seq}: record {seq} differs from the mirror's")]
    Differs { stream_seq: u64, seq: u64 },
    #[error("stream message {stream_seq}: record {seq} does not follow record {head}")]
    Unlinked {
        stream_seq: u64,
        seq: u64,
        head: u64,
    },
    #[error("reading the mirror: {0}")]
    Mirror(#[from] LogError),
}

/// The records of a message that follow the head, ready to mirror and apply.
pub(crate) struct Folding {
    /// Their bytes as the `log` tree stores them.
    pub(crate) chunks: Chunker,
    pub(crate) records: Vec<Folded>,
}

/// A record checked against its own hash and decoded, not yet linked.
struct Checked<'a> {
    seq: u64,
    ts_micros: i64,
    prev: &'a [u8],
    hash: [u8; 32],
    /// Its bytes in the message.
    range: std::ops::Range<usize>,
    event: Event,
    prepared: Prepared,
}

/// Checks stream message `stream_seq` (its records back to back in `payload`) against `head`,
/// the chain's head, and `mirror`, which holds the chain up to it.
pub(crate) fn fold(
    stream_seq: u64,
    payload: &[u8],
    head: Head,
    mirror: &LogReader,
) -> Result<Folding, FoldError> {
    let pieces: Vec<_> = if payload.is_empty() {
        Vec::new()
    } else {
        record::pieces(payload).collect()
    };
    let checked: Vec<Result<Checked, FoldError>> = pieces
        .into_par_iter()
        .with_min_len(32)
        .map(|piece| {
            let r = piece
                .record
                .map_err(|why| FoldError::Undecodable { stream_seq, why })?;
            let hash = r.computed_hash();
            if r.hash != hash.as_slice() {
                return Err(FoldError::Hash {
                    stream_seq,
                    seq: r.seq,
                });
            }
            // Also for a record the mirror holds already (after a restart between the
            // mirror's write and its position): rare, and its bytes are the mirror's.
            let event = Event::decode(r.event).map_err(|source| FoldError::Event {
                stream_seq,
                seq: r.seq,
                source,
            })?;
            Ok(Checked {
                seq: r.seq,
                ts_micros: r.ts_micros,
                prev: r.prev,
                hash,
                range: piece.range,
                prepared: Projections::prepare(&event),
                event,
            })
        })
        .collect();
    let mut head = head;
    let mut chunks = Chunker::default();
    let mut records = Vec::new();
    for c in checked {
        let c = c?;
        if c.seq <= head.seq {
            // Already in the mirror: it must be the same record.
            let mine = mirror.get(c.seq)?;
            if mine.map(|m| m.hash) != Some(c.hash) {
                return Err(FoldError::Differs {
                    stream_seq,
                    seq: c.seq,
                });
            }
            continue;
        }
        if c.seq != head.seq + 1 || c.prev != head.hash.as_slice() {
            return Err(FoldError::Unlinked {
                stream_seq,
                seq: c.seq,
                head: head.seq,
            });
        }
        chunks.push(c.seq, payload[c.range].to_vec());
        head = Head {
            seq: c.seq,
            hash: c.hash,
        };
        records.push(Folded {
            seq: c.seq,
            ts_micros: c.ts_micros,
            hash: c.hash,
            event: c.event,
            prepared: c.prepared,
        });
    }
    Ok(Folding { chunks, records })
}
