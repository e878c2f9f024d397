//! A full or read-only data disk: appends (and so every audited request) are refused with a
//! 503 envelope before anything is written, the service goes on by itself once space
//! returns, and the log verifies clean. The disk is a real filesystem of its own: a small
//! tmpfs mounted for the test, which needs root (CI runs as root; elsewhere the test says it
//! was skipped).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

/// A tmpfs of `size_mb` mounted on a fresh temporary dir, unmounted on drop.
pub(crate) struct Mount {
    pub(crate) dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Mount {
    /// `None` when this process may not mount (not root).
    pub(crate) fn tmpfs(size_mb: u64) -> Option<Mount> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: mounting a small filesystem needs root");
            return None;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("disk");
        std::fs::create_dir(&dir).expect("mkdir");
        mount(
            &["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"],
            &dir,
        );
        Some(Mount { dir, _tmp: tmp })
    }

    fn remount(&self, opts: &str) {
        mount(&["-o", &format!("remount,{opts}")], &self.dir);
    }

    pub(crate) fn free_bytes(&self) -> u64 {
        let st = rustix::fs::statvfs(&self.dir).expect("statvfs");
        st.f_bavail * st.f_frsize
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn mount(args: &[&str], dir: &Path) {
    let out = Command::new("mount")
        .args(args)
        .arg(dir)
        .output()
        .expect("run mount");
    assert!(
        out.status.success(),
        "mount {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ingest(s: &Server, tenant: &str, n: usize) -> (u16, Value) {
    let entries: Vec<Value> = (0..n)
        .map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "request_body": {"i": i}}))
        .collect();
    s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": entries})),
    )
}

/// Fills the disk with a file until `leave` bytes are free, or until it is full: the server
/// writes beside us (sled's background flush), so the space measured first may be gone.
pub(crate) fn fill(disk: &Mount, leave: u64) -> PathBuf {
    use std::io::Write;
    let path = disk.dir.join("filler");
    let mut left = disk.free_bytes().saturating_sub(leave);
    let mut file = std::fs::File::create(&path).expect("create the filler");
    let chunk = vec![0u8; 1 << 20];
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        match file.write_all(&chunk[..n]) {
            Ok(()) => left -= n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("write the filler: {e}"),
        }
    }
    path
}

/// Stops the server and checks the log with `auditmem verify`: exit 0.
fn stop_and_verify(s: &mut Server, data_dir: &Path) {
    s.stop();
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(data_dir)], &[]);
    assert_eq!(code, 0, "{out}{err}");
}

fn assert_refused(resp: &(u16, Value), why: &str) {
    assert_error(resp, 503, 5030);
    let message = resp.1["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(why), "{message}");
    assert!(message.ends_with("; nothing was written"), "{message}");
}

#[test]
fn a_full_disk_refuses_appends_with_503_and_they_resume_when_space_returns() {
    let Some(disk) = Mount::tmpfs(96) else { return };
    let data_dir = disk.dir.join("data");
    let mut s = Server::start_on_with(&data_dir, &["--min-free-mb", "24"]);
    let (tenant, key) = s.tenant_with_key("pro");
    let (status, v) = ingest(&s, &tenant, 50);
    assert_eq!(status, 200, "{v}");
    let before = s.head();

    let filler = fill(&disk, 8 << 20);
    // Ingestion, a read (audited, so it appends too) and an admin write are all refused.
    let full = ingest(&s, &tenant, 50);
    assert_refused(&full, "the data disk is full (");
    let message = full.1["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(" MiB free, writes need 24 MiB)"),
        "{message}"
    );
    assert_refused(&s.get("/v1/audit/logs", &key), "the data disk is full");
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/tenants",
        Some(json!({"name": "later", "plan": "free"})),
    );
    assert_refused(&(status, v), "the data disk is full");
    // Nothing reached the log: its head has not moved.
    assert_eq!(s.head(), before);

    std::fs::remove_file(&filler).expect("free the space");
    let (status, v) = ingest(&s, &tenant, 50);
    assert_eq!(status, 200, "the appender resumes by itself: {v}");
    let (status, list) = s.get("/v1/audit/logs?action=gateway.chat&page_size=1", &key);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["data"]["total"], json!(100), "{list}");
    assert!(s.head().0 > before.0);

    stop_and_verify(&mut s, &data_dir);
}

#[test]
fn a_read_only_data_dir_is_refused_at_start_and_by_the_guard() {
    let Some(disk) = Mount::tmpfs(64) else { return };
    let data_dir = disk.dir.join("data");
    let mut s = Server::start_on_with(&data_dir, &["--min-free-mb", "16"]);
    let (tenant, _key) = s.tenant_with_key("pro");
    assert_eq!(ingest(&s, &tenant, 10).0, 200);
    s.stop();

    // A mount cannot turn read-only under open files (EBUSY); the kernel does it on I/O
    // errors (ext4's errors=remount-ro). The guard reads the mount's flag before each group,
    // so the check itself is exercised on a read-only mount.
    disk.remount("ro");
    let guard = auditmem::log::appender::SpaceGuard::new(&data_dir, 0);
    assert_eq!(
        guard.check(),
        Err("the data dir is on a read-only filesystem; nothing was written".to_string())
    );
    // A server cannot start on it, and says why.
    let (code, out, err) = cli(
        &[
            "serve",
            "--data-dir",
            path_str(&data_dir),
            "--listen",
            "127.0.0.1:0",
            "--signing-key",
            path_str(&s.signing_key()),
            "--checkpoints-file",
            path_str(&s.checkpoints_file()),
        ],
        &[],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!(
            "data dir {} is on a read-only filesystem: serving appends to its log",
            data_dir.display()
        )),
        "{err}"
    );
    // verify only reads.
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(&data_dir)], &[]);
    assert_eq!(code, 0, "{out}{err}");

    disk.remount("rw");
    assert_eq!(guard.check(), Ok(()));
    s.spawn();
    assert_eq!(ingest(&s, &tenant, 10).0, 200);
    stop_and_verify(&mut s, &data_dir);
}

#[test]
fn a_disk_filled_past_the_guard_fails_writes_and_a_restart_recovers_everything_acknowledged() {
    // Without the reserve sled itself meets ENOSPC: it turns that into a permanent error of
    // the open database, so the appender refuses every later write until a restart.
    let Some(disk) = Mount::tmpfs(64) else { return };
    let data_dir = disk.dir.join("data");
    let mut s = Server::start_on_with(&data_dir, &["--min-free-mb", "0"]);
    let (tenant, key) = s.tenant_with_key("pro");
    assert_eq!(ingest(&s, &tenant, 50).0, 200);
    let filler = fill(&disk, 0);
    let mut acknowledged = 50;
    let mut refused = None;
    for _ in 0..200 {
        match ingest(&s, &tenant, 100) {
            (200, _) => acknowledged += 100,
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    let refused = refused.expect("a full disk fails a write");
    assert_error(&refused, 503, 5030);
    assert_eq!(
        refused.1["message"],
        json!(
            "a write to the log failed; the log accepts writes again once the service is restarted"
        )
    );
    // Still refused after space returns: the open database stays failed.
    std::fs::remove_file(&filler).expect("free the space");
    assert_error(&ingest(&s, &tenant, 1), 503, 5030);
    s.kill();
    s.spawn();
    let (status, list) = s.get("/v1/audit/logs?action=gateway.chat&page_size=1", &key);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["data"]["total"], json!(acknowledged), "{list}");
    stop_and_verify(&mut s, &data_dir);
}
