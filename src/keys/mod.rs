//! The service's keyring: every subject's data key, wrapped by the key-encryption key (KEK),
//! in a directory of small files where destroying a key is a real delete.
//!
//! Layout under the key directory (`<data_dir>/keys` by default):
//! - `kek.check`: a value sealed under the KEK, so that a wrong KEK is refused at start
//!   instead of making every sealed value read as erased;
//! - `data/<kid>`: one data key, sealed under the KEK and bound to its id and its subject's
//!   digest (a wrapped key moved to another id or subject does not open);
//! - `subjects/<tenant>/<digest>`: the id of the subject's live key and the subject itself,
//!   sealed under the KEK (no scope id is readable in the key directory).
//!
//! Why files rather than a sled tree: a key removed from sled stays in its old pages until
//! sled reuses the segment, while a file is overwritten with zeros, synced and unlinked.
//! Every create is written to a temporary file, synced, renamed and its directory synced,
//! so a key is durable before any value sealed under it is; a key is never written twice.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use auditmem_projections::seal::{
    fill_random, DataKey, KeyError, KeyId, Keyring, SealKey, Sealed, Subject, KEY_BYTES,
};
use uuid::Uuid;
use zeroize::Zeroizing;

/// The key directory's name in a data dir.
pub const KEYS_DIR: &str = "keys";

/// Opens the keyring of `data_dir` (its `keys` directory) with the KEK at `kek_path`.
pub fn open_in(data_dir: &Path, kek_path: &Path) -> Result<std::sync::Arc<DirKeyring>, OpenError> {
    DirKeyring::open(&data_dir.join(KEYS_DIR), kek_path).map(std::sync::Arc::new)
}

/// What `kek.check` holds, sealed under the KEK.
const CHECK: &[u8] = b"auditmem key-encryption key";

