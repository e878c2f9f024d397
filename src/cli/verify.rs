//! `auditmem verify`: offline over a stopped server's data dir, or live over the raw records a
//! running server streams (checked here, not by the server).
//!
//! Verify never writes to the data dir: sled would create or recover files when opening, so
//! the directory is copied to a temporary place first, after making sure no server holds it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use base64::Engine;
use ed25519_dalek::VerifyingKey;

use crate::config::{LogBackend, VerifyArgs};
use crate::export::manifest::Manifest;
use crate::log::checkpoint::{self, Checkpoint, PinnedKey};
use crate::log::verify::{verify_tree, Report, Verifier};
use crate::log::{Head, LOG_TREE};

pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    if args.proof.is_some() || args.consistency.is_some() || args.export_proofs.is_some() {
        return super::verify_proof::run(&args);
    }
    refuse_misplaced(&args)?;
    let pinned = pinned_key(&args)?;
    let expect_head = args.expect_head.as_deref().map(parse_head).transpose()?;
    let checkpoints = match &args.checkpoints {
        Some(p) => checkpoint::read_file(p).map_err(anyhow::Error::msg)?,
        None => Vec::new(),
    };
    let pinned = pinned.map(|p| p.key);
    if let Some(file) = &args.export {
        return verify_export(file, args.manifest.as_deref(), pinned.as_ref(), args.json);
    }
    let report = if let Some(dir) = &args.data_dir {
        verify_dir(
            dir,
            args.master_key_file.as_deref(),
            expect_head,
            &checkpoints,
            pinned.as_ref(),
        )?
    } else if let Some(url) = &args.url {
        verify_url(
            url,
            args.ca_file.as_deref(),
            args.admin_token.as_deref(),
            expect_head,
            &checkpoints,
            pinned.as_ref(),
        )?
    } else if let Some(LogBackend::Nats(servers)) = &args.nats {
        let mut report = verify_nats(
            servers,
            &args.nats_stream,
            expect_head,
            &checkpoints,
            pinned.as_ref(),
        )?;
        if let Some(kek) = &args.master_key_file {
            count_erased_in_cluster(&mut report, servers, &args.nats_stream, kek);
        }
        report
    } else if args.nats.is_some() {
        bail!("--nats takes nats://HOST:PORT[,HOST:PORT...]");
    } else {
        bail!("give --data-dir DIR (offline), --url URL (live) or --nats URL (a cluster's stream)");
    };
    // Without a pinned key a checkpoint proves only that whoever wrote the checkpoints file
    // signed it: say so, rather than let an "OK" read as more.
    let mut notes = Vec::new();
    if pinned.is_none() && !checkpoints.is_empty() {
        let mut keys: Vec<&str> = checkpoints.iter().map(|c| c.public_key.as_str()).collect();
        keys.dedup();
        notes.push(format!(
            "no --pubkey given: the checkpoints were checked against the public key the checkpoints file names ({}), so they prove only that whoever wrote that file signed them; pin the service's key (auditmem admin pubkey) with --pubkey",
            keys.join(", ")
        ));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"clean": report.clean(), "report": report, "notes": notes})
            )?
        );
    } else {
        for note in &notes {
            println!("NOTE: {note}");
        }
        println!("{}", report.render());
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `--pubkey`, read once the options were checked against the mode (a key given where it has
/// nothing to check is refused as such, not for its form).
pub(super) fn pinned_key(args: &VerifyArgs) -> anyhow::Result<Option<PinnedKey>> {
    args.pubkey
        .as_deref()
        .map(str::parse::<PinnedKey>)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--pubkey: {e}"))
}

/// Refuses options that do not apply to the mode asked for (exit 2), naming them: an option
/// that is silently ignored lets an auditor believe it was checked.
fn refuse_misplaced(args: &VerifyArgs) -> anyhow::Result<()> {
    if !args.witness_keys.is_empty() || args.witness_quorum > 0 {
        bail!("--witness-key and --witnesses apply only to --proof FILE and --export-proofs FILE");
    }
    if args.export.is_none() {
        for (given, flag) in [
            (args.manifest.is_some(), "--manifest"),
            (args.chain_only, "--chain-only"),
        ] {
            if given {
                bail!("{flag} applies only to --export FILE");
            }
        }
        return Ok(());
    }
    let anchors: Vec<&str> = [
        (args.expect_head.is_some(), "--expect-head"),
        (args.checkpoints.is_some(), "--checkpoints"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect();
    if !anchors.is_empty() {
        bail!(
            "{} do not apply to --export: they anchor the log's chain, not an export file, which is held to its --manifest (and --pubkey)",
            anchors.join(" and ")
        );
    }
    match (&args.manifest, args.chain_only) {
        (Some(_), true) => bail!("--chain-only and --manifest exclude each other"),
        (None, false) => bail!(
            "--export needs --manifest FILE, the export's signed manifest (GET /v1/audit/logs/export/{{export_id}}/manifest); --chain-only checks the rows' chain alone, which cannot see rows cut from either end, a recomputed chain or a made-up file"
        ),
        (None, true) if args.pubkey.is_some() => {
            bail!("--pubkey has nothing to check with --chain-only: it pins the manifest's signer")
        }
        _ => Ok(()),
    }
}

fn verify_export(
    file: &Path,
    manifest: Option<&Path>,
    pinned: Option<&VerifyingKey>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let manifest = match manifest {
        Some(path) => {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(Manifest::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?)
        }
        None => None,
    };
    let report = crate::export::verify::verify_export(&bytes, manifest.as_ref(), pinned)
        .map_err(anyhow::Error::msg)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"clean": report.clean(), "report": report})
            )?
        );
    } else {
        println!("{}", report.render());
    }

    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn parse_head(s: &str) -> anyhow::Result<Head> {
    let (seq, hash) = s.split_once(':').context("--expect-head must be SEQ:HEX")?;
    let seq: u64 = seq
        .trim()
        .parse()
        .context("--expect-head: SEQ must be a number")?;
    let hash: [u8; 32] = hex::decode(hash.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .context("--expect-head: HEX must be 64 hex digits")?;
    Ok(Head { seq, hash })
}

/// Whether a running process holds sled's lock on the data dir.
fn held_by_server(db_file: &Path) -> anyhow::Result<bool> {
    let f =
        std::fs::File::open(db_file).with_context(|| format!("opening {}", db_file.display()))?;
    // sled takes an exclusive flock on `db`; probing it takes and drops a shared one.
    match f.try_lock_shared() {
        Ok(()) => {
            f.unlock()
                .with_context(|| format!("unlocking {}", db_file.display()))?;
            Ok(false)
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("probing the lock of {}", db_file.display()))
        }
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        // Exports are not the log; the key directory (two small files a key, one key a memory)
        // is read in place by `count_erased`: copying it cost more than the chain's check.
        if entry.file_name() == crate::export::EXPORTS_DIR
            || entry.file_name() == crate::keys::KEYS_DIR
        {
            continue;
        }
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn verify_dir(
    dir: &Path,
    kek: Option<&Path>,
    expect_head: Option<Head>,
    checkpoints: &[Checkpoint],
    pinned: Option<&VerifyingKey>,
) -> anyhow::Result<Report> {
    let db_file: PathBuf = dir.join("db");
    if !dir.is_dir() || !db_file.is_file() {
        bail!(
            "{} is not an auditmem data dir (no sled db file)",
            dir.display()
        );
    }
    if held_by_server(&db_file)? {
        bail!(
            "{} is held by a running server; verify it live with --url http://ADDR (and AUDITMEM_ADMIN_TOKEN)",
            dir.display()
        );
    }
    let tmp = tempfile::Builder::new()
        .prefix("auditmem-verify-")
        .tempdir()
        .context("creating a temporary copy")?;
    copy_dir(dir, tmp.path()).context("copying the data dir")?;
    // A cache larger than the log keeps sled from re-reading pages while it is scanned.
    let db = crate::log::open_db_with_cache(tmp.path(), 2 * 1024 * 1024 * 1024)
        .context("opening the copy of the data dir")?;
    let tree = db.open_tree(LOG_TREE)?;
    // Records, not keys: a key holds a chunk of records. A head that does not decode is
    // verify's to report; the bar then counts keys (a walk of the whole tree, so only then).
    let records = crate::log::LogReader::open(&db)
        .and_then(|log| log.head())
        .map_or_else(|_| tree.len() as u64, |h| h.seq);
    let pb = super::progress(records, "verifying");
    let mut report = verify_tree(&tree, expect_head, checkpoints, pinned, &|n| pb.inc(n));
    pb.finish_and_clear();
    count_erased(&mut report, dir, kek);
    Ok(report)
}

/// Counts the records of erased subjects with the keyring of the stopped server's data dir
/// `dir`, read in place, when it has keys and the KEK is there; the chain's verdict never
/// depends on it.
fn count_erased(report: &mut Report, dir: &Path, kek: Option<&Path>) {
    if report.sealed == 0 {
        report.erased = Some(0);
        return;
    }
    // Opening only a key dir that has its check and a KEK that exists: opening writes neither
    // then, and counting only reads key files.
    let kek = match kek {
        Some(k) => k.to_path_buf(),
        None => crate::config::master_key_path(dir, None),
    };
    let keys = dir.join(crate::keys::KEYS_DIR);
    if !kek.is_file() || !keys.join("kek.check").is_file() {
        return;
    }
    match crate::keys::open_in(dir, &kek) {
        Ok(ring) => {
            if let Err(e) = report.count_erased(&*ring) {
                tracing::warn!(error = %e, dir = %dir.display(), "counting erased records");
            }
        }
        Err(e) => tracing::warn!(error = %e, dir = %dir.display(), "opening the keyring"),
    }
}

/// Counts the records of erased subjects with the cluster's key store (`<stream>_KEYS`), opened
/// with the KEK `kek` and never written to; the chain's verdict never depends on it.
fn count_erased_in_cluster(report: &mut Report, servers: &[String], stream: &str, kek: &Path) {
    if report.sealed == 0 {
        report.erased = Some(0);
        return;
    }
    let config = crate::log::cluster::NatsConfig {
        servers: servers.to_vec(),
        stream: stream.to_string(),
        subject: String::new(),
        replicas: 3,
        timeout: std::time::Duration::from_secs(10),
    };
    match crate::keys::NatsKeyring::open_existing(&config, kek) {
        Ok(ring) => {
            if let Err(e) = report.count_erased(&ring) {
                tracing::warn!(error = %e, stream, "counting erased records");
            }
        }
        Err(e) => tracing::warn!(error = %e, stream, "opening the key store"),
    }
}

/// GETs `path` of the server: an answer that is not a success (a redirect included: none is
/// followed, so that the admin token goes nowhere else) is an error naming its status.
fn admin_get(
    client: &reqwest::blocking::Client,
    base: &str,
    path: &str,
    token: &str,
) -> anyhow::Result<reqwest::blocking::Response> {
    let resp = crate::http_client::send(
        client.get(format!("{base}{path}")).bearer_auth(token),
        base,
        path,
    )?;
    let status = resp.status();
    if !status.is_success() {
        bail!("{path} answered {status}");
    }
    Ok(resp)
}

/// Verifies the chain straight from a cluster's stream: every message's records, in stream
/// order, numbered by their place (as keys number a data dir's records), so a message deleted
/// from the stream or a record inserted into one breaks the chain where it happened.
fn verify_nats(
    servers: &[String],
    stream: &str,
    expect_head: Option<Head>,
    checkpoints: &[Checkpoint],
    pinned: Option<&VerifyingKey>,
) -> anyhow::Result<Report> {
    use futures_util::StreamExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let anchors = checkpoints
        .iter()
        .map(|c| c.seq)
        .chain(expect_head.map(|h| h.seq));
    let mut v = Verifier::new(anchors);
    rt.block_on(async {
        // Right after a server or leader change the stream may not answer yet: retried for a
        // while, as the nodes do, each time on a new connection (the client picks a server at
        // random), so a server whose JetStream side is still recovering is not asked again and
        // again.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (_client, last, mut messages) = loop {
            let attempt = async {
                let client = async_nats::ConnectOptions::new()
                    .name("auditmem-verify")
                    .connection_timeout(std::time::Duration::from_secs(10))
                    .connect(servers.to_vec())
                    .await
                    .with_context(|| format!("connecting to {}", servers.join(",")))?;
                let js = async_nats::jetstream::new(client.clone());
                let mut s = js
                    .get_stream(stream)
                    .await
                    .with_context(|| format!("opening the stream {stream}"))?;
                let last = s
                    .info()
                    .await
                    .context("reading the stream's state")?
                    .state
                    .last_sequence;
                let consumer = s
                    .create_consumer(async_nats::jetstream::consumer::push::OrderedConfig {
                        deliver_subject: client.new_inbox(),
                        deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                        ..Default::default()
                    })
                    .await
                    .context("following the stream")?;
                let messages = consumer.messages().await.context("following the stream")?;
                anyhow::Ok((client, last, messages))
            };
            match attempt.await {
                Ok(found) => break found,
                Err(e) if std::time::Instant::now() < deadline => {
                    tracing::info!(error = %e, "the stream does not answer yet; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let pb = super::progress(last, "verifying the stream's messages");
        let mut place = 0u64;
        let mut batch: Vec<(u64, Vec<u8>)> = Vec::with_capacity(8192);
        let mut at = 0u64;
        while at < last {
            let next = tokio::time::timeout(std::time::Duration::from_secs(60), messages.next());
            let Some(message) = next
                .await
                .with_context(|| format!("no message after {at} of {last} within 60 s"))?
            else {
                bail!("the stream ended at message {at} of {last}");
            };
            let message = message.context("reading the stream")?;
            at = message.info().map_err(anyhow::Error::msg)?.stream_sequence;
            pb.set_position(at);
            if message.payload.is_empty() {
                continue;
            }
            for piece in crate::log::record::pieces(&message.payload) {
                place += 1;
                batch.push((place, message.payload[piece.range].to_vec()));
            }
            if batch.len() >= 8192 {
                v.feed(&batch);
                batch.clear();
            }
        }
        v.feed(&batch);
        pb.finish_and_clear();
        Ok(())
    })?;
    Ok(v.finish(expect_head, checkpoints, pinned))
}

fn verify_url(
    url: &str,
    ca_file: Option<&Path>,
    token: Option<&str>,
    expect_head: Option<Head>,
    checkpoints: &[Checkpoint],
    pinned: Option<&VerifyingKey>,
) -> anyhow::Result<Report> {
    let token = token.context("--url needs the admin token (AUDITMEM_ADMIN_TOKEN)")?;
    let base = url.trim_end_matches('/');
    let roots = crate::http_client::ExtraRoots::load(ca_file)
        .map_err(|e| anyhow::anyhow!("--ca-file: {e}"))?;
    // No timeout: the stream of a large log takes as long as it takes.
    let client = crate::http_client::blocking(None, &roots)?;
    let head: serde_json::Value = admin_get(&client, base, "/admin/v1/log/head", token)
        .context("reading the head")?
        .json()?;
    let total = head["data"]["seq"].as_u64().unwrap_or(0);
    let resp =
        admin_get(&client, base, "/admin/v1/log?from=1", token).context("streaming the log")?;
    let anchors = checkpoints
        .iter()
        .map(|c| c.seq)
        .chain(expect_head.map(|h| h.seq));
    let mut v = Verifier::new(anchors);
    let pb = super::progress(total, "verifying");
    let mut chunk: Vec<(u64, Vec<u8>)> = Vec::with_capacity(8192);
    for line in BufReader::new(resp).lines() {
        let line = line.context("reading the stream")?;
        if line.is_empty() {
            continue;
        }
        let item: serde_json::Value =
            serde_json::from_str(&line).context("the stream sent a line that is not JSON")?;
        let seq = item["seq"].as_u64().context("a streamed line has no seq")?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(item["record"].as_str().unwrap_or(""))
            .context("a streamed record is not base64")?;
        chunk.push((seq, bytes));
        if chunk.len() == 8192 {
            v.feed(&chunk);
            pb.inc(chunk.len() as u64);
            chunk.clear();
        }
    }
    v.feed(&chunk);
    pb.finish_and_clear();
    Ok(v.finish(expect_head, checkpoints, pinned))
}
