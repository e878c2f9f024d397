//! The key-encryption key (KEK) as an operator meets it: generated at the first start, a wrong,
//! malformed or missing one refusing the start by name with nothing served, and
//! `admin rotate-master-key` re-wrapping every data key offline.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use auditmem::keys::DirKeyring;
use auditmem_projections::seal::{Keyring, Sealed, Subject};
use reqwest::Method;
use serde_json::json;

use crate::common::{cli, path_str, Server, ADMIN_TOKEN};

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
}

/// `auditmem serve` in `cwd` with `args`, which must not start: its exit code and stderr,
/// having checked all along that nothing answered on its port.
fn refused(cwd: &Path, args: &[&str]) -> (i32, String) {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let stderr = cwd.join("refused.log");
    let mut child = Command::new(crate::common::bin())
        .args(["serve", "--listen", &addr.to_string()])
        .args(args)
        .current_dir(cwd)
        .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("AUDITMEM_MODEL_DIR", model_dir())
        .env("AUDITMEM_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("log file"))
        .spawn()
        .expect("spawn auditmem");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        let answered = TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok();
        if answered || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server served on {addr} (or ran on) instead of refusing to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(&stderr).expect("stderr"),
    )
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// A first start writes a 0600 KEK of 64 hex digits (in the data dir, or where
/// `--master-key-file` says, its directory created); a failed first start leaves none.
#[test]
fn a_first_start_generates_the_kek_and_a_failed_one_leaves_none() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cwd = tmp.path();
    let mut s = Server::start_on(&cwd.join("data"));
    s.stop();
    let kek = cwd.join("data/master.key");
    assert_eq!(mode(&kek), 0o600);
    let text = std::fs::read_to_string(&kek).expect("read");
    assert_eq!(text.trim().len(), 64, "{text:?}");
    assert!(
        text.trim().bytes().all(|b| b.is_ascii_hexdigit()),
        "{text:?}"
    );
    assert!(cwd.join("data/keys/kek.check").is_file());

    // Outside the data dir, in a directory that does not exist yet.
    let mut s = Server::start_on_with(
        &cwd.join("other"),
        &[
            "--master-key-file",
            path_str(&cwd.join("secrets/master.key")),
        ],
    );
    s.stop();
    assert_eq!(mode(&cwd.join("secrets/master.key")), 0o600);
    assert!(!cwd.join("other/master.key").exists());

    // A first start that fails once the keys are made (its port is taken) removes its KEK.
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").to_string();
    let out = Command::new(crate::common::bin())
        .args(["serve", "--listen", &port, "--data-dir", "fresh"])
        .args(["--master-key-file", "vault/master.key"])
        .current_dir(cwd)
        .env("AUDITMEM_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("AUDITMEM_MODEL_DIR", model_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("binding {port}")), "{stderr}");
    assert!(!cwd.join("fresh").exists());
    assert!(!cwd.join("vault/master.key").exists());
}

/// A wrong KEK, a malformed KEK file and a missing KEK for a data dir that has keys each stop
/// the start with a message naming the file, exit 2, and nothing answers on the port.
#[test]
fn a_wrong_malformed_or_missing_kek_refuses_the_start_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cwd = tmp.path();
    let data = cwd.join("data");
    let mut s = Server::start_on(&data);
    let (_, key) = s.tenant_with_key("pro");
    s.stop();
    let data_arg = path_str(&data);

    // Another valid KEK.
    let other = cwd.join("other.key");
    auditmem::keys::Kek::generate(&other).expect("another KEK");
    let (code, err) = refused(
        cwd,
        &[
            "--data-dir",
            data_arg,
            "--master-key-file",
            path_str(&other),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "the key-encryption key {} does not open the keys in",
            other.display()
        )),
        "{err}"
    );

    // A file that is not a KEK.
    let bad = cwd.join("bad.key");
    std::fs::write(&bad, "not a key\n").expect("write");
    let (code, err) = refused(
        cwd,
        &["--data-dir", data_arg, "--master-key-file", path_str(&bad)],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{} is not a key-encryption key", bad.display())),
        "{err}"
    );

    // The data dir's own KEK gone (a backup restored without it).
    let kek = data.join("master.key");
    let kept = cwd.join("kept.key");
    std::fs::rename(&kek, &kept).expect("move the KEK away");
    let (code, err) = refused(cwd, &["--data-dir", data_arg]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "the key-encryption key {} is missing but",
            kek.display()
        )),
        "{err}"
    );
    // A refused start made no KEK of its own, and the right one still serves.
    assert!(!kek.exists());
    std::fs::rename(&kept, &kek).expect("restore the KEK");
    let s = Server::start_on(&data);
    assert_eq!(s.get("/v1/memories", &key).0, 200);
}

