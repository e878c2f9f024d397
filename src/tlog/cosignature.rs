//! C2SP tlog-cosignature, the Ed25519 `cosignature/v1` type (signature type `0x04`): a
//! witness's timestamped statement that a checkpoint is the largest consistent tree head it
//! has seen for the log named by the checkpoint's origin.
//!
//! - Key ID: `SHA-256(<name> || "\n" || 0x04 || 32-byte Ed25519 public key)[:4]`.
//! - Signed message: `cosignature/v1\n`, `time <T>\n` (T in decimal, no leading zeroes), then
//!   the checkpoint's note text including its final newline, without any signature line.
//! - Signature bytes (after the 4-byte key ID that [`signed_note`] adds): T as a big-endian
//!   u64, then the 64-byte Ed25519 signature. T is a POSIX time in seconds and at most
//!   2^63 - 1; a larger one is neither produced nor accepted.
//! - Verifier key (vkey): `<name>+<8 hex digits of key ID>+base64(0x04 || public key)`, the
//!   signed-note verifier key encoding with the cosignature type byte.
//!
//! [`CosignatureSigner`] and [`CosignatureVerifier`] implement `signed_note`'s [`Signer`] and
//! [`Verifier`], so a cosignature is added with `Note::add_sigs` and checked with
//! `Note::verify` like any other note signature.

use std::fmt;
use std::sync::Arc;

use base64::prelude::{Engine as _, BASE64_STANDARD};
// The `signature` crate, whose error `Signer::sign` returns, as ed25519-dalek re-exports it.
use ed25519_dalek::ed25519::signature;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use signed_note::{is_key_name_valid, key_id, Signature, Signer, Verifier};

/// The signed-note signature type byte of Ed25519 `cosignature/v1`.
pub const COSIGNATURE_V1_TYPE: u8 = 0x04;

/// Bytes of a `cosignature/v1` signature after the key ID: the timestamp and the Ed25519
/// signature.
pub const COSIGNATURE_V1_LEN: usize = 8 + ed25519_dalek::SIGNATURE_LENGTH;

/// The largest timestamp the spec allows (2^63 - 1).
pub const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// The header line that separates cosignatures from every other use of the key.
const HEADER: &[u8] = b"cosignature/v1\n";

/// Why a cosigner or a cosignature verifier could not be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CosignatureKeyError {
    #[error("invalid key name {0:?}: it must be non-empty, without spaces or '+'")]
    Name(String),
    #[error("malformed cosignature verifier key (want <name>+<8 hex digits>+<base64>)")]
    Format,
    #[error("the verifier key is of signature type {0:#04x}, not cosignature/v1 (0x04)")]
    Type(u8),
    #[error("the verifier key's ID does not match its name and public key")]
    Id,
}

/// The key ID of the `cosignature/v1` key `key` named `name`.
pub fn cosignature_key_id(name: &str, key: &VerifyingKey) -> u32 {
    key_id(name, &encoded_public_key(key))
}

/// `0x04 || public key`: what the key ID hashes and the verifier key encodes.
fn encoded_public_key(key: &VerifyingKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + ed25519_dalek::PUBLIC_KEY_LENGTH);
    out.push(COSIGNATURE_V1_TYPE);
    out.extend_from_slice(key.as_bytes());
    out
}

/// The verifier key (vkey) of the cosigner `name` with public key `key`:
/// `<name>+<hex key ID>+base64(0x04 || key)`.
pub fn verifier_key(name: &str, key: &VerifyingKey) -> String {
    format!(
        "{name}+{:08x}+{}",
        cosignature_key_id(name, key),
        BASE64_STANDARD.encode(encoded_public_key(key))
    )
}

/// The message a `cosignature/v1` signs for `note_text` at `timestamp`.
pub fn signed_message(timestamp: u64, note_text: &[u8]) -> Vec<u8> {
    let time_line = format!("time {timestamp}\n");
    let mut msg = Vec::with_capacity(HEADER.len() + time_line.len() + note_text.len());
    msg.extend_from_slice(HEADER);
    msg.extend_from_slice(time_line.as_bytes());
    msg.extend_from_slice(note_text);
    msg
}

