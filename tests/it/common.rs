//! Black-box test harness: the real `auditmem` binary on a loopback port, real HTTP.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::{json, Value};

/// The servers' admin token: `serve` refuses one under 32 bytes.
pub const ADMIN_TOKEN: &str = "test-admin-token-3f9c1d27b5e8a046";

/// The binary under test: this build's, or the one `AUDITMEM_TEST_BIN` names (to check that a
/// new test fails against an older release).
pub fn bin() -> String {
    std::env::var("AUDITMEM_TEST_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_auditmem").to_string())
}

/// A running server and the directories it owns.
pub struct Server {
    child: Option<Child>,
    pub url: String,
    pub data_dir: PathBuf,
    pub keys_dir: PathBuf,
    pub extra: Vec<String>,
    /// More environment for the server (after `AUDITMEM_ADMIN_TOKEN`, which it may override).
    pub envs: Vec<(String, String)>,
    /// The open-files limit (soft and hard) the server runs under, when lowered.
    pub open_files: Option<u64>,
    /// The admin listener's URL, when `--admin-listen` gave it one.
    pub admin_url: Option<String>,
    /// Where the server's stderr (its log) goes when captured; inherited otherwise.
    pub log_file: Option<PathBuf>,
    _tmp: Option<tempfile::TempDir>,
    client: Client,
}

