//! Folding log records into the projections: at start (from the lowest checkpoint) and in
//! `auditmem replay` (from seq 1 after every projection tree was dropped).

use auditmem_projections::{Applied, Event, Projections};
use indicatif::ProgressBar;
use rayon::prelude::*;

use super::{LogError, LogReader, Record};

/// Records decoded and applied per projection batch.
const CHUNK: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum CatchUpError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("projection: {0}")]
    Projection(#[from] auditmem_projections::ProjectionError),
}

/// Applies every record after the lowest projection checkpoint; returns how many were read.
pub fn catch_up(
    log: &LogReader,
    projections: &Projections,
    progress: Option<&ProgressBar>,
) -> Result<u64, CatchUpError> {
    let from = projections.min_checkpoint()? + 1;
    let mut chunk: Vec<(u64, i64, Event)> = Vec::with_capacity(CHUNK);
    let mut total = 0u64;
    let flush = |chunk: &mut Vec<(u64, i64, Event)>| -> Result<(), CatchUpError> {
        let applied: Vec<Applied> = chunk
            .iter()
            .map(|(seq, ts, e)| Applied {
                seq: *seq,
                ts_micros: *ts,
                event: e,
            })
            .collect();
        projections.apply(&applied)?;
        chunk.clear();
        Ok(())
    };
    let mut raw: Vec<(u64, sled::IVec)> = Vec::with_capacity(CHUNK);
    let mut items = log.raw_from(from);
    loop {
        raw.clear();
        for item in items.by_ref().take(CHUNK) {
            raw.push(item?);
        }
        if raw.is_empty() {
            break;
        }
        // Decoding dominates replay (events carry JSON values): decode on every core, apply in order.
        let decoded: Vec<Result<(u64, i64, Event), LogError>> = raw
            .par_iter()
            .map(|(seq, value)| {
                let record = Record::decode(value).map_err(|e| LogError::Undecodable {
                    seq: *seq,
                    why: e.to_string(),
                })?;
                let event = Event::decode(&record.event).map_err(|e| LogError::Undecodable {
                    seq: *seq,
                    why: e.to_string(),
                })?;
                Ok((record.seq, record.ts_micros, event))
            })
            .collect();
        for d in decoded {
            chunk.push(d?);
        }
        total += chunk.len() as u64;
        let n = chunk.len() as u64;
        flush(&mut chunk)?;
        if let Some(p) = progress {
            p.inc(n);
        }
    }
    Ok(total)
}
