//! The witness's state dir:
//!
//! - `witness.key`: the Ed25519 private key, 64 hex digits, mode 0600, created at first use.
//! - `lock`: held (`flock`, exclusive) by the serving process, so two witnesses never share
//!   one state: both would cosign from the same recorded size.
//! - `logs/<hex SHA-256 of the origin>.json`: per log, the latest cosigned checkpoint:
//!   `{"origin", "size", "root" (base64), "checkpoint" (the signed note as received)}`. It is
//!   replaced atomically (temporary file, fsync, rename, fsync of the directory), so a crash
//!   leaves the old record or the new one, never a torn one and never a lost update that was
//!   answered.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::prelude::{Engine as _, BASE64_STANDARD};
use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha256};
use tlog_tiles::Hash;

const KEY_FILE: &str = "witness.key";
const LOCK_FILE: &str = "lock";
const LOGS_DIR: &str = "logs";

/// The latest cosigned tree of one log.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Record {
    pub size: u64,
    pub root: Hash,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RecordFile {
    origin: String,
    size: u64,
    root: String,
    checkpoint: String,
}

/// Makes `dir`'s entries (a new or renamed file) durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` through a temporary file: after a crash `path` holds its old
/// content or `bytes`, whole.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a state file has no directory"))?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// Loads the witness key from `state_dir`, creating it (and the dir) at first use.
pub fn load_or_create_key(state_dir: &Path) -> anyhow::Result<SigningKey> {
    let path = state_dir.join(KEY_FILE);
    let read = |path: &Path| -> anyhow::Result<SigningKey> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the witness key {}", path.display()))?;
        let bytes: [u8; 32] = hex::decode(text.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .with_context(|| format!("the witness key {} is not 32 hex bytes", path.display()))?;
        Ok(SigningKey::from_bytes(&bytes))
    };
    if path.exists() {
        return read(&path);
    }
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating the state dir {}", state_dir.display()))?;
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    // Written whole under a temporary name, then linked in place: a link fails when the key
    // exists, so a concurrent first start (`pubkey` and `serve`) keeps one key, and a crash
    // never leaves a half-written key behind.
    let tmp = state_dir.join(format!("{KEY_FILE}.tmp.{}", std::process::id()));
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let written = (|| -> std::io::Result<()> {
        let mut f = opts.open(&tmp)?;
        f.write_all(hex::encode(key.to_bytes()).as_bytes())?;
        f.sync_all()
    })();
    written.with_context(|| format!("writing the witness key {}", tmp.display()))?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(state_dir).context("syncing the state dir")?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
        Err(e) => Err(e).with_context(|| format!("creating the witness key {}", path.display())),
    }
}

/// The exclusive lock on a state dir, held while the value lives.
pub struct StateLock {
    _file: File,
}

/// Takes the state dir's lock, or fails at once when another process holds it.
pub fn lock(state_dir: &Path) -> anyhow::Result<StateLock> {
    std::fs::create_dir_all(state_dir.join(LOGS_DIR))
        .with_context(|| format!("creating the state dir {}", state_dir.display()))?;
    let path = state_dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |e| {
            anyhow::anyhow!(
                "another witness holds the state dir {} ({e})",
                state_dir.display()
            )
        },
    )?;
    Ok(StateLock { _file: file })
}

/// The record file of `origin`.
pub fn record_path(state_dir: &Path, origin: &str) -> PathBuf {
    let name = hex::encode(Sha256::digest(origin.as_bytes()));
    state_dir.join(LOGS_DIR).join(format!("{name}.json"))
}

/// The recorded tree of `origin`, `None` if it was never cosigned.
pub fn load_record(state_dir: &Path, origin: &str) -> anyhow::Result<Option<Record>> {
    let path = record_path(state_dir, origin);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let file: RecordFile = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a witness record", path.display()))?;
    anyhow::ensure!(
        file.origin == origin,
        "{} records the origin {:?}, not {origin:?}",
        path.display(),
        file.origin
    );
    let root = Hash::parse_hash(&file.root)
        .with_context(|| format!("{} has a malformed root", path.display()))?;
    Ok(Some(Record {
        size: file.size,
        root,
    }))
}

/// Records `record` (from the signed `checkpoint`) as `origin`'s latest, durably.
pub fn save_record(
    state_dir: &Path,
    origin: &str,
    record: Record,
    checkpoint: &[u8],
) -> std::io::Result<()> {
    let file = RecordFile {
        origin: origin.to_string(),
        size: record.size,
        root: BASE64_STANDARD.encode(record.root.0),
        // The note was checked to be UTF-8 when it was parsed.
        checkpoint: String::from_utf8_lossy(checkpoint).into_owned(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(&record_path(state_dir, origin), &bytes, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_replace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let _lock = lock(dir.path()).expect("lock");
        assert_eq!(load_record(dir.path(), "example.com/a").ok(), Some(None));
        let r1 = Record {
            size: 3,
            root: Hash([3; 32]),
        };
        save_record(dir.path(), "example.com/a", r1, b"note\n").expect("save");
        let r2 = Record {
            size: 9,
            root: Hash([9; 32]),
        };
        save_record(dir.path(), "example.com/a", r2, b"note\n").expect("save");
        assert_eq!(
            load_record(dir.path(), "example.com/a").ok(),
            Some(Some(r2))
        );
        assert_eq!(load_record(dir.path(), "example.com/b").ok(), Some(None));
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path().join(LOGS_DIR))
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn the_lock_is_exclusive_and_the_key_stays() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = lock(dir.path()).expect("lock");
        assert!(lock(dir.path()).is_err());
        drop(held);
        assert!(lock(dir.path()).is_ok());
        let k1 = load_or_create_key(dir.path()).expect("creates");
        let k2 = load_or_create_key(dir.path()).expect("loads");
        assert_eq!(k1.to_bytes(), k2.to_bytes());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
