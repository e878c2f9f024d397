//! A 3-node NATS JetStream cluster of real `nats-server` processes on free loopback ports, and
//! `auditmem serve --log nats://...` nodes on it (`common::Server`), with the helpers the
//! cluster tests share: requests that carry and return log positions, waits that poll.
#![allow(dead_code)]

use crate::common::{self, Launch, Server, ADMIN_TOKEN};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use reqwest::blocking::Client;
use reqwest::Method;
use serde_json::Value;

/// The response header naming the global log seq a request's appends were committed at.
pub const POSITION: &str = "x-auditmem-position";
/// The request header asking a node to answer only once it has folded that seq.
pub const MIN_POSITION: &str = "x-auditmem-min-position";

/// How long a cluster (or one restarted member) may take to elect a meta leader and report
/// healthy; nats-server does it in well under a second on an idle machine.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// One `nats-server` process and the ports and directories it keeps across restarts.
struct NatsServer {
    name: String,
    client_port: u16,
    http_port: u16,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run nats-server ({e}): install it with .ci/setup-tests (apt-get install nats-server)")
            });
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Three `nats-server` processes routed to each other, JetStream on, each with its own store
/// dir in a temporary directory. Every process is killed when the cluster is dropped.
pub struct NatsCluster {
    servers: Vec<NatsServer>,
    /// The key-encryption key every API node of the cluster is given (one KEK per cluster).
    kek: PathBuf,
    http: Client,
    _tmp: tempfile::TempDir,
}

/// `n` distinct free loopback ports: all bound at once (so no two are the same), then released
/// for the servers to bind. Another process could take one in between; that is rare on
/// loopback and shows as a server that never becomes ready.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

impl NatsCluster {
    /// Starts the three servers and waits until JetStream has a meta leader and every server
    /// reports healthy.
    pub fn start() -> NatsCluster {
        const N: usize = 3;
        let tmp = tempfile::tempdir().expect("tempdir");
        let ports = free_ports(3 * N);
        let (client, rest) = ports.split_at(N);
        let (route, http) = rest.split_at(N);
        let routes = route
            .iter()
            .map(|p| format!("nats-route://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(", ");
        let servers = (0..N)
            .map(|i| {
                let name = format!("n{}", i + 1);
                let dir = tmp.path().join(&name);
                std::fs::create_dir_all(&dir).expect("mkdir");
                let conf = dir.join("nats.conf");
                let log = dir.join("nats.log");
                // Exports travel as object-store chunks and a group commit as one message:
                // 8 MB gives both room. JetStream's limits are bounded so that three servers
                // on a shared 2-core machine do not each reserve most of its memory and disk.
                let text = format!(
                    r#"server_name: {name}
listen: 127.0.0.1:{client}
http: 127.0.0.1:{http}
max_payload: 8MB
log_file: "{log}"
jetstream {{
  store_dir: "{store}"
  max_memory_store: 256MB
  max_file_store: 8GB
}}
cluster {{
  name: auditmem-test
  listen: 127.0.0.1:{route}
  routes: [{routes}]
}}
"#,
                    client = client[i],
                    http = http[i],
                    route = route[i],
                    log = common::path_str(&log),
                    store = common::path_str(&dir.join("store")),
                );
                std::fs::write(&conf, text).expect("write nats.conf");
                NatsServer {
                    name,
                    client_port: client[i],
                    http_port: http[i],
                    conf,
                    log,
                    child: None,
                }
            })
            .collect();
        let kek = tmp.path().join("master.key");
        auditmem::keys::Kek::generate(&kek).expect("the cluster's key-encryption key");
        let mut cluster = NatsCluster {
            servers,
            kek,
            http: Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("client"),
            _tmp: tmp,
        };
        for s in &mut cluster.servers {
            s.spawn();
        }
        cluster.wait_ready();
        cluster
    }

    /// The servers' client addresses as `auditmem serve --log` takes them.
    pub fn urls(&self) -> String {
        let hosts: Vec<String> = self
            .servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.client_port))
            .collect();
        format!("nats://{}", hosts.join(","))
    }

    /// Server `i`'s JetStream store dir (`store_dir` in its configuration).
    pub fn store_dir(&self, i: usize) -> PathBuf {
        self.servers[i]
            .conf
            .parent()
            .expect("a server's dir")
            .join("store")
    }

    /// The key-encryption key file every API node is started with.
    pub fn kek(&self) -> &Path {
        &self.kek
    }

