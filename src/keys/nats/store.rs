//! The key store's stream and the requests a keyring makes of it: its names, the connection,
//! and each read, create-only write, replace and secure erase, with the leader's silence
//! remembered so one write that needs several keys waits for one timeout, not one per key.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::DirectGetErrorKind;
use async_nats::jetstream::stream::{self, LastRawMessageErrorKind};
use async_nats::jetstream::{self, context::PublishErrorKind};
use futures_util::StreamExt;
use uuid::Uuid;

use auditmem_projections::seal::{KeyError, KeyId};

use crate::log::cluster::NatsConfig;
/// The header naming a wrapped key's tenant (so that its destroy finds its subject record).
pub(super) const TENANT_HEADER: &str = "Auditmem-Tenant";

/// The names a cluster's key store lives under, derived from the log's stream name.
#[derive(Clone, Debug)]
pub struct Names {
    pub stream: String,
    prefix: String,
    pub(super) notice: String,
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

    pub(super) fn all(&self) -> String {
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
    /// Runs a request that needs the stream's leader, unless the leader is known to be silent,
    /// and notes how it ended. `request` has already turned the answers that are not failures
    /// (no such message, a lost create-only race) into values.
    async fn to_leader<T>(
        &self,
        request: impl Future<Output = Result<T, KeyError>>,
    ) -> Result<T, KeyError> {
        let asked = self.leader.ask()?;
        let out = request.await;
        self.leader.answered(asked, out.is_err());
        out
    }

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
        self.to_leader(async {
            let read = self
                .stream
                .get_first_raw_message_by_subject(subject, 1)
                .await;
            match read {
                Ok(m) => Ok(Some(m)),
                Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
                Err(e) => Err(store_error(format!("reading {subject}: {e}"))),
            }
        })
        .await
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
        self.to_leader(async {
            let acked = async { self.js.send_publish(subject.to_string(), m).await?.await };
            match acked.await {
                Ok(ack) => Ok(Some(ack.sequence)),
                Err(e) if matches!(e.kind(), PublishErrorKind::WrongLastSequence) => Ok(None),
                Err(e) => Err(store_error(format!("writing {subject}: {e}"))),
            }
        })
        .await
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
        self.to_leader(async {
            let acked = async {
                self.js
                    .send_publish(subject.to_string(), PublishMessage::build())
                    .await?
                    .await
            };
            acked
                .await
                .map(|_| ())
                .map_err(|e| store_error(format!("writing {subject}: {e}")))
        })
        .await
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
        self.to_leader(async {
            let acked = async { self.js.send_publish(subject.to_string(), m).await?.await };
            acked
                .await
                .map_err(|e| store_error(format!("rewriting {subject}: {e}")))
        })
        .await?;
        self.erase(seq).await.map(|_| ())
    }

    /// Securely erases the message at `seq` on every replica; `false` when it was not there.
    /// Every node folding an erasure destroys its keys, so another node may have erased the
    /// message since it was read: the server answers that as "sequence not found".
    pub async fn erase(&self, seq: u64) -> Result<bool, KeyError> {
        use async_nats::jetstream::ErrorCode;
        self.to_leader(async {
            match self.stream.delete_message(seq).await {
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
        })
        .await
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
