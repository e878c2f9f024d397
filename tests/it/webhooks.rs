//! Webhooks (docs/WEBHOOKS.md) against the real binary and a real HTTP receiver on loopback
//! (tests/python/webhook_receiver.py), every delivery's signature checked by the Standard
//! Webhooks reference library (PyPI `standardwebhooks`, tests/python/webhook_verify.py): the
//! CRUD routes, their envelopes, permission and isolation; order and no loss across a SIGKILL;
//! retries, 410, redirects, the bounded excerpt, redelivery; the SSRF guard; secret rotation;
//! `ed25519` endpoints, whose `v1a,` signatures Python's `cryptography` verifies with the
//! public key (tests/python/webhook_verify_v1a.py); one tenant's hanging endpoint not
//! delaying another tenant's deliveries; and the delivery log's bound.

use crate::common::{self, assert_error, Server};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};

const ALLOW: &str = "--webhooks-allow-private-targets";

/// What a create with an unknown `signature_scheme` answers (the body as reqwest serializes
/// it, keys sorted: the value ends at column 55).
const BAD_SCHEME: &str = "invalid JSON body: signature_scheme: unknown variant `rsa`, expected `hmac-sha256` or `ed25519` at line 1 column 55";
/// What a PATCH naming `signature_scheme` answers (`auditmem::wire::webhook::SCHEME_FIXED`).
const SCHEME_FIXED: &str = "signature_scheme cannot be changed; create a new webhook with the scheme wanted, then delete this one (rotate-secret renews the key of the same scheme)";

