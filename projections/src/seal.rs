//! Crypto-shredding: personal data is stored only sealed under the data keys of its subjects,
//! so destroying a subject's key erases every copy at once, in the immutable log and in every
//! file made from it, while the log's hashes (over the sealed bytes) still verify.
//!
//! - A [`Subject`] is whom data is about: a `(tenant, user_id)` scope, an agent or session
//!   scope, one memory, or the tenant itself (everything of the tenant that names no one).
//! - Each subject has at most one live [`DataKey`] at a time, known by a random [`KeyId`] (a
//!   random id, not one derived from the subject: a subject erased and later seen again gets a
//!   new key, and the erasure event names only ids that tell nothing about whom they served).
//! - A value about several subjects (a memory of user alice with agent bot-1; a search whose
//!   results name two users) is sealed once under a [`SealKey`] derived from **all** their data
//!   keys (HKDF-SHA256 over the keys in id order): it stays readable only while every one of
//!   them exists, so erasing any of its subjects erases it.
//! - [`Sealed`] is XChaCha20-Poly1305 with a random 192-bit nonce (random nonces are safe at
//!   that size, so no counter has to survive restarts or be shared across nodes), and the
//!   caller's associated data binds a sealed value to where it belongs (a record's kind and
//!   ids): moved elsewhere it does not open.
//!
//! Where the keys live (a key-encryption key wrapping them on disk, a JetStream bucket on a
//! cluster) is the service's [`Keyring`]; this module holds the primitives the events and the
//! projections need, and [`MemoryKeyring`] for tests. The AEAD, the KDF and the zeroing are
//! RustCrypto's crates: nothing cryptographic is ours.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use chacha20poly1305::aead::{Aead, AeadInPlace, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use zeroize::Zeroizing;

/// Bytes of a data key, a seal key and a key-encryption key.
pub const KEY_BYTES: usize = 32;

/// Bytes of an XChaCha20-Poly1305 nonce.
pub const NONCE_BYTES: usize = 24;

/// The id of one data key: 16 random bytes, shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeyId(#[serde(with = "serde_bytes")] pub [u8; 16]);

impl KeyId {
    pub fn random() -> KeyId {
        let mut id = [0u8; 16];
        fill_random(&mut id);
        KeyId(id)
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(s: &str) -> Option<KeyId> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(KeyId(id))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", self.to_hex())
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Whom data is about: what one data key serves and what an erasure names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Subject {
    /// Everything of a tenant that names no narrower subject.
    Tenant(Uuid),
    /// A `(tenant, user_id)` scope.
    User(Uuid, String),
    /// A `(tenant, agent_id)` scope.
    Agent(Uuid, String),
    /// A `(tenant, session_id)` scope.
    Session(Uuid, String),
    /// One memory `(tenant, memory_id)`: erasing a memory by id destroys this key.
    Memory(Uuid, Uuid),
}

impl Subject {
    pub fn tenant(&self) -> Uuid {
        match self {
            Subject::Tenant(t)
            | Subject::User(t, _)
            | Subject::Agent(t, _)
            | Subject::Session(t, _)
            | Subject::Memory(t, _) => *t,
        }
    }

    /// A fixed-size name of the subject for key stores, which then hold no scope id in the
    /// clear: BLAKE3 in its key-derivation mode over the subject's msgpack.
    pub fn digest(&self) -> [u8; 32] {
        // A subject is plain strings and uuids: its encoding cannot fail.
        let bytes = rmp_serde::to_vec(self).unwrap_or_default();
        blake3::derive_key("auditmem/subject/v1", &bytes)
    }

    /// The subject's digest in lowercase hex.
    pub fn digest_hex(&self) -> String {
        self.digest().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A subject's data key. Zeroed when dropped; never printed.
#[derive(Clone)]
pub struct DataKey(Zeroizing<[u8; KEY_BYTES]>);

impl DataKey {
    pub fn generate() -> DataKey {
        let mut k = Zeroizing::new([0u8; KEY_BYTES]);
        fill_random(k.as_mut());
        DataKey(k)
    }

    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> DataKey {
        DataKey(Zeroizing::new(bytes))
    }

    pub fn expose(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DataKey(..)")
    }
}

/// The key one value is sealed under: derived from the data keys of all its subjects.
#[derive(Clone)]
pub struct SealKey(Zeroizing<[u8; KEY_BYTES]>);

impl SealKey {
    /// HKDF-SHA256 with the data keys, in id order, as input keying material and the ids in
    /// the info: the same set of keys gives the same seal key whatever order it is named in,
    /// and the key of a set says nothing about the key of any other set.
    pub fn derive(keys: &[(KeyId, &DataKey)]) -> SealKey {
        let mut sorted: Vec<&(KeyId, &DataKey)> = keys.iter().collect();
        sorted.sort_by_key(|(id, _)| *id);
        sorted.dedup_by_key(|(id, _)| *id);
        let mut ikm = Zeroizing::new(Vec::with_capacity(sorted.len() * KEY_BYTES));
        let mut info = b"auditmem/seal/v1".to_vec();
        for (id, key) in sorted {
            ikm.extend_from_slice(key.expose());
            info.extend_from_slice(&id.0);
        }
        let mut out = Zeroizing::new([0u8; KEY_BYTES]);
        // 32 bytes is far below HKDF-SHA256's 255 * 32 limit: expand cannot fail.
        let _ = hkdf::Hkdf::<sha2::Sha256>::new(None, &ikm).expand(&info, out.as_mut());
        SealKey(out)
    }

    /// A key-encryption key used directly as a seal key (it wraps data keys).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> SealKey {
        SealKey(Zeroizing::new(bytes))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.0.as_ref().into())
    }
}

impl fmt::Debug for SealKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealKey(..)")
    }
}

