//! A cluster's keyring (`--log nats://...`): the data keys in a JetStream stream that every API
//! node reads, never in the log's stream (which nothing deletes from).
//!
//! The stream `<log stream>_KEYS` (replicated as the log is) holds, on subjects under
//! `_AUDITMEM.<log stream>.keys`:
//! - `.check`: the KEK's check value (the first node to start writes it; a node whose KEK does
//!   not open it refuses to start, so every node runs with the same KEK file);
//! - `.k.<kid>`: one wrapped data key, its tenant in the `Auditmem-Tenant` header;
//! - `.s.<tenant>.<digest>`: the subject record naming the subject's live key.
//!
//! **One key per subject across nodes.** A node creating a subject's key publishes its wrapped
//! key, then the subject record with `Nats-Expected-Last-Subject-Sequence: 0` (create-only),
//! then reads the subject's *first* message: that is the subject's key on every node. The
//! expected-sequence check alone is not enough (nats-server before 2.9.21 checks it outside
//! its raft log, so two creates a few milliseconds apart can both land); reading the first
//! message makes the stream's order decide. The loser erases its own messages and uses the
//! winner's key.
//!
//! **A destroy is a secure erase.** `$JS.API.STREAM.MSG.DELETE` without `no_erase` overwrites
//! the message with random bytes on every replica (a raft proposal like a write), unlike a
//! purge or a limit, which only drop it. The wrapped key goes first, then its subject record.
//! What this cannot reach: the raft log of each replica (`<store_dir>/jetstream/<account>/
//! _js_/`) keeps the appended entry, wrapped under the KEK, until the stream's next raft
//! snapshot compacts it (docs/PRIVACY.md).
//!
//! **The cache.** Each node keeps the keys it unwrapped, each trusted for [`CACHE_TTL`]
//! after it was last read from the stream. A destroy publishes a notice (a plain NATS message
//! of the destroyed ids, `_AUDITMEM.<log stream>.keys-destroyed`, stored nowhere) on which
//! every node drops them at once; a node that missed it (disconnected) reads the stream again
//! once the entry is older than [`CACHE_TTL`]. So a node stops opening a destroyed key within
//! milliseconds, and at most [`CACHE_TTL`] after the destroy. While the stream cannot be read,
//! a key older than that is not used: reads of sealed data fail rather than risk serving an
//! erased value.
//!
//! The [`Keyring`] trait is synchronous and is called from the server's runtime and from the
//! log's writer thread, so the keyring runs its NATS client on a runtime of its own and each
//! call waits for its answer (bounded by `--nats-timeout-ms`).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use uuid::Uuid;

use auditmem_projections::seal::{DataKey, KeyError, KeyId, Keyring, SealKey, Subject};

use super::kek::Kek;
use super::OpenError;
use crate::log::cluster::NatsConfig;

/// How long a node trusts a key it read from the stream without reading it again.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

mod store;
use store::TENANT_HEADER;
pub use store::{Names, Store};

/// A subject's state in the store.
enum Lookup {
    /// Its live key.
    Live(KeyId, DataKey),
    /// A subject record (at this stream sequence) whose key was destroyed: a destroy stopped
    /// between its two erases.
    Stale(u64),
    Absent,
}

struct Inner {
    store: Store,
    kek: Kek,
    timeout: Duration,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<KeyId, (DataKey, Instant)>,
    subjects: HashMap<Subject, (KeyId, Instant)>,
}

impl Cache {
    fn forget(&mut self, id: &KeyId) {
        self.keys.remove(id);
        self.subjects.retain(|_, (v, _)| v != id);
    }
}

/// The keyring of a cluster: see the module's documentation.
pub struct NatsKeyring {
    inner: Arc<Inner>,
    /// The runtime the NATS client runs on.
    rt: OwnRuntime,
}