/// A receiver process and its log.
pub(crate) struct Receiver {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    pub(crate) fn start() -> Receiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("received.jsonl");
        std::fs::write(&log, "").expect("log");
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/webhook_receiver.py"
        );
        let mut child = Command::new(common::test_python())
            .arg(script)
            .arg(&log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("port");
        let port = line.trim().parse().expect("a port");
        Receiver {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Every request received so far, in order.
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .expect("log")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    /// The requests to `path`.
    fn at(&self, path: &str) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["path"] == path)
            .collect()
    }

    /// Polls until `done` holds for the requests to `path`, for at most `within`.
    pub(crate) fn wait(
        &self,
        path: &str,
        within: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let got = self.at(path);
            if done(&got) {
                return got;
            }
            assert!(
                start.elapsed() < within,
                "waited {within:?} at {path}; got {} requests: {got:?}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `standardwebhooks` says of each logged request under each of `secrets`.
fn verify(r: &Receiver, secrets: &[&str]) -> Vec<Value> {
    run_verifier("webhook_verify.py", r, secrets)
}

/// What a verifier script of tests/python says of each logged request under each of `keys`,
/// one JSON line per request.
fn run_verifier(script: &str, r: &Receiver, keys: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(common::test_python())
        .arg(script)
        .arg(&r.log)
        .args(keys)
        .output()
        .expect("verifier");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// A tenant call's status, body and log position (`X-Auditmem-Position`).
fn call(
    s: &Server,
    method: Method,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value, u64) {
    let mut req = s
        .raw()
        .request(method, format!("{}{path}", s.url))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().expect("request");
    let status = resp.status().as_u16();
    let position = resp
        .headers()
        .get("x-auditmem-position")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let v = resp.json().unwrap_or(Value::Null);
    (status, v, position)
}

/// A webhook created for `key` to `url`: its id and secret.
fn create(s: &Server, key: &str, url: &str, types: Value) -> (String, String) {
    let (status, v, _) = call(
        s,
        Method::POST,
        "/v1/webhooks",
        key,
        Some(json!({"url": url, "event_types": types})),
    );
    assert_eq!(status, 201, "{v}");
    let id = v["data"]["id"].as_str().expect("id").to_owned();
    let secret = v["data"]["secret"].as_str().expect("secret").to_owned();
    (id, secret)
}

/// The endpoint's deliveries, newest first.
fn deliveries(s: &Server, key: &str, id: &str) -> Vec<Value> {
    let (status, v) = s.get(&format!("/v1/webhooks/{id}/deliveries"), key);
    assert_eq!(status, 200, "{v}");
    v["data"]["deliveries"]
        .as_array()
        .expect("deliveries")
        .clone()
}

/// Polls the endpoint's deliveries until `done` holds.
fn wait_deliveries(s: &Server, key: &str, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let d = deliveries(s, key, id);
        if done(&d) {
            return d;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{d:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn position_of(record: &Value) -> u64 {
    let body: Value = serde_json::from_str(record["body"].as_str().expect("body")).expect("JSON");
    body["data"]["position"].as_u64().expect("position")
}

#[test]
fn crud_answers_with_envelopes_the_permission_and_isolation() {
    let s = Server::start_with(&[ALLOW]);
    let a = s.create_tenant("pro");
    let key = s.create_key(&a, &["webhooks.manage", "audit.read"]);
    let no_perm = s.create_key(&a, &["audit.read", "memory.read", "memory.write"]);
    let b = s.create_tenant("pro");
    let other = s.create_key(&b, &["webhooks.manage"]);
    let url = "http://127.0.0.1:9/hook";

    assert_error(
        &s.post(
            "/v1/webhooks",
            &no_perm,
            json!({"url": url, "event_types": ["audit.entry"]}),
        ),
        403,
        4030,
    );
    assert_error(&s.get("/v1/webhooks", &no_perm), 403, 4030);

    for (body, says) in [
        (
            json!({"url": "ftp://x.example/h", "event_types": ["audit.entry"]}),
            "https://",
        ),
        (
            json!({"url": "not a url", "event_types": ["audit.entry"]}),
            "url is not a URL",
        ),
        (
            json!({"url": url, "event_types": []}),
            "event_types must name at least one",
        ),
        (
            json!({"url": url, "event_types": ["audit.entry", "audit.entry"]}),
            "twice",
        ),
        (
            json!({"url": url, "event_types": ["memory.read"]}),
            "event_types[0]",
        ),
        (
            json!({"url": url, "event_types": ["audit.entry"], "secret": "x"}),
            "unknown field 'secret'",
        ),
        (json!({"event_types": ["audit.entry"]}), "url"),
        (
            json!({"url": format!("https://h.example/{}", "a".repeat(2100)), "event_types": ["audit.entry"]}),
            "at most 2048",
        ),
    ] {
        let got = s.post("/v1/webhooks", &key, body.clone());
        assert_error(&got, 400, 4000);
        let message = got.1["message"].as_str().expect("message");
        assert!(message.contains(says), "{body}: {message}");
    }

    let (status, created, _) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(
            json!({"url": url, "event_types": ["memory.created", "audit.entry"], "audit_actions": ["memory.list"]}),
        ),
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["success"], json!(true));
    let w = &created["data"];
    let id = w["id"].as_str().expect("id").to_owned();
    let secret = w["secret"].as_str().expect("secret").to_owned();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_").expect("whsec_"))
        .expect("base64");
    assert_eq!(raw.len(), 32);
    assert_eq!(w["url"], json!(url));
    assert_eq!(w["event_types"], json!(["audit.entry", "memory.created"]));
    assert_eq!(w["audit_actions"], json!(["memory.list"]));
    assert_eq!(w["enabled"], json!(true));
    assert_eq!(w["disabled_reason"], Value::Null);
    assert_eq!(w["signature_scheme"], json!("hmac-sha256"));
    assert_eq!(w["public_key"], Value::Null);

    let (status, list) = s.get("/v1/webhooks", &key);
    assert_eq!(status, 200, "{list}");
    let listed = list["data"]["webhooks"].as_array().expect("webhooks");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], json!(id));
    assert!(listed[0].get("secret").is_none(), "{list}");
    let (status, one) = s.get(&format!("/v1/webhooks/{id}"), &key);
    assert_eq!(status, 200);
    assert_eq!(one["data"]["id"], json!(id));
    assert!(one["data"].get("secret").is_none());

    let patch = |k: &str, body: Value| {
        s.call(
            Method::PATCH,
            &format!("/v1/webhooks/{id}"),
            Some(k),
            Some(&body),
        )
    };
    let empty = patch(&key, json!({}));
    assert_error(&empty, 400, 4000);
    assert!(empty.1["message"]
        .as_str()
        .is_some_and(|m| m.contains("at least one")));
    let (status, off) = patch(&key, json!({"enabled": false}));
    assert_eq!(status, 200, "{off}");
    assert_eq!(off["data"]["enabled"], json!(false));
    assert_eq!(
        off["data"]["event_types"],
        json!(["audit.entry", "memory.created"])
    );

    // Another tenant's endpoint is missing to it, whatever it does.
    assert_error(&s.get(&format!("/v1/webhooks/{id}"), &other), 404, 4040);
    assert_error(&patch(&other, json!({"enabled": true})), 404, 4040);
    assert_error(
        &s.call(
            Method::DELETE,
            &format!("/v1/webhooks/{id}"),
            Some(&other),
            None,
        ),
        404,
        4040,
    );
    assert_error(
        &s.post(
            &format!("/v1/webhooks/{id}/rotate-secret"),
            &other,
            json!({}),
        ),
        404,
        4040,
    );
    assert_error(
        &s.get(&format!("/v1/webhooks/{id}/deliveries"), &other),
        404,
        4040,
    );
    let (_, others) = s.get("/v1/webhooks", &other);
    assert_eq!(others["data"]["webhooks"], json!([]));
    assert_error(&s.get("/v1/webhooks/not-an-id", &key), 404, 4040);
    assert_error(
        &s.post(
            &format!(
                "/v1/webhooks/{id}/deliveries/{}/redeliver",
                uuid::Uuid::now_v7()
            ),
            &key,
            json!({}),
        ),
        404,
        4040,
    );

    // The secret is in no audit entry: the create's answer is not recorded.
    let entries = common::all_audit_entries(&s, &key);
    let create_entry = entries
        .iter()
        .find(|e| e["action"] == "webhook.create" && e["http_status"] == 201)
        .expect("the create's entry");
    let (status, detail) = s.get(
        &format!(
            "/v1/audit/logs/{}",
            create_entry["id"].as_str().expect("id")
        ),
        &key,
    );
    assert_eq!(status, 200, "{detail}");
    assert!(!detail.to_string().contains(&secret), "{detail}");

    let (status, deleted) = s.call(
        Method::DELETE,
        &format!("/v1/webhooks/{id}"),
        Some(&key),
        None,
    );
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["data"], json!({"id": id, "deleted": true}));
    assert_error(&s.get(&format!("/v1/webhooks/{id}"), &key), 404, 4040);
}

#[test]
fn private_targets_are_refused_without_the_operator_flag() {
    let s = Server::start();
    let t = s.create_tenant("pro");
    let key = s.create_key(&t, &["webhooks.manage"]);
    for (url, says) in [
        ("http://127.0.0.1:9/x", "https://"),
        (
            "https://127.0.0.1/x",
            "127.0.0.1, a private, loopback or link-local address",
        ),
        (
            "https://169.254.169.254/latest/meta-data",
            "169.254.169.254, a private",
        ),
        ("https://[::1]:8443/x", "::1, a private"),
        (
            "https://localhost/x",
            "a private, loopback or link-local address",
        ),
        ("https://user:pw@hooks.example/x", "credentials"),
    ] {
        let got = s.post(
            "/v1/webhooks",
            &key,
            json!({"url": url, "event_types": ["audit.entry"]}),
        );
        assert_error(&got, 400, 4000);
        let message = got.1["message"].as_str().expect("message");
        assert!(message.contains(says), "{url}: {message}");
    }
    let (_, list) = s.get("/v1/webhooks", &key);
    assert_eq!(list["data"]["webhooks"], json!([]));
}

#[test]
fn deliveries_are_signed_in_order_and_survive_a_sigkill() {
    let receiver = Receiver::start();
    let mut s = Server::start_with(&[ALLOW, "--webhook-retry-base-ms", "100"]);
    let t = s.create_tenant("pro");
    let key = s.create_key(&t, &["webhooks.manage"]);
    let (status, created, first) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(json!({"url": receiver.url("/ok/main"), "event_types": ["audit.entry"]})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().expect("id").to_owned();
    let secret = created["data"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();

    let mut positions = vec![first];
    for i in 0..40 {
        let (status, _, p) = call(&s, Method::GET, "/v1/webhooks", &key, None);
        assert_eq!(status, 200);
        positions.push(p);
        if i == 20 {
            s.kill();
            s.spawn();
        }
    }
    let last = *positions.last().expect("a position");
    let got = receiver.wait("/ok/main", Duration::from_secs(30), |r| {
        r.iter().any(|x| position_of(x) == last)
    });

    // In order: a position may come again only right after itself (sent, not yet recorded when
    // the server was killed), with the same webhook-id.
    let seen: Vec<u64> = got.iter().map(position_of).collect();
    for w in seen.windows(2) {
        assert!(w[0] <= w[1], "out of order: {seen:?}");
    }
    for (r, p) in got.iter().zip(&seen) {
        assert_eq!(r["id"], json!(format!("msg_{}_{p}", id.replace('-', ""))));
        let body: Value = serde_json::from_str(r["body"].as_str().expect("body")).expect("JSON");
        assert_eq!(body["type"], json!("audit.entry"));
        assert_eq!(
            body["data"]["entry"]["action"]
                .as_str()
                .map(|a| a.starts_with("webhook.")),
            Some(true)
        );
        assert!(
            body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{body}"
        );
    }
    // No loss: every call made, the create's own entry first, before and after the kill.
    let mut distinct = seen.clone();
    distinct.dedup();
    for p in &positions {
        assert!(
            distinct.contains(p),
            "position {p} never delivered: {distinct:?}"
        );
    }
    assert_eq!(distinct.first(), Some(&first));

    // The reference library verifies every delivery, and refuses each with its body changed.
    let verdicts = verify(&receiver, &[&secret]);
    assert_eq!(verdicts.len(), got.len());
    for v in &verdicts {
        assert_eq!(v["verified"], json!([true]), "{v}");
        assert_eq!(v["tampered_rejected"], json!(true), "{v}");
    }

    // A rotation: both secrets sign during the overlap, each verifies alone.
    let (status, rotated, _) = call(
        &s,
        Method::POST,
        &format!("/v1/webhooks/{id}/rotate-secret"),
        &key,
        None,
    );
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["data"]["secret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert_ne!(new_secret, secret);
    let until = rotated["data"]["previous_secret_expires_at"]
        .as_str()
        .expect("overlap end");
    let until = chrono::DateTime::parse_from_rfc3339(until).expect("a time");
    let hours = (until.timestamp() - chrono::Utc::now().timestamp()) as f64 / 3600.0;
    assert!((23.9..=24.0).contains(&hours), "{hours}");
    let (_, _, after_rotation) = call(&s, Method::GET, "/v1/webhooks", &key, None);
    let got = receiver.wait("/ok/main", Duration::from_secs(30), |r| {
        r.iter().any(|x| position_of(x) == after_rotation)
    });
    let verdicts = verify(&receiver, &[&secret, &new_secret]);
    let last_verdict = verdicts.last().expect("a verdict");
    assert_eq!(
        last_verdict["verified"],
        json!([true, true]),
        "{last_verdict}"
    );
    let signature = got.last().expect("a delivery")["signature"]
        .as_str()
        .expect("signature")
        .to_owned();
    assert_eq!(
        signature
            .split(' ')
            .filter(|s| s.starts_with("v1,"))
            .count(),
        2,
        "{signature}"
    );

    // Delivered through the last event, and the delivery log says so.
    let d = wait_deliveries(&s, &key, &id, |d| {
        d.iter()
            .any(|x| x["position"] == json!(after_rotation) && x["status"] == "delivered")
    });
    assert!(
        d.iter()
            .all(|x| x["status"] == "delivered" && x["response_status"] == json!(200)),
        "{d:?}"
    );

    // Restarted without the operator's flag, the same endpoint is refused at delivery time.
    s.extra.retain(|a| a != ALLOW);
    s.restart();
    let before = receiver.records().len();
    let (status, _, refused_at) = call(&s, Method::GET, "/v1/webhooks", &key, None);
    assert_eq!(status, 200);
    // The first event not yet delivered (an entry of the last delivery log reads, or this
    // call's) is attempted and refused.
    let d = wait_deliveries(&s, &key, &id, |d| {
        d.first().is_some_and(|x| !x["error"].is_null())
    });
    let refused = &d[0];
    assert!(
        refused["position"].as_u64() <= Some(refused_at),
        "{refused}"
    );
    assert_eq!(refused["status"], json!("pending"), "{refused}");
    assert_eq!(refused["response_status"], Value::Null);
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("refused target: url must be https://")),
        "{refused}"
    );
    assert_eq!(receiver.records().len(), before);
}

/// What tests/python/webhook_verify_v1a.py says of each logged request under each public key.
fn verify_v1a(r: &Receiver, public_keys: &[&str]) -> Vec<Value> {
    run_verifier("webhook_verify_v1a.py", r, public_keys)
}

/// The public key of an answer, checked to be `whpk_` and 32 bytes of base64.
fn public_key_of(data: &Value) -> String {
    let pk = data["public_key"].as_str().expect("public_key").to_owned();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(pk.strip_prefix("whpk_").expect("whpk_"))
        .expect("base64");
    assert_eq!(raw.len(), 32, "{pk}");
    pk
}

#[test]
fn ed25519_endpoints_sign_v1a_verified_by_the_public_key_and_rotate() {
    let receiver = Receiver::start();
    let s = Server::start_with(&[ALLOW]);
    let t = s.create_tenant("pro");
    let key = s.create_key(&t, &["webhooks.manage"]);
    let url = receiver.url("/ok/ed");

    let bad = s.post(
        "/v1/webhooks",
        &key,
        json!({"url": url, "event_types": ["audit.entry"], "signature_scheme": "rsa"}),
    );
    assert_eq!(
        bad,
        (
            400,
            json!({"success": false, "code": 4000, "data": null, "message": BAD_SCHEME})
        )
    );

    let (status, created, _) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(json!({"url": url, "event_types": ["audit.entry"], "signature_scheme": "ed25519"})),
    );
    assert_eq!(status, 201, "{created}");
    let w = &created["data"];
    let id = w["id"].as_str().expect("id").to_owned();
    assert_eq!(w["signature_scheme"], json!("ed25519"));
    assert!(w.get("secret").is_none(), "{created}");
    assert_eq!(w["previous_public_key"], Value::Null);
    let first_key = public_key_of(w);

    // The public key is no secret: every read shows it.
    let (status, one) = s.get(&format!("/v1/webhooks/{id}"), &key);
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["data"]["public_key"], json!(first_key));
    assert_eq!(one["data"]["signature_scheme"], json!("ed25519"));
    let (_, list) = s.get("/v1/webhooks", &key);
    assert_eq!(list["data"]["webhooks"][0]["public_key"], json!(first_key));

    // The scheme is fixed at create.
    let patched = s.call(
        Method::PATCH,
        &format!("/v1/webhooks/{id}"),
        Some(&key),
        Some(&json!({"signature_scheme": "hmac-sha256"})),
    );
    assert_eq!(
        patched,
        (
            400,
            json!({"success": false, "code": 4000, "data": null, "message": SCHEME_FIXED})
        )
    );

    let (_, _, last) = call(&s, Method::GET, "/v1/webhooks", &key, None);
    let got = receiver.wait("/ok/ed", Duration::from_secs(30), |r| {
        r.iter().any(|x| position_of(x) == last)
    });
    for r in &got {
        let sig = r["signature"].as_str().expect("signature");
        assert!(
            sig.starts_with("v1a,") && !sig.contains(' '),
            "one v1a signature: {sig}"
        );
    }
    let verdicts = verify_v1a(&receiver, &[&first_key]);
    assert_eq!(verdicts.len(), got.len());
    for v in &verdicts {
        assert_eq!(v["v1a"], json!(1), "{v}");
        assert_eq!(v["verified_by"], json!([0]), "{v}");
        assert_eq!(v["tampered_rejected"], json!(true), "{v}");
    }

    // A rotation: a new key pair; both sign during the overlap, the new one first.
    let (status, rotated, _) = call(
        &s,
        Method::POST,
        &format!("/v1/webhooks/{id}/rotate-secret"),
        &key,
        None,
    );
    assert_eq!(status, 200, "{rotated}");
    let r = &rotated["data"];
    assert!(r.get("secret").is_none(), "{rotated}");
    assert_eq!(r["signature_scheme"], json!("ed25519"));
    let new_key = public_key_of(r);
    assert_ne!(new_key, first_key);
    assert_eq!(r["previous_public_key"], json!(first_key));
    assert!(r["previous_secret_expires_at"].is_string(), "{rotated}");
    let (_, after) = s.get(&format!("/v1/webhooks/{id}"), &key);
    assert_eq!(after["data"]["public_key"], json!(new_key));
    assert_eq!(after["data"]["previous_public_key"], json!(first_key));

    let (_, _, after_rotation) = call(&s, Method::GET, "/v1/webhooks", &key, None);
    let got = receiver.wait("/ok/ed", Duration::from_secs(30), |r| {
        r.iter().any(|x| position_of(x) == after_rotation)
    });
    let verdicts = verify_v1a(&receiver, &[&new_key, &first_key]);
    let (record, verdict) = got
        .iter()
        .zip(&verdicts)
        .rfind(|(r, _)| position_of(r) == after_rotation)
        .expect("the delivery after the rotation");
    assert_eq!(verdict["v1a"], json!(2), "{verdict} {record}");
    assert_eq!(verdict["verified_by"], json!([0, 1]), "{verdict}");
    assert_eq!(verdict["tampered_rejected"], json!(true), "{verdict}");
}

#[test]
fn retries_410_redirects_excerpts_memory_events_and_redelivery() {
    let receiver = Receiver::start();
    let s = Server::start_with(&[
        ALLOW,
        "--webhook-retry-base-ms",
        "100",
        "--webhook-max-attempts",
        "5",
    ]);
    let t = s.create_tenant("pro");
    let key = s.create_key(&t, &["webhooks.manage", "memory.read", "memory.write"]);
    let types = json!(["audit.entry"]);
    // Narrowed from the start to an action nothing here performs, so no entry reaches it before
    // the PATCH below points it at memory.list.
    let (status, v, _) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(
            json!({"url": receiver.url("/fail/2/r"), "event_types": types,
                    "audit_actions": ["memory.history"]}),
        ),
    );
    assert_eq!(status, 201, "{v}");
    let retried = v["data"]["id"].as_str().expect("id").to_owned();
    let (gone, _) = create(&s, &key, &receiver.url("/gone/g"), types.clone());
    let (redirected, _) = create(&s, &key, &receiver.url("/redirect/x"), types.clone());
    let (big, _) = create(&s, &key, &receiver.url("/fail/1000/big"), types.clone());
    let (memories, _) = create(
        &s,
        &key,
        &receiver.url("/ok/memories"),
        json!(["memory.created", "memory.deleted"]),
    );
    // Only audit entries of memory.list reach this one.
    let (status, v, _) = call(
        &s,
        Method::PATCH,
        &format!("/v1/webhooks/{retried}"),
        &key,
        Some(json!({"audit_actions": ["memory.list"]})),
    );
    assert_eq!(status, 200, "{v}");
    let (status, _, listed_at) = call(&s, Method::GET, "/v1/memories", &key, None);
    assert_eq!(status, 200);

    // 500, 500, then 200: three attempts of one delivery, one webhook-id.
    let got = receiver.wait("/fail/2/r", Duration::from_secs(30), |r| r.len() >= 3);
    assert_eq!(
        got.iter().map(|r| r["status"].as_u64()).collect::<Vec<_>>(),
        vec![Some(500), Some(500), Some(200)]
    );
    assert!(got
        .iter()
        .all(|r| r["id"] == got[0]["id"] && position_of(r) == listed_at));
    let d = wait_deliveries(&s, &key, &retried, |d| {
        d.first().is_some_and(|x| x["status"] == "delivered")
    });
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["attempts"], json!(3));
    assert_eq!(d[0]["response_status"], json!(200));
    assert_eq!(d[0]["response_excerpt"], json!("thanks"));
    assert_eq!(d[0]["next_try"], Value::Null);
    assert_eq!(d[0]["position"], json!(listed_at));

    // 410: one attempt, the endpoint disabled.
    let d = wait_deliveries(&s, &key, &gone, |d| !d.is_empty());
    assert_eq!(d[0]["status"], json!("failed"));
    assert_eq!(d[0]["response_status"], json!(410));
    assert_eq!(d[0]["attempts"], json!(1));
    let (_, g) = s.get(&format!("/v1/webhooks/{gone}"), &key);
    assert_eq!(g["data"]["enabled"], json!(false));
    assert_eq!(
        g["data"]["disabled_reason"],
        json!("the endpoint answered 410 Gone")
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.at("/gone/g").len(), 1);

    // A redirect is an answer, not followed: retried, and /ok/redirected never reached.
    let d = wait_deliveries(&s, &key, &redirected, |d| {
        d.first().is_some_and(|x| x["attempts"].as_u64() >= Some(2))
    });
    assert_eq!(d[0]["response_status"], json!(307));
    assert_eq!(d[0]["status"], json!("pending"));
    assert!(receiver.at("/ok/redirected").is_empty());

    // An answer's body is kept to its first 1024 bytes; after the last attempt, failed.
    let d = wait_deliveries(&s, &key, &big, |d| {
        d.iter().any(|x| x["status"] == "failed")
    });
    let failed = d.iter().find(|x| x["status"] == "failed").expect("failed");
    assert_eq!(failed["attempts"], json!(5));
    assert_eq!(failed["response_status"], json!(500));
    assert_eq!(failed["response_excerpt"], json!("x".repeat(1024)));
    assert_eq!(failed["next_try"], Value::Null);
    // The excerpt is sealed: no file of the data dir holds it, though the endpoint's URL (kept
    // in the clear) shows the scan can find what is stored.
    let excerpt = "x".repeat(1024);
    let scanned = crate::forget::scan(&s.data_dir, &[&excerpt, "/fail/1000/big"]);
    assert_eq!(
        scanned.needles(),
        std::collections::BTreeSet::from(["/fail/1000/big"]),
        "{scanned:?}"
    );

    // Memory events: ids and positions, nothing of the content.
    let (status, m, created_at) = call(
        &s,
        Method::POST,
        "/v1/memories",
        &key,
        Some(json!({"content": "a secret thought", "memory_type": "fact", "user_id": "u1"})),
    );
    assert_eq!(status, 200, "{m}");
    let memory_id = m["data"]["id"].as_str().expect("id").to_owned();
    let (status, _, deleted_at) = call(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{memory_id}"),
        &key,
        None,
    );
    assert_eq!(status, 200);
    let got = receiver.wait("/ok/memories", Duration::from_secs(30), |r| r.len() >= 2);
    let bodies: Vec<Value> = got
        .iter()
        .map(|r| serde_json::from_str(r["body"].as_str().expect("body")).expect("JSON"))
        .collect();
    assert_eq!(bodies[0]["type"], json!("memory.created"));
    assert_eq!(bodies[0]["data"]["memory_id"], json!(memory_id));
    // The memory's event is the submission's first; its audit entry (the answer's position)
    // comes right after it.
    assert_eq!(bodies[0]["data"]["position"], json!(created_at - 1));
    assert_eq!(bodies[1]["type"], json!("memory.deleted"));
    assert_eq!(bodies[1]["data"]["memory_ids"], json!([memory_id]));
    assert_eq!(bodies[1]["data"]["position"], json!(deleted_at - 1));
    assert!(got
        .iter()
        .all(|r| !r["body"].as_str().expect("body").contains("secret thought")));

    // Redelivery by hand: a new delivery of the same message, the same webhook-id.
    let first = deliveries(&s, &key, &retried)[0].clone();
    let (status, v, _) = call(
        &s,
        Method::POST,
        &format!(
            "/v1/webhooks/{retried}/deliveries/{}/redeliver",
            first["id"].as_str().expect("id")
        ),
        &key,
        None,
    );
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["data"]["redelivery_of"], first["id"]);
    assert_eq!(v["data"]["status"], json!("pending"));
    let got = receiver.wait("/fail/2/r", Duration::from_secs(30), |r| r.len() >= 4);
    assert_eq!(got[3]["id"], got[0]["id"]);
    let d = wait_deliveries(&s, &key, &retried, |d| {
        d.iter()
            .any(|x| x["redelivery_of"] == first["id"] && x["status"] == "delivered")
    });
    assert_eq!(d.len(), 2, "{d:?}");
    // A disabled endpoint takes no redelivery.
    let gone_delivery = deliveries(&s, &key, &gone)[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_error(
        &s.post(
            &format!("/v1/webhooks/{gone}/deliveries/{gone_delivery}/redeliver"),
            &key,
            json!({}),
        ),
        409,
        4090,
    );
    drop(memories);
}

