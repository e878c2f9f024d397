//! The `auditmem admin` subcommands against a real server, automatic checkpoints, timeouts.

use crate::common;

use std::io::{Read, Write};
use std::time::Duration;

use common::{cli, Server, ADMIN_TOKEN};
use serde_json::{json, Value};

#[test]
fn admin_cli_manages_tenants_and_keys() {
    let s = Server::start();
    let env = [
        ("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN),
        ("AUDITMEM_URL", s.url.as_str()),
    ];
    let run = |args: &[&str]| -> Value {
        let (code, out, err) = cli(args, &env);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        serde_json::from_str(&out).unwrap_or_else(|_| panic!("{args:?} printed no JSON: {out}"))
    };
    let t = run(&[
        "admin",
        "tenant",
        "create",
        "--name",
        "acme",
        "--plan",
        "pro",
        "--credits",
        "7",
    ]);
    assert_eq!(
        (t["plan"].clone(), t["credits"].clone()),
        (json!("pro"), json!(7.0))
    );
    let id = t["id"].as_str().expect("id").to_string();
    let list = run(&["admin", "tenant", "list"]);
    assert_eq!(list["total"], json!(1));
    let updated = run(&[
        "admin",
        "tenant",
        "update",
        &id,
        "--plan",
        "business",
        "--subscription-active",
        "false",
    ]);
    assert_eq!(
        (
            updated["plan"].clone(),
            updated["subscription_active"].clone()
        ),
        (json!("business"), json!(false))
    );
    assert_eq!(
        run(&["admin", "tenant", "get", &id])["plan"],
        json!("business")
    );
    let key = run(&[
        "admin",
        "key",
        "create",
        &id,
        "--permissions",
        "audit.read,memory.read",
        "--name",
        "ci",
    ]);
    assert_eq!(key["permissions"], json!(["audit.read", "memory.read"]));
    let revoked = run(&[
        "admin",
        "key",
        "revoke",
        key["id"].as_str().expect("key id"),
    ]);
    assert_eq!(revoked["revoked"], json!(true));
    let head = run(&["admin", "head"]);
    assert_eq!(head["seq"], json!(4));
    let cp = run(&["admin", "checkpoint"]);
    assert_eq!(cp["seq"], json!(4));
    assert_eq!(cp["hash"], head["hash"]);
    let pk = run(&["admin", "pubkey"]);
    assert_eq!(pk["public_key"], cp["public_key"]);

    // Errors: the envelope's message and code, exit 2.
    let (code, _, err) = cli(
        &["admin", "tenant", "create", "--name", "x", "--plan", "gold"],
        &env,
    );
    assert_eq!(code, 2);
    assert!(err.contains("400") && err.contains("4000"), "{err}");
    let (code, _, err) = cli(
        &["admin", "tenant", "list"],
        &[
            ("AUDITMEM_ADMIN_TOKEN", "nope"),
            ("AUDITMEM_URL", s.url.as_str()),
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("401"), "{err}");
}

#[test]
fn checkpoints_are_signed_every_n_records() {
    let mut s = Server::start_with(&[
        "--checkpoint-every",
        "5",
        "--checkpoint-interval-secs",
        "3600",
    ]);
    let tenant = s.create_tenant("free");
    for _ in 0..3 {
        let entries: Vec<Value> = (0..5)
            .map(|_| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}))
            .collect();
        let (status, _) = s.admin(
            reqwest::Method::POST,
            "/admin/v1/audit/logs",
            Some(json!({"entries": entries})),
        );
        assert_eq!(status, 200);
    }
    // Signing runs beside the request path: poll the file until the head is signed.
    let file = s.checkpoints_file();
    let mut seqs = Vec::new();
    for _ in 0..200 {
        seqs = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["seq"].as_u64())
            .collect();
        if seqs.last() == Some(&16) {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(seqs.last(), Some(&16), "{seqs:?}");
    assert!(
        seqs.len() >= 2 && seqs.windows(2).all(|w| w[0] < w[1]),
        "{seqs:?}"
    );
    s.stop();
    let (code, out, _) = cli(
        &[
            "verify",
            "--data-dir",
            common::path_str(&s.data_dir),
            "--checkpoints",
            common::path_str(&file),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("{} checkpoint(s) checked", seqs.len())),
        "{out}"
    );
}

#[test]
fn a_stalled_request_times_out_with_the_envelope() {
    let s = Server::start_with(&["--request-timeout-secs", "1"]);
    let addr = s.url.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // Promise a body and never send most of it.
    write!(
        conn,
        "POST /admin/v1/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"na"
    )
    .expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&buf).contains("\"data\":null") {
        let n = conn.read(&mut chunk).expect("read");
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("\"code\":4080") && text.contains("\"success\":false"),
        "{text}"
    );
}
