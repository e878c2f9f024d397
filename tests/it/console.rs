//! The console (docs/CONSOLE.md): its answers' headers from the real server, and the whole
//! console end to end in Debian's chromium (`tests/console/e2e.mjs`, playwright-core) against
//! a real server this test starts and seeds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{path_str, Server, ADMIN_TOKEN};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fetch(s: &Server, path: &str) -> reqwest::blocking::Response {
    s.raw()
        .get(format!("{}{path}", s.url))
        .send()
        .expect("request")
}

fn header(r: &reqwest::blocking::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The headers every console answer carries, 404s included.
fn assert_console_headers(r: &reqwest::blocking::Response, what: &str) {
    assert_eq!(
        header(r, "content-security-policy"),
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        "{what}"
    );
    assert_eq!(header(r, "x-frame-options"), "DENY", "{what}");
    assert_eq!(header(r, "x-content-type-options"), "nosniff", "{what}");
    assert_eq!(header(r, "referrer-policy"), "no-referrer", "{what}");
    assert!(
        r.headers().get("set-cookie").is_none(),
        "{what} sets a cookie"
    );
}

#[test]
fn console_assets_are_served_with_a_strict_policy_and_no_cookie() {
    let s = Server::start();
    let page = fetch(&s, "/console/");
    assert_eq!(page.status().as_u16(), 200);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    assert_console_headers(&page, "/console/");
    let html = page.text().expect("body");
    assert!(html.contains(r#"<script type="module" src="app.js"></script>"#));

    let listed: Vec<(&str, &str)> = auditmem::api::console::assets().collect();
    for (name, content_type) in &listed {
        let r = fetch(&s, &format!("/console/{name}"));
        assert_eq!(r.status().as_u16(), 200, "{name}");
        assert_eq!(header(&r, "content-type"), *content_type, "{name}");
        assert_console_headers(&r, name);
        let text = r.text().expect("body");
        // No inline script or style the policy would block, no code from text, no remote
        // origin (the SVG namespace is a name, not a fetch).
        assert!(
            !text.contains(" style=") && !text.contains("setAttribute(\"style\""),
            "{name}"
        );
        assert!(
            !text.contains("innerHTML") && !text.contains("eval("),
            "{name}"
        );
        let remote = text
            .replace("http://www.w3.org/2000/svg", "")
            .replace("http://127.0.0.1", "");
        assert!(
            !remote.contains("http://") && !remote.contains("https://"),
            "{name}: {remote}"
        );
    }
    // Every file of console/ is served, and nothing else is.
    let mut on_disk: Vec<String> = std::fs::read_dir(repo().join("console"))
        .expect("console/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut served: Vec<String> = listed.iter().map(|(n, _)| n.to_string()).collect();
    served.sort();
    assert_eq!(served, on_disk);

    for missing in [
        "/console/nope.js",
        "/console/..%2fCargo.toml",
        "/console/a/b",
    ] {
        let r = fetch(&s, missing);
        assert_eq!(r.status().as_u16(), 404, "{missing}");
        assert_console_headers(&r, missing);
        assert_eq!(header(&r, "content-type"), "application/json");
        let v: Value = r.json().expect("json");
        assert_eq!(v["code"], json!(4040), "{missing}");
    }

    let no_follow = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let r = no_follow
        .get(format!("{}/console", s.url))
        .send()
        .expect("request");
    assert_eq!(r.status().as_u16(), 308);
    assert_eq!(header(&r, "location"), "/console/");
}

fn ingest(s: &Server, entries: Value) {
    let (st, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({ "entries": entries })),
    );
    assert_eq!(st, 200, "{v}");
}

fn tenant(s: &Server, name: &str, plan: &str) -> (String, String) {
    let (st, v) = s.admin(
        Method::POST,
        "/admin/v1/tenants",
        Some(json!({"name": name, "plan": plan})),
    );
    assert_eq!(st, 201, "{v}");
    let id = v["data"]["id"].as_str().expect("id").to_string();
    let key = s.create_key(
        &id,
        &[
            "audit.read",
            "audit.export",
            "memory.read",
            "memory.write",
            "memory.erase",
        ],
    );
    (id, key)
}

/// Runs the browser script `script` of tests/console under node with `envs`, in Debian's
/// chromium (CHROMIUM overrides it): its stdout, once it exited 0.
fn run_in_chromium(script: &str, envs: &[(&str, &str)]) -> String {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    require(Path::new(&chromium), "chromium");
    let tests = repo().join("tests/console");
    require(
        &tests.join("node_modules/playwright-core/package.json"),
        "playwright-core",
    );
    let out = Command::new("node")
        .arg(tests.join(script))
        .current_dir(&tests)
        .envs(envs.iter().copied())
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): install it with .ci/setup"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

fn require(path: &Path, what: &str) {
    assert!(
        path.exists(),
        "{what} is missing ({}): run `bash .ci/setup-tests` (apt-get install chromium; \
         npm ci --prefix tests/console)",
        path.display()
    );
}

/// A checkpoint signed by a log key and cosigned by a witness with the crate's own
/// `CosignatureSigner` (the code `auditmem witness` signs with), at a fixed time, for the
/// console's cosignature check (console/verify.js) to verify under node: the note, the log's
/// and the witness's verifier keys, another key of the same witness name, and a witness key
/// of small order with a signature that plain Ed25519 accepts and `verify_strict` refuses.
fn cosignature_vector() -> Value {
    use auditmem::tlog::cosignature::{CosignatureSigner, CosignatureVerifier};
    use base64::prelude::{Engine as _, BASE64_STANDARD};
    use ed25519_dalek::{SigningKey, VerifyingKey};
    use signed_note::{Note, Signer, Verifier};

    const TIME: u64 = 1_700_000_000;
    let log = SigningKey::from_bytes(&[21; 32]);
    let origin = "console.test/log";
    let signer = auditmem::tlog::note::signer(origin, &log).expect("log signer");
    let note = auditmem::tlog::note::sign(&signer, 7, &tlog_tiles::Hash([5; 32])).expect("sign");
    let witness = CosignatureSigner::new("witness.test/w1", SigningKey::from_bytes(&[22; 32]))
        .expect("witness")
        .with_clock(|| TIME);
    let mut cosigned = Note::from_bytes(note.as_bytes()).expect("note");
    cosigned
        .add_sigs(&[&witness as &dyn Signer])
        .expect("cosign");
    let cosigned = String::from_utf8(cosigned.to_bytes()).expect("utf8");
    // The Rust side verifies what it hands over.
    let v = CosignatureVerifier::new(&witness.verifier_key()).expect("vkey");
    let body = note.split_once("\n\n").expect("note").0.to_string() + "\n";
    let sig = witness.sign_at(TIME, body.as_bytes()).expect("sign");
    assert!(v.verify(body.as_bytes(), &sig));
    let other = CosignatureSigner::new("witness.test/w1", SigningKey::from_bytes(&[23; 32]))
        .expect("other");
    // The identity point as a witness key, with R the identity and S = 0: a signature of
    // every message under plain Ed25519, refused by verify_strict (a small-order key).
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let weak_point = VerifyingKey::from_bytes(&identity).expect("a point");
    let weak = CosignatureVerifier::from_key("weak.test/w", weak_point).expect("weak");
    let mut weak_sig = TIME.to_be_bytes().to_vec();
    weak_sig.extend_from_slice(&identity);
    weak_sig.extend_from_slice(&[0; 32]);
    assert!(!weak.verify(body.as_bytes(), &weak_sig));
    json!({
        "note": cosigned,
        "log_key": auditmem::tlog::note::verifier_key(origin, &log.verifying_key()),
        "witness_key": witness.verifier_key(),
        "other_key": other.verifier_key(),
        "weak_key": auditmem::tlog::cosignature::verifier_key("weak.test/w", &weak_point),
        "weak_line": format!("\u{2014} weak.test/w {}", BASE64_STANDARD.encode([&Verifier::key_id(&weak).to_be_bytes()[..], &weak_sig].concat())),
        "time": TIME,
    })
}

/// The console's BLAKE3 against the blake3 crate (the proof check recomputes record hashes
/// with it), over inputs of one chunk, several and a partial tree; its qualifier parser and
/// MessagePack reader: tests/console/unit.mjs, under node, no browser.
#[test]
fn console_modules_match_the_reference() {
    let lengths = [
        0usize, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 3072, 3073, 4096, 5120, 8193, 31745,
    ];
    let vectors: serde_json::Map<String, Value> = lengths
        .iter()
        .map(|&n| {
            let input: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            (
                n.to_string(),
                json!(blake3::hash(&input).to_hex().to_string()),
            )
        })
        .collect();
    let out = Command::new("node")
        .arg(repo().join("tests/console/unit.mjs"))
        .env("BLAKE3_VECTORS", Value::Object(vectors).to_string())
        .env("COSIGNATURE_VECTOR", cosignature_vector().to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): install it with .ci/setup-tests"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "unit.mjs failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.trim().starts_with("console units: ") && stdout.trim().ends_with(" checks passed"),
        "{stdout}"
    );
}

/// Signs a checkpoint of the seeded log now and waits until `GET /log/checkpoint` carries it
/// with the witness `name`'s cosignature; returns that note.
fn sign_and_wait_cosigned(s: &Server, name: &str) -> String {
    let (st, v) = s.admin(Method::POST, "/admin/v1/log/checkpoint", None);
    assert_eq!(st, 200, "{v}");
    let size = v["data"]["seq"].as_u64().expect("seq");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let note = fetch(s, "/log/checkpoint").text().expect("note");
        let at = note.lines().nth(1).and_then(|l| l.parse::<u64>().ok());
        if at == Some(size) && note.contains(&format!("\n\u{2014} {name} ")) {
            return note;
        }
        assert!(Instant::now() < deadline, "not cosigned in time: {note}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sign in, filter and open an entry, verify its proof (and refuse tampered ones), export and
/// download, create/edit/search/delete a memory with its history, issue and revoke a key, and
/// a tenant that sees nothing of another's nor the operator view: tests/console/e2e.mjs.
#[test]
fn console_end_to_end_in_chromium() {
    // Checkpoints only when asked (no 60 s timer during the run), so the one cosigned below
    // is the one the browser's proofs and the Integrity screen carry.
    let mut s = Server::start_with(&["--checkpoint-interval-secs", "3600"]);
    // A real witness of this log (`auditmem witness serve`), which the server pushes each new
    // checkpoint to; its cosignature is what the browser checks.
    let (_, pk) = s.admin(Method::GET, "/admin/v1/log/pubkey", None);
    let verifier_key = pk["data"]["verifier_key"]
        .as_str()
        .expect("verifier_key")
        .to_string();
    let origin = pk["data"]["origin"].as_str().expect("origin").to_string();
    let witness_dir = tempfile::tempdir().expect("tempdir");
    let witness = crate::witness::Witness::start(
        &witness_dir.path().join("w1"),
        &[format!("{origin}={verifier_key}")],
    );
    s.extra
        .extend(["--witness".to_string(), witness.url.clone()]);
    s.restart();
    let witness_name = witness.vkey.split('+').next().expect("name").to_string();
    // Another key under the witness's name: pinned, it must not verify the witness's line.
    let wrong_witness_key = auditmem::tlog::cosignature::CosignatureSigner::new(
        &witness_name,
        ed25519_dalek::SigningKey::from_bytes(&[9; 32]),
    )
    .expect("signer")
    .verifier_key();

    let (tenant_a, key_a) = tenant(&s, "acme", "business");
    let (tenant_b, key_b) = tenant(&s, "globex", "pro");
    ingest(
        &s,
        json!([
            {"tenant_id": tenant_a, "action": "gateway.chat", "http_status": 200, "model_id": "gpt-4o",
             "duration": 812, "request_body": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]},
             "response_body": {"id": "chatcmpl-1"}},
            {"tenant_id": tenant_a, "action": "gateway.chat", "http_status": 200, "model_id": "gpt-4o", "duration": 640},
            {"tenant_id": tenant_a, "action": "gateway.chat", "http_status": 429, "model_id": "gpt-4o-mini",
             "error_code": 4290, "error_msg": "rate limited", "request_body": {"model": "gpt-4o-mini"}},
            {"tenant_id": tenant_a, "action": "rag.query", "http_status": 200, "rag_query": ["refund policy"]},
            {"tenant_id": tenant_b, "action": "gateway.chat", "http_status": 200, "model_id": "globex-model"}
        ]),
    );
    let (st, m) = s.post(
        "/v1/memories",
        &key_a,
        json!({"content": "The user prefers answers in metric units", "memory_type": "rule", "importance": 0.6}),
    );
    assert_eq!(st, 200, "{m}");
    let memory_a = m["data"]["id"].as_str().expect("id").to_string();
    let cosigned = sign_and_wait_cosigned(&s, &witness_name);
    assert!(cosigned.starts_with(&format!("{origin}\n")), "{cosigned}");

    // Screenshots land in docs/console/ when asked (to refresh the README's), else in a temp dir.
    let tmp = tempfile::tempdir().expect("tempdir");
    let shots = match std::env::var("AUDITMEM_CONSOLE_SCREENSHOTS") {
        Ok(v) if v == "1" => repo().join("docs/console"),
        _ => tmp.path().to_path_buf(),
    };
    std::fs::create_dir_all(&shots).expect("screenshot dir");

    let started = Instant::now();
    let stdout = run_in_chromium(
        "e2e.mjs",
        &[
            ("CONSOLE_URL", &s.url),
            ("ADMIN_TOKEN", ADMIN_TOKEN),
            ("TENANT_A", &tenant_a),
            ("KEY_A", &key_a),
            ("KEY_B", &key_b),
            ("MEMORY_A", &memory_a),
            ("VERIFIER_KEY", &verifier_key),
            ("WITNESS_KEY", &witness.vkey),
            ("WRONG_WITNESS_KEY", &wrong_witness_key),
            ("SCREENSHOTS", path_str(&shots)),
        ],
    );
    let elapsed = started.elapsed();
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        last.starts_with("console e2e: 98 checks passed"),
        "last line: {last}"
    );
    assert!(
        elapsed < Duration::from_secs(90),
        "the browser run took {elapsed:?}"
    );
}

/// With `--admin-listen` the console is served on the admin listener too, where its operator
/// view reaches the admin API on its own origin (tests/console/operator_listener.mjs, in
/// chromium); the console on the main listener names the admin listener.
#[test]
fn the_operator_console_works_on_a_split_admin_listener() {
    let s = Server::launch(
        &[],
        crate::common::Launch {
            envs: &[("AUDITMEM_ADMIN_LISTEN", "0")],
            ..Default::default()
        },
    );
    let admin = s.admin_url.clone().expect("the admin listener's line");
    for name in ["acme", "globex"] {
        let (status, v) = s
            .raw()
            .post(format!("{admin}/admin/v1/tenants"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"name": name, "plan": "pro"}))
            .send()
            .map(|r| (r.status().as_u16(), r.text().unwrap_or_default()))
            .expect("create a tenant");
        assert_eq!(status, 201, "{v}");
    }
    // The console's pages and its operator view's metrics on the admin listener.
    for path in ["/console/", "/console/app.js", "/metrics"] {
        let r = s
            .raw()
            .get(format!("{admin}{path}"))
            .send()
            .expect("request");
        assert_eq!(r.status().as_u16(), 200, "{path} on the admin listener");
    }
    let stdout = run_in_chromium(
        "operator_listener.mjs",
        &[
            ("PUBLIC_URL", &s.url),
            ("ADMIN_URL", &admin),
            ("ADMIN_TOKEN", ADMIN_TOKEN),
        ],
    );
    assert_eq!(
        stdout.lines().last().unwrap_or(""),
        "all 5 checks passed",
        "{stdout}"
    );
}
