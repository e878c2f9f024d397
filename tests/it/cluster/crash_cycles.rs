//! Crash cycles on the cluster: eight writers (memory creates, updates, deletes, admin audit
//! ingestion and exports) spread over three API nodes on a 3-server NATS cluster; at a random
//! moment one NATS server, one API node, or one of each is SIGKILLed, then restarted on its
//! ports and directories. Every cycle checks, once every node has folded every acknowledged
//! write:
//!
//! - on every node, every acknowledged write reads back as acknowledged (a memory has the
//!   content and importance of its last acknowledged create or update, a deleted one is gone
//!   from the lists and 404 on GET, every acknowledged audit id is listed exactly once and its
//!   detail reads); a write in flight (unanswered at a kill, or answered 503 (5030) while the
//!   stream had no leader) either happened or did not, the same on every node, and whichever
//!   happened is adopted as the known state;
//! - no submission appears twice (each ingested entry's writer, cycle and number are listed
//!   once; each memory content exists once) and no two records share a seq (`GET /admin/v1/log`
//!   gives seqs 1..=head, each once);
//! - `auditmem verify --nats` exits 0, and `verify --data-dir` on a killed node's mirror as
//!   the kill left it;
//! - every node's projections answer as a fresh `auditmem replay` of one stopped node's mirror
//!   (the node stopped rotates): tenants, audit lists bounded by the cycle's end, audit details,
//!   memory lists and reads;
//! - every acknowledged export completes and downloads the same bytes from every node.
//!
//! Knobs: `AUDITMEM_CLUSTER_CYCLES` (default 10), `AUDITMEM_CLUSTER_SEED` (default: from the
//! clock; printed at the start and in the report). The seed fixes the faults, their moments and
//! every writer's choices; thread timing still varies. The report line goes to the process's
//! stderr: cycles, writes acknowledged, writes lost (asserted 0), seed, time.

use super::harness::{
    api_node, clean_report, env_u64, poll, verify_mirror, verify_nats, wait_same_head,
    without_cursor_snapshots, NatsCluster, MIN_POSITION, POSITION,
};
use crate::common::{
    all_audit_entries, answers, now_end_time, path_str, replayed_copy_with, Server, ADMIN_TOKEN,
};

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

const WRITERS: usize = 8;
const NODES: usize = 3;
/// The fault comes this long after the writers start (uniformly drawn).
const FAULT_AFTER_MS: std::ops::Range<u64> = 100..1500;
/// The writers keep going this long after the fault: the surviving nodes write through it.
const WRITE_THROUGH: Duration = Duration::from_millis(400);
const TYPES: [&str; 3] = ["rule", "fact", "context"];
const WORDS: [&str; 8] = [
    "coffee", "deadline", "Berlin", "allergy", "invoice", "Spanish", "weekend", "laptop",
];

#[derive(Clone, Debug, PartialEq)]
struct Mem {
    content: String,
    importance: f64,
}

#[derive(Clone, Debug)]
enum Known {
    Live(Mem),
    Deleted,
}

/// A write sent and not answered, or answered 503 (5030): it may or may not have happened.
#[derive(Clone, Debug)]
enum InFlight {
    Create(Mem),
    Update { id: String, old: Mem, new: Mem },
    Delete { id: String, old: Mem },
    Ingest,
    Export,
}

#[derive(Default)]
struct Tally {
    creates: u64,
    updates: u64,
    deletes: u64,
    ingests: u64,
    exports: u64,
}

impl Tally {
    fn total(&self) -> u64 {
        self.creates + self.updates + self.deletes + self.ingests + self.exports
    }
}

/// One writer's view of what it wrote: it alone touches its memories and waits for each answer
/// before the next write, so its last acknowledged write to a memory is the memory's last.
struct Writer {
    index: usize,
    rng: StdRng,
    seq: u64,
    mems: HashMap<String, Known>,
    live: Vec<String>,
    audit_ids: Vec<String>,
    exports: Vec<String>,
    inflight: Option<InFlight>,
    acked: Tally,
    /// The highest position this writer's writes were acknowledged at.
    last_pos: u64,
    /// Answers that were neither success, silence, 503 (5030) nor an export refused as in
    /// progress (a bug, asserted empty).
    errors: Vec<String>,
    /// Ids touched this cycle (read back by the replay comparison).
    touched: Vec<String>,
    /// Audit ids ingested this cycle.
    ingested: Vec<String>,
}

