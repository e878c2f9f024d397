//! Audit exports: the background worker that writes export files, and their rows.
//!
//! The worker works through an [`Exporter`]: the log it reads entries from, the projections it
//! finds them and the pending exports in, and the appender it records each outcome with.
//!
//! An export holds exactly the tenant's entries in its time range that were logged before the
//! `ExportRequested` record (seq below it), in log order, so the same request always yields
//! the same file. The worker writes `<export_id>.<ext>.part`, syncs it, renames it, and appends
//! `ExportCompleted` (records, bytes, blake3 of the file) or `ExportFailed`. Exports still
//! processing at start (a crash or a stop mid-way) are written again from the start.

pub mod rows;
pub mod verify;

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem_projections::audit_index::{AuditRef, Filter};
use auditmem_projections::exports::ExportView;
use auditmem_projections::{
    Event, ExportCompleted, ExportFailed, ExportFormat, Named, Projections,
};
use rayon::prelude::*;

use crate::log::appender::Appender;
use crate::log::LogReader;
use crate::wire::audit::AuditLogEntry;

/// Export files live in this subdirectory of the data dir (verify does not copy it).
pub const EXPORTS_DIR: &str = "exports";

/// Where a completed export's file lives.
pub fn file_path(dir: &Path, view: &ExportView) -> PathBuf {
    dir.join(format!("{}.{}", view.export_id, view.format.as_str()))
}

