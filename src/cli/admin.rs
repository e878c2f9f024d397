//! `auditmem admin ...`: the admin API from the shell.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// Base URL of the server.
    #[arg(
        long,
        env = "AUDITMEM_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Admin token.
    #[arg(
        long,
        env = "AUDITMEM_ADMIN_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    /// A PEM bundle of CA certificates trusted for an https --url besides the Mozilla roots
    /// built in: for a server with a private CA's certificate.
    #[arg(long, env = "AUDITMEM_CA_FILE", global = true)]
    pub ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Print the checkpoint signer's public key (from the server, or from a local key file):
    /// hex, and with the server's or `--origin`'s name as a signed-note verifier key.
    Pubkey {
        /// Read the key from this signing key file (created when missing) instead of asking
        /// the server.
        #[arg(long)]
        signing_key: Option<std::path::PathBuf>,
        /// With --signing-key: print the key as the signed-note verifier key of this
        /// checkpoint origin (`serve --log-origin`) instead of hex.
        #[arg(long, requires = "signing_key")]
        origin: Option<String>,
    },
    /// Print the log head.
    Head,
    /// Sign a checkpoint now and print it.
    Checkpoint,
    /// Re-wrap every data key under a new key-encryption key, offline: stop the server (on a
    /// cluster, every API node) first. Then start with `--master-key-file NEW`.
    RotateMasterKey(RotateArgs),
}

#[derive(Args, Debug)]
pub struct RotateArgs {
    /// The data dir whose keys are re-wrapped.
    #[arg(long, env = "AUDITMEM_DATA_DIR", default_value = "data")]
    pub data_dir: std::path::PathBuf,
    /// The key-encryption key the keys are wrapped with now. Default: `master.key` in the
    /// data dir.
    #[arg(long, env = "AUDITMEM_MASTER_KEY_FILE")]
    pub master_key_file: Option<std::path::PathBuf>,
    /// The new key-encryption key (64 hex digits); generated, mode 0600, when the file does
    /// not exist.
    #[arg(long)]
    pub new_master_key_file: std::path::PathBuf,
    /// Rotate a cluster's key store instead of the data dir's: the log's servers
    /// (`nats://HOST:PORT[,HOST:PORT...]`, as `serve --log` takes them).
    #[arg(long = "log")]
    pub log: Option<crate::config::LogBackend>,
    /// With --log: the log's JetStream stream (the key store is `<stream>_KEYS`).
    #[arg(long, env = "AUDITMEM_NATS_STREAM", default_value = "AUDITMEM")]
    pub nats_stream: String,
    /// With --log: how long one request to NATS may take.
    #[arg(long, env = "AUDITMEM_NATS_TIMEOUT_MS", default_value_t = 5000)]
    pub nats_timeout_ms: u64,
}

/// `admin rotate-master-key`: re-wraps the keys and says how many.
fn rotate_master_key(args: &RotateArgs) -> anyhow::Result<ExitCode> {
    let old_path = crate::config::master_key_path(&args.data_dir, args.master_key_file.as_deref());
    let (old, new) = crate::keys::rotate::load_keks(&old_path, &args.new_master_key_file)?;
    let done = match &args.log {
        None | Some(crate::config::LogBackend::Sled) => {
            crate::keys::rotate::rotate_dir(&args.data_dir, &old, &new)?
        }
        Some(crate::config::LogBackend::Nats(servers)) => {
            let config = crate::log::cluster::NatsConfig {
                servers: servers.clone(),
                stream: args.nats_stream.clone(),
                subject: String::new(),
                replicas: 3,
                timeout: std::time::Duration::from_millis(args.nats_timeout_ms),
            };
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the runtime")?
                .block_on(crate::keys::rotate::rotate_cluster(&config, &old, &new))?
        }
    };
    println!(
        "re-wrapped {} values under {} ({} already were); start with --master-key-file {}",
        done.rewrapped,
        new.path().display(),
        done.already,
        new.path().display()
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand, Debug)]
pub enum TenantCommand {
    /// Create a tenant and print it (with its id).
    Create {
        /// The tenant's display name.
        #[arg(long)]
        name: String,
        /// Its plan: free, basic, pro, business or custom.
        #[arg(long)]
        plan: String,
        /// Its starting credit balance (extraction spends credits).
        #[arg(long, default_value_t = 0.0)]
        credits: f64,
        /// Create with an inactive subscription.
        #[arg(long)]
        inactive: bool,
    },
    /// List every tenant.
    List,
    /// Print one tenant.
    Get {
        /// The tenant's id.
        id: String,
    },
    /// Change a tenant: only the fields given change.
    Update {
        /// The tenant's id.
        id: String,
        /// A new display name.
        #[arg(long)]
        name: Option<String>,
        /// A new plan: free, basic, pro, business or custom.
        #[arg(long)]
        plan: Option<String>,
        /// A new credit balance (replaces the balance).
        #[arg(long)]
        credits: Option<f64>,
        /// Turn the subscription on (true) or off (false): audit routes answer 2200 while off.
        #[arg(long)]
        subscription_active: Option<bool>,
    },
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Issue an API key for a tenant and print it (the key is shown this once).
    Create {
        /// The tenant the key acts for.
        tenant_id: String,
        /// Comma-separated: audit.read,audit.export,memory.read,memory.write,memory.erase,
        /// webhooks.manage
        #[arg(long, value_delimiter = ',')]
        permissions: Vec<String>,
        /// A label for the key.
        #[arg(long)]
        name: Option<String>,
        /// Confines the key to this end user's memories (docs/API.md, "Key scopes").
        #[arg(long)]
        user_id: Option<String>,
        /// With --user-id: confines it to this agent of the user too.
        #[arg(long, requires = "user_id")]
        agent_id: Option<String>,
        /// With --user-id: confines it to this session of the user too.
        #[arg(long, requires = "user_id")]
        session_id: Option<String>,
    },
    /// Revoke a key: it is refused from the next request on.
    Revoke {
        /// The key's id (not the key itself).
        key_id: String,
    },
}

