//! The export worker: it watches the log head and writes every export still processing (those
//! a restart found unfinished too), records each outcome, and sweeps expired and abandoned
//! files at start and every `--export-sweep-secs`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem_projections::exports::{ExportStatus, ExportView};
use auditmem_projections::{Event, ExportCompleted, ExportFailed, ExportFormat, Projections};

use super::{file_path, write_file, Exporter, Limits};
use crate::log::appender::{AppendError, Precondition, Rejection};
use crate::registry::ErrorCode;

/// The exports being written by this process (their partial files are not swept).
type Running = Arc<Mutex<HashSet<uuid::Uuid>>>;

/// Watches the log head and writes every export still processing, including those a restart
/// found unfinished; sweeps at start and every `sweep_every`; ends when the appender stops.
pub async fn run_worker(exporter: Exporter) {
    let mut head = exporter.appender.subscribe();
    let running: Running = Arc::default();
    // The first tick is at once: the sweep at start, before anything resumes.
    let mut sweeps = tokio::time::interval(exporter.settings.sweep_every);
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweeps.tick().await;
    sweep_logged(&exporter, &running).await;
    let mut copies_checked = std::time::Instant::now() - Duration::from_secs(1);
    loop {
        match exporter.projections.exports.processing() {
            Ok(views) => {
                for view in views {
                    start_export(&exporter, &running, view);
                }
            }
            Err(e) => tracing::error!(error = %e, "reading pending exports"),
        }
        // At most once a second: it reads every export's view.
        if exporter.settings.clustered && copies_checked.elapsed() >= Duration::from_secs(1) {
            copy_completed(&exporter, &running);
            copies_checked = std::time::Instant::now();
        }
        tokio::select! {
            changed = head.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            _ = sweeps.tick() => sweep_logged(&exporter, &running).await,
            // A cluster node also looks for copies to write while the log is quiet.
            _ = tokio::time::sleep(Duration::from_secs(1)), if exporter.settings.clustered => {}
        }
    }
}

/// In a cluster: starts writing this node's copy of each completed, unexpired export it does
/// not hold (recorded by another node, or before this node joined).
fn copy_completed(exporter: &Exporter, running: &Running) {
    let now = chrono::Utc::now().timestamp_micros();
    let views = match exporter.projections.exports.live_completed(now) {
        Ok(v) => v,
        Err(e) => return tracing::error!(error = %e, "reading completed exports"),
    };
    for view in views {
        if !file_path(&exporter.settings.dir, &view).exists() {
            start_export(exporter, running, view);
        }
    }
}

/// Writes `view`'s file on a task of its own, unless this process is writing it already.
fn start_export(exporter: &Exporter, running: &Running, view: ExportView) {
    let fresh = running
        .lock()
        .map(|mut r| r.insert(view.export_id))
        .unwrap_or(false);
    if fresh {
        let exporter = exporter.clone();
        let running = running.clone();
        tokio::spawn(async move { export_one(exporter, view, running).await });
    }
}

/// Keeps this node's copy of an export another node recorded only if it is the recorded file
/// (same blake3): a copy that differs is deleted, and downloads here answer 503.
fn keep_if_recorded(exporter: &Exporter, view: &ExportView, blake3: &[u8; 32]) {
    let recorded = exporter
        .projections
        .exports
        .get(&view.export_id)
        .ok()
        .flatten();
    let Some(recorded) = recorded else { return };
    match recorded.status {
        ExportStatus::Completed
            if recorded.file_blake3.as_deref() == Some(&hex::encode(blake3)) => {}
        ExportStatus::Completed => {
            tracing::error!(export_id = %view.export_id, "this node's copy of an export differs from the recorded file; deleted");
            let _ = std::fs::remove_file(file_path(&exporter.settings.dir, view));
        }
        _ => {
            let _ = std::fs::remove_file(file_path(&exporter.settings.dir, view));
        }
    }
}

async fn sweep_logged(exporter: &Exporter, running: &Running) {
    let (e, r) = (exporter.clone(), running.clone());
    let now = chrono::Utc::now().timestamp_micros();
    let swept =
        tokio::task::spawn_blocking(move || sweep(&e.settings.dir, &e.projections, &r, now))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    match swept {
        Ok(s) if s.files > 0 => {
            metrics::counter!("auditmem_exports_swept_total").increment(s.files);
            tracing::info!(files = s.files, bytes = s.bytes, "swept export files");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "sweeping export files"),
    }
}

/// What a sweep deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub files: u64,
    pub bytes: u64,
}

