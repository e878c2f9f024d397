//! An export file as stored: the bytes a tenant downloads, with every row of a sealed audit
//! entry held sealed under that entry's keys, so no file under the exports dir holds a
//! personal field in the clear, and a row whose subject is erased downloads erased with no
//! rewrite of the file.
//!
//! The file is [`MAGIC`] then frames, each a tag byte and little-endian lengths:
//!
//! ```text
//! b'C' len:u32 bytes                       clear bytes (header, separators, rows of entries
//!                                          that predate encryption, erased rows)
//! b'S' seq:u64 len:u32 erased len:u32 sealed
//!                                          a row: `sealed` (msgpack `Sealed`, bound to
//!                                          `export/v1 || export id || seq`) opens to the row
//!                                          as written; `erased` is the same row with its
//!                                          personal fields null and `"erased": true`
//! ```
//!
//! What a tenant downloads is each frame's bytes in order: clear bytes as they are, a row
//! opened, or its erased form once one of its keys is gone. The export's size and blake3 (its
//! `ExportCompleted`, its signed manifest) are those of the download while nothing in it is
//! erased; after an erasure the rows' clear fields and chain are unchanged (`verify --export`
//! still checks the chain), only the file digest differs from the one signed.

use std::io::{Read, Write};

use auditmem_projections::seal::{KeyError, Keyring, SealKey, Sealed};
use uuid::Uuid;

/// The first bytes of a stored export file.
pub const MAGIC: &[u8] = b"auditmem-export-sealed/v1\n";

/// The associated data a row is sealed with: the export and the entry's log position.
pub fn row_aad(export_id: Uuid, seq: u64) -> Vec<u8> {
    let mut aad = Vec::with_capacity(9 + 16 + 8);
    aad.extend_from_slice(b"export/v1");
    aad.extend_from_slice(export_id.as_bytes());
    aad.extend_from_slice(&seq.to_be_bytes());
    aad
}

/// Appends a clear frame holding `bytes` to `out`.
pub fn clear_frame(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    out.push(b'C');
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Appends a sealed row frame to `out`: `row` sealed under `key` (of `keys`), `erased` clear.
pub fn row_frame(
    out: &mut Vec<u8>,
    export_id: Uuid,
    seq: u64,
    key: &SealKey,
    keys: &[auditmem_projections::seal::KeyId],
    row: &[u8],
    erased: &[u8],
) -> Result<(), String> {
    let sealed = Sealed::seal(key, keys, &row_aad(export_id, seq), row);
    let sealed = rmp_serde::to_vec(&sealed).map_err(|e| e.to_string())?;
    out.push(b'S');
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(erased.len() as u32).to_le_bytes());
    out.extend_from_slice(erased);
    out.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
    out.extend_from_slice(&sealed);
    Ok(())
}