/// The timestamp of a `cosignature/v1` signature (its signature bytes after the key ID), or
/// `None` when they are not one. Read it from a signature `Note::verify` returned as verified
/// by a [`CosignatureVerifier`]: before that it is only a claim.
pub fn timestamp_of(sig: &[u8]) -> Option<u64> {
    if sig.len() != COSIGNATURE_V1_LEN {
        return None;
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&sig[..8]);
    Some(u64::from_be_bytes(t)).filter(|t| *t <= MAX_TIMESTAMP)
}

/// [`timestamp_of`] a note signature.
pub fn signature_timestamp(sig: &Signature) -> Option<u64> {
    timestamp_of(sig.signature())
}

/// Seconds since the epoch now (0 for a clock set before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Signs checkpoints as a `cosignature/v1` cosigner. The timestamp comes from a clock: the
/// system's by default, any other with [`CosignatureSigner::with_clock`] (tests).
#[derive(Clone)]
pub struct CosignatureSigner {
    name: String,
    id: u32,
    key: SigningKey,
    clock: Clock,
}

impl fmt::Debug for CosignatureSigner {
    // Without the private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CosignatureSigner")
            .field("name", &self.name)
            .field("id", &format_args!("{:08x}", self.id))
            .finish_non_exhaustive()
    }
}

impl CosignatureSigner {
    /// The cosigner `name` signing with `key`; the name must be a valid note key name.
    pub fn new(name: &str, key: SigningKey) -> Result<Self, CosignatureKeyError> {
        if !is_key_name_valid(name) {
            return Err(CosignatureKeyError::Name(name.to_string()));
        }
        Ok(Self {
            name: name.to_string(),
            id: cosignature_key_id(name, &key.verifying_key()),
            key,
            clock: Arc::new(unix_now),
        })
    }

    /// The same signer with its timestamps read from `clock` (seconds since the epoch).
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// This cosigner's verifier key, for [`CosignatureVerifier::new`].
    pub fn verifier_key(&self) -> String {
        verifier_key(&self.name, &self.key.verifying_key())
    }

    /// The signature bytes (timestamp, then Ed25519 signature) over `note_text` at
    /// `timestamp`.
    pub fn sign_at(&self, timestamp: u64, note_text: &[u8]) -> Result<Vec<u8>, signature::Error> {
        if timestamp > MAX_TIMESTAMP {
            return Err(signature::Error::new());
        }
        let sig = self.key.try_sign(&signed_message(timestamp, note_text))?;
        let mut out = Vec::with_capacity(COSIGNATURE_V1_LEN);
        out.extend_from_slice(&timestamp.to_be_bytes());
        out.extend_from_slice(&sig.to_bytes());
        Ok(out)
    }
}

impl Signer for CosignatureSigner {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    /// `msg` is the note text (`Note::add_sigs` passes it); the timestamp is the clock's now.
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        self.sign_at((self.clock)(), msg)
    }
}

/// Verifies `cosignature/v1` signatures of one cosigner.
#[derive(Clone, Debug)]
pub struct CosignatureVerifier {
    name: String,
    id: u32,
    key: VerifyingKey,
}