    /// How many servers the cluster has (running or not).
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether server `i` runs.
    pub fn is_running(&self, i: usize) -> bool {
        self.servers[i].child.is_some()
    }

    /// SIGKILL to server `i`: no chance to flush or hand over leadership.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }

    /// Starts server `i` again on its ports and store dir. Returns at once: a server alone
    /// cannot become ready without a quorum ([`NatsCluster::wait_ready`] when one exists).
    pub fn restart(&mut self, i: usize) {
        self.servers[i].kill();
        self.servers[i].spawn();
    }

    /// The JSON a server's monitor port answers at `path`, or why there is none.
    pub fn monitor(&self, i: usize, path: &str) -> Result<(u16, Value), String> {
        let url = format!("http://127.0.0.1:{}{path}", self.servers[i].http_port);
        let r = self
            .http
            .get(&url)
            .send()
            .map_err(|e| format!("{url}: {e}"))?;
        let status = r.status().as_u16();
        let v = r.json().map_err(|e| format!("{url}: {e}"))?;
        Ok((status, v))
    }

    /// Why server `i` is not (yet) a healthy JetStream member, or `None` when it is: its
    /// `/healthz` answers 200 and its `/jsz` names a running meta leader of a 3-server cluster.
    pub fn not_ready(&self, i: usize) -> Option<String> {
        match self.monitor(i, "/healthz") {
            Ok((200, _)) => {}
            Ok((s, v)) => return Some(format!("healthz {s} {v}")),
            Err(e) => return Some(e),
        }
        match self.monitor(i, "/jsz") {
            Ok((200, v)) => {
                let meta = &v["meta_cluster"];
                let leader = meta["leader"].as_str().unwrap_or_default();
                if leader.is_empty() || meta["cluster_size"] != self.servers.len() {
                    return Some(format!("no meta leader yet: {meta}"));
                }
                // A killed leader stays named until the others' election timeout passes.
                let alive = self
                    .servers
                    .iter()
                    .any(|s| s.name == leader && s.child.is_some());
                (!alive).then(|| format!("the meta leader {leader} is not running: {meta}"))
            }
            Ok((s, v)) => Some(format!("jsz {s} {v}")),
            Err(e) => Some(e),
        }
    }

    /// Waits until every running server is ready (bounded; panics with the servers' log tails).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let waiting: Vec<String> = (0..self.servers.len())
                .filter(|&i| self.is_running(i))
                .filter_map(|i| {
                    self.not_ready(i)
                        .map(|why| format!("{}: {why}", self.servers[i].name))
                })
                .collect();
            if waiting.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the NATS cluster is not ready after {READY_WITHIN:?}: {waiting:?}\n{}",
                self.log_tails()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A stream's state (`messages`, `first_seq`, `last_seq`, ...) as a running server's monitor
    /// port reports it, when that server holds a replica of it.
    pub fn stream_state(&self, i: usize, stream: &str) -> Option<Value> {
        let (_, v) = self.monitor(i, "/jsz?streams=true").ok()?;
        v["account_details"]
            .as_array()?
            .iter()
            .flat_map(|a| a["stream_detail"].as_array().cloned().unwrap_or_default())
            .find(|s| s["name"] == stream)
            .map(|s| s["state"].clone())
    }

    /// The last lines of every server's log: what a failing test prints.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for s in &self.servers {
            let text = std::fs::read_to_string(&s.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!(
                "--- {} ({}) ---\n",
                s.name,
                common::path_str(&s.log)
            ));
            for l in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for s in &mut self.servers {
            s.kill();
        }
    }
}

/// An `auditmem serve` node on the cluster, with its own data dir (its mirror of the stream)
/// and its own checkpoint key, the cluster's key-encryption key, plus more `serve` arguments.
pub fn api_node(nats: &NatsCluster, extra: &[&str]) -> Server {
    let urls = nats.urls();
    let mut args = vec![
        "--log",
        urls.as_str(),
        "--master-key-file",
        common::path_str(&nats.kek),
    ];
    args.extend_from_slice(extra);
    Server::launch(&args, Launch::default())
}

/// [`api_node`] on an existing data dir.
pub fn api_node_on(nats: &NatsCluster, data_dir: &Path, extra: &[&str]) -> Server {
    let urls = nats.urls();
    let mut args = vec![
        "--log",
        urls.as_str(),
        "--master-key-file",
        common::path_str(&nats.kek),
    ];
    args.extend_from_slice(extra);
    Server::start_on_with(data_dir, &args)
}

