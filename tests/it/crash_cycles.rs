//! Crash cycles: eight concurrent writers (memory creates, updates, deletes and admin audit
//! ingestion) against the real server, SIGKILLed at a random moment, restarted on the same data
//! dir, N times. Every cycle checks:
//!
//! - every acknowledged write reads back as acknowledged: a memory has the content and
//!   importance of its last acknowledged create or update, a deleted one is gone (absent from
//!   the lists, 404 on GET), every acknowledged ingested audit id is listed and readable;
//! - writes in flight at the kill (sent, never answered: at most one per writer) may or may not
//!   have landed: the memory shows either the old or the new value, an unacknowledged create is
//!   either absent or present with exactly the content sent, and whichever happened is adopted
//!   as the known state for the next cycles;
//! - `auditmem verify --data-dir` exits 0 on the directory exactly as the kill left it (before
//!   the restart: the server holds sled's lock), and once more after a clean stop at the end;
//! - the restarted server's projections (its persisted checkpoints plus catch-up) answer the
//!   same as a server on a copy of the directory rebuilt by `auditmem replay`: head, tenants,
//!   audit lists bounded by the kill time, audit details, memory lists and memory reads. This
//!   comparison runs every cycle by default; `AUDITMEM_CRASH_REPLAY_EVERY=k` runs it every k-th
//!   cycle and always at the last one.
//!
//! Knobs: `AUDITMEM_CRASH_CYCLES` (default 20; 200 on demand), `AUDITMEM_CRASH_SEED` (default:
//! from the clock; printed at the start and in the report). The seed fixes the kill delays and
//! every writer's choices; thread timing still varies, so a seed reproduces the workload, not
//! the exact interleaving.
//!
//! The report line goes straight to the process's stderr, which the test harness does not
//! capture, so it shows in every run: cycles, writes acknowledged, writes lost (asserted 0),
//! seed, time.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    all_audit_ids, answers, assert_same_answers, cli, now_end_time, path_str, replayed_copy,
    Server, ADMIN_TOKEN,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const WRITERS: usize = 8;
