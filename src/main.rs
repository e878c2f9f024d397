use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = auditmem::cli::Cli::parse();
    auditmem::cli::init_tracing(cli.log_format);
    auditmem::cli::run(cli)
}
