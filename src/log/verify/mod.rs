//! Proves that a sequence of stored log records is one unbroken hash chain.
//!
//! Records are hashed in parallel (rayon, a batch at a time) and linked sequentially. Every
//! failure is named, CloudTrail-validator style: which seq, which kind, and why. The verifier
//! only reads the bytes it is fed; it never trusts a server's own verdict, and it never
//! re-serializes a record to hash it.
//!
//! - `report`: the [`Report`] and the [`FailureKind`]s it names;
//! - `check`: one record checked on its own (decoding, hash, canonical bytes);
//! - `verifier`: the streaming [`Verifier`], linking checked records and checking the anchors;
//! - `tree`: [`verify_tree`], a whole stored log tree across the cores.

mod check;
mod report;
mod tree;
mod verifier;

pub use report::{Failure, FailureKind, Report};
pub use tree::verify_tree;
pub use verifier::Verifier;

/// Chains of sealed records for the tests of this module.
#[cfg(test)]
mod testing {
    use crate::log::record::Record;

    /// Records 1..=n, each linking to the one before (the first to zeros).
    pub(super) fn chain(n: u64) -> Vec<Record> {
        let mut prev = [0u8; 32];
        (1..=n)
            .map(|seq| {
                let r = Record::seal(
                    seq,
                    seq as i64 * 10,
                    prev,
                    format!("event {seq}").into_bytes(),
                );
                prev = r.hash;
                r
            })
            .collect()
    }

    /// Each record's bytes under its own seq.
    pub(super) fn stored(records: &[Record]) -> Vec<(u64, Vec<u8>)> {
        records.iter().map(|r| (r.seq, r.encode())).collect()
    }
}
