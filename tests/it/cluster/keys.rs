//! The cluster's keyring: data keys in the `<stream>_KEYS` JetStream store every API node
//! reads, one key per subject however the nodes race, and a destroy on one node that the
//! others see at once and that no stream file on any server keeps, and the KEK rotated offline.

use super::harness::{api_node, poll, NatsCluster};
use crate::common::{path_str, ADMIN_TOKEN};

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use auditmem::config::LogBackend;
use auditmem::keys::nats::{Store, CACHE_TTL};
use auditmem::keys::NatsKeyring;
use auditmem::log::cluster::NatsConfig;
use auditmem_projections::seal::{KeyId, Keyring, Sealed, Subject};
use serde_json::Value;

/// Every file under `dir`.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn holds(path: &Path, needle: &[u8]) -> bool {
    let bytes = std::fs::read(path).unwrap_or_default();
    bytes.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn nodes_share_one_key_per_subject_see_a_destroy_at_once_and_the_kek_rotates_offline() {
    let nats = NatsCluster::start();
    // A node with no KEK is refused and makes none of its own (it would be this node's
    // only), another KEK is refused by name; neither listens.
    let tmp = tempfile::tempdir().expect("tmp");
    let refused = |kek: &Path| -> String {
        let out = Command::new(crate::common::bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--log", &nats.urls()])
            .args(["--data-dir", path_str(&tmp.path().join("data"))])
            .args(["--master-key-file", path_str(kek)])
            .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
            .env(
                "AUDITMEM_MODEL_DIR",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2"),
            )
            .env("AUDITMEM_LOG", "error")
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2));
        assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let none = tmp.path().join("none.key");
    let err = refused(&none);
    assert!(
        err.contains(&format!(
            "the key-encryption key {} does not exist: on a cluster every API node needs the same KEK file",
            none.display()
        )),
        "{err}"
    );
    assert!(!none.exists());
    assert!(nats
        .stream_state(0, "AUDITMEM_KEYS")
        .is_none_or(|s| s["messages"] == 0));
    // The service on a cluster keeps its keys in the store, not in its data dir.
    let a = api_node(&nats, &[]);
    let keys_stream = "AUDITMEM_KEYS";
    poll(
        Duration::from_secs(10),
        "the key store's check value",
        || {
            let states: Vec<Value> = (0..nats.len())
                .filter_map(|i| nats.stream_state(i, keys_stream))
                .collect();
            match states.first() {
                Some(s) if s["messages"] == 1 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    );
    // `replay` of a stopped node's data dir opens the same store.
    let mut a = a;
    a.stop();
    let urls = nats.urls();
    let (code, out, err) = crate::common::cli(
        &[
            "replay",
            "--data-dir",
            path_str(&a.data_dir),
            "--log",
            &urls,
            "--master-key-file",
            path_str(nats.kek()),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("replayed "), "{out}");
    assert!(!a.data_dir.join("keys/kek.check").exists());
    drop(a);
    let other = tmp.path().join("other.key");
    auditmem::keys::Kek::generate(&other).expect("another KEK");
    let err = refused(&other);
    assert!(
        err.contains(&format!(
            "the key-encryption key {} does not open the keys in {keys_stream} on",
            other.display()
        )),
        "{err}"
    );

    // Two nodes' keyrings (the service's own, in this process) on the one store.
    let Ok(LogBackend::Nats(servers)) = nats.urls().parse::<LogBackend>() else {
        panic!("not NATS urls: {}", nats.urls());
    };
    let config = NatsConfig {
        servers,
        stream: "AUDITMEM".into(),
        subject: "auditmem.log".into(),
        replicas: 3,
        timeout: Duration::from_secs(5),
    };
    let one = NatsKeyring::open(&config, nats.kek()).expect("node one's keyring");
    let two = NatsKeyring::open(&config, nats.kek()).expect("node two's keyring");

    // Both create the same 16 subjects' keys at the same moment: one key each, both agree.
    let tenant = uuid::Uuid::new_v4();
    let subjects: Vec<Subject> = (0..16)
        .map(|i| Subject::User(tenant, format!("user-{i}")))
        .collect();
    let start = Barrier::new(2);
    let create = |ring: &NatsKeyring| -> Vec<KeyId> {
        start.wait();
        subjects
            .iter()
            .map(|s| ring.key_of(s).expect("key_of"))
            .collect()
    };
    let (ids_one, ids_two) = std::thread::scope(|s| {
        let a = s.spawn(|| create(&one));
        let b = s.spawn(|| create(&two));
        (a.join().expect("one"), b.join().expect("two"))
    });
    assert_eq!(ids_one, ids_two);
    let mut distinct = ids_one.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 16);
    let listed = one.keys_of_tenant(tenant).expect("list");
    assert_eq!(listed.len(), 16);
    assert_eq!(two.keys_of_tenant(tenant).expect("list"), listed);
    // The race's losers erased what they wrote: 16 keys, 16 subject records, the check value.
    poll(
        Duration::from_secs(5),
        "the key store's messages",
        || match nats.stream_state(0, keys_stream) {
            Some(s) if s["messages"] == 33 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // Sealed on one, opened on two (which now holds the key in its cache).
    let alice = subjects[0].clone();
    let alice_key = ids_one[0];
    let secret = b"078-05-1120 is alice's number";
    let v = Sealed::seal_for(&one, std::slice::from_ref(&alice), b"aad", secret).expect("seal");
    let opened = v.open_with(&two, b"aad").expect("open").expect("live");
    assert_eq!(opened.as_slice(), secret);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = rt
        .block_on(Store::connect(&config, false))
        .expect("the store");
    let key_subject = store.names.key(&alice_key);
    let record_subject = store.names.subject(tenant, &alice.digest_hex());
    let wrapped = rt
        .block_on(store.first(&key_subject))
        .expect("read")
        .expect("alice's wrapped key")
        .payload;
    // The sealed key with its tag: what a copy of the key would be found by.
    let needle = wrapped[wrapped.len() - 48..].to_vec();
    let stream_files = |i: usize| -> Vec<std::path::PathBuf> {
        files(&nats.store_dir(i))
            .into_iter()
            .filter(|p| {
                p.to_string_lossy()
                    .contains(&format!("/streams/{keys_stream}/"))
            })
            .collect()
    };
    let holding: usize = (0..nats.len())
        .map(|i| stream_files(i).iter().filter(|p| holds(p, &needle)).count())
        .sum();
    assert!(
        holding >= 1,
        "the wrapped key is in no stream file before the destroy"
    );

    // Destroyed on one: two stops opening it at once, long before its cache would expire.
    let destroyed_at = Instant::now();
    assert_eq!(one.destroy(&[alice_key]).expect("destroy"), 1);
    assert_eq!(one.destroy(&[alice_key]).expect("again"), 0);
    poll(
        Duration::from_secs(2),
        "node two forgets the key",
        || match two.seal_key(&[alice_key]).expect("seal_key") {
            None => Ok(()),
            Some(_) => Err("still opens".into()),
        },
    );
    assert!(destroyed_at.elapsed() < CACHE_TTL);
    assert!(v.open_with(&two, b"aad").expect("ring").is_none());
    assert!(v.open_with(&one, b"aad").expect("ring").is_none());
    assert_eq!(two.find(&alice).expect("find"), None);
    assert_eq!(two.keys_of_tenant(tenant).expect("list").len(), 15);
    // Gone from the store's API: neither the wrapped key nor its subject record.
    assert!(rt
        .block_on(store.first(&key_subject))
        .expect("read")
        .is_none());
    assert!(rt
        .block_on(store.first(&record_subject))
        .expect("read")
        .is_none());
    // And from every server's stream files (a secure erase on every replica).
    poll(
        Duration::from_secs(5),
        "no stream file holds the key",
        || {
            let still: Vec<String> = (0..nats.len())
                .flat_map(stream_files)
                .filter(|p| holds(p, &needle))
                .map(|p| p.display().to_string())
                .collect();
            if still.is_empty() {
                Ok(())
            } else {
                Err(format!("{still:?}"))
            }
        },
    );

    // A destroy whose notice node two missed (the tombstone written and the key erased as
    // a destroy does, no notice sent): two reads the key from the stream again once its
    // cached copy is CACHE_TTL old.
    let carol = Sealed::seal_for(&one, &subjects[2..3], b"aad", b"carol's").expect("seal");
    assert!(carol.open_with(&two, b"aad").expect("open").is_some());
    let cached_at = Instant::now();
    let carol_key = rt
        .block_on(store.first(&store.names.key(&ids_one[2])))
        .expect("read")
        .expect("carol's wrapped key");
    rt.block_on(store.mark(&store.names.gone(&ids_one[2])))
        .expect("tombstone");
    assert!(rt.block_on(store.erase(carol_key.sequence)).expect("erase"));
    poll(
        CACHE_TTL * 2,
        "node two stops opening a silently destroyed key",
        || match carol.open_with(&two, b"aad").expect("ring") {
            None => Ok(()),
            Some(_) => Err("still opens".into()),
        },
    );
    assert!(
        cached_at.elapsed() < CACHE_TTL + Duration::from_secs(1),
        "{:?}",
        cached_at.elapsed()
    );

    // Alice seen again gets a new key, the same on both nodes.
    let again = two.key_of(&alice).expect("a new key");
    assert_ne!(again, alice_key);
    assert_eq!(one.key_of(&alice).expect("the same"), again);
    let bob = Sealed::seal_for(&one, &subjects[1..2], b"aad", b"bob's").expect("seal");
    drop((one, two));

    // The KEK rotated on the stopped cluster: every key opens under the new one only.
    let new = tmp.path().join("new.key");
    let (code, out, err) = crate::common::cli(
        &[
            "admin",
            "rotate-master-key",
            "--log",
            &nats.urls(),
            "--master-key-file",
            path_str(nats.kek()),
            "--new-master-key-file",
            path_str(&new),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    // 15 keys (carol's erased) and 16 subject records, and the check value.
    assert!(
        out.contains(&format!("re-wrapped 32 values under {}", new.display())),
        "{out}"
    );
    assert!(matches!(
        NatsKeyring::open(&config, nats.kek()),
        Err(auditmem::keys::OpenError::WrongKek { .. })
    ));
    let rotated = NatsKeyring::open(&config, &new).expect("the keyring under the new KEK");
    // Carol's subject record names a key that is gone: not listed.
    assert_eq!(rotated.keys_of_tenant(tenant).expect("list").len(), 15);
    assert_eq!(rotated.find(&alice).expect("find"), Some(again));
    let plain = bob
        .open_with(&rotated, b"aad")
        .expect("open")
        .expect("live");
    assert_eq!(plain.as_slice(), b"bob's");
}
