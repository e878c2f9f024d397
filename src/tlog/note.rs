//! Checkpoints in the C2SP tlog-checkpoint format, signed as C2SP signed notes.
//!
//! The body is `<origin>\n<tree size>\n<base64 root hash>\n`; the service signs it with its
//! Ed25519 checkpoint key under the key name `<origin>` (signed-note key type 0x01, key ID the
//! first 4 bytes of `SHA-256(name || "\n" || 0x01 || public key)`), and witnesses add their
//! `cosignature/v1` lines (C2SP tlog-cosignature). Go's `x/mod/sumdb/note` opens these notes.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{SigningKey, VerifyingKey};
use signed_note::{Note, NoteError, Signer, StandardSigner, StandardVerifier, VerifierList};
use tlog_tiles::Hash;

/// The signed-note algorithm byte of an ed25519 key.
pub const ALG_ED25519: u8 = 1;

/// Why a checkpoint note was refused; each names what an auditor must look at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteCheckError {
    #[error("the checkpoint is not a well-formed signed note: {0}")]
    Malformed(String),
    #[error("bad signature: the checkpoint's signature by {0} does not verify")]
    BadSignature(String),
    #[error("the checkpoint is not signed by the pinned key {0} (signed by another key?)")]
    NotSigned(String),
    #[error("the checkpoint's origin {found:?} is not the log key's name {expected:?}")]
    WrongOrigin { expected: String, found: String },
    #[error("missing cosignatures: {have} valid witness cosignature(s), {need} required")]
    MissingCosignatures { have: usize, need: usize },
    #[error("bad cosignature: the cosignature by {0} does not verify")]
    BadCosignature(String),
    #[error("bad key: {0}")]
    BadKey(String),
}

/// A checkpoint note whose log signature (and cosignatures, as asked) verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Opened {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
    /// The names of the witnesses whose cosignatures verified.
    pub witnesses: Vec<String>,
}

/// The checkpoint body.
pub fn body(origin: &str, size: u64, root: &Hash) -> String {
    format!("{origin}\n{size}\n{}\n", B64.encode(root.0))
}

/// The signed-note verifier key of `key` under `origin`: `<origin>+<key id hex>+<base64>`.
pub fn verifier_key(origin: &str, key: &VerifyingKey) -> String {
    signed_note::new_ed25519_verifier_key(origin, key)
}

/// The signer of checkpoints: the checkpoint key under the key name `origin`.
pub fn signer(origin: &str, key: &SigningKey) -> Result<StandardSigner, NoteCheckError> {
    let public = [&[ALG_ED25519][..], key.verifying_key().as_bytes()].concat();
    let private = [&[ALG_ED25519][..], key.as_bytes()].concat();
    let skey = format!(
        "PRIVATE+KEY+{origin}+{:08x}+{}",
        signed_note::key_id(origin, &public),
        B64.encode(private)
    );
    StandardSigner::new(&skey).map_err(|e| NoteCheckError::BadKey(format!("{origin:?}: {e}")))
}

/// Whether `origin` can name a checkpoint and its key (no spaces, no `+`, not empty).
pub fn origin_is_valid(origin: &str) -> bool {
    signed_note::is_key_name_valid(origin) && !origin.contains('\n')
}

/// The signed note of the checkpoint (`origin`, `size`, `root`).
pub fn sign(signer: &StandardSigner, size: u64, root: &Hash) -> Result<String, NoteCheckError> {
    let text = body(signer.name(), size, root);
    let mut note = Note::new(text.as_bytes(), &[]).map_err(malformed)?;
    note.add_sigs(&[signer as &dyn Signer]).map_err(malformed)?;
    String::from_utf8(note.to_bytes()).map_err(|e| NoteCheckError::Malformed(e.to_string()))
}

fn malformed(e: NoteError) -> NoteCheckError {
    NoteCheckError::Malformed(e.to_string())
}

