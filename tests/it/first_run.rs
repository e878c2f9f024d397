//! What a new user meets following the README as written: where the signing key and the
//! checkpoints file live, a checkpoints file that is not this log's, the admin API switched
//! off, the server's own log in a file, a start that fails, the public `/log` routes' limit,
//! and the one set of `--pubkey` forms.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{assert_error, cli, ingest_filler, path_str, Launch, Server, ADMIN_TOKEN};

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
}

/// `auditmem serve` started in `cwd` with only `args` (no key or checkpoints path unless they
/// say so), its stderr written to `cwd/server.log`.
struct Plain {
    child: Child,
    url: String,
}

impl Plain {
    fn start(cwd: &Path, args: &[&str]) -> Plain {
        match Self::try_start(cwd, args) {
            Ok(p) => p,
            Err(log) => panic!("the server did not start:\n{log}"),
        }
    }

    /// The server, or its log when it exited before listening.
    fn try_start(cwd: &Path, args: &[&str]) -> Result<Plain, String> {
        let log = std::fs::File::create(cwd.join("server.log")).expect("log file");
        let mut child = Command::new(crate::common::bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .current_dir(cwd)
            .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("AUDITMEM_MODEL_DIR", model_dir())
            .env("AUDITMEM_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn auditmem");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(120);
        let url = loop {
            assert!(
                Instant::now() < deadline,
                "the server did not start in time"
            );
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(u) = line.strip_prefix("auditmem listening on ") {
                        break u.trim().to_string();
                    }
                }
                _ => {
                    let _ = child.wait();
                    return Err(std::fs::read_to_string(cwd.join("server.log")).unwrap_or_default());
                }
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Ok(Plain { child, url })
    }

    fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = reqwest::blocking::Client::new()
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().unwrap_or(Value::Null))
    }

    fn text(&self, path: &str) -> (u16, String) {
        let resp = reqwest::blocking::get(format!("{}{path}", self.url)).expect("request");
        (resp.status().as_u16(), resp.text().unwrap_or_default())
    }

    fn stop(mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the server exited with {status}");
    }
}

impl Drop for Plain {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tenant and `n` ingested entries: `n + 1` records.
fn write_records(p: &Plain, n: usize) {
    let (status, v) = p.call(
        Method::POST,
        "/admin/v1/tenants",
        Some(json!({"name": "t", "plan": "pro"})),
    );
    assert_eq!(status, 201, "{v}");
    let tenant = v["data"]["id"].as_str().expect("id").to_string();
    let entries: Vec<Value> = (0..n)
        .map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "user_agent": format!("agent/{i}")}))
        .collect();
    let (status, v) = p.call(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(status, 200, "{v}");
}

fn head_seq(p: &Plain) -> u64 {
    let (status, v) = p.call(Method::GET, "/admin/v1/log/head", None);
    assert_eq!(status, 200, "{v}");
    v["data"]["seq"].as_u64().expect("seq")
}

/// The tree size of the checkpoint `/log/checkpoint` serves (its note's second line).
fn public_checkpoint_size(p: &Plain) -> u64 {
    let (status, note) = p.text("/log/checkpoint");
    assert_eq!(status, 200, "{note}");
    note.lines()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("not a checkpoint note: {note}"))
}

/// Without `--signing-key` and `--checkpoints-file` both live in the data dir, nothing is
/// written to the working directory, and the public checkpoint and the admin head agree from
/// the start: after `rm -rf data` the next start knows nothing of the old log.
#[test]
fn the_key_and_the_checkpoints_live_in_the_data_dir_and_a_new_data_dir_starts_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cwd = tmp.path();
    let p = Plain::start(cwd, &["--data-dir", "data"]);
    write_records(&p, 40);
    assert_eq!(head_seq(&p), 41);
    p.stop();
    assert!(cwd.join("data/signing.key").is_file());
    assert!(cwd.join("data/checkpoints.ndjson").is_file());
    assert!(!cwd.join(".auditmem").exists());

    let p = Plain::start(cwd, &["--data-dir", "data"]);
    assert_eq!(public_checkpoint_size(&p), 41);
    write_records(&p, 5);
    p.stop();

    std::fs::remove_dir_all(cwd.join("data")).expect("rm -rf data");
    let p = Plain::start(cwd, &["--data-dir", "data"]);
    let (status, v) = p.call(Method::GET, "/log/checkpoint", None);
    assert_error(&(status, v.clone()), 404, 4040);
    assert_eq!(v["message"], json!("no checkpoint has been signed yet"));
    write_records(&p, 3);
    let (status, v) = p.call(Method::POST, "/admin/v1/log/checkpoint", None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["seq"], json!(4));
    assert_eq!(public_checkpoint_size(&p), 4);
    assert_eq!(head_seq(&p), 4);
}

