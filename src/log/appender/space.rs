//! The guard of the data dir's free space: appends are refused before they touch the disk.

use std::path::{Path, PathBuf};

/// Refuses appends before they touch the disk when its filesystem has less than a reserve
/// free or is mounted read-only. sled turns a failed write into a permanent error of the
/// whole database (and our appender then refuses everything until a restart), so running
/// out of space must be caught before sled meets it: the reserve leaves room for the group
/// being written, a new 8 MiB segment and sled's snapshot.
#[derive(Clone, Debug)]
pub struct SpaceGuard {
    dir: PathBuf,
    min_free_bytes: u64,
}

impl SpaceGuard {
    pub fn new(dir: &Path, min_free_bytes: u64) -> Self {
        Self {
            dir: dir.to_path_buf(),
            min_free_bytes,
        }
    }

    /// Whether the filesystem of `dir` is mounted read-only.
    pub fn read_only(dir: &Path) -> std::io::Result<bool> {
        let st = rustix::fs::statvfs(dir)?;
        Ok(st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
    }

    /// The free space the log keeps, bytes (`--min-free-mb`).
    pub fn min_free_bytes(&self) -> u64 {
        self.min_free_bytes
    }

    /// Why appends are refused now, if they are: the filesystem is read-only, below the
    /// reserve, or cannot be asked.
    pub fn refusal(&self) -> Option<String> {
        let st = match rustix::fs::statvfs(&self.dir) {
            Ok(st) => st,
            Err(e) => return Some(format!("cannot check the data dir's free space: {e}")),
        };
        if st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
            return Some("the data dir is on a read-only filesystem".into());
        }
        let free = st.f_bavail.saturating_mul(st.f_frsize);
        (free < self.min_free_bytes).then(|| {
            format!(
                "the data disk is full ({} MiB free, writes need {} MiB)",
                free >> 20,
                self.min_free_bytes.div_ceil(1 << 20)
            )
        })
    }

    /// `Err` with the message for the caller when an append must not be tried now.
    pub fn check(&self) -> Result<(), String> {
        match self.refusal() {
            Some(why) => Err(format!("{why}; nothing was written")),
            None => Ok(()),
        }
    }
}