/// A value sealed under the data keys `keys` (in id order, without repeats).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    pub keys: Vec<KeyId>,
    #[serde(with = "serde_bytes")]
    pub nonce: [u8; NONCE_BYTES],
    /// The ciphertext with its 16-byte tag.
    #[serde(with = "serde_bytes")]
    pub ct: Vec<u8>,
}

/// Bytes of the Poly1305 tag a ciphertext ends with.
pub const TAG_BYTES: usize = 16;

/// `ids` sorted and without repeats: how a [`Sealed`] names its keys.
pub fn sorted_ids(mut ids: Vec<KeyId>) -> Vec<KeyId> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// The key is not the one the value was sealed under, the associated data differs, or the
    /// bytes were changed.
    #[error(
        "a sealed value does not open under its keys (changed bytes, another key or another place)"
    )]
    Open,
}

impl Sealed {
    /// Seals `plaintext` under `key` (derived from `keys`), bound to `aad`.
    pub fn seal(key: &SealKey, keys: &[KeyId], aad: &[u8], plaintext: &[u8]) -> Sealed {
        // A copy with room for the tag, sealed in place: no copy of the plaintext is left.
        let mut buf = Vec::with_capacity(plaintext.len() + TAG_BYTES);
        buf.extend_from_slice(plaintext);
        Sealed::seal_in_place(key, sorted_ids(keys.to_vec()), aad, buf)
    }

