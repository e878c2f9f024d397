//! Signed checkpoints: the chain head, signed with an ed25519 key kept outside the data dir.
//!
//! A hash chain proves that records link, not that none were cut off the end or that history
//! was not rewritten wholesale. A signed head that left the machine (the checkpoints file, an
//! auditor's copy of `GET /admin/v1/log/checkpoint`) pins the log: whatever is there later
//! must still contain that seq with that hash.
//!
//! The signed message is the UTF-8 text `auditmem/checkpoint/v1\n{seq}\n{hash hex}\n{time}`,
//! so any ed25519 tool can check a checkpoint without our code.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::Head;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checkpoint {
    pub seq: u64,
    /// Lowercase hex of the record hash at `seq`.
    pub hash: String,
    /// RFC 3339 UTC, when it was signed.
    pub time: String,
    /// Lowercase hex of the ed25519 public key that signed it.
    pub public_key: String,
    /// Lowercase hex of the signature over [`Checkpoint::message`].
    pub signature: String,
    /// Base64 of the Merkle tree's root hash at tree size `seq` (`crate::tlog`); absent in
    /// checkpoints signed before the tree existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The same tree head as a C2SP tlog-checkpoint in a C2SP signed note (origin, `seq`,
    /// `root`), signed by the same key; absent where `root` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Checkpoint {
    pub fn message(seq: u64, hash_hex: &str, time: &str) -> String {
        format!("auditmem/checkpoint/v1\n{seq}\n{hash_hex}\n{time}")
    }

    pub fn sign(key: &SigningKey, head: Head, time: &str) -> Checkpoint {
        let hash = hex::encode(head.hash);
        let sig = key.sign(Self::message(head.seq, &hash, time).as_bytes());
        Checkpoint {
            seq: head.seq,
            hash,
            time: time.to_string(),
            public_key: hex::encode(key.verifying_key().as_bytes()),
            signature: hex::encode(sig.to_bytes()),
            root: None,
            note: None,
        }
    }

    /// Checks the signature, against `pinned` when the auditor supplied a key.
    pub fn check_signature(&self, pinned: Option<&VerifyingKey>) -> Result<(), String> {
        check_signed(
            &Self::message(self.seq, &self.hash, &self.time),
            &self.public_key,
            &self.signature,
            pinned,
        )
    }

    pub fn hash_bytes(&self) -> Option<[u8; 32]> {
        hex::decode(&self.hash).ok()?.try_into().ok()
    }
}

/// Checks that `signature_hex` is `public_key_hex`'s signature of `message`; with `pinned`,
/// the key named must also be the pinned one.
pub fn check_signed(
    message: &str,
    public_key_hex: &str,
    signature_hex: &str,
    pinned: Option<&VerifyingKey>,
) -> Result<(), String> {
    let key = match pinned {
        Some(k) => {
            if hex::encode(k.as_bytes()) != public_key_hex {
                return Err("signed by a different key than the pinned public key".into());
            }
            *k
        }
        None => parse_public_key(public_key_hex)?,
    };
    let sig_bytes: [u8; 64] = hex::decode(signature_hex)
        .map_err(|e| format!("signature is not hex: {e}"))?
        .try_into()
        .map_err(|_| "signature is not 64 bytes".to_string())?;
    key.verify(message.as_bytes(), &Signature::from_bytes(&sig_bytes))
        .map_err(|_| "signature does not verify".to_string())
}

pub fn parse_public_key(hex_key: &str) -> Result<VerifyingKey, String> {
    let bytes: [u8; 32] = hex::decode(hex_key.trim())
        .map_err(|e| format!("public key is not hex: {e}"))?
        .try_into()
        .map_err(|_| "public key is not 32 bytes".to_string())?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| format!("invalid public key: {e}"))
}

/// The log's public key as an auditor pins it (`verify --pubkey`), in either form the service
/// prints it (`auditmem admin pubkey`, `GET /admin/v1/log/pubkey`): the lowercase hex of the
/// ed25519 key (`public_key`), or the key as a C2SP signed-note verifier key
/// `<origin>+<key id>+<base64>` (`verifier_key`), which also names the checkpoint origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedKey {
    pub key: VerifyingKey,
    /// The origin, when the key was given as a verifier key.
    pub origin: Option<String>,
}