/// A checkpoints file whose checkpoints this log does not reproduce refuses the start, naming
/// the file and why; this log's own file starts, and its checkpoint is what is served.
#[test]
fn a_checkpoints_file_of_another_log_refuses_the_start() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cwd = tmp.path();
    let (key, cps) = (cwd.join("signing.key"), cwd.join("cps.ndjson"));
    let own = [
        "--signing-key",
        path_str(&key),
        "--checkpoints-file",
        path_str(&cps),
    ];
    fn with<'a>(dir: &'a str, own: &[&'a str]) -> Vec<&'a str> {
        [&["--data-dir", dir][..], own].concat()
    }

    // Log A: 41 records, a checkpoint of size 41 in the file.
    let a = Plain::start(cwd, &with("a", &own));
    write_records(&a, 40);
    a.stop();

    // Log B, a new data dir, with A's file: no record, where the file's checkpoint has 41.
    let refused = Plain::try_start(cwd, &with("b", &own))
        .err()
        .expect("log b started");
    let expected = format!(
        "the checkpoints file {} does not belong to this log: line 1: it holds a checkpoint of size 41, but this log holds 0 records",
        cps.display()
    );
    assert!(refused.contains(&expected), "{refused}");
    assert!(
        refused.contains("name this log's own with --checkpoints-file"),
        "{refused}"
    );
    // The failed start removed the data dir it created.
    assert!(!cwd.join("b").exists());

    // Log C: as many records as A's checkpoint covers, other ones (another request id).
    let c = Plain::start(cwd, &["--data-dir", "c"]);
    let (status, v) = c.call(
        Method::POST,
        "/admin/v1/tenants",
        Some(json!({"name": "other", "plan": "free"})),
    );
    assert_eq!(status, 201, "{v}");
    let tenant = v["data"]["id"].as_str().expect("id").to_string();
    let entries: Vec<Value> = (0..40)
        .map(|_| json!({"tenant_id": tenant, "action": "rag.query", "http_status": 500}))
        .collect();
    let (status, _) = c.call(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(status, 200);
    c.stop();
    // With A's key and file: as many records, but not A's.
    let refused = Plain::try_start(cwd, &with("c", &own))
        .err()
        .expect("log c started");
    let head_a = auditmem::log::checkpoint::read_file(&cps).expect("a's file")[0].clone();
    assert_eq!(head_a.seq, 41);
    assert!(
        refused.contains(&format!(
            "line 1: its checkpoint of size 41 names the record hash {}, which is not this log's record 41",
            head_a.hash
        )),
        "{refused}"
    );
    // With C's own key and A's file: signed by another key.
    let c_key = cwd.join("c/signing.key");
    let refused = Plain::try_start(
        cwd,
        &[
            "--data-dir",
            "c",
            "--signing-key",
            path_str(&c_key),
            "--checkpoints-file",
            path_str(&cps),
        ],
    )
    .err()
    .expect("log c started with a foreign file");
    assert!(
        refused.contains("line 1: the checkpoint of size 41 is signed by the key"),
        "{refused}"
    );
    // C's data dir is untouched by the refusals (it existed before them).
    assert!(cwd.join("c/db").is_file());

    // A with its own file starts, and serves its own checkpoint.
    let a = Plain::start(cwd, &with("a", &own));
    assert_eq!(public_checkpoint_size(&a), 41);
    assert_eq!(head_seq(&a), 41);
}

/// A start that fails (no model) leaves no data dir and no signing key behind.
#[test]
fn a_failed_start_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cwd = tmp.path();
    let out = Command::new(crate::common::bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", "data"])
        .args([
            "--model-dir",
            "no-model-here",
            "--signing-key",
            "keys/signing.key",
        ])
        .current_dir(cwd)
        .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-model-here"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(cwd)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // A start that fails after the data dir was created (the port is taken) removes it too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").to_string();
    let out = Command::new(crate::common::bin())
        .args(["serve", "--listen", &port, "--data-dir", "data"])
        .current_dir(cwd)
        .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("AUDITMEM_MODEL_DIR", model_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("binding {port}")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!cwd.join("data").exists());
}

