//! The key-encryption key (KEK) and the three wrapped forms every key store holds, the same
//! bytes in a key directory's files and in a cluster's JetStream store:
//! - the check value, [`CHECK`] sealed under the KEK, so a wrong KEK is refused at start
//!   instead of making every sealed value read as erased;
//! - a wrapped data key: `[subject digest, sealed key]`, the key sealed under the KEK and bound
//!   to its id and its subject's digest (moved to another id or subject, it does not open);
//! - a subject record: `(subject, key id)` sealed under the KEK, so no scope id is readable in
//!   a key store.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use auditmem_projections::seal::{
    fill_random, DataKey, KeyId, SealKey, Sealed, Subject, KEY_BYTES,
};
use zeroize::Zeroizing;

/// What the check value holds, sealed under the KEK.
const CHECK: &[u8] = b"auditmem key-encryption key";
const CHECK_AAD: &[u8] = b"kek.check";
const SUBJECT_AAD: &[u8] = b"subject";

/// The key-encryption key: 32 bytes, stored as 64 hex digits in its file.
pub struct Kek {
    key: SealKey,
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum KekError {
    #[error("cannot read the key-encryption key {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the key-encryption key {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a key-encryption key (64 hex digits)")]
    Malformed { path: PathBuf },
}

impl Kek {
    /// Reads the KEK from `path`.
    pub fn load(path: &Path) -> Result<Kek, KekError> {
        let text = Zeroizing::new(fs::read_to_string(path).map_err(|source| KekError::Read {
            path: path.to_path_buf(),
            source,
        })?);
        let bytes = parse_hex32(text.trim()).ok_or_else(|| KekError::Malformed {
            path: path.to_path_buf(),
        })?;
        Ok(Kek {
            key: SealKey::from_bytes(*bytes),
            path: path.to_path_buf(),
        })
    }

    /// Generates a new KEK and writes it to `path` (mode 0600; its directory created as the
    /// signing key's is), failing if the file exists.
    pub fn generate(path: &Path) -> Result<Kek, KekError> {
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        fill_random(bytes.as_mut());
        let hex = Zeroizing::new(hex(bytes.as_ref()));
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::create_dir_all(dir)?;
            }
            let mut opts = fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(path)?;
            f.write_all(hex.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            sync_parent(path)
        };
        write().map_err(|source| KekError::Write {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Kek {
            key: SealKey::from_bytes(*bytes),
            path: path.to_path_buf(),
        })
    }

    /// The file the KEK was read from or written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn wrap(&self, aad: &[u8], plaintext: &[u8]) -> Sealed {
        Sealed::seal(&self.key, &[], aad, plaintext)
    }

    fn unwrap(&self, aad: &[u8], sealed: &Sealed) -> Option<Zeroizing<Vec<u8>>> {
        sealed.open(&self.key, aad).ok()
    }

    /// A new check value of this KEK.
    pub fn check_value(&self) -> Vec<u8> {
        encode(&self.wrap(CHECK_AAD, CHECK))
    }

    /// Whether `bytes` is a check value of this KEK.
    pub fn opens_check(&self, bytes: &[u8]) -> bool {
        rmp_serde::from_slice::<Sealed>(bytes)
            .ok()
            .and_then(|s| self.unwrap(CHECK_AAD, &s))
            .is_some_and(|v| v.as_slice() == CHECK)
    }

    /// `key`, wrapped as data key `id` of the subject with `digest`.
    pub fn wrap_key(&self, id: &KeyId, digest: &[u8; 32], key: &DataKey) -> Vec<u8> {
        let wrapped = self.wrap(&key_aad(id, digest), key.expose());
        // Byte strings and a sealed value: the encoding cannot fail.
        rmp_serde::to_vec(&(serde_bytes::Bytes::new(digest), &wrapped)).unwrap_or_default()
    }

