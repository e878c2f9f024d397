//! The live audit tail, `GET /v1/audit/logs/stream` (docs/STREAMING.md), against the real
//! binary: every entry of the tenant exactly once and in log order across reconnects at random
//! points while writers run and across a server restart, as SSE, NDJSON and through a
//! third-party SSE client (PyPI `httpx-sse`); the filters, OCSF, the per-tenant limit, the
//! permission, erased subjects and tenant isolation.

use crate::common::{self, assert_error, Server};

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use reqwest::blocking::{Client, Response};
use serde_json::{json, Value};

/// A client whose requests may stay open as long as a test reads a stream.
fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client")
}

/// The position a tenant call's response gives (`X-Auditmem-Position`).
pub fn position_of(resp: &Response) -> u64 {
    resp.headers()
        .get("x-auditmem-position")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no X-Auditmem-Position on a {}", resp.status()))
}

/// An audited call of `key` (a GET): its status and position.
pub fn audited_get(c: &Client, url: &str, path: &str, key: &str) -> (u16, u64) {
    let resp = c
        .get(format!("{url}{path}"))
        .bearer_auth(key)
        .send()
        .expect("request");
    (resp.status().as_u16(), position_of(&resp))
}

/// Opens a stream: `query` after `?`, `last` as `Last-Event-ID`, NDJSON or SSE.
pub fn open(url: &str, key: &str, query: &str, last: Option<u64>, ndjson: bool) -> Response {
    let mut req = client()
        .get(format!("{url}/v1/audit/logs/stream?{query}"))
        .bearer_auth(key);
    if let Some(l) = last {
        req = req.header("last-event-id", l.to_string());
    }
    if ndjson {
        req = req.header("accept", "application/x-ndjson");
    }
    req.send().expect("open a stream")
}

/// One event of a stream: its position and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub position: u64,
    pub data: Value,
}

/// Reads a stream's events (SSE or NDJSON), handing each to `each` (a heartbeat as None)
/// until it says stop or the stream ends. Returns whether `each` stopped it.
pub fn read_events(
    resp: Response,
    ndjson: bool,
    mut each: impl FnMut(Option<Event>) -> bool,
) -> bool {
    let mut lines = BufReader::new(resp).lines();
    let (mut id, mut data) = (None::<u64>, None::<String>);
    while let Some(Ok(line)) = lines.next() {
        if ndjson {
            if line.is_empty() {
                if !each(None) {
                    return true;
                }
                continue;
            }
            // The position leads the line, for line-oriented tools (docs/STREAMING.md).
            assert!(line.starts_with("{\"position\":"), "{line}");
            let v: Value = serde_json::from_str(&line).expect("an NDJSON line");
            let position = v["position"].as_u64().expect("position");
            if !each(Some(Event {
                position,
                data: v["entry"].clone(),
            })) {
                return true;
            }
            continue;
        }
        if line.starts_with(':') {
            if !each(None) {
                return true;
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.parse().expect("an id"));
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = Some(v.to_string());
        } else if line.is_empty() {
            if let (Some(position), Some(d)) = (id.take(), data.take()) {
                let data = serde_json::from_str(&d).expect("JSON data");
                if !each(Some(Event { position, data })) {
                    return true;
                }
            }
        } else {
            panic!("not an SSE line: {line:?}");
        }
    }
    false
}

/// Every event of a fresh stream until the one at `until` (inclusive).
pub fn events_until(url: &str, key: &str, query: &str, until: u64, ndjson: bool) -> Vec<Event> {
    let mut got = Vec::new();
    let stopped = read_events(open(url, key, query, None, ndjson), ndjson, |e| {
        let Some(e) = e else { return true };
        let p = e.position;
        got.push(e);
        p < until
    });
    assert!(stopped, "the stream ended before position {until}: {got:?}");
    got
}

/// The tenant's entries as the list shows them, by id.
fn listed_by_id(s: &Server, key: &str) -> std::collections::HashMap<String, Value> {
    common::all_audit_entries(s, key)
        .into_iter()
        .map(|e| (e["id"].as_str().expect("id").to_string(), e))
        .collect()
}

