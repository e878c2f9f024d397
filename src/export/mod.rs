//! Audit exports: the background worker that writes export files, and their rows.
//!
//! The worker works through an [`Exporter`]: the log it reads entries from, the projections it
//! finds them and the pending exports in, and the appender it records each outcome with.
//!
//! An export holds exactly the tenant's entries in its time range that were logged before the
//! `ExportRequested` record (seq below it), in log order, so the same request always yields
//! the same file. The worker writes `<export_id>.<ext>.part`, syncs it, renames it, and appends
//! `ExportCompleted` (records, bytes, blake3 of the file, its first and last place in the
//! tenant chain: what the signed [`manifest`] states) or `ExportFailed`. Exports still
//! processing at start (a crash or a stop mid-way) are written again from the start.
//!
//! Exports never take the disk from the log: the writer checks its filesystem's free space
//! every MiB and fails the export (removing its partial file) before writing into the log's
//! reserve plus the exports' own (`--min-free-mb` + `--export-min-free-mb`). The tenant's
//! quotas ([`quota`]) are decided when an export is requested. The sweeper ([`sweep`]) deletes the files
//! of expired exports and the partial files of exports no longer being written, at start and
//! every `--export-sweep-secs`.

pub mod manifest;
pub mod quota;
pub mod rows;
pub mod sealed_file;
pub mod verify;
mod worker;

pub use worker::{run_worker, sweep, Swept};

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::audit_index::{AuditRef, Filter};
use auditmem_projections::exports::ExportView;
use auditmem_projections::{ChainPoint, ExportFormat, Named, Projections};
use rayon::prelude::*;

use crate::log::appender::Appender;
use crate::log::LogReader;
use crate::wire::audit::{AuditLogEntry, Personal};
use auditmem_projections::event::{AuditHead, KeyCache, Opened};
use auditmem_projections::seal::Keyring;
use auditmem_projections::AuditEntry;

/// Export files live in this subdirectory of the data dir (verify does not copy it).
pub const EXPORTS_DIR: &str = "exports";

/// Where a completed export's file lives.
pub fn file_path(dir: &Path, view: &ExportView) -> PathBuf {
    dir.join(format!("{}.{}", view.export_id, view.format.as_str()))
}

/// Where an export's file is written before it is complete.
fn part_path(dir: &Path, view: &ExportView) -> PathBuf {
    dir.join(format!("{}.{}.part", view.export_id, view.format.as_str()))
}

/// Counts what passes through to the file; `hasher` and `shown` take the download's bytes
/// ([`HashingWriter::show`]).
struct HashingWriter<W: Write> {
    inner: W,
    hasher: blake3::Hasher,
    bytes: u64,
    shown: u64,
}

impl<W: Write> HashingWriter<W> {
    /// Notes `bytes` as part of the download (hashed and counted, not written).
    fn show(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.shown += bytes.len() as u64;
    }

