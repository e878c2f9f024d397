//! `auditmem serve`: runs the [`Service`](crate::service::Service) until SIGTERM or SIGINT,
//! then stops it (in-flight requests finish, the appender drains, a last checkpoint is
//! signed).

use std::process::ExitCode;

use anyhow::Context;

use crate::config::ServeArgs;
use crate::service::Service;

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    // Before the model, the projections and the runtime's threads allocate: see the function.
    if !crate::disable_transparent_huge_pages() {
        tracing::debug!("transparent huge pages could not be disabled; RSS may run higher");
    }
    if !crate::purge_freed_pages_soon() {
        tracing::debug!("MIMALLOC_PURGE_DELAY is set: mimalloc purges freed pages as it says");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let service = Service::start(args).await?;
        let stop = shutdown_signal()?;
        // Tests and scripts read the last line to learn the port when --listen asks for port
        // 0; the admin listener's line comes first.
        if let Some(admin) = service.admin_addr() {
            println!("auditmem admin listening on http://{admin}");
        }
        println!("{LISTENING}http://{}", service.addr());
        stop.await;
        service.stop().await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// What `serve` prints, before its URL, once it takes requests.
pub const LISTENING: &str = "auditmem listening on ";

/// The URL a `serve` process started with piped stdout (`--listen 127.0.0.1:0`) prints once it
/// takes requests; its later output is read and dropped on a thread of its own, so that the
/// server never blocks on a full pipe. An error when it exits first (its log, on stderr, says
/// why).
pub fn wait_listening(child: &mut std::process::Child) -> anyhow::Result<String> {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().context("the server's stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(u) = line.strip_prefix(LISTENING) {
                    break u.trim().to_string();
                }
            }
            _ => {
                let _ = child.wait();
                anyhow::bail!("the server exited before listening (its log is above)");
            }
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok(url)
}

/// Resolves at the first SIGTERM or SIGINT. The handlers are installed when this is called,
/// not when it is first polled, so a signal sent right after the "listening" line is printed
/// stops the service instead of killing the process.
#[cfg(unix)]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutdown requested");
    })
}

#[cfg(not(unix))]
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown requested");
    })
}
