//! The keyring of one node: every subject's data key in a directory of small files, wrapped by
//! the key-encryption key, where destroying a key is a real delete.
//!
//! Layout under the key directory (`<data_dir>/keys`):
//! - `kek.check`: the KEK's check value;
//! - `data/<kid>`: one wrapped data key;
//! - `subjects/<tenant>/<digest>`: the subject record naming the subject's live key.
//!
//! Why files rather than a sled tree: a key removed from sled stays in its old pages until
//! sled reuses the segment, while a file is overwritten with zeros, synced and unlinked.
//! Every create is written to a temporary file, synced, renamed and its directory synced,
//! so a key is durable before any value sealed under it is; a key is never written twice.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use auditmem_projections::seal::{DataKey, KeyError, KeyId, Keyring, SealKey, Subject};
use uuid::Uuid;

use super::kek::{sync_dir, sync_parent, Kek};
use super::OpenError;

/// The check value's file name in a key directory.
pub const CHECK_FILE: &str = "kek.check";

/// The keyring of one node: data keys in a directory, wrapped by the KEK.
pub struct DirKeyring {
    dir: PathBuf,
    kek: Kek,
    /// Unwrapped data keys by id, and each subject's live key id. Both are caches of the
    /// directory, filled as keys are read or created and emptied of a key when it is destroyed.
    cache: Mutex<Cache>,
    /// Told when a destroy has let go of the subject files it shredded (`Cache::shredding`).
    shredded: Condvar,
    /// Keys were written since the last `sync` (their files renamed into place, not synced):
    /// a create costs no sync of its own, and one sync of the filesystem in the log's group
    /// commit makes every key of the group durable with the records sealed under them.
    unsynced: AtomicBool,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<KeyId, DataKey>,
    subjects: HashMap<Subject, KeyId>,
    /// Seal keys by the ids they were asked for (in that order): every audit entry of a tenant
    /// asks for the same one, and its HKDF took ~0.4 µs of an ingested entry's ~16 µs. Any
    /// destroy empties it.
    sealing: HashMap<Vec<KeyId>, SealKey>,
    /// Keys destroyed or retired by this process: never taken back from their files, which
    /// a destroy still running (or not yet started) leaves in place a while. Key ids are
    /// random and never reused; the set holds 16 bytes an erased key for the process's life.
    gone: HashSet<KeyId>,
    /// Subject files a destroy is shredding: a new key for such a subject waits until it is
    /// done, so that the shred never zeroes the file naming the new key.
    shredding: HashSet<PathBuf>,
}

/// Seal keys kept at most: past it the map starts again (a request showing many memories asks
/// for a set of its own).
const SEALING_CACHED: usize = 4096;

impl DirKeyring {
    /// Opens the key directory `dir` with the KEK at `kek_path`. A KEK is generated there when
    /// the directory holds no keys yet and the file does not exist; a directory with keys and
    /// no KEK, or a KEK that does not open them, is an error.
    pub fn open(dir: &Path, kek_path: &Path) -> Result<DirKeyring, OpenError> {
        let io = |source| OpenError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let check_path = dir.join(CHECK_FILE);
        let kek = if kek_path.exists() {
            Kek::load(kek_path)?
        } else if check_path.exists() {
            return Err(OpenError::MissingKek {
                store: dir.display().to_string(),
                kek: kek_path.to_path_buf(),
            });
        } else {
            Kek::generate(kek_path)?
        };
        fs::create_dir_all(dir.join("data")).map_err(io)?;
        fs::create_dir_all(dir.join("subjects")).map_err(io)?;
        if check_path.exists() {
            let bytes = fs::read(&check_path).map_err(io)?;
            if !kek.opens_check(&bytes) {
                return Err(OpenError::WrongKek {
                    store: dir.display().to_string(),
                    kek: kek_path.to_path_buf(),
                });
            }
        } else {
            write_new(&check_path, &kek.check_value()).map_err(io)?;
        }
        Ok(DirKeyring {
            dir: dir.to_path_buf(),
            kek,
            cache: Mutex::new(Cache::default()),
            shredded: Condvar::new(),
            unsynced: AtomicBool::new(false),
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

    /// Reads the subject file at `path`: the subject and its live key's id. A file a shred
    /// left zeroed names no key.
    fn read_subject(&self, path: &Path) -> Result<Option<(Subject, KeyId)>, KeyError> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::store(e)),
        };
        if shredded(&bytes) {
            return Ok(None);
        }
        self.kek
            .unwrap_subject(&bytes)
            .map(Some)
            .map_err(|e| KeyError::Store(format!("{}: {e}", path.display())))
    }