/// How to start a server beyond its `serve` arguments.
#[derive(Default)]
pub struct Launch<'a> {
    pub envs: &'a [(&'a str, &'a str)],
    pub open_files: Option<u64>,
    pub capture_log: bool,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        Self::launch(extra, Launch::default())
    }

    /// A server whose log, at its most verbose for our code and the HTTP layers, is written to
    /// [`Server::log_file`] instead of the test's stderr, so a test can inspect it.
    pub fn start_capturing_log(extra: &[&str]) -> Server {
        Self::launch(
            extra,
            Launch {
                capture_log: true,
                ..Launch::default()
            },
        )
    }

    /// A server with `serve` arguments, environment and an open-files limit.
    pub fn launch(extra: &[&str], how: Launch) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data_dir = tmp.path().join("data");
        let keys_dir = tmp.path().join("keys");
        let log_file = how.capture_log.then(|| tmp.path().join("server.log"));
        let mut s = Server {
            child: None,
            url: String::new(),
            data_dir,
            keys_dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            envs: how
                .envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            open_files: how.open_files,
            admin_url: None,
            log_file,
            _tmp: Some(tmp),
            client: Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client"),
        };
        s.spawn();
        s
    }

    /// A server on an existing data dir (keys in a fresh temporary dir).
    pub fn start_on(data_dir: &Path) -> Server {
        Self::start_on_with(data_dir, &[])
    }

    /// [`Server::start_on`] with more `serve` arguments.
    pub fn start_on_with(data_dir: &Path, extra: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let keys_dir = tmp.path().join("keys");
        let mut s = Server {
            child: None,
            url: String::new(),
            data_dir: data_dir.to_path_buf(),
            keys_dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            envs: Vec::new(),
            open_files: None,
            admin_url: None,
            log_file: None,
            _tmp: Some(tmp),
            client: Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client"),
        };
        s.spawn();
        s
    }

    pub fn checkpoints_file(&self) -> PathBuf {
        self.keys_dir.join("checkpoints.ndjson")
    }

    pub fn signing_key(&self) -> PathBuf {
        self.keys_dir.join("signing.key")
    }

    /// (Re)starts the process on the same directories.
    pub fn spawn(&mut self) {
        // A lowered open-files limit is set by the shell's `ulimit` right before it execs the
        // server (soft and hard, so the server cannot raise it back).
        let mut cmd = match self.open_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(r#"ulimit -n "$0" && exec "$@""#)
                    .arg(n.to_string())
                    .arg(bin());
                sh
            }
            None => Command::new(bin()),
        };
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--signing-key")
            .arg(self.signing_key())
            .arg("--checkpoints-file")
            .arg(self.checkpoints_file())
            .args(&self.extra)
            .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("AUDITMEM_LOG", "error")
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(path) = &self.log_file {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the server log file");
            cmd.env("AUDITMEM_LOG", "debug,auditmem=trace,tower_http=trace")
                .stderr(file);
        }
        let mut child = cmd.spawn().expect("spawn auditmem");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut admin_url = None;
        let url = loop {
            assert!(Instant::now() < deadline, "server did not start in time");
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(u) = line.strip_prefix("auditmem admin listening on ") {
                        admin_url = Some(u.trim().to_string());
                    }
                    if let Some(u) = line.strip_prefix("auditmem listening on ") {
                        break u.trim().to_string();
                    }
                }
                _ => panic!("server exited before listening"),
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.url = url;
        self.admin_url = admin_url;
        self.child = Some(child);
    }

    /// The server process's id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
            let status = child.wait().expect("wait");
            assert!(status.success(), "server exited with {status}");
        }
    }

    /// SIGTERM without waiting: the server stops accepting and drains ([`Server::wait_exit`]).
    pub fn terminate(&self) {
        let child = self.child.as_ref().expect("a running server");
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    }

    /// Waits for the server to exit, and says how it did.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running server");
        child.wait().expect("wait")
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn call(
        &self,
        method: Method,
        path: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut req = self.client.request(method, format!("{}{}", self.url, path));
        if let Some(b) = bearer {
            req = req.bearer_auth(b);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().expect("body");
        let v =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
        (status, v)
    }

    pub fn raw(&self) -> &Client {
        &self.client
    }

    pub fn get(&self, path: &str, key: &str) -> (u16, Value) {
        self.call(Method::GET, path, Some(key), None)
    }

    /// Waits (at most 5 s) until the head, the last record folded, is `seq`. An audited read is
    /// answered once its entry is durable and folded just after (`Appender::append_read`).
    pub fn wait_head(&self, seq: u64) {
        poll(Duration::from_secs(5), "the head", || match self.head().0 {
            h if h == seq => Ok(()),
            h => Err(format!("head {h}, want {seq}")),
        });
    }

    /// `get`, asked again for at most 30 s while it answers 503 (5030): a clustered node whose
    /// stores are electing a leader says so and is to be asked again, as a client would.
    pub fn get_served(&self, path: &str, key: &str) -> (u16, Value) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, v) = self.get(path, key);
            if status != 503 || v["code"] != serde_json::json!(5030) || Instant::now() >= until {
                return (status, v);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    pub fn post(&self, path: &str, key: &str, body: Value) -> (u16, Value) {
        self.call(Method::POST, path, Some(key), Some(&body))
    }

    pub fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call(method, path, Some(ADMIN_TOKEN), body.as_ref())
    }

    pub fn create_tenant(&self, plan: &str) -> String {
        let (s, v) = self.admin(
            Method::POST,
            "/admin/v1/tenants",
            Some(json!({"name": format!("t-{plan}"), "plan": plan, "credits": 100})),
        );
        assert_eq!(s, 201, "{v}");
        v["data"]["id"].as_str().expect("id").to_string()
    }

    pub fn create_key(&self, tenant: &str, perms: &[&str]) -> String {
        let (s, v) = self.admin(
            Method::POST,
            &format!("/admin/v1/tenants/{tenant}/keys"),
            Some(json!({"permissions": perms})),
        );
        assert_eq!(s, 201, "{v}");
        v["data"]["api_key"].as_str().expect("api_key").to_string()
    }

    /// A tenant on `plan` and a key with every permission.
    pub fn tenant_with_key(&self, plan: &str) -> (String, String) {
        let t = self.create_tenant(plan);
        let k = self.create_key(
            &t,
            &["audit.read", "audit.export", "memory.read", "memory.write"],
        );
        (t, k)
    }

    /// Polls an export's status until it is `want` (a minute at most); returns its `data`.
    pub fn wait_export_status(&self, key: &str, id: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, v) = self.get(&format!("/v1/audit/logs/export/{id}"), key);
            assert_eq!(status, 200, "{v}");
            if v["data"]["status"] == json!(want) {
                return v["data"].clone();
            }
            assert!(Instant::now() < deadline, "export never became {want}: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Downloads an export: (status, Content-Type, Content-Disposition, body).
    pub fn download_export(&self, key: &str, id: &str) -> (u16, String, String, Vec<u8>) {
        let r = self
            .client
            .get(format!("{}/v1/audit/logs/export/{id}/download", self.url))
            .bearer_auth(key)
            .send()
            .expect("send");
        let status = r.status().as_u16();
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let (ct, cd) = (header("content-type"), header("content-disposition"));
        (status, ct, cd, r.bytes().expect("bytes").to_vec())
    }

    /// [`Self::download_export`] of a completed export from a node of a cluster: while it
    /// answers 503 (the node is still writing its own copy, 5030 "retry in a few seconds",
    /// docs/SCALING.md; or, back from a crash, does not reach the cluster's stores yet), asked
    /// again for at most a minute.
    pub fn download_cluster_export(&self, key: &str, id: &str) -> (u16, String, String, Vec<u8>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.download_export(key, id);
            if got.0 != 503 || Instant::now() >= deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn head(&self) -> (u64, String) {
        let (_, v) = self.admin(Method::GET, "/admin/v1/log/head", None);
        (
            v["data"]["seq"].as_u64().expect("seq"),
            v["data"]["hash"].as_str().expect("hash").to_string(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the CLI and returns (exit code, stdout, stderr).
pub fn cli(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run auditmem");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Asserts the error envelope exactly.
pub fn assert_error(resp: &(u16, Value), status: u16, code: i64) {
    let (s, v) = resp;
    assert_eq!(*s, status, "{v}");
    assert_eq!(v["success"], json!(false), "{v}");
    assert_eq!(v["code"], json!(code), "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert_eq!(v["data"], Value::Null, "{v}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(4), "{v}");
}

/// Serves `app` on 127.0.0.1:0 from a runtime on a thread of its own (the provider clients
/// under test are blocking and must not run inside one); returns the bound address.
pub fn serve_in_background(app: axum::Router) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

/// Every audit id the key's tenant can list, walking the cursor pages (newest first).
pub fn all_audit_ids(s: &Server, key: &str) -> std::collections::HashSet<String> {
    all_audit_entries(s, key)
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_string())
        .collect()
}

/// Every audit entry of the key's tenant, as listed (each page newest first), following the
/// cursor.
pub fn all_audit_entries(s: &Server, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            None => "/v1/audit/logs?page_size=100".to_string(),
            Some(c) => format!("/v1/audit/logs?page_size=100&cursor={c}"),
        };
        let (status, v) = s.get_served(&path, key);
        assert_eq!(status, 200, "{v}");
        out.extend(v["data"]["logs"].as_array().expect("logs").iter().cloned());
        match v["data"]["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// An RFC 3339 time of now with microseconds: an `end_time` that excludes the audit entries of
/// every read made after it (reads are audited, so answers compared across servers must not
/// count them).
pub fn now_end_time() -> String {
    // Entries are stamped in whole microseconds; a little slack keeps "now" strictly past them.
    std::thread::sleep(Duration::from_millis(5));
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Reads whose answers depend only on the log up to `end` (and not on entries the reads
/// themselves add): the head, admin views, audit lists bounded by `end`, audit details of
/// `audit_ids`, and, per key, the memories (lists per type and each of `memory_ids`, 404 or
/// not). The head is read first, before any audited read moves it.
pub fn answers(
    s: &Server,
    keys: &[String],
    audit_ids: &[String],
    memory_ids: &[String],
    end: &str,
) -> Vec<Value> {
    let mut out = vec![
        s.head().0.into(),
        s.admin(Method::GET, "/admin/v1/tenants", None).1,
    ];
    for key in keys {
        for q in [
            format!("/v1/audit/logs?end_time={end}"),
            format!("/v1/audit/logs?end_time={end}&action=gateway.chat"),
            format!("/v1/audit/logs?end_time={end}&action=memory.write"),
            format!("/v1/audit/logs?end_time={end}&page=2&page_size=3"),
            format!("/v1/audit/logs?end_time={end}&start_time=2020-01-01T00:00:00Z"),
        ] {
            out.push(s.get(&q, key).1["data"].clone());
        }
        for id in audit_ids {
            let (status, v) = s.get(&format!("/v1/audit/logs/{id}"), key);
            out.push(json!([status, v]));
        }
        for q in [
            "/v1/memories?page_size=100",
            "/v1/memories?page_size=100&page=2",
            "/v1/memories?memory_type=rule&page_size=100",
            "/v1/memories?memory_type=fact&page_size=100",
            "/v1/memories?memory_type=context&page_size=100",
        ] {
            let (status, v) = s.get(q, key);
            out.push(json!([status, v]));
        }
        for id in memory_ids {
            let (status, v) = s.get(&format!("/v1/memories/{id}"), key);
            out.push(json!([status, v]));
        }
    }
    out
}

/// Asserts two [`answers`] are equal, naming the first read that differs.
pub fn assert_same_answers(before: &[Value], after: &[Value]) {
    assert_eq!(before.len(), after.len(), "not the same reads");
    for (i, (x, y)) in before.iter().zip(after).enumerate() {
        assert_eq!(x, y, "read #{i} differs");
    }
}

/// A copy of `data_dir` at `to`, with every projection rebuilt by `auditmem replay`.
pub fn replayed_copy(data_dir: &Path, to: &Path) {
    replayed_copy_with(data_dir, to, &[]);
}

/// [`replayed_copy`] with more `replay` arguments (a cluster node's copy names its key store).
pub fn replayed_copy_with(data_dir: &Path, to: &Path, args: &[&str]) {
    copy_dir(data_dir, to);
    let mut all = vec!["replay", "--data-dir", path_str(to)];
    all.extend_from_slice(args);
    let (code, out, err) = cli(&all, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("replayed "), "{out}");
}

/// Ingests `n` gateway entries of ~400 bytes each into `tenant`, 1,000 a call: bulk for the
/// export tests' files.
pub fn ingest_filler(s: &Server, tenant: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let entries: Vec<Value> = chunk
            .iter()
            .map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "user_agent": format!("agent/{i:08}"), "error_msg": "e".repeat(300)}))
            .collect();
        ingest(s, entries);
    }
}

/// Ingests `entries` (at most 1,000) in one admin call; gives their ids.
pub fn ingest(s: &Server, entries: Vec<Value>) -> Vec<String> {
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(status, 200, "{v}");
    v["data"]["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|i| i.as_str().expect("id").to_string())
        .collect()
}

/// A counter or gauge without labels from the server's `/metrics` (`None` while not there).
pub fn metric(s: &Server, name: &str) -> Option<f64> {
    metrics_text(s)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{name} {v}: {e}"))
        })
}

/// Polls until `f` gives `Ok`, at most `within`; panics with the last `Err` otherwise.
pub fn poll<T>(within: Duration, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        match f() {
            Ok(t) => return t,
            Err(why) => assert!(
                Instant::now() < deadline,
                "{what}: not so after {within:?}: {why}"
            ),
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The server's `GET /metrics` text.
pub fn metrics_text(s: &Server) -> String {
    s.raw()
        .get(format!("{}/metrics", s.url))
        .send()
        .and_then(|r| r.text())
        .expect("metrics")
}

/// The seed a randomized test runs with: the whole number in the environment variable `name`
/// (to repeat a run), else one from the clock.
pub fn seed_or_clock(name: &str) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got '{v}'")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// `blake3(parts...)` as lower-case hex (a domain is the first part).
pub fn blake3_hex(parts: &[&[u8]]) -> String {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().to_hex().to_string()
}

/// The detail digest a tenant computes from a detail read (docs/API.md, "Per-tenant chain"):
/// of a sealed entry (a read showing `detail_salt`, rule v3) keyed with the salt over its
/// personal fields and detail; of an older entry (rule v2) over its detail.
pub fn detail_digest(d: &Value) -> String {
    let salt = d["detail_salt"].as_str().map(|s| {
        let mut k = [0u8; 32];
        k.copy_from_slice(&hex::decode(s).expect("hex salt"));
        k
    });
    let mut m = serde_json::Map::new();
    if salt.is_some() {
        for f in ["error_msg", "ip_address", "metadata", "user_agent"] {
            m.insert(f.into(), d[f].clone());
        }
    }
    for f in [
        "input_content",
        "memory_query",
        "memory_results",
        "output_content",
        "rag_query",
        "rag_results",
        "request_body",
    ] {
        m.insert(f.into(), d[f].clone());
    }
    if d["response_ref"].is_null() {
        m.insert("response_body".into(), d["response_body"].clone());
    } else {
        m.insert("response_ref".into(), d["response_ref"].clone());
    }
    // serde_json's maps are ordered by key: this is the canonical form.
    let canonical = serde_json::to_string(&Value::Object(m)).expect("json");
    match salt {
        Some(k) => blake3::keyed_hash(&k, canonical.as_bytes())
            .to_hex()
            .to_string(),
        None => blake3_hex(&[b"auditmem/detail/v1", canonical.as_bytes()]),
    }
}

/// The chain rule of a list item and its canonical bytes (docs/API.md, "Per-tenant chain"):
/// v3 for a sealed entry (`"sealed": true`; its personal fields and `erased` are not hashed),
/// else v2 with a `detail_hash`, else v1 (its null `detail_hash` not hashed).
pub fn chain_fields(item: &Value) -> (&'static str, String) {
    let mut fields = item.as_object().expect("object").clone();
    fields.remove("hash");
    let rule = if item["sealed"] == json!(true) {
        for f in [
            "error_msg",
            "ip_address",
            "metadata",
            "user_agent",
            "erased",
        ] {
            fields.remove(f);
        }
        "v3"
    } else if item["detail_hash"].is_null() {
        fields.remove("detail_hash");
        "v1"
    } else {
        "v2"
    };
    (
        rule,
        serde_json::to_string(&Value::Object(fields)).expect("json"),
    )
}

/// GET with a key: (status, the body exactly as sent).
pub fn get_text(s: &Server, path: &str, key: &str) -> (u16, String) {
    let r = s
        .raw()
        .get(format!("{}{path}", s.url))
        .bearer_auth(key)
        .send()
        .expect("send");
    (r.status().as_u16(), r.text().expect("text"))
}

/// The interpreter of the venv `.ci/setup-tests` fills with the Python clients the tests drive
/// (tests/python/requirements.txt).
pub fn test_python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `bash .ci/setup-tests` to install the tests' Python clients",
        python.display()
    );
    python
}
