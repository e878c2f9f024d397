//! The admin API's door: the throttle on failed authentication, the minimum token length, the
//! ingest-only token and the admin listener.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{json, Value};

use crate::common::{self, assert_error, Launch, Server, ADMIN_TOKEN};

/// A client whose connections come from the loopback address `from`.
fn client_from(from: &str) -> Client {
    Client::builder()
        .local_address(from.parse::<IpAddr>().expect("address"))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// `GET /admin/v1/tenants` with `token` (and headers): status, `Retry-After`, body.
fn tenants(
    c: &Client,
    url: &str,
    token: &str,
    headers: &[(&str, &str)],
) -> (u16, Option<u64>, Value) {
    let mut r = c.get(format!("{url}/admin/v1/tenants")).bearer_auth(token);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.send().expect("send");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (status, retry, resp.json().expect("json"))
}

/// By default a source may fail 10 times a minute: the 11th wrong token is 429 (4290) with
/// `Retry-After`, and so is the right token from that source (a throttled source learns nothing
/// about any token); another source is not affected, right token or wrong.
#[test]
fn failed_admin_authentication_is_throttled_per_source() {
    let s = Server::start();
    let here = client_from("127.0.0.1");
    for i in 0..10 {
        let (status, _, v) = tenants(&here, &s.url, &format!("wrong-{i}"), &[]);
        assert_error(&(status, v), 401, 4010);
    }
    let (status, retry, v) = tenants(&here, &s.url, "wrong-10", &[]);
    assert_error(&(status, v.clone()), 429, 4290);
    assert_eq!(retry, Some(6), "one failure back every 6 s");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("retry after 6 s")),
        "{v}"
    );
    let (status, _, v) = tenants(&here, &s.url, ADMIN_TOKEN, &[]);
    assert_error(&(status, v), 429, 4290);
    // A request without a token is refused the same while the source is throttled.
    let resp = here
        .get(format!("{}/admin/v1/tenants", s.url))
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 429);

    let there = client_from("127.0.0.2");
    let (status, _, v) = tenants(&there, &s.url, ADMIN_TOKEN, &[]);
    assert_eq!(status, 200, "{v}");
    let (status, _, v) = tenants(&there, &s.url, "wrong", &[]);
    assert_error(&(status, v), 401, 4010);
}

/// A throttled source gets in again once `Retry-After` has passed; behind a trusted proxy the
/// source is the forwarded client, so one client's failures do not lock out the proxy's others.
#[test]
fn a_throttled_source_gets_in_after_retry_after_and_sources_are_the_forwarded_clients() {
    let s = Server::launch(
        &["--trust-proxy"],
        Launch {
            envs: &[("AUDITMEM_ADMIN_AUTH_FAILURES_PER_MIN", "60")],
            ..Launch::default()
        },
    );
    let c = client_from("127.0.0.1");
    let attacker = [("x-forwarded-for", "203.0.113.66")];
    for i in 0..60 {
        let (status, _, v) = tenants(&c, &s.url, &format!("wrong-{i}"), &attacker);
        assert_error(&(status, v), 401, 4010);
    }
    // The bucket refills by one a second while this runs, so the refusal may take a few more.
    let mut tries = 0;
    let (retry, v) = loop {
        let (status, retry, v) = tenants(&c, &s.url, "wrong", &attacker);
        if status == 429 {
            break (retry, v);
        }
        assert_error(&(status, v), 401, 4010);
        tries += 1;
        assert!(tries < 10, "no 429 after {} wrong tokens", 60 + tries);
    };
    assert_error(&(429, v), 429, 4290);
    assert_eq!(retry, Some(1));
    let (status, _, _) = tenants(&c, &s.url, ADMIN_TOKEN, &attacker);
    assert_eq!(status, 429);

    // The operator, another client of the same proxy.
    let operator = [("x-forwarded-for", "198.51.100.7")];
    let (status, _, v) = tenants(&c, &s.url, ADMIN_TOKEN, &operator);
    assert_eq!(status, 200, "{v}");

    // After Retry-After the right token is let in (and does not take from the bucket).
    let locked_at = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let (status, _, v) = tenants(&c, &s.url, ADMIN_TOKEN, &attacker);
    assert_eq!(status, 200, "after {:?}: {v}", locked_at.elapsed());
    let (status, _, _) = tenants(&c, &s.url, ADMIN_TOKEN, &attacker);
    assert_eq!(status, 200);
}