/// The server's own log written to a file is plain text: no ANSI colour codes; a restart
/// does not announce a Merkle tree catch-up that was only the unsynced tail.
#[test]
fn the_server_log_in_a_file_is_plain_text() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cwd = tmp.path();
    let p = Plain::start(cwd, &["--data-dir", "data"]);
    write_records(&p, 30);
    p.stop();
    let p = Plain::start(cwd, &["--data-dir", "data"]);
    p.stop();
    let log = std::fs::read_to_string(cwd.join("server.log")).expect("log");
    assert!(log.contains(" INFO "), "{log}");
    assert!(log.contains("serving"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in the log file:\n{log}"
    );
    assert_eq!(log.matches("Merkle tree caught up").count(), 0, "{log}");
}

/// With no admin token the admin API says it is off and what turns it on; with
/// `--admin-listen` the main listener says where it is.
#[test]
fn the_admin_api_says_when_it_is_off_and_where_it_is() {
    let out = Server::launch(
        &[],
        Launch {
            envs: &[("AUDITMEM_ADMIN_TOKEN", "")],
            ..Launch::default()
        },
    );
    for path in ["/admin/v1/tenants", "/admin/v1/log/head"] {
        let resp = out.admin(Method::GET, path, None);
        assert_error(&resp, 404, 4040);
        assert_eq!(
            resp.1["message"],
            json!("the admin API is off: start the server with AUDITMEM_ADMIN_TOKEN (or --admin-token) set to a token of at least 32 bytes to turn it on"),
            "{path}"
        );
    }
    // A route that exists nowhere is still just that.
    let resp = out.admin(Method::GET, "/admin/v1/nothing", None);
    assert_error(&resp, 404, 4040);
    assert_eq!(resp.1["message"], json!("no such route"));

    let split = Server::launch(
        &[],
        Launch {
            envs: &[("AUDITMEM_ADMIN_LISTEN", "0")],
            ..Launch::default()
        },
    );
    let resp = split.admin(Method::GET, "/admin/v1/tenants", None);
    assert_error(&resp, 404, 4040);
    assert_eq!(
        resp.1["message"],
        json!("the admin API is served on the admin listener (--admin-listen), not on this one")
    );
    let admin = split.admin_url.clone().expect("admin listener");
    let r = reqwest::blocking::get(format!("{admin}/v1/audit/logs")).expect("request");
    assert_eq!(r.status().as_u16(), 404);
    let v: Value = r.json().expect("json");
    assert_eq!(
        v["message"],
        json!("this listener serves the admin API only (--admin-listen); the rest of the API is on --listen")
    );
}

/// The public transparency routes are limited per source: past the burst, 429 (4290) with
/// Retry-After, in the envelope.
#[test]
fn the_public_log_routes_are_rate_limited_per_source() {
    let s = Server::start_with(&[
        "--log-rate-limit-per-sec",
        "0.5",
        "--log-rate-limit-burst",
        "3",
    ]);
    let t = s.create_tenant("pro");
    ingest_filler(&s, &t, 3);
    let (status, v) = s.admin(Method::POST, "/admin/v1/log/checkpoint", None);
    assert_eq!(status, 200, "{v}");
    for path in ["/log/checkpoint", "/log/tile/0/000.p/4", "/log/checkpoint"] {
        let r = s
            .raw()
            .get(format!("{}{path}", s.url))
            .send()
            .expect("send");
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    let r = s
        .raw()
        .get(format!("{}/log/tile/0/000.p/4", s.url))
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("2")
    );
    let v: Value = r.json().expect("json");
    assert_error(&(429, v.clone()), 429, 4290);
    assert_eq!(
        v["message"],
        json!("too many requests to /log from this address; retry after 2 s")
    );
    // The rest of the service is not limited by it.
    assert_eq!(
        s.raw()
            .get(format!("{}/healthz", s.url))
            .send()
            .expect("send")
            .status()
            .as_u16(),
        200
    );
}