pub fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    // Offline: no server to call, no token needed.
    if let AdminCommand::RotateMasterKey(rotate) = &args.command {
        return rotate_master_key(rotate);
    }
    if let AdminCommand::Pubkey {
        signing_key: Some(path),
        origin,
    } = &args.command
    {
        let key = crate::log::checkpoint::load_or_create_key(path)
            .with_context(|| format!("reading {}", path.display()))?;
        match origin {
            Some(o) if !crate::tlog::note::origin_is_valid(o) => {
                bail!("--origin {o:?}: no spaces or '+' in a key name")
            }
            Some(o) => println!(
                "{}",
                crate::tlog::note::verifier_key(o, &key.verifying_key())
            ),
            None => println!("{}", hex::encode(key.verifying_key().as_bytes())),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let token = args
        .token
        .as_deref()
        .context("the admin token is needed (AUDITMEM_ADMIN_TOKEN or --token)")?;
    let base = args.url.trim_end_matches('/').to_string();
    let roots = crate::http_client::ExtraRoots::load(args.ca_file.as_deref())
        .map_err(|e| anyhow::anyhow!("--ca-file: {e}"))?;
    // No redirect is followed: the admin token goes to --url only (`crate::http_client`).
    let client = crate::http_client::blocking(Some(std::time::Duration::from_secs(60)), &roots)?;
    let call =
        |method: reqwest::Method, path: &str, body: Option<Value>| -> anyhow::Result<Value> {
            let mut req = client
                .request(method, format!("{base}{path}"))
                .bearer_auth(token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = crate::http_client::send(req, &base, path)?;
            let status = resp.status();
            let v: Value = resp
                .json()
                .with_context(|| format!("{path} answered {status} without JSON"))?;
            if !status.is_success() {
                bail!(
                    "{status}: {} (code {})",
                    v["message"].as_str().unwrap_or("?"),
                    v["code"]
                );
            }
            Ok(v["data"].clone())
        };
    use reqwest::Method;
    let data = match args.command {
        AdminCommand::Tenant(TenantCommand::Create {
            name,
            plan,
            credits,
            inactive,
        }) => call(
            Method::POST,
            "/admin/v1/tenants",
            Some(
                json!({"name": name, "plan": plan, "credits": credits, "subscription_active": !inactive}),
            ),
        )?,
        AdminCommand::Tenant(TenantCommand::List) => call(Method::GET, "/admin/v1/tenants", None)?,
        AdminCommand::Tenant(TenantCommand::Get { id }) => {
            call(Method::GET, &format!("/admin/v1/tenants/{id}"), None)?
        }
        AdminCommand::Tenant(TenantCommand::Update {
            id,
            name,
            plan,
            credits,
            subscription_active,
        }) => {
            let mut body = serde_json::Map::new();
            if let Some(v) = name {
                body.insert("name".into(), json!(v));
            }
            if let Some(v) = plan {
                body.insert("plan".into(), json!(v));
            }
            if let Some(v) = credits {
                body.insert("credits".into(), json!(v));
            }
            if let Some(v) = subscription_active {
                body.insert("subscription_active".into(), json!(v));
            }
            call(
                Method::PATCH,
                &format!("/admin/v1/tenants/{id}"),
                Some(Value::Object(body)),
            )?
        }
        AdminCommand::Key(KeyCommand::Create {
            tenant_id,
            permissions,
            name,
            user_id,
            agent_id,
            session_id,
        }) => {
            let mut body = json!({"permissions": permissions, "name": name});
            if let Some(user_id) = user_id {
                body["scope"] = json!({
                    "user_id": user_id, "agent_id": agent_id, "session_id": session_id,
                });
            }
            call(
                Method::POST,
                &format!("/admin/v1/tenants/{tenant_id}/keys"),
                Some(body),
            )?
        }
        AdminCommand::Key(KeyCommand::Revoke { key_id }) => {
            call(Method::DELETE, &format!("/admin/v1/keys/{key_id}"), None)?
        }
        AdminCommand::Pubkey { .. } => call(Method::GET, "/admin/v1/log/pubkey", None)?,
        AdminCommand::Head => call(Method::GET, "/admin/v1/log/head", None)?,
        AdminCommand::Checkpoint => call(Method::POST, "/admin/v1/log/checkpoint", None)?,
        AdminCommand::RotateMasterKey(rotate) => return rotate_master_key(&rotate),
    };
    println!("{}", serde_json::to_string_pretty(&data)?);
    Ok(ExitCode::SUCCESS)
}