/// `admin rotate-master-key` re-wraps every data key and the check value: the data dir then
/// serves with the new KEK, every key opens under it, and the old KEK is refused.
#[test]
fn rotating_the_kek_rewraps_every_key_and_the_old_kek_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cwd = tmp.path();
    let data = cwd.join("data");
    let data_arg = path_str(&data).to_string();
    let mut s = Server::start_on(&data);
    let (_, key) = s.tenant_with_key("pro");
    let (status, created) = s.post(
        "/v1/memories",
        &key,
        json!({"content": "prefers the aisle seat", "memory_type": "fact"}),
    );
    assert_eq!(status, 200, "{created}");
    let id = created["data"]["id"].as_str().expect("id").to_string();

    // While the server runs, its keys are not touched.
    let new = cwd.join("new.key");
    let rotate = [
        "admin",
        "rotate-master-key",
        "--data-dir",
        data_arg.as_str(),
        "--new-master-key-file",
        path_str(&new),
    ];
    let (code, _, err) = cli(&rotate, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("stop the server"), "{err}");
    s.stop();

    // Keys of a few subjects, as sealing makes them, each sealing a value.
    let old = data.join("master.key");
    let subjects: Vec<Subject> = (0..3)
        .map(|i| Subject::User(uuid::Uuid::nil(), format!("user-{i}")))
        .collect();
    let sealed: Vec<Sealed> = {
        let ring = DirKeyring::open(&data.join("keys"), &old).expect("open the keyring");
        subjects
            .iter()
            .map(|s| {
                Sealed::seal_for(&ring, std::slice::from_ref(s), b"aad", b"078-05-1120")
                    .expect("seal")
            })
            .collect()
    };

    // Every data key and subject record (the server's and these three subjects'), and the
    // check value.
    let wrapped = files_under(&data.join("keys"));
    assert!(wrapped >= 7, "{wrapped}");
    let (code, out, err) = cli(&rotate, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "re-wrapped {wrapped} values under {}",
            new.display()
        )),
        "{out}"
    );
    assert_eq!(mode(&new), 0o600);

    let (code, err) = refused(cwd, &["--data-dir", &data_arg]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not open the keys"), "{err}");

    let s = Server::start_on_with(&data, &["--master-key-file", path_str(&new)]);
    let (status, got) = s.get(&format!("/v1/memories/{id}"), &key);
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"], created["data"]);
    let (status, _) = s.admin(Method::GET, "/admin/v1/tenants", None);
    assert_eq!(status, 200);
    drop(s);

    let ring = DirKeyring::open(&data.join("keys"), &new).expect("open with the new KEK");
    for (subject, value) in subjects.iter().zip(&sealed) {
        assert_eq!(ring.find(subject).expect("find"), Some(value.keys[0]));
        let plain = value.open_with(&ring, b"aad").expect("open").expect("live");
        assert_eq!(plain.as_slice(), b"078-05-1120");
    }
}

/// The number of files under `dir`, at any depth.
fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .map(|p| if p.is_dir() { files_under(&p) } else { 1 })
        .sum()
}
