//! An erasure interrupted by SIGKILL is, once the server is restarted on the same data dir,
//! complete or absent, never half applied.
//!
//! Each cycle gives a new user `MEMORIES` memories (each sealed under its own key and the
//! user's) and `INGESTED` audit entries scoped to the user, each holding the cycle's secret;
//! then sends `POST /v1/erasures` (alternately naming the memories, hundreds of keys destroyed
//! in one batch by the shredder thread, and the user, one key) and SIGKILLs the server at one of
//! several points: at once (before the decision or among the first destroys), while the keys
//! are being destroyed (seen from their files disappearing), after a random delay, or right
//! after the answer. On restart:
//!
//! - the erasure is in the log (its `SubjectsErased` event, and its audit entry) and then
//!   every key it named is gone, every memory it erased answers 404 with an erased history,
//!   every audit entry that showed one (and, for a user, every entry of the user) reads
//!   erased; or it is not, and then no key of the user is gone and every memory and entry
//!   reads exactly as written;
//! - the same erasure sent again is answered 201, and then everything reads erased and no file
//!   of the data dir holds the secret (the user id, which stays clear, is found: the scan can
//!   find);
//! - bob, another user, is intact throughout.
//!
//! Knobs: `AUDITMEM_ERASURE_CRASH_CYCLES` (default 4), `AUDITMEM_ERASURE_CRASH_SEED` (default:
//! from the clock). The report line (each cycle's erasure, kill point, keys gone at the kill,
//! and whether the erasure was in the log) goes to stderr. `verify --data-dir` passes on the
//! directory as each kill left it.

use crate::cluster::harness::{env_u64, poll};
use crate::common::{self, assert_error, cli, path_str, Server};
use crate::forget;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// Memories of each cycle's user: one key each, destroyed together in one batch.
const MEMORIES: usize = 200;
/// Audit entries of each cycle's user, ingested.
const INGESTED: usize = 500;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Memories,
    User,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum KillAt {
    /// 0-30 ms after the request is sent: before it is decided or among its first keys'
    /// destroys (deciding and appending take a few milliseconds).
    Early,
    /// While the keys are destroyed: once one of the user's key files is gone, after 0-300 ms.
    Destroying,
    /// 0-3000 ms (memories) or 0-300 ms (a user) after the request is sent.
    Random,
    /// Once the receipt is answered.
    Answered,
}

/// One cycle's user and what was written for it.
struct User {
    id: String,
    secret: String,
    /// The memories, with their contents.
    memories: Vec<(String, String)>,
    /// The ingested entries and the batch creates' entries.
    ingested: Vec<String>,
    batches: Vec<String>,
    /// The key files made for the user (its memories' keys and its own).
    key_files: BTreeSet<String>,
}

impl User {
    /// Strings of the user's secret: the whole and two distinctive parts.
    fn needles(&self) -> Vec<&str> {
        let n = self.secret.len();
        vec![
            self.secret.as_str(),
            &self.secret[..n - 3],
            &self.secret[3..],
        ]
    }
}

