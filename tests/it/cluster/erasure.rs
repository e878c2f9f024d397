//! Erasure on a cluster, end to end: alice's and bob's secrets written through all three API
//! nodes (memories, metadata, searches in every mode, an extraction, `X-Audit-Metadata`, an
//! export), alice erased on one node; then every node forgets her in every read while bob
//! reads as before, the stream verifies and counts her records erased, the receipt's proof
//! checks offline, and no file of any API node, any NATS server or any export holds a secret
//! of hers.

use super::harness::{admin, api_node, clean_report, NatsCluster};
use crate::common::{cli, path_str, Server};
use crate::forget::{self, Client, ALICE, BOB};

use reqwest::Method;
use serde_json::json;

#[test]
fn an_erasure_on_one_node_forgets_alice_on_every_node_and_in_every_file() {
    let nats = NatsCluster::start();
    let mut nodes: Vec<Server> = (0..3).map(|_| api_node(&nats, &[])).collect();
    let (_, key, at) = forget::tenant_with_erase(&nodes[0]);
    let mut c = Client {
        nodes: nodes.iter().collect(),
        key,
        at,
    };
    let planted = forget::plant(&mut c, &[&ALICE, &BOB]);
    let before = forget::before(&mut c, 1, &planted, &[&ALICE, &BOB]);

    // Erased on node 2; then every node, once it has folded the erasure (each call waits
    // for its position), forgets her.
    let case = forget::Case {
        planted: &planted,
        before: &before,
        gone: &ALICE,
        kept: &BOB,
    };
    let receipt = forget::erase_and_check(&mut c, 2, &case);
    let data = &receipt["data"];
    let seq = data["seq"].as_u64().expect("seq");
    let alice_ids = planted.ids(&ALICE);
    // Extraction's duplicate check sees bob's memories and none of alice's.
    let mut extract = |i: usize, p: &forget::Person| {
        let text = format!(
            "My social security number is {}. I love {} stew.",
            p.ssn, p.word
        );
        let body = json!({"text": text, "user_id": p.id, "deduplicate": true});
        let r = c.call(i, Method::POST, "/v1/memories/extract", Some(body), &[]);
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["data"].clone()
    };
    let bob = extract(0, &BOB);
    assert_eq!(bob["memories"], json!([]), "{bob}");
    let skipped = bob["skipped"].as_array().expect("skipped");
    assert!(!skipped.is_empty(), "{bob}");
    for s in skipped {
        let of = s["duplicate_of"].as_str().expect("duplicate_of");
        assert!(planted.ids(&BOB).contains(of), "{bob}");
    }
    let alice = extract(1, &ALICE);
    assert_eq!(alice["skipped"], json!([]), "{alice}");
    let made = alice["memories"].as_array().expect("memories");
    assert!(!made.is_empty(), "{alice}");
    for m in made {
        assert!(!alice_ids.contains(m["id"].as_str().expect("id")), "{m}");
    }

    // The stream verifies, and counts as erased exactly alice's audit entries (`verify`
    // counts the sealed audit records: docs/VERIFYING.md).
    let kek = path_str(nats.kek()).to_string();
    let urls = nats.urls();
    let (code, out, err) = cli(
        &[
            "verify",
            "--nats",
            &urls,
            "--json",
            "--master-key-file",
            &kek,
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let report = clean_report(&out);
    assert_eq!(
        report["erased"],
        json!(before.holding["alice"].len()),
        "{report}"
    );
    assert_eq!(report["plaintext"], json!(0), "{report}");

    // The receipt's proof checks offline against the erasing node's key.
    let pubkey = admin(&nodes[2], Method::GET, "/admin/v1/log/pubkey", None).body["data"]
        ["public_key"]
        .as_str()
        .expect("public_key")
        .to_string();
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("receipt.json");
    std::fs::write(&file, receipt.to_string()).expect("write");
    let (code, out, err) = cli(
        &["verify", "--proof", path_str(&file), "--pubkey", &pubkey],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let want = format!(
        "OK: erasure {} is record {seq} (leaf {}) of the tree of size {} signed by ",
        data["erasure_id"].as_str().expect("id"),
        seq - 1,
        data["checkpoint"]["seq"]
    );
    assert!(out.starts_with(&want), "{out}");

    // No file of any API node (its data dir, its export copies, its signing key and
    // checkpoints) or of any NATS server holds a secret of alice's; bob's are sealed too.
    drop(c);
    let mut scanned = Vec::new();
    for (i, n) in nodes.iter_mut().enumerate() {
        n.stop();
        scanned.push(format!(
            "node {i}: {}",
            forget::assert_node_forgets(n, &ALICE, &BOB)
        ));
    }
    for i in 0..nats.len() {
        let dir = nats.store_dir(i);
        let s = forget::assert_forgotten_in(&dir, &ALICE, "memory.search");
        scanned.push(format!("nats {i}: {} files, {} bytes", s.files, s.bytes));
        // The raft logs are read too (they hold the stream's records until a snapshot).
        let raft =
            forget::assert_forgotten_in(&dir.join("jetstream/$SYS/_js_"), &ALICE, "memory.search");
        scanned.push(format!(
            "nats {i} raft: {} files, {} bytes",
            raft.files, raft.bytes
        ));
        assert_eq!(forget::scan(&dir, &BOB.needles()).found, Vec::new());
    }
    eprintln!("cluster erasure: scanned {}", scanned.join("; "));
}