impl PinnedKey {
    /// The signed-note verifier key, under the origin the key was given with or else `origin`.
    pub fn verifier_key(&self, origin: &str) -> String {
        match &self.origin {
            Some(o) => crate::tlog::note::verifier_key(o, &self.key),
            None => crate::tlog::note::verifier_key(origin, &self.key),
        }
    }
}

impl std::str::FromStr for PinnedKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        const FORMS: &str = "a public key is 64 hex characters (`public_key`) or a signed-note verifier key <origin>+<key id>+<base64> (`verifier_key`), as `auditmem admin pubkey` prints them";
        if !s.contains('+') {
            let key = parse_public_key(s).map_err(|e| format!("{e}: {FORMS}"))?;
            return Ok(PinnedKey { key, origin: None });
        }
        // The verifier key's own checks (its key id against its name and key) first.
        signed_note::StandardVerifier::new(s).map_err(|e| format!("{e}: {FORMS}"))?;
        let mut parts = s.splitn(3, '+');
        let (Some(origin), Some(_), Some(encoded)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(FORMS.into());
        };
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| format!("the verifier key's key is not base64 ({e}): {FORMS}"))?;
        let key: [u8; 32] = match bytes.split_first() {
            Some((&crate::tlog::note::ALG_ED25519, rest)) => rest
                .try_into()
                .map_err(|_| format!("the verifier key's key is not 32 bytes: {FORMS}"))?,
            _ => return Err(format!("the verifier key is not an ed25519 key: {FORMS}")),
        };
        let key = VerifyingKey::from_bytes(&key).map_err(|e| format!("invalid public key: {e}"))?;
        Ok(PinnedKey {
            key,
            origin: Some(origin.to_string()),
        })
    }
}

/// Loads an existing signing key file.
pub fn load_key(path: &Path) -> std::io::Result<SigningKey> {
    let text = std::fs::read_to_string(path)?;
    let bytes: [u8; 32] = hex::decode(text.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "signing key file is not 32 hex bytes",
            )
        })?;
    Ok(SigningKey::from_bytes(&bytes))
}

/// Loads the signing key, creating it (mode 0600) at first start.
pub fn load_or_create_key(path: &Path) -> std::io::Result<SigningKey> {
    if path.exists() {
        return load_key(path);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(hex::encode(key.to_bytes()).as_bytes())?;
    f.sync_all()?;
    Ok(key)
}

/// Appends one checkpoint as a JSON line and syncs it.
pub fn append_to_file(path: &Path, cp: &Checkpoint) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    let mut line = serde_json::to_vec(cp).map_err(std::io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)?;
    f.sync_data()
}

/// Reads a checkpoints file; a malformed line is an error naming its number.
pub fn read_file(path: &Path) -> Result<Vec<Checkpoint>, String> {
    let f = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    parse(BufReader::new(f), &path.display().to_string())
}

/// Parses checkpoints NDJSON (one checkpoint per line, blank lines skipped) read from `name`;
/// a malformed line is an error naming its number. Signatures are not checked here.
pub fn parse(reader: impl BufRead, name: &str) -> Result<Vec<Checkpoint>, String> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("cannot read {name}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line)
                .map_err(|e| format!("line {} of {name} is not a checkpoint: {e}", i + 1))?,
        );
    }
    Ok(out)
}