/// Writes `n` audited reads as `key`'s tenant from a thread; their positions.
fn writer(url: String, key: String, n: usize) -> std::thread::JoinHandle<Vec<u64>> {
    std::thread::spawn(move || {
        let c = client();
        (0..n)
            .map(|_| {
                let (status, p) = audited_get(&c, &url, "/v1/memories?page_size=1", &key);
                assert_eq!(status, 200);
                p
            })
            .collect()
    })
}

/// Reads with reconnects at random points (1 to 12 events a connection, resuming with
/// `Last-Event-ID`) until the event at `until`; every event in `got`, every stream
/// connection's own position in `own`.
fn read_resuming(
    s: &Server,
    key: &str,
    rng: &mut rand::rngs::StdRng,
    until: impl Fn() -> Option<u64>,
    got: &mut Vec<Event>,
    own: &mut Vec<u64>,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            Instant::now() < deadline,
            "the stream never reached the writers' last entry: {got:?}"
        );
        let last = got.last().map_or(0, |e| e.position);
        if until().is_some_and(|u| last >= u) {
            return;
        }
        let ndjson = rng.gen_bool(0.5);
        let resp = open(&s.url, key, "", Some(last), ndjson);
        assert_eq!(resp.status().as_u16(), 200);
        own.push(position_of(&resp));
        let mut take = rng.gen_range(1..=12);
        read_events(resp, ndjson, |e| {
            if let Some(e) = e {
                got.push(e);
                take -= 1;
            }
            take > 0 && until().is_none_or(|u| got.last().map_or(0, |e| e.position) < u)
        });
    }
}

#[test]
fn a_resumed_tail_gets_every_entry_once_in_order_across_reconnects_and_a_restart() {
    let mut s = Server::start_with(&["--stream-heartbeat-secs", "1"]);
    let (tenant, writer_key) = s.tenant_with_key("business");
    let reader = s.create_key(&tenant, &["audit.read"]);
    // Another tenant writes all along: none of its entries may show up.
    let (_, other) = s.tenant_with_key("business");
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::seed_or_clock("STREAM_SEED"));
    let (mut got, mut own, mut written, mut foreign) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for phase in 0..2 {
        if phase == 1 {
            s.restart();
        }
        let w = writer(s.url.clone(), writer_key.clone(), 60);
        let f = writer(s.url.clone(), other.clone(), 30);
        let done = std::sync::Mutex::new(None::<u64>);
        // The writers' last position is known only once they are done.
        std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                let mine = w.join().expect("writer");
                *done.lock().expect("lock") = mine.last().copied();
                mine
            });
            read_resuming(
                &s,
                &reader,
                &mut rng,
                || *done.lock().expect("lock"),
                &mut got,
                &mut own,
            );
            written.extend(h.join().expect("writer"));
        });
        foreign.extend(f.join().expect("other writer"));
    }
    let received: Vec<u64> = got.iter().map(|e| e.position).collect();
    let last = *received.last().expect("events");
    // The tenant's entries are exactly the writes and the stream connections, each of which
    // answered with its position.
    let expected: BTreeSet<u64> = written
        .iter()
        .chain(&own)
        .copied()
        .filter(|p| *p <= last)
        .collect();
    assert_eq!(
        received,
        expected.iter().copied().collect::<Vec<_>>(),
        "the positions received are the tenant's entries, each once, in log order"
    );
    assert!(written.iter().all(|p| *p <= last), "every write was read");
    assert!(received.len() >= written.len(), "{}", received.len());
    assert!(foreign.iter().all(|p| !expected.contains(p)));
    // Each event is the entry exactly as the list shows it.
    let listed = listed_by_id(&s, &writer_key);
    for e in &got {
        let id = e.data["id"].as_str().expect("id");
        assert_eq!(Some(&e.data), listed.get(id), "position {}", e.position);
    }
}