    /// The subject files of digest `digest` that name key `id` (or that a shred left zeroed).
    /// The data file does not name the tenant: every tenant's directory is looked in.
    fn subject_files_of(&self, id: &KeyId, digest: &[u8; 32]) -> Result<Vec<PathBuf>, KeyError> {
        let name: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let tenants = match fs::read_dir(self.dir.join("subjects")) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::store(e)),
        };
        let mut out = Vec::new();
        for tenant in tenants {
            let tenant = tenant.map_err(Self::store)?;
            if !tenant.file_type().map_err(Self::store)?.is_dir() {
                continue;
            }
            let path = tenant.path().join(&name);
            let left_zeroed = fs::read(&path).is_ok_and(|b| shredded(&b));
            let names_it = self.read_subject(&path)?.is_some_and(|(_, k)| k == *id);
            if names_it || left_zeroed {
                out.push(path);
            }
        }
        Ok(out)
    }

    /// Whether key `id`'s file is there, whole: not destroyed, nor left zeroed by a shred.
    fn holds_key(&self, id: &KeyId) -> bool {
        fs::read(self.data_path(id)).is_ok_and(|b| !shredded(&b))
    }

    /// Reads a data key from its file; `None` when it was destroyed (its file gone, or left
    /// zeroed by a shred that a crash cut short).
    fn read_key(&self, id: &KeyId) -> Result<Option<DataKey>, KeyError> {
        let path = self.data_path(id);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::store(e)),
        };
        if shredded(&bytes) {
            return Ok(None);
        }
        self.kek
            .unwrap_key(id, &bytes)
            .map(|(_, key)| Some(key))
            .map_err(|e| KeyError::Store(format!("{}: {e}", path.display())))
    }

    /// Drops `ids` from every cache and marks them gone: from here on this process neither
    /// opens nor seals under them, whatever their files still hold.
    fn forget(&self, ids: &[KeyId]) {
        let mut cache = self.lock();
        cache.sealing.clear();
        for id in ids {
            cache.keys.remove(id);
            cache.subjects.retain(|_, v| v != id);
            cache.gone.insert(*id);
        }
    }

    /// Claims, for one destroy, the subject files among `candidates` that still name a gone
    /// key (or that a shred left zeroed): a subject given a new key since it was looked at is
    /// not shredded. Waits while another destroy holds any of them.
    fn claim(&self, candidates: Vec<PathBuf>) -> Result<Vec<PathBuf>, KeyError> {
        let mut cache = self.lock();
        while candidates.iter().any(|p| cache.shredding.contains(p)) {
            cache = self
                .shredded
                .wait(cache)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let mut claimed = Vec::with_capacity(candidates.len());
        for path in candidates {
            let left_zeroed = fs::read(&path).is_ok_and(|b| shredded(&b));
            let names_gone = self
                .read_subject(&path)?
                .is_some_and(|(_, k)| cache.gone.contains(&k));
            if left_zeroed || names_gone {
                claimed.push(path);
            }
        }
        // All at once, after every read: a read that fails leaves nothing claimed.
        cache.shredding.extend(claimed.iter().cloned());
        Ok(claimed)
    }

    /// Lets go of the subject files [`Self::claim`] gave one destroy.
    fn release(&self, claimed: &[PathBuf]) {
        let mut cache = self.lock();
        for path in claimed {
            cache.shredding.remove(path);
        }
        drop(cache);
        self.shredded.notify_all();
    }

    /// Zeroes `keys` and `subjects`, puts the zeros on the disk, unlinks them and syncs their
    /// directories; how many of `keys` existed.
    fn shred(&self, keys: &[PathBuf], subjects: &[PathBuf]) -> Result<usize, KeyError> {
        // Zeros over every file, put on the disk (a secure erase needs the old bytes
        // overwritten, not only unlinked), then the unlinks and one sync of each directory: a
        // few syncs however many keys. A few files are synced each on its own: a `syncfs`
        // writes every dirty page of the filesystem, sled's included, and the log's own
        // `fdatasync`s (every request's answer waits for one) queue behind it for as long
        // (~0.1-0.4 s after a large erasure's fold). Many files take one `syncfs`. A crash
        // after the zeros leaves zeroed files, read as destroyed.
        let each = keys.len() + subjects.len() <= SYNC_EACH_UP_TO;
        let mut n = 0;
        for path in keys {
            n += usize::from(zero(path, each).map_err(Self::store)?);
        }
        for path in subjects {
            zero(path, each).map_err(Self::store)?;
        }
        if !each {
            fs::File::open(&self.dir)
                .and_then(|d| rustix::fs::syncfs(&d).map_err(std::io::Error::from))
                .map_err(Self::store)?;
        }
        let mut dirs = std::collections::BTreeSet::new();
        for path in keys.iter().chain(subjects) {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Self::store(e)),
            }
            if let Some(dir) = path.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        for dir in dirs {
            sync_dir(&dir).map_err(Self::store)?;
        }
        Ok(n)
    }
}