/// A runtime let go of without waiting when dropped: waiting for its threads is refused
/// inside another runtime, where the keyring may well be dropped (a failed start, a stop).
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    fn get(&self) -> Result<&tokio::runtime::Runtime, KeyError> {
        self.0
            .as_ref()
            .ok_or_else(|| KeyError::Store("the keyring is closed".into()))
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl NatsKeyring {
    /// Connects to the key store of the log `config` names and checks the KEK at `kek_path`
    /// against it. The first node of a cluster writes the store's check value; every node
    /// must have the KEK file (the cluster's one KEK, which no node generates).
    pub fn open(config: &NatsConfig, kek_path: &Path) -> Result<NatsKeyring, OpenError> {
        Self::open_store(config, kek_path, true)
    }

    /// [`NatsKeyring::open`] for a reader (`verify --nats`): a store that has no stream or
    /// no check value is an error, and neither is created.
    pub fn open_existing(config: &NatsConfig, kek_path: &Path) -> Result<NatsKeyring, OpenError> {
        Self::open_store(config, kek_path, false)
    }

    fn open_store(
        config: &NatsConfig,
        kek_path: &Path,
        create: bool,
    ) -> Result<NatsKeyring, OpenError> {
        let own = OwnRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("auditmem-keys")
                .enable_all()
                .build()
                .map_err(|e| OpenError::Cluster {
                    store: config.stream.clone(),
                    reason: format!("starting its runtime: {e}"),
                })?,
        ));
        let rt = own.get().map_err(|e| OpenError::Cluster {
            store: config.stream.clone(),
            reason: e.to_string(),
        })?;
        let names = Names::of_log_stream(&config.stream);
        let store_name = format!("{} on {}", names.stream, config.servers.join(","));
        let cluster = |reason: String| OpenError::Cluster {
            store: store_name.clone(),
            reason,
        };
        let wait = config.timeout.max(Duration::from_secs(30)) + Duration::from_secs(5);
        let cfg = config.clone();
        let store = wait_on(rt, wait, async move { Store::connect(&cfg, create).await })
            .map_err(|e| cluster(e.to_string()))?
            .map_err(|e| cluster(format!("{e:#}")))?;
        let kek = Self::check_kek(rt, &store, kek_path, config.timeout, &store_name, create)?;
        let inner = Arc::new(Inner {
            store,
            kek,
            timeout: config.timeout,
            cache: Mutex::new(Cache::default()),
        });
        let listener = inner.clone();
        let subscribed = wait_on(rt, config.timeout, async move {
            let mut notices = listener
                .store
                .client
                .subscribe(listener.store.names.notice.clone())
                .await?;
            tokio::spawn(async move {
                while let Some(m) = notices.next().await {
                    let mut cache = listener.lock();
                    for id in m.payload.chunks_exact(16) {
                        if let Ok(bytes) = id.try_into() {
                            cache.forget(&KeyId(bytes));
                        }
                    }
                }
            });
            Ok::<_, async_nats::SubscribeError>(())
        });
        subscribed
            .map_err(|e| cluster(e.to_string()))?
            .map_err(|e| cluster(format!("subscribing to destroy notices: {e}")))?;
        Ok(NatsKeyring { inner, rt: own })
    }

    fn check_kek(
        rt: &tokio::runtime::Runtime,
        store: &Store,
        kek_path: &Path,
        timeout: Duration,
        store_name: &str,
        create: bool,
    ) -> Result<Kek, OpenError> {
        let cluster = |reason: String| OpenError::Cluster {
            store: store_name.to_string(),
            reason,
        };
        let first_check = |store: &Store| {
            let s = store.clone();
            wait_on(rt, timeout, async move { s.first(&s.names.check()).await })
                .map_err(|e| cluster(e.to_string()))?
                .map_err(|e| cluster(e.to_string()))
        };
        let kek = match first_check(store)? {
            Some(_) if !kek_path.exists() => {
                return Err(OpenError::MissingKek {
                    store: store_name.to_string(),
                    kek: kek_path.to_path_buf(),
                })
            }
            // A KEK one node generated would be known to that node only (and removed again if
            // its start failed, leaving a store no KEK opens): the operator makes the one KEK
            // of the cluster and gives it to every node.
            None if !kek_path.exists() => {
                return Err(OpenError::NoClusterKek {
                    kek: kek_path.to_path_buf(),
                })
            }
            Some(_) => Kek::load(kek_path)?,
            None if !create => {
                return Err(cluster(
                    "it holds no check value: no API node has started on it".into(),
                ))
            }
            None => {
                let kek = Kek::load(kek_path)?;
                let s = store.clone();
                let check = kek.check_value();
                wait_on(rt, timeout, async move {
                    s.create(&s.names.check(), check, None).await
                })
                .map_err(|e| cluster(e.to_string()))?
                .map_err(|e| cluster(e.to_string()))?;
                kek
            }
        };
        // The first check value is the store's: another node may have written its own first.
        let opens = first_check(store)?.is_some_and(|m| kek.opens_check(&m.payload));
        if !opens {
            return Err(OpenError::WrongKek {
                store: store_name.to_string(),
                kek: kek_path.to_path_buf(),
            });
        }
        Ok(kek)
    }

    /// Runs `f` on the keyring's runtime and waits for its answer.
    fn call<T, F, Fut>(&self, f: F) -> Result<T, KeyError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = Result<T, KeyError>> + Send + 'static,
    {
        let rt = self.rt.get()?;
        // One call may make a few requests, each bounded by the timeout.
        wait_on(rt, 4 * self.inner.timeout, f(self.inner.clone()))
            .map_err(|e| KeyError::Unavailable(e.to_string()))?
    }
}

