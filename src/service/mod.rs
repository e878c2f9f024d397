//! The service as one value: [`Service::start`] opens everything a configuration names and
//! serves it; [`Service::stop`] stops accepting, lets in-flight requests finish (their appends
//! included), drains the appender and signs a last checkpoint.
//!
//! What starts, in order, and why in that order:
//! 1. the configuration's own checks (tokens, checkpoint origin, witnesses): nothing is
//!    opened for a configuration that cannot serve;
//! 2. the providers (the embedding model): a start that cannot embed fails before it writes
//!    anything to disk;
//! 3. the storage ([`storage::Storage`]): the data dir, the projections caught up with the
//!    log, every data key an erasure in the log named destroyed (a key store restored from a
//!    backup taken before an erasure loses it again here), the Merkle tree, the appender over
//!    the log of record;
//! 4. the checkpoint signer, bound to this log (a checkpoints file of another log refuses the
//!    start), and its key;
//! 5. the listeners, then the handlers' state and the background tasks (checkpoints,
//!    witnesses, exports, the expiry sweep, a cluster's outbox).
//!
//! A start that fails after it created the data dir (or the signing key) removes what it
//! created: nothing was acknowledged to anyone yet.

pub mod providers;
pub mod settings;
pub mod storage;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::listener::{self, Connections};
use crate::api::state::{AppState, Inner};
use crate::api::stream::TailRuntime;
use crate::api::Surface;
use crate::config::ServeArgs;
use crate::log::appender::AppenderThread;
use crate::log::checkpoint::{self, CheckpointSigner};
use providers::Providers;
use storage::Storage;

/// A running service.
pub struct Service {
    state: AppState,
    signer: Arc<CheckpointSigner>,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    /// Turned true to stop: each listener then stops accepting and drains.
    stop: watch::Sender<bool>,
    listeners: Vec<JoinHandle<()>>,
    appender_thread: AppenderThread,
    db: sled::Db,
    tasks: Tasks,
    /// Serves the audit tails' connections.
    tails: TailRuntime,
}

/// The background tasks, in the order they are stopped.
struct Tasks {
    expiry: JoinHandle<()>,
    signer: JoinHandle<()>,
    witnesses: JoinHandle<()>,
    exports: JoinHandle<()>,
    outbox: JoinHandle<()>,
    /// The webhook deliverer, when this process delivers.
    webhooks: Option<(JoinHandle<()>, watch::Sender<bool>)>,
}

impl Service {
    /// Opens everything `args` names and starts serving it.
    pub async fn start(args: ServeArgs) -> anyhow::Result<Service> {
        let tokens = settings::admin_tokens(&args)?;
        let witnesses = settings::witnesses(&args)?;
        // The HTTP providers hold blocking clients, which must be built (and dropped) off the
        // runtime.
        let provider_args = args.clone();
        let providers = tokio::task::spawn_blocking(move || Providers::load(&provider_args))
            .await
            .context("starting the providers")??;
        let created = Created {
            data_dir: (!args.data_dir.exists()).then(|| args.data_dir.clone()),
            signing_key: (!args.signing_key_path().exists()).then(|| args.signing_key_path()),
            master_key: (!args.master_key_path().exists()).then(|| args.master_key_path()),
        };
        let mut providers = Some(providers);
        let started = Self::start_with(&args, tokens, witnesses, &mut providers).await;
        if let Some(p) = providers {
            let _ = tokio::task::spawn_blocking(move || drop(p)).await;
        }
        if started.is_err() {
            created.remove();
        }
        started
    }

    async fn start_with(
        args: &ServeArgs,
        tokens: settings::Tokens,
        witnesses: Vec<String>,
        providers: &mut Option<Providers>,
    ) -> anyhow::Result<Service> {
        let storage = Storage::open(args).await?;
        let tails = TailRuntime::start(args.stream_nice).context("starting the tails' runtime")?;
        match Self::serve(args, tokens, providers, &storage, tails.aside()).await {
            Ok((state, signer, addrs, listeners, stop)) => {
                let tasks = Tasks::spawn(&state, &signer, witnesses, args);
                let Storage {
                    db,
                    appender_thread,
                    ..
                } = storage;
                Ok(Service {
                    state,
                    signer,
                    addr: addrs.0,
                    admin_addr: addrs.1,
                    stop,
                    listeners,
                    appender_thread,
                    db,
                    tasks,
                    tails,
                })
            }
            Err(e) => {
                let Storage {
                    appender,
                    appender_thread,
                    db,
                    ..
                } = storage;
                drop(appender);
                appender_thread.stop().await;
                let _ = db.flush_async().await;
                Err(e)
            }
        }
    }

