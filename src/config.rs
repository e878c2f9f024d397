//! The settings of the commands (clap derive; every flag has an `AUDITMEM_` env). The command line
//! that holds them is `crate::cli::Cli`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DurabilityMode {
    /// Acknowledge an append only after flush + fdatasync (default).
    Fsync,
    /// Acknowledge at once; flush + fdatasync every --batch-interval-ms (a power loss can lose
    /// that window). A group holding an erasure is synced before its keys are destroyed.
    BatchInterval,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EmbedderKind {
    /// all-MiniLM-L6-v2 in process (our own BERT forward pass).
    Minilm,
    /// An OpenAI-compatible /v1/embeddings API (OpenAI, Ollama, vLLM, TEI).
    Openai,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExtractorKind {
    /// The embedded rule-based extractor (no model).
    Rules,
    /// An OpenAI-compatible /v1/chat/completions API.
    Openai,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Directory of the sled database (log and projections).
    #[arg(long, env = "AUDITMEM_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// sled's page cache, MiB. The operating system caches the files too, so a small cache costs
    /// little; it is most of an idle server's memory beyond the vectors and the model.
    #[arg(long, env = "AUDITMEM_CACHE_MB", default_value_t = 64)]
    pub cache_mb: u64,
    /// Free space the data dir's filesystem must keep, MiB: below it (or on a read-only
    /// filesystem) every append, and so every audited request, is refused with 503 before
    /// anything is written, until space returns.
    #[arg(long, env = "AUDITMEM_MIN_FREE_MB", default_value_t = 64)]
    pub min_free_mb: u64,
    /// A tenant's vector table moves its f32 rows from memory to an unlinked file in the data
    /// dir once it holds this many memories (back below half of it): search then scans the
    /// int8 copy in memory and reads only the rows it rescores. 0 keeps every row in memory,
    /// and the audit index's sealed time-index blocks too (otherwise in a file in the same dir).
    #[arg(long, env = "AUDITMEM_VECTOR_SPILL_ROWS", default_value_t = auditmem_projections::vector_table::SPILL_ROWS)]
    pub vector_spill_rows: usize,
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "AUDITMEM_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// When appends are acknowledged.
    #[arg(long, env = "AUDITMEM_DURABILITY", value_enum, default_value_t = DurabilityMode::Fsync)]
    pub durability: DurabilityMode,
    /// How often batch-interval mode flushes and fdatasyncs the log, in milliseconds.
    #[arg(long, env = "AUDITMEM_BATCH_INTERVAL_MS", default_value_t = 10)]
    pub batch_interval_ms: u64,
    /// ed25519 key that signs checkpoints; created at first start. Default: `signing.key` in
    /// the data dir. In production keep it outside the data dir: whoever can rewrite the log
    /// and read the key can re-sign the rewritten log.
    #[arg(long, env = "AUDITMEM_SIGNING_KEY")]
    pub signing_key: Option<PathBuf>,
    /// File the signed checkpoints are appended to (JSON lines). Default: `checkpoints.ndjson`
    /// in the data dir. It belongs to one log: a start refuses a file whose checkpoints this
    /// data dir's log does not reproduce.
    #[arg(long, env = "AUDITMEM_CHECKPOINTS_FILE")]
    pub checkpoints_file: Option<PathBuf>,
    /// The key-encryption key that wraps every data key (64 hex digits). Default:
    /// `master.key` in the data dir, generated at the first start. Keep a copy apart from the
    /// data dir's backups: without it nothing sealed can be read.
    #[arg(long, env = "AUDITMEM_MASTER_KEY_FILE")]
    pub master_key_file: Option<PathBuf>,
    /// Sign a checkpoint after this many new records.
    #[arg(long, env = "AUDITMEM_CHECKPOINT_EVERY", default_value_t = 10_000)]
    pub checkpoint_every: u64,
    /// Sign a checkpoint at least this often (seconds) while the log grows.
    #[arg(long, env = "AUDITMEM_CHECKPOINT_INTERVAL_SECS", default_value_t = 60)]
    pub checkpoint_interval_secs: u64,
    /// The origin of the log's C2SP checkpoints, also the name of their signing key: a name
    /// no other log uses (witnesses tell logs apart by it), e.g. `audit.example.com/log`.
    #[arg(
        long,
        env = "AUDITMEM_LOG_ORIGIN",
        default_value = "auditmem.localhost/log"
    )]
    pub log_origin: String,
    /// A C2SP tlog-witness (its URL prefix, `add-checkpoint` is appended) each new checkpoint
    /// is sent to; their cosignatures are published with it. Repeat or comma-separate.
    #[arg(long = "witness", env = "AUDITMEM_WITNESSES", value_delimiter = ',')]
    pub witnesses: Vec<String>,
    /// Read the client address from X-Forwarded-For when the peer is a trusted proxy (only
    /// behind your own proxies): the rightmost address that is not one of --trusted-proxies.
    #[arg(long, env = "AUDITMEM_TRUST_PROXY", default_value_t = false)]
    pub trust_proxy: bool,
    /// The proxies whose X-Forwarded-For entries are believed with --trust-proxy: networks
    /// (CIDR) or addresses, comma-separated. Loopback by default, a proxy on the same host.
    #[arg(
        long,
        env = "AUDITMEM_TRUSTED_PROXIES",
        value_delimiter = ',',
        default_value = "127.0.0.0/8,::1/128",
        value_parser = crate::api::client_ip::parse_net
    )]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Seconds a client has to send a request's headers (and an idle keep-alive connection to
    /// start its next request); then the connection is closed.
    #[arg(long, env = "AUDITMEM_HEADER_READ_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_secs: u64,
    /// Seconds a stop waits for the answers being written (an export's download, an audit
    /// tail) before it closes their connections: a client that stops reading cannot hold the
    /// stop for ever.
    #[arg(long, env = "AUDITMEM_DRAIN_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub drain_timeout_secs: u64,
    /// Open connections per listener at most (more: 503 and closed); lowered to what the
    /// open-files limit leaves after 128 files for the server's own use.
    #[arg(long, env = "AUDITMEM_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
    /// Open connections from one address (IPv6: one /64) at most; 0: no such cap. Behind a
    /// proxy every connection comes from the proxy: raise it, or 0.
    #[arg(long, env = "AUDITMEM_MAX_CONNECTIONS_PER_PEER", default_value_t = 256)]
    pub max_connections_per_peer: u64,
    /// Open audit streams (`GET /v1/audit/logs/stream`) a tenant may have at once; one more
    /// is answered 429 (4290) with `Retry-After`.
    #[arg(long, env = "AUDITMEM_MAX_STREAMS_PER_TENANT", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_streams_per_tenant: u64,
    /// Seconds an idle audit stream waits before it sends a heartbeat (an SSE comment, or an
    /// empty NDJSON line), which keeps proxies from closing it.
    #[arg(long, env = "AUDITMEM_STREAM_HEARTBEAT_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub stream_heartbeat_secs: u64,
    /// Nice value added to the threads that serve audit streams (a runtime of their own), so
    /// that under load the kernel gives the cores to the threads answering writers first; 0
    /// keeps the process's priority.
    #[arg(long, env = "AUDITMEM_STREAM_NICE", default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub stream_nice: i32,
    /// Let webhooks use plain `http://` URLs and reach private, loopback and link-local
    /// addresses (tests, closed networks). Off, a webhook must be `https://` to a public
    /// address, checked when it is saved and before every attempt.
    #[arg(long, env = "AUDITMEM_WEBHOOKS_ALLOW_PRIVATE_TARGETS")]
    pub webhooks_allow_private_targets: bool,
    /// Milliseconds before a failed webhook delivery's second attempt; each later wait is four
    /// times the one before, up to --webhook-retry-cap-secs.
    #[arg(long, env = "AUDITMEM_WEBHOOK_RETRY_BASE_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub webhook_retry_base_ms: u64,
    /// The longest wait, in seconds, between two attempts of a webhook delivery.
    #[arg(long, env = "AUDITMEM_WEBHOOK_RETRY_CAP_SECS", default_value_t = 36_000, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub webhook_retry_cap_secs: u64,
    /// Attempts of one webhook delivery before it is given up (the default schedule spans
    /// about 28 hours).
    #[arg(long, env = "AUDITMEM_WEBHOOK_MAX_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub webhook_max_attempts: u32,
    /// Milliseconds one webhook attempt may take (connecting, and the answer's headers and
    /// excerpt).
    #[arg(long, env = "AUDITMEM_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=120_000))]
    pub webhook_timeout_ms: u64,
    /// Webhook requests in flight at most, over every endpoint.
    #[arg(long, env = "AUDITMEM_WEBHOOK_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub webhook_concurrency: u64,
    /// Whether this process delivers webhooks. On a cluster the nodes that deliver take turns
    /// by a lease recorded in the log: one of them delivers at a time.
    #[arg(long, env = "AUDITMEM_WEBHOOK_DELIVERY", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_delivery: bool,
    /// Serve the admin API on this address only (404 on --listen): HOST:PORT, or a PORT alone
    /// for 127.0.0.1:PORT.
    #[arg(long, env = "AUDITMEM_ADMIN_LISTEN", value_parser = admin_listen)]
    pub admin_listen: Option<SocketAddr>,
    /// Failed admin authentications one address may make a minute (burst and sustained);
    /// beyond: 429 with Retry-After, for the right token too. 0 disables the throttle.
    #[arg(
        long,
        env = "AUDITMEM_ADMIN_AUTH_FAILURES_PER_MIN",
        default_value_t = 10
    )]
    pub admin_auth_failures_per_min: u32,
    /// Accept an admin or ingest token shorter than 32 bytes: for local development only.
    #[arg(
        long,
        env = "AUDITMEM_INSECURE_SHORT_ADMIN_TOKEN",
        default_value_t = false
    )]
    pub insecure_short_admin_token: bool,
    /// The gateway's token: it may call POST /admin/v1/audit/logs and nothing else (403).
    /// Needs the admin token set; at least 32 bytes, and not the admin token.
    #[arg(long, env = "AUDITMEM_INGEST_TOKEN", hide_env_values = true)]
    pub ingest_token: Option<String>,
    /// Largest accepted request body, bytes (larger: 413), on every route, admin included.
    /// 1 MiB holds any valid tenant request at the default caps (the largest is a
    /// 20,000-character extraction input, at most ~80 KB as UTF-8); gateways ingesting entries
    /// with large bodies size their batches under it.
    #[arg(long, env = "AUDITMEM_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Sustained requests per second allowed to each API key on `/v1` (token bucket; above it:
    /// 429 with Retry-After). 0 disables the limit.
    #[arg(long, env = "AUDITMEM_RATE_LIMIT_PER_SEC", default_value_t = 5000.0, value_parser = rate)]
    pub rate_limit_per_sec: f64,
    /// Requests an idle API key may make at once before the sustained rate applies.
    #[arg(long, env = "AUDITMEM_RATE_LIMIT_BURST", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit_burst: u32,
    /// Sustained requests per second one source (an IPv4 address, an IPv6 /64) may make to the
    /// public transparency routes (`/log/checkpoint`, `/log/tile/...`), which need no key;
    /// above it: 429 with Retry-After. 0 disables the limit.
    #[arg(long, env = "AUDITMEM_LOG_RATE_LIMIT_PER_SEC", default_value_t = 200.0, value_parser = rate)]
    pub log_rate_limit_per_sec: f64,
    /// Requests an idle source may make at once to `/log/*` before the sustained rate applies:
    /// room for a monitor that fetches a run of new tiles.
    #[arg(long, env = "AUDITMEM_LOG_RATE_LIMIT_BURST", default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub log_rate_limit_burst: u32,
    /// Reads `as_of` a position (memory get, list, query, search) one tenant may make a second,
    /// after a burst (docs/API.md, "Reading the past"); a read past it waits for its turn. 0
    /// disables the pace (the 2 reads a tenant may have running or waiting still hold).
    #[arg(long, env = "AUDITMEM_AS_OF_READS_PER_SEC", default_value_t = crate::api::memory::as_of::READS_PER_SEC, value_parser = rate)]
    pub as_of_reads_per_sec: f64,
    /// Reads `as_of` a position a tenant idle for a while may make at once before the pace
    /// applies.
    #[arg(long, env = "AUDITMEM_AS_OF_READS_BURST", default_value_t = crate::api::memory::as_of::READS_BURST, value_parser = clap::value_parser!(u32).range(1..))]
    pub as_of_reads_burst: u32,
    /// Request and response bodies larger than this are stored truncated in audit entries.
    #[arg(long, env = "AUDITMEM_AUDIT_BODY_LIMIT", default_value_t = 64 * 1024)]
    pub audit_body_limit: usize,
    /// Requests taking longer are answered 408.
    #[arg(long, env = "AUDITMEM_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,
    /// Retention of the custom plan, days.
    #[arg(long, env = "AUDITMEM_CUSTOM_RETENTION_DAYS", default_value_t = 365)]
    pub custom_retention_days: i64,
    /// Completed export files are kept this long (seconds), then answered 410.
    #[arg(long, env = "AUDITMEM_EXPORT_TTL_SECS", default_value_t = 7 * 86_400)]
    pub export_ttl_secs: u64,
    /// Testing aid: delay before an export starts writing, to observe it mid-way.
    #[arg(
        long,
        env = "AUDITMEM_EXPORT_START_DELAY_MS",
        default_value_t = 0,
        hide = true
    )]
    pub export_start_delay_ms: u64,
    /// Export files a tenant may hold at once (processing or completed and not expired): one
    /// more export is refused with 429 (2204) and `Retry-After` until one expires. 0: no limit.
    #[arg(long, env = "AUDITMEM_EXPORT_MAX_FILES", default_value_t = 10)]
    pub export_max_files: u64,
    /// MiB a tenant's live export files may hold together: while they hold it or more, a new
    /// export is refused (2204) until enough expire (the one that crossed it completes, its size
    /// unknown before it is written). 0: no limit.
    #[arg(long, env = "AUDITMEM_EXPORT_MAX_BYTES_MB", default_value_t = 2048)]
    pub export_max_bytes_mb: u64,
    /// Exports a tenant may start in any hour (failed ones included); beyond: 2204. 0: no limit.
    #[arg(long, env = "AUDITMEM_EXPORT_MAX_PER_HOUR", default_value_t = 6)]
    pub export_max_per_hour: u64,
    /// Free space, MiB, exports leave on their filesystem besides the log's `--min-free-mb`: an
    /// export that would write into it fails (its partial file removed), the log never does.
    #[arg(long, env = "AUDITMEM_EXPORT_MIN_FREE_MB", default_value_t = 512)]
    pub export_min_free_mb: u64,
    /// How often expired export files and the partial files of failed exports are deleted
    /// (also at start), seconds.
    #[arg(long, env = "AUDITMEM_EXPORT_SWEEP_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub export_sweep_secs: u64,
    /// Directory of the all-MiniLM-L6-v2 model (installed by `bash .ci/setup`).
    #[arg(
        long,
        env = "AUDITMEM_MODEL_DIR",
        default_value = "models/all-MiniLM-L6-v2"
    )]
    pub model_dir: PathBuf,
    /// Embedding provider: the in-process model, or an OpenAI-compatible /v1/embeddings API.
    #[arg(long, env = "AUDITMEM_EMBEDDER", value_enum, default_value_t = EmbedderKind::Minilm)]
    pub embedder: EmbedderKind,
    /// Base URL of the OpenAI-compatible embeddings API (with --embedder openai).
    #[arg(long, env = "AUDITMEM_EMBED_URL")]
    pub embed_url: Option<String>,
    /// Model name sent to the embeddings API.
    #[arg(
        long,
        env = "AUDITMEM_EMBED_MODEL",
        default_value = "text-embedding-3-small"
    )]
    pub embed_model: String,
    /// API key of the embeddings API.
    #[arg(long, env = "AUDITMEM_EMBED_API_KEY", hide_env_values = true)]
    pub embed_api_key: Option<String>,
    /// Extraction: the embedded rule-based extractor, or an OpenAI-compatible chat API.
    #[arg(long, env = "AUDITMEM_EXTRACTOR", value_enum, default_value_t = ExtractorKind::Rules)]
    pub extractor: ExtractorKind,
    /// Base URL of the OpenAI-compatible chat completions API (with --extractor openai).
    #[arg(long, env = "AUDITMEM_EXTRACT_URL")]
    pub extract_url: Option<String>,
    /// Model name sent to the chat API.
    #[arg(long, env = "AUDITMEM_EXTRACT_MODEL", default_value = "gpt-4o-mini")]
    pub extract_model: String,
    /// API key of the chat API.
    #[arg(long, env = "AUDITMEM_EXTRACT_API_KEY", hide_env_values = true)]
    pub extract_api_key: Option<String>,
    /// Timeout of provider calls, seconds.
    #[arg(long, env = "AUDITMEM_PROVIDER_TIMEOUT_SECS", default_value_t = 20)]
    pub provider_timeout_secs: u64,
    /// Credits an extraction costs per call.
    #[arg(long, env = "AUDITMEM_EXTRACT_CREDITS_PER_CALL", default_value_t = 1.0)]
    pub extract_credits_per_call: f64,
    /// Credits an extraction costs per started 1,000 input characters.
    #[arg(
        long,
        env = "AUDITMEM_EXTRACT_CREDITS_PER_1K_CHARS",
        default_value_t = 1.0
    )]
    pub extract_credits_per_1k_chars: f64,
    /// USD per credit, for `balance_consumed_usd`.
    #[arg(long, env = "AUDITMEM_USD_PER_CREDIT", default_value_t = 0.001)]
    pub usd_per_credit: f64,
    /// Cosine at or above which an extracted memory duplicates an existing one.
    #[arg(long, env = "AUDITMEM_DEDUP_THRESHOLD", default_value_t = 0.9)]
    pub dedup_threshold: f32,
    /// Longest extraction input, characters (longer: 400, nothing charged). 20,000 characters
    /// (~5,000 tokens) hold a long conversation and fit an 8k-token chat model's context with
    /// the prompt and the answer; the price grows with the input, the model work with it.
    #[arg(long, env = "AUDITMEM_MAX_EXTRACT_CHARS", default_value_t = 20_000)]
    pub max_extract_chars: usize,
    // Extraction caps and provider TLS (docs/EXTRACTION.md, docs/OPERATIONS.md).
    /// Most memories one extraction call stores: an input in which the extractor finds more is
    /// refused with 400, nothing stored or charged. 50 is more than a conversation of
    /// 20,000 characters rarely holds worth keeping, and bounds a call's embedding work (~0.2 s
    /// of the in-process model's two cores for short statements).
    #[arg(long, env = "AUDITMEM_MAX_EXTRACT_MEMORIES", default_value_t = 50, value_parser = at_least_one)]
    pub max_extract_memories: usize,
    /// A PEM bundle of CA certificates trusted for https providers (--embed-url,
    /// --extract-url) besides the Mozilla roots built in: for a private CA.
    #[arg(long, env = "AUDITMEM_PROVIDER_CA_FILE")]
    pub provider_ca_file: Option<PathBuf>,
    /// Admin API bearer token, at least 32 bytes; the admin API is off when unset.
    #[arg(long, env = "AUDITMEM_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    // The log of record in a cluster (docs/SCALING.md).
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Where the data keys live, when not with the log of record (`sled`: the data dir's key
    /// directory; `nats://...`: a cluster's key store): a copy of a cluster node's data dir
    /// served alone with `--log sled` names its cluster here to open what is sealed.
    #[arg(long, env = "AUDITMEM_KEY_STORE")]
    pub key_store: Option<LogBackend>,
}

