//! `auditmem serve`: open the data dir, catch the projections up, start the appender, the
//! checkpoint signer and the HTTP server; on SIGTERM/SIGINT stop accepting, let in-flight
//! requests finish (their appends included), drain the appender, sign a last checkpoint.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::api::state::{AppState, Inner, MemorySettings, Settings};
use crate::config::LogBackend;
use crate::config::{DurabilityMode, ServeArgs};
use crate::log::appender::{Appender, ClusterLog, Durability};
use crate::log::checkpoint::{self, CheckpointSigner};
use crate::log::nats::{NatsConfig, NatsLog};
use crate::log::{catch_up::catch_up, open_db_with_cache, LogReader};

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before the model, the projections and the runtime's threads allocate: see the function.
    if !crate::disable_transparent_huge_pages() {
        tracing::debug!("transparent huge pages could not be disabled; RSS may run higher");
    }
    if !crate::purge_freed_pages_at_once() {
        tracing::debug!("MIMALLOC_PURGE_DELAY is set: mimalloc purges freed pages as it says");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Refused before anything is opened: a configuration that cannot serve safely.
    let tokens = admin_tokens(&args)?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating data dir {}", args.data_dir.display()))?;
    if crate::log::appender::SpaceGuard::read_only(&args.data_dir).unwrap_or(false) {
        anyhow::bail!(
            "data dir {} is on a read-only filesystem: serving appends to its log (`auditmem verify` only reads)",
            args.data_dir.display()
        );
    }
    let db = open_db_with_cache(&args.data_dir, args.cache_mb.saturating_mul(1024 * 1024))
        .with_context(|| {
            format!(
                "opening data dir {} (is another auditmem using it?)",
                args.data_dir.display()
            )
        })?;
    let spill = crate::log::spill_in(&args.data_dir, args.vector_spill_rows);
    let projections = open_or_rebuild_projections(&db, &args.data_dir, spill)?;
    let log = LogReader::open(&db)?;

    let behind = log
        .head()?
        .seq
        .saturating_sub(projections.min_checkpoint()?);
    if behind > 0 {
        let started = Instant::now();
        let pb = super::progress(behind, "catching up projections");
        let n = catch_up(&log, &projections, Some(&pb)).context("catching up projections")?;
        pb.finish_and_clear();
        tracing::info!(
            records = n,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "projections caught up"
        );
    }

    {
        let tree = crate::tlog::MerkleTree::open(&db, &args.data_dir)
            .context("opening the Merkle tree")?;
        let behind = log.head()?.seq.saturating_sub(tree.size());
        if behind > 0 {
            let pb = super::progress(behind, "building the Merkle tree");
            let n = tree
                .catch_up(&log, Some(&pb))
                .context("building the Merkle tree")?;
            pb.finish_and_clear();
            tracing::info!(records = n, "Merkle tree caught up");
        }
    }

    // Everything read to build the projections stays in sled's memory (see
    // `Projections::detach`): close the database and open it again, keeping what was built.
    let (db, projections, log) = {
        let detached = projections.detach();
        drop((log, db));
        let db = reopen_db(&args.data_dir, args.cache_mb.saturating_mul(1024 * 1024))
            .with_context(|| format!("reopening data dir {}", args.data_dir.display()))?;
        let projections = auditmem_projections::Projections::attach(&db, detached)
            .context("reattaching projections")?;
        let log = LogReader::open(&db)?;
        (db, Arc::new(projections), log)
    };

    let durability = match args.durability {
        DurabilityMode::Fsync => Durability::Fsync,
        DurabilityMode::BatchInterval => {
            Durability::BatchInterval(Duration::from_millis(args.batch_interval_ms.max(1)))
        }
    };
    let cluster = match &args.cluster.backend() {
        LogBackend::Sled => None,
        LogBackend::Nats(servers) => {
            let c = &args.cluster;
            let log = NatsLog::connect(NatsConfig {
                servers: servers.clone(),
                stream: c.nats_stream.clone(),
                subject: c.nats_subject.clone(),
                replicas: c.nats_replicas as usize,
                timeout: Duration::from_millis(c.nats_timeout_ms),
            })
            .await
            .with_context(|| format!("connecting to the log cluster {}", servers.join(",")))?;
            tracing::info!(servers = %servers.join(","), stream = %c.nats_stream, "the log of record is the cluster's stream; this data dir mirrors it");
            Some(ClusterLog {
                log,
                handle: tokio::runtime::Handle::current(),
            })
        }
    };
    let (appender, appender_thread) = Appender::start_on(
        db.clone(),
        &args.data_dir,
        projections.clone(),
        durability,
        args.min_free_mb.saturating_mul(1024 * 1024),
        cluster,
    )?;

    let outbox = tokio::spawn(appender.clone().drain_outbox());
    let key = checkpoint::load_or_create_key(&args.signing_key)
        .with_context(|| format!("loading the signing key {}", args.signing_key.display()))?;
    if let (Ok(k), Ok(d)) = (
        args.signing_key.canonicalize(),
        args.data_dir.canonicalize(),
    ) {
        if k.starts_with(&d) {
            tracing::warn!("the signing key is inside the data dir: whoever can rewrite the log can then re-sign it");
        }
    }
    if !crate::tlog::note::origin_is_valid(&args.log_origin) {
        anyhow::bail!(
            "--log-origin {:?} cannot name a checkpoint key: it must be non-empty, without spaces or '+'",
            args.log_origin
        );
    }
    let signer = Arc::new(
        CheckpointSigner::new(key, args.checkpoints_file.clone())
            .with_tree(&args.log_origin, appender.tlog().clone())
            .map_err(|e| anyhow::anyhow!("--log-origin: {e}"))?,
    );
    let signer_task = tokio::spawn(signer.clone().run(
        appender.clone(),
        args.checkpoint_every,
        Duration::from_secs(args.checkpoint_interval_secs.max(1)),
    ));
    let witnesses: Vec<String> = args
        .witnesses
        .iter()
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty())
        .collect();
    for w in &witnesses {
        if !(w.starts_with("http://") || w.starts_with("https://")) {
            anyhow::bail!("--witness {w:?}: a witness is an http:// or https:// URL prefix");
        }
    }
    let witness_task = tokio::spawn(crate::tlog::witnesses::run(signer.clone(), witnesses));

    // The HTTP providers hold blocking clients, which must be built (and dropped) off the runtime.
    let provider_args = args.clone();
    let (embed, extractor, resolver) =
        tokio::task::spawn_blocking(move || providers(&provider_args))
            .await
            .context("starting the providers")??;
    let state = AppState(Arc::new(Inner {
        log,
        projections,
        appender: appender.clone(),
        signer: signer.clone(),
        settings: Settings {
            admin_token: tokens.admin.clone(),
            ingest_token: tokens.ingest.clone(),
            proxy_trust: crate::api::client_ip::ProxyTrust {
                enabled: args.trust_proxy,
                proxies: args.trusted_proxies.clone(),
            },
            max_body_bytes: args.max_body_bytes,
            audit_body_limit: args.audit_body_limit,
            custom_retention_days: args.custom_retention_days,
            request_timeout: Duration::from_secs(args.request_timeout_secs.max(1)),
            consistency_wait: Duration::from_millis(args.cluster.consistency_wait_ms),
        },
        exports: crate::export::ExportSettings::from_args(&args),
        metrics: Some(crate::api::metrics::install()?),
        embed,
        extractor,
        resolver,
        memory: MemorySettings {
            credits_per_call: args.extract_credits_per_call,
            credits_per_1k_chars: args.extract_credits_per_1k_chars,
            usd_per_credit: args.usd_per_credit,
            dedup_threshold: args.dedup_threshold,
            max_extract_chars: args.max_extract_chars,
            max_extract_memories: args.max_extract_memories,
            reservations: Default::default(),
        },
        rate_limiter: crate::api::rate_limit::RateLimiter::new(
            args.rate_limit_per_sec,
            args.rate_limit_burst,
        ),
        admin_throttle: crate::api::admin::throttle::AuthThrottle::new(
            args.admin_auth_failures_per_min,
        ),
    }));
    let export_worker = tokio::spawn(crate::export::run_worker(crate::export::Exporter {
        log: state.log.clone(),
        projections: state.projections.clone(),
        appender: state.appender.clone(),
        settings: state.exports.clone(),
    }));
    let expiry_task = tokio::spawn(crate::api::memory::expiry::run(
        state.projections.clone(),
        state.appender.clone(),
    ));
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
    let limits = connection_limits(&args, 1 + usize::from(admin_listener.is_some()))?;
    crate::release_free_memory();
    // A stop signal turns this true; each listener then stops accepting and drains.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    use crate::api::listener::{self, Connections};
    use crate::api::Surface;
    let admin_serving = match admin_listener {
        Some(admin_listener) => {
            let admin_addr = admin_listener.local_addr()?;
            // Printed before the line below, which tests and scripts wait for.
            println!("auditmem admin listening on http://{admin_addr}");
            tracing::info!(%admin_addr, "serving the admin API");
            Some(tokio::spawn(listener::serve(
                admin_listener,
                crate::api::app_on(state.clone(), Surface::Admin),
                Connections::new(limits),
                stop_rx.clone(),
            )))
        }
        None => None,
    };
    let surface = if admin_serving.is_some() {
        Surface::Public
    } else {
        Surface::All
    };
    // Tests and scripts read this line to learn the port when --listen asks for port 0.
    println!("auditmem listening on http://{addr}");
    tracing::info!(%addr, data_dir = %args.data_dir.display(), admin = tokens.admin.is_some(), ingest_token = tokens.ingest.is_some(), max_connections = limits.max_connections, "serving");
    listener::serve(
        listener,
        crate::api::app_on(state.clone(), surface),
        Connections::new(limits),
        stop_rx,
    )
    .await;
    if let Some(admin) = admin_serving {
        admin.await.context("serving the admin API")?;
    }

    // Expired memories are hidden from reads already; the next start sweeps them.
    expiry_task.abort();
    tracing::info!("draining the appender");
    let head = appender.head();
    drop(appender);
    appender_thread.stop().await;
    let _ = signer_task.await;
    // It waits for the next checkpoint forever: nothing of it needs finishing.
    witness_task.abort();
    let _ = export_worker.await;
    let _ = outbox.await;
    // Last reference: dropping the providers' blocking clients must happen off the runtime.
    let _ = tokio::task::spawn_blocking(move || drop(state)).await;
    if head.seq > 0 {
        signer.sign_logged(head);
    }
    db.flush_async().await.context("final flush")?;
    tracing::info!(head_seq = head.seq, "stopped");
    Ok(())
}

