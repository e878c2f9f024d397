//! Standard Webhooks signatures: `v1,` and the base64 of HMAC-SHA256 over
//! `"{webhook-id}.{webhook-timestamp}.{body}"`, keyed by the secret's bytes (the base64 after
//! `whsec_`). During a rotation's overlap both secrets sign and the header carries both
//! signatures, separated by a space, as the specification allows.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `v1,...` signature of one message under one secret.
pub fn signature(secret: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
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
}