/// Reads a stored export file and gives the bytes a tenant downloads, a batch at a time.
pub struct Opener<R: Read> {
    src: R,
    export_id: Uuid,
    /// A file written before exports were stored sealed (no [`MAGIC`]): its bytes are the
    /// download as they are, starting with these.
    legacy: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("reading the export file: {0}")]
    Io(#[from] std::io::Error),
    #[error("the export file is not in the stored format: {0}")]
    Format(String),
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl<R: Read> Opener<R> {
    /// Reads the file's first bytes: [`MAGIC`], or the start of a file of an earlier build.
    pub fn new(mut src: R, export_id: Uuid) -> Result<Self, OpenError> {
        let mut head = Vec::with_capacity(MAGIC.len());
        (&mut src).take(MAGIC.len() as u64).read_to_end(&mut head)?;
        let legacy = (head != MAGIC).then_some(head);
        Ok(Opener {
            src,
            export_id,
            legacy,
        })
    }

    fn u32(&mut self) -> Result<usize, OpenError> {
        let mut b = [0u8; 4];
        self.src.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b) as usize)
    }

    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, OpenError> {
        let mut v = Vec::new();
        (&mut self.src).take(n as u64).read_to_end(&mut v)?;
        if v.len() != n {
            return Err(OpenError::Format("a frame ends early".into()));
        }
        Ok(v)
    }

    /// Appends the download bytes of the next frames to `out` until it holds `at_least`
    /// bytes; `false` at the end of the file.
    pub fn fill(
        &mut self,
        ring: &dyn Keyring,
        out: &mut Vec<u8>,
        at_least: usize,
    ) -> Result<bool, OpenError> {
        if let Some(head) = &mut self.legacy {
            out.append(head);
            let want = at_least.saturating_sub(out.len()).min(1 << 20);
            let n = (&mut self.src).take(want as u64).read_to_end(out)?;
            return Ok(n > 0 || want == 0);
        }
        while out.len() < at_least {
            let mut tag = [0u8; 1];
            match self.src.read(&mut tag)? {
                0 => return Ok(false),
                _ => match tag[0] {
                    b'C' => {
                        let n = self.u32()?;
                        out.extend_from_slice(&self.bytes(n)?);
                    }
                    b'S' => {
                        let mut seq = [0u8; 8];
                        self.src.read_exact(&mut seq)?;
                        let seq = u64::from_le_bytes(seq);
                        let n = self.u32()?;
                        let erased = self.bytes(n)?;
                        let n = self.u32()?;
                        let sealed: Sealed = rmp_serde::from_slice(&self.bytes(n)?)
                            .map_err(|e| OpenError::Format(e.to_string()))?;
                        match sealed.open_with(ring, &row_aad(self.export_id, seq))? {
                            Some(row) => out.extend_from_slice(&row),
                            None => out.extend_from_slice(&erased),
                        }
                    }
                    other => return Err(OpenError::Format(format!("unknown frame tag {other}"))),
                },
            }
        }
        Ok(true)
    }
}

/// The whole download of a stored export file (tests, small files).
pub fn open_all(bytes: &[u8], export_id: Uuid, ring: &dyn Keyring) -> Result<Vec<u8>, OpenError> {
    let mut o = Opener::new(bytes, export_id)?;
    let mut out = Vec::new();
    while o.fill(ring, &mut out, usize::MAX)? {}
    Ok(out)
}

/// Writes `MAGIC` to a new stored file.
pub fn start<W: Write>(w: &mut W) -> std::io::Result<()> {
    w.write_all(MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use auditmem_projections::seal::{MemoryKeyring, Subject};

    #[test]
    fn a_stored_file_downloads_its_rows_opened_or_erased_and_holds_none_in_the_clear() {
        let ring = MemoryKeyring::default();
        let alice = ring
            .key_of(&Subject::User(Uuid::nil(), "alice".into()))
            .expect("key");
        let key = ring.seal_key(&[alice]).expect("ring").expect("live");
        let export = Uuid::now_v7();
        let mut file = MAGIC.to_vec();
        clear_frame(&mut file, b"id,user_agent\n");
        row_frame(
            &mut file,
            export,
            7,
            &key,
            &[alice],
            b"1,alice-phone\n",
            b"1,\n",
        )
        .expect("row");
        clear_frame(&mut file, b"2,old-client\n");
        assert!(!file.windows(11).any(|w| w == b"alice-phone"));
        assert_eq!(
            open_all(&file, export, &ring).expect("open"),
            b"id,user_agent\n1,alice-phone\n2,old-client\n"
        );
        // Another export's file (another place) does not open.
        assert!(open_all(&file, Uuid::now_v7(), &ring).is_err());
        assert_eq!(ring.destroy(&[alice]).expect("destroy"), 1);
        assert_eq!(
            open_all(&file, export, &ring).expect("open"),
            b"id,user_agent\n1,\n2,old-client\n"
        );
        // A file written before files were stored sealed downloads as it is.
        let old = b"id,user_agent\n3,x\n";
        assert_eq!(open_all(old, export, &ring).expect("open"), old);
        assert_eq!(open_all(b"", export, &ring).expect("open"), b"");
        // A cut file is an error, not a shorter download.
        assert!(open_all(&file[..file.len() - 3], export, &ring).is_err());
    }
}