    /// The signer, the listeners and the state; serving starts here.
    #[allow(clippy::type_complexity)]
    async fn serve(
        args: &ServeArgs,
        tokens: settings::Tokens,
        providers: &mut Option<Providers>,
        storage: &Storage,
        tails: listener::Aside,
    ) -> anyhow::Result<(
        AppState,
        Arc<CheckpointSigner>,
        (SocketAddr, Option<SocketAddr>),
        Vec<JoinHandle<()>>,
        watch::Sender<bool>,
    )> {
        let signer = Arc::new(open_signer(args, storage)?);
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let addr = listener.local_addr()?;
        let admin_listener = match args.admin_listen {
            Some(at) => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .with_context(|| format!("binding the admin listener {at}"))?,
            ),
            None => None,
        };
        let limits = settings::connection_limits(args, 1 + usize::from(admin_listener.is_some()))?;
        let metrics = Some(crate::api::metrics::install()?);
        let Some(Providers {
            embed,
            extractor,
            resolver,
        }) = providers.take()
        else {
            anyhow::bail!("the providers were already taken");
        };
        let (stop, stop_rx) = watch::channel(false);
        // Nothing fails from here on: the state holds the providers, which must not be dropped
        // on the runtime.
        let state = AppState(Arc::new(Inner {
            log: storage.log.clone(),
            projections: storage.projections.clone(),
            appender: storage.appender.clone(),
            signer: signer.clone(),
            settings: settings::handler_settings(args, &tokens),
            exports: crate::export::ExportSettings::from_args(args),
            metrics,
            embed,
            extractor,
            resolver,
            memory: settings::memory_settings(args),
            rate_limiter: crate::api::rate_limit::RateLimiter::new(
                args.rate_limit_per_sec,
                args.rate_limit_burst,
            ),
            log_rate_limiter: crate::api::rate_limit::RateLimiter::per_source(
                args.log_rate_limit_per_sec,
                args.log_rate_limit_burst,
            ),
            admin_throttle: crate::api::admin::throttle::AuthThrottle::new(
                args.admin_auth_failures_per_min,
            ),
            streams: crate::api::stream::Streams::new(
                args.max_streams_per_tenant as usize,
                Duration::from_secs(args.stream_heartbeat_secs),
                stop_rx.clone(),
            ),
            webhooks: crate::webhooks::WebhookSettings::from_args(args),
            as_of: crate::api::memory::as_of::Replays::paced(
                args.as_of_reads_per_sec,
                args.as_of_reads_burst,
            ),
        }));
        crate::release_free_memory();
        let mut listeners = Vec::new();
        let mut admin_addr = None;
        if let Some(admin_listener) = admin_listener {
            let at = admin_listener.local_addr()?;
            admin_addr = Some(at);
            tracing::info!(admin_addr = %at, "serving the admin API");
            listeners.push(tokio::spawn(listener::serve(
                admin_listener,
                crate::api::app_on(state.clone(), Surface::Admin),
                Connections::new(limits),
                stop_rx.clone(),
                // A tail there is refused (the admin surface serves no tenant route).
                None,
            )));
        }
        let surface = if admin_addr.is_some() {
            Surface::Public
        } else {
            Surface::All
        };
        tracing::info!(%addr, data_dir = %args.data_dir.display(), admin = tokens.admin.is_some(), ingest_token = tokens.ingest.is_some(), max_connections = limits.max_connections, "serving");
        listeners.push(tokio::spawn(listener::serve(
            listener,
            crate::api::app_on(state.clone(), surface),
            Connections::new(limits),
            stop_rx,
            Some(tails),
        )));
        Ok((state, signer, (addr, admin_addr), listeners, stop))
    }

    /// The address the API is served on (the bound port when `--listen` asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener's address, with `--admin-listen`.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Stops accepting, lets in-flight requests finish, drains the appender, signs a last
    /// checkpoint and flushes the database.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        for l in self.listeners {
            l.await.context("serving")?;
        }
        // Its connections have closed; what its tasks hold is dropped on its threads, while
        // this still holds the state (whose last reference must drop off any runtime).
        let tails = self.tails;
        let _ = tokio::task::spawn_blocking(move || tails.stop()).await;
        // Expired memories are hidden from reads already; the next start sweeps them.
        self.tasks.expiry.abort();
        if let Some((task, stop)) = self.tasks.webhooks.take() {
            let _ = stop.send(true);
            let _ = task.await;
        }
        tracing::info!("draining the appender");
        self.appender_thread.stop().await;
        let head = self.state.appender.head();
        let _ = self.tasks.signer.await;
        // It waits for the next checkpoint forever: nothing of it needs finishing.
        self.tasks.witnesses.abort();
        let _ = self.tasks.exports.await;
        let _ = self.tasks.outbox.await;
        // Last reference: dropping the providers' blocking clients must happen off the runtime.
        let state = self.state;
        let _ = tokio::task::spawn_blocking(move || drop(state)).await;
        if head.seq > 0 {
            self.signer.sign_logged(head);
        }
        self.db.flush_async().await.context("final flush")?;
        tracing::info!(head_seq = head.seq, "stopped");
        Ok(())
    }
}