/// `verify --pubkey` takes the key in either form `auditmem admin pubkey` prints, for the
/// chain's checkpoints as for an export's manifest and a proof; a malformed one is refused
/// naming both forms.
#[test]
fn pubkey_takes_the_same_forms_everywhere() {
    let s = Server::start_with(&["--log-origin", "first-run.example/log"]);
    let (_, key) = s.tenant_with_key("business");
    for i in 0..3 {
        let (status, v) = s.post(
            "/v1/memories",
            &key,
            json!({"content": format!("fact {i}"), "memory_type": "fact"}),
        );
        assert_eq!(status, 200, "{v}");
    }
    let (status, v) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    assert_eq!(status, 200, "{v}");
    let hex = v["data"]["public_key"].as_str().expect("hex").to_string();
    let vkey = v["data"]["verifier_key"]
        .as_str()
        .expect("vkey")
        .to_string();
    assert!(vkey.starts_with("first-run.example/log+"), "{vkey}");

    // An export and its manifest.
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({"format": "json"}));
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["export_id"].as_str().expect("id").to_string();
    s.wait_export_status(&key, &id, "completed");
    let dir = tempfile::tempdir().expect("tempdir");
    let (export, manifest) = (dir.path().join("e.json"), dir.path().join("m.json"));
    let (status, _, _, bytes) = s.download_export(&key, &id);
    assert_eq!(status, 200);
    std::fs::write(&export, bytes).expect("write");
    let (status, text) =
        crate::common::get_text(&s, &format!("/v1/audit/logs/export/{id}/manifest"), &key);
    assert_eq!(status, 200, "{text}");
    std::fs::write(&manifest, text).expect("write");
    // A proof of one entry.
    let (_, v) = s.get("/v1/audit/logs?page_size=1", &key);
    let audit_id = v["data"]["logs"][0]["id"].as_str().expect("id").to_string();
    let (status, text) =
        crate::common::get_text(&s, &format!("/v1/audit/logs/{audit_id}/proof"), &key);
    assert_eq!(status, 200, "{text}");
    let proof = dir.path().join("proof.json");
    std::fs::write(&proof, text).expect("write");
    let (status, _) = s.admin(Method::POST, "/admin/v1/log/checkpoint", None);
    assert_eq!(status, 200);

    for form in [&hex, &vkey] {
        let (code, out, err) = cli(
            &[
                "verify",
                "--export",
                path_str(&export),
                "--manifest",
                path_str(&manifest),
                "--pubkey",
                form,
            ],
            &[],
        );
        assert_eq!(code, 0, "--export with {form}: {out}{err}");
        let (code, out, err) = cli(
            &["verify", "--proof", path_str(&proof), "--pubkey", form],
            &[],
        );
        assert_eq!(code, 0, "--proof with {form}: {out}{err}");
        let (code, out, err) = cli(
            &[
                "verify",
                "--url",
                &s.url,
                "--checkpoints",
                path_str(&s.checkpoints_file()),
                "--pubkey",
                form,
            ],
            &[("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)],
        );
        assert_eq!(code, 0, "--url --checkpoints with {form}: {out}{err}");
        assert!(!out.contains("NOTE: no --pubkey"), "{out}");
    }
    // The verifier key of another origin names another log: its proof does not verify.
    let other = vkey.replacen("first-run.example/log", "other.example/log", 1);
    let (code, _, err) = cli(
        &["verify", "--proof", path_str(&proof), "--pubkey", &other],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cli(
        &[
            "verify",
            "--export",
            path_str(&export),
            "--manifest",
            path_str(&manifest),
            "--pubkey",
            "abc",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("a public key is 64 hex characters (`public_key`) or a signed-note verifier key <origin>+<key id>+<base64> (`verifier_key`), as `auditmem admin pubkey` prints them"),
        "{err}"
    );
}