/// The admin and ingest tokens `serve` runs with (an empty one is none).
struct Tokens {
    admin: Option<String>,
    ingest: Option<String>,
}

/// The tokens, or why the configuration is refused: a token under
/// [`MIN_TOKEN_BYTES`](crate::api::admin::MIN_TOKEN_BYTES) without
/// `--insecure-short-admin-token`, an ingest token without an admin token or equal to it, an
/// admin listener without an admin API.
fn admin_tokens(args: &ServeArgs) -> anyhow::Result<Tokens> {
    use crate::api::admin::MIN_TOKEN_BYTES;
    let admin = args.admin_token.clone().filter(|t| !t.is_empty());
    let ingest = args.ingest_token.clone().filter(|t| !t.is_empty());
    for (name, token) in [
        ("AUDITMEM_ADMIN_TOKEN", &admin),
        ("AUDITMEM_INGEST_TOKEN", &ingest),
    ] {
        let Some(token) = token else { continue };
        if token.len() >= MIN_TOKEN_BYTES {
            continue;
        }
        if !args.insecure_short_admin_token {
            anyhow::bail!(
                "{name} is {} bytes; at least {MIN_TOKEN_BYTES} are required (e.g. `openssl rand -hex 32`), or pass --insecure-short-admin-token for local development",
                token.len()
            );
        }
        tracing::warn!(
            "{name} is shorter than {MIN_TOKEN_BYTES} bytes (--insecure-short-admin-token): for local development only"
        );
    }
    if ingest.is_some() && admin.is_none() {
        anyhow::bail!(
            "AUDITMEM_INGEST_TOKEN needs AUDITMEM_ADMIN_TOKEN: it opens a route of the admin API"
        );
    }
    if ingest.is_some() && ingest == admin {
        anyhow::bail!("AUDITMEM_INGEST_TOKEN must differ from AUDITMEM_ADMIN_TOKEN");
    }
    if args.admin_listen.is_some() && admin.is_none() {
        anyhow::bail!(
            "--admin-listen needs AUDITMEM_ADMIN_TOKEN: without it there is no admin API to serve"
        );
    }
    Ok(Tokens { admin, ingest })
}