impl ServeArgs {
    /// The checkpoint signing key's file: `--signing-key`, or `signing.key` in the data dir.
    pub fn signing_key_path(&self) -> PathBuf {
        self.signing_key
            .clone()
            .unwrap_or_else(|| self.data_dir.join(DEFAULT_SIGNING_KEY))
    }

    /// The key-encryption key's file: `--master-key-file`, or `master.key` in the data dir.
    pub fn master_key_path(&self) -> PathBuf {
        master_key_path(&self.data_dir, self.master_key_file.as_deref())
    }

    /// The checkpoints file: `--checkpoints-file`, or `checkpoints.ndjson` in the data dir.
    pub fn checkpoints_path(&self) -> PathBuf {
        self.checkpoints_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(DEFAULT_CHECKPOINTS_FILE))
    }
}

/// The signing key's and the checkpoints file's names in the data dir when no path is given:
/// inside it, so that a new data dir never meets another log's checkpoints or key.
pub const DEFAULT_SIGNING_KEY: &str = "signing.key";
pub const DEFAULT_CHECKPOINTS_FILE: &str = "checkpoints.ndjson";

/// The key-encryption key's name in the data dir when no path is given.
pub const DEFAULT_MASTER_KEY: &str = "master.key";

/// `given`, or the default key-encryption key of `data_dir`.
pub fn master_key_path(data_dir: &std::path::Path, given: Option<&std::path::Path>) -> PathBuf {
    given.map_or_else(
        || data_dir.join(DEFAULT_MASTER_KEY),
        std::path::Path::to_path_buf,
    )
}