#[test]
fn a_hanging_endpoint_of_one_tenant_does_not_delay_another_tenant() {
    let receiver = Receiver::start();
    let s = Server::start_with(&[
        ALLOW,
        "--webhook-timeout-ms",
        "3000",
        "--webhook-retry-base-ms",
        "100",
        "--webhook-concurrency",
        "4",
    ]);
    let a = s.create_tenant("pro");
    let a_key = s.create_key(&a, &["webhooks.manage"]);
    let b = s.create_tenant("pro");
    let b_key = s.create_key(&b, &["webhooks.manage"]);
    // Every attempt to A's endpoints hangs until the timeout: more of them than there are
    // permits would take every permit, if a hanging request could hold one beyond it.
    for i in 0..3 {
        create(
            &s,
            &a_key,
            &receiver.url(&format!("/hang/30/a{i}")),
            json!(["audit.entry"]),
        );
    }
    create(&s, &b_key, &receiver.url("/ok/b"), json!(["audit.entry"]));
    for _ in 0..5 {
        call(&s, Method::GET, "/v1/webhooks", &a_key, None);
    }
    receiver.wait("/hang/30/a0", Duration::from_secs(10), |r| !r.is_empty());
    let mut lags = Vec::new();
    for _ in 0..10 {
        let (_, _, p) = call(&s, Method::GET, "/v1/webhooks", &b_key, None);
        let sent = Instant::now();
        receiver.wait("/ok/b", Duration::from_secs(10), |r| {
            r.iter().any(|x| position_of(x) == p)
        });
        lags.push(sent.elapsed());
    }
    let worst = lags.iter().max().expect("lags");
    assert!(
        *worst < Duration::from_millis(1500),
        "B waited {worst:?} behind A: {lags:?}"
    );
}