/// Each listener's limits: `--max-connections` lowered to what the open-files limit (raised to
/// its hard limit first) leaves for `listeners` listeners.
fn connection_limits(
    args: &ServeArgs,
    listeners: usize,
) -> anyhow::Result<crate::api::listener::Limits> {
    use crate::api::listener;
    let files = listener::raise_open_files_limit();
    let asked = usize::try_from(args.max_connections).unwrap_or(usize::MAX);
    let max_connections = listener::connection_budget(asked, files, listeners);
    if max_connections == 0 {
        anyhow::bail!(
            "the open-files limit ({}) leaves no file for connections after {} for the server's own use; raise it (ulimit -n)",
            files.unwrap_or(0),
            listener::RESERVED_FILES
        );
    }
    if max_connections < asked {
        tracing::warn!(
            asked,
            max_connections,
            open_files_limit = files,
            "--max-connections lowered to what the open-files limit allows"
        );
    }
    Ok(listener::Limits {
        header_read_timeout: Duration::from_secs(args.header_read_timeout_secs),
        max_connections,
        max_per_peer: usize::try_from(args.max_connections_per_peer).unwrap_or(usize::MAX),
    })
}

/// The providers `serve` runs with: the embedder, the extractor, and what decides conflicts.
type Providers = (
    crate::embed::EmbedService,
    Arc<dyn crate::extract::Extractor>,
    Arc<dyn crate::extract::Resolver>,
);