/// Where the log of record lives: `sled` (the data dir, one node) or a NATS JetStream stream
/// that every node mirrors into its data dir (`nats://HOST:PORT[,HOST:PORT...]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogBackend {
    Sled,
    Nats(Vec<String>),
}

impl std::str::FromStr for LogBackend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "sled" {
            return Ok(LogBackend::Sled);
        }
        let Some(rest) = s.strip_prefix("nats://") else {
            return Err(format!(
                "`{s}`: the log is `sled` or `nats://HOST:PORT[,HOST:PORT...]`"
            ));
        };
        let mut servers = Vec::new();
        for part in rest.split(',') {
            let part = part.trim().trim_start_matches("nats://");
            if part.is_empty() || !part.contains(':') {
                return Err(format!("`{part}` in `{s}`: each NATS server is HOST:PORT"));
            }
            servers.push(format!("nats://{part}"));
        }
        Ok(LogBackend::Nats(servers))
    }
}

impl LogBackend {
    /// `AUDITMEM_LOG` when it names a log of record (`sled`, `nats://...`) rather than a log
    /// filter.
    pub fn from_env() -> Option<LogBackend> {
        let v = std::env::var("AUDITMEM_LOG").ok()?;
        let v = v.trim();
        (v == "sled" || v.starts_with("nats://"))
            .then(|| v.parse().ok())
            .flatten()
    }
}