impl CosignatureVerifier {
    /// A verifier from a verifier key `<name>+<hex key ID>+base64(0x04 || public key)`, as
    /// [`verifier_key`] writes it. The key ID must be the one the spec defines.
    pub fn new(vkey: &str) -> Result<Self, CosignatureKeyError> {
        let (name, rest) = vkey.split_once('+').ok_or(CosignatureKeyError::Format)?;
        let (id16, key64) = rest.split_once('+').ok_or(CosignatureKeyError::Format)?;
        if !is_key_name_valid(name) {
            return Err(CosignatureKeyError::Name(name.to_string()));
        }
        if id16.len() != 8 || !id16.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CosignatureKeyError::Format);
        }
        let id = u32::from_str_radix(id16, 16).map_err(|_| CosignatureKeyError::Format)?;
        let raw = BASE64_STANDARD
            .decode(key64)
            .map_err(|_| CosignatureKeyError::Format)?;
        let (&kind, key) = raw.split_first().ok_or(CosignatureKeyError::Format)?;
        if kind != COSIGNATURE_V1_TYPE {
            return Err(CosignatureKeyError::Type(kind));
        }
        let key: [u8; ed25519_dalek::PUBLIC_KEY_LENGTH] =
            key.try_into().map_err(|_| CosignatureKeyError::Format)?;
        let key = VerifyingKey::from_bytes(&key).map_err(|_| CosignatureKeyError::Format)?;
        if id != key_id(name, &raw) {
            return Err(CosignatureKeyError::Id);
        }
        Ok(Self {
            name: name.to_string(),
            id,
            key,
        })
    }

    /// A verifier for the cosigner `name` with public key `key`.
    pub fn from_key(name: &str, key: VerifyingKey) -> Result<Self, CosignatureKeyError> {
        if !is_key_name_valid(name) {
            return Err(CosignatureKeyError::Name(name.to_string()));
        }
        Ok(Self {
            name: name.to_string(),
            id: cosignature_key_id(name, &key),
            key,
        })
    }

    /// The cosigner's public key.
    pub fn public_key(&self) -> &VerifyingKey {
        &self.key
    }
}