/// Why checkpoint `cp` is not one the log (head `head`) signed with `key` as `origin`.
fn check_bound(
    cp: &Checkpoint,
    key: &SigningKey,
    origin: &str,
    tlog: &crate::tlog::MerkleTree,
    log: &super::LogReader,
    head: Head,
) -> Result<(), String> {
    let public = key.verifying_key();
    cp.check_signature(None)
        .map_err(|e| format!("the checkpoint of size {}: {e}", cp.seq))?;
    if cp.public_key != hex::encode(public.as_bytes()) {
        return Err(format!(
            "the checkpoint of size {} is signed by the key {}, not this server's signing key {}",
            cp.seq,
            cp.public_key,
            hex::encode(public.as_bytes())
        ));
    }
    if cp.seq > head.seq {
        return Err(format!(
            "it holds a checkpoint of size {}, but this log holds {} records",
            cp.seq, head.seq
        ));
    }
    let record = log
        .get(cp.seq)
        .map_err(|e| format!("reading record {}: {e}", cp.seq))?;
    if record.map(|r| hex::encode(r.hash)) != Some(cp.hash.clone()) {
        return Err(format!(
            "its checkpoint of size {} names the record hash {}, which is not this log's record {}",
            cp.seq, cp.hash, cp.seq
        ));
    }
    if let Some(root) = &cp.root {
        let ours = tlog
            .root(cp.seq)
            .map_err(|e| format!("the Merkle tree of size {}: {e}", cp.seq))?;
        if ours.to_string() != *root {
            return Err(format!(
                "its checkpoint of size {} has the root {root}, but this log's tree of that size has the root {ours}",
                cp.seq
            ));
        }
    }
    if let Some(note) = &cp.note {
        let opened = crate::tlog::note::open(
            note.as_bytes(),
            &crate::tlog::note::verifier_key(origin, &public),
            Vec::new(),
            0,
        )
        .map_err(|e| format!("the note of the checkpoint of size {}: {e}", cp.seq))?;
        if opened.size != cp.seq || Some(opened.root.to_string()) != cp.root {
            return Err(format!(
                "the note of the checkpoint of size {} signs another tree (size {})",
                cp.seq, opened.size
            ));
        }
    }
    Ok(())
}

/// Signs checkpoints and keeps the latest.
pub struct CheckpointSigner {
    key: SigningKey,
    file: PathBuf,
    latest: Mutex<Option<Checkpoint>>,
    /// With the Merkle tree: each checkpoint also signs its root as a C2SP note.
    tree: Option<TreeSigning>,
    /// The signed notes by tree size, from the checkpoints file and as they are signed, the
    /// latest with the witnesses' cosignatures received for it (bounded: an older size's proof
    /// comes without its note).
    notes: Mutex<std::collections::BTreeMap<u64, String>>,
    /// When a checkpoint was last signed because a proof needed one (at most one a second).
    on_demand: Mutex<Option<std::time::Instant>>,
    /// The tree size of the latest signed note, for the witnesses' pusher.
    signed: tokio::sync::watch::Sender<u64>,
}

struct TreeSigning {
    tlog: std::sync::Arc<crate::tlog::MerkleTree>,
    signer: signed_note::StandardSigner,
}

/// How many signed notes are kept in memory for proofs at an earlier tree size.
const NOTES_KEPT: usize = 4096;

impl CheckpointSigner {
    /// A signer whose checkpoints file is not checked against a log (tests and tools that
    /// sign statements, not heads); a file that cannot be read counts as empty. The service
    /// uses [`open`](Self::open).
    pub fn new(key: SigningKey, file: PathBuf) -> Self {
        let checkpoints = read_file(&file).unwrap_or_default();
        Self::with_checkpoints(key, file, checkpoints)
    }