#[derive(Debug, thiserror::Error)]
enum WaitError {
    #[error("the key store did not answer within {0:?}")]
    TimedOut(Duration),
    #[error("the key store's runtime stopped")]
    Stopped,
}

/// Runs `fut` on `rt` and blocks this thread (whatever runtime it belongs to) until it ends or
/// `within` passes.
fn wait_on<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    within: Duration,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, WaitError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let out = tokio::time::timeout(within, fut).await;
        let _ = tx.send(out);
    });
    match rx.recv() {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(WaitError::TimedOut(within)),
        Err(_) => Err(WaitError::Stopped),
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // Plain maps: still consistent after a panic elsewhere.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn subject_name(&self, subject: &Subject) -> String {
        self.store
            .names
            .subject(subject.tenant(), &subject.digest_hex())
    }

    /// A data key read from the stream; `None` when it was destroyed (its tombstone is
    /// there). Without a leader the key is read from a replica; a key missing without a
    /// tombstone, or missing from a replica, is `Unavailable`, never destroyed.
    async fn read_key(&self, id: &KeyId) -> Result<Option<(u64, DataKey)>, KeyError> {
        let name = self.store.names.key(id);
        let m = match self.store.first(&name).await {
            Ok(Some(m)) => m,
            Ok(None) => {
                return match self.store.first(&self.store.names.gone(id)).await? {
                    Some(_) => Ok(None),
                    None => Err(KeyError::Unavailable(format!(
                        "{name} is not in the key store and no destroy of it is recorded"
                    ))),
                };
            }
            Err(KeyError::Unavailable(why)) => match self.store.first_direct(&name).await {
                Ok(Some(m)) => m,
                _ => return Err(KeyError::Unavailable(why)),
            },
            Err(e) => return Err(e),
        };
        let (_, key) = self
            .kek
            .unwrap_key(id, &m.payload)
            .map_err(|e| KeyError::Store(format!("{name}: {e}")))?;
        Ok(Some((m.sequence, key)))
    }

    async fn lookup(&self, subject: &Subject) -> Result<Lookup, KeyError> {
        let name = self.subject_name(subject);
        let m = match self.store.first(&name).await {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(Lookup::Absent),
            // Without a leader a replica's copy names the key (a subject record is never
            // changed, only erased with its key); a replica without one proves nothing.
            Err(KeyError::Unavailable(why)) => match self.store.first_direct(&name).await {
                Ok(Some(m)) => m,
                _ => return Err(KeyError::Unavailable(why)),
            },
            Err(e) => return Err(e),
        };
        let (_, id) = self
            .kek
            .unwrap_subject(&m.payload)
            .map_err(|e| KeyError::Store(format!("{name}: {e}")))?;
        Ok(match self.read_key(&id).await? {
            Some((_, key)) => Lookup::Live(id, key),
            None => Lookup::Stale(m.sequence),
        })
    }

    fn remember(&self, subject: &Subject, id: KeyId, key: DataKey) {
        let now = Instant::now();
        let mut cache = self.lock();
        cache.keys.insert(id, (key, now));
        cache.subjects.insert(subject.clone(), (id, now));
    }

    async fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError> {
        let name = self.subject_name(subject);
        // This node's key and the sequences of its messages, once it wrote them.
        let mut mine: Option<(KeyId, u64, Option<u64>)> = None;
        for _ in 0..8 {
            match self.lookup(subject).await? {
                Lookup::Live(id, key) => {
                    if let Some((my_id, key_seq, subject_seq)) = mine {
                        if my_id != id {
                            // Lost the race: this node's messages name a key nothing uses.
                            self.store.erase(key_seq).await?;
                            if let Some(seq) = subject_seq {
                                self.store.erase(seq).await?;
                            }
                        }
                    }
                    self.remember(subject, id, key);
                    return Ok(id);
                }
                Lookup::Stale(seq) => {
                    self.store.erase(seq).await?;
                }
                Lookup::Absent => {
                    let (id, key_seq) = match mine {
                        Some((id, seq, _)) => (id, seq),
                        None => {
                            let id = KeyId::random();
                            let key = DataKey::generate();
                            let wrapped = self.kek.wrap_key(&id, &subject.digest(), &key);
                            let seq = self
                                .store
                                .create(&self.store.names.key(&id), wrapped, Some(subject.tenant()))
                                .await?
                                .ok_or_else(|| KeyError::Store("a key id was reused".into()))?;
                            (id, seq)
                        }
                    };
                    let record = self.kek.wrap_subject(subject, &id);
                    let subject_seq = self.store.create(&name, record, None).await?;
                    mine = Some((id, key_seq, subject_seq));
                }
            }
        }
        Err(KeyError::Store(format!(
            "{name}: no key after repeated attempts (keys destroyed as fast as they are made?)"
        )))
    }

    async fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError> {
        {
            let mut cache = self.lock();
            for id in ids {
                cache.forget(id);
            }
        }
        let mut n = 0;
        for id in ids {
            let name = self.store.names.key(id);
            let Some(m) = self.store.first(&name).await? else {
                continue;
            };
            // The tombstone first: from then on a reader that misses the key knows why.
            self.store.mark(&self.store.names.gone(id)).await?;
            let digest = self.kek.unwrap_key(id, &m.payload).ok().map(|(d, _)| d);
            let tenant = m
                .headers
                .get(TENANT_HEADER)
                .and_then(|v| Uuid::parse_str(v.as_str()).ok());
            if self.store.erase(m.sequence).await? {
                n += 1;
            }
            if let (Some(tenant), Some(digest)) = (tenant, digest) {
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                let record = self.store.names.subject(tenant, &hex);
                if let Some(s) = self.store.first(&record).await? {
                    if self.kek.unwrap_subject(&s.payload).ok().map(|(_, k)| k) == Some(*id) {
                        self.store.erase(s.sequence).await?;
                    }
                }
            }
        }
        let notice: Vec<u8> = ids.iter().flat_map(|id| id.0).collect();
        // Best effort: a node that misses it reads the stream again after CACHE_TTL.
        let _ = self
            .store
            .client
            .publish(self.store.names.notice.clone(), notice.into())
            .await;
        let _ = self.store.client.flush().await;
        Ok(n)
    }

    async fn keys_of_tenant(&self, tenant: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError> {
        let names = self
            .store
            .subjects(&self.store.names.subjects_of(&tenant.to_string()))
            .await?;
        let mut out = Vec::new();
        for name in names {
            let Some(m) = self.store.first(&name).await? else {
                continue;
            };
            let (subject, id) = self
                .kek
                .unwrap_subject(&m.payload)
                .map_err(|e| KeyError::Store(format!("{name}: {e}")))?;
            if self
                .store
                .first(&self.store.names.key(&id))
                .await?
                .is_some()
            {
                out.push((subject, id));
            }
        }
        out.sort();
        Ok(out)
    }
}