    /// Writes clear bytes: a clear frame stored, the same bytes shown.
    fn clear(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut framed = Vec::with_capacity(bytes.len() + 5);
        sealed_file::clear_frame(&mut framed, bytes);
        self.write_all(&framed)?;
        self.show(bytes);
        Ok(())
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
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

/// The rows of `refs` encoded: the bytes stored (frames, see [`sealed_file`]), the bytes a
/// tenant downloads (what the export's digest covers), and how many rows.
struct Part {
    stored: Vec<u8>,
    shown: Vec<u8>,
    rows: u64,
}

/// Rows of `refs` as file bytes (CSV records, or JSON objects joined by `,\n`): each row of a
/// sealed entry opened, written in full sealed under the entry's keys beside its erased form,
/// so the stored bytes hold no personal field in the clear.
fn encode_rows(
    log: &LogReader,
    ring: &dyn Keyring,
    refs: &[AuditRef],
    view: &ExportView,
) -> Result<Part, String> {
    let (format, with_chain) = (view.format, view.with_chain);
    // Rows are 300-400 bytes: sized once rather than grown by doubling.
    let capacity = refs.len() * 400;
    let mut stored = Vec::with_capacity(capacity + capacity / 2);
    let mut shown = Vec::with_capacity(capacity);
    // CSV rows go through two writers (rows as shown, rows erased) that keep what they wrote
    // for the part: each row is the bytes past the previous one's end.
    let mut csv = (
        rows::csv_writer(Vec::with_capacity(if format == ExportFormat::Csv {
            capacity
        } else {
            0
        })),
        0,
    );
    let mut csv_erased = (rows::csv_writer(Vec::new()), 0);
    let mut cell = Vec::new();
    let mut chunk = None;
    // Entries of one subject share their key set: its seal key is derived once a part.
    let mut keys = KeyCache::new(ring);
    let mut row = Vec::new();
    let mut erased_row = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        // One lookup per row, not a scan of the range (see `encode_chunk`).
        let got = log.audit_entry_from(r.seq, &mut chunk);
        let Some(head) = got.map_err(|e| e.to_string())? else {
            return Err(format!("seq {} holds no audit entry", r.seq));
        };
        let AuditHead {
            tenant_id,
            mut entry,
            sealed,
        } = head;
        let opened = keys
            .open_fields(tenant_id, entry.id, sealed.as_ref())
            .map_err(|e| e.to_string())?;
        if format.is_json_array() && i > 0 {
            sealed_file::clear_frame(&mut stored, b",\n");
            shown.extend_from_slice(b",\n");
        }
        let mut encode = |entry: &AuditEntry, personal: Personal, out: &mut Vec<u8>| {
            out.clear();
            match format {
                ExportFormat::Csv => {
                    let (w, end) = if personal == Personal::Opened {
                        &mut csv
                    } else {
                        &mut csv_erased
                    };
                    rows::write_csv_row_as(w, entry, personal, r, with_chain, &mut cell)?;
                    w.flush().map_err(|e| e.to_string())?;
                    let all = w.get_ref();
                    out.extend_from_slice(&all[*end..]);
                    *end = all.len();
                    Ok::<(), String>(())
                }
                ExportFormat::Json => serde_json::to_writer(
                    &mut *out,
                    &AuditLogEntry::exported_as(entry, personal, r, with_chain),
                )
                .map_err(|e| e.to_string()),
                ExportFormat::Ocsf => {
                    let row = serde_json::to_value(AuditLogEntry::exported_as(
                        entry, personal, r, with_chain,
                    ))
                    .map_err(|e| e.to_string())?;
                    let serde_json::Value::Object(row) = row else {
                        return Err("an export row is not a JSON object".to_string());
                    };
                    let event = crate::wire::ocsf::event(&row, tenant_id, entry.created_at, None);
                    serde_json::to_writer(&mut *out, &event).map_err(|e| e.to_string())
                }
            }
        };
        match opened {
            Opened::Plain => {
                encode(&entry, Personal::Plain, &mut row)?;
                sealed_file::clear_frame(&mut stored, &row);
            }
            Opened::Erased => {
                encode(&entry, Personal::Erased, &mut row)?;
                sealed_file::clear_frame(&mut stored, &row);
            }
            Opened::Open(p) => {
                encode(&entry, Personal::Erased, &mut erased_row)?;
                p.restore_entry(&mut entry);
                encode(&entry, Personal::Opened, &mut row)?;
                let ids = sealed.map(|s| s.keys).unwrap_or_default();
                match keys.key(&ids).map_err(|e| e.to_string())? {
                    Some(key) => sealed_file::row_frame(
                        &mut stored,
                        view.export_id,
                        r.seq,
                        key,
                        &ids,
                        &row,
                        &erased_row,
                    )?,
                    // Erased between opening the entry and deriving its key.
                    None => {
                        std::mem::swap(&mut row, &mut erased_row);
                        sealed_file::clear_frame(&mut stored, &row);
                    }
                }
            }
        }
        shown.extend_from_slice(&row);
    }
    Ok(Part {
        stored,
        shown,
        rows: refs.len() as u64,
    })
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

/// What a finished file holds: its rows, size and blake3, and where it starts and ends in the
/// tenant chain (exports that show the chain, with rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub records: u64,
    pub bytes: u64,
    pub blake3: [u8; 32],
    pub first: Option<ChainPoint>,
    pub last: Option<ChainPoint>,
}

/// What the writer must keep to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Free space the export's filesystem must keep, bytes: the log's reserve and the exports'.
    pub keep_free: u64,
}

/// How often the writer looks at its filesystem's free space, in bytes written. Between two
/// looks it writes at most this much, and up to as much again sits in its buffer: the
/// reserve it keeps is this far above `keep_free` (`SLACK`).
const SPACE_STEP: u64 = 1 << 20;
const SLACK: u64 = 2 * SPACE_STEP;

/// Free bytes of the filesystem holding `dir`, for an unprivileged writer.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(dir)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// What a tenant reads when its export stopped at the disk reserve (the figures go to the
/// server log: the service's disk is not the tenant's business).
pub const NO_SPACE: &str = "the export stopped: the service's disk is nearly full, and exports leave the room that is left to the audit log; retry later, or export a shorter range";

