//! Folding log records into the projections: at start (from the lowest checkpoint) and in
//! `auditmem replay` (from seq 1 after every projection tree was dropped).

use auditmem_projections::{Applied, Event, Projections};
use indicatif::ProgressBar;

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
    for item in log.raw_from(from) {
        let (seq, value) = item?;
        let record = Record::decode(&value).map_err(|e| LogError::Undecodable {
            seq,
            why: e.to_string(),
        })?;
        let event = Event::decode(&record.event).map_err(|e| LogError::Undecodable {
            seq,
            why: e.to_string(),
        })?;
        chunk.push((record.seq, record.ts_micros, event));
        total += 1;
        if chunk.len() == CHUNK {
            flush(&mut chunk)?;
            if let Some(p) = progress {
                p.inc(CHUNK as u64);
            }
        }
    }
    let rest = chunk.len() as u64;
    if rest > 0 {
        flush(&mut chunk)?;
        if let Some(p) = progress {
            p.inc(rest);
        }
    }
    Ok(total)
}
