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

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::DirectGetErrorKind;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_nats::jetstream::{self, context::PublishErrorKind};
use futures_util::StreamExt;
use uuid::Uuid;

use auditmem_projections::seal::{DataKey, KeyError, KeyId, Keyring, SealKey, Subject};

use super::kek::Kek;
use super::OpenError;
use crate::log::cluster::NatsConfig;

/// How long a node trusts a key it read from the stream without reading it again.
pub const CACHE_TTL: Duration = Duration::from_secs(5);

/// The header naming a wrapped key's tenant (so that its destroy finds its subject record).
const TENANT_HEADER: &str = "Auditmem-Tenant";

/// The names a cluster's key store lives under, derived from the log's stream name.
#[derive(Clone, Debug)]
pub struct Names {
    pub stream: String,
    prefix: String,
    notice: String,
}

impl Names {
    pub fn of_log_stream(log_stream: &str) -> Names {
        Names {
            stream: format!("{log_stream}_KEYS"),
            prefix: format!("_AUDITMEM.{log_stream}.keys"),
            notice: format!("_AUDITMEM.{log_stream}.keys-destroyed"),
        }
    }

    pub fn check(&self) -> String {
        format!("{}.check", self.prefix)
    }

    pub fn key(&self, id: &KeyId) -> String {
        format!("{}.k.{}", self.prefix, id.to_hex())
    }

    /// The tombstone of a destroyed key: written before the key is erased, so that a key
    /// missing from a read counts as destroyed only when it says so (a missing key without
    /// one is a store that does not answer truly yet, e.g. a leader still recovering).
    pub fn gone(&self, id: &KeyId) -> String {
        format!("{}.gone.{}", self.prefix, id.to_hex())
    }

    /// Every wrapped key's subject.
    pub fn all_keys(&self) -> String {
        format!("{}.k.*", self.prefix)
    }

    pub fn subject(&self, tenant: Uuid, digest_hex: &str) -> String {
        format!("{}.s.{tenant}.{digest_hex}", self.prefix)
    }

    /// Every subject record's subject of `tenant` (`*` for every tenant).
    pub fn subjects_of(&self, tenant: &str) -> String {
        format!("{}.s.{tenant}.*", self.prefix)
    }

    fn all(&self) -> String {
        format!("{}.>", self.prefix)
    }
}

/// The key store's stream, connected, with the operations the keyring and the rotation need.
#[derive(Clone)]
pub struct Store {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub stream: stream::Stream,
    pub names: Names,
    leader: Arc<LeaderWatch>,
}

/// Whether the stream's leader answers. A request to it that failed only after half of
/// `--nats-timeout-ms` means no leader (a cluster without a quorum): for the next
/// `--nats-timeout-ms` the leader is not asked again, so one write that needs several keys
/// waits for one timeout, not one per key, and reads go straight to a replica.
#[derive(Debug)]
struct LeaderWatch {
    timeout: Duration,
    silent_until: Mutex<Option<Instant>>,
}

impl LeaderWatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.silent_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The time of asking, or `Unavailable` while the leader is known to be silent.
    fn ask(&self) -> Result<Instant, KeyError> {
        let now = Instant::now();
        match *self.lock() {
            Some(until) if now < until => Err(KeyError::Unavailable(format!(
                "the key store's leader did not answer within {:?} a moment ago",
                self.timeout
            ))),
            _ => Ok(now),
        }
    }

    /// Notes how a request asked at `asked` ended.
    fn answered(&self, asked: Instant, failed: bool) {
        let mut silent = self.lock();
        if !failed {
            *silent = None;
        } else if asked.elapsed() >= self.timeout / 2 {
            *silent = Some(Instant::now() + self.timeout);
        }
    }
}

/// A request to the key store that failed on the way (no quorum, a timeout, no responder):
/// the caller may retry, as with a write the log cannot take.
fn store_error(e: impl std::fmt::Display) -> KeyError {
    KeyError::Unavailable(e.to_string())
}

impl Store {
    /// Connects and creates the stream if missing (`create`; otherwise a missing stream is an
    /// error), retrying until a deadline: right after the servers start there may be no
    /// JetStream meta leader to create it.
    pub async fn connect(config: &NatsConfig, create: bool) -> anyhow::Result<Store> {
        let (client, js) =
            crate::log::cluster::nats::connect_jetstream(config, "auditmem-keys").await?;
        let names = Names::of_log_stream(&config.stream);
        let deadline = Instant::now() + config.timeout.max(Duration::from_secs(30));
        let stream = loop {
            let made = if create {
                js.get_or_create_stream(stream::Config {
                    name: names.stream.clone(),
                    subjects: vec![names.all()],
                    num_replicas: config.replicas,
                    // Reads from any replica: while the stream has no leader (no quorum), a
                    // node still reads the keys it has not cached (never to conclude that a
                    // key is absent: see `read_key`).
                    allow_direct: true,
                    storage: stream::StorageType::File,
                    retention: stream::RetentionPolicy::Limits,
                    ..Default::default()
                })
                .await
                .map_err(anyhow::Error::from)
            } else {
                js.get_stream(&names.stream)
                    .await
                    .map_err(anyhow::Error::from)
            };
            match made {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    tracing::info!(error = %e, "waiting for JetStream to hold the key store");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => anyhow::bail!("the stream {}: {e:#}", names.stream),
            }
        };
        Ok(Store {
            client,
            js,
            stream,
            names,
            leader: Arc::new(LeaderWatch {
                timeout: config.timeout,
                silent_until: Mutex::new(None),
            }),
        })
    }

