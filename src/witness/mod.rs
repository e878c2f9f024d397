//! `auditmem witness`: a C2SP tlog-witness for transparency logs whose checkpoints are C2SP
//! signed notes with Ed25519 keys (auditmem's own, or any other such log).
//!
//! - `auditmem witness serve` answers `POST /add-checkpoint` ([`server`]): it checks a log's
//!   new checkpoint against the latest one it cosigned for that origin and, when the log grew
//!   consistently, records it and returns a `cosignature/v1` cosignature
//!   ([`crate::tlog::cosignature`]).
//! - `auditmem witness pubkey` prints the witness's cosignature verifier key.
//! - [`client::add_checkpoint`] is the request a log makes to a witness.
//!
//! Choices the spec leaves to us: a witness has one key and answers one cosignature line; the
//! submission prefix is the server's root (`<url>/add-checkpoint`); the key of a log is given
//! as `--log ORIGIN=VKEY`, a standard signed-note Ed25519 verifier key (type 0x01), repeated
//! for more logs or more keys of one log; a size-0 checkpoint submitted from old size 0 is
//! cosigned only with the empty tree's root (RFC 6962: SHA-256 of nothing).

pub mod client;
pub mod request;
pub mod server;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use signed_note::StandardVerifier;

use crate::tlog::cosignature::CosignatureSigner;

#[derive(Args, Debug)]
pub struct WitnessArgs {
    #[command(subcommand)]
    pub command: WitnessCommand,
}

#[derive(Subcommand, Debug)]
pub enum WitnessCommand {
    /// Serve the C2SP tlog-witness API: POST /add-checkpoint cosigns a log's checkpoint when
    /// it is consistent with the latest one cosigned for that log.
    ///
    /// Prints `auditmem witness key <VKEY>` (the cosignature verifier key) and then
    /// `auditmem witness listening on http://<addr>` when it serves.
    Serve(WitnessServeArgs),
    /// Print the witness's cosignature verifier key (`<name>+<key id>+<base64>`), creating
    /// the witness key in the state dir if there is none yet.
    Pubkey(WitnessPubkeyArgs),
}

#[derive(Args, Debug)]
pub struct WitnessServeArgs {
    /// The witness's state: its private key (witness.key, created at first start, mode 0600)
    /// and the latest cosigned checkpoint of each log (logs/). Back it up; losing it lets
    /// the witness be tricked into cosigning a fork of a log it already witnessed.
    #[arg(long, env = "AUDITMEM_WITNESS_STATE_DIR")]
    pub state_dir: PathBuf,
    /// Address to listen on (port 0 picks a free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:7380")]
    pub listen: SocketAddr,
    /// The witness's key name, in its cosignatures and verifier key: a schema-less URL
    /// naming the witness, e.g. `witness.example.com/w1` (no spaces, no `+`).
    #[arg(long, env = "AUDITMEM_WITNESS_NAME")]
    pub name: String,
    /// A log to witness: its checkpoint origin line, `=`, and a signed-note Ed25519 verifier
    /// key (`<name>+<hex id>+<base64>`) that signs its checkpoints. Repeat for more logs, or
    /// for more keys of one log (any one of them must have signed a checkpoint).
    #[arg(long = "log", value_name = "ORIGIN=VKEY", required = true, value_parser = parse_log)]
    pub logs: Vec<LogKey>,
    /// Seconds a client has to send a request's head; an idle connection is closed after as
    /// long.
    #[arg(long, default_value_t = 10)]
    pub header_read_timeout_secs: u64,
    /// Seconds a request may take, its body included, before it is answered 408.
    #[arg(long, default_value_t = 30)]
    pub request_timeout_secs: u64,
    /// Open connections at most.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
}

#[derive(Args, Debug)]
pub struct WitnessPubkeyArgs {
    /// The witness's state dir (see `witness serve`).
    #[arg(long, env = "AUDITMEM_WITNESS_STATE_DIR")]
    pub state_dir: PathBuf,
    /// The witness's key name, as given to `witness serve`: the key ID depends on it.
    #[arg(long, env = "AUDITMEM_WITNESS_NAME")]
    pub name: String,
}

/// One `--log ORIGIN=VKEY`.
#[derive(Clone)]
pub struct LogKey {
    pub origin: String,
    pub vkey: String,
    pub verifier: StandardVerifier,
}

impl std::fmt::Debug for LogKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.origin, self.vkey)
    }
}

/// `ORIGIN=VKEY`, split at the first `=` (a base64 key ends in `=`; an origin has none).
fn parse_log(s: &str) -> Result<LogKey, String> {
    let (origin, vkey) = s
        .split_once('=')
        .ok_or("expected ORIGIN=VKEY (the log's origin line, '=', its verifier key)")?;
    if origin.is_empty() || origin.chars().any(char::is_control) {
        return Err("the origin is empty or has control characters".into());
    }
    let verifier = StandardVerifier::new(vkey)
        .map_err(|e| format!("{vkey:?} is not an Ed25519 note verifier key: {e}"))?;
    Ok(LogKey {
        origin: origin.to_string(),
        vkey: vkey.to_string(),
        verifier,
    })
}

pub fn run(args: WitnessArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        WitnessCommand::Serve(a) => serve(a),
        WitnessCommand::Pubkey(a) => {
            let key = store::load_or_create_key(&a.state_dir)?;
            let signer = CosignatureSigner::new(&a.name, key)?;
            println!("{}", signer.verifier_key());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn serve(args: WitnessServeArgs) -> anyhow::Result<ExitCode> {
    let key = store::load_or_create_key(&args.state_dir)?;
    let signer = CosignatureSigner::new(&args.name, key)?;
    // The same `--log` given twice is one key.
    let mut seen = std::collections::HashSet::new();
    let logs = args
        .logs
        .iter()
        .filter(|l| seen.insert((l.origin.as_str(), l.vkey.as_str())))
        .map(|l| (l.origin.clone(), l.verifier.clone()))
        .collect();
    let witness = Arc::new(server::Witness::open(args.state_dir.clone(), signer, logs)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        use crate::api::listener::{self, Connections, Limits};
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let addr = listener.local_addr()?;
        let files = listener::raise_open_files_limit();
        let limits = Limits {
            header_read_timeout: Duration::from_secs(args.header_read_timeout_secs),
            // A witness answers small requests only; a stop waits for them as for the API's.
            drain_timeout: Duration::from_secs(10),
            max_connections: listener::connection_budget(args.max_connections, files, 1).max(1),
            max_per_peer: 0,
        };
        let app = server::app(witness.clone()).layer(
            tower_http::timeout::TimeoutLayer::with_status_code(
                axum::http::StatusCode::REQUEST_TIMEOUT,
                Duration::from_secs(args.request_timeout_secs),
            ),
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        // Tests and scripts read these two lines: the key, then the address.
        println!("auditmem witness key {}", witness.verifier_key());
        println!("auditmem witness listening on http://{addr}");
        tracing::info!(%addr, name = %args.name, logs = args.logs.len(), state_dir = %args.state_dir.display(), "witness serving");
        listener::serve(listener, app, Connections::new(limits), stop_rx, None).await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves at SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested");
}