impl Keyring for NatsKeyring {
    fn key_of(&self, subject: &Subject) -> Result<KeyId, KeyError> {
        if let Some(id) = self.find_cached(subject) {
            return Ok(id);
        }
        let subject = subject.clone();
        self.call(|inner| async move { inner.key_of(&subject).await })
    }

    fn find(&self, subject: &Subject) -> Result<Option<KeyId>, KeyError> {
        if let Some(id) = self.find_cached(subject) {
            return Ok(Some(id));
        }
        let subject = subject.clone();
        self.call(|inner| async move {
            Ok(match inner.lookup(&subject).await? {
                Lookup::Live(id, key) => {
                    inner.remember(&subject, id, key);
                    Some(id)
                }
                Lookup::Stale(_) | Lookup::Absent => None,
            })
        })
    }

    fn seal_key(&self, ids: &[KeyId]) -> Result<Option<SealKey>, KeyError> {
        let mut keys: Vec<(KeyId, DataKey)> = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        {
            let cache = self.inner.lock();
            for id in ids {
                match cache.keys.get(id) {
                    Some((k, at)) if at.elapsed() < CACHE_TTL => keys.push((*id, k.clone())),
                    _ => missing.push(*id),
                }
            }
        }
        if !missing.is_empty() {
            let wanted = missing.clone();
            let read = self.call(|inner| async move {
                let mut out = Vec::with_capacity(missing.len());
                for id in missing {
                    match inner.read_key(&id).await? {
                        Some((_, key)) => {
                            inner.lock().keys.insert(id, (key.clone(), Instant::now()));
                            out.push((id, key));
                        }
                        None => {
                            inner.lock().forget(&id);
                            return Ok(None);
                        }
                    }
                }
                Ok(Some(out))
            });
            let read = match read {
                Ok(read) => read,
                // The store cannot be read (no quorum, no replica answering): a key this node
                // holds, however old, is still that key (a destroy made elsewhere meanwhile
                // reaches this node when the store answers again).
                Err(KeyError::Unavailable(why)) => {
                    let cache = self.inner.lock();
                    let mut held = Vec::with_capacity(wanted.len());
                    for id in &wanted {
                        match cache.keys.get(id) {
                            Some((k, _)) => held.push((*id, k.clone())),
                            None => return Err(KeyError::Unavailable(why)),
                        }
                    }
                    Some(held)
                }
                Err(e) => return Err(e),
            };
            match read {
                Some(read) => keys.extend(read),
                None => return Ok(None),
            }
        }
        let refs: Vec<(KeyId, &DataKey)> = keys.iter().map(|(id, k)| (*id, k)).collect();
        Ok(Some(SealKey::derive(&refs)))
    }

    fn destroy(&self, ids: &[KeyId]) -> Result<usize, KeyError> {
        let ids = ids.to_vec();
        self.call(|inner| async move { inner.destroy(&ids).await })
    }

    fn keys_of_tenant(&self, tenant: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError> {
        self.call(|inner| async move { inner.keys_of_tenant(tenant).await })
    }
}

impl NatsKeyring {
    /// The subject's key id from the cache, while both it and its key are fresh.
    fn find_cached(&self, subject: &Subject) -> Option<KeyId> {
        let cache = self.inner.lock();
        let (id, at) = cache.subjects.get(subject)?;
        let fresh = at.elapsed() < CACHE_TTL
            && cache
                .keys
                .get(id)
                .is_some_and(|(_, k)| k.elapsed() < CACHE_TTL);
        fresh.then_some(*id)
    }
}