    /// The first message on `subject`, read from the stream's leader.
    pub async fn first(&self, subject: &str) -> Result<Option<StreamMessage>, KeyError> {
        let asked = self.leader.ask()?;
        let read = self
            .stream
            .get_first_raw_message_by_subject(subject, 1)
            .await;
        let out = match read {
            Ok(m) => Ok(Some(m)),
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
            Err(e) => Err(store_error(format!("reading {subject}: {e}"))),
        };
        self.leader.answered(asked, out.is_err());
        out
    }

    /// Publishes `payload` on `subject` only if the subject holds no message: the stored
    /// sequence, or `None` when it held one.
    pub async fn create(
        &self,
        subject: &str,
        payload: Vec<u8>,
        tenant: Option<Uuid>,
    ) -> Result<Option<u64>, KeyError> {
        let mut m = PublishMessage::build()
            .payload(payload.into())
            .expected_last_subject_sequence(0);
        if let Some(t) = tenant {
            m = m.header(TENANT_HEADER, t.to_string().as_str());
        }
        let asked = self.leader.ask()?;
        let acked = async { self.js.send_publish(subject.to_string(), m).await?.await };
        let out = match acked.await {
            Ok(ack) => Ok(Some(ack.sequence)),
            Err(e) if matches!(e.kind(), PublishErrorKind::WrongLastSequence) => Ok(None),
            Err(e) => Err(store_error(format!("writing {subject}: {e}"))),
        };
        self.leader.answered(asked, out.is_err());
        out
    }

    /// The first message on `subject` from any replica (no leader needed); `None` when that
    /// replica has none, which proves nothing: it may be behind.
    pub async fn first_direct(&self, subject: &str) -> Result<Option<StreamMessage>, KeyError> {
        match self.stream.direct_get_first_for_subject(subject).await {
            Ok(m) => Ok(Some(m)),
            Err(e) if matches!(e.kind(), DirectGetErrorKind::NotFound) => Ok(None),
            Err(e) => Err(store_error(format!(
                "reading {subject} from a replica: {e}"
            ))),
        }
    }

    /// Publishes an empty message on `subject`, acknowledged.
    pub async fn mark(&self, subject: &str) -> Result<(), KeyError> {
        let asked = self.leader.ask()?;
        let acked = async {
            self.js
                .send_publish(subject.to_string(), PublishMessage::build())
                .await?
                .await
        };
        let out = acked
            .await
            .map(|_| ())
            .map_err(|e| store_error(format!("writing {subject}: {e}")));
        self.leader.answered(asked, out.is_err());
        out
    }

    /// Replaces the message at `seq` on `subject` by `payload`: the new one is stored first
    /// (only while `seq` is still the subject's last), then the old one erased.
    pub async fn replace(
        &self,
        subject: &str,
        seq: u64,
        payload: Vec<u8>,
        headers: &async_nats::HeaderMap,
    ) -> Result<(), KeyError> {
        let mut m = PublishMessage::build()
            .payload(payload.into())
            .expected_last_subject_sequence(seq);
        // Ours only: a stored message keeps the `Nats-Expected-*` headers it was published with.
        for (name, values) in headers.iter() {
            if AsRef::<str>::as_ref(name).starts_with("Nats-") {
                continue;
            }
            for v in values {
                m = m.header(name.clone(), v.clone());
            }
        }
        let asked = self.leader.ask()?;
        let acked = async { self.js.send_publish(subject.to_string(), m).await?.await };
        let out = acked
            .await
            .map_err(|e| store_error(format!("rewriting {subject}: {e}")));
        self.leader.answered(asked, out.is_err());
        out?;
        self.erase(seq).await.map(|_| ())
    }

    /// Securely erases the message at `seq` on every replica; `false` when it was not there.
    /// Every node folding an erasure destroys its keys, so another node may have erased the
    /// message since it was read: the server answers that as "sequence not found".
    pub async fn erase(&self, seq: u64) -> Result<bool, KeyError> {
        use async_nats::jetstream::ErrorCode;
        let asked = self.leader.ask()?;
        let deleted = self.stream.delete_message(seq).await;
        self.leader.answered(asked, deleted.is_err());
        match deleted {
            Ok(done) => Ok(done),
            Err(e) => match e.kind() {
                async_nats::jetstream::stream::DeleteMessageErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::NO_MESSAGE_FOUND
                        || j.error_code() == ErrorCode::SEQUENCE_NOT_FOUND =>
                {
                    Ok(false)
                }
                _ => Err(store_error(format!("erasing message {seq}: {e}"))),
            },
        }
    }

    /// The subjects holding messages that match `filter`.
    pub async fn subjects(&self, filter: &str) -> Result<Vec<String>, KeyError> {
        let mut found = self
            .stream
            .info_with_subjects(filter)
            .await
            .map_err(store_error)?;
        let mut out = Vec::new();
        while let Some(s) = found.next().await {
            out.push(s.map_err(store_error)?.0);
        }
        out.sort();
        Ok(out)
    }
}

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