#[test]
fn a_third_party_sse_client_resuming_at_random_points_gets_every_entry_once_in_order() {
    let s = Server::start_with(&["--stream-heartbeat-secs", "1"]);
    let (tenant, writer_key) = s.tenant_with_key("business");
    let reader = s.create_key(&tenant, &["audit.read"]);
    let seed = common::seed_or_clock("STREAM_SEED");
    let python = common::test_python();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/tail_client.py");
    let child = std::process::Command::new(python)
        .arg(script)
        .args([&s.url, &reader, "audit.list", &seed.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the Python client");
    let mut written = writer(s.url.clone(), writer_key.clone(), 80)
        .join()
        .expect("writer");
    // The client's stop: an entry of another action, last.
    let (status, p) = audited_get(&client(), &s.url, "/v1/audit/logs?page_size=1", &writer_key);
    assert_eq!(status, 200);
    written.push(p);
    let out = child.wait_with_output().expect("the client's output");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let (summary, events) = lines.split_last().expect("lines");
    assert!(
        summary["reconnects"].as_u64().expect("reconnects") >= 5,
        "{summary}"
    );
    let received: Vec<u64> = events
        .iter()
        .map(|e| e["id"].as_u64().expect("id"))
        .collect();
    // Between the writes: only the client's own stream connections, whose positions the
    // client does not see; each is an `audit.stream` entry.
    let mut expected: BTreeSet<u64> = written.iter().copied().collect();
    for e in events {
        if e["data"]["action"] == "audit.stream" {
            expected.insert(e["id"].as_u64().expect("id"));
        }
    }
    assert_eq!(received, expected.into_iter().collect::<Vec<_>>());
    let listed = listed_by_id(&s, &writer_key);
    for e in events {
        let id = e["data"]["id"].as_str().expect("id");
        assert_eq!(Some(&e["data"]), listed.get(id));
    }
}

#[test]
fn filters_ndjson_ocsf_and_refusals() {
    let s = Server::start_with(&["--stream-heartbeat-secs", "1"]);
    let (_, key) = s.tenant_with_key("business");
    let c = client();
    let mut lists = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..3 {
        // Apart in time, so the time filter below falls between two of them.
        std::thread::sleep(Duration::from_millis(10));
        lists.push(audited_get(&c, &s.url, "/v1/memories?page_size=1", &key).1);
        std::thread::sleep(Duration::from_millis(10));
        reads.push(audited_get(&c, &s.url, "/v1/audit/logs?page_size=1", &key).1);
    }
    let last = *reads.last().expect("reads");

    // The action filter, as NDJSON from the start.
    let got = events_until(&s.url, &key, "after=0&action=memory.list", lists[2], true);
    assert_eq!(got.iter().map(|e| e.position).collect::<Vec<_>>(), lists);
    assert!(got.iter().all(|e| e.data["action"] == "memory.list"));

    // The time filter: entries from the fourth call's time on.
    let listed = common::all_audit_entries(&s, &key);
    let fourth = listed
        .iter()
        .filter(|e| e["action"] == "memory.list")
        .map(|e| e["created_at"].as_str().expect("created_at"))
        .min_by(|a, b| b.cmp(a))
        .expect("a memory.list entry")
        .to_string();
    let got = events_until(
        &s.url,
        &key,
        &format!("after=0&start_time={fourth}"),
        last,
        false,
    );
    assert_eq!(
        got.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![lists[2], reads[2]]
    );

    // OCSF: the same entries as API Activity events.
    let got = events_until(&s.url, &key, "after=0&format=ocsf", last, false);
    assert_eq!(got.len(), 6);
    for (e, list) in got.iter().zip([true, false, true, false, true, false]) {
        assert_eq!(e.data["class_uid"], json!(6003));
        assert_eq!(e.data["metadata"]["sequence"], json!(e.position));
        let action = if list { "memory.list" } else { "audit.list" };
        assert_eq!(e.data["api"]["operation"], json!(action));
        assert_eq!(e.data["type_uid"], json!(600302));
        crate::ocsf::assert_api_activity(&e.data);
    }

    // Refusals, in the envelope.
    let refused = |query: &str, last: Option<&str>| {
        let mut req = c
            .get(format!("{}/v1/audit/logs/stream?{query}", s.url))
            .bearer_auth(&key);
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        let resp = req.send().expect("request");
        let status = resp.status().as_u16();
        (status, resp.json::<Value>().expect("an envelope"))
    };
    let r = refused("after=-1", None);
    assert_error(&r, 400, 4000);
    assert!(
        r.1["message"]
            .as_str()
            .expect("message")
            .starts_with("after must be a log position"),
        "{}",
        r.1
    );
    assert_error(&refused("", Some("abc")), 400, 4000);
    assert_error(&refused("format=csv", None), 400, 4000);
    assert_error(&refused("page=2", None), 400, 4000);
    assert_error(&refused("start_time=yesterday", None), 400, 4000);
    assert_error(
        &refused(
            "start_time=2026-01-02T00:00:00Z&end_time=2026-01-01T00:00:00Z",
            None,
        ),
        400,
        4000,
    );
}

#[test]
fn streams_are_limited_per_tenant_and_need_audit_read() {
    let s = Server::start_with(&[
        "--max-streams-per-tenant",
        "2",
        "--stream-heartbeat-secs",
        "1",
    ]);
    let (tenant, key) = s.tenant_with_key("business");
    let first = open(&s.url, &key, "", None, false);
    let second = open(&s.url, &key, "", None, true);
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    assert_eq!(
        first.headers()["content-type"].to_str().expect("ascii"),
        "text/event-stream"
    );
    assert_eq!(
        second.headers()["content-type"].to_str().expect("ascii"),
        "application/x-ndjson"
    );
    // Tails are served on threads of their own, niced, one request a connection.
    assert_eq!(
        first.headers()["connection"].to_str().expect("ascii"),
        "close"
    );
    let pid = s.pid().expect("the server runs");
    let niced: Vec<i64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            (comm.trim() == "auditmem-tails").then_some(())?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Field 19 (nice), counted after the command's closing parenthesis.
            let after = &stat[stat.rfind(')')? + 2..];
            after.split(' ').nth(16)?.parse().ok()
        })
        .collect();
    assert!(!niced.is_empty(), "no thread serves the tails");
    assert!(niced.iter().all(|&n| n == 10), "{niced:?}");
    let third = open(&s.url, &key, "", None, false);
    assert_eq!(third.status().as_u16(), 429);
    assert!(
        common::metrics_text(&s)
            .lines()
            .any(|l| l == "auditmem_audit_streams_open 2"),
        "the open streams are counted"
    );
    assert_eq!(third.headers()["retry-after"].to_str().expect("ascii"), "5");
    let body: Value = third.json().expect("an envelope");
    assert_error(&(429, body), 429, 4290);
    // Another tenant's streams are its own.
    let (_, other) = s.tenant_with_key("business");
    assert_eq!(open(&s.url, &other, "", None, false).status().as_u16(), 200);
    // A closed stream gives its slot back (noticed at its next heartbeat).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let again = open(&s.url, &key, "", None, false);
        if again.status().as_u16() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot never came back");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(second);

    // Without audit.read: 403 (4030), recorded like any refusal.
    let writer = s.create_key(&tenant, &["memory.read", "memory.write"]);
    let resp = open(&s.url, &writer, "", None, false);
    let status = resp.status().as_u16();
    let body: Value = resp.json().expect("an envelope");
    assert_error(&(status, body), 403, 4030);
}