/// Deletes, in `dir`, the files of exports expired at `now` (their status stays `expired`,
/// their download 410), the partial files of exports not in `running` (failed, finished, or
/// to be written again from the start), and export files the log knows nothing of. Other
/// files are left alone.
pub fn sweep(
    dir: &Path,
    projections: &Projections,
    running: &Mutex<HashSet<uuid::Uuid>>,
    now: i64,
) -> std::io::Result<Swept> {
    let mut swept = Swept::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(swept),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (stem, partial) = match name.strip_suffix(".part") {
            Some(stem) => (stem, true),
            None => (name, false),
        };
        let Some((id, ext)) = stem.split_once('.') else {
            continue;
        };
        let (Ok(id), Ok(_)) = (uuid::Uuid::parse_str(id), ext.parse::<ExportFormat>()) else {
            continue;
        };
        let view = projections
            .exports
            .get(&id)
            .map_err(std::io::Error::other)?;
        // Held while deciding and deleting, so a writer cannot start on a partial file
        // between the two.
        let running = running.lock().unwrap_or_else(|p| p.into_inner());
        let delete = match (&view, partial) {
            (_, true) => !running.contains(&id),
            (None, false) => true,
            (Some(v), false) => v.status == ExportStatus::Failed || v.expired(now),
        };
        if delete {
            let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
            match std::fs::remove_file(entry.path()) {
                Ok(()) => {
                    swept.files += 1;
                    swept.bytes += bytes;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        drop(running);
    }
    Ok(swept)
}

async fn export_one(exporter: Exporter, view: ExportView, running: Running) {
    let settings = &exporter.settings;
    if !settings.start_delay.is_zero() {
        tokio::time::sleep(settings.start_delay).await;
    }
    metrics::gauge!("auditmem_exports_running").increment(1.0);
    let limits = Limits {
        keep_free: exporter
            .appender
            .space()
            .min_free_bytes()
            .saturating_add(settings.min_free_bytes),
    };
    let (e, v) = (exporter.clone(), view.clone());
    let result = tokio::task::spawn_blocking(move || {
        write_file(&e.log, &e.projections, &e.settings.dir, &v, &limits)
    })
    .await
    .unwrap_or_else(|e| Err(format!("export worker crashed: {e}")));
    metrics::gauge!("auditmem_exports_running").decrement(1.0);
    let now = chrono::Utc::now().timestamp_micros();
    let event = match result {
        Ok(w) => {
            metrics::counter!("auditmem_exports_total", "status" => "completed").increment(1);
            Event::ExportCompleted(ExportCompleted {
                export_id: view.export_id,
                tenant_id: view.tenant_id,
                records: w.records,
                bytes: w.bytes,
                blake3: w.blake3,
                completed_at: now,
                expires_at: now + settings.ttl.as_micros() as i64,
                first: w.first,
                last: w.last,
                formula_guard: view.format == ExportFormat::Csv,
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
    // The outcome is recorded once: in a cluster every node writes the export, and the first
    // outcome to land wins (the others' are refused here).
    let export_id = view.export_id;
    let still_processing: Precondition =
        Box::new(move |p: &Projections| match p.exports.get(&export_id) {
            Ok(Some(v)) if v.status != ExportStatus::Processing => Err(Rejection {
                code: ErrorCode::Conflict,
                message: "the export's outcome is recorded already".into(),
                retry_after: None,
            }),
            _ => Ok(()),
        });
    let blake3 = match &event {
        Event::ExportCompleted(c) => Some(c.blake3),
        _ => None,
    };
    let outcome = exporter
        .appender
        .append_checked(vec![event], still_processing)
        .await;
    match outcome {
        // Recorded: it no longer shows as processing, and its partial file (if any) may go.
        Ok(_) => {
            if let Ok(mut r) = running.lock() {
                r.remove(&view.export_id);
            }
        }
        // Another node recorded it first, or this was a copy of a completed export: this
        // node's file stays if it is the recorded one.
        Err(AppendError::Rejected(_)) => {
            match blake3 {
                Some(b) => keep_if_recorded(&exporter, &view, &b),
                None => {
                    let _ = std::fs::remove_file(file_path(&exporter.settings.dir, &view));
                }
            }
            if let Ok(mut r) = running.lock() {
                r.remove(&view.export_id);
            }
        }
        // The cluster's stream could not take it for now: written again and recorded once
        // the stream takes writes (the worker finds it still processing).
        Err(AppendError::ClusterUnavailable(e)) => {
            tracing::warn!(export_id = %view.export_id, error = %e, "the export's outcome waits for the cluster");
            if let Ok(mut r) = running.lock() {
                r.remove(&view.export_id);
            }
        }
        // Left as running, so that it is not started again before the next start.
        Err(e) => {
            tracing::error!(export_id = %view.export_id, error = %e, "could not record the export's outcome; it resumes at the next start")
        }
    }
}