/// The key-encryption key: 32 bytes, stored as 64 hex digits in its file.
pub struct Kek(SealKey);

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
        let text = fs::read_to_string(path).map_err(|source| KekError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let bytes = parse_hex32(text.trim()).ok_or_else(|| KekError::Malformed {
            path: path.to_path_buf(),
        })?;
        Ok(Kek(SealKey::from_bytes(*bytes)))
    }

    /// Generates a new KEK and writes it to `path` (mode 0600), failing if the file exists.
    pub fn generate(path: &Path) -> Result<Kek, KekError> {
        let mut bytes = Zeroizing::new([0u8; KEY_BYTES]);
        fill_random(bytes.as_mut());
        let hex = Zeroizing::new(hex(bytes.as_ref()));
        let write = || -> std::io::Result<()> {
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
        Ok(Kek(SealKey::from_bytes(*bytes)))
    }

    fn wrap(&self, aad: &[u8], plaintext: &[u8]) -> Sealed {
        Sealed::seal(&self.0, &[], aad, plaintext)
    }

    fn unwrap(&self, aad: &[u8], sealed: &Sealed) -> Option<Zeroizing<Vec<u8>>> {
        sealed.open(&self.0, aad).ok()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Kek(#[from] KekError),
    #[error("the key-encryption key does not open the keys in {dir}: it is not the key they were wrapped with")]
    WrongKek { dir: PathBuf },
    #[error("the key directory {dir} holds keys but the key-encryption key {kek} is missing: without it no sealed data can be read; restore that file or pass --master-key-file")]
    MissingKek { dir: PathBuf, kek: PathBuf },
    #[error("key directory {dir}: {source}")]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// The keyring of one node: data keys in a directory, wrapped by the KEK.
pub struct DirKeyring {
    dir: PathBuf,
    kek: Kek,
    /// Unwrapped data keys by id, and each subject's live key id. Both are caches of the
    /// directory, filled as keys are read or created and emptied of a key when it is destroyed.
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<KeyId, DataKey>,
    subjects: HashMap<Subject, KeyId>,
}

impl DirKeyring {
    /// Opens the key directory `dir` with the KEK at `kek_path`. A KEK is generated there when
    /// the directory holds no keys yet and the file does not exist; a directory with keys and
    /// no KEK, or a KEK that does not open them, is an error.
    pub fn open(dir: &Path, kek_path: &Path) -> Result<DirKeyring, OpenError> {
        let io = |source| OpenError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let check_path = dir.join("kek.check");
        let kek = if kek_path.exists() {
            Kek::load(kek_path)?
        } else if check_path.exists() {
            return Err(OpenError::MissingKek {
                dir: dir.to_path_buf(),
                kek: kek_path.to_path_buf(),
            });
        } else {
            Kek::generate(kek_path)?
        };
        fs::create_dir_all(dir.join("data")).map_err(io)?;
        fs::create_dir_all(dir.join("subjects")).map_err(io)?;
        if check_path.exists() {
            let bytes = fs::read(&check_path).map_err(io)?;
            let sealed: Option<Sealed> = rmp_serde::from_slice(&bytes).ok();
            let opens = sealed
                .and_then(|s| kek.unwrap(b"kek.check", &s))
                .is_some_and(|v| v.as_slice() == CHECK);
            if !opens {
                return Err(OpenError::WrongKek {
                    dir: dir.to_path_buf(),
                });
            }
        } else {
            let sealed = kek.wrap(b"kek.check", CHECK);
            write_new(&check_path, &encode(&sealed)).map_err(io)?;
        }
        Ok(DirKeyring {
            dir: dir.to_path_buf(),
            kek,
            cache: Mutex::new(Cache::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn data_path(&self, id: &KeyId) -> PathBuf {
        self.dir.join("data").join(id.to_hex())
    }

    fn subject_path(&self, subject: &Subject) -> PathBuf {
        self.dir
            .join("subjects")
            .join(subject.tenant().to_string())
            .join(subject.digest_hex())
    }

    fn store(e: std::io::Error) -> KeyError {
        KeyError::Store(e.to_string())
    }

    /// Reads the subject file at `path`: the subject and its live key's id.
    fn read_subject(&self, path: &Path) -> Result<Option<(Subject, KeyId)>, KeyError> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::store(e)),
        };
        let sealed: Sealed = rmp_serde::from_slice(&bytes)
            .map_err(|e| KeyError::Store(format!("{}: {e}", path.display())))?;
        let plain = self
            .kek
            .unwrap(b"subject", &sealed)
            .ok_or_else(|| KeyError::Store(format!("{} does not open", path.display())))?;
        let (subject, id): (Subject, KeyId) = rmp_serde::from_slice(&plain)
            .map_err(|e| KeyError::Store(format!("{}: {e}", path.display())))?;
        Ok(Some((subject, id)))
    }

    /// Reads a data key from its file; `None` when it was destroyed.
    fn read_key(&self, id: &KeyId) -> Result<Option<DataKey>, KeyError> {
        let path = self.data_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::store(e)),
        };
        let (digest, sealed): (serde_bytes::ByteBuf, Sealed) = rmp_serde::from_slice(&bytes)
            .map_err(|e| KeyError::Store(format!("{}: {e}", path.display())))?;
        let plain = self
            .kek
            .unwrap(&key_aad(id, &digest), &sealed)
            .ok_or_else(|| KeyError::Store(format!("{} does not open", path.display())))?;
        let bytes: [u8; KEY_BYTES] = plain
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::Store(format!("{} is not a data key", path.display())))?;
        Ok(Some(DataKey::from_bytes(bytes)))
    }
}

fn key_aad(id: &KeyId, subject_digest: &[u8]) -> Vec<u8> {
    let mut aad = b"data-key".to_vec();
    aad.extend_from_slice(&id.0);
    aad.extend_from_slice(subject_digest);
    aad
}

impl Keyring for DirKeyring {
    fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError> {
        if let Some(id) = self.find(subject)? {
            return Ok(id);
        }
        // Creating holds the cache's lock, so two requests for a new subject make one key.
        let mut cache = self.lock();
        if let Some(id) = cache.subjects.get(subject) {
            return Ok(*id);
        }
        let id = KeyId::random();
        let key = DataKey::generate();
        let digest = subject.digest();
        let wrapped = self.kek.wrap(&key_aad(&id, &digest), key.expose());
        let data = rmp_serde::to_vec(&(serde_bytes::Bytes::new(&digest), &wrapped))
            .map_err(|e| KeyError::Store(e.to_string()))?;
        write_new(&self.data_path(&id), &data).map_err(Self::store)?;
        let plain =
            rmp_serde::to_vec(&(subject, id)).map_err(|e| KeyError::Store(e.to_string()))?;
        let sealed = self.kek.wrap(b"subject", &plain);
        let path = self.subject_path(subject);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(Self::store)?;
        }
        write_replace(&path, &encode(&sealed)).map_err(Self::store)?;
        cache.keys.insert(id, key);
        cache.subjects.insert(subject.clone(), id);
        Ok(id)
    }

    fn find(&self, subject: &Subject) -> Result<Option<KeyId>, KeyError> {
        if let Some(id) = self.lock().subjects.get(subject) {
            return Ok(Some(*id));
        }
        let found = self.read_subject(&self.subject_path(subject))?;
        let Some((_, id)) = found else {
            return Ok(None);
        };
        // A subject file whose key was destroyed (a crash between the two unlinks) has no key.
        if !self.data_path(&id).exists() {
            return Ok(None);
        }
        self.lock().subjects.insert(subject.clone(), id);
        Ok(Some(id))
    }

    fn seal_key(&self, ids: &[KeyId]) -> Result<Option<SealKey>, KeyError> {
        let mut keys: Vec<(KeyId, DataKey)> = Vec::with_capacity(ids.len());
        for id in ids {
            let cached = self.lock().keys.get(id).cloned();
            let key = match cached {
                Some(k) => k,
                None => match self.read_key(id)? {
                    Some(k) => {
                        self.lock().keys.insert(*id, k.clone());
                        k
                    }
                    None => return Ok(None),
                },
            };
            keys.push((*id, key));
        }
        let refs: Vec<(KeyId, &DataKey)> = keys.iter().map(|(id, k)| (*id, k)).collect();
        Ok(Some(SealKey::derive(&refs)))
    }

    fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError> {
        let mut cache = self.lock();
        let mut n = 0;
        for id in ids {
            cache.keys.remove(id);
            cache.subjects.retain(|_, v| v != id);
            if shred(&self.data_path(id)).map_err(Self::store)? {
                n += 1;
            }
        }
        sync_dir(&self.dir.join("data")).map_err(Self::store)?;
        Ok(n)
    }

    fn keys_of_tenant(&self, tenant: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError> {
        let dir = self.dir.join("subjects").join(tenant.to_string());
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::store(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry.map_err(Self::store)?.path();
            if let Some((subject, id)) = self.read_subject(&path)? {
                if self.data_path(&id).exists() {
                    out.push((subject, id));
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

fn encode(sealed: &Sealed) -> Vec<u8> {
    // A sealed value is ids and byte strings: its encoding cannot fail.
    rmp_serde::to_vec(sealed).unwrap_or_default()
}

/// Overwrites a file with zeros, syncs it and unlinks it; `false` when it did not exist.
fn shred(path: &Path) -> std::io::Result<bool> {
    let mut f = match fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len() as usize;
    f.write_all(&vec![0u8; len])?;
    f.sync_all()?;
    drop(f);
    fs::remove_file(path)?;
    Ok(true)
}

/// Writes a new file durably: a temporary file synced, renamed into place, the directory
/// synced. Fails if `path` exists (a key id is never reused).
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists", path.display()),
        ));
    }
    write_replace(path, bytes)
}

fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    sync_parent(path)
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Subject {
        Subject::User(Uuid::nil(), "alice".into())
    }

    #[test]
    fn keys_survive_a_reopen_and_a_destroyed_key_is_gone_from_disk() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (dir, kek) = (tmp.path().join("keys"), tmp.path().join("master.key"));
        let ring = DirKeyring::open(&dir, &kek).expect("open");
        let sealed = Sealed::seal_for(&ring, &[alice()], b"", b"078-05-1120").expect("seal");
        let id = sealed.keys[0];
        drop(ring);

        let ring = DirKeyring::open(&dir, &kek).expect("reopen");
        assert_eq!(ring.find(&alice()).expect("find"), Some(id));
        assert_eq!(
            ring.keys_of_tenant(Uuid::nil()).expect("list"),
            vec![(alice(), id)]
        );
        let plain = sealed.open_with(&ring, b"").expect("open").expect("live");
        assert_eq!(plain.as_slice(), b"078-05-1120");

        assert_eq!(ring.destroy(&[id]).expect("destroy"), 1);
        assert!(!dir.join("data").join(id.to_hex()).exists());
        assert!(sealed.open_with(&ring, b"").expect("ring").is_none());
        drop(ring);
        let ring = DirKeyring::open(&dir, &kek).expect("reopen");
        assert!(sealed.open_with(&ring, b"").expect("ring").is_none());
        assert_eq!(ring.find(&alice()).expect("find"), None);
        assert!(ring.keys_of_tenant(Uuid::nil()).expect("list").is_empty());
        assert_ne!(ring.key_of(&alice()).expect("new"), id);
    }

    #[test]
    fn a_wrong_or_missing_kek_is_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (dir, kek) = (tmp.path().join("keys"), tmp.path().join("master.key"));
        DirKeyring::open(&dir, &kek).expect("open");
        let other = tmp.path().join("other.key");
        Kek::generate(&other).expect("other");
        assert!(matches!(
            DirKeyring::open(&dir, &other),
            Err(OpenError::WrongKek { .. })
        ));
        assert!(matches!(
            DirKeyring::open(&dir, &tmp.path().join("absent.key")),
            Err(OpenError::MissingKek { .. })
        ));
        fs::write(&other, "not hex").expect("write");
        assert!(matches!(
            DirKeyring::open(&dir, &other),
            Err(OpenError::Kek(KekError::Malformed { .. }))
        ));
    }
}
