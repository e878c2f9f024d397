//! Folding log records into the projections: at start (from the lowest checkpoint) and in
//! `auditmem replay` (from seq 1 after every projection tree was dropped).

use auditmem_projections::{Applied, Event, Prepared, Projections};
use indicatif::ProgressBar;
use rayon::prelude::*;

use super::record::RecordRef;
use super::{LogError, LogReader};

/// Records decoded and applied per projection batch.
const CHUNK: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum CatchUpError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("projection: {0}")]
    Projection(#[from] auditmem_projections::ProjectionError),
}

type Decoded = Vec<(u64, i64, Event, Prepared)>;

/// Applies every record after the lowest projection checkpoint; returns how many were read.
///
/// Two stages overlap: a reader thread pulls chunks of raw records from sled and decodes each
/// chunk on every core (events carry JSON values: decoding is the larger half of the work),
/// while this thread folds the previous chunk into the projections in log order.
pub fn catch_up(
    log: &LogReader,
    projections: &Projections,
    progress: Option<&ProgressBar>,
) -> Result<u64, CatchUpError> {
    let from = projections.min_checkpoint()? + 1;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Decoded, LogError>>(2);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut items = log.records_from(from);
            loop {
                let mut raw: Vec<(u64, sled::IVec)> = Vec::with_capacity(CHUNK);
                for item in items.by_ref().take(CHUNK) {
                    match item {
                        Ok(kv) => raw.push(kv),
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                if raw.is_empty() {
                    return;
                }
                let decoded: Result<Decoded, LogError> = raw.par_iter().map(decode).collect();
                let failed = decoded.is_err();
                // The applier hung up (it failed): stop reading.
                if tx.send(decoded).is_err() || failed {
                    return;
                }
            }
        });
        let mut total = 0u64;
        let mut last_seq = 0u64;
        for chunk in rx {
            let chunk = chunk?;
            let applied: Vec<Applied> = chunk
                .iter()
                .map(|(seq, ts, e, prepared)| Applied {
                    seq: *seq,
                    ts_micros: *ts,
                    event: e,
                    prepared: Some(prepared),
                })
                .collect();
            projections.apply(&applied)?;
            drop(applied);
            let n = chunk.len() as u64;
            total += n;
            last_seq = chunk.last().map_or(last_seq, |(seq, ..)| *seq);
            // Freeing thousands of decoded JSON values is real work: not on the folding thread.
            rayon::spawn(move || drop(chunk));
            if let Some(p) = progress {
                p.inc(n);
            }
        }
        // Everything up to the head is applied: checkpoints left behind by events that changed
        // nothing in a projection move up, so the next start reads nothing again.
        if last_seq > 0 {
            projections.settle(last_seq)?;
        }
        Ok(total)
    })
}

/// Decodes a record and does the state-independent part of folding it (this runs on every core).
fn decode((seq, value): &(u64, sled::IVec)) -> Result<(u64, i64, Event, Prepared), LogError> {
    let record = RecordRef::decode(value).map_err(|e| LogError::Undecodable {
        seq: *seq,
        why: e.to_string(),
    })?;
    let event = Event::decode(record.event).map_err(|e| LogError::Undecodable {
        seq: *seq,
        why: e.to_string(),
    })?;
    let prepared = Projections::prepare(&event);
    Ok((record.seq, record.ts_micros, event, prepared))
}