    /// Seals the plaintext in `buf` in place under `key`, bound to `aad`: `buf` becomes the
    /// ciphertext and its tag, so the plaintext needs no buffer of its own to zero, and no copy
    /// of it is left behind when `buf` has room for the 16-byte tag ([`TAG_BYTES`]). `ids`: the
    /// ids `key` was derived from, sorted and without repeats ([`sorted_ids`]).
    pub fn seal_in_place(key: &SealKey, ids: Vec<KeyId>, aad: &[u8], mut buf: Vec<u8>) -> Sealed {
        debug_assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids sorted, no repeats"
        );
        let mut nonce = [0u8; NONCE_BYTES];
        fill_nonce(&mut nonce);
        // XChaCha20-Poly1305 refuses only plaintexts past 256 GiB, and a Vec takes the tag:
        // neither comes near. Were it to fail, the buffer is zeroed, not stored as it is.
        if key
            .cipher()
            .encrypt_in_place(XNonce::from_slice(&nonce), aad, &mut buf)
            .is_err()
        {
            zeroize::Zeroize::zeroize(&mut buf);
            buf.clear();
        }
        Sealed {
            keys: ids,
            nonce,
            ct: buf,
        }
    }

    /// The plaintext, zeroed when dropped.
    pub fn open(&self, key: &SealKey, aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, SealError> {
        key.cipher()
            .decrypt(
                XNonce::from_slice(&self.nonce),
                Payload { msg: &self.ct, aad },
            )
            .map(Zeroizing::new)
            .map_err(|_| SealError::Open)
    }

    /// Seals `plaintext` under the keys of `subjects`, creating keys that do not exist yet.
    pub fn seal_for(
        ring: &dyn Keyring,
        subjects: &[Subject],
        aad: &[u8],
        plaintext: &[u8],
    ) -> Result<Sealed, KeyError> {
        let ids = subjects
            .iter()
            .map(|s| ring.key_of(s))
            .collect::<Result<Vec<_>, _>>()?;
        let key = ring.seal_key(&ids)?.ok_or(KeyError::Destroyed)?;
        Ok(Sealed::seal(&key, &ids, aad, plaintext))
    }

    /// The plaintext when every key of the value still exists, `Ok(None)` when one was
    /// destroyed (the value is erased).
    pub fn open_with(
        &self,
        ring: &dyn Keyring,
        aad: &[u8],
    ) -> Result<Option<Zeroizing<Vec<u8>>>, KeyError> {
        match ring.seal_key(&self.keys)? {
            None => Ok(None),
            Some(key) => self.open(&key, aad).map(Some).map_err(KeyError::from),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error("a key the value needs was destroyed while it was being sealed")]
    Destroyed,
    #[error("key store: {0}")]
    Store(String),
    /// The key store cannot be reached for now (a cluster without a quorum): a write that
    /// needs a new key is answered as one the log cannot take, and may be retried.
    #[error("the key store cannot be reached: {0}")]
    Unavailable(String),
}

/// Where data keys live. The service's keyring keeps them wrapped by its key-encryption key
/// (on disk, or in a JetStream bucket on a cluster); [`MemoryKeyring`] keeps them in memory.
pub trait Keyring: Send + Sync {
    /// The live key of `subject`, created when the subject has none yet. A ring may leave a
    /// new key to be made durable by [`Keyring::sync`], which the log calls in the group
    /// commit of the records sealed under it, before anyone is answered.
    fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError>;

    /// Whether keys were created since the last [`Keyring::sync`] that are not durable yet.
    fn unsynced(&self) -> bool {
        false
    }

    /// Makes every key created so far durable.
    fn sync(&self) -> Result<(), KeyError> {
        Ok(())
    }

    /// The live key of `subject`, if it has one; never creates.
    fn find(&self, subject: &Subject) -> Result<Option<KeyId>, KeyError>;

    /// The seal key of a value sealed under `ids`; `Ok(None)` when any of them was destroyed.
    fn seal_key(&self, ids: &[KeyId]) -> Result<Option<SealKey>, KeyError>;

    /// Destroys `ids` wherever the ring keeps them; returns how many existed. Destroying an
    /// id that does not exist is not an error (an erasure applied again).
    fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError>;

    /// Stops this process from using `ids` at once: from its return nothing opens or seals
    /// under them here, and a subject whose live key one was gets a new key. Returns whether
    /// they still have to be [`destroyed`](Keyring::destroy) where the ring keeps them; a ring
    /// that cannot forget a key in memory alone destroys it here (the default) and says no.
    fn retire(&self, ids: &[KeyId]) -> Result<bool, KeyError> {
        self.destroy(ids).map(|_| false)
    }

    /// Every live key of a tenant's subjects (a tenant's erasure destroys them all).
    fn keys_of_tenant(&self, tenant: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError>;

    /// How many times this process has retired or destroyed keys, when the ring counts it
    /// ([`Retirements`] does): a value opened while the count stood at `n` is still what an
    /// open would give while it stands at `n`, so a cache of opened values checks it. `None`:
    /// the ring does not count, and nothing opened may be cached.
    fn retirements(&self) -> Option<u64> {
        None
    }
}

/// A [`Keyring`] that counts the retires and destroys it passes on ([`Keyring::retirements`]).
/// The count moves once the inner ring has let go of the keys, so a value opened after a
/// read of the count that still matches was opened with no key retired since.
pub struct Retirements {
    inner: std::sync::Arc<dyn Keyring>,
    count: std::sync::atomic::AtomicU64,
}

impl Retirements {
    pub fn new(inner: std::sync::Arc<dyn Keyring>) -> Self {
        Retirements {
            inner,
            count: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn moved<T>(&self, r: Result<T, KeyError>) -> Result<T, KeyError> {
        // Also on an error: the ring may have let go of some of the keys.
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        r
    }
}

impl Keyring for Retirements {
    fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError> {
        self.inner.key_of(subject)
    }

    fn unsynced(&self) -> bool {
        self.inner.unsynced()
    }

    fn sync(&self) -> Result<(), KeyError> {
        self.inner.sync()
    }

    fn find(&self, subject: &Subject) -> Result<Option<KeyId>, KeyError> {
        self.inner.find(subject)
    }

    fn seal_key(&self, ids: &[KeyId]) -> Result<Option<SealKey>, KeyError> {
        self.inner.seal_key(ids)
    }

    fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError> {
        let r = self.inner.destroy(ids);
        self.moved(r)
    }

    fn retire(&self, ids: &[KeyId]) -> Result<bool, KeyError> {
        let r = self.inner.retire(ids);
        self.moved(r)
    }

    fn keys_of_tenant(&self, tenant: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError> {
        self.inner.keys_of_tenant(tenant)
    }

    fn retirements(&self) -> Option<u64> {
        Some(self.count.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// A [`Keyring`] in memory, for tests of what seals and opens values.
#[derive(Default)]
pub struct MemoryKeyring {
    inner: Mutex<MemoryKeys>,
}

#[derive(Default)]
struct MemoryKeys {
    by_subject: HashMap<Subject, KeyId>,
    keys: HashMap<KeyId, (Subject, DataKey)>,
}

impl MemoryKeyring {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryKeys> {
        // A panic while holding it leaves plain maps, still consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Keyring for MemoryKeyring {
    fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError> {
        let mut k = self.lock();
        if let Some(id) = k.by_subject.get(subject) {
            return Ok(*id);
        }
        let id = KeyId::random();
        k.by_subject.insert(subject.clone(), id);
        k.keys.insert(id, (subject.clone(), DataKey::generate()));
        Ok(id)
    }

    fn find(&self, subject: &Subject) -> Result<Option<KeyId>, KeyError> {
        Ok(self.lock().by_subject.get(subject).copied())
    }

    fn seal_key(&self, ids: &[KeyId]) -> Result<Option<SealKey>, KeyError> {
        let k = self.lock();
        let mut keys = Vec::with_capacity(ids.len());
        for id in ids {
            match k.keys.get(id) {
                Some((_, key)) => keys.push((*id, key)),
                None => return Ok(None),
            }
        }
        Ok(Some(SealKey::derive(&keys)))
    }

    fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError> {
        let mut k = self.lock();
        let mut n = 0;
        for id in ids {
            if let Some((subject, _)) = k.keys.remove(id) {
                k.by_subject.remove(&subject);
                n += 1;
            }
        }
        Ok(n)
    }

    fn keys_of_tenant(&self, tenant: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError> {
        let mut v: Vec<(Subject, KeyId)> = self
            .lock()
            .by_subject
            .iter()
            .filter(|(s, _)| s.tenant() == tenant)
            .map(|(s, id)| (s.clone(), *id))
            .collect();
        v.sort();
        Ok(v)
    }
}

/// Fills `buf` from the operating system's generator: for keys and key ids.
pub fn fill_random(buf: &mut [u8]) {
    use rand_core::RngCore;
    rand_core::OsRng.fill_bytes(buf);
}

/// Fills `buf` from this thread's CSPRNG (`rand`'s `ThreadRng`: ChaCha12 seeded and reseeded
/// from the operating system): for nonces and salts, which need to be unpredictable and
/// never repeat but are drawn three times an audit entry, where a system call each
/// (`getrandom`) cost ~4% of ingestion's CPU.
pub fn fill_nonce(buf: &mut [u8]) {
    use rand::RngCore;
    rand::thread_rng().fill_bytes(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Subject {
        Subject::User(Uuid::nil(), "alice".into())
    }

    #[test]
    fn a_value_opens_under_its_keys_and_place_only() {
        let ring = MemoryKeyring::default();
        let s = Sealed::seal_for(&ring, &[alice()], b"place", b"078-05-1120").expect("seal");
        assert_eq!(
            s.open_with(&ring, b"place")
                .expect("open")
                .as_deref()
                .map(|v| v.as_slice()),
            Some(&b"078-05-1120"[..])
        );
        assert!(!s.ct.windows(11).any(|w| w == b"078-05-1120"));
        assert!(matches!(
            s.open_with(&ring, b"elsewhere"),
            Err(KeyError::Seal(SealError::Open))
        ));
        let mut changed = s.clone();
        changed.ct[0] ^= 1;
        assert!(changed.open_with(&ring, b"place").is_err());
    }

    #[test]
    fn retirements_move_with_every_retire_and_destroy_and_only_then() {
        let plain = MemoryKeyring::default();
        assert_eq!(
            plain.retirements(),
            None,
            "a ring that does not count says so"
        );
        let ring = Retirements::new(std::sync::Arc::new(MemoryKeyring::default()));
        let s = Sealed::seal_for(&ring, &[alice()], b"", b"x").expect("seal");
        assert_eq!(ring.retirements(), Some(0));
        assert!(s.open_with(&ring, b"").expect("ring").is_some());
        assert_eq!(ring.retirements(), Some(0), "opening moves nothing");
        let key = ring.find(&alice()).expect("find").expect("a key");
        assert!(!ring.retire(&[key]).expect("retire"));
        assert_eq!(ring.retirements(), Some(1));
        assert!(s.open_with(&ring, b"").expect("ring").is_none());
        assert_eq!(ring.destroy(&[key]).expect("destroy"), 0);
        assert_eq!(ring.retirements(), Some(2));
    }

    #[test]
    fn a_value_of_two_subjects_is_erased_with_either() {
        let ring = MemoryKeyring::default();
        let bot = Subject::Agent(Uuid::nil(), "bot".into());
        let both = Sealed::seal_for(&ring, &[bot.clone(), alice()], b"", b"x").expect("seal");
        let only_bot =
            Sealed::seal_for(&ring, std::slice::from_ref(&bot), b"", b"y").expect("seal");
        assert_eq!(both.keys.len(), 2);
        let alice_key = ring.find(&alice()).expect("find").expect("alice has a key");
        assert_eq!(ring.destroy(&[alice_key]).expect("destroy"), 1);
        assert_eq!(ring.destroy(&[alice_key]).expect("again"), 0);
        assert!(both.open_with(&ring, b"").expect("ring").is_none());
        assert_eq!(
            only_bot
                .open_with(&ring, b"")
                .expect("ring")
                .as_deref()
                .map(|v| v.as_slice()),
            Some(&b"y"[..])
        );
        // The subject seen again gets a new key, under which the old value still does not open.
        let again = ring.key_of(&alice()).expect("new key");
        assert_ne!(again, alice_key);
        assert!(both.open_with(&ring, b"").expect("ring").is_none());
    }

    #[test]
    fn the_seal_key_of_a_set_does_not_depend_on_its_order() {
        let (a, b) = (DataKey::generate(), DataKey::generate());
        let (ia, ib) = (KeyId::random(), KeyId::random());
        let one = SealKey::derive(&[(ia, &a), (ib, &b)]);
        let two = SealKey::derive(&[(ib, &b), (ia, &a)]);
        let s = Sealed::seal(&one, &[ia, ib], b"", b"v");
        assert_eq!(s.open(&two, b"").expect("same key").as_slice(), b"v");
        let alone = SealKey::derive(&[(ia, &a)]);
        assert_eq!(s.open(&alone, b""), Err(SealError::Open));
    }

    #[test]
    fn key_ids_round_trip_through_hex() {
        let id = KeyId::random();
        assert_eq!(KeyId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(KeyId::from_hex("zz"), None);
        assert_eq!(KeyId::from_hex(&"g".repeat(32)), None);
    }
}
