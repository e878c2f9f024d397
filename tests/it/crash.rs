//! Killed with SIGKILL under concurrent appends, the server loses nothing it acknowledged.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{all_audit_ids, cli, path_str, Server, ADMIN_TOKEN};
use serde_json::{json, Value};

#[test]
fn every_acknowledged_append_survives_sigkill() {
    let mut s = Server::start();
    let (tenant, key) = s.tenant_with_key("business");
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (url, tenant, acked, stop) =
            (s.url.clone(), tenant.clone(), acked.clone(), stop.clone());
        clients.push(std::thread::spawn(move || {
            let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) && n < 5_000 {
                n += 1;
                let body = json!({"entries": [
                    {"tenant_id": tenant, "action": "gateway.chat", "http_status": 200, "metadata": {"client": c, "n": n}},
                    {"tenant_id": tenant, "action": "rag.query", "http_status": 200, "metadata": {"client": c, "n": n}}
                ]});
                let Ok(resp) = http.post(format!("{url}/admin/v1/audit/logs")).bearer_auth(ADMIN_TOKEN).json(&body).send() else {
                    break;
                };
                if resp.status().as_u16() != 200 {
                    break;
                }
                let Ok(v) = resp.json::<Value>() else { break };
                let mut set = acked.lock().expect("lock");
                for id in v["data"]["ids"].as_array().expect("ids") {
                    set.insert(id.as_str().expect("id").to_string());
                }
            }
        }));
    }
    // Let the clients get going, then kill the server mid-flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.lock().expect("lock").len() < 400 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    s.kill();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client thread");
    }
    let acked = acked.lock().expect("lock").clone();
    assert!(
        acked.len() >= 400,
        "only {} appends were acknowledged before the kill",
        acked.len()
    );

    s.spawn();
    let found = all_audit_ids(&s, &key);
    let lost: Vec<_> = acked.difference(&found).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged entries lost, e.g. {:?}",
        lost.len(),
        lost.first()
    );
    s.stop();
    let (code, out, err) = cli(&["verify", "--data-dir", path_str(&s.data_dir)], &[]);
    assert_eq!(code, 0, "{out}{err}");
}