impl Keyring for DirKeyring {
    fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError> {
        if let Some(id) = self.find(subject)? {
            return Ok(id);
        }
        // Creating holds the cache's lock, so two requests for a new subject make one key; it
        // waits for a destroy shredding the subject's file, which would zero the new one.
        let path = self.subject_path(subject);
        let mut cache = self.lock();
        while cache.shredding.contains(&path) {
            cache = self
                .shredded
                .wait(cache)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if let Some(id) = cache.subjects.get(subject) {
            return Ok(*id);
        }
        let id = KeyId::random();
        let key = DataKey::generate();
        let data = self.kek.wrap_key(&id, &subject.digest(), &key);
        // Set first: a sync that starts while the files are written must not clear it.
        self.unsynced.store(true, Ordering::SeqCst);
        write_unsynced(&self.data_path(&id), &data, false).map_err(Self::store)?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(Self::store)?;
        }
        write_unsynced(&path, &self.kek.wrap_subject(subject, &id), true).map_err(Self::store)?;
        cache.keys.insert(id, key);
        cache.subjects.insert(subject.clone(), id);
        Ok(id)
    }

    fn unsynced(&self) -> bool {
        self.unsynced.load(Ordering::SeqCst)
    }

    /// One `syncfs` of the key directory's filesystem: the data dir's too (the key directory
    /// is in it), so it makes sled's file durable as well. A sync per key file (two per new
    /// key, one new key per memory) cost ~24 ms per created memory on a disk whose sync
    /// takes ~12 ms.
    fn sync(&self) -> Result<(), KeyError> {
        if !self.unsynced.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        let synced = fs::File::open(&self.dir)
            .and_then(|d| rustix::fs::syncfs(&d).map_err(std::io::Error::from));
        if let Err(e) = synced {
            self.unsynced.store(true, Ordering::SeqCst);
            return Err(Self::store(e));
        }
        Ok(())
    }

    fn find(&self, subject: &Subject) -> Result<Option<KeyId>, KeyError> {
        if let Some(id) = self.lock().subjects.get(subject) {
            return Ok(Some(*id));
        }
        let found = self.read_subject(&self.subject_path(subject))?;
        let Some((_, id)) = found else {
            return Ok(None);
        };
        // A subject file whose key was destroyed (a crash between the two unlinks, or inside
        // the key's shred) has no key.
        if !self.holds_key(&id) {
            return Ok(None);
        }
        let mut cache = self.lock();
        if cache.gone.contains(&id) {
            return Ok(None);
        }
        cache.subjects.insert(subject.clone(), id);
        Ok(Some(id))
    }

    fn seal_key(&self, ids: &[KeyId]) -> Result<Option<SealKey>, KeyError> {
        if let Some(k) = self.lock().sealing.get(ids) {
            return Ok(Some(k.clone()));
        }
        let mut keys: Vec<(KeyId, DataKey)> = Vec::with_capacity(ids.len());
        for id in ids {
            let cached = self.lock().keys.get(id).cloned();
            let key = match cached {
                Some(k) => k,
                None => match self.read_key(id)? {
                    Some(k) => {
                        let mut cache = self.lock();
                        if cache.gone.contains(id) {
                            return Ok(None);
                        }
                        cache.keys.insert(*id, k.clone());
                        k
                    }
                    None => return Ok(None),
                },
            };
            keys.push((*id, key));
        }
        let refs: Vec<(KeyId, &DataKey)> = keys.iter().map(|(id, k)| (*id, k)).collect();
        let key = SealKey::derive(&refs);
        let mut cache = self.lock();
        // Only while every key is still held: a destroy that ran since the reads above must
        // not leave a seal key of it behind.
        if ids.iter().all(|id| cache.keys.contains_key(id)) {
            if cache.sealing.len() >= SEALING_CACHED {
                cache.sealing.clear();
            }
            cache.sealing.insert(ids.to_vec(), key.clone());
        }
        Ok(Some(key))
    }