    fn with_checkpoints(key: SigningKey, file: PathBuf, checkpoints: Vec<Checkpoint>) -> Self {
        let mut notes: std::collections::BTreeMap<u64, String> = checkpoints
            .iter()
            .filter_map(|cp| Some((cp.seq, cp.note.clone()?)))
            .collect();
        while notes.len() > NOTES_KEPT {
            notes.pop_first();
        }
        Self {
            key,
            file,
            latest: Mutex::new(checkpoints.into_iter().last()),
            tree: None,
            notes: Mutex::new(notes),
            on_demand: Mutex::new(None),
            signed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The signer of the log `log` (head `head`, Merkle tree `tlog`) with the checkpoints file
    /// `file`, whose checkpoints must be this log's: every checkpoint it would serve (the
    /// latest, and the notes it keeps for proofs) is checked against the log's own records
    /// and tree, and one that the log does not reproduce refuses the start. A checkpoints file
    /// of another data dir (one left behind by a log that was deleted, say) would otherwise be
    /// served as this log's signed head, and every proof against it would fail.
    pub fn open(
        key: SigningKey,
        file: PathBuf,
        origin: &str,
        tlog: std::sync::Arc<crate::tlog::MerkleTree>,
        log: &super::LogReader,
        head: Head,
    ) -> Result<Self, String> {
        let checkpoints = match read_file(&file) {
            Ok(c) => c,
            Err(_) if !file.exists() => Vec::new(),
            Err(e) => return Err(format!("the checkpoints file {e}")),
        };
        let from = checkpoints.len().saturating_sub(NOTES_KEPT);
        for (i, cp) in checkpoints.iter().enumerate().skip(from) {
            check_bound(cp, &key, origin, &tlog, log, head).map_err(|why| {
                format!(
                    "the checkpoints file {} does not belong to this log: line {}: {why}; move it away, or name this log's own with --checkpoints-file",
                    file.display(),
                    i + 1
                )
            })?;
        }
        let mut signer = Self::with_checkpoints(key, file, checkpoints);
        let tree_signer = crate::tlog::note::signer(origin, &signer.key)
            .map_err(|e| format!("--log-origin: {e}"))?;
        signer.tree = Some(TreeSigning {
            tlog,
            signer: tree_signer,
        });
        Ok(signer)
    }

    /// Also signs the Merkle tree's root in each checkpoint, as a C2SP signed note of the
    /// checkpoint `origin` (also the key's name).
    pub fn with_tree(
        mut self,
        origin: &str,
        tlog: std::sync::Arc<crate::tlog::MerkleTree>,
    ) -> Result<Self, String> {
        let signer = crate::tlog::note::signer(origin, &self.key).map_err(|e| e.to_string())?;
        self.tree = Some(TreeSigning { tlog, signer });
        Ok(self)
    }

    /// The checkpoint origin (the note key's name), when notes are signed.
    pub fn origin(&self) -> Option<&str> {
        self.tree
            .as_ref()
            .map(|t| signed_note::Signer::name(&t.signer))
    }

    /// The signed-note verifier key of the checkpoint key, when notes are signed.
    pub fn verifier_key(&self) -> Option<String> {
        self.origin()
            .map(|o| crate::tlog::note::verifier_key(o, &self.key.verifying_key()))
    }

    /// The signed note of the checkpoint at tree size `size`, if one is kept.
    pub fn note_at(&self, size: u64) -> Option<String> {
        let notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        notes.get(&size).cloned()
    }

    /// The latest signed note with the cosignatures received for it.
    pub fn latest_note(&self) -> Option<(u64, String)> {
        let notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        notes.last_key_value().map(|(k, v)| (*k, v.clone()))
    }

    /// Whether this caller may sign a checkpoint for a proof now (`Ok`), or must wait the
    /// returned time for the one another caller is signing: at most one a second, however many
    /// proofs of fresh entries are asked for.
    pub fn claim_on_demand(&self) -> Result<(), Duration> {
        const EVERY: Duration = Duration::from_secs(1);
        let mut last = self.on_demand.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        match *last {
            Some(at) if now.duration_since(at) < EVERY => Err(EVERY - now.duration_since(at)),
            _ => {
                *last = Some(now);
                Ok(())
            }
        }
    }

    /// The tree size of each newly signed note, as it is signed.
    pub fn subscribe_notes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.signed.subscribe()
    }

    /// The Merkle tree the notes sign, when they are signed.
    pub fn tlog(&self) -> Option<&std::sync::Arc<crate::tlog::MerkleTree>> {
        self.tree.as_ref().map(|t| &t.tlog)
    }

    /// Adds witnesses' cosignature lines to the note kept for `size`.
    pub fn add_cosignatures(&self, size: u64, lines: &[String]) {
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = notes.get_mut(&size) {
            *n = crate::tlog::note::with_signatures(n, lines);
        }
    }

    pub fn public_key_hex(&self) -> String {
        hex::encode(self.key.verifying_key().as_bytes())
    }

    /// Signs another statement of the service with the checkpoint key (an export's manifest:
    /// `crate::export::manifest`): the lowercase hex of the signature over `message`. ed25519
    /// signatures are deterministic, so the same message always gets the same signature.
    pub fn sign_message(&self, message: &str) -> String {
        hex::encode(self.key.sign(message.as_bytes()).to_bytes())
    }

    pub fn latest(&self) -> Option<Checkpoint> {
        self.latest
            .lock()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn last_seq(&self) -> u64 {
        self.latest().map(|c| c.seq).unwrap_or(0)
    }

    /// Signs `head` (unless it is already the latest checkpoint) and appends it to the file.
    pub fn sign(&self, head: Head) -> std::io::Result<Checkpoint> {
        let mut guard = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cp) = guard.as_ref() {
            if cp.seq == head.seq && cp.hash == hex::encode(head.hash) {
                return Ok(cp.clone());
            }
        }
        let time =
            auditmem_projections::audit_view::format_time(chrono::Utc::now().timestamp_micros());
        let mut cp = Checkpoint::sign(&self.key, head, &time);
        if let Some(t) = &self.tree {
            // The applier adds a group's leaves before the head moves, so the tree holds
            // `head.seq` leaves whenever that head is seen.
            let root = t.tlog.root(head.seq).map_err(std::io::Error::other)?;
            let note = crate::tlog::note::sign(&t.signer, head.seq, &root)
                .map_err(std::io::Error::other)?;
            cp.root = Some(root.to_string());
            cp.note = Some(note.clone());
            let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
            notes.insert(head.seq, note);
            while notes.len() > NOTES_KEPT {
                notes.pop_first();
            }
        }
        append_to_file(&self.file, &cp)?;
        *guard = Some(cp.clone());
        if cp.note.is_some() {
            self.signed.send_replace(cp.seq);
        }
        Ok(cp)
    }

    /// Signs every `every` records or `interval` while the head moves; stops with the appender.
    pub async fn run(
        self: std::sync::Arc<Self>,
        appender: super::appender::Appender,
        every: u64,
        interval: Duration,
    ) {
        let mut rx = appender.subscribe();
        drop(appender);
        let mut deadline = tokio::time::Instant::now() + interval;
        loop {
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let head = *rx.borrow_and_update();
                    if head.seq >= self.last_seq() + every.max(1) {
                        self.sign_logged(head);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    let head = *rx.borrow();
                    if head.seq > self.last_seq() {
                        self.sign_logged(head);
                    }
                    deadline = tokio::time::Instant::now() + interval;
                }
            }
        }
    }