#[test]
fn an_erased_subjects_entries_stream_as_the_list_shows_them() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let eraser = s.create_key(&tenant, &["memory.erase"]);
    let c = client();
    let resp = c
        .post(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("user-agent", "the-erased-agent/1.0")
        .json(&json!({"content": "Dana lives in Lyon", "memory_type": "fact", "user_id": "dana"}))
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    let created = position_of(&resp);
    let (status, v) = s.post("/v1/erasures", &eraser, json!({"user_id": "dana"}));
    assert_eq!(status, 201, "{v}");
    let (_, last) = audited_get(&c, &s.url, "/v1/memories?page_size=1", &key);
    for format in ["", "&format=ocsf"] {
        let got = events_until(&s.url, &key, &format!("after=0{format}"), last, false);
        let text =
            serde_json::to_string(&got.iter().map(|e| &e.data).collect::<Vec<_>>()).expect("json");
        assert!(!text.contains("the-erased-agent"), "{text}");
        let e = got
            .iter()
            .find(|e| e.position == created)
            .expect("the create");
        if format.is_empty() {
            assert_eq!(e.data["erased"], json!(true), "{}", e.data);
            assert_eq!(e.data["user_agent"], Value::Null);
            let listed = listed_by_id(&s, &key);
            assert_eq!(
                Some(&e.data),
                listed.get(e.data["id"].as_str().expect("id"))
            );
        } else {
            assert_eq!(e.data["unmapped"]["erased"], json!(true), "{}", e.data);
            assert_eq!(e.data["src_endpoint"], json!({"name": "unknown"}));
        }
    }
}

