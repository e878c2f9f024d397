//! Proves that a sequence of stored log records is one unbroken hash chain.
//!
//! Records are hashed in parallel (rayon, a batch at a time) and linked sequentially. Every
//! failure is named, CloudTrail-validator style: which seq, which kind, and why. The verifier
//! only reads the bytes it is fed; it never trusts a server's own verdict, and it never
//! re-serializes a record to hash it.
//!
//! - `report`: the [`Report`] and the [`FailureKind`]s it names;
//! - `check`: one record checked on its own (decoding, hash, canonical bytes);
//! - `hashes`: the records' hashes computed many at a time;
//! - `verifier`: the streaming [`Verifier`], linking checked records and checking the anchors;
//! - `tree`: [`verify_tree`], a whole stored log tree across the cores.

mod check;
mod hashes;
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

    /// `events` as records from seq 1, each linking to the one before (the first to zeros).
    pub(super) fn linked(events: impl IntoIterator<Item = Vec<u8>>) -> Vec<Record> {
        let mut prev = [0u8; 32];
        (1u64..)
            .zip(events)
            .map(|(seq, event)| {
                let r = Record::seal(seq, 0, prev, event);
                prev = r.hash;
                r
            })
            .collect()
    }

    /// A keyring, and two users of one tenant: alice and bob.
    pub(super) fn two_users() -> (
        auditmem_projections::seal::MemoryKeyring,
        auditmem_projections::seal::Subject,
        auditmem_projections::seal::Subject,
    ) {
        use auditmem_projections::seal::Subject;
        let t = uuid::Uuid::from_u128(7);
        (
            Default::default(),
            Subject::User(t, "alice".into()),
            Subject::User(t, "bob".into()),
        )
    }

    /// An audit entry's event sealed under the key of `subject` in `ring`.
    pub(super) fn sealed_event(
        ring: &auditmem_projections::seal::MemoryKeyring,
        subject: &auditmem_projections::seal::Subject,
        i: u128,
    ) -> Vec<u8> {
        use auditmem_projections::{AuditDetail, AuditEntry, AuditRecorded, Event};
        let entry = AuditEntry {
            id: uuid::Uuid::from_u128(i),
            action: "chat.completion".into(),
            model_id: None,
            project_id: None,
            gateway_id: None,
            ip_address: Some("10.0.0.1".into()),
            user_agent: None,
            http_status: 200,
            is_success: true,
            is_cache_hit: false,
            error_code: None,
            error_msg: None,
            duration: None,
            credits_consumed: 0.0,
            balance_consumed_usd: 0.0,
            tokens: None,
            metadata: None,
            created_at: 0,
            detail_hash: None,
        };
        let rec = AuditRecorded::sealed_for(
            subject.tenant(),
            entry,
            AuditDetail::default(),
            ring,
            std::slice::from_ref(subject),
        )
        .expect("seal");
        Event::AuditRecorded(Box::new(rec))
            .encode()
            .expect("encode")
    }

    /// Each record's bytes under its own seq.
    pub(super) fn stored(records: &[Record]) -> Vec<(u64, Vec<u8>)> {
        records.iter().map(|r| (r.seq, r.encode())).collect()
    }
}
