//! Checkpoint parsing: arbitrary bytes as a checkpoints file (`checkpoint::parse`, what
//! `checkpoint::read_file` and so `auditmem verify --checkpoints` and the server's start-up
//! run), each checkpoint's signature check and hash, and the verifier's anchor check of the
//! parsed checkpoints re-signed with a known key against a genuine three-record chain.
#![no_main]

use auditmem::log::checkpoint::{self, parse_public_key, Checkpoint};
use auditmem::log::record::{Record, ZERO_HASH};
use auditmem::log::verify::Verifier;
use ed25519_dalek::{Signer, SigningKey};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = SigningKey::from_bytes(&[7; 32]);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_public_key(text);
    }
    let Ok(cps) = checkpoint::parse(data, "fuzz") else {
        return;
    };
    // A genuine chain of three records.
    let mut stored = Vec::new();
    let mut prev = ZERO_HASH;
    for seq in 1..=3u64 {
        let (hash, bytes) = Record::seal_encoded(seq, seq as i64, &prev, b"event");
        stored.push((seq, bytes, hash));
        prev = hash;
    }
    let mut resigned = Vec::new();
    let mut all_match = true;
    for cp in &cps {
        let _ = cp.check_signature(None);
        let _ = cp.check_signature(Some(&key.verifying_key()));
        let _ = cp.hash_bytes();
        // What the server appends is parsed back to the same checkpoint.
        let line = serde_json::to_string(cp).expect("a checkpoint serialises");
        let back = checkpoint::parse(line.as_bytes(), "line").expect("its own line parses");
        assert_eq!(back, vec![cp.clone()]);
        let sig = key.sign(Checkpoint::message(cp.seq, &cp.hash, &cp.time).as_bytes());
        let signed = Checkpoint {
            public_key: hex::encode(key.verifying_key().as_bytes()),
            signature: hex::encode(sig.to_bytes()),
            ..cp.clone()
        };
        assert_eq!(signed.check_signature(Some(&key.verifying_key())), Ok(()));
        let named = stored
            .iter()
            .find(|(seq, _, _)| *seq == cp.seq)
            .map(|(_, _, hash)| *hash);
        all_match &= named.is_some() && named == cp.hash_bytes();
        resigned.push(signed);
    }
    let mut v = Verifier::new(resigned.iter().map(|c| c.seq));
    let chunk: Vec<(u64, &[u8])> = stored.iter().map(|(s, b, _)| (*s, &b[..])).collect();
    v.feed(&chunk);
    let report = v.finish(None, &resigned, Some(&key.verifying_key()));
    let _ = report.render();
    // Signed checkpoints of a genuine chain pass exactly when each names a hash it holds.
    assert_eq!(report.clean(), all_match, "{}", report.render());
});
