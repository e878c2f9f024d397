//! `auditmem witness serve`, black box: a real witness process on a loopback port, real HTTP,
//! checkpoints of an in-memory RFC 6962 tree signed by a test log key (C2SP tlog-witness,
//! tlog-cosignature).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use auditmem::tlog::cosignature::{signature_timestamp, CosignatureVerifier};
use auditmem::witness::client::{add_checkpoint, WitnessError};
use base64::prelude::{Engine as _, BASE64_STANDARD};
use signed_note::{Note, Signature, StandardSigner, VerifierList};
use tlog_tiles::{Checkpoint, Hash, HashReader};

use crate::common::{bin, cli, path_str};

const ORIGIN: &str = "auditmem.test/log";
const WITNESS_NAME: &str = "witness.test/w1";

/// An RFC 6962 tree kept as tlog_tiles' stored hashes.
struct Tree {
    hashes: Vec<Hash>,
    size: u64,
}

struct Stored<'a>(&'a [Hash]);

impl HashReader for Stored<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&i| {
                self.0
                    .get(i as usize)
                    .copied()
                    .ok_or(tlog_tiles::Error::IndexesNotInTree)
            })
            .collect()
    }
}

impl Tree {
    /// A tree of `n` leaves `leaf <i>`, but for the leaves `forks` names (`fork <i>`).
    fn new(n: u64, forks: &[u64]) -> Tree {
        let mut t = Tree {
            hashes: Vec::new(),
            size: 0,
        };
        for i in 0..n {
            let data = if forks.contains(&i) {
                format!("fork {i}")
            } else {
                format!("leaf {i}")
            };
            let new = tlog_tiles::stored_hashes(t.size, data.as_bytes(), &Stored(&t.hashes))
                .expect("stored hashes");
            t.hashes.extend(new);
            t.size += 1;
        }
        t
    }

    fn root(&self, n: u64) -> Hash {
        tlog_tiles::tree_hash(n, &Stored(&self.hashes)).expect("tree hash")
    }

    /// The consistency proof from size `old` to `new`.
    fn proof(&self, old: u64, new: u64) -> Vec<Hash> {
        if old == 0 {
            return Vec::new();
        }
        tlog_tiles::prove_tree(new, old, &Stored(&self.hashes)).expect("proof")
    }
}

/// A log's key pair.
struct LogKey {
    signer: StandardSigner,
    vkey: String,
}

impl LogKey {
    fn new(name: &str) -> LogKey {
        let (skey, vkey) = signed_note::generate_key(&mut rand::rngs::OsRng, name);
        LogKey {
            signer: StandardSigner::new(&skey).expect("a generated key"),
            vkey,
        }
    }
}

/// The checkpoint text of `tree` at size `n` for `origin`.
fn checkpoint_text(origin: &str, tree: &Tree, n: u64) -> Vec<u8> {
    Checkpoint::new(origin, n, tree.root(n), "")
        .expect("checkpoint")
        .to_bytes()
}

/// `text` signed by each of `keys`, as a signed note.
fn signed(text: &[u8], keys: &[&LogKey]) -> Vec<u8> {
    let mut note = Note::new(text, &[]).expect("note");
    let signers: Vec<&dyn signed_note::Signer> = keys
        .iter()
        .map(|k| &k.signer as &dyn signed_note::Signer)
        .collect();
    note.add_sigs(&signers).expect("sign");
    note.to_bytes()
}

/// The `add-checkpoint` body.
fn body(old: u64, proof: &[Hash], note: &[u8]) -> Vec<u8> {
    let mut b = format!("old {old}\n").into_bytes();
    for h in proof {
        b.extend_from_slice(format!("{}\n", BASE64_STANDARD.encode(h.0)).as_bytes());
    }
    b.push(b'\n');
    b.extend_from_slice(note);
    b
}

/// A running `auditmem witness serve`.
pub(crate) struct Witness {
    child: Option<Child>,
    pub(crate) url: String,
    /// The cosignature verifier key it printed.
    pub(crate) vkey: String,
    state_dir: PathBuf,
    logs: Vec<String>,
    http: reqwest::blocking::Client,
}