impl Verifier for CosignatureVerifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    /// `msg` is the note text, `sig` the signature bytes after the key ID.
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        let Some(timestamp) = timestamp_of(sig) else {
            return false;
        };
        let Ok(ed) = ed25519_dalek::Signature::from_slice(&sig[8..]) else {
            return false;
        };
        // Strict: no small-order key or non-canonical signature, which an honest cosigner
        // never produces.
        self.key
            .verify_strict(&signed_message(timestamp, msg), &ed)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use signed_note::{Note, NoteError, VerifierList};

    const TEXT: &[u8] =
        b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn signer(t: u64) -> CosignatureSigner {
        CosignatureSigner::new("witness.example/w1", key(7))
            .expect("a valid name")
            .with_clock(move || t)
    }

    fn verifiers(s: &CosignatureSigner) -> VerifierList {
        let v = CosignatureVerifier::new(&s.verifier_key()).expect("its own vkey parses");
        VerifierList::new(vec![Box::new(v)])
    }

    fn cosigned(s: &CosignatureSigner, text: &[u8]) -> Note {
        let mut note = Note::new(text, &[]).expect("a well-formed text");
        note.add_sigs(&[s]).expect("signs");
        note
    }

    #[test]
    fn round_trip_verifies_and_carries_the_timestamp() {
        let s = signer(1_679_315_147);
        let note = cosigned(&s, TEXT);
        let parsed = Note::from_bytes(&note.to_bytes()).expect("parses");
        let (ok, unknown) = parsed.verify(&verifiers(&s)).expect("verifies");
        assert_eq!(ok.len(), 1);
        assert!(unknown.is_empty());
        assert_eq!(ok[0].name(), "witness.example/w1");
        assert_eq!(ok[0].signature().len(), 72);
        assert_eq!(signature_timestamp(&ok[0]), Some(1_679_315_147));
        assert_eq!(&ok[0].signature()[..8], &1_679_315_147u64.to_be_bytes());
    }

    #[test]
    fn the_signed_message_is_the_spec_s() {
        // The spec's example message, and an Ed25519 signature over exactly it.
        let want = b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        assert_eq!(signed_message(1_679_315_147, TEXT), want.to_vec());
        let s = signer(1_679_315_147);
        let sig = s.sign(TEXT).expect("signs");
        let ed = ed25519_dalek::Signature::from_slice(&sig[8..]).expect("64 bytes");
        key(7)
            .verifying_key()
            .verify_strict(want, &ed)
            .expect("signs the spec's message");
    }

    #[test]
    fn a_tampered_note_fails() {
        let s = signer(1_700_000_000);
        let note = cosigned(&s, TEXT);
        let bytes = String::from_utf8(note.to_bytes()).expect("utf8");
        let tampered = bytes.replace("20852163", "20852164");
        let parsed = Note::from_bytes(tampered.as_bytes()).expect("parses");
        assert!(matches!(
            parsed.verify(&verifiers(&s)),
            Err(NoteError::InvalidSignature { .. })
        ));
    }

    #[test]
    fn a_tampered_timestamp_fails() {
        let s = signer(1_700_000_000);
        let mut sig = s.sign(TEXT).expect("signs");
        let v = CosignatureVerifier::new(&s.verifier_key()).expect("parses");
        assert!(v.verify(TEXT, &sig));
        sig[7] ^= 1;
        assert!(!v.verify(TEXT, &sig));
        // A timestamp above 2^63 - 1 is refused whatever the signature.
        let mut big = s.sign(TEXT).expect("signs");
        big[0] = 0x80;
        assert!(!v.verify(TEXT, &big));
        assert!(s.sign_at(MAX_TIMESTAMP + 1, TEXT).is_err());
        // Short and long signatures.
        assert!(!v.verify(TEXT, &sig[..71]));
        assert!(!v.verify(TEXT, &[sig.as_slice(), &[0]].concat()));
    }

    #[test]
    fn another_key_does_not_verify() {
        let s = signer(5);
        let other = CosignatureSigner::new("witness.example/w1", key(8)).expect("valid");
        let v = CosignatureVerifier::new(&other.verifier_key()).expect("parses");
        assert!(!v.verify(TEXT, &s.sign(TEXT).expect("signs")));
    }

    #[test]
    fn the_key_id_is_the_spec_s() {
        let k = key(7).verifying_key();
        let mut h = Sha256::new();
        h.update(b"witness.example/w1\n\x04");
        h.update(k.as_bytes());
        let digest = h.finalize();
        let want = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        assert_eq!(cosignature_key_id("witness.example/w1", &k), want);
        let s = signer(0);
        assert_eq!(Signer::key_id(&s), want);
        let vkey = s.verifier_key();
        assert_eq!(
            vkey,
            format!(
                "witness.example/w1+{want:08x}+{}",
                BASE64_STANDARD.encode([&[0x04][..], k.as_bytes()].concat())
            )
        );
        let v = CosignatureVerifier::new(&vkey).expect("parses");
        assert_eq!(Verifier::key_id(&v), want);
        assert_eq!(v.name(), "witness.example/w1");
        // Differs from the Ed25519 note key ID (type 0x01) of the same key and name.
        assert_ne!(
            want,
            key_id("witness.example/w1", &[&[0x01][..], k.as_bytes()].concat())
        );
    }

    #[test]
    fn verifier_keys_are_checked() {
        let s = signer(0);
        let vkey = s.verifier_key();
        let (name, rest) = vkey.split_once('+').expect("plus");
        let (id, b64) = rest.split_once('+').expect("plus");
        // Another ID.
        let wrong_id = format!(
            "{name}+{:08x}+{b64}",
            u32::from_str_radix(id, 16).expect("hex") ^ 1
        );
        assert_eq!(
            CosignatureVerifier::new(&wrong_id).map(|_| ()),
            Err(CosignatureKeyError::Id)
        );
        // A plain Ed25519 note key (type 0x01) is not a cosignature key.
        let note_vkey = signed_note::new_ed25519_verifier_key(name, &key(7).verifying_key());
        assert_eq!(
            CosignatureVerifier::new(&note_vkey).map(|_| ()),
            Err(CosignatureKeyError::Type(0x01))
        );
        for bad in [
            "",
            "a",
            "a+b",
            "a+0000000g+AA==",
            &format!("{name}+{id}+!!"),
        ] {
            assert!(CosignatureVerifier::new(bad).is_err(), "{bad:?}");
        }
        assert!(CosignatureSigner::new("has space", key(1)).is_err());
        assert!(CosignatureSigner::new("has+plus", key(1)).is_err());
    }
}
