//! The memories' contents, held off the heap: appended to an unlinked file in the spill
//! directory and read back with `pread` when a memory is shown (without a spill directory,
//! as with `--vector-spill-rows 0`, they stay on the heap). The memories projection writes
//! a sealed memory's content here only sealed (`memories::sealing`): the file is on disk.
//!
//! On the heap a memory's content would be its largest part (its state takes 96 bytes, a
//! content up to 10,000 characters), and it is read only for the few memories a list, a search
//! or a history answers with: a `pread` from the page cache costs about a microsecond each.
//! Texts are gathered in a tail on the heap and written `TAIL_BYTES` at a time; a write
//! that fails (a full disk) leaves them in the tail, where they are still read from, and is
//! tried again at the next write, so a failing disk costs memory, never a content. Like the
//! vector tables' spilled rows, the file is rebuilt from the stored states at every start, so
//! nothing in it is trusted across restarts. A content that changes is appended again; the old
//! bytes stay in the file until the next start.

use std::io;
use std::path::Path;

use crate::unlinked::UnlinkedFile;

/// Texts gathered on the heap before one write (small in tests, so that they write).
const TAIL_BYTES: usize = if cfg!(test) { 256 } else { 64 * 1024 };

/// Where a text is: its offset in the stream of every text appended, and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextRef {
    pub at: u64,
    pub len: u32,
}

#[derive(Debug, Default)]
pub struct Texts {
    /// `None`: every text stays in the tail, on the heap.
    file: Option<UnlinkedFile>,
    /// Bytes of the stream in the file: `0..stored`.
    stored: u64,
    /// The bytes after them.
    tail: Vec<u8>,
}

impl Texts {
    /// Texts written to a file in `dir`, or kept on the heap without one.
    pub fn new(dir: Option<&Path>) -> Self {
        Self {
            file: dir.map(UnlinkedFile::in_dir),
            ..Self::default()
        }
    }

    /// Appends `text`; where it is, to [`Texts::read`] it back.
    pub fn push(&mut self, text: &str) -> TextRef {
        self.push_bytes(text.as_bytes())
    }

    /// Appends `bytes`; where they are, to [`Texts::read_bytes`] them back.
    pub fn push_bytes(&mut self, text: &[u8]) -> TextRef {
        let at = self.stored + self.tail.len() as u64;
        self.tail.extend_from_slice(text);
        if self.tail.len() >= TAIL_BYTES {
            if let Some(file) = &self.file {
                // A failure keeps the tail, readable as it is, for the next push to write.
                if file.write_at(&self.tail, self.stored).is_ok() {
                    self.stored += self.tail.len() as u64;
                    self.tail.clear();
                }
            }
        }
        TextRef {
            at,
            // Contents are limited far below 4 GiB (the interface's content length).
            len: u32::try_from(text.len()).unwrap_or(u32::MAX),
        }
    }

    pub fn read(&self, r: TextRef) -> io::Result<String> {
        String::from_utf8(self.read_bytes(r)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    pub fn read_bytes(&self, r: TextRef) -> io::Result<Vec<u8>> {
        let len = r.len as usize;
        let bytes = if r.at >= self.stored {
            let from = (r.at - self.stored) as usize;
            self.tail
                .get(from..from + len)
                .ok_or_else(|| io::Error::other(format!("text at {} is past the end", r.at)))?
                .to_vec()
        } else {
            let file = self
                .file
                .as_ref()
                .ok_or_else(|| io::Error::other("texts file missing"))?;
            let mut buf = vec![0u8; len];
            file.read_at(&mut buf, r.at)?;
            buf
        };
        Ok(bytes)
    }

    /// Bytes written to the file so far.
    pub fn in_file(&self) -> u64 {
        self.stored
    }

    /// Bytes appended so far, in the file and the tail.
    pub fn len(&self) -> u64 {
        self.stored + self.tail.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_read_back_from_the_file_and_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut t = Texts::new(Some(dir.path()));
        let texts: Vec<String> = (0..3_000)
            .map(|i| format!("memory {i}: {}", "é".repeat(i % 40)))
            .collect();
        let refs: Vec<TextRef> = texts.iter().map(|s| t.push(s)).collect();
        assert!(t.stored > 0, "some were written");
        assert!(!t.tail.is_empty(), "the last are still in the tail");
        for (s, r) in texts.iter().zip(&refs) {
            assert_eq!(&t.read(*r).expect("read"), s);
        }
        let empty = t.push("");
        assert_eq!(t.read(empty).expect("read"), "");
        let total: usize = texts.iter().map(String::len).sum();
        assert_eq!(t.len(), total as u64);
        let past = TextRef {
            at: t.len(),
            len: 1,
        };
        assert!(
            t.read(past).is_err(),
            "past the end is an error, not a text"
        );
    }

    #[test]
    fn without_a_directory_texts_stay_on_the_heap() {
        let mut t = Texts::new(None);
        let refs: Vec<TextRef> = (0..100).map(|i| t.push(&format!("text {i}"))).collect();
        assert_eq!((t.stored, t.file.is_none()), (0, true));
        assert_eq!(t.read(refs[42]).expect("read"), "text 42");
    }

    #[test]
    fn a_failed_write_keeps_the_texts_in_the_tail() {
        let mut t = Texts::new(Some(Path::new("/nonexistent/auditmem-texts")));
        let big = "x".repeat(TAIL_BYTES);
        let a = t.push("first");
        let b = t.push(&big);
        assert_eq!(t.stored, 0, "nothing written");
        assert_eq!(t.read(a).expect("read"), "first");
        assert_eq!(t.read(b).expect("read"), big);
        // A directory that works again takes the tail at the next push.
        let dir = tempfile::tempdir().expect("tempdir");
        t.file = Some(UnlinkedFile::in_dir(dir.path()));
        let c = t.push(&big);
        assert_eq!(t.stored, t.len(), "all written");
        assert_eq!(t.read(a).expect("read"), "first");
        assert_eq!(t.read(c).expect("read"), big);
    }
}