/// An answer with the headers the cluster tests look at.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// `X-Auditmem-Position`, as sent (absent: `None`).
    pub position: Option<String>,
    pub elapsed: Duration,
}

impl Reply {
    /// The position header as a number; panics naming the answer when it is missing or not one.
    pub fn pos(&self) -> u64 {
        let p = self
            .position
            .as_deref()
            .unwrap_or_else(|| panic!("no {POSITION} header on {} {}", self.status, self.body));
        p.parse()
            .unwrap_or_else(|_| panic!("{POSITION} is not a seq: {p:?}"))
    }

    /// `(status, body)` as `common::assert_error` takes it.
    pub fn pair(&self) -> (u16, Value) {
        (self.status, self.body.clone())
    }
}

/// A request to a node with a bearer, a JSON body and `X-Auditmem-Min-Position` when given.
pub fn request(
    s: &Server,
    method: Method,
    path: &str,
    bearer: &str,
    body: Option<&Value>,
    min_position: Option<u64>,
) -> Reply {
    let min = min_position.map(|p| p.to_string());
    let headers: Vec<(&str, &str)> = min.iter().map(|p| (MIN_POSITION, p.as_str())).collect();
    request_with(s, method, path, bearer, body, &headers)
}

/// A request to a node with a bearer, a JSON body and `headers`.
pub fn request_with(
    s: &Server,
    method: Method,
    path: &str,
    bearer: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut req = s
        .raw()
        .request(method, format!("{}{path}", s.url))
        .bearer_auth(bearer);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let started = Instant::now();
    let resp = req.send().expect("request");
    let status = resp.status().as_u16();
    let position = resp
        .headers()
        .get(POSITION)
        .map(|v| v.to_str().unwrap_or("<not text>").to_string());
    let text = resp.text().expect("body");
    let elapsed = started.elapsed();
    let body =
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    Reply {
        status,
        body,
        position,
        elapsed,
    }
}

/// An admin call ([`request`] with the admin token).
pub fn admin(s: &Server, method: Method, path: &str, body: Option<&Value>) -> Reply {
    request(s, method, path, ADMIN_TOKEN, body, None)
}

/// A tenant on `plan` and a key with every permission, created on `s`: (tenant, key, the
/// position at which the key was committed).
pub fn tenant_with_key(s: &Server, plan: &str) -> (String, String, u64) {
    let r = admin(
        s,
        Method::POST,
        "/admin/v1/tenants",
        Some(&serde_json::json!({"name": format!("t-{plan}"), "plan": plan, "credits": 100})),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let tenant = r.body["data"]["id"].as_str().expect("id").to_string();
    let r = admin(
        s,
        Method::POST,
        &format!("/admin/v1/tenants/{tenant}/keys"),
        Some(
            &serde_json::json!({"permissions": ["audit.read", "audit.export", "memory.read", "memory.write"]}),
        ),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let key = r.body["data"]["api_key"]
        .as_str()
        .expect("api_key")
        .to_string();
    (tenant, key, r.pos())
}

pub use crate::common::poll;

/// The audit entries waiting in `node`'s outbox (`auditmem_cluster_outbox_entries`): reads
/// answered while the stream took no writes, appended later.
pub fn outbox_entries(node: &Server) -> u64 {
    common::metric(node, "auditmem_cluster_outbox_entries").unwrap_or_else(|| {
        panic!(
            "no auditmem_cluster_outbox_entries in {}'s metrics",
            node.url
        )
    }) as u64
}

/// Waits until every node has appended what its outbox held and every node's head is at least
/// `at_least`, all heads equal (seq and hash); returns the head seq. Only then is the log
/// settled: a read answered during a loss of quorum joins the log from its node's outbox after
/// the heads may have met.
pub fn wait_same_head(nodes: &[&Server], at_least: u64, within: Duration) -> u64 {
    poll(within, "every node at the same head", || {
        let waiting: Vec<u64> = nodes.iter().map(|n| outbox_entries(n)).collect();
        if waiting.iter().any(|&n| n > 0) {
            return Err(format!(
                "entries waiting in the nodes' outboxes: {waiting:?}"
            ));
        }
        let heads: Vec<(u64, String)> = nodes.iter().map(|n| n.head()).collect();
        if heads[0].0 >= at_least && heads.iter().all(|h| *h == heads[0]) {
            Ok(heads[0].0)
        } else {
            Err(format!("heads {heads:?}, want at least {at_least}"))
        }
    })
}

/// `auditmem verify --nats URLS --json`: (exit code, stdout, stderr).
pub fn verify_nats(nats: &NatsCluster, stream: Option<&str>) -> (i32, String, String) {
    let urls = nats.urls();
    let mut args = vec!["verify", "--nats", urls.as_str(), "--json"];
    if let Some(s) = stream {
        args.extend(["--nats-stream", s]);
    }
    common::cli(&args, &[])
}

/// `auditmem verify --data-dir DIR --json` on a stopped node's mirror.
pub fn verify_mirror(data_dir: &Path) -> (i32, String, String) {
    common::cli(
        &["verify", "--data-dir", common::path_str(data_dir), "--json"],
        &[],
    )
}

/// `answers` with each audit list's `next_cursor` cut to the entry it continues after. A cursor
/// also pins the log head it was answered at (`created_at.seq.snapshot`, base64), and in a
/// cluster every audited read on any node moves that head: two nodes answering the same page a
/// moment apart give the same entries and the same position but another snapshot.
pub fn without_cursor_snapshots(answers: &[Value]) -> Vec<Value> {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(c)) = m.get_mut("next_cursor") {
                    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(c.as_bytes())
                        .unwrap_or_else(|e| panic!("next_cursor {c:?} is not base64: {e}"));
                    let text = String::from_utf8(raw).expect("a text cursor");
                    let (at, _snapshot) = text.rsplit_once('.').expect("created_at.seq.snapshot");
                    *c = at.to_string();
                }
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut out = answers.to_vec();
    out.iter_mut().for_each(walk);
    out
}

/// The `report` of `verify --json` output, asserted clean: no failures, every record valid.
pub fn clean_report(out: &str) -> Value {
    let v: Value = serde_json::from_str(out)
        .unwrap_or_else(|e| panic!("verify --json printed no JSON ({e}): {out}"));
    assert_eq!(v["clean"], Value::Bool(true), "{out}");
    assert_eq!(v["report"]["failure_count"], 0, "{out}");
    assert_eq!(v["report"]["valid"], v["report"]["records"], "{out}");
    v["report"].clone()
}

/// An env knob that is a whole number.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got '{v}'"))
    })
}