/// Fails the export when writing on could take its filesystem into the reserve.
fn check_space(dir: &Path, limits: &Limits) -> Result<(), String> {
    let free = free_bytes(dir).map_err(|e| format!("checking the disk's free space: {e}"))?;
    if free < limits.keep_free.saturating_add(SLACK) {
        tracing::warn!(
            free_mib = free >> 20,
            keep_free_mib = limits.keep_free >> 20,
            "an export stopped at the disk reserve"
        );
        return Err(NO_SPACE.into());
    }
    Ok(())
}

/// Writes the export file (see the module doc); on failure its partial file is removed.
pub fn write_file(
    log: &LogReader,
    projections: &Projections,
    dir: &Path,
    view: &ExportView,
    limits: &Limits,
) -> Result<Written, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating the exports dir: {e}"))?;
    let part = part_path(dir, view);
    let written = write_part(log, projections, dir, view, limits, &part);
    match written {
        Ok(w) => {
            std::fs::rename(&part, file_path(dir, view))
                .map_err(|e| format!("writing the export file: {e}"))
                .inspect_err(|_| {
                    let _ = std::fs::remove_file(&part);
                })?;
            Ok(w)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e)
        }
    }
}

/// Seqs read from the audit index at a time (8 bytes each; one pass over the tenant's index
/// range a window).
const WINDOW: usize = 1 << 19;
/// Rows encoded at a time, on every core.
const CHUNK: usize = 4096;
/// Encoded chunks that may wait for the writer (~1.6 MB each).
const AHEAD: usize = 2;

/// One chunk's encoded rows (one buffer per slice of 256, in order, with their counts), and its
/// first and last places in the tenant chain.
type Encoded = (Vec<Part>, Option<(ChainPoint, ChainPoint)>);

/// Encodes the rows of `seqs` (ascending). Reading, decoding and formatting entries dominates:
/// every core encodes a slice of rows into bytes of its own, and the caller only writes and
/// hashes them, in order.
///
/// Memory: an export holds one window of seqs and at most `AHEAD` + 2 chunks of encoded rows
/// at a time, whatever its range. Its entries are read with one lookup each, not by scanning the
/// range: sled 0.34 applies its cache limit (`--cache-mb`) only when one of its 256 LRU shards
/// has queued 64 page accesses, and a scan touches each page once, so a scan of a whole tenant
/// would keep most pages it read in memory (~300 MiB more for 1M entries). A lookup per row touches
/// each page once per row, and the cache stays within its limit (docs/PERFORMANCE.md, "CSV
/// export").
fn encode_chunk(
    log: &LogReader,
    projections: &Projections,
    seqs: &[u64],
    view: &ExportView,
) -> Result<Encoded, String> {
    let refs = projections.audit.at_seqs(seqs).map_err(|e| e.to_string())?;
    let refs: Vec<AuditRef> = refs
        .into_iter()
        .zip(seqs)
        .map(|(r, seq)| r.ok_or_else(|| format!("seq {seq} missing from the audit index")))
        .collect::<Result<_, _>>()?;
    let parts = refs
        .par_chunks(256)
        .map(|part| encode_rows(log, &*projections.keys, part, view))
        .collect::<Result<Vec<Part>, String>>()?;
    let ends = refs
        .first()
        .zip(refs.last())
        .map(|(a, b)| (point(a), point(b)));
    Ok((parts, ends))
}

