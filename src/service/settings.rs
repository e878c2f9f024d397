//! The checks a configuration passes before anything is opened, and the handlers' settings
//! taken from it.

use std::time::Duration;

use crate::api::listener::{self, Limits};
use crate::api::state::{MemorySettings, Settings};
use crate::config::ServeArgs;

/// The admin and ingest tokens a service runs with (an empty one is none).
pub struct Tokens {
    pub admin: Option<String>,
    pub ingest: Option<String>,
}

/// The tokens, or why the configuration is refused: a token under
/// [`MIN_TOKEN_BYTES`](crate::api::admin::MIN_TOKEN_BYTES) without
/// `--insecure-short-admin-token`, an ingest token without an admin token or equal to it, an
/// admin listener without an admin API.
pub fn admin_tokens(args: &ServeArgs) -> anyhow::Result<Tokens> {
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

/// The checkpoint origin and the witnesses, checked: nothing is opened for a configuration
/// that names them wrongly.
pub fn witnesses(args: &ServeArgs) -> anyhow::Result<Vec<String>> {
    if !crate::tlog::note::origin_is_valid(&args.log_origin) {
        anyhow::bail!(
            "--log-origin {:?} cannot name a checkpoint key: it must be non-empty, without spaces or '+'",
            args.log_origin
        );
    }
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
    Ok(witnesses)
}

/// Each listener's limits: `--max-connections` lowered to what the open-files limit (raised to
/// its hard limit first) leaves for `listeners` listeners.
pub fn connection_limits(args: &ServeArgs, listeners: usize) -> anyhow::Result<Limits> {
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
    Ok(Limits {
        header_read_timeout: Duration::from_secs(args.header_read_timeout_secs),
        drain_timeout: Duration::from_secs(args.drain_timeout_secs),
        max_connections,
        max_per_peer: usize::try_from(args.max_connections_per_peer).unwrap_or(usize::MAX),
    })
}

/// What the handlers consult.
pub fn handler_settings(args: &ServeArgs, tokens: &Tokens) -> Settings {
    Settings {
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
    }
}

/// What the memory endpoints consult.
pub fn memory_settings(args: &ServeArgs) -> MemorySettings {
    MemorySettings {
        credits_per_call: args.extract_credits_per_call,
        credits_per_1k_chars: args.extract_credits_per_1k_chars,
        usd_per_credit: args.usd_per_credit,
        dedup_threshold: args.dedup_threshold,
        max_extract_chars: args.max_extract_chars,
        max_extract_memories: args.max_extract_memories,
        reservations: Default::default(),
    }
}
