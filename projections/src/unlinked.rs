//! An unlinked file in a directory, made at its first write: where the projections keep what
//! they rebuild at every start and read through the page cache instead of holding on the heap
//! (the audit index's sealed blocks, the memories' contents). It has no name, so nothing of it
//! outlives the process.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[derive(Debug)]
pub struct UnlinkedFile {
    dir: PathBuf,
    file: OnceLock<File>,
}

impl UnlinkedFile {
    /// A file to be made in `dir` at the first write.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            file: OnceLock::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `bytes` at `at`, making the file first if it is not there yet; a failure to make
    /// it is the error of this write, and the next write tries again.
    pub fn write_at(&self, bytes: &[u8], at: u64) -> io::Result<()> {
        let file = match self.file.get() {
            Some(f) => f,
            None => {
                let made = tempfile::tempfile_in(&self.dir)?;
                // Two writers racing to make it: one file is kept, the other dropped unused.
                let _ = self.file.set(made);
                self.file
                    .get()
                    .ok_or_else(|| io::Error::other("the file was made but is not set"))?
            }
        };
        file.write_all_at(bytes, at)
    }

    /// Fills `buf` from `at`: only what a write put there.
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.file
            .get()
            .ok_or_else(|| io::Error::other("a read before the first write made the file"))?
            .read_exact_at(buf, at)
    }
}