/// The embedder and extractor the configuration asks for; a missing model is an error that
/// names the set-up command (nothing is fetched at run time).
fn providers(args: &ServeArgs) -> anyhow::Result<Providers> {
    use crate::config::{EmbedderKind, ExtractorKind};
    use crate::embed::EmbedServiceConfig;
    let timeout = Duration::from_secs(args.provider_timeout_secs.max(1));
    let roots = crate::http_client::ExtraRoots::load(args.provider_ca_file.as_deref())
        .map_err(|e| anyhow::anyhow!("--provider-ca-file: {e}"))?;
    let (embedder, batches): (Arc<dyn crate::embed::Embedder>, _) = match args.embedder {
        EmbedderKind::Minilm => (
            Arc::new(
                crate::embed::MiniLm::load(&args.model_dir).map_err(|e| anyhow::anyhow!("{e}"))?,
            ),
            EmbedServiceConfig::default(),
        ),
        EmbedderKind::Openai => {
            let url = args
                .embed_url
                .clone()
                .context("--embedder openai needs --embed-url")?;
            let mut cfg = crate::embed::OpenAiEmbedConfig::new(url, args.embed_model.clone());
            cfg.api_key = args.embed_api_key.clone();
            cfg.timeout = timeout;
            cfg.roots = roots.clone();
            (
                Arc::new(
                    crate::embed::OpenAiEmbedder::new(cfg).map_err(|e| anyhow::anyhow!("{e}"))?,
                ),
                EmbedServiceConfig::remote(),
            )
        }
    };
    let embed = crate::embed::EmbedService::with_config(embedder, batches)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (extractor, resolver): (
        Arc<dyn crate::extract::Extractor>,
        Arc<dyn crate::extract::Resolver>,
    ) = match args.extractor {
        ExtractorKind::Rules => (
            Arc::new(crate::extract::RuleExtractor::new()),
            Arc::new(crate::extract::RuleResolver),
        ),
        ExtractorKind::Openai => {
            let url = args
                .extract_url
                .clone()
                .context("--extractor openai needs --extract-url")?;
            let mut cfg = crate::extract::OpenAiChatConfig::new(url, args.extract_model.clone());
            cfg.api_key = args.extract_api_key.clone();
            cfg.timeout = timeout;
            cfg.roots = roots;
            (
                Arc::new(
                    crate::extract::OpenAiChatExtractor::new(cfg.clone())
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                ),
                Arc::new(
                    crate::extract::ChatConflictJudge::new(cfg)
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                ),
            )
        }
    };
    Ok((embed, extractor, resolver))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}

/// Opens the data dir's database right after this process closed it. sled's background
/// threads let go of the database file (and its lock) a moment after the last handle is
/// dropped, so a busy machine can see the lock still held: that one error is waited out, for
/// up to ten seconds, rather than failing the start.
fn reopen_db(dir: &std::path::Path, cache_bytes: u64) -> Result<sled::Db, sled::Error> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match open_db_with_cache(dir, cache_bytes) {
            // sled reports it as `ErrorKind::Other` with this text (sled 0.34's config.rs).
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Opens the projections; if their stored state is corrupt (undecodable, or pointing at log
/// records that are not there: a damaged or partially copied data dir), says so in the log,
/// rebuilds every projection from the log as `auditmem replay` does, and opens them again. The
/// log is the truth; projections are only a cache of it. A storage error is not corruption and
/// stops the start.
fn open_or_rebuild_projections(
    db: &sled::Db,
    data_dir: &Path,
    spill: Option<auditmem_projections::vector_table::Spill>,
) -> anyhow::Result<auditmem_projections::Projections> {
    match crate::log::open_projections(db, spill.clone()) {
        Ok(p) => Ok(p),
        Err(e)
            if matches!(
                e.downcast_ref::<auditmem_projections::ProjectionError>(),
                Some(auditmem_projections::ProjectionError::Corrupt { .. })
            ) =>
        {
            tracing::warn!(error = %e, "projection state is corrupt: rebuilding every projection from the log");
            let started = Instant::now();
            let n = super::replay::replay(db, data_dir, spill.clone())
                .context("rebuilding projections from the log")?;
            tracing::warn!(
                records = n,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "projections rebuilt from the log"
            );
            crate::log::open_projections(db, spill).context("opening projections after the rebuild")
        }
        Err(e) => Err(e).context("opening projections"),
    }
}