/// Starts `serve` with `envs` and `args`, and returns its exit code and stderr if it exits
/// before listening; a server that does start is stopped and `None` returned.
fn start_outcome(envs: &[(&str, &str)], args: &[&str]) -> Option<(i32, String)> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(common::bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("d"))
        .arg("--signing-key")
        .arg(tmp.path().join("k"))
        .arg("--checkpoints-file")
        .arg(tmp.path().join("c"))
        .args(args)
        .env_remove("AUDITMEM_ADMIN_TOKEN")
        .env("AUDITMEM_LOG", "error")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let listening = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("auditmem listening on "));
    if listening {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    let out = child.wait_with_output().expect("wait");
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    ))
}

/// An admin (or ingest) token under 32 bytes stops `serve` at start, naming the rule and the
/// flag for local development, which lets it start.
#[test]
fn short_admin_tokens_are_refused_at_start_unless_allowed_for_development() {
    let long = "0123456789abcdef0123456789abcdef";
    let refused = start_outcome(&[("AUDITMEM_ADMIN_TOKEN", "dev-secret")], &[])
        .expect("a 10-byte admin token was accepted");
    assert_ne!(refused.0, 0);
    assert!(
        refused
            .1
            .contains("AUDITMEM_ADMIN_TOKEN is 10 bytes; at least 32 are required")
            && refused.1.contains("--insecure-short-admin-token"),
        "{}",
        refused.1
    );
    let refused = start_outcome(
        &[
            ("AUDITMEM_ADMIN_TOKEN", long),
            ("AUDITMEM_INGEST_TOKEN", "short"),
        ],
        &[],
    )
    .expect("a 5-byte ingest token was accepted");
    assert!(
        refused.1.contains("AUDITMEM_INGEST_TOKEN is 5 bytes"),
        "{}",
        refused.1
    );
    // An ingest token needs the admin API, and must not be its token.
    let refused = start_outcome(&[("AUDITMEM_INGEST_TOKEN", long)], &[])
        .expect("an ingest token without an admin token was accepted");
    assert!(
        refused.1.contains("needs AUDITMEM_ADMIN_TOKEN"),
        "{}",
        refused.1
    );
    let refused = start_outcome(
        &[
            ("AUDITMEM_ADMIN_TOKEN", long),
            ("AUDITMEM_INGEST_TOKEN", long),
        ],
        &[],
    )
    .expect("an ingest token equal to the admin token was accepted");
    assert!(refused.1.contains("must differ"), "{}", refused.1);

    // 32 bytes, or the development flag (the README's tour), start.
    assert_eq!(start_outcome(&[("AUDITMEM_ADMIN_TOKEN", long)], &[]), None);
    let s = Server::launch(
        &["--insecure-short-admin-token"],
        Launch {
            envs: &[("AUDITMEM_ADMIN_TOKEN", "dev-secret")],
            ..Launch::default()
        },
    );
    let resp = Client::new()
        .get(format!("{}/admin/v1/tenants", s.url))
        .bearer_auth("dev-secret")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
}

const INGEST_TOKEN: &str = "ingest-token-7d0b4c2e91f35a68-gateway";