/// An answer: status, Content-Type, body.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Witness {
    /// A witness on `state_dir` for the `ORIGIN=VKEY` pairs `logs`.
    pub(crate) fn start(state_dir: &Path, logs: &[String]) -> Witness {
        let mut w = Witness {
            child: None,
            url: String::new(),
            vkey: String::new(),
            state_dir: state_dir.to_path_buf(),
            logs: logs.to_vec(),
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
        };
        w.spawn();
        w
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(bin());
        cmd.args(["witness", "serve", "--state-dir"])
            .arg(&self.state_dir)
            .args(["--listen", "127.0.0.1:0", "--name", WITNESS_NAME]);
        for l in &self.logs {
            cmd.arg("--log").arg(l);
        }
        cmd.env("AUDITMEM_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn auditmem witness");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut vkey = None;
        let url = loop {
            assert!(
                Instant::now() < deadline,
                "the witness did not start in time"
            );
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(k) = line.strip_prefix("auditmem witness key ") {
                        vkey = Some(k.trim().to_string());
                    }
                    if let Some(u) = line.strip_prefix("auditmem witness listening on ") {
                        break u.trim().to_string();
                    }
                }
                _ => panic!("the witness exited before listening"),
            }
        };
        std::thread::spawn(move || for _ in lines {});
        self.url = url;
        self.vkey = vkey.expect("the key line comes before the listening line");
        self.child = Some(child);
    }

    /// SIGTERM, and a clean exit.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
            rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
            let status = child.wait().expect("wait");
            assert!(status.success(), "the witness exited with {status}");
        }
    }

    /// SIGKILL: nothing is flushed.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn post(&self, body: Vec<u8>) -> Answer {
        let r = self
            .http
            .post(format!("{}/add-checkpoint", self.url))
            .body(body)
            .send()
            .expect("send");
        let status = r.status().as_u16();
        let content_type = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        Answer {
            status,
            content_type,
            body: r.text().expect("text"),
        }
    }

    /// Posts `tree` at `new` from `old` with the right proof, signed by `key`.
    fn add(&self, key: &LogKey, tree: &Tree, old: u64, new: u64) -> Answer {
        let note = signed(&checkpoint_text(ORIGIN, tree, new), &[key]);
        self.post(body(old, &tree.proof(old, new), &note))
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A witness for `ORIGIN` signed by `key`, on a fresh state dir (kept in the returned guard).
fn witness_for(key: &LogKey) -> (Witness, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let w = Witness::start(
        &dir.path().join("state"),
        &[format!("{ORIGIN}={}", key.vkey)],
    );
    (w, dir)
}

/// Asserts a 200 whose body is one cosignature line by the witness over the checkpoint
/// `text`, timestamped between `before` and now; returns the signature.
fn assert_cosigned(w: &Witness, a: &Answer, text: &[u8], before: u64) -> Signature {
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.content_type, "text/plain; charset=utf-8");
    assert!(
        a.body.ends_with('\n') && a.body.matches('\n').count() == 1,
        "{a:?}"
    );
    let line = a.body.trim_end_matches('\n');
    let sig = Signature::from_bytes(line.as_bytes()).expect("a signature line");
    assert_eq!(sig.to_bytes(), a.body.as_bytes());
    assert_eq!(sig.name(), WITNESS_NAME);
    // The note the log gets by adding the cosignature verifies with the printed key.
    let verifier = CosignatureVerifier::new(&w.vkey).expect("the printed verifier key");
    let note = Note::new(text, std::slice::from_ref(&sig)).expect("note");
    let note = Note::from_bytes(&note.to_bytes()).expect("the cosigned note parses");
    let (ok, unknown) = note
        .verify(&VerifierList::new(vec![Box::new(verifier)]))
        .expect("the cosignature verifies");
    assert_eq!((ok.len(), unknown.len()), (1, 0));
    let t = signature_timestamp(&ok[0]).expect("a timestamp");
    let now = auditmem::tlog::cosignature::unix_now();
    assert!(
        before <= t && t <= now,
        "timestamp {t} not in [{before}, {now}]"
    );
    sig
}

fn assert_size_conflict(a: &Answer, recorded: u64) {
    assert_eq!(a.status, 409, "{a:?}");
    assert_eq!(a.content_type, "text/x.tlog.size", "{a:?}");
    assert_eq!(a.body, format!("{recorded}\n"));
}

fn assert_refused(a: &Answer, status: u16) {
    assert_eq!(a.status, status, "{a:?}");
    assert_eq!(a.content_type, "text/plain; charset=utf-8", "{a:?}");
    assert!(a.body.ends_with('\n') && a.body.len() > 1, "{a:?}");
}