/// Counts and hashes what passes through.
struct HashingWriter<W: Write> {
    inner: W,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// What the export worker reads and writes through.
#[derive(Clone)]
pub struct Exporter {
    pub log: LogReader,
    pub projections: Arc<Projections>,
    pub appender: Appender,
    pub settings: ExportSettings,
}

/// Rows of `refs` as file bytes (CSV records, or JSON objects joined by `,\n`) and their count.
fn encode_rows(
    log: &LogReader,
    refs: &[AuditRef],
    format: ExportFormat,
    with_chain: bool,
) -> Result<(Vec<u8>, u64), String> {
    // Rows are 300-400 bytes: sized once rather than grown by doubling.
    let capacity = refs.len() * 400;
    let mut buf = Vec::with_capacity(if format == ExportFormat::Json {
        capacity
    } else {
        0
    });
    let mut csv = rows::csv_writer(Vec::with_capacity(if format == ExportFormat::Csv {
        capacity
    } else {
        0
    }));
    let seqs: Vec<u64> = refs.iter().map(|r| r.seq).collect();
    let entries = log.audit_entries(&seqs).map_err(|e| e.to_string())?;
    let mut cell = Vec::new();
    for (i, (r, entry)) in refs.iter().zip(entries).enumerate() {
        let Some((_, entry)) = entry else {
            return Err(format!("seq {} holds no audit entry", r.seq));
        };
        match format {
            ExportFormat::Csv => rows::write_csv_row(&mut csv, &entry, r, with_chain, &mut cell)?,
            ExportFormat::Json => {
                if i > 0 {
                    buf.extend_from_slice(b",\n");
                }
                serde_json::to_writer(&mut buf, &AuditLogEntry::exported(&entry, r, with_chain))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    if format == ExportFormat::Csv {
        buf = csv.into_inner().map_err(|e| e.to_string())?;
    }
    Ok((buf, refs.len() as u64))
}

/// Starts the disk writing what is written so far, every 32 MiB, without waiting for it: the
/// final sync of a large export then finds little left to write, rather than all of it.
fn start_writeback(
    out: &mut HashingWriter<BufWriter<File>>,
    flushed_to: &mut u64,
) -> std::io::Result<()> {
    const STEP: u64 = 32 << 20;
    if out.bytes < *flushed_to + STEP {
        return Ok(());
    }
    out.inner.flush()?;
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = out.inner.get_ref().as_raw_fd();
        // SAFETY: fd is the open export file; the call only schedules its pages for writing.
        let rc = unsafe {
            libc::sync_file_range(
                fd,
                *flushed_to as libc::off64_t,
                (out.bytes - *flushed_to) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    *flushed_to = out.bytes;
    Ok(())
}

/// Writes the export file; returns (records, bytes, blake3).
pub fn write_file(
    log: &LogReader,
    projections: &Projections,
    dir: &Path,
    view: &ExportView,
) -> Result<(u64, u64, [u8; 32]), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating the exports dir: {e}"))?;
    let filter = Filter {
        tenant_id: view.tenant_id,
        action: None,
        from: view.start_time,
        to: view.end_time,
    };
    let keys = projections
        .audit
        .in_log_order(&filter, view.request_seq)
        .map_err(|e| format!("reading the audit index: {e}"))?;
    let final_path = file_path(dir, view);
    let part = final_path.with_extension(format!("{}.part", view.format.as_str()));
    let file = File::create(&part).map_err(|e| format!("creating the export file: {e}"))?;
    let mut out = HashingWriter {
        inner: BufWriter::with_capacity(1 << 20, file),
        hasher: blake3::Hasher::new(),
        bytes: 0,
    };
    let io = |e: std::io::Error| format!("writing the export file: {e}");
    // Reading, decoding and formatting entries dominates: every core encodes a slice of rows
    // into bytes of its own, and this thread only writes and hashes them, in order.
    let encoded = keys.chunks(4096).map(|chunk| {
        let seqs: Vec<u64> = chunk.iter().map(|k| k.1).collect();
        let refs = projections
            .audit
            .at_seqs(&seqs)
            .map_err(|e| e.to_string())?;
        let refs: Vec<AuditRef> = refs
            .into_iter()
            .zip(&seqs)
            .map(|(r, seq)| r.ok_or_else(|| format!("seq {seq} missing from the audit index")))
            .collect::<Result<_, _>>()?;
        refs.par_chunks(256)
            .map(|part| encode_rows(log, part, view.format, view.with_chain))
            .collect::<Result<Vec<(Vec<u8>, u64)>, String>>()
    });
    let mut written = 0u64;
    match view.format {
        ExportFormat::Csv => {
            let mut w = rows::csv_writer(Vec::new());
            rows::write_header(&mut w, view.with_chain).map_err(|e| e.to_string())?;
            let header = w.into_inner().map_err(|e| e.to_string())?;
            out.write_all(&header).map_err(io)?;
        }
        ExportFormat::Json => out.write_all(b"[").map_err(io)?,
    }
    let mut flushed_to = 0u64;
    for parts in encoded {
        for (bytes, n) in parts? {
            if n == 0 {
                continue;
            }
            if view.format == ExportFormat::Json && written > 0 {
                out.write_all(b",\n").map_err(io)?;
            }
            out.write_all(&bytes).map_err(io)?;
            written += n;
        }
        start_writeback(&mut out, &mut flushed_to).map_err(io)?;
    }
    if view.format == ExportFormat::Json {
        out.write_all(b"]\n").map_err(io)?;
    }
    out.flush().map_err(io)?;
    let HashingWriter {
        inner,
        hasher,
        bytes,
    } = out;
    let file = inner
        .into_inner()
        .map_err(|e| format!("writing the export file: {e}"))?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&part, &final_path).map_err(io)?;
    Ok((written, bytes, *hasher.finalize().as_bytes()))
}

/// Settings of the export worker.
#[derive(Clone, Debug)]
pub struct ExportSettings {
    pub dir: PathBuf,
    pub ttl: Duration,
    /// Test hook: wait this long before writing (lets a test stop the server mid-export).
    pub start_delay: Duration,
}

/// Watches the log head and writes every export still processing, including those a restart
/// found unfinished; ends when the appender stops.
pub async fn run_worker(exporter: Exporter) {
    let mut head = exporter.appender.subscribe();
    let running: Arc<Mutex<HashSet<uuid::Uuid>>> = Arc::default();
    loop {
        match exporter.projections.exports.processing() {
            Ok(views) => {
                for view in views {
                    let fresh = running
                        .lock()
                        .map(|mut r| r.insert(view.export_id))
                        .unwrap_or(false);
                    if fresh {
                        let exporter = exporter.clone();
                        tokio::spawn(async move { export_one(exporter, view).await });
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "reading pending exports"),
        }
        if head.changed().await.is_err() {
            break;
        }
    }
}

async fn export_one(exporter: Exporter, view: ExportView) {
    let settings = &exporter.settings;
    if !settings.start_delay.is_zero() {
        tokio::time::sleep(settings.start_delay).await;
    }
    metrics::gauge!("auditmem_exports_running").increment(1.0);
    let (e, v) = (exporter.clone(), view.clone());
    let result = tokio::task::spawn_blocking(move || {
        write_file(&e.log, &e.projections, &e.settings.dir, &v)
    })
    .await
    .unwrap_or_else(|e| Err(format!("export worker crashed: {e}")));
    metrics::gauge!("auditmem_exports_running").decrement(1.0);
    let now = chrono::Utc::now().timestamp_micros();
    let event = match result {
        Ok((records, bytes, blake3)) => {
            metrics::counter!("auditmem_exports_total", "status" => "completed").increment(1);
            Event::ExportCompleted(ExportCompleted {
                export_id: view.export_id,
                tenant_id: view.tenant_id,
                records,
                bytes,
                blake3,
                completed_at: now,
                expires_at: now + settings.ttl.as_micros() as i64,
            })
        }
        Err(error) => {
            tracing::error!(export_id = %view.export_id, %error, "export failed");
            metrics::counter!("auditmem_exports_total", "status" => "failed").increment(1);
            Event::ExportFailed(ExportFailed {
                export_id: view.export_id,
                tenant_id: view.tenant_id,
                error,
                failed_at: now,
            })
        }
    };
    if let Err(e) = exporter.appender.append(vec![event]).await {
        tracing::error!(export_id = %view.export_id, error = %e, "could not record the export's outcome; it resumes at the next start");
    }
}