#[test]
fn three_servers_form_a_jetstream_cluster_that_outlives_a_member() {
    let mut nats = NatsCluster::start();
    let urls = nats.urls();
    let hosts = urls.strip_prefix("nats://").expect("nats:// prefix");
    assert_eq!(hosts.split(',').count(), 3, "{urls}");
    // Every server is in one 3-member meta group and agrees on its leader.
    let leaders: Vec<String> = (0..3)
        .map(|i| {
            let (status, v) = nats.monitor(i, "/jsz").expect("jsz");
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["meta_cluster"]["cluster_size"], Value::from(3), "{v}");
            assert_eq!(
                v["meta_cluster"]["name"],
                Value::from("auditmem-test"),
                "{v}"
            );
            assert_eq!(v["config"]["max_memory"], Value::from(256u64 << 20), "{v}");
            v["meta_cluster"]["leader"]
                .as_str()
                .expect("leader")
                .to_string()
        })
        .collect();
    assert!(leaders.iter().all(|l| *l == leaders[0]), "{leaders:?}");
    for i in 0..3 {
        let (_, v) = nats.monitor(i, "/varz").expect("varz");
        assert_eq!(v["max_payload"], Value::from(8u64 << 20), "{v}");
        assert_eq!(v["server_name"], Value::from(format!("n{}", i + 1)), "{v}");
    }
    // The meta leader killed: the two left elect another and stay healthy.
    let leader = leaders[0]
        .strip_prefix('n')
        .and_then(|n| n.parse::<usize>().ok())
        .expect("a leader named nN")
        - 1;
    nats.kill(leader);
    assert!(
        nats.monitor(leader, "/healthz").is_err(),
        "a killed server answers"
    );
    nats.wait_ready();
    let other = (leader + 1) % 3;
    let (_, v) = nats.monitor(other, "/jsz").expect("jsz");
    assert_ne!(
        v["meta_cluster"]["leader"],
        Value::from(leaders[0].as_str()),
        "{v}"
    );
    // Back on its ports and store dir, it rejoins.
    nats.restart(leader);
    nats.wait_ready();
    assert!((0..3).all(|i| nats.is_running(i) && nats.not_ready(i).is_none()));
    assert_eq!(nats.urls(), urls);
}