enum Outcome {
    Acked(Value, u64),
    /// No answer (the node is gone) or 503 (5030): the write is in flight.
    Uncertain,
    /// 409 (2203): another export of the tenant runs; nothing was written.
    ExportBusy,
    Refused(String),
}

fn send(
    http: &reqwest::blocking::Client,
    method: Method,
    url: String,
    bearer: &str,
    body: Option<Value>,
    min_position: u64,
) -> Outcome {
    let mut req = http
        .request(method, &url)
        .bearer_auth(bearer)
        .header(MIN_POSITION, min_position.to_string());
    if let Some(b) = body {
        req = req.json(&b);
    }
    let Ok(resp) = req.send() else {
        return Outcome::Uncertain;
    };
    let status = resp.status().as_u16();
    let pos = resp
        .headers()
        .get(POSITION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Ok(text) = resp.text() else {
        return Outcome::Uncertain;
    };
    match (status, serde_json::from_str::<Value>(&text), pos) {
        (200, Ok(v), Some(p)) if v["success"] == json!(true) => Outcome::Acked(v, p),
        (503, Ok(v), _) if v["code"] == json!(5030) => Outcome::Uncertain,
        (409, Ok(v), _) if v["code"] == json!(2203) => Outcome::ExportBusy,
        _ => Outcome::Refused(format!("{url}: {status} {text} (position {pos:?})")),
    }
}

impl Writer {
    fn new(index: usize, seed: u64) -> Writer {
        Writer {
            index,
            rng: StdRng::seed_from_u64(
                seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ),
            seq: 0,
            mems: HashMap::new(),
            live: Vec::new(),
            audit_ids: Vec::new(),
            exports: Vec::new(),
            inflight: None,
            acked: Tally::default(),
            last_pos: 0,
            errors: Vec::new(),
            touched: Vec::new(),
            ingested: Vec::new(),
        }
    }

    fn fresh_mem(&mut self, cycle: usize) -> Mem {
        self.seq += 1;
        let a = WORDS[self.rng.gen_range(0..WORDS.len())];
        let b = WORDS[self.rng.gen_range(0..WORDS.len())];
        Mem {
            content: format!(
                "writer {} cycle {cycle} note {}: remember the {a} and the {b}",
                self.index, self.seq
            ),
            importance: self.rng.gen_range(0..=20) as f64 / 20.0,
        }
    }

    fn set(&mut self, id: &str, known: Known) {
        let was_live = matches!(self.mems.get(id), Some(Known::Live(_)));
        let now_live = matches!(known, Known::Live(_));
        if was_live && !now_live {
            self.live.retain(|x| x != id);
        } else if !was_live && now_live {
            self.live.push(id.to_string());
        }
        self.mems.insert(id.to_string(), known);
    }

    /// Writes through `url` until `stop`, or until a write is left in flight.
    fn run(&mut self, url: &str, keys: &Keys, cycle: usize, stop: &AtomicBool) {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        while !stop.load(Ordering::Relaxed) {
            let roll = self.rng.gen_range(0..100);
            let pick = (!self.live.is_empty())
                .then(|| self.live[self.rng.gen_range(0..self.live.len())].clone());
            let op = match (roll, pick) {
                (0..=1, _) => InFlight::Export,
                (2..=19, _) => InFlight::Ingest,
                (20..=49, Some(id)) => {
                    let Some(Known::Live(old)) = self.mems.get(&id).cloned() else {
                        unreachable!("live ids are live")
                    };
                    let fresh = self.fresh_mem(cycle);
                    let new = match self.rng.gen_range(0..3) {
                        0 => Mem {
                            content: fresh.content,
                            importance: old.importance,
                        },
                        1 => Mem {
                            content: old.content.clone(),
                            importance: fresh.importance,
                        },
                        _ => fresh,
                    };
                    InFlight::Update { id, old, new }
                }
                (50..=64, Some(id)) => {
                    let Some(Known::Live(old)) = self.mems.get(&id).cloned() else {
                        unreachable!("live ids are live")
                    };
                    InFlight::Delete { id, old }
                }
                _ => InFlight::Create(self.fresh_mem(cycle)),
            };
            self.inflight = Some(op.clone());
            let min = self.last_pos;
            let outcome = match &op {
                InFlight::Create(m) => send(
                    &http,
                    Method::POST,
                    format!("{url}/v1/memories"),
                    &keys.mem_key,
                    Some(json!({
                        "content": m.content,
                        "importance": m.importance,
                        "memory_type": TYPES[self.rng.gen_range(0..TYPES.len())],
                    })),
                    min,
                ),
                InFlight::Update { id, old, new } => {
                    let mut body = serde_json::Map::new();
                    if new.content != old.content {
                        body.insert("content".into(), json!(new.content));
                    }
                    if new.importance != old.importance || new.content == old.content {
                        body.insert("importance".into(), json!(new.importance));
                    }
                    send(
                        &http,
                        Method::PATCH,
                        format!("{url}/v1/memories/{id}"),
                        &keys.mem_key,
                        Some(Value::Object(body)),
                        min,
                    )
                }
                InFlight::Delete { id, .. } => send(
                    &http,
                    Method::DELETE,
                    format!("{url}/v1/memories/{id}"),
                    &keys.mem_key,
                    None,
                    min,
                ),
                InFlight::Ingest => {
                    self.seq += 1;
                    let n = self.rng.gen_range(1..=3);
                    let entries: Vec<Value> = (0..n)
                        .map(|i| {
                            json!({
                                "tenant_id": keys.ingest_tenant,
                                "action": if i % 2 == 0 { "gateway.chat" } else { "rag.query" },
                                "http_status": 200,
                                "metadata": {"writer": self.index, "cycle": cycle, "n": self.seq, "i": i},
                            })
                        })
                        .collect();
                    send(
                        &http,
                        Method::POST,
                        format!("{url}/admin/v1/audit/logs"),
                        ADMIN_TOKEN,
                        Some(json!({ "entries": entries })),
                        min,
                    )
                }
                InFlight::Export => send(
                    &http,
                    Method::POST,
                    format!("{url}/v1/audit/logs/export"),
                    &keys.audit_key,
                    Some(json!({"format": "csv"})),
                    min,
                ),
            };
            match outcome {
                Outcome::Uncertain => return,
                Outcome::ExportBusy => self.inflight = None,
                Outcome::Refused(why) => {
                    self.errors.push(why);
                    return;
                }
                Outcome::Acked(v, pos) => {
                    self.inflight = None;
                    self.last_pos = self.last_pos.max(pos);
                    self.acknowledge(op, &v["data"]);
                }
            }
        }
    }

    fn acknowledge(&mut self, op: InFlight, data: &Value) {
        let answered = |data: &Value| Mem {
            content: data["content"].as_str().unwrap_or_default().to_string(),
            importance: data["importance"].as_f64().unwrap_or(-1.0),
        };
        match op {
            InFlight::Create(m) => {
                let id = data["id"].as_str().expect("created id").to_string();
                if answered(data) != m {
                    self.errors
                        .push(format!("create answered {data} for {m:?}"));
                }
                self.touched.push(id.clone());
                self.set(&id, Known::Live(m));
                self.acked.creates += 1;
            }
            InFlight::Update { id, new, .. } => {
                if answered(data) != new {
                    self.errors
                        .push(format!("update answered {data} for {new:?}"));
                }
                self.touched.push(id.clone());
                self.set(&id, Known::Live(new));
                self.acked.updates += 1;
            }
            InFlight::Delete { id, .. } => {
                self.touched.push(id.clone());
                self.set(&id, Known::Deleted);
                self.acked.deletes += 1;
            }
            InFlight::Ingest => {
                for id in data["ids"].as_array().expect("ids") {
                    let id = id.as_str().expect("id").to_string();
                    self.ingested.push(id.clone());
                    self.audit_ids.push(id);
                }
                self.acked.ingests += 1;
            }
            InFlight::Export => {
                self.exports
                    .push(data["export_id"].as_str().expect("export_id").to_string());
                self.acked.exports += 1;
            }
        }
    }
}

struct Keys {
    mem_key: String,
    audit_key: String,
    ingest_tenant: String,
}

/// Every live memory of the key's tenant, by id.
fn all_memories(s: &Server, key: &str) -> HashMap<String, Mem> {
    let mut out = HashMap::new();
    for page in 1.. {
        let (status, v) = s.get_served(&format!("/v1/memories?page_size=100&page={page}"), key);
        assert_eq!(status, 200, "{v}");
        let items = v["data"]["memories"].as_array().expect("memories").clone();
        for m in &items {
            let id = m["id"].as_str().expect("id").to_string();
            let mem = Mem {
                content: m["content"].as_str().expect("content").to_string(),
                importance: m["importance"].as_f64().expect("importance"),
            };
            assert!(
                out.insert(id.clone(), mem).is_none(),
                "memory {id} listed twice"
            );
        }
        if items.len() < 100 {
            break;
        }
    }
    out
}

/// Settles the writes in flight to what `s` shows (every node shows the same, checked after).
fn settle(s: &Server, keys: &Keys, writers: &mut [Writer]) -> Vec<String> {
    let mut lost = Vec::new();
    let listed = all_memories(s, &keys.mem_key);
    let by_content: HashMap<&str, &str> = listed
        .iter()
        .map(|(id, m)| (m.content.as_str(), id.as_str()))
        .collect();
    for w in writers.iter_mut() {
        match w.inflight.take() {
            Some(InFlight::Update { id, old, new }) => match listed.get(&id) {
                Some(got) if *got == old || *got == new => w.set(&id, Known::Live(got.clone())),
                got => lost.push(format!(
                    "memory {id}: update in flight from {old:?} to {new:?}, found {got:?}"
                )),
            },
            Some(InFlight::Delete { id, old }) => match listed.get(&id) {
                None => w.set(&id, Known::Deleted),
                Some(got) if *got == old => {}
                got => lost.push(format!(
                    "memory {id}: delete in flight of {old:?}, found {got:?}"
                )),
            },
            Some(InFlight::Create(m)) => {
                // Contents are unique: a memory with exactly this content is this create,
                // landed without its answer.
                if let Some(&id) = by_content.get(m.content.as_str()) {
                    if listed.get(id) == Some(&m) {
                        w.set(id, Known::Live(m));
                    } else {
                        lost.push(format!(
                            "memory {id}: create in flight of {m:?}, found {:?}",
                            listed.get(id)
                        ));
                    }
                }
            }
            // An ingestion in flight landed or not: the listing check below accepts either,
            // and an export in flight is either listed among the tenant's exports or not.
            Some(InFlight::Ingest) | Some(InFlight::Export) | None => {}
        }
    }
    lost
}

/// Checks every writer's acknowledged (and settled) writes on `s`; returns what is lost or
/// wrong.
fn check(s: &Server, keys: &Keys, writers: &[Writer]) -> Vec<String> {
    let mut lost = Vec::new();
    let listed = all_memories(s, &keys.mem_key);
    let mut known_ids: HashSet<&str> = HashSet::new();
    for w in writers {
        for (id, known) in &w.mems {
            known_ids.insert(id);
            match (known, listed.get(id)) {
                (Known::Live(want), Some(got)) if want == got => {}
                (Known::Live(want), got) => {
                    lost.push(format!("memory {id}: acknowledged {want:?}, found {got:?}"))
                }
                (Known::Deleted, None) => {}
                (Known::Deleted, Some(got)) => {
                    lost.push(format!("memory {id}: acknowledged deleted, found {got:?}"))
                }
            }
        }
        for id in &w.touched {
            if let Some(Known::Deleted) = w.mems.get(id) {
                let (status, v) = s.get_served(&format!("/v1/memories/{id}"), &keys.mem_key);
                if status != 404 {
                    lost.push(format!(
                        "memory {id}: acknowledged deleted, GET gives {status} {v}"
                    ));
                }
            }
        }
    }
    let mut contents = HashSet::new();
    for (id, m) in &listed {
        if !known_ids.contains(id.as_str()) {
            lost.push(format!("memory {id} ({:?}) was never written", m.content));
        }
        if !contents.insert(m.content.as_str()) {
            lost.push(format!("memory content {:?} stored twice", m.content));
        }
    }
    // Each acknowledged ingested entry listed once; no submission listed twice.
    let entries = all_audit_entries(s, &keys.audit_key);
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut submissions: HashSet<String> = HashSet::new();
    for e in &entries {
        let id = e["id"].as_str().expect("id");
        *ids.entry(id).or_default() += 1;
        let m = &e["metadata"];
        if !m.is_null() && !submissions.insert(m.to_string()) {
            lost.push(format!("submission {m} appears twice"));
        }
    }
    for (id, n) in &ids {
        if *n > 1 {
            lost.push(format!("audit entry {id} listed {n} times"));
        }
    }
    for w in writers {
        for id in &w.audit_ids {
            if !ids.contains_key(id.as_str()) {
                lost.push(format!("audit entry {id}: acknowledged, not listed"));
            }
        }
        for id in w.ingested.iter().take(2) {
            let (status, v) = s.get_served(&format!("/v1/audit/logs/{id}"), &keys.audit_key);
            if status != 200 || v["data"]["id"] != json!(id) {
                lost.push(format!(
                    "audit entry {id}: acknowledged, detail gives {status} {v}"
                ));
            }
        }
    }
    lost
}

/// The seqs `GET /admin/v1/log` gives are 1..=head, each once: no fork, no gap.
fn check_seqs(s: &Server) -> Result<u64, String> {
    let r = s
        .raw()
        .get(format!("{}/admin/v1/log?from=1", s.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .map_err(|e| e.to_string())?;
    let text = r.text().map_err(|e| e.to_string())?;
    let mut want = 1u64;
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        if v["seq"] != json!(want) {
            return Err(format!("record #{want} has seq {}", v["seq"]));
        }
        want += 1;
    }
    Ok(want - 1)
}

/// Every acknowledged export completes, with the same status and bytes on every node.
fn check_exports(nodes: &[Server], key: &str, exports: &[String]) -> Vec<String> {
    let mut wrong = Vec::new();
    for id in exports {
        let done = nodes[0].wait_export_status(key, id, "completed");
        let (status, _, _, bytes) = nodes[0].download_export(key, id);
        if status != 200 || blake3::hash(&bytes).to_hex().as_str() != done["file_blake3"] {
            wrong.push(format!(
                "export {id}: download {status}, {} bytes, status {done}",
                bytes.len()
            ));
            continue;
        }
        for (i, n) in nodes.iter().enumerate().skip(1) {
            // The completion is written after the heads were compared (the export finishes in
            // the background): each node is given the time to fold it, as node 0 was.
            let v = n.wait_export_status(key, id, "completed");
            if v["file_blake3"] != done["file_blake3"] {
                wrong.push(format!("export {id}: node {i} gives {v}"));
            }
            let (s, _, _, b) = n.download_cluster_export(key, id);
            if s != 200 || b != bytes {
                wrong.push(format!(
                    "export {id}: node {i} downloads {s}, {} bytes",
                    b.len()
                ));
            }
        }
    }
    wrong
}

#[test]
fn acknowledged_writes_survive_repeated_sigkill_of_nats_servers_and_api_nodes() {
    let started = Instant::now();
    let cycles = env_u64("AUDITMEM_CLUSTER_CYCLES").unwrap_or(10).max(1) as usize;
    let seed = crate::common::seed_or_clock("AUDITMEM_CLUSTER_SEED");
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "cluster crash_cycles: seed {seed} (AUDITMEM_CLUSTER_SEED={seed} repeats this workload), {cycles} cycles"
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let mut nats = NatsCluster::start();
    // Exports are written at will: no quota may refuse one.
    let quotas = [
        "--export-max-per-hour",
        "0",
        "--export-max-files",
        "0",
        "--export-max-bytes-mb",
        "0",
    ];
    let mut nodes: Vec<Server> = (0..NODES).map(|_| api_node(&nats, &quotas)).collect();
    let (_, mem_key) = nodes[0].tenant_with_key("business");
    let (ingest_tenant, audit_key) = nodes[0].tenant_with_key("business");
    let keys = Arc::new(Keys {
        mem_key: mem_key.clone(),
        audit_key: audit_key.clone(),
        ingest_tenant,
    });
    let all_keys = [mem_key.clone(), audit_key.clone()];
    let (first_head, _) = nodes[0].head();
    {
        let refs: Vec<&Server> = nodes.iter().collect();
        wait_same_head(&refs, first_head, Duration::from_secs(30));
    }
    let mut writers: Vec<Writer> = (0..WRITERS).map(|i| Writer::new(i, seed)).collect();
    let mut in_flight_total = 0u64;
    let mut faults = [0u64; 3];
    let tmp = tempfile::tempdir().expect("tempdir");

    for cycle in 1..=cycles {
        let cycle_started = Instant::now();
        let before = writers.iter().map(|w| w.acked.total()).sum::<u64>();
        for w in &mut writers {
            w.touched.clear();
            w.ingested.clear();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let fault_after = Duration::from_millis(rng.gen_range(FAULT_AFTER_MS));
        // 0: a NATS server, 1: an API node, 2: one of each.
        let fault = rng.gen_range(0..3usize);
        let nats_victim = rng.gen_range(0..nats.len());
        let node_victim = rng.gen_range(0..NODES);
        faults[fault] += 1;
        let handles: Vec<_> = writers
            .drain(..)
            .map(|mut w| {
                // Each cycle a writer writes through another node than the cycle before.
                let url = nodes[(w.index + cycle) % NODES].url.clone();
                let (keys, stop) = (keys.clone(), stop.clone());
                std::thread::spawn(move || {
                    w.run(&url, &keys, cycle, &stop);
                    w
                })
            })
            .collect();
        std::thread::sleep(fault_after);
        if fault != 1 {
            nats.kill(nats_victim);
        }
        if fault != 0 {
            nodes[node_victim].kill();
        }
        std::thread::sleep(WRITE_THROUGH);
        stop.store(true, Ordering::Relaxed);
        writers = handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect();
        let errors: Vec<&String> = writers.iter().flat_map(|w| &w.errors).collect();
        assert!(
            errors.is_empty(),
            "seed {seed} cycle {cycle}: unexpected answers: {errors:?}"
        );
        let in_flight = writers.iter().filter(|w| w.inflight.is_some()).count() as u64;
        in_flight_total += in_flight;
        let end = now_end_time();

        // The killed node's mirror as the kill left it; then everything back.
        if fault != 0 {
            let (code, out, err) = verify_mirror(&nodes[node_victim].data_dir);
            assert_eq!(
                code, 0,
                "seed {seed} cycle {cycle}: verify of node {node_victim}'s mirror after the kill\n{out}{err}"
            );
        }
        if fault != 1 {
            nats.restart(nats_victim);
            nats.wait_ready();
        }
        if fault != 0 {
            nodes[node_victim].spawn();
        }
        let last = writers.iter().map(|w| w.last_pos).max().unwrap_or(0);
        let head = {
            let refs: Vec<&Server> = nodes.iter().collect();
            wait_same_head(&refs, last, Duration::from_secs(60))
        };

        // Writes in flight settle to what node 0 shows; every node must show exactly that.
        let mut lost = settle(&nodes[0], &keys, &mut writers);
        for (i, n) in nodes.iter().enumerate() {
            lost.extend(
                check(n, &keys, &writers)
                    .into_iter()
                    .map(|l| format!("node {i}: {l}")),
            );
            if let Err(e) = check_seqs(n) {
                lost.push(format!("node {i}: {e}"));
            }
        }
        let exports: Vec<String> = writers.iter().flat_map(|w| w.exports.clone()).collect();
        lost.extend(check_exports(&nodes, &audit_key, &exports));
        assert!(
            lost.is_empty(),
            "seed {seed} cycle {cycle}: {} acknowledged writes lost or wrong, e.g. {:#?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        let (code, out, err) = verify_nats(&nats, None);
        assert_eq!(
            code, 0,
            "seed {seed} cycle {cycle}: verify --nats\n{out}{err}"
        );
        let report = clean_report(&out);
        assert!(report["head_seq"].as_u64() >= Some(head), "{report}");

        // Every node's projections against a fresh replay of one stopped node's mirror. The
        // checks' own reads may have been answered from a node's outbox (a node that found the
        // cluster down defers until a publish succeeds again): the log settles first, so that
        // the stopped node's copy holds every entry the live nodes will list.
        let head = {
            let refs: Vec<&Server> = nodes.iter().collect();
            wait_same_head(&refs, head, Duration::from_secs(60))
        };
        let k = cycle % NODES;
        nodes[k].stop();
        let replayed = tmp.path().join(format!("replayed-{cycle}"));
        // The node's keys are the cluster's: the copy is replayed and served with its store.
        let urls = nats.urls();
        let keys = [
            "--log",
            urls.as_str(),
            "--master-key-file",
            path_str(nats.kek()),
        ];
        replayed_copy_with(&nodes[k].data_dir, &replayed, &keys);
        nodes[k].spawn();
        let audit_ids: Vec<String> = writers
            .iter()
            .flat_map(|w| w.ingested.iter().take(2).cloned())
            .collect();
        let memory_ids: Vec<String> = writers
            .iter()
            .flat_map(|w| w.touched.iter().take(3).cloned())
            .collect();
        // The rebuilt copy is served alone, from its own sled log.
        let r = Server::start_on_with(
            &replayed,
            &[
                "--log",
                "sled",
                "--key-store",
                urls.as_str(),
                "--master-key-file",
                path_str(nats.kek()),
            ],
        );
        let rebuilt =
            without_cursor_snapshots(&answers(&r, &all_keys, &audit_ids, &memory_ids, &end));
        drop(r);
        let _ = std::fs::remove_dir_all(&replayed);
        poll(
            Duration::from_secs(60),
            "the restarted node caught up",
            || {
                let (h, _) = nodes[k].head();
                if h >= head {
                    Ok(())
                } else {
                    Err(format!("head {h} < {head}"))
                }
            },
        );
        for (i, n) in nodes.iter().enumerate() {
            let live =
                without_cursor_snapshots(&answers(n, &all_keys, &audit_ids, &memory_ids, &end));
            // Element 0 is the head: the stream has moved on with the reads' own entries.
            assert_eq!(live.len(), rebuilt.len(), "not the same reads");
            for (j, (x, y)) in rebuilt.iter().zip(&live).enumerate().skip(1) {
                assert_eq!(
                    x, y,
                    "seed {seed} cycle {cycle}: read #{j} on node {i} differs from node {k}'s replayed mirror"
                );
            }
        }

        let after = writers.iter().map(|w| w.acked.total()).sum::<u64>();
        let _ = writeln!(
            stderr,
            "cluster crash_cycles: cycle {cycle}: {} after {} ms, {} writes acknowledged, {in_flight} in flight, {} ms",
            match fault {
                0 => format!("killed nats n{}", nats_victim + 1),
                1 => format!("killed api node {node_victim}"),
                _ => format!("killed nats n{} and api node {node_victim}", nats_victim + 1),
            },
            fault_after.as_millis(),
            after - before,
            cycle_started.elapsed().as_millis()
        );
    }

    for (i, n) in nodes.iter_mut().enumerate() {
        n.stop();
        let (code, out, err) = verify_mirror(&n.data_dir);
        assert_eq!(
            code, 0,
            "seed {seed}: node {i}'s mirror after the last stop\n{out}{err}"
        );
        clean_report(&out);
    }
    let sum = |f: fn(&Tally) -> u64| writers.iter().map(|w| f(&w.acked)).sum::<u64>();
    let acked = sum(Tally::total);
    let _ = writeln!(
        stderr,
        "cluster crash_cycles: {cycles} cycles ({} nats kills, {} api node kills, {} of both), {acked} writes acknowledged ({} creates, {} updates, {} deletes, {} audit ingestions, {} exports), 0 writes lost, {in_flight_total} in flight at a fault, seed {seed}, {:.1} s",
        faults[0],
        faults[1],
        faults[2],
        sum(|t| t.creates),
        sum(|t| t.updates),
        sum(|t| t.deletes),
        sum(|t| t.ingests),
        sum(|t| t.exports),
        started.elapsed().as_secs_f64()
    );
    // The run proved something only if the writers got going before the faults.
    assert!(
        acked >= cycles as u64 * 5,
        "only {acked} writes acknowledged in {cycles} cycles"
    );
    assert!(
        sum(|t| t.updates) > 0 && sum(|t| t.deletes) > 0,
        "the mix lacked updates or deletes"
    );
}