#[test]
fn an_entry_erased_before_its_delivery_succeeds_goes_out_erased() {
    let receiver = Receiver::start();
    // Two failed attempts, 1.5 s then 6 s apart: the erasure lands before the third.
    let s = Server::start_with(&[ALLOW, "--webhook-retry-base-ms", "1500"]);
    let t = s.create_tenant("pro");
    let key = s.create_key(&t, &["webhooks.manage", "memory.write", "memory.erase"]);
    let path = "/fail/2/erased";
    let (status, v, _) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(
            json!({"url": receiver.url(path), "event_types": ["audit.entry"],
                    "audit_actions": ["memory.write"]}),
        ),
    );
    assert_eq!(status, 201, "{v}");
    let agent = "the-erased-agent/7.7";
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("user-agent", agent)
        .json(&json!({"content": "Dana lives in Lyon", "memory_type": "fact", "user_id": "dana"}))
        .send()
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    // The first attempt carried the entry as it stood.
    let first = receiver.wait(path, Duration::from_secs(30), |r| !r.is_empty());
    assert!(
        first[0]["body"].as_str().expect("body").contains(agent),
        "{first:?}"
    );
    let (status, v) = s.post("/v1/erasures", &key, json!({"user_id": "dana"}));
    assert_eq!(status, 201, "{v}");
    let erased_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();

    let got = receiver.wait(path, Duration::from_secs(30), |r| {
        r.last().is_some_and(|x| x["status"] == json!(200))
    });
    let after: Vec<&Value> = got
        .iter()
        .filter(|r| r["at"].as_f64().expect("at") > erased_at)
        .collect();
    assert!(!after.is_empty(), "{got:?}");
    for r in after {
        assert_eq!(r["id"], got[0]["id"], "one delivery, retried");
        let body = r["body"].as_str().expect("body");
        assert!(!body.contains(agent), "{body}");
        let payload: Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(payload["data"]["entry"]["erased"], json!(true), "{payload}");
        assert_eq!(
            payload["data"]["entry"]["user_agent"],
            Value::Null,
            "{payload}"
        );
    }
}