/// Opens a checkpoint note: its log signature must verify with `log_key` (a verifier key
/// string) and, when `quorum` > 0, at least `quorum` distinct `witnesses` must have cosigned it.
pub fn open(
    note: &[u8],
    log_key: &str,
    witnesses: Vec<Box<dyn signed_note::Verifier>>,
    quorum: usize,
) -> Result<Opened, NoteCheckError> {
    let verifier = StandardVerifier::new(log_key.trim())
        .map_err(|e| NoteCheckError::BadKey(format!("log key {log_key:?}: {e}")))?;
    let name = signed_note::Verifier::name(&verifier).to_string();
    let parsed = Note::from_bytes(note).map_err(malformed)?;
    match parsed.verify(&VerifierList::new(vec![Box::new(verifier)])) {
        Ok(_) => {}
        Err(NoteError::InvalidSignature { name, .. }) => {
            return Err(NoteCheckError::BadSignature(name))
        }
        Err(NoteError::UnverifiedNote) => return Err(NoteCheckError::NotSigned(log_key.into())),
        Err(e) => return Err(malformed(e)),
    }
    let checkpoint = tlog_tiles::Checkpoint::from_bytes(parsed.text())
        .map_err(|e| NoteCheckError::Malformed(e.to_string()))?;
    if checkpoint.origin() != name {
        return Err(NoteCheckError::WrongOrigin {
            expected: name,
            found: checkpoint.origin().to_string(),
        });
    }
    let mut cosigners = Vec::new();
    if !witnesses.is_empty() {
        match parsed.verify(&VerifierList::new(witnesses)) {
            Ok((verified, _)) => {
                cosigners = verified.iter().map(|s| s.name().to_string()).collect();
                cosigners.sort();
                cosigners.dedup();
            }
            Err(NoteError::InvalidSignature { name, .. }) => {
                return Err(NoteCheckError::BadCosignature(name))
            }
            Err(NoteError::UnverifiedNote) => {}
            Err(e) => return Err(malformed(e)),
        }
    }
    if cosigners.len() < quorum {
        return Err(NoteCheckError::MissingCosignatures {
            have: cosigners.len(),
            need: quorum,
        });
    }
    Ok(Opened {
        origin: checkpoint.origin().to_string(),
        size: checkpoint.size(),
        root: *checkpoint.hash(),
        witnesses: cosigners,
    })
}

/// `note` with the signature lines `extra` added after its own (the cosignatures witnesses
/// returned); lines already there are not repeated.
pub fn with_signatures(note: &str, extra: &[String]) -> String {
    let mut out = note.to_string();
    for line in extra {
        let line = line.trim_end_matches('\n');
        if !line.is_empty() && !note.lines().any(|l| l == line) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Hash {
        Hash([7; 32])
    }

    #[test]
    fn signed_checkpoint_opens_with_its_key_only() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let s = signer("example.com/log", &key).expect("signer");
        let note = sign(&s, 42, &root()).expect("sign");
        assert!(note.starts_with("example.com/log\n42\n"));
        let vkey = verifier_key("example.com/log", &key.verifying_key());
        let opened = open(note.as_bytes(), &vkey, Vec::new(), 0).expect("open");
        assert_eq!(
            opened,
            Opened {
                origin: "example.com/log".into(),
                size: 42,
                root: root(),
                witnesses: Vec::new()
            }
        );
        // Another key under the same name: not signed by it.
        let other = SigningKey::from_bytes(&[4; 32]);
        let okey = verifier_key("example.com/log", &other.verifying_key());
        assert!(matches!(
            open(note.as_bytes(), &okey, Vec::new(), 0),
            Err(NoteCheckError::NotSigned(_))
        ));
        // A changed size keeps the signature line but breaks it.
        let forged = note.replacen("\n42\n", "\n43\n", 1);
        assert_eq!(
            open(forged.as_bytes(), &vkey, Vec::new(), 0),
            Err(NoteCheckError::BadSignature("example.com/log".into()))
        );
        // Asking for cosignatures that are not there.
        assert_eq!(
            open(note.as_bytes(), &vkey, Vec::new(), 1),
            Err(NoteCheckError::MissingCosignatures { have: 0, need: 1 })
        );
    }

    #[test]
    fn the_origin_must_be_the_keys_name() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let s = signer("a.example/log", &key).expect("signer");
        let mut note = Note::new(body("b.example/log", 1, &root()).as_bytes(), &[]).expect("note");
        note.add_sigs(&[&s as &dyn Signer]).expect("sign");
        let vkey = verifier_key("a.example/log", &key.verifying_key());
        assert!(matches!(
            open(&note.to_bytes(), &vkey, Vec::new(), 0),
            Err(NoteCheckError::WrongOrigin { .. })
        ));
        assert!(!origin_is_valid("has space"));
        assert!(!origin_is_valid("a+b"));
        assert!(origin_is_valid("auditmem.example/log"));
    }

    #[test]
    fn signatures_are_appended_once() {
        let n = "o\n1\nAAAA\n\n\u{2014} o abc\n";
        let w = with_signatures(n, &["\u{2014} w def\n".into(), "\u{2014} o abc".into()]);
        assert_eq!(w, "o\n1\nAAAA\n\n\u{2014} o abc\n\u{2014} w def\n");
    }
}
