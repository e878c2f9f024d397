//! Opening a data dir for serving: the database, the projections caught up with the log, the
//! Merkle tree, and the appender over the log of record (sled, or a cluster's stream).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use auditmem_projections::Projections;

use crate::config::{DurabilityMode, LogBackend, ServeArgs};
use crate::log::appender::{Appender, AppenderThread, ClusterLog, Durability};
use crate::log::nats::{NatsConfig, NatsLog};
use crate::log::{catch_up::catch_up, open_db_with_cache, LogReader};

/// An open data dir whose projections and tree hold the whole log, with its appender running.
pub struct Storage {
    pub db: sled::Db,
    pub log: LogReader,
    pub projections: Arc<Projections>,
    pub appender: Appender,
    pub appender_thread: AppenderThread,
}

impl Storage {
    /// Opens `args.data_dir` (created when missing) and starts its appender.
    pub async fn open(args: &ServeArgs) -> anyhow::Result<Storage> {
        let dir = &args.data_dir;
        let cache = args.cache_mb.saturating_mul(1024 * 1024);
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating data dir {}", dir.display()))?;
        if crate::log::appender::SpaceGuard::read_only(dir).unwrap_or(false) {
            anyhow::bail!(
                "data dir {} is on a read-only filesystem: serving appends to its log (`auditmem verify` only reads)",
                dir.display()
            );
        }
        let db = open_db_with_cache(dir, cache).with_context(|| {
            format!(
                "opening data dir {} (is another auditmem using it?)",
                dir.display()
            )
        })?;
        let spill = crate::log::spill_in(dir, args.vector_spill_rows);
        // A cluster's keys live in its JetStream store, which every node reads.
        let cluster = match args
            .key_store
            .clone()
            .unwrap_or_else(|| args.cluster.backend())
        {
            LogBackend::Sled => None,
            LogBackend::Nats(servers) => Some(nats_config(args, &servers)),
        };
        let keys = crate::keys::open(dir, &args.master_key_path(), cluster.as_ref())?;
        let projections = open_or_rebuild_projections(&db, dir, spill, keys)?;
        let log = LogReader::open(&db)?;
        let behind = log
            .head()?
            .seq
            .saturating_sub(projections.min_checkpoint()?);
        if behind > 0 {
            let started = Instant::now();
            let pb = crate::cli::progress(behind, "catching up projections");
            let n = catch_up(&log, &projections, Some(&pb)).context("catching up projections")?;
            pb.finish_and_clear();
            tracing::info!(
                records = n,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "projections caught up"
            );
        }
        // Every key an erasure in the log named is destroyed before anything is served, even
        // when the key store came back from a backup taken before the erasure.
        let destroyed = projections
            .erasures
            .enforce()
            .context("destroying the keys erasures named")?;
        if destroyed > 0 {
            tracing::warn!(
                keys = destroyed,
                "destroyed data keys that erasures in the log had named (the key store was restored, or a stop cut an erasure short)"
            );
        }
        build_tree(&db, dir, &log)?;

        // Everything read to build the projections stays in sled's memory (see
        // `Projections::detach`): close the database and open it again, keeping what was built.
        let (db, projections, log) = {
            let detached = projections.detach().context("detaching projections")?;
            drop((log, db));
            let db = reopen_db(dir, cache)
                .with_context(|| format!("reopening data dir {}", dir.display()))?;
            let projections =
                Projections::attach(&db, detached).context("reattaching projections")?;
            let log = LogReader::open(&db)?;
            (db, Arc::new(projections), log)
        };
        // Serving, an erasure's keys are destroyed beside the applier, not in it.
        projections
            .erasures
            .shred_in_background()
            .context("starting the erasures' key shredder")?;

        let durability = match args.durability {
            DurabilityMode::Fsync => Durability::Fsync,
            DurabilityMode::BatchInterval => {
                Durability::BatchInterval(Duration::from_millis(args.batch_interval_ms.max(1)))
            }
        };
        let cluster = match &args.cluster.backend() {
            LogBackend::Sled => None,
            LogBackend::Nats(servers) => Some(connect_cluster(args, servers).await?),
        };
        let (appender, appender_thread) = Appender::start_on(
            db.clone(),
            dir,
            projections.clone(),
            durability,
            args.min_free_mb.saturating_mul(1024 * 1024),
            cluster,
        )?;
        Ok(Storage {
            db,
            log,
            projections,
            appender,
            appender_thread,
        })
    }
}

/// Folds into the Merkle tree whatever of the log it lacks (a data dir from before the tree,
/// or one whose `tlog/` was lost), with progress shown: it can take a while on a large log.
fn build_tree(db: &sled::Db, dir: &Path, log: &LogReader) -> anyhow::Result<()> {
    let tree = crate::tlog::MerkleTree::open(db, dir).context("opening the Merkle tree")?;
    let behind = log.head()?.seq.saturating_sub(tree.size());
    // The tiles hold complete runs of 256 leaves; the last partial run is always folded again
    // at open, quickly and without a word.
    if behind > crate::tlog::TILE_WIDTH as u64 {
        let pb = crate::cli::progress(behind, "building the Merkle tree");
        let n = tree
            .catch_up(log, Some(&pb))
            .context("building the Merkle tree")?;
        pb.finish_and_clear();
        tracing::info!(records = n, "Merkle tree caught up");
    }
    Ok(())
}

fn nats_config(args: &ServeArgs, servers: &[String]) -> NatsConfig {
    let c = &args.cluster;
    NatsConfig {
        servers: servers.to_vec(),
        stream: c.nats_stream.clone(),
        subject: c.nats_subject.clone(),
        replicas: c.nats_replicas as usize,
        timeout: Duration::from_millis(c.nats_timeout_ms),
    }
}

async fn connect_cluster(args: &ServeArgs, servers: &[String]) -> anyhow::Result<ClusterLog> {
    let c = &args.cluster;
    let log = NatsLog::connect(nats_config(args, servers))
        .await
        .with_context(|| format!("connecting to the log cluster {}", servers.join(",")))?;
    tracing::info!(servers = %servers.join(","), stream = %c.nats_stream, "the log of record is the cluster's stream; this data dir mirrors it");
    Ok(ClusterLog {
        log,
        handle: tokio::runtime::Handle::current(),
    })
}

/// Opens the data dir's database right after this process closed it. sled's background
/// threads let go of the database file (and its lock) a moment after the last handle is
/// dropped, so a busy machine can see the lock still held: that one error is waited out, for
/// up to ten seconds, rather than failing the start.
fn reopen_db(dir: &Path, cache_bytes: u64) -> Result<sled::Db, sled::Error> {
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
    keys: Arc<dyn auditmem_projections::seal::Keyring>,
) -> anyhow::Result<Projections> {
    match crate::log::open_projections(db, spill.clone(), keys.clone()) {
        Ok(p) => Ok(p),
        Err(e)
            if matches!(
                e.downcast_ref::<auditmem_projections::ProjectionError>(),
                Some(auditmem_projections::ProjectionError::Corrupt { .. })
            ) =>
        {
            tracing::warn!(error = %e, "projection state is corrupt: rebuilding every projection from the log");
            let started = Instant::now();
            let n = crate::cli::replay::replay(db, data_dir, spill.clone(), keys.clone())
                .context("rebuilding projections from the log")?;
            tracing::warn!(
                records = n,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "projections rebuilt from the log"
            );
            crate::log::open_projections(db, spill, keys)
                .context("opening projections after the rebuild")
        }
        Err(e) => Err(e).context("opening projections"),
    }
}