/// The kill comes this long after the writers start (uniformly drawn).
const KILL_AFTER_MS: std::ops::Range<u64> = 100..1500;
const TYPES: [&str; 3] = ["rule", "fact", "context"];
const WORDS: [&str; 12] = [
    "coffee",
    "deadline",
    "Berlin",
    "allergy",
    "invoice",
    "Spanish",
    "weekend",
    "laptop",
    "peanuts",
    "meeting",
    "password policy",
    "quarterly report",
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

/// A write sent and not (yet) answered.
#[derive(Clone, Debug)]
enum InFlight {
    Create(Mem),
    Update { id: String, old: Mem, new: Mem },
    Delete { id: String, old: Mem },
    Ingest,
}

#[derive(Default)]
struct Tally {
    creates: u64,
    updates: u64,
    deletes: u64,
    ingests: u64,
}

impl Tally {
    fn total(&self) -> u64 {
        self.creates + self.updates + self.deletes + self.ingests
    }
}

/// One writer's view of what it wrote: it alone touches its memories, and it waits for each
/// answer before the next write, so its last acknowledged write to a memory is the memory's
/// last write.
struct Writer {
    index: usize,
    rng: StdRng,
    seq: u64,
    mems: HashMap<String, Known>,
    live: Vec<String>,
    audit_ids: Vec<String>,
    inflight: Option<InFlight>,
    acked: Tally,
    /// Answers that were neither success nor silence (a bug, asserted empty).
    errors: Vec<String>,
    /// Ids touched this cycle (read back by the replay comparison).
    touched: Vec<String>,
    /// Audit ids ingested this cycle.
    ingested: Vec<String>,
}

enum Outcome {
    Acked(Value),
    /// No answer: the server is gone, the write is in flight.
    Silent,
    Refused(String),
}

fn send(
    http: &reqwest::blocking::Client,
    method: reqwest::Method,
    url: String,
    bearer: &str,
    body: Option<Value>,
) -> Outcome {
    let mut req = http.request(method, &url).bearer_auth(bearer);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let Ok(resp) = req.send() else {
        return Outcome::Silent;
    };
    let status = resp.status().as_u16();
    let Ok(text) = resp.text() else {
        return Outcome::Silent;
    };
    match (status, serde_json::from_str::<Value>(&text)) {
        (200, Ok(v)) if v["success"] == json!(true) => Outcome::Acked(v),
        _ => Outcome::Refused(format!("{url}: {status} {text}")),
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
            inflight: None,
            acked: Tally::default(),
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

    /// Writes until the server stops answering or `stop` is set.
    fn run(
        &mut self,
        url: &str,
        mem_key: &str,
        ingest_tenant: &str,
        cycle: usize,
        stop: &AtomicBool,
    ) {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        while !stop.load(Ordering::Relaxed) {
            let roll = self.rng.gen_range(0..100);
            let pick = (!self.live.is_empty())
                .then(|| self.live[self.rng.gen_range(0..self.live.len())].clone());
            let op = match (roll, pick) {
                (0..=19, _) => InFlight::Ingest,
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
            let outcome = match &op {
                InFlight::Create(m) => send(
                    &http,
                    reqwest::Method::POST,
                    format!("{url}/v1/memories"),
                    mem_key,
                    Some(json!({
                        "content": m.content,
                        "importance": m.importance,
                        "memory_type": TYPES[self.rng.gen_range(0..TYPES.len())],
                    })),
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
                        reqwest::Method::PATCH,
                        format!("{url}/v1/memories/{id}"),
                        mem_key,
                        Some(Value::Object(body)),
                    )
                }
                InFlight::Delete { id, .. } => send(
                    &http,
                    reqwest::Method::DELETE,
                    format!("{url}/v1/memories/{id}"),
                    mem_key,
                    None,
                ),
                InFlight::Ingest => {
                    self.seq += 1;
                    let n = self.rng.gen_range(1..=3);
                    let entries: Vec<Value> = (0..n)
                        .map(|i| {
                            json!({
                                "tenant_id": ingest_tenant,
                                "action": if i % 2 == 0 { "gateway.chat" } else { "rag.query" },
                                "http_status": 200,
                                "metadata": {"writer": self.index, "cycle": cycle, "n": self.seq, "i": i},
                            })
                        })
                        .collect();
                    send(
                        &http,
                        reqwest::Method::POST,
                        format!("{url}/admin/v1/audit/logs"),
                        ADMIN_TOKEN,
                        Some(json!({ "entries": entries })),
                    )
                }
            };
            match outcome {
                Outcome::Silent => return,
                Outcome::Refused(why) => {
                    self.errors.push(why);
                    return;
                }
                Outcome::Acked(v) => {
                    self.inflight = None;
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
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, got '{v}'"))
    })
}

/// Every live memory of the key's tenant, by id: (content, importance).
fn all_memories(s: &Server, key: &str) -> HashMap<String, Mem> {
    let mut out = HashMap::new();
    for page in 1.. {
        let (status, v) = s.get(&format!("/v1/memories?page_size=100&page={page}"), key);
        assert_eq!(status, 200, "{v}");
        let items = v["data"]["memories"].as_array().expect("memories").clone();
        for m in &items {
            out.insert(
                m["id"].as_str().expect("id").to_string(),
                Mem {
                    content: m["content"].as_str().expect("content").to_string(),
                    importance: m["importance"].as_f64().expect("importance"),
                },
            );
        }
        if items.len() < 100 {
            break;
        }
    }
    out
}

/// Checks every writer's acknowledged writes on the restarted server, settles the writes that
/// were in flight to what the server shows, and returns the descriptions of lost writes.
fn check_and_settle(
    s: &Server,
    mem_key: &str,
    audit_key: &str,
    writers: &mut [Writer],
) -> Vec<String> {
    let mut lost = Vec::new();
    let listed = all_memories(s, mem_key);
    let mut unclaimed: HashMap<&str, &str> = listed
        .iter()
        .map(|(id, m)| (m.content.as_str(), id.as_str()))
        .collect();
    for w in writers.iter() {
        for id in w.mems.keys() {
            if let Some(m) = listed.get(id) {
                unclaimed.remove(m.content.as_str());
            }
        }
    }
    for w in writers.iter_mut() {
        let inflight = w.inflight.take();
        let uncertain = match &inflight {
            Some(InFlight::Update { id, .. }) | Some(InFlight::Delete { id, .. }) => {
                Some(id.clone())
            }
            _ => None,
        };
        for (id, known) in &w.mems {
            if Some(id) == uncertain.as_ref() {
                continue;
            }
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
        // Deleted this cycle: GET says 404 too, not only the lists.
        for id in &w.touched {
            if let Some(Known::Deleted) = w.mems.get(id) {
                if Some(id) != uncertain.as_ref() {
                    let (status, v) = s.get(&format!("/v1/memories/{id}"), mem_key);
                    if status != 404 {
                        lost.push(format!(
                            "memory {id}: acknowledged deleted, GET gives {status} {v}"
                        ));
                    }
                }
            }
        }
        match inflight {
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
                // Contents are unique, so a memory nobody acknowledged with exactly this content
                // is this create, landed without its answer.
                if let Some(id) = unclaimed.remove(m.content.as_str()) {
                    match listed.get(id) {
                        Some(got) if *got == m => w.set(id, Known::Live(m)),
                        got => lost.push(format!(
                            "memory {id}: create in flight of {m:?}, found {got:?}"
                        )),
                    }
                }
            }
            Some(InFlight::Ingest) | None => {}
        }
    }
    // Anything else listed was never written by anyone.
    for (content, id) in unclaimed {
        lost.push(format!("memory {id} ({content:?}) was never written"));
    }
    let audit = all_audit_ids(s, audit_key);
    for w in writers.iter() {
        for id in &w.audit_ids {
            if !audit.contains(id) {
                lost.push(format!("audit entry {id}: acknowledged, not listed"));
            }
        }
        for id in w.ingested.iter().take(3) {
            let (status, v) = s.get(&format!("/v1/audit/logs/{id}"), audit_key);
            if status != 200 || v["data"]["id"] != json!(id) {
                lost.push(format!(
                    "audit entry {id}: acknowledged, detail gives {status} {v}"
                ));
            }
        }
    }
    lost
}

#[test]
fn acknowledged_writes_survive_repeated_sigkill() {
    let started = Instant::now();
    let cycles = env_u64("AUDITMEM_CRASH_CYCLES").unwrap_or(20).max(1) as usize;
    let replay_every = env_u64("AUDITMEM_CRASH_REPLAY_EVERY").unwrap_or(1).max(1) as usize;
    let seed = common::seed_or_clock("AUDITMEM_CRASH_SEED");
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "crash_cycles: seed {seed} (AUDITMEM_CRASH_SEED={seed} repeats this workload), {cycles} cycles"
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let mut s = Server::start();
    let (_, mem_key) = s.tenant_with_key("business");
    let (ingest_tenant, audit_key) = s.tenant_with_key("business");
    let keys = [mem_key.clone(), audit_key.clone()];
    let mut writers: Vec<Writer> = (0..WRITERS).map(|i| Writer::new(i, seed)).collect();
    let mut in_flight_total = 0u64;
    let mut compared = 0usize;
    let tmp = tempfile::tempdir().expect("tempdir");

    for cycle in 1..=cycles {
        let cycle_started = Instant::now();
        let before = writers.iter().map(|w| w.acked.total()).sum::<u64>();
        for w in &mut writers {
            w.touched.clear();
            w.ingested.clear();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let kill_after = Duration::from_millis(rng.gen_range(KILL_AFTER_MS));
        let handles: Vec<_> = writers
            .drain(..)
            .map(|mut w| {
                let (url, key, tenant, stop) = (
                    s.url.clone(),
                    mem_key.clone(),
                    ingest_tenant.clone(),
                    stop.clone(),
                );
                std::thread::spawn(move || {
                    w.run(&url, &key, &tenant, cycle, &stop);
                    w
                })
            })
            .collect();
        std::thread::sleep(kill_after);
        s.kill();
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

        // The chain as the kill left it.
        let (code, out, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
        assert_eq!(
            code, 0,
            "seed {seed} cycle {cycle}: verify after the kill\n{out}{err}"
        );

        let compare = cycle % replay_every == 0 || cycle == cycles;
        let replayed = tmp.path().join(format!("replayed-{cycle}"));
        if compare {
            replayed_copy(&s.data_dir, &replayed);
        }
        s.spawn();
        if compare {
            let audit_ids: Vec<String> = writers
                .iter()
                .flat_map(|w| w.ingested.iter().take(2).cloned())
                .collect();
            let memory_ids: Vec<String> = writers
                .iter()
                .flat_map(|w| w.touched.iter().take(3).cloned())
                .collect();
            let restarted = answers(&s, &keys, &audit_ids, &memory_ids, &end);
            let r = Server::start_on(&replayed);
            let rebuilt = answers(&r, &keys, &audit_ids, &memory_ids, &end);
            drop(r);
            assert_same_answers(&restarted, &rebuilt);
            let _ = std::fs::remove_dir_all(&replayed);
            compared += 1;
        }

        let lost = check_and_settle(&s, &mem_key, &audit_key, &mut writers);
        assert!(
            lost.is_empty(),
            "seed {seed} cycle {cycle}: {} acknowledged writes lost or wrong, e.g. {:#?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        let after = writers.iter().map(|w| w.acked.total()).sum::<u64>();
        let _ = writeln!(
            stderr,
            "crash_cycles: cycle {cycle}: killed after {} ms, {} writes acknowledged, {in_flight} in flight, {} ms",
            kill_after.as_millis(),
            after - before,
            cycle_started.elapsed().as_millis()
        );
    }

    s.stop();
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
    assert_eq!(
        code, 0,
        "seed {seed}: verify after the last clean stop\n{out}{err}"
    );

    let sum = |f: fn(&Tally) -> u64| writers.iter().map(|w| f(&w.acked)).sum::<u64>();
    let acked = sum(Tally::total);
    let _ = writeln!(
        stderr,
        "crash_cycles: {cycles} cycles, {acked} writes acknowledged ({} creates, {} updates, {} deletes, {} audit ingestions), 0 writes lost, {in_flight_total} in flight at a kill, replay compared at {compared} cycles, seed {seed}, {:.1} s",
        sum(|t| t.creates),
        sum(|t| t.updates),
        sum(|t| t.deletes),
        sum(|t| t.ingests),
        started.elapsed().as_secs_f64()
    );
    // The run proved something only if the writers got going before the kills.
    assert!(
        acked >= cycles as u64 * 5,
        "only {acked} writes acknowledged in {cycles} cycles"
    );
    assert!(
        sum(|t| t.updates) > 0 && sum(|t| t.deletes) > 0,
        "the mix lacked updates or deletes"
    );
}