    /// Forgets the keys at once, then shreds their files holding no lock a request takes:
    /// the syncs of a shred take tens to hundreds of milliseconds on a busy disk, while every
    /// request seals its audit entry through this keyring.
    fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError> {
        self.forget(ids);
        // Every file to shred first: each key's file, then the subject file naming it (it names
        // the subject, sealed, at a path any copy of the directory shows). Key files come
        // first in the list, so a crash between the unlinks leaves a subject file whose key is
        // gone (read as no key, replaced at the next create).
        let mut keys = Vec::with_capacity(ids.len());
        let mut subjects = Vec::new();
        for id in ids {
            let path = self.data_path(id);
            let digest = match fs::read(&path) {
                Ok(bytes) => self.kek.unwrap_key(id, &bytes).ok().map(|(d, _)| d),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Self::store(e)),
            };
            keys.push(path);
            if let Some(digest) = digest {
                subjects.extend(self.subject_files_of(id, &digest)?);
            }
        }
        if keys.is_empty() && subjects.is_empty() {
            return Ok(0);
        }
        let claimed = self.claim(subjects)?;
        let shredded = self.shred(&keys, &claimed);
        self.release(&claimed);
        shredded
    }

    /// Forgets the keys in this process only; [`Keyring::destroy`] shreds their files.
    fn retire(&self, ids: &[KeyId]) -> Result<bool, KeyError> {
        self.forget(ids);
        Ok(true)
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
            if is_temporary(&path) {
                continue;
            }
            if let Some((subject, id)) = self.read_subject(&path)? {
                if self.holds_key(&id) && !self.lock().gone.contains(&id) {
                    out.push((subject, id));
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

/// A file a durable write had not yet renamed into place when it stopped.
pub(crate) fn is_temporary(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "tmp")
}

/// Whether a key or subject file holds only zeros: a [`shred`] that a crash stopped between
/// its overwrite and its unlink. A wrapped value is never all zeros (it is ciphertext), so
/// such a file is one destroyed: it names no key and holds none.
pub(crate) fn shredded(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|b| *b == 0)
}

/// How many files a shred syncs one by one; past it, one `syncfs` (see `DirKeyring::shred`).
const SYNC_EACH_UP_TO: usize = 64;

/// Overwrites `path` with zeros in place, synced when `sync`; `false` when it did not exist.
fn zero(path: &Path, sync: bool) -> std::io::Result<bool> {
    let mut f = match fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len() as usize;
    f.write_all(&vec![0u8; len])?;
    if sync {
        f.sync_data()?;
    }
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

/// Writes `path` whole (a temporary file renamed into place) without syncing: the keyring's
/// `sync` makes it durable. `replace`: whether an existing file may be replaced (a key id is
/// never reused, a subject's file is replaced when the subject gets a new key).
fn write_unsynced(path: &Path, bytes: &[u8], replace: bool) -> std::io::Result<()> {
    if !replace && path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists", path.display()),
        ));
    }
    write_tmp(path, bytes, false)?;
    fs::rename(path.with_extension("tmp"), path)
}

/// Writes `bytes` to `path`'s `.tmp` sibling, readable by the owner only, synced when `sync`.
fn write_tmp(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path.with_extension("tmp"))?;
    f.write_all(bytes)?;
    if sync {
        f.sync_all()?;
    }
    Ok(())
}