/// The ingest token may call `POST /admin/v1/audit/logs` and nothing else: every other admin
/// route is 403 (4030) for it; an unknown token stays 401.
#[test]
fn the_ingest_token_may_only_ingest() {
    let s = Server::launch(
        &[],
        Launch {
            envs: &[("AUDITMEM_INGEST_TOKEN", INGEST_TOKEN)],
            ..Launch::default()
        },
    );
    let (tenant, key) = s.tenant_with_key("business");
    let entry =
        json!({"entries": [{"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}]});
    let (status, v) = s.call(
        reqwest::Method::POST,
        "/admin/v1/audit/logs",
        Some(INGEST_TOKEN),
        Some(&entry),
    );
    assert_eq!(status, 200, "{v}");
    let (_, v) = s.get("/v1/audit/logs?action=gateway.chat", &key);
    assert_eq!(v["data"]["total"], json!(1), "{v}");

    use reqwest::Method;
    let some_id = "00000000-0000-0000-0000-000000000000";
    for (method, path, body) in [
        (Method::GET, "/admin/v1/tenants".to_string(), None),
        (
            Method::POST,
            "/admin/v1/tenants".to_string(),
            Some(json!({"name": "x", "plan": "free"})),
        ),
        (Method::GET, format!("/admin/v1/tenants/{tenant}"), None),
        (
            Method::PATCH,
            format!("/admin/v1/tenants/{tenant}"),
            Some(json!({"credits": 5})),
        ),
        (
            Method::POST,
            format!("/admin/v1/tenants/{tenant}/keys"),
            Some(json!({"permissions": ["audit.read"]})),
        ),
        (Method::DELETE, format!("/admin/v1/keys/{some_id}"), None),
        (Method::GET, "/admin/v1/log".to_string(), None),
        (Method::GET, "/admin/v1/log/head".to_string(), None),
        (Method::GET, "/admin/v1/log/checkpoint".to_string(), None),
        (Method::POST, "/admin/v1/log/checkpoint".to_string(), None),
        (Method::GET, "/admin/v1/log/pubkey".to_string(), None),
    ] {
        let resp = s.call(method.clone(), &path, Some(INGEST_TOKEN), body.as_ref());
        assert_error(&resp, 403, 4030);
        assert!(
            resp.1["message"]
                .as_str()
                .is_some_and(|m| m.contains("POST /admin/v1/audit/logs")),
            "{method} {path}: {}",
            resp.1
        );
    }
    assert_error(
        &s.call(
            Method::POST,
            "/admin/v1/audit/logs",
            Some("ingest-token-7d0b4c2e91f35a68-gatewax"),
            Some(&entry),
        ),
        401,
        4010,
    );
    // The admin token still opens everything.
    assert_eq!(s.admin(Method::GET, "/admin/v1/tenants", None).0, 200);
}

/// With `--admin-listen` the admin API is served on that listener alone (404 on the public
/// one, right token or not) and nothing else is; a port alone binds loopback.
#[test]
fn the_admin_api_can_have_a_listener_of_its_own() {
    let s = Server::launch(
        &[],
        Launch {
            envs: &[("AUDITMEM_ADMIN_LISTEN", "0")],
            ..Launch::default()
        },
    );
    let admin = s.admin_url.clone().expect("the admin listener's line");
    assert!(admin.starts_with("http://127.0.0.1:"), "{admin}");
    assert_ne!(admin, s.url);
    let c = Client::new();
    let get = |url: String, token: Option<&str>| {
        let mut r = c.get(url);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let resp = r.send().expect("send");
        (resp.status().as_u16(), resp.json::<Value>().expect("json"))
    };
    assert_error(
        &get(format!("{}/admin/v1/tenants", s.url), Some(ADMIN_TOKEN)),
        404,
        4040,
    );
    assert_error(
        &get(format!("{}/admin/v1/log/head", s.url), Some(ADMIN_TOKEN)),
        404,
        4040,
    );
    let (status, v) = get(format!("{admin}/admin/v1/tenants"), Some(ADMIN_TOKEN));
    assert_eq!(status, 200, "{v}");
    assert_error(&get(format!("{admin}/admin/v1/tenants"), None), 401, 4010);
    assert_error(&get(format!("{admin}/healthz"), None), 404, 4040);
    assert_error(&get(format!("{admin}/v1/audit/logs"), None), 404, 4040);
    let (status, _) = get(format!("{}/healthz", s.url), None);
    assert_eq!(status, 200);
    assert_error(&get(format!("{}/v1/audit/logs", s.url), None), 401, 4010);

    // Without an admin API there is nothing to listen for.
    let refused = start_outcome(&[], &["--admin-listen", "0"])
        .expect("--admin-listen without a token was accepted");
    assert!(
        refused.1.contains("needs AUDITMEM_ADMIN_TOKEN"),
        "{}",
        refused.1
    );
}