impl Tasks {
    fn spawn(
        state: &AppState,
        signer: &Arc<CheckpointSigner>,
        witnesses: Vec<String>,
        args: &ServeArgs,
    ) -> Tasks {
        Tasks {
            outbox: tokio::spawn(state.appender.clone().drain_outbox()),
            signer: tokio::spawn(signer.clone().run(
                state.appender.clone(),
                args.checkpoint_every,
                Duration::from_secs(args.checkpoint_interval_secs.max(1)),
            )),
            witnesses: tokio::spawn(crate::tlog::witnesses::run(signer.clone(), witnesses)),
            exports: tokio::spawn(crate::export::run_worker(crate::export::Exporter {
                log: state.log.clone(),
                projections: state.projections.clone(),
                appender: state.appender.clone(),
                settings: state.exports.clone(),
            })),
            expiry: tokio::spawn(crate::api::memory::expiry::run(
                state.projections.clone(),
                state.appender.clone(),
            )),
            webhooks: state.webhooks.deliver.then(|| {
                let (stop, stopped) = watch::channel(false);
                let task = tokio::spawn(crate::webhooks::worker::run(state.clone(), stopped));
                (task, stop)
            }),
        }
    }
}

/// The checkpoint signer with its key (created at first start) and its checkpoints file,
/// checked against this log; if the log's head is past the latest checkpoint (a crash, or a
/// first start on an existing log), a checkpoint of the head is signed at once, so the public
/// `/log/checkpoint` and the admin head agree from the first request.
fn open_signer(args: &ServeArgs, storage: &Storage) -> anyhow::Result<CheckpointSigner> {
    let key_path = args.signing_key_path();
    let key = checkpoint::load_or_create_key(&key_path)
        .with_context(|| format!("loading the signing key {}", key_path.display()))?;
    match (args.signing_key.as_ref(), inside(&key_path, &args.data_dir)) {
        (Some(_), true) => tracing::warn!(
            "the signing key is inside the data dir: whoever can rewrite the log can then re-sign it"
        ),
        (None, _) => tracing::info!(
            key = %key_path.display(),
            "checkpoints are signed with the key in the data dir; in production keep it elsewhere (--signing-key)"
        ),
        _ => {}
    }
    let head = storage.appender.head();
    let signer = CheckpointSigner::open(
        key,
        args.checkpoints_path(),
        &args.log_origin,
        storage.appender.tlog().clone(),
        &storage.log,
        head,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    if head.seq > signer.latest().map_or(0, |c| c.seq) {
        signer
            .sign(head)
            .with_context(|| format!("signing a checkpoint at {}", head.seq))?;
    }
    Ok(signer)
}

fn inside(path: &Path, dir: &Path) -> bool {
    match (path.canonicalize(), dir.canonicalize()) {
        (Ok(p), Ok(d)) => p.starts_with(d),
        _ => false,
    }
}

/// What a start created, removed again when it fails.
struct Created {
    data_dir: Option<PathBuf>,
    signing_key: Option<PathBuf>,
    master_key: Option<PathBuf>,
}

impl Created {
    fn remove(self) {
        for key in [self.signing_key, self.master_key].into_iter().flatten() {
            let _ = std::fs::remove_file(key);
        }
        if let Some(dir) = self.data_dir {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(error = %e, dir = %dir.display(), "could not remove the data dir this failed start created");
                }
            }
        }
    }
}
