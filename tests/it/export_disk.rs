//! Exports on a small disk: they stop at their own reserve (the log's `--min-free-mb` plus
//! `--export-min-free-mb`), fail cleanly with their partial file removed, and the log goes on
//! taking every tenant's writes; `/healthz` says "degraded" while appends are refused. A tmpfs
//! of its own, as in `disk_full.rs` (root only; elsewhere the tests say they skipped).

use crate::common;
use crate::disk_full::{fill, Mount};

use common::{assert_error, ingest_filler, Server};
use reqwest::Method;
use serde_json::json;

const MIB: u64 = 1 << 20;

#[test]
fn exports_stop_at_their_reserve_and_the_log_keeps_taking_writes() {
    let Some(disk) = Mount::tmpfs(160) else {
        return;
    };
    let data_dir = disk.dir.join("data");
    let s = Server::start_on_with(
        &data_dir,
        &[
            "--min-free-mb",
            "16",
            "--export-min-free-mb",
            "16",
            "--export-max-files",
            "0",
            "--export-max-bytes-mb",
            "0",
            "--export-max-per-hour",
            "0",
        ],
    );
    let (tenant, key) = s.tenant_with_key("pro");
    let (_, other) = s.tenant_with_key("business");
    // ~20,000 rows of ~450 bytes: ~9 MB a file.
    ingest_filler(&s, &tenant, 20_000);
    // One export after another, as in the issue, until one meets the reserve.
    let mut failed = None;
    for _ in 0..40 {
        let (status, v) = s.post("/v1/audit/logs/export", &key, json!({}));
        assert_eq!(status, 200, "{v}");
        let id = v["data"]["export_id"].as_str().expect("id").to_string();
        let st = loop {
            let (_, v) = s.get(&format!("/v1/audit/logs/export/{id}"), &key);
            match v["data"]["status"].as_str() {
                Some("processing") => std::thread::sleep(std::time::Duration::from_millis(20)),
                _ => break v["data"].clone(),
            }
        };
        if st["status"] == json!("failed") {
            failed = Some(st);
            break;
        }
        assert_eq!(st["status"], json!("completed"), "{st}");
    }
    let failed = failed.expect("an export meets the reserve before the disk fills");
    assert_eq!(
        failed["error"],
        json!(auditmem::export::NO_SPACE),
        "{failed}"
    );
    // Its partial file is gone; the log's reserve is intact.
    let exports = data_dir.join("exports");
    let parts: Vec<_> = std::fs::read_dir(&exports)
        .expect("exports dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
        .collect();
    assert!(parts.is_empty(), "{parts:?}");
    assert!(
        disk.free_bytes() > 16 * MIB,
        "{} MiB free",
        disk.free_bytes() >> 20
    );

    // Every tenant's writes and audited reads go on.
    let (status, v) = s.post(
        "/v1/memories",
        &other,
        json!({"content": "the disk holds", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.get("/v1/audit/logs?page_size=1", &key);
    assert_eq!(status, 200, "{v}");
    ingest_filler(&s, &tenant, 100);
    let (status, v) = s.call(Method::GET, "/healthz", None, None);
    assert_eq!(
        (status, v["data"]["status"].clone()),
        (200, json!("ok")),
        "{v}"
    );
}

#[test]
fn healthz_is_degraded_while_the_data_disk_refuses_appends() {
    let Some(disk) = Mount::tmpfs(96) else { return };
    let data_dir = disk.dir.join("data");
    let s = Server::start_on_with(&data_dir, &["--min-free-mb", "24"]);
    let (status, v) = s.call(Method::GET, "/healthz", None, None);
    assert_eq!(
        (status, v["data"]["status"].clone()),
        (200, json!("ok")),
        "{v}"
    );

    let filler = fill(&disk, 8 * MIB);
    let degraded = s.call(Method::GET, "/healthz", None, None);
    assert_error(&degraded, 503, 5030);
    let message = degraded.1["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("degraded: the data disk is full (")
            && message.ends_with(
                " MiB free, writes need 24 MiB); every append, and so every audited request, is refused"
            ),
        "{message}"
    );

    std::fs::remove_file(&filler).expect("free the space");
    let (status, v) = s.call(Method::GET, "/healthz", None, None);
    assert_eq!(
        (status, v["data"]["status"].clone()),
        (200, json!("ok")),
        "{v}"
    );
}