fn write_part(
    log: &LogReader,
    projections: &Projections,
    dir: &Path,
    view: &ExportView,
    limits: &Limits,
    part: &Path,
) -> Result<Written, String> {
    check_space(dir, limits)?;
    let filter = Filter {
        tenant_id: view.tenant_id,
        action: None,
        from: view.start_time,
        to: view.end_time,
    };
    let file = File::create(part).map_err(|e| format!("creating the export file: {e}"))?;
    let mut out = HashingWriter {
        inner: BufWriter::with_capacity(1 << 20, file),
        hasher: blake3::Hasher::new(),
        bytes: 0,
        shown: 0,
    };
    let io = |e: std::io::Error| format!("writing the export file: {e}");
    let mut written = 0u64;
    let (mut first, mut last) = (None, None);
    sealed_file::start(&mut out).map_err(io)?;
    match view.format {
        ExportFormat::Csv => {
            let mut w = rows::csv_writer(Vec::new());
            rows::write_header(&mut w, view.with_chain).map_err(|e| e.to_string())?;
            let header = w.into_inner().map_err(|e| e.to_string())?;
            out.clear(&header).map_err(io)?;
        }
        ExportFormat::Json | ExportFormat::Ocsf => out.clear(b"[").map_err(io)?,
    }
    let mut flushed_to = 0u64;
    let mut space_checked_at = 0u64;
    // The seqs to export, a window at a time, each encoded a chunk at a time (`encode_chunk`)
    // on a thread of its own while this one writes and hashes the chunk before: at most
    // `AHEAD` encoded chunks wait for the writer. The encoder stops when the writer fails
    // (the channel closes).
    let encoded = std::thread::scope(|scope| -> Result<(), String> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Encoded, String>>(AHEAD);
        scope.spawn(move || {
            let mut after = None;
            loop {
                let seqs =
                    match projections
                        .audit
                        .in_log_order(&filter, after, view.request_seq, WINDOW)
                    {
                        Ok(seqs) => seqs,
                        Err(e) => {
                            let _ = tx.send(Err(format!("reading the audit index: {e}")));
                            return;
                        }
                    };
                for chunk in seqs.chunks(CHUNK) {
                    let encoded = encode_chunk(log, projections, chunk, view);
                    let failed = encoded.is_err();
                    if tx.send(encoded).is_err() || failed {
                        return;
                    }
                }
                match seqs.last() {
                    Some(&last) if seqs.len() == WINDOW => after = Some(last),
                    _ => return,
                }
            }
        });
        for chunk in rx {
            let (parts, ends) = chunk?;
            if let Some((a, b)) = ends {
                first.get_or_insert(a);
                last = Some(b);
            }
            for part in parts {
                if part.rows == 0 {
                    continue;
                }
                if view.format.is_json_array() && written > 0 {
                    out.clear(b",\n").map_err(io)?;
                }
                if out.bytes + part.stored.len() as u64 >= space_checked_at + SPACE_STEP {
                    check_space(dir, limits)?;
                    space_checked_at = out.bytes;
                }
                out.write_all(&part.stored).map_err(io)?;
                out.show(&part.shown);
                written += part.rows;
            }
            start_writeback(&mut out, &mut flushed_to).map_err(io)?;
        }
        Ok(())
    });
    encoded?;
    if view.format.is_json_array() {
        out.clear(b"]\n").map_err(io)?;
    }
    out.flush().map_err(io)?;
    let HashingWriter {
        inner,
        hasher,
        shown: bytes,
        ..
    } = out;
    let file = inner
        .into_inner()
        .map_err(|e| format!("writing the export file: {e}"))?;
    file.sync_all().map_err(io)?;
    let (first, last) = if view.with_chain {
        (first, last)
    } else {
        (None, None)
    };
    Ok(Written {
        records: written,
        bytes,
        blake3: *hasher.finalize().as_bytes(),
        first,
        last,
    })
}

fn point(r: &AuditRef) -> ChainPoint {
    ChainPoint {
        audit_id: r.id,
        chain_index: r.chain_index,
        hash: r.hash,
    }
}

/// Settings of the export worker.
#[derive(Clone, Debug)]
pub struct ExportSettings {
    pub dir: PathBuf,
    pub ttl: Duration,
    /// Test hook: wait this long before writing (lets a test stop the server mid-export).
    pub start_delay: Duration,
    pub quota: quota::Quota,
    /// Free space exports leave on their filesystem besides the log's own reserve, bytes.
    pub min_free_bytes: u64,
    /// How often the sweeper runs.
    pub sweep_every: Duration,
    /// The log is a cluster's stream: every node writes its own copy of every export (the
    /// file is a function of the log up to the request, so the copies are the same bytes) and
    /// the first outcome recorded wins (docs/SCALING.md, "Exports").
    pub clustered: bool,
}

impl ExportSettings {
    /// The settings `serve` was given; files go to `EXPORTS_DIR` in the data dir.
    pub fn from_args(args: &crate::config::ServeArgs) -> Self {
        const MIB: u64 = 1 << 20;
        ExportSettings {
            dir: args.data_dir.join(EXPORTS_DIR),
            ttl: Duration::from_secs(args.export_ttl_secs),
            start_delay: Duration::from_millis(args.export_start_delay_ms),
            quota: quota::Quota {
                max_files: args.export_max_files,
                max_bytes: args.export_max_bytes_mb.saturating_mul(MIB),
                max_per_hour: args.export_max_per_hour,
            },
            min_free_bytes: args.export_min_free_mb.saturating_mul(MIB),
            sweep_every: Duration::from_secs(args.export_sweep_secs.max(1)),
            clustered: args.cluster.backend() != crate::config::LogBackend::Sled,
        }
    }
}
