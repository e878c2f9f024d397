//! The body of a C2SP tlog-witness `add-checkpoint` request:
//!
//! ```text
//! old <size>\n
//! <base64 consistency proof hash>\n      (0 to 63 lines)
//! \n
//! <signed checkpoint note>
//! ```
//!
//! `<size>` is decimal without leading zeroes (`0` for zero); every line ends in `\n`.

use base64::prelude::{Engine as _, BASE64_STANDARD};
use tlog_tiles::{Hash, HASH_SIZE};

/// The most consistency proof lines a request may carry (the spec's bound: a proof between
/// trees of at most 2^63 leaves has at most 63 hashes).
pub const MAX_PROOF_LINES: usize = 63;

/// A parsed `add-checkpoint` body; the checkpoint note is not parsed yet.
#[derive(Debug, PartialEq)]
pub struct AddCheckpoint {
    pub old_size: u64,
    pub proof: Vec<Hash>,
    /// The signed checkpoint: note text, blank line, signature lines.
    pub checkpoint: Vec<u8>,
}

/// The request body for `old_size`, `proof` and the signed checkpoint `signed_note`.
pub fn encode(old_size: u64, proof: &[Hash], signed_note: &[u8]) -> Vec<u8> {
    let mut body = format!("old {old_size}\n").into_bytes();
    for h in proof {
        body.extend_from_slice(BASE64_STANDARD.encode(h.0).as_bytes());
        body.push(b'\n');
    }
    body.push(b'\n');
    body.extend_from_slice(signed_note);
    body
}

/// Splits off the line at the start of `rest` (without its `\n`); `None` if no `\n` ends it.
fn next_line<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let at = rest.iter().position(|&b| b == b'\n')?;
    let line = &rest[..at];
    *rest = &rest[at + 1..];
    Some(line)
}

/// A decimal tree size as the spec writes it: digits only, no leading zero but for `0`.
pub fn parse_size(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Parses an `add-checkpoint` body; the error says what is wrong, for a 400.
pub fn parse(body: &[u8]) -> Result<AddCheckpoint, String> {
    let mut rest = body;
    let first = next_line(&mut rest).ok_or("the body has no old size line")?;
    let size = first
        .strip_prefix(b"old ")
        .ok_or("the first line is not `old <size>`")?;
    let old_size = parse_size(size)
        .ok_or("the old size is not a decimal without leading zeroes that fits 64 bits")?;
    let mut proof = Vec::new();
    loop {
        let line = next_line(&mut rest).ok_or("no empty line ends the consistency proof")?;
        if line.is_empty() {
            break;
        }
        if proof.len() == MAX_PROOF_LINES {
            return Err(format!(
                "more than {MAX_PROOF_LINES} consistency proof lines"
            ));
        }
        let hash: [u8; HASH_SIZE] = BASE64_STANDARD
            .decode(line)
            .ok()
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| {
                format!(
                    "consistency proof line {} is not a base64 SHA-256 hash",
                    proof.len() + 1
                )
            })?;
        proof.push(Hash(hash));
    }
    if rest.is_empty() {
        return Err("no checkpoint follows the empty line".into());
    }
    Ok(AddCheckpoint {
        old_size,
        proof,
        checkpoint: rest.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOTE: &[u8] = b"example.com/log\n2\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n\xe2\x80\x94 example.com/log AAAAAQ==\n";

    #[test]
    fn round_trip() {
        let proof = vec![Hash([1; 32]), Hash([2; 32])];
        let body = encode(20_852_014, &proof, NOTE);
        assert!(body.starts_with(b"old 20852014\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"));
        assert_eq!(
            parse(&body),
            Ok(AddCheckpoint {
                old_size: 20_852_014,
                proof,
                checkpoint: NOTE.to_vec()
            })
        );
        let empty = encode(0, &[], NOTE);
        assert_eq!(&empty[..7], b"old 0\n\n");
        assert_eq!(parse(&empty).map(|r| r.proof.len()), Ok(0));
    }

    #[test]
    fn malformed_bodies() {
        let hash = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n";
        let note = std::str::from_utf8(NOTE).expect("utf8");
        for bad in [
            String::new(),
            "old 1".into(),
            format!("old 01\n\n{note}"),
            format!("old -1\n\n{note}"),
            format!("old +1\n\n{note}"),
            format!("old  1\n\n{note}"),
            format!("old 18446744073709551616\n\n{note}"),
            format!("new 1\n\n{note}"),
            format!("old 1\n{hash}"),
            format!("old 1\n{hash}\n"),
            format!("old 1\nAQEB\n\n{note}"),
            format!("old 1\n{}\n{note}", hash.repeat(MAX_PROOF_LINES + 1)),
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let most = format!("old 1\n{}\n{note}", hash.repeat(MAX_PROOF_LINES));
        assert_eq!(
            parse(most.as_bytes()).map(|r| r.proof.len()),
            Ok(MAX_PROOF_LINES)
        );
        assert_eq!(parse_size(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"00"), None);
    }
}