/// The delivery log is bounded (docs/WEBHOOKS.md, "The delivery log"): past 100 deliveries an
/// endpoint keeps its pending ones and its latest settled ones, the oldest settled are gone
/// (a redelivery of one is 404), and a restart and a replay keep exactly the same.
#[test]
fn the_delivery_log_keeps_pending_and_latest_settled_through_restart_and_replay() {
    let receiver = Receiver::start();
    // A failed attempt is retried only after ten minutes: it stays pending for the test.
    let mut s = Server::start_with(&[ALLOW, "--webhook-retry-base-ms", "600000"]);
    let t = s.create_tenant("pro");
    let key = s.create_key(&t, &["webhooks.manage"]);
    // Only the lists' entries reach it: the test's other calls add no delivery.
    let (status, v, _) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(
            json!({"url": receiver.url("/ok/bound"), "event_types": ["audit.entry"],
                    "audit_actions": ["webhook.list"]}),
        ),
    );
    assert_eq!(status, 201, "{v}");
    let id = v["data"]["id"].as_str().expect("id").to_owned();
    let list = |s: &Server| {
        let (status, _, p) = call(s, Method::GET, "/v1/webhooks", &key, None);
        assert_eq!(status, 200);
        p
    };

    // 100 deliveries, all kept and shown.
    let positions: Vec<u64> = (0..100).map(|_| list(&s)).collect();
    let last = positions[99];
    let d = wait_deliveries(&s, &key, &id, |d| {
        d.len() == 100 && d[0]["position"] == json!(last) && d[0]["status"] == "delivered"
    });
    let mut delivered = d.clone();
    delivered.reverse();
    let shown: Vec<u64> = delivered
        .iter()
        .map(|x| x["position"].as_u64().expect("position"))
        .collect();
    assert_eq!(shown, positions);
    let ids: Vec<String> = delivered
        .iter()
        .map(|x| x["id"].as_str().expect("id").to_owned())
        .collect();

    // One more event to a failing URL: pending, and the oldest delivery makes room for it.
    let (status, v, _) = call(
        &s,
        Method::PATCH,
        &format!("/v1/webhooks/{id}"),
        &key,
        Some(json!({"url": receiver.url("/fail/1000/bound")})),
    );
    assert_eq!(status, 200, "{v}");
    let pending_at = list(&s);
    wait_deliveries(&s, &key, &id, |d| {
        d[0]["position"] == json!(pending_at) && d[0]["status"] == "pending"
    });
    // Three redeliveries by hand (each one attempt, to the failing URL): three more go.
    let mut redelivered = Vec::new();
    for i in [49, 50, 51] {
        let (status, v, _) = call(
            &s,
            Method::POST,
            &format!("/v1/webhooks/{id}/deliveries/{}/redeliver", ids[i]),
            &key,
            None,
        );
        assert_eq!(status, 202, "{v}");
        redelivered.push(v["data"]["id"].as_str().expect("id").to_owned());
    }
    let d = wait_deliveries(&s, &key, &id, |d| {
        d.iter()
            .filter(|x| !x["redelivery_of"].is_null() && x["status"] == "failed")
            .count()
            == 3
    });

    // Newest first: the three redeliveries (failed), the pending one, then the 96 latest
    // deliveries; the four oldest are gone.
    let got: Vec<(String, u64, String)> = d
        .iter()
        .map(|x| {
            (
                x["id"].as_str().expect("id").to_owned(),
                x["position"].as_u64().expect("position"),
                x["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect();
    let mut want: Vec<(String, u64, String)> = redelivered
        .iter()
        .zip([49, 50, 51])
        .rev()
        .map(|(r, i)| (r.clone(), positions[i], "failed".to_owned()))
        .collect();
    want.push((
        d[3]["id"].as_str().expect("id").to_owned(),
        pending_at,
        "pending".to_owned(),
    ));
    want.extend(
        (4..100)
            .rev()
            .map(|i| (ids[i].clone(), positions[i], "delivered".to_owned())),
    );
    assert_eq!(got, want);
    assert_eq!(d[3]["attempts"], json!(1));
    for (x, i) in d[..3].iter().zip([51, 50, 49]) {
        assert_eq!(x["redelivery_of"], json!(ids[i]), "{x}");
        assert_eq!(x["response_status"], json!(500), "{x}");
    }
    for gone in &ids[..4] {
        assert_error(
            &s.post(
                &format!("/v1/webhooks/{id}/deliveries/{gone}/redeliver"),
                &key,
                json!({}),
            ),
            404,
            4040,
        );
    }

    // A restart and a replay of the log keep exactly the same log.
    s.restart();
    assert_eq!(deliveries(&s, &key, &id), d);
    s.stop();
    let tmp = tempfile::tempdir().expect("tempdir");
    let replayed = tmp.path().join("replayed");
    common::replayed_copy(&s.data_dir, &replayed);
    let r = Server::start_on_with(&replayed, &["--webhook-delivery", "false"]);
    assert_eq!(deliveries(&r, &key, &id), d);
}

/// `auditmem_webhook_records_read_total`: log records read by endpoints' next-event lookups.
fn records_read(s: &Server) -> u64 {
    common::metric(s, "auditmem_webhook_records_read_total").map_or(0, |v| v as u64)
}

/// The type and `data.position` of each request.
fn typed_positions(got: &[Value]) -> Vec<(String, u64)> {
    got.iter()
        .map(|r| {
            let body: Value =
                serde_json::from_str(r["body"].as_str().expect("body")).expect("JSON");
            let kind = body["type"].as_str().expect("type").to_owned();
            (kind, position_of(r))
        })
        .collect()
}

#[test]
fn a_quiet_tenants_endpoints_read_only_its_own_events_in_a_busy_log() {
    let receiver = Receiver::start();
    let mut s = Server::start_with(&[ALLOW, "--webhook-retry-base-ms", "100"]);
    let busy = s.create_tenant("pro");
    let quiet = s.create_tenant("pro");
    let key = s.create_key(&quiet, &["webhooks.manage", "memory.write"]);
    let (memories, _) = create(
        &s,
        &key,
        &receiver.url("/ok/memories"),
        json!(["memory.created", "memory.deleted"]),
    );
    let (status, v, mixed_at) = call(
        &s,
        Method::POST,
        "/v1/webhooks",
        &key,
        Some(json!({"url": receiver.url("/ok/mixed"),
                    "event_types": ["audit.entry", "memory.created", "memory.deleted"]})),
    );
    assert_eq!(status, 201, "{v}");
    // Given the busy tenant's 5,000 records around the quiet tenant's memory written and
    // deleted,
    common::ingest_filler(&s, &busy, 2_000);
    let (status, m, created_at) = call(
        &s,
        Method::POST,
        "/v1/memories",
        &key,
        Some(json!({"content": "a quiet fact", "memory_type": "fact", "user_id": "u1"})),
    );
    assert_eq!(status, 200, "{m}");
    let memory_id = m["data"]["id"].as_str().expect("id").to_owned();
    common::ingest_filler(&s, &busy, 2_000);
    let (status, _, deleted_at) = call(
        &s,
        Method::DELETE,
        &format!("/v1/memories/{memory_id}"),
        &key,
        None,
    );
    assert_eq!(status, 200);
    common::ingest_filler(&s, &busy, 1_000);

    // then the memory endpoint is sent exactly its two events, in order (each the record
    // right before its request's audit entry),
    let created = ("memory.created".to_owned(), created_at - 1);
    let deleted = ("memory.deleted".to_owned(), deleted_at - 1);
    let got = receiver.wait("/ok/memories", Duration::from_secs(30), |r| r.len() >= 2);
    assert_eq!(
        typed_positions(&got),
        vec![created.clone(), deleted.clone()]
    );
    // the mixed one its audit entries and memory events merged in log order,
    let mixed = receiver.wait("/ok/mixed", Duration::from_secs(30), |r| {
        r.iter().any(|x| position_of(x) == deleted_at)
    });
    let entry = |p: u64| ("audit.entry".to_owned(), p);
    assert_eq!(
        typed_positions(&mixed),
        vec![
            entry(mixed_at),
            created,
            entry(created_at),
            deleted,
            entry(deleted_at)
        ]
    );
    // and the lookups read from the log only what they sent, none of the busy tenant's
    // records (a pass over the log past a cursor would read thousands).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(records_read(&s), 7);
    assert_eq!(receiver.at("/ok/memories").len(), 2);
    assert_eq!(receiver.at("/ok/mixed").len(), 5);

    // After a restart (the lists rebuilt from their blocks), the same.
    s.restart();
    common::ingest_filler(&s, &busy, 2_000);
    let (status, _, again_at) = call(
        &s,
        Method::POST,
        "/v1/memories",
        &key,
        Some(json!({"content": "another quiet fact", "memory_type": "fact", "user_id": "u1"})),
    );
    assert_eq!(status, 200);
    let got = receiver.wait("/ok/memories", Duration::from_secs(30), |r| r.len() >= 3);
    assert_eq!(
        typed_positions(&got[2..]),
        vec![("memory.created".to_owned(), again_at - 1)]
    );
    receiver.wait("/ok/mixed", Duration::from_secs(30), |r| {
        r.iter().any(|x| position_of(x) == again_at)
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(records_read(&s), 3);
    assert_eq!(receiver.at("/ok/memories").len(), 3);
    assert_eq!(receiver.at("/ok/mixed").len(), 7);
    drop(memories);
}
