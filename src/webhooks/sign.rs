//! Standard Webhooks signatures over `"{webhook-id}.{webhook-timestamp}.{body}"`: `v1,` and
//! the base64 of its HMAC-SHA256, keyed by the secret's bytes (the base64 after `whsec_`), or,
//! for an `ed25519` endpoint, `v1a,` and the base64 of its Ed25519 signature under the
//! endpoint's private key (its 32-byte seed), which the receiver checks with the `whpk_`
//! public key. During a rotation's overlap both keys sign and the header carries both
//! signatures, newest first, separated by a space, as the specification allows.

use auditmem_projections::event::SignatureScheme;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The bytes signed: `"{id}.{timestamp}.{body}"`.
fn signed_content(id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(id.len() + body.len() + 24);
    m.extend_from_slice(id.as_bytes());
    m.push(b'.');
    m.extend_from_slice(timestamp.to_string().as_bytes());
    m.push(b'.');
    m.extend_from_slice(body);
    m
}

/// The `v1a,...` signature of one message under one Ed25519 private key.
pub fn signature_v1a(key: &SigningKey, id: &str, timestamp: i64, body: &[u8]) -> String {
    let sig = key.sign(&signed_content(id, timestamp, body));
    format!(
        "v1a,{}",
        base64::engine::general_purpose::STANDARD.encode(sig.to_bytes())
    )
}

/// The Ed25519 key of a 32-byte seed; `None` for any other length.
pub fn ed25519_key(seed: &[u8]) -> Option<SigningKey> {
    let seed: [u8; 32] = seed.try_into().ok()?;
    Some(SigningKey::from_bytes(&seed))
}

/// The public key as shown to the caller: `whpk_` and its 32 bytes in base64.
pub fn public_key_text(key: &SigningKey) -> String {
    format!(
        "whpk_{}",
        base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes())
    )
}

/// The `webhook-signature` header under `scheme`: one signature per key, newest first. An
/// Ed25519 key that is not a 32-byte seed cannot sign: the error says so.
pub fn header_for(
    scheme: SignatureScheme,
    keys: &[&[u8]],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Result<String, String> {
    match scheme {
        SignatureScheme::HmacSha256 => Ok(header(keys, id, timestamp, body)),
        SignatureScheme::Ed25519 => keys
            .iter()
            .map(|seed| {
                ed25519_key(seed)
                    .map(|k| signature_v1a(&k, id, timestamp, body))
                    .ok_or_else(|| "the endpoint's Ed25519 key is not 32 bytes".to_string())
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|s| s.join(" ")),
    }
}

/// The `v1,...` signature of one message under one secret.
pub fn signature(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(&signed_content(id, timestamp, body));
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The `webhook-signature` header: one signature per secret, newest first.
pub fn header(secrets: &[&[u8]], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|s| signature(s, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_the_specifications_example() {
        let secret = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .expect("base64");
        let sig = signature(
            &secret,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn both_secrets_sign_during_an_overlap() {
        let h = header(&[b"new", b"old"], "msg_1", 5, b"{}");
        let parts: Vec<&str> = h.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature(b"new", "msg_1", 5, b"{}"));
        assert_eq!(parts[1], signature(b"old", "msg_1", 5, b"{}"));
        assert_ne!(parts[0], parts[1]);
    }

    /// RFC 8032, section 7.1, TEST 1: the private key (seed) and its public key.
    const RFC8032_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const RFC8032_PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// Computed once, independently, by Python's `cryptography` (Ed25519PrivateKey.sign).
    const EXPECTED_V1A: &str =
        "v1a,WWGZH/kDxkgVdqaZ5pSi1XSzmhy3otx3hjAbuz1ADQ4YRWPPdGgi0De224HPsE3jQ16za88yDSDgfbC/qVMNBQ==";

    #[test]
    fn v1a_signs_with_the_rfc8032_key() {
        use ed25519_dalek::{Signature, Verifier, VerifyingKey};
        let key = ed25519_key(&hex(RFC8032_SEED)).expect("a 32-byte seed");
        let public: [u8; 32] = hex(RFC8032_PUBLIC).try_into().expect("32 bytes");
        assert_eq!(key.verifying_key().as_bytes(), &public);
        assert_eq!(
            public_key_text(&key),
            "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
        );
        let body = br#"{"type":"audit.entry","data":{"position":7}}"#;
        let sig = signature_v1a(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(sig, EXPECTED_V1A);

        // Independently of the signer: the signature verifies over exactly "id.timestamp.body"
        // with the RFC's public key, and not over another body.
        let raw = base64::engine::general_purpose::STANDARD
            .decode(sig.strip_prefix("v1a,").expect("v1a,"))
            .expect("base64");
        let sig = Signature::from_slice(&raw).expect("64 bytes");
        let vk = VerifyingKey::from_bytes(&public).expect("a public key");
        let mut message = b"msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.".to_vec();
        message.extend_from_slice(body);
        assert!(vk.verify(&message, &sig).is_ok());
        message.push(b' ');
        assert!(vk.verify(&message, &sig).is_err());
    }

    #[test]
    fn the_scheme_picks_the_signature() {
        let seed = hex(RFC8032_SEED);
        let other = [3u8; 32];
        let h = header_for(
            SignatureScheme::Ed25519,
            &[&other, &seed],
            "msg_1",
            5,
            b"{}",
        )
        .expect("signs");
        let parts: Vec<&str> = h.split(' ').collect();
        assert_eq!(parts.len(), 2);
        let k = |s: &[u8]| ed25519_key(s).expect("32 bytes");
        assert_eq!(parts[0], signature_v1a(&k(&other), "msg_1", 5, b"{}"));
        assert_eq!(parts[1], signature_v1a(&k(&seed), "msg_1", 5, b"{}"));
        assert_eq!(
            header_for(SignatureScheme::HmacSha256, &[b"new"], "msg_1", 5, b"{}"),
            Ok(signature(b"new", "msg_1", 5, b"{}"))
        );
        assert!(header_for(SignatureScheme::Ed25519, &[b"short"], "msg_1", 5, b"{}").is_err());
    }
}
