//! `auditmem replay`: drop every projection and rebuild them all from the log.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use auditmem_projections::Projections;

use crate::config::{LogBackend, ReplayArgs};
use crate::log::{catch_up::catch_up, open_db_with_cache, LogReader};

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    if !args.data_dir.join("db").is_file() {
        anyhow::bail!(
            "{} is not an auditmem data dir (no sled db file)",
            args.data_dir.display()
        );
    }
    let db = open_db_with_cache(&args.data_dir, 2 * 1024 * 1024 * 1024).with_context(|| {
        format!(
            "opening {} (a running server holds it: stop it first)",
            args.data_dir.display()
        )
    })?;
    let started = Instant::now();
    let spill = crate::log::spill_in(
        &args.data_dir,
        auditmem_projections::vector_table::SPILL_ROWS,
    );
    // A cluster node's data keys are in the cluster's key store, not in its data dir.
    let cluster = match args.log.clone().or_else(LogBackend::from_env) {
        None | Some(LogBackend::Sled) => None,
        Some(LogBackend::Nats(servers)) => Some(crate::log::cluster::NatsConfig {
            servers,
            stream: args.nats_stream.clone(),
            subject: String::new(),
            replicas: 3,
            timeout: std::time::Duration::from_millis(args.nats_timeout_ms),
        }),
    };
    let keys = crate::keys::open(
        &args.data_dir,
        &crate::config::master_key_path(&args.data_dir, args.master_key_file.as_deref()),
        cluster.as_ref(),
    )?;
    let n = replay(&db, &args.data_dir, spill, keys)?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "replayed {n} records in {secs:.2}s ({:.0} records/s)",
        n as f64 / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

/// Drops every projection tree and folds the whole log again; returns the records replayed.
/// Large vector tables spill their rows as `spill` says, as the server's do.
pub fn replay(
    db: &sled::Db,
    data_dir: &Path,
    spill: Option<auditmem_projections::vector_table::Spill>,
    keys: std::sync::Arc<dyn auditmem_projections::seal::Keyring>,
) -> anyhow::Result<u64> {
    // By name, without opening them: replay must work whatever state they are in.
    for name in Projections::TREES {
        db.drop_tree(name)
            .with_context(|| format!("dropping {name}"))?;
    }
    let projections =
        crate::log::open_projections(db, spill, keys).context("reopening projections")?;
    let log = LogReader::open(db)?;
    let head = log.head()?.seq;
    // The Merkle tree is a projection too, rebuilt leaf by leaf from the records. It needs
    // nothing of the other projections, so it is rebuilt on a thread of its own beside them:
    // replay takes the longer of the two, not their sum.
    crate::tlog::MerkleTree::drop_in(db, data_dir).context("dropping the Merkle tree")?;
    let tree = crate::tlog::MerkleTree::open(db, data_dir).context("reopening the Merkle tree")?;
    let bars = indicatif::MultiProgress::new();
    let pb = bars.add(super::progress(head, "replaying"));
    let tree_pb = bars.add(super::progress(head, "rebuilding the Merkle tree"));
    let n = std::thread::scope(|s| {
        let rebuilt = s.spawn(|| tree.catch_up(&log, Some(&tree_pb)));
        let n = catch_up(&log, &projections, Some(&pb)).context("replaying");
        let rebuilt = rebuilt
            .join()
            .map_err(|_| anyhow::anyhow!("the Merkle tree's rebuild panicked"))
            .and_then(|r| r.context("rebuilding the Merkle tree"));
        n.and_then(|n| rebuilt.map(|_| n))
    })?;
    pb.finish_and_clear();
    tree_pb.finish_and_clear();
    db.flush().context("flushing")?;
    Ok(n)
}