    /// The data key `id` and its subject's digest from its wrapped form; `Err` says why not
    /// (not a wrapped key, or not one this KEK wrapped as `id`).
    pub fn unwrap_key(&self, id: &KeyId, bytes: &[u8]) -> Result<([u8; 32], DataKey), String> {
        let (digest, sealed): (serde_bytes::ByteBuf, Sealed) =
            rmp_serde::from_slice(bytes).map_err(|e| format!("not a wrapped data key: {e}"))?;
        let digest: [u8; 32] = digest
            .as_slice()
            .try_into()
            .map_err(|_| "a wrapped data key with a malformed subject digest".to_string())?;
        let plain = self
            .unwrap(&key_aad(id, &digest), &sealed)
            .ok_or_else(|| "the key-encryption key does not open this data key".to_string())?;
        let key: [u8; KEY_BYTES] = plain
            .as_slice()
            .try_into()
            .map_err(|_| "a wrapped value that is not a data key".to_string())?;
        Ok((digest, DataKey::from_bytes(key)))
    }

    /// The subject record naming `id` as `subject`'s key.
    pub fn wrap_subject(&self, subject: &Subject, id: &KeyId) -> Vec<u8> {
        // Strings, uuids and bytes: the encoding cannot fail.
        let plain = Zeroizing::new(rmp_serde::to_vec(&(subject, id)).unwrap_or_default());
        encode(&self.wrap(SUBJECT_AAD, &plain))
    }

    /// The subject and key id of a subject record; `Err` says why not.
    pub fn unwrap_subject(&self, bytes: &[u8]) -> Result<(Subject, KeyId), String> {
        let sealed: Sealed =
            rmp_serde::from_slice(bytes).map_err(|e| format!("not a subject record: {e}"))?;
        let plain = self.unwrap(SUBJECT_AAD, &sealed).ok_or_else(|| {
            "the key-encryption key does not open this subject record".to_string()
        })?;
        rmp_serde::from_slice(&plain).map_err(|e| format!("not a subject record: {e}"))
    }
}

/// Which of two KEKs a wrapped value opens under.
#[derive(Debug, PartialEq, Eq)]
pub enum WrappedBy {
    Old,
    New,
    Neither(String),
}

/// The key-encryption key's rotation from `old` to `new`, one wrapped value at a time. Each
/// method gives the value wrapped under `new`, or `None` when it already is (a rotation run
/// again after an interruption skips what it did).
pub struct Rewrap<'a> {
    pub old: &'a Kek,
    pub new: &'a Kek,
}

impl Rewrap<'_> {
    pub fn key(&self, id: &KeyId, bytes: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self.old.unwrap_key(id, bytes) {
            Ok((digest, key)) => Ok(Some(self.new.wrap_key(id, &digest, &key))),
            Err(old) => match self.new.unwrap_key(id, bytes) {
                Ok(_) => Ok(None),
                Err(_) => Err(old),
            },
        }
    }

    pub fn subject(&self, bytes: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self.old.unwrap_subject(bytes) {
            Ok((subject, id)) => Ok(Some(self.new.wrap_subject(&subject, &id))),
            Err(old) => match self.new.unwrap_subject(bytes) {
                Ok(_) => Ok(None),
                Err(_) => Err(old),
            },
        }
    }

    pub fn check(&self, bytes: &[u8]) -> WrappedBy {
        if self.old.opens_check(bytes) {
            WrappedBy::Old
        } else if self.new.opens_check(bytes) {
            WrappedBy::New
        } else {
            WrappedBy::Neither(format!(
                "neither {} nor {} opens the key store's check value",
                self.old.path.display(),
                self.new.path.display()
            ))
        }
    }
}

fn key_aad(id: &KeyId, subject_digest: &[u8]) -> Vec<u8> {
    let mut aad = b"data-key".to_vec();
    aad.extend_from_slice(&id.0);
    aad.extend_from_slice(subject_digest);
    aad
}

fn encode(sealed: &Sealed) -> Vec<u8> {
    // A sealed value is ids and byte strings: its encoding cannot fail.
    rmp_serde::to_vec(sealed).unwrap_or_default()
}

pub(crate) fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => Ok(()),
    }
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex32(s: &str) -> Option<Zeroizing<[u8; KEY_BYTES]>> {
    if s.len() != 2 * KEY_BYTES {
        return None;
    }
    let mut out = Zeroizing::new([0u8; KEY_BYTES]);
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