    pub fn sign_logged(&self, head: Head) {
        match self.sign(head) {
            Ok(cp) => tracing::info!(seq = cp.seq, hash = %cp.hash, "signed checkpoint"),
            Err(e) => tracing::error!(error = %e, "could not write checkpoint"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_checkpoint_verifies_and_tampering_is_caught() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let cp = Checkpoint::sign(
            &key,
            Head {
                seq: 42,
                hash: [5; 32],
            },
            "2026-11-22T00:00:00.000Z",
        );
        assert_eq!(cp.check_signature(None), Ok(()));
        assert_eq!(cp.check_signature(Some(&key.verifying_key())), Ok(()));
        let mut forged = cp.clone();
        forged.seq = 41;
        assert!(forged.check_signature(None).is_err());
        let other = SigningKey::from_bytes(&[8; 32]);
        assert!(cp.check_signature(Some(&other.verifying_key())).is_err());
    }

    #[test]
    fn key_file_is_created_once_and_reloaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("keys/signing.key");
        let a = load_or_create_key(&path).expect("create");
        let b = load_or_create_key(&path).expect("load");
        assert_eq!(a.to_bytes(), b.to_bytes());
        let cp = Checkpoint::sign(
            &a,
            Head {
                seq: 1,
                hash: [0; 32],
            },
            "t",
        );
        let file = dir.path().join("cps.ndjson");
        append_to_file(&file, &cp).expect("append");
        append_to_file(&file, &cp).expect("append");
        assert_eq!(read_file(&file).expect("read"), vec![cp.clone(), cp]);
    }
}