fn key_files(data_dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(data_dir.join("keys").join("data"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn batch_entries(s: &Server, key: &str) -> BTreeSet<String> {
    let (status, v) = s.get(
        "/v1/audit/logs?action=memory.batch_create&page_size=100",
        key,
    );
    assert_eq!(status, 200, "{v}");
    forget::ids_of(&v["data"]["logs"])
}

/// Writes cycle `c`'s user: its memories in batches of 100, its ingested entries.
fn make_user(s: &Server, tenant: &str, key: &str, c: usize) -> User {
    let id = format!("crash-user-{c}");
    let secret = format!("SSN-078-05-{}", 3100 + c);
    // Read first: the read's entry is sealed under the tenant's key, made at the first.
    let batches_before = batch_entries(s, key);
    let keys_before = key_files(&s.data_dir);
    let mut memories = Vec::new();
    for chunk in 0..MEMORIES / 100 {
        let items: Vec<Value> = (0..100)
            .map(|j| {
                let n = chunk * 100 + j;
                json!({"content": format!("Note {n} of {id}: the badge number is {secret}"), "memory_type": "fact", "user_id": id})
            })
            .collect();
        let (status, v) = s.post("/v1/memories/batch", key, json!({ "memories": items }));
        assert_eq!(status, 200, "{v}");
        for m in v["data"]["memories"].as_array().expect("memories") {
            memories.push((
                m["id"].as_str().expect("id").to_string(),
                m["content"].as_str().expect("content").to_string(),
            ));
        }
    }
    let entries: Vec<Value> = (0..INGESTED)
        .map(|n| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "user_agent": format!("phone of {secret}"), "request_body": {"user_id": id, "query": format!("question {n} about {secret}")}}))
        .collect();
    let ingested = common::ingest(s, entries);
    let batches = batch_entries(s, key)
        .difference(&batches_before)
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(batches.len(), MEMORIES / 100);
    let key_files: BTreeSet<String> = key_files(&s.data_dir)
        .difference(&keys_before)
        .cloned()
        .collect();
    // A key per memory and the user's.
    assert_eq!(key_files.len(), MEMORIES + 1, "{key_files:?}");
    User {
        id,
        secret,
        memories,
        ingested,
        batches,
        key_files,
    }
}

fn erasure_body(u: &User, target: Target) -> Value {
    match target {
        Target::Memories => {
            json!({"memory_ids": u.memories.iter().map(|(id, _)| id).collect::<Vec<_>>()})
        }
        Target::User => json!({ "user_id": u.id }),
    }
}

/// The entry `id`'s detail: erased (its personal fields null) or as written (holding the
/// secret).
fn check_entry(s: &Server, key: &str, id: &str, secret: &str, erased: bool) {
    let (status, d) = s.get(&format!("/v1/audit/logs/{id}"), key);
    assert_eq!(status, 200, "{d}");
    let d = &d["data"];
    if erased {
        assert_eq!(d["erased"], json!(true), "{d}");
        for f in ["request_body", "response_body", "user_agent", "ip_address"] {
            assert_eq!(d[f], Value::Null, "{f}: {d}");
        }
        assert!(!d.to_string().contains(secret), "{d}");
    } else {
        assert_eq!(d.get("erased"), None, "{d}");
        assert!(d["request_body"].to_string().contains(secret), "{d}");
    }
}

/// Every memory of `u` and every entry that showed one reads erased (`erased`) or as written;
/// so do the user's own entries when the erasure named the user.
fn check_user(s: &Server, key: &str, u: &User, target: Target, erased: bool) {
    for (id, content) in &u.memories {
        let (status, m) = s.get(&format!("/v1/memories/{id}"), key);
        let (hs, h) = s.get(&format!("/v1/memories/{id}/history"), key);
        assert_eq!(hs, 200, "{h}");
        let first = &h["data"]["versions"][0];
        if erased {
            assert_error(&(status, m), 404, 4040);
            assert_eq!(h["data"]["erased"], json!(true), "{h}");
            assert_eq!(first["content"], Value::Null, "{h}");
        } else {
            assert_eq!(status, 200, "{m}");
            assert_eq!(m["data"]["content"], json!(content), "{m}");
            assert_eq!(h["data"].get("erased"), None, "{h}");
            assert_eq!(first["content"], json!(content), "{h}");
        }
    }
    let (_, v) = s.get(&format!("/v1/memories?user_id={}&page_size=1", u.id), key);
    let live = if erased { 0 } else { MEMORIES };
    assert_eq!(v["data"]["total"], json!(live), "{v}");
    for id in &u.batches {
        check_entry(s, key, id, &u.secret, erased);
    }
    for id in &u.ingested {
        check_entry(s, key, id, &u.secret, erased && target == Target::User);
    }
}

#[test]
fn an_erasure_killed_at_any_point_is_complete_or_absent_after_restart() {
    let started = Instant::now();
    let cycles = env_u64("AUDITMEM_ERASURE_CRASH_CYCLES").unwrap_or(4).max(1) as usize;
    let seed = common::seed_or_clock("AUDITMEM_ERASURE_CRASH_SEED");
    let _ = writeln!(
        std::io::stderr(),
        "erasure_crash: seed {seed} (AUDITMEM_ERASURE_CRASH_SEED={seed} repeats it), {cycles} cycles"
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = Server::start();
    let (tenant, key, _) = forget::tenant_with_erase(&s);
    let (status, bob) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "The user's locker code is 5512", "memory_type": "fact", "user_id": "bob"}),
    );
    assert_eq!(status, 200, "{bob}");
    let bob = bob["data"]["id"].as_str().expect("id").to_string();

    let mut report = Vec::new();
    // The erasures' audit entries answered 201 so far.
    let mut recorded = 0;
    for c in 0..cycles {
        let at = [
            KillAt::Early,
            KillAt::Destroying,
            KillAt::Random,
            KillAt::Answered,
        ][c % 4];
        // The memories' hundreds of keys where there is time to kill among them; the others
        // swap targets every four cycles.
        let flip = (c / 4) % 2 == 1;
        let target = match at {
            KillAt::Destroying => Target::Memories,
            KillAt::Early if !flip => Target::Memories,
            KillAt::Random | KillAt::Answered if flip => Target::Memories,
            _ => Target::User,
        };
        let u = make_user(&s, &tenant, &key, c);
        let head = s.head().0;
        let body = erasure_body(&u, target);

        // The erasure, sent from a thread of its own; the kill comes from here.
        let client = s.raw().clone();
        let url = format!("{}/v1/erasures", s.url);
        let bearer = key.clone();
        let sent = body.clone();
        let request = std::thread::spawn(move || {
            client
                .post(url)
                .bearer_auth(bearer)
                .json(&sent)
                .send()
                .map(|r| r.status().as_u16())
        });
        match at {
            KillAt::Early => std::thread::sleep(Duration::from_millis(rng.gen_range(0..30))),
            KillAt::Destroying => {
                poll(Duration::from_secs(60), "a key file destroyed", || {
                    let left = key_files(&s.data_dir).intersection(&u.key_files).count();
                    if left < u.key_files.len() || request.is_finished() {
                        Ok(())
                    } else {
                        Err(format!("{left} key files"))
                    }
                });
                std::thread::sleep(Duration::from_millis(rng.gen_range(0..300)));
            }
            KillAt::Random => {
                // Up to about the erasure's own time.
                let within = match target {
                    Target::Memories => 3000,
                    Target::User => 300,
                };
                std::thread::sleep(Duration::from_millis(rng.gen_range(0..within)));
            }
            KillAt::Answered => {
                while !request.is_finished() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        s.kill();
        let answered = request.join().expect("the request's thread");
        let left = key_files(&s.data_dir).intersection(&u.key_files).count();
        let gone = u.key_files.len() - left;
        let (code, out, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
        assert_eq!(
            code, 0,
            "seed {seed} cycle {c}: verify after the kill\n{out}{err}"
        );
        s.spawn();

        // In the log or not; and if it is, done.
        let events = forget::erasures_from(&s, head + 1);
        assert!(events.len() <= 1, "{events:?}");
        let landed = events.len() == 1;
        let (_, v) = s.get("/v1/audit/logs?action=memory.erase&page_size=100", &key);
        let entries = v["data"]["logs"].as_array().expect("logs");
        let now_recorded = entries
            .iter()
            .filter(|e| e["http_status"] == json!(201))
            .count();
        let now_files = key_files(&s.data_dir);
        if landed {
            assert_eq!(now_recorded, recorded + 1, "seed {seed} cycle {c}: {v}");
            let e = &events[0];
            let named: BTreeSet<String> = e.key_ids.iter().map(|k| k.to_hex()).collect();
            let want = match target {
                Target::Memories => MEMORIES,
                Target::User => 1,
            };
            assert_eq!(named.len(), want, "seed {seed} cycle {c}");
            assert!(named.is_subset(&u.key_files), "seed {seed} cycle {c}");
            assert!(
                named.is_disjoint(&now_files),
                "seed {seed} cycle {c}: keys the erasure named survived the restart"
            );
            let erased: BTreeSet<String> = e.memory_ids.iter().map(ToString::to_string).collect();
            let ids: BTreeSet<String> = u.memories.iter().map(|(id, _)| id.clone()).collect();
            assert_eq!(erased, ids, "seed {seed} cycle {c}");
        } else {
            assert_eq!(now_recorded, recorded, "seed {seed} cycle {c}: {v}");
            assert!(
                u.key_files.is_subset(&now_files),
                "seed {seed} cycle {c}: keys are gone, and no erasure is in the log"
            );
        }
        check_user(&s, &key, &u, target, landed);

        // Sent again, it completes. It destroys as many keys either way: the erasure's when
        // it had not landed; else the new keys its subjects got since, for the entries of the
        // history reads above (a read of a memory is sealed under its subjects).
        let (status, r) = s.post("/v1/erasures", &key, body);
        assert_eq!(status, 201, "{r}");
        recorded = now_recorded + 1;
        let destroyed = match target {
            Target::Memories => MEMORIES,
            Target::User => 1,
        };
        assert_eq!(
            r["data"]["erased"]["keys"],
            json!(destroyed),
            "seed {seed} cycle {c}: {r}"
        );
        // A user's erased memories are in no scope index any more: an erasure of the user
        // finds none, while one naming them names them again.
        let memories = match (target, landed) {
            (Target::User, true) => 0,
            _ => MEMORIES,
        };
        assert_eq!(r["data"]["erased"]["memories"], json!(memories), "{r}");
        check_user(&s, &key, &u, target, true);
        let found = forget::scan(&s.data_dir, &u.needles());
        assert!(found.bytes > 0);
        assert_eq!(found.found, Vec::new(), "seed {seed} cycle {c}");
        let witness = forget::scan(&s.data_dir, &[u.id.as_str()]);
        assert!(!witness.found.is_empty(), "the scan finds no clear user id");

        // Bob is intact.
        let (status, v) = s.get(&format!("/v1/memories/{bob}"), &key);
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            v["data"]["content"],
            json!("The user's locker code is 5512")
        );
        report.push(format!(
            "{target:?} killed {at:?} ({}, {gone}/{} key files gone): {}",
            match answered {
                Ok(s) => format!("answered {s}"),
                Err(_) => "unanswered".into(),
            },
            u.key_files.len(),
            if landed { "in the log" } else { "absent" }
        ));
    }
    s.stop();
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let _ = writeln!(
        std::io::stderr(),
        "erasure_crash: seed {seed}, {cycles} cycles in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        report.join("; ")
    );
}
