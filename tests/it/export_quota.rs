//! A tenant's export quotas (live files, their bytes, exports started per hour): refused with
//! 429 (2204) and a `Retry-After` saying when the quota frees, decided by the appender so that
//! racing requests cannot both pass; and the sweeper, which deletes expired files and the
//! partial files of exports no longer written.

use crate::common;

use std::time::{Duration, Instant};

use common::{assert_error, ingest_filler, Server};
use serde_json::{json, Value};

/// `POST /v1/audit/logs/export` with the `Retry-After` header: (status, body, Retry-After).
fn request_export(s: &Server, key: &str) -> (u16, Value, Option<u64>) {
    let r = s
        .raw()
        .post(format!("{}/v1/audit/logs/export", s.url))
        .bearer_auth(key)
        .json(&json!({}))
        .send()
        .expect("send");
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (status, r.json().expect("json"), retry)
}

/// Starts an export and waits for it to end as `want`; returns its id.
fn export_until(s: &Server, key: &str, want: &str) -> String {
    let (status, v, _) = request_export(s, key);
    assert_eq!(status, 200, "{v}");
    let id = v["data"]["export_id"].as_str().expect("id").to_string();
    s.wait_export_status(key, &id, want);
    id
}

fn assert_quota_refusal(
    resp: &(u16, Value, Option<u64>),
    reason: &str,
    retry: std::ops::RangeInclusive<u64>,
) {
    let (status, v, retry_after) = resp;
    assert_error(&(*status, v.clone()), 429, 2204);
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("the export quota is used up: {reason}")),
        "{message}"
    );
    let secs = retry_after.unwrap_or_else(|| panic!("no Retry-After: {v}"));
    assert!(
        retry.contains(&secs),
        "Retry-After {secs}, not in {retry:?}: {v}"
    );
    assert!(
        message.ends_with(&format!("; retry after {secs} s")),
        "{message}"
    );
}

#[test]
fn live_files_are_limited_per_tenant_until_the_oldest_expires() {
    let s = Server::start_with(&[
        "--export-max-files",
        "2",
        "--export-max-per-hour",
        "0",
        "--export-ttl-secs",
        "3600",
    ]);
    let (_, key) = s.tenant_with_key("pro");
    export_until(&s, &key, "completed");
    export_until(&s, &key, "completed");
    let refused = request_export(&s, &key);
    assert_quota_refusal(&refused, "2 export files are live (at most 2)", 3500..=3600);
    // The refusal is the tenant's audit entry, with its code.
    let (_, list) = s.get("/v1/audit/logs?action=audit.export&page_size=1", &key);
    let entry = &list["data"]["logs"][0];
    assert_eq!(
        (entry["http_status"].clone(), entry["error_code"].clone()),
        (json!(429), json!(2204)),
        "{list}"
    );
    // Other tenants are not held by it.
    let (_, other) = s.tenant_with_key("pro");
    export_until(&s, &other, "completed");
}

#[test]
fn exports_started_per_hour_are_limited_and_racing_requests_cannot_both_pass() {
    let s = Server::start_with(&["--export-max-per-hour", "2", "--export-max-files", "0"]);
    let (tenant, key) = s.tenant_with_key("business");
    export_until(&s, &key, "completed");
    export_until(&s, &key, "completed");
    assert_quota_refusal(
        &request_export(&s, &key),
        "2 exports were started in the last hour (at most 2)",
        3500..=3600,
    );
    // Racing requests of a fresh tenant with one place left: exactly one passes.
    let (_, racer) = s.tenant_with_key("business");
    export_until(&s, &racer, "completed");
    let answers: Vec<(u16, Value, Option<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|_| scope.spawn(|| request_export(&s, &racer)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect()
    });
    let passed = answers.iter().filter(|a| a.0 == 200).count();
    assert_eq!(passed, 1, "{answers:?}");
    for a in answers.iter().filter(|a| a.0 != 200) {
        // The rest: in progress (409) while the one that passed runs, or over the quota.
        assert!(a.0 == 409 || a.0 == 429, "{a:?}");
    }
    drop(tenant);
}

#[test]
fn live_bytes_are_limited_and_the_next_export_waits_for_enough_to_expire() {
    let s = Server::start_with(&[
        "--export-max-bytes-mb",
        "1",
        "--export-max-files",
        "0",
        "--export-max-per-hour",
        "0",
        "--export-ttl-secs",
        "7200",
    ]);
    let (tenant, key) = s.tenant_with_key("pro");
    // 3,000 rows of ~450 bytes: one file past 1 MiB, which completes.
    ingest_filler(&s, &tenant, 3000);
    let id = export_until(&s, &key, "completed");
    let (_, st) = s.get(&format!("/v1/audit/logs/export/{id}"), &key);
    let size = st["data"]["file_size"].as_u64().unwrap_or(0);
    assert!(size > 1 << 20, "{st}");
    assert_quota_refusal(
        &request_export(&s, &key),
        &format!(
            "the live export files hold {} MiB (at most 1 MiB)",
            size.div_ceil(1 << 20)
        ),
        7100..=7200,
    );
}

/// Waits (a minute at most) for `cond`.
fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn expired_files_and_stray_partial_files_are_swept_and_expired_exports_stay_gone() {
    let mut s = Server::start_with(&["--export-ttl-secs", "2", "--export-sweep-secs", "1"]);
    let (_, key) = s.tenant_with_key("pro");
    let dir = s.data_dir.join("exports");
    let id = export_until(&s, &key, "completed");
    let file = dir.join(format!("{id}.csv"));
    assert!(file.exists());
    // Swept once expired, without anyone asking for it; the status stays expired, the
    // download 410.
    until("the expired file is swept", || !file.exists());
    let (status, v) = s.get(&format!("/v1/audit/logs/export/{id}"), &key);
    assert_eq!(
        (status, v["data"]["status"].clone()),
        (200, json!("expired")),
        "{v}"
    );
    let (status, _, _, body) = s.download_export(&key, &id);
    let body: Value = serde_json::from_slice(&body).expect("json");
    assert_error(&(status, body), 410, 4100);

    // Partial files of exports not being written (a failed one's, a crashed writer's of an
    // export the log does not know) and orphan files are swept at start; other files stay.
    s.stop();
    let stray = [
        dir.join(format!("{}.csv.part", uuid::Uuid::now_v7())),
        dir.join(format!("{id}.json.part")),
        dir.join(format!("{}.json", uuid::Uuid::now_v7())),
    ];
    for p in &stray {
        std::fs::write(p, b"partial").expect("write");
    }
    let kept = dir.join("README.txt");
    std::fs::write(&kept, b"not an export").expect("write");
    s.extra = vec!["--export-sweep-secs".into(), "3600".into()];
    s.spawn();
    until("stray files are swept at start", || {
        stray.iter().all(|p| !p.exists())
    });
    assert!(kept.exists());
    let (status, _) = s.get("/v1/audit/logs", &key);
    assert_eq!(status, 200);
}
