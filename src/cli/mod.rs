//! The command line: `serve`, `verify`, `replay`, `admin`, `witness`, `eval`.
//!
//! Exit codes mean something: 0 success (verify: the chain is intact), 1 verify found
//! tampering, 2 the command could not run.

pub mod admin;
pub mod eval;
pub mod replay;
pub mod serve;
pub mod verify;
pub mod verify_proof;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{ReplayArgs, ServeArgs, VerifyArgs};

#[derive(Parser, Debug)]
#[command(
    name = "auditmem",
    version,
    about = "Tamper-evident audit log and memory store"
)]
pub struct Cli {
    /// Log output format on stderr.
    #[arg(long, env = "AUDITMEM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP service.
    Serve(Box<ServeArgs>),
    /// Prove the log's hash chain (offline from a data dir, live from a URL, or a tenant export).
    Verify(Box<VerifyArgs>),
    /// Drop every projection and rebuild them all from the log.
    Replay(ReplayArgs),
    /// Call the admin API of a running server.
    Admin(admin::AdminArgs),
    /// Run or query a C2SP tlog-witness that cosigns transparency log checkpoints.
    Witness(crate::witness::WitnessArgs),
    /// Measure retrieval quality on a public benchmark through a server of this binary.
    Eval(eval::EvalArgs),
    /// Serve the MCP tools over stdio, as a proxy to a running service's `/mcp`.
    Mcp(crate::mcp::proxy::McpArgs),
}

pub fn init_tracing(format: LogFormat) {
    // `AUDITMEM_LOG` naming a log of record (`sled`, `nats://...`) is no filter.
    let filter = match crate::config::LogBackend::from_env() {
        Some(_) => None,
        None => tracing_subscriber::EnvFilter::try_from_env("AUDITMEM_LOG").ok(),
    }
    .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info,tower_http=warn"));
    // Colours only on a terminal: a log written to a file or a pipe stays plain text.
    // `NO_COLOR` (no-color.org) turns them off on a terminal too.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Verify(args) => verify::run(*args),
        Command::Replay(args) => replay::run(args),
        Command::Admin(args) => admin::run(args),
        Command::Witness(args) => crate::witness::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Mcp(args) => crate::mcp::proxy::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// A progress bar on a terminal, hidden otherwise.
pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    pb.set_style(style);
    pb.set_message(what.to_string());
    pb
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every command, subcommand and argument of the command line says what it is for in
    /// `--help` (clap takes the doc comments), so none is listed with an empty line.
    #[test]
    fn every_command_and_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let here = format!("{path} {}", cmd.get_name());
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() {
                    missing.push(format!("{here} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() == "help" {
                    continue;
                }
                if sub.get_about().is_none() {
                    missing.push(format!("{here} {}", sub.get_name()));
                }
                walk(sub, &here, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "", &mut missing);
        assert_eq!(missing, Vec::<String>::new());
    }
}