#[test]
fn cosigns_the_first_checkpoint_and_each_consistent_growth() {
    let key = LogKey::new(ORIGIN);
    let (w, dir) = witness_for(&key);
    // The verifier key `pubkey` prints is the one `serve` printed.
    let (code, out, err) = cli(
        &[
            "witness",
            "pubkey",
            "--state-dir",
            path_str(&dir.path().join("state")),
            "--name",
            WITNESS_NAME,
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}\n", w.vkey));
    assert!(
        w.vkey.starts_with(&format!("{WITNESS_NAME}+")),
        "{}",
        w.vkey
    );
    // The private key is the owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("state/witness.key"))
        .expect("the key file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    let tree = Tree::new(40, &[]);
    let before = auditmem::tlog::cosignature::unix_now();
    let a = w.add(&key, &tree, 0, 5);
    assert_cosigned(&w, &a, &checkpoint_text(ORIGIN, &tree, 5), before);
    let a = w.add(&key, &tree, 5, 13);
    assert_cosigned(&w, &a, &checkpoint_text(ORIGIN, &tree, 13), before);
    // The same checkpoint again (old = size, same root): cosigned anew.
    let a = w.add(&key, &tree, 13, 13);
    assert_cosigned(&w, &a, &checkpoint_text(ORIGIN, &tree, 13), before);
    let a = w.add(&key, &tree, 13, 40);
    assert_cosigned(&w, &a, &checkpoint_text(ORIGIN, &tree, 40), before);
    // A checkpoint with extension lines and a second, unknown signature: the extension is
    // cosigned with the rest, the unknown signature ignored.
    let text = Checkpoint::new(ORIGIN, 40, tree.root(40), "ext one\next two\n")
        .expect("checkpoint")
        .to_bytes();
    let stranger = LogKey::new("stranger.test/key");
    let a = w.post(body(40, &[], &signed(&text, &[&stranger, &key])));
    assert_cosigned(&w, &a, &text, before);
}

#[test]
fn a_wrong_old_size_is_409_with_the_recorded_size() {
    let key = LogKey::new(ORIGIN);
    let (w, _dir) = witness_for(&key);
    let tree = Tree::new(20, &[]);
    // Nothing recorded: the recorded size is 0.
    assert_size_conflict(&w.add(&key, &tree, 4, 9), 0);
    assert_eq!(w.add(&key, &tree, 0, 9).status, 200);
    for old in [0, 4, 8, 10] {
        assert_size_conflict(&w.add(&key, &tree, old, 20), 9);
    }
    // The client learns the size from the 409 and succeeds from it.
    assert_eq!(w.add(&key, &tree, 9, 20).status, 200);
    assert_size_conflict(&w.add(&key, &tree, 9, 20), 20);
}

#[test]
fn a_fork_or_a_bad_proof_is_refused_and_the_state_stays() {
    let key = LogKey::new(ORIGIN);
    let (w, _dir) = witness_for(&key);
    let tree = Tree::new(30, &[]);
    // Another history: leaf 4 differs.
    let fork = Tree::new(30, &[4]);
    assert_ne!(tree.root(9), fork.root(9));
    assert_eq!(w.add(&key, &tree, 0, 9).status, 200);

    // The fork at the recorded size: 409 without a size (the sizes agree).
    assert_refused(&w.add(&key, &fork, 9, 9), 409);
    // The fork grown, with its own (valid for it) proof from 9: 422.
    assert_refused(&w.add(&key, &fork, 9, 20), 422);
    // The true tree with a proof that has one bit flipped, one hash short, one too many.
    let note = signed(&checkpoint_text(ORIGIN, &tree, 20), &[&key]);
    let good = tree.proof(9, 20);
    let mut flipped = good.clone();
    flipped[0].0[0] ^= 1;
    assert_refused(&w.post(body(9, &flipped, &note)), 422);
    assert_refused(&w.post(body(9, &good[1..], &note)), 422);
    let mut longer = good.clone();
    longer.push(Hash([7; 32]));
    assert_refused(&w.post(body(9, &longer, &note)), 422);
    // A proof between equal sizes must be empty.
    let note9 = signed(&checkpoint_text(ORIGIN, &tree, 9), &[&key]);
    assert_refused(&w.post(body(9, &[Hash([1; 32])], &note9)), 422);

    // Nothing moved: the recorded size is still 9 with the true root.
    assert_size_conflict(&w.add(&key, &tree, 20, 20), 9);
    assert_size_conflict(&w.add(&key, &fork, 20, 25), 9);
    assert_eq!(w.add(&key, &tree, 9, 20).status, 200);

    // From a fresh log, a proof from size 0 must be empty.
    let key2 = LogKey::new(ORIGIN);
    let (w2, _dir2) = witness_for(&key2);
    let note = signed(&checkpoint_text(ORIGIN, &tree, 5), &[&key2]);
    assert_refused(&w2.post(body(0, &[tree.root(1)], &note)), 422);
    // And at size 0 the root must be the empty tree's.
    let empty = Checkpoint::new(ORIGIN, 0, tlog_tiles::EMPTY_HASH, "")
        .expect("checkpoint")
        .to_bytes();
    let not_empty = Checkpoint::new(ORIGIN, 0, tree.root(1), "")
        .expect("checkpoint")
        .to_bytes();
    assert_refused(&w2.post(body(0, &[], &signed(&not_empty, &[&key2]))), 409);
    assert_eq!(w2.post(body(0, &[], &signed(&empty, &[&key2]))).status, 200);
    assert_size_conflict(&w2.add(&key2, &tree, 3, 5), 0);
}

#[test]
fn signatures_and_origins_are_checked() {
    let key = LogKey::new(ORIGIN);
    let (w, _dir) = witness_for(&key);
    let tree = Tree::new(8, &[]);
    let text = checkpoint_text(ORIGIN, &tree, 8);

    // Signed by another key of the same name: 403.
    let impostor = LogKey::new(ORIGIN);
    assert_refused(&w.post(body(0, &[], &signed(&text, &[&impostor]))), 403);
    // Signed by the log's key over another text (a known key whose signature fails): 403.
    let other = signed(&checkpoint_text(ORIGIN, &Tree::new(8, &[1]), 8), &[&key]);
    let sig_block = &other[other
        .windows(2)
        .rposition(|p| p == b"\n\n")
        .expect("blank line")
        + 1..];
    let mut forged = text.clone();
    forged.extend_from_slice(sig_block);
    assert_refused(&w.post(body(0, &[], &forged)), 403);
    // An origin the witness does not know, whoever signed it: 404.
    let text_other = checkpoint_text("other.test/log", &tree, 8);
    assert_refused(&w.post(body(0, &[], &signed(&text_other, &[&key]))), 404);
    let stranger = LogKey::new("other.test/log");
    assert_refused(
        &w.post(body(0, &[], &signed(&text_other, &[&stranger]))),
        404,
    );
    // None of that was recorded.
    assert_eq!(w.add(&key, &tree, 0, 8).status, 200);
}

#[test]
fn malformed_requests_are_400() {
    let key = LogKey::new(ORIGIN);
    let (w, _dir) = witness_for(&key);
    let tree = Tree::new(8, &[]);
    let note = signed(&checkpoint_text(ORIGIN, &tree, 8), &[&key]);
    let note_s = String::from_utf8(note.clone()).expect("utf8");
    let h = format!("{}\n", BASE64_STANDARD.encode([1u8; 32]));
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"old 0\n".to_vec(),
        format!("old 0\n{note_s}").into_bytes(),
        format!("old 00\n\n{note_s}").into_bytes(),
        format!("old 1\n{}\n\n{note_s}", "AQID").into_bytes(),
        format!("old 1\n{}\n{note_s}", h.repeat(64)).into_bytes(),
        format!("old 0\n\n{}", "not a note\n").into_bytes(),
        // A signed note whose text is no checkpoint.
        format!(
            "old 0\n\n{}",
            String::from_utf8(signed(b"hello\nworld\n", &[&key])).expect("utf8")
        )
        .into_bytes(),
        // The checkpoint without its signatures.
        format!(
            "old 0\n\n{}",
            String::from_utf8(checkpoint_text(ORIGIN, &tree, 8)).expect("utf8")
        )
        .into_bytes(),
        // Old size above the checkpoint's size.
        body(9, &[], &note),
    ];
    for b in bodies {
        let a = w.post(b.clone());
        assert_refused(&a, 400);
    }
    // Over the body limit: 413.
    let mut big = body(0, &[], &note);
    big.resize(1024 * 1024 + 1, b'x');
    assert_eq!(w.post(big).status, 413);
    // Only POST.
    let r = w
        .http
        .get(format!("{}/add-checkpoint", w.url))
        .send()
        .expect("send");
    assert_eq!(r.status().as_u16(), 405);
    // Nothing was recorded.
    assert_eq!(w.add(&key, &tree, 0, 8).status, 200);
}

#[test]
fn the_state_survives_restarts_and_crashes() {
    let key = LogKey::new(ORIGIN);
    let (mut w, dir) = witness_for(&key);
    let tree = Tree::new(30, &[]);
    let fork = Tree::new(30, &[2]);
    assert_eq!(w.add(&key, &tree, 0, 9).status, 200);
    let vkey = w.vkey.clone();

    w.stop();
    // The same `--log` twice is one key (two keys with one name and ID would refuse all).
    let log = w.logs[0].clone();
    w.logs.push(log);
    w.spawn();
    assert_eq!(w.vkey, vkey, "the same key after a restart");
    // It refuses to go back or sideways.
    assert_size_conflict(&w.add(&key, &tree, 0, 5), 9);
    assert_size_conflict(&w.add(&key, &tree, 5, 9), 9);
    assert_refused(&w.add(&key, &fork, 9, 9), 409);
    let before = auditmem::tlog::cosignature::unix_now();
    let a = w.add(&key, &tree, 9, 17);
    assert_cosigned(&w, &a, &checkpoint_text(ORIGIN, &tree, 17), before);

    // A SIGKILL right after an answer: what was answered was recorded.
    w.kill();
    w.spawn();
    assert_size_conflict(&w.add(&key, &tree, 9, 20), 17);
    assert_eq!(w.add(&key, &tree, 17, 30).status, 200);

    // A second witness on the same state dir refuses to start.
    let (code, _, err) = cli(
        &[
            "witness",
            "serve",
            "--state-dir",
            path_str(&dir.path().join("state")),
            "--listen",
            "127.0.0.1:0",
            "--name",
            WITNESS_NAME,
            "--log",
            &format!("{ORIGIN}={}", key.vkey),
        ],
        &[("AUDITMEM_LOG", "error")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another witness holds the state dir"), "{err}");
    w.stop();
}

#[test]
fn concurrent_requests_from_one_size_are_accepted_once() {
    let key = LogKey::new(ORIGIN);
    let (w, _dir) = witness_for(&key);
    let tree = Tree::new(40, &[]);
    assert_eq!(w.add(&key, &tree, 0, 5).status, 200);
    let answers: Vec<(u64, Answer)> = std::thread::scope(|s| {
        let handles: Vec<_> = (6..=21)
            .map(|n| {
                let (w, key, tree) = (&w, &key, &tree);
                s.spawn(move || (n, w.add(key, tree, 5, n)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let won: Vec<u64> = answers
        .iter()
        .filter(|(_, a)| a.status == 200)
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    for (n, a) in &answers {
        if *n != won[0] {
            assert_size_conflict(a, won[0]);
        }
    }
    assert_size_conflict(&w.add(&key, &tree, 5, 30), won[0]);
}

#[test]
fn the_client_returns_cosignatures_and_conflicts() {
    let key = LogKey::new(ORIGIN);
    let (w, _dir) = witness_for(&key);
    let tree = Tree::new(12, &[]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = reqwest::Client::new();
    let text = checkpoint_text(ORIGIN, &tree, 12);
    let note = signed(&text, &[&key]);
    let verifier = CosignatureVerifier::new(&w.vkey).expect("vkey");
    rt.block_on(async {
        // A base URL with a trailing slash works as well.
        let sigs = add_checkpoint(&http, &format!("{}/", w.url), 0, &[], &note)
            .await
            .expect("cosigned");
        assert_eq!(sigs.len(), 1);
        let cosigned = Note::new(&text, &sigs).expect("note");
        cosigned
            .verify(&VerifierList::new(vec![Box::new(verifier)]))
            .expect("verifies");
        assert_eq!(
            add_checkpoint(&http, &w.url, 3, &tree.proof(3, 12), &note).await,
            Err(WitnessError::Conflict(12))
        );
        let unknown = signed(&checkpoint_text("other.test/log", &tree, 12), &[&key]);
        assert_eq!(
            add_checkpoint(&http, &w.url, 0, &[], &unknown).await,
            Err(WitnessError::Rejected {
                status: 404,
                body: "unknown log origin\n".into()
            })
        );
        let fork = signed(&checkpoint_text(ORIGIN, &Tree::new(12, &[0]), 12), &[&key]);
        assert!(matches!(
            add_checkpoint(&http, &w.url, 12, &[], &fork).await,
            Err(WitnessError::Rejected { status: 409, .. })
        ));
        // Nothing listens on a port just released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        assert!(matches!(
            add_checkpoint(&http, &format!("http://127.0.0.1:{port}"), 0, &[], &note).await,
            Err(WitnessError::Transport(_))
        ));
    });
}