/// Replaces a file durably and atomically: a reader sees the old bytes or the new, whole.
pub(crate) fn write_replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_tmp(path, bytes, true)?;
    fs::rename(path.with_extension("tmp"), path)?;
    sync_parent(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::kek::KekError;
    use auditmem_projections::seal::Sealed;

    fn alice() -> Subject {
        Subject::User(Uuid::nil(), "alice".into())
    }

    #[test]
    fn a_new_key_waits_for_the_groups_sync_and_a_known_one_needs_none() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ring = DirKeyring::open(&tmp.path().join("keys"), &tmp.path().join("master.key"))
            .expect("open");
        assert!(!ring.unsynced());
        let id = ring.key_of(&alice()).expect("create");
        assert!(ring.unsynced());
        ring.sync().expect("sync");
        assert!(!ring.unsynced());
        assert_eq!(ring.key_of(&alice()).expect("known"), id);
        assert!(!ring.unsynced());
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

        let subject_file = dir
            .join("subjects")
            .join(Uuid::nil().to_string())
            .join(alice().digest_hex());
        assert!(subject_file.is_file());
        assert_eq!(ring.destroy(&[id]).expect("destroy"), 1);
        assert!(!dir.join("data").join(id.to_hex()).exists());
        assert!(!subject_file.exists());
        assert!(sealed.open_with(&ring, b"").expect("ring").is_none());
        drop(ring);
        let ring = DirKeyring::open(&dir, &kek).expect("reopen");
        assert!(sealed.open_with(&ring, b"").expect("ring").is_none());
        assert_eq!(ring.find(&alice()).expect("find"), None);
        assert!(ring.keys_of_tenant(Uuid::nil()).expect("list").is_empty());
        assert_ne!(ring.key_of(&alice()).expect("new"), id);
    }

    #[test]
    fn files_a_shred_cut_short_left_zeroed_read_as_destroyed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (dir, kek) = (tmp.path().join("keys"), tmp.path().join("master.key"));
        let ring = DirKeyring::open(&dir, &kek).expect("open");
        let bob = Subject::User(Uuid::nil(), "bob".into());
        let a = Sealed::seal_for(&ring, &[alice()], b"", b"a").expect("seal");
        let b = Sealed::seal_for(&ring, std::slice::from_ref(&bob), b"", b"b").expect("seal");
        let subject_file = |s: &Subject| {
            dir.join("subjects")
                .join(Uuid::nil().to_string())
                .join(s.digest_hex())
        };
        let zero = |path: &Path| {
            let len = fs::metadata(path).expect("a file").len() as usize;
            fs::write(path, vec![0u8; len]).expect("zero");
        };
        drop(ring);
        // Alice's destroy stopped inside the shred of her subject file (her key's file is
        // gone), bob's inside the shred of his key's file.
        fs::remove_file(dir.join("data").join(a.keys[0].to_hex())).expect("rm");
        zero(&subject_file(&alice()));
        zero(&dir.join("data").join(b.keys[0].to_hex()));

        let ring = DirKeyring::open(&dir, &kek).expect("reopen");
        assert_eq!(ring.find(&alice()).expect("find"), None);
        assert!(a.open_with(&ring, b"").expect("ring").is_none());
        assert!(b.open_with(&ring, b"").expect("ring").is_none());
        assert_eq!(ring.find(&bob).expect("find"), None);
        assert!(ring.keys_of_tenant(Uuid::nil()).expect("list").is_empty());
        // Bob's destroy finishes; alice gets a new key in place of the zeroed record.
        assert_eq!(ring.destroy(&b.keys).expect("destroy"), 1);
        let again = ring.key_of(&alice()).expect("a new key");
        assert_ne!(again, a.keys[0]);
        assert_eq!(
            ring.keys_of_tenant(Uuid::nil()).expect("list"),
            vec![(alice(), again)]
        );
    }

    #[test]
    fn a_retired_key_is_of_no_use_at_once_and_its_destroy_spares_the_subjects_new_key() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (dir, kek) = (tmp.path().join("keys"), tmp.path().join("master.key"));
        let ring = DirKeyring::open(&dir, &kek).expect("open");
        let old = Sealed::seal_for(&ring, &[alice()], b"", b"078-05-1120").expect("seal");
        let id = old.keys[0];
        // Retired: its files are still there, but nothing opens, finds or lists it.
        assert!(ring.retire(&[id]).expect("retire"));
        assert!(dir.join("data").join(id.to_hex()).is_file());
        assert!(old.open_with(&ring, b"").expect("ring").is_none());
        assert_eq!(ring.find(&alice()).expect("find"), None);
        assert!(ring.keys_of_tenant(Uuid::nil()).expect("list").is_empty());
        // Alice writes again before the destroy ran: a new key, in the same subject file.
        let new = Sealed::seal_for(&ring, &[alice()], b"", b"new").expect("seal");
        assert_ne!(new.keys[0], id);
        // The destroy shreds the old key's file but not the subject file, which names the
        // new key now.
        assert_eq!(ring.destroy(&[id]).expect("destroy"), 1);
        assert!(!dir.join("data").join(id.to_hex()).exists());
        drop(ring);
        let ring = DirKeyring::open(&dir, &kek).expect("reopen");
        assert_eq!(ring.find(&alice()).expect("find"), Some(new.keys[0]));
        let plain = new.open_with(&ring, b"").expect("open").expect("live");
        assert_eq!(plain.as_slice(), b"new");
        assert!(old.open_with(&ring, b"").expect("ring").is_none());
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