#[test]
fn a_stream_ends_when_its_key_is_revoked_or_its_subscription_ends() {
    let s = Server::start_with(&["--stream-heartbeat-secs", "1"]);
    let tenant = s.create_tenant("business");
    let issue = || {
        let (status, v) = s.admin(
            reqwest::Method::POST,
            &format!("/admin/v1/tenants/{tenant}/keys"),
            Some(json!({"permissions": ["audit.read"]})),
        );
        assert_eq!(status, 201, "{v}");
        let id = v["data"]["id"].as_str().expect("id").to_string();
        (id, v["data"]["api_key"].as_str().expect("key").to_string())
    };
    // Reads until the stream ends; how long it took.
    let ends_within = |resp: Response| {
        let t0 = Instant::now();
        let ended = !read_events(resp, false, |_| t0.elapsed() < Duration::from_secs(30));
        (ended, t0.elapsed())
    };
    let (id, key) = issue();
    let (_, other) = issue();
    let revoked = open(&s.url, &key, "", None, false);
    let kept = open(&s.url, &other, "", None, false);
    assert_eq!(
        (revoked.status().as_u16(), kept.status().as_u16()),
        (200, 200)
    );
    let (status, v) = s.admin(
        reqwest::Method::DELETE,
        &format!("/admin/v1/keys/{id}"),
        None,
    );
    assert_eq!(status, 200, "{v}");
    let (ended, took) = ends_within(revoked);
    assert!(
        ended && took < Duration::from_secs(10),
        "{ended} after {took:?}"
    );
    // The other key's stream goes on until the tenant's subscription ends.
    let (status, v) = s.admin(
        reqwest::Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"subscription_active": false})),
    );
    assert_eq!(status, 200, "{v}");
    let (ended, took) = ends_within(kept);
    assert!(
        ended && took < Duration::from_secs(10),
        "{ended} after {took:?}"
    );
}

/// A client that opens a long backfill and stops reading keeps its socket full and the answer
/// unfinished: a stop closes that connection at `--drain-timeout-secs` instead of waiting for
/// it for ever.
#[test]
fn a_stop_closes_a_stream_its_client_stopped_reading_at_the_drain_timeout() {
    use std::io::Write;
    let mut s = Server::start_with(&["--drain-timeout-secs", "1"]);
    let (tenant, key) = s.tenant_with_key("business");
    // ~20 MB of NDJSON: far more than the loopback socket's buffers hold.
    common::ingest_filler(&s, &tenant, 30_000);
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut sock = std::net::TcpStream::connect(&addr).expect("connect");
    write!(
        sock,
        "GET /v1/audit/logs/stream?after=0 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nAccept: application/x-ndjson\r\n\r\n"
    )
    .expect("send the request");
    // Read the head only, so the stream is answering, then never read again.
    let mut first = [0u8; 12];
    std::io::Read::read_exact(&mut sock, &mut first).expect("the answer starts");
    assert_eq!(&first, b"HTTP/1.1 200");
    std::thread::sleep(Duration::from_secs(2));
    let pid = s.pid().expect("a running server");
    let asked = Instant::now();
    s.terminate();
    let (tx, rx) = std::sync::mpsc::channel();
    let (status, took) = std::thread::scope(|scope| {
        scope.spawn(|| tx.send(s.wait_exit()).expect("the test waits"));
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(status) => (Some(status), asked.elapsed()),
            Err(_) => {
                // Hung: kill it so that the test ends, and fail below.
                let pid = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                (None, asked.elapsed())
            }
        }
    });
    drop(sock);
    let status = status.unwrap_or_else(|| panic!("the stop still waited after {took:?}"));
    assert!(status.success(), "the server exited with {status}");
    assert!(
        took < Duration::from_secs(8),
        "the stop waited {took:?} for a client that does not read"
    );
}

