//! A log's side of C2SP tlog-witness: `POST <witness>/add-checkpoint` with a checkpoint and
//! the consistency proof from the size the witness last cosigned.
//!
//! The cosignatures returned are parsed, not verified: verify them against the witness keys
//! you trust (a [`crate::tlog::cosignature::CosignatureVerifier`] each) over the checkpoint's
//! note text, and ignore the ones of unknown keys, as the spec asks of a client.

use signed_note::Signature;
use tlog_tiles::Hash;

use super::request;
use super::server::TLOG_SIZE_TYPE;

/// The most bytes of a witness's answer read: a few signature lines are ~150 bytes each.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Why a witness did not cosign.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WitnessError {
    /// 409 with a `text/x.tlog.size` body: the witness's latest cosigned size is this one,
    /// not the old size sent. Send again from it (with a proof from that size).
    #[error("the witness has recorded size {0}")]
    Conflict(u64),
    /// Any other answer than 200: 400 (malformed), 403 (no trusted signature), 404 (unknown
    /// origin), 409 without a size (same size, another root), 422 (the proof does not
    /// verify), 5xx; `body` as received (lossy UTF-8, at most [`MAX_RESPONSE_BYTES`]).
    #[error("the witness answered {status}: {body}")]
    Rejected { status: u16, body: String },
    /// No answer: the connection, the request or reading the answer failed.
    #[error("reaching the witness failed: {0}")]
    Transport(String),
    /// A 200 whose body is not one or more note signature lines.
    #[error("the witness's answer is not signature lines: {0}")]
    InvalidResponse(String),
}

/// Asks the witness at `base_url` (its submission prefix, e.g. `http://127.0.0.1:7380`) to
/// cosign `signed_note`, a checkpoint signed by the log, given the consistency `proof` from
/// `old_size`, the size the witness last cosigned (0 the first time); returns the
/// signatures it answered with, unverified.
pub async fn add_checkpoint(
    http: &reqwest::Client,
    base_url: &str,
    old_size: u64,
    proof: &[Hash],
    signed_note: &[u8],
) -> Result<Vec<Signature>, WitnessError> {
    let url = format!("{}/add-checkpoint", base_url.trim_end_matches('/'));
    let mut resp = http
        .post(&url)
        .body(request::encode(old_size, proof, signed_note))
        .send()
        .await
        .map_err(|e| WitnessError::Transport(format!("{url}: {e}")))?;
    let status = resp.status().as_u16();
    let is_size = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(TLOG_SIZE_TYPE));
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| WitnessError::Transport(format!("{url}: reading the answer: {e}")))?
    {
        let room = MAX_RESPONSE_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            if status == 200 {
                return Err(WitnessError::InvalidResponse(format!(
                    "longer than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            break;
        }
        body.extend_from_slice(&chunk);
    }
    if status == 409 && is_size {
        if let Some(size) = body.strip_suffix(b"\n").and_then(request::parse_size) {
            return Err(WitnessError::Conflict(size));
        }
    }
    if status != 200 {
        return Err(WitnessError::Rejected {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    parse_signatures(&body)
}

/// The note signature lines of a 200 answer: one or more, each ending in `\n`.
pub fn parse_signatures(body: &[u8]) -> Result<Vec<Signature>, WitnessError> {
    let lines = body
        .strip_suffix(b"\n")
        .ok_or_else(|| WitnessError::InvalidResponse("no final newline".into()))?;
    lines
        .split(|&b| b == b'\n')
        .map(|line| {
            Signature::from_bytes(line).map_err(|_| {
                WitnessError::InvalidResponse(format!(
                    "{:?} is not a signature line",
                    String::from_utf8_lossy(line)
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_lines() {
        let one = "— witness.example/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n";
        let sigs = parse_signatures(one.repeat(2).as_bytes()).expect("parses");
        assert_eq!(sigs.len(), 2);
        assert_eq!(sigs[0].name(), "witness.example/w1");
        assert_eq!(sigs[0].id(), 0x8d66cf3f);
        assert_eq!(sigs[0].to_bytes(), one.as_bytes());
        for bad in [
            "",
            "\n",
            &one[..one.len() - 1],
            "- w AAAAAAA=\n",
            &format!("{one}\n"),
        ] {
            assert!(parse_signatures(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