impl ClusterArgs {
    /// The log of record: `--log`, else `AUDITMEM_LOG` when it names one, else sled.
    pub fn backend(&self) -> LogBackend {
        self.log
            .clone()
            .or_else(LogBackend::from_env)
            .unwrap_or(LogBackend::Sled)
    }
}

#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// The log of record: `sled` (in the data dir; the default) or
    /// `nats://HOST:PORT[,HOST:PORT...]`, a JetStream stream shared by every node, each
    /// mirroring it into its own data dir. Also `AUDITMEM_LOG=sled|nats://...`: that variable
    /// is the log filter too (e.g. `info`), and a value naming a log of record is taken as one.
    #[arg(long = "log")]
    pub log: Option<LogBackend>,
    /// The JetStream stream holding the log (created when missing).
    #[arg(long, env = "AUDITMEM_NATS_STREAM", default_value = "AUDITMEM")]
    pub nats_stream: String,
    /// The subject the log's messages are published on.
    #[arg(long, env = "AUDITMEM_NATS_SUBJECT", default_value = "auditmem.log")]
    pub nats_subject: String,
    /// The stream's replicas when this node creates it (1, 3 or 5 servers hold each message).
    #[arg(long, env = "AUDITMEM_NATS_REPLICAS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=5))]
    pub nats_replicas: u64,
    /// How long a write waits for JetStream to acknowledge it (retrying through a leader
    /// change) before it is answered 503: nothing acknowledged.
    #[arg(long, env = "AUDITMEM_NATS_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub nats_timeout_ms: u64,
    /// How long a request carrying `X-Auditmem-Min-Position` waits for this node to fold that
    /// far before it is answered 503.
    #[arg(long, env = "AUDITMEM_CONSISTENCY_WAIT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub consistency_wait_ms: u64,
}