/// Tails of one tenant share what is read and rendered at the head: an entry one tail got
/// with its personal fields, resumed by another after its subject was erased, comes erased,
/// as the list shows it, while the first tail's stream (and what it rendered) is still open.
#[test]
fn an_entry_sent_before_an_erasure_is_resumed_after_it_erased() {
    let s = Server::start_with(&["--stream-heartbeat-secs", "1"]);
    let (tenant, key) = s.tenant_with_key("business");
    let eraser = s.create_key(&tenant, &["memory.erase"]);
    let c = client();
    // Open all along and never read: the tenant's shared head lives as long as it does.
    let keeper = open(&s.url, &key, "", None, false);
    assert_eq!(keeper.status().as_u16(), 200);
    let live = open(&s.url, &key, "", None, false);
    assert_eq!(live.status().as_u16(), 200);
    let resp = c
        .post(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("user-agent", "the-erased-agent/1.0")
        .json(&json!({"content": "Dana lives in Lyon", "memory_type": "fact", "user_id": "dana"}))
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    let created = position_of(&resp);
    let mut before = None;
    read_events(live, false, |e| match e {
        Some(e) if e.position == created => {
            before = Some(e);
            false
        }
        _ => true,
    });
    let before = before.expect("the live tail got the create");
    assert_eq!(before.data["user_agent"], json!("the-erased-agent/1.0"));
    assert_eq!(before.data.get("erased"), None, "{}", before.data);

    let (status, v) = s.post("/v1/erasures", &eraser, json!({"user_id": "dana"}));
    assert_eq!(status, 201, "{v}");
    let (_, last) = audited_get(&c, &s.url, "/v1/memories?page_size=1", &key);
    let listed = listed_by_id(&s, &key);
    for ndjson in [false, true] {
        let mut got = Vec::new();
        let stopped = read_events(
            open(&s.url, &key, "", Some(created - 1), ndjson),
            ndjson,
            |e| {
                let Some(e) = e else { return true };
                let p = e.position;
                got.push(e);
                p < last
            },
        );
        assert!(stopped, "the stream ended early: {got:?}");
        let e = &got[0];
        assert_eq!(e.position, created, "{got:?}");
        assert_eq!(e.data["erased"], json!(true), "{}", e.data);
        assert_eq!(e.data["user_agent"], Value::Null);
        assert_eq!(
            Some(&e.data),
            listed.get(e.data["id"].as_str().expect("id"))
        );
        let text =
            serde_json::to_string(&got.iter().map(|e| &e.data).collect::<Vec<_>>()).expect("json");
        assert!(!text.contains("the-erased-agent"), "{text}");
    }
    drop(keeper);
}

/// Five tails of one tenant, in different forms and with different filters, resuming from
/// before their shared head and reading on while writers run: each gets exactly its own
/// stream, every entry it keeps once, in order, as it renders them.
#[test]
fn many_tails_of_one_tenant_each_get_exactly_their_own_stream() {
    let s = Server::start_with(&["--stream-heartbeat-secs", "1"]);
    let (tenant, writer_key) = s.tenant_with_key("business");
    let reader = s.create_key(&tenant, &["audit.read"]);
    let c = client();
    let (_, from) = audited_get(&c, &s.url, "/v1/memories?page_size=1", &writer_key);
    // The time filter's start falls between the two halves of the writes.
    let since = chrono::Utc::now() + chrono::Duration::seconds(3);
    let since_text = since.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    // (query, NDJSON): SSE and NDJSON, JSON and OCSF, action filters and a time filter.
    let tails = [
        (String::new(), false),
        (format!("start_time={since_text}"), true),
        ("format=ocsf".to_string(), false),
        ("action=memory.list".to_string(), true),
        ("action=audit.list&format=ocsf".to_string(), false),
    ];
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    // Where each tail stops: the last entry it keeps, once the writers are done.
    let ends = std::sync::Arc::new(std::sync::Mutex::new(None::<(u64, u64)>));
    let mut handles = Vec::new();
    for (query, ndjson) in tails.iter().cloned() {
        let (url, key, ends, tx) = (s.url.clone(), reader.clone(), ends.clone(), tx.clone());
        handles.push(std::thread::spawn(move || {
            let resp = open(&url, &key, &query, Some(from), ndjson);
            assert_eq!(resp.status().as_u16(), 200);
            tx.send(position_of(&resp)).expect("the test waits");
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut got: Vec<Event> = Vec::new();
            let stopped = read_events(resp, ndjson, |e| {
                if let Some(e) = e {
                    got.push(e);
                }
                assert!(Instant::now() < deadline, "{query}: no end: {got:?}");
                let end = ends.lock().expect("lock").map(|(lists, reads)| {
                    if query.contains("memory.list") {
                        lists
                    } else {
                        reads
                    }
                });
                end.is_none_or(|end| got.last().is_none_or(|e| e.position < end))
            });
            (query, ndjson, stopped, got)
        }));
    }
    drop(tx);
    let opened: Vec<u64> = rx.iter().take(tails.len()).collect();
    let (mut lists, mut reads, mut late) = (Vec::new(), Vec::new(), Vec::new());
    for half in 0..2 {
        if half == 1 {
            assert!(chrono::Utc::now() < since, "the first half took too long");
            while chrono::Utc::now() <= since + chrono::Duration::milliseconds(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for _ in 0..15 {
            let list = audited_get(&c, &s.url, "/v1/memories?page_size=1", &writer_key).1;
            let read = audited_get(&c, &s.url, "/v1/audit/logs?page_size=1", &writer_key).1;
            lists.push(list);
            reads.push(read);
            if half == 1 {
                late.extend([list, read]);
            }
        }
    }
    let last = (*lists.last().expect("lists"), *reads.last().expect("reads"));
    *ends.lock().expect("lock") = Some(last);
    let listed = listed_by_id(&s, &writer_key);
    let mut seen = Vec::new();
    for h in handles {
        let (query, ndjson, stopped, got) = h.join().expect("a tail");
        assert!(stopped, "{query}: the stream ended: {got:?}");
        // A tail may read past its end before it learns where that is.
        let end = if query.contains("memory.list") {
            last.0
        } else {
            last.1
        };
        let got: Vec<Event> = got.into_iter().filter(|e| e.position <= end).collect();
        let received: Vec<u64> = got.iter().map(|e| e.position).collect();
        let expected: BTreeSet<u64> = if query.contains("memory.list") {
            lists.iter().copied().collect()
        } else if query.contains("audit.list") {
            reads.iter().copied().collect()
        } else if query.contains("start_time") {
            late.iter().copied().collect()
        } else {
            lists.iter().chain(&reads).chain(&opened).copied().collect()
        };
        assert_eq!(
            received,
            expected.into_iter().collect::<Vec<_>>(),
            "{query} ndjson={ndjson}"
        );
        for e in &got {
            if query.contains("ocsf") {
                assert_eq!(e.data["class_uid"], json!(6003), "{query}");
                assert_eq!(e.data["metadata"]["sequence"], json!(e.position));
                let id = e.data["metadata"]["uid"].as_str().expect("uid");
                let row = listed.get(id).expect("a listed entry");
                assert_eq!(e.data["api"]["operation"], row["action"], "{query}");
            } else {
                let id = e.data["id"].as_str().expect("id");
                assert_eq!(Some(&e.data), listed.get(id), "{query} at {}", e.position);
            }
        }
        seen.push(received.len());
    }
    // The streams differ: 30 writes of each action, and five stream openings.
    assert_eq!(seen, vec![65, 30, 65, 30, 30]);
}

/// A tenant with few entries in a busy log, tailing from position 0: its backfill reads its
/// own entries (the audit index's per-tenant log order), and gets exactly them, in order, then
/// its live ones.
#[test]
fn a_tenant_with_few_entries_in_a_busy_log_backfills_exactly_its_own() {
    let s = Server::start();
    let (tenant, writer_key) = s.tenant_with_key("business");
    let reader = s.create_key(&tenant, &["audit.read"]);
    let (busy, _) = s.tenant_with_key("business");
    let c = client();
    let mut written = Vec::new();
    for i in 0..3 {
        let (status, p) = audited_get(&c, &s.url, "/v1/memories?page_size=1", &writer_key);
        assert_eq!(status, 200);
        written.push(p);
        if i < 2 {
            common::ingest_filler(&s, &busy, 20_000);
        }
    }
    assert!(written[2] - written[0] > 40_000, "{written:?}");
    for ndjson in [true, false] {
        let resp = open(&s.url, &reader, "after=0", None, ndjson);
        assert_eq!(resp.status().as_u16(), 200);
        // The stream's own entry comes after every one written so far, live.
        let own = position_of(&resp);
        let mut got = Vec::new();
        let stopped = read_events(resp, ndjson, |e| {
            if let Some(e) = e {
                got.push(e);
            }
            got.last().is_none_or(|e| e.position < own)
        });
        assert!(stopped, "{got:?}");
        written.push(own);
        let positions: Vec<u64> = got.iter().map(|e| e.position).collect();
        assert_eq!(positions, written, "ndjson: {ndjson}");
        assert!(got.iter().all(|e| e.data["action"] == json!("memory.list")
            || e.data["action"] == json!("audit.stream")));
    }
}
