//! What a verification found: the [`Report`], and each [`Failure`] named by seq and
//! [`FailureKind`].
//!
//! Invariants: `failure_count` counts every failure, `failures` lists the first hundred found,
//! sorted by seq; a report is clean exactly when the count is zero. The kinds' snake_case
//! names are part of the JSON report.

use auditmem_projections::seal::{KeyError, KeyId, Keyring};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The stored hash does not match the record's own bytes: the record was modified.
    HashMismatch,
    /// A seq is missing from the tree: records were deleted.
    Missing,
    /// A record sits under another seq than the one it was sealed with: records were reordered.
    OutOfOrder,
    /// A self-consistent record was put into the chain: the one after it claims its seq.
    Inserted,
    /// A record does not link to the one before it: that one was replaced with a recomputed hash.
    BrokenLink,
    /// The stored value is not a record.
    Undecodable,
    /// A checkpoint's signature does not verify.
    BadSignature,
    /// The log ends before a head it is known to have had.
    Truncated,
    /// The log has the seq of a signed or expected head, with another hash: history rewritten.
    HeadMismatch,
    /// The Merkle tree of the records up to a checkpoint's size has another root than the
    /// checkpoint signs (or its signed note disagrees with it): the log or the checkpoint is
    /// not the one signed.
    RootMismatch,
    /// Export files against their manifest: the file's first rows are not there.
    RowsMissingAtStart,
    /// The file's last rows are not there.
    RowsMissingAtEnd,
    /// A row the manifest names sits at another chain position: rows were removed (or
    /// added) and the rest renumbered.
    Renumbered,
    /// The row at the manifest's first or last position has another hash: rows were rewritten
    /// and the chain recomputed.
    ManifestHashMismatch,
    /// The file has another number of rows than the manifest states.
    RowCountMismatch,
    /// The file's blake3 or size is not the manifest's: it is not the file the service wrote.
    DigestMismatch,
    /// The file is not the export the manifest describes (another format, no chain where the
    /// manifest has one, another first or last row).
    ManifestMismatch,
}

impl FailureKind {
    pub fn describe(self) -> &'static str {
        match self {
            FailureKind::HashMismatch => "modified record (hash mismatch)",
            FailureKind::Missing => "deleted record (missing seq)",
            FailureKind::OutOfOrder => "reordered record (out of order)",
            FailureKind::Inserted => "inserted record",
            FailureKind::BrokenLink => "broken link (a record was replaced with a recomputed hash)",
            FailureKind::Undecodable => "undecodable record",
            FailureKind::BadSignature => "bad signature",
            FailureKind::Truncated => "truncated tail",
            FailureKind::HeadMismatch => "head mismatch (history rewritten)",
            FailureKind::RootMismatch => "wrong root (the Merkle tree differs from the signed one)",
            FailureKind::RowsMissingAtStart => "rows missing at the start",
            FailureKind::RowsMissingAtEnd => "rows missing at the end",
            FailureKind::Renumbered => "rows removed and the rest renumbered",
            FailureKind::ManifestHashMismatch => {
                "hash mismatch against the manifest (rows rewritten, chain recomputed)"
            }
            FailureKind::RowCountMismatch => "row count differs from the manifest",
            FailureKind::DigestMismatch => "file digest differs from the manifest",
            FailureKind::ManifestMismatch => "not the export the manifest describes",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Failure {
    pub seq: u64,
    pub kind: FailureKind,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// First seq checked and the last seq the anchors say must exist (or "end").
    pub requested_from: u64,
    pub requested_to: Option<u64>,
    /// First and last seq found in the log (None when empty).
    pub found_from: Option<u64>,
    pub found_to: Option<u64>,
    pub records: u64,
    pub valid: u64,
    pub failures: Vec<Failure>,
    pub failure_count: u64,
    pub head_seq: u64,
    pub head_hash: String,
    pub checkpoints_checked: usize,
    /// Records whose personal fields are sealed under their subjects' keys.
    pub sealed: u64,
    /// Records holding personal fields in the clear: written before encryption, they cannot
    /// be shredded.
    pub plaintext: u64,
    /// Sealed records one of whose keys is destroyed (their subjects erased), counted when
    /// the verifier could open the keyring ([`Report::count_erased`]); `null` otherwise.
    pub erased: Option<u64>,
    /// The key sets of the sealed records and how many records each seals.
    #[serde(skip)]
    pub key_sets: Vec<(Vec<KeyId>, u64)>,
}

impl Report {
    /// Counts the sealed records that no longer open in `ring`: one of their keys is gone.
    pub fn count_erased(&mut self, ring: &dyn Keyring) -> Result<(), KeyError> {
        let mut erased = 0;
        for (keys, n) in &self.key_sets {
            if ring.seal_key(keys)?.is_none() {
                erased += n;
            }
        }
        self.erased = Some(erased);
        Ok(())
    }

    pub fn clean(&self) -> bool {
        self.failure_count == 0
    }

    pub fn first_failure(&self) -> Option<&Failure> {
        self.failures.first()
    }

    /// Human summary, several lines.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let to = self
            .requested_to
            .map(|t| t.to_string())
            .unwrap_or_else(|| "end".into());
        let found = match (self.found_from, self.found_to) {
            (Some(a), Some(b)) => format!("{a}..{b}"),
            _ => "nothing".into(),
        };
        s.push_str(&format!(
            "requested seq {}..{to}, found {found}\n",
            self.requested_from
        ));
        if let Some(f) = self.first_failure() {
            s.push_str(&format!(
                "FIRST BAD SEQ {}: {}: {}\n",
                f.seq,
                f.kind.describe(),
                f.detail
            ));
            for f in self.failures.iter().skip(1).take(9) {
                s.push_str(&format!(
                    "  also seq {}: {}: {}\n",
                    f.seq,
                    f.kind.describe(),
                    f.detail
                ));
            }
            if self.failure_count > 10 {
                s.push_str(&format!("  ... {} failures in all\n", self.failure_count));
            }
        }
        if self.checkpoints_checked > 0 {
            s.push_str(&format!(
                "{} checkpoint(s) checked\n",
                self.checkpoints_checked
            ));
        }
        s.push_str(&format!(
            "{} sealed records, {} plaintext records that predate encryption{}\n",
            self.sealed,
            self.plaintext,
            match self.erased {
                Some(n) => format!(", {n} sealed records of erased subjects (keys destroyed)"),
                None => String::new(),
            }
        ));
        s.push_str(&format!(
            "{}/{} records valid; head seq {} hash {}\n{}",
            self.valid,
            self.records,
            self.head_seq,
            self.head_hash,
            if self.clean() {
                "OK: the chain is intact"
            } else {
                "TAMPERED"
            }
        ));
        s
    }
}