/// `--admin-listen`: `HOST:PORT`, or a port alone, on loopback.
fn admin_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| format!("'{s}' is neither HOST:PORT (an IP address and a port) nor a port"))
}

/// A count of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a whole number of at least 1")),
    }
}

/// A rate: a finite number of at least 0.
fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a number of requests per second (0 or more)"
        )),
    }
}

/// Options that do not apply to the mode asked for are refused (exit 2) by `verify` itself
/// (src/cli/verify.rs), naming them, never ignored.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Verify a stopped server's data dir (never written to).
    #[arg(long, env = "AUDITMEM_DATA_DIR", conflicts_with_all = ["url", "export"])]
    pub data_dir: Option<PathBuf>,
    /// Verify a running server by streaming its raw records and checking them here.
    #[arg(long, conflicts_with = "export")]
    pub url: Option<String>,
    /// Verify a tenant's export file against its signed manifest (`--manifest`), and the tenant
    /// chain its rows carry (business and custom plans).
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// With --export: the export's manifest, as `GET /v1/audit/logs/export/{id}/manifest` serves
    /// it (or the export's status answer, which holds it).
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// With --export and no manifest: check only the chain the rows carry, which cannot see rows
    /// cut from either end, a recomputed chain or a made-up file.
    #[arg(long)]
    pub chain_only: bool,
    /// A head seen before, `SEQ:HEX`: the log must still have it.
    #[arg(long)]
    pub expect_head: Option<String>,
    /// A checkpoints file (JSON lines) whose signed heads the log must still have.
    #[arg(long)]
    pub checkpoints: Option<PathBuf>,
    /// Pin the service's public key, in either form `auditmem admin pubkey` prints: its hex
    /// (`public_key`) or its signed-note verifier key (`verifier_key`). Checkpoints, notes and
    /// manifests must be signed by it. Without it each checkpoint is checked against the key
    /// it names, which the output says.
    #[arg(long)]
    pub pubkey: Option<String>,
    /// Admin token for --url.
    #[arg(long, env = "AUDITMEM_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// A PEM bundle of CA certificates trusted for an https --url besides the Mozilla roots
    /// built in: for a server with a private CA's certificate.
    #[arg(long, env = "AUDITMEM_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
    /// With --data-dir: the key-encryption key of the data dir's keys (default: `master.key`
    /// in the data dir); with --nats: the cluster's KEK, which opens its key store (no
    /// default). To count the records of erased subjects; verifying never needs it.
    #[arg(long, env = "AUDITMEM_MASTER_KEY_FILE")]
    pub master_key_file: Option<PathBuf>,
    /// Verify the chain straight from a cluster's JetStream stream
    /// (`nats://HOST:PORT[,HOST:PORT...]`), without any node.
    #[arg(long, conflicts_with_all = ["url", "export", "data_dir"])]
    pub nats: Option<LogBackend>,
    /// With --nats: the stream holding the log.
    #[arg(long, env = "AUDITMEM_NATS_STREAM", default_value = "AUDITMEM")]
    pub nats_stream: String,
    /// Check one entry's inclusion proof offline: the answer of
    /// `GET /v1/audit/logs/{audit_id}/proof` saved to a file. Needs --pubkey.
    #[arg(long, conflicts_with_all = ["data_dir", "url", "export", "nats", "consistency"])]
    pub proof: Option<PathBuf>,
    /// Check that the signed checkpoint NEW extends the signed checkpoint OLD (each a file
    /// holding a checkpoint note, as `GET /log/checkpoint` serves it), with the proof of
    /// --consistency-proof. Needs --pubkey.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"], conflicts_with_all = ["data_dir", "url", "export", "nats"])]
    pub consistency: Option<Vec<PathBuf>>,
    /// With --consistency: the answer of `GET /v1/audit/consistency?from=OLD&to=NEW` (or the
    /// admin API's) saved to a file.
    #[arg(long, requires = "consistency")]
    pub consistency_proof: Option<PathBuf>,
    /// Check an export's row proofs offline: the answer of
    /// `GET /v1/audit/logs/export/{export_id}/proofs` saved to a file; with --export FILE, also
    /// that they are that file's rows, in its order. Needs --pubkey.
    #[arg(long, conflicts_with_all = ["data_dir", "url", "nats", "proof", "consistency"])]
    pub export_proofs: Option<PathBuf>,
    /// With --proof or --export-proofs: a witness's cosignature verifier key
    /// (`auditmem witness pubkey`); repeat for each witness you trust.
    #[arg(long = "witness-key")]
    pub witness_keys: Vec<String>,
    /// With --proof or --export-proofs: how many distinct --witness-key witnesses must have
    /// cosigned the checkpoint.
    #[arg(long = "witnesses", default_value_t = 0)]
    pub witness_quorum: usize,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The data dir whose projections are rebuilt (the server must be stopped).
    #[arg(long, env = "AUDITMEM_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// The key-encryption key the data dir's keys are wrapped with (default: `master.key`
    /// in the data dir).
    #[arg(long, env = "AUDITMEM_MASTER_KEY_FILE")]
    pub master_key_file: Option<PathBuf>,
    /// For a cluster node's data dir: the log's servers (`nats://HOST:PORT[,...]`, as `serve
    /// --log` takes them; also `AUDITMEM_LOG`), whose key store holds the data keys.
    #[arg(long = "log")]
    pub log: Option<LogBackend>,
    /// With --log: the log's JetStream stream (its data keys are in `<stream>_KEYS`).
    #[arg(long, env = "AUDITMEM_NATS_STREAM", default_value = "AUDITMEM")]
    pub nats_stream: String,
    /// With --log: how long one request to NATS may take.
    #[arg(long, env = "AUDITMEM_NATS_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub nats_timeout_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::LogBackend;

    #[test]
    fn a_log_of_record_is_sled_or_a_list_of_nats_servers() {
        assert_eq!("sled".parse::<LogBackend>(), Ok(LogBackend::Sled));
        assert_eq!(
            "nats://10.0.0.1:4222,10.0.0.2:4222, nats://10.0.0.3:4222".parse::<LogBackend>(),
            Ok(LogBackend::Nats(vec![
                "nats://10.0.0.1:4222".into(),
                "nats://10.0.0.2:4222".into(),
                "nats://10.0.0.3:4222".into(),
            ]))
        );
        assert_eq!(
            "info".parse::<LogBackend>(),
            Err("`info`: the log is `sled` or `nats://HOST:PORT[,HOST:PORT...]`".into())
        );
        assert_eq!(
            "nats://10.0.0.1:4222,,".parse::<LogBackend>(),
            Err("`` in `nats://10.0.0.1:4222,,`: each NATS server is HOST:PORT".into())
        );
        assert_eq!(
            "nats://host".parse::<LogBackend>(),
            Err("`host` in `nats://host`: each NATS server is HOST:PORT".into())
        );
    }
}
