//! The signed manifest of an export: what an auditor holds a file to.
//!
//! Someone who can write the file but does not hold the service's key can drop rows at either
//! end, drop one and renumber, rewrite a row and recompute the chain after it, or make a file
//! up: each such file still chains internally. The manifest pins what they cannot forge
//! without the key: the export (id, tenant, range, format, the request's log position, when),
//! its row count, its first and last place in the tenant chain (position and hash), and the
//! file's size and blake3.
//!
//! It is built from the `ExportRequested`/`ExportCompleted` facts in the log (the exports
//! projection's view), so it can be regenerated at any time, and signed with the checkpoint
//! key when served (ed25519 is deterministic: the same manifest always gets the same
//! signature). The signed message is the text [`Manifest::message`]: `auditmem/export-manifest/v1`
//! then one `name value` line per field in the order of the struct (`-` for none), so any ed25519
//! tool can check it.

use auditmem_projections::exports::{ExportStatus, ExportView};
use auditmem_projections::{ChainPoint, Named};
use chrono::{DateTime, SecondsFormat, Utc};
use ed25519_dalek::VerifyingKey;

use crate::log::checkpoint::{check_signed, CheckpointSigner};
pub use crate::wire::export::Manifest;

/// The manifest format this build writes and reads.
pub const VERSION: &str = "auditmem/export-manifest/v1";

/// RFC 3339 with microseconds: the manifest pins times exactly as stored.
fn time(micros: i64) -> String {
    DateTime::<Utc>::from_timestamp_micros(micros)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn hex(hash: &[u8; 32]) -> String {
    auditmem_projections::audit_view::hash_hex(hash)
}

fn or_dash<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_string(), T::to_string)
}

impl Manifest {
    /// The manifest of a completed export (expired ones included), signed by `signer`; `None`
    /// while it is processing or when it failed.
    pub fn of(v: &ExportView, signer: &CheckpointSigner) -> Option<Manifest> {
        if v.status != ExportStatus::Completed {
            return None;
        }
        let point = |p: &Option<ChainPoint>| {
            (
                p.map(|p| p.audit_id),
                p.map(|p| p.chain_index),
                p.as_ref().map(|p| hex(&p.hash)),
            )
        };
        let (first_id, first_chain_index, first_hash) = point(&v.first);
        let (last_id, last_chain_index, last_hash) = point(&v.last);
        let mut m = Manifest {
            version: VERSION.to_string(),
            export_id: v.export_id,
            tenant_id: v.tenant_id,
            format: v.format.as_str().to_string(),
            start_time: time(v.start_time),
            end_time: time(v.end_time),
            request_seq: v.request_seq,
            requested_at: time(v.created_at),
            completed_at: time(v.completed_at?),
            records: v.records?,
            with_chain: v.with_chain,
            first_id,
            first_chain_index,
            first_hash,
            last_id,
            last_chain_index,
            last_hash,
            file_bytes: v.file_size?,
            file_blake3: v.file_blake3.clone()?,
            formula_guard: v.formula_guard,
            public_key: signer.public_key_hex(),
            signature: String::new(),
        };
        m.signature = signer.sign_message(&m.message());
        Some(m)
    }

    /// The text the signature covers: every field but the key and the signature.
    pub fn message(&self) -> String {
        let lines = [
            ("export_id", self.export_id.to_string()),
            ("tenant_id", self.tenant_id.to_string()),
            ("format", self.format.clone()),
            ("start_time", self.start_time.clone()),
            ("end_time", self.end_time.clone()),
            ("request_seq", self.request_seq.to_string()),
            ("requested_at", self.requested_at.clone()),
            ("completed_at", self.completed_at.clone()),
            ("records", self.records.to_string()),
            ("with_chain", self.with_chain.to_string()),
            ("first_id", or_dash(&self.first_id)),
            ("first_chain_index", or_dash(&self.first_chain_index)),
            ("first_hash", or_dash(&self.first_hash)),
            ("last_id", or_dash(&self.last_id)),
            ("last_chain_index", or_dash(&self.last_chain_index)),
            ("last_hash", or_dash(&self.last_hash)),
            ("file_bytes", self.file_bytes.to_string()),
            ("file_blake3", self.file_blake3.clone()),
            ("formula_guard", self.formula_guard.to_string()),
        ];
        let mut s = self.version.clone();
        for (name, value) in lines {
            s.push('\n');
            s.push_str(name);
            s.push(' ');
            s.push_str(&value);
        }
        s
    }

    /// Checks the signature, against `pinned` when the auditor gave the service's key.
    pub fn check_signature(&self, pinned: Option<&VerifyingKey>) -> Result<(), String> {
        if self.version != VERSION {
            return Err(format!("the manifest is {}, not {VERSION}", self.version));
        }
        check_signed(&self.message(), &self.public_key, &self.signature, pinned)
    }

    /// Reads a manifest as served (`GET .../manifest`), or inside the status answer
    /// (`{"data": {"manifest": {...}}}`) or an envelope around it (`{"data": {...}}`).
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("the manifest is not JSON: {e}"))?;
        let inner = match v.get("data") {
            Some(data) => data.get("manifest").unwrap_or(data).clone(),
            None => v,
        };
        serde_json::from_value(inner).map_err(|e| format!("not an export manifest: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use auditmem_projections::ExportFormat;
    use ed25519_dalek::SigningKey;

    fn view() -> ExportView {
        ExportView {
            export_id: uuid::Uuid::from_u128(1),
            tenant_id: uuid::Uuid::from_u128(2),
            format: ExportFormat::Csv,
            start_time: 1_700_000_000_000_001,
            end_time: 1_700_000_100_000_000,
            estimated_records: 3,
            with_chain: true,
            request_seq: 42,
            status: ExportStatus::Completed,
            records: Some(3),
            file_size: Some(900),
            file_blake3: Some("ab".repeat(32)),
            created_at: 1_700_000_100_000_000,
            completed_at: Some(1_700_000_101_000_000),
            expires_at: Some(1_700_600_000_000_000),
            error: None,
            first: Some(ChainPoint {
                audit_id: uuid::Uuid::from_u128(3),
                chain_index: 7,
                hash: [1; 32],
            }),
            last: Some(ChainPoint {
                audit_id: uuid::Uuid::from_u128(4),
                chain_index: 9,
                hash: [2; 32],
            }),
            formula_guard: true,
        }
    }

    fn signer(seed: u8) -> CheckpointSigner {
        let dir = std::env::temp_dir().join("auditmem-manifest-test-unused.ndjson");
        CheckpointSigner::new(SigningKey::from_bytes(&[seed; 32]), dir)
    }

    #[test]
    fn a_manifest_signs_every_field_and_reads_back() {
        let s = signer(7);
        let m = Manifest::of(&view(), &s).expect("completed");
        assert_eq!(
            m.message(),
            "auditmem/export-manifest/v1\nexport_id 00000000-0000-0000-0000-000000000001\n\
             tenant_id 00000000-0000-0000-0000-000000000002\nformat csv\n\
             start_time 2023-11-14T22:13:20.000001Z\nend_time 2023-11-14T22:15:00.000000Z\n\
             request_seq 42\nrequested_at 2023-11-14T22:15:00.000000Z\n\
             completed_at 2023-11-14T22:15:01.000000Z\nrecords 3\nwith_chain true\n\
             first_id 00000000-0000-0000-0000-000000000003\nfirst_chain_index 7\nfirst_hash 0101010101010101010101010101010101010101010101010101010101010101\n\
             last_id 00000000-0000-0000-0000-000000000004\nlast_chain_index 9\nlast_hash 0202020202020202020202020202020202020202020202020202020202020202\n\
             file_bytes 900\nfile_blake3 abababababababababababababababababababababababababababababababab\n\
             formula_guard true"
        );
        assert_eq!(m.check_signature(None), Ok(()));
        let pinned = SigningKey::from_bytes(&[7; 32]).verifying_key();
        assert_eq!(m.check_signature(Some(&pinned)), Ok(()));
        // Deterministic: the same view signs the same.
        assert_eq!(Manifest::of(&view(), &s), Some(m.clone()));
        let text = serde_json::to_vec(&m).expect("json");
        assert_eq!(Manifest::parse(&text), Ok(m.clone()));
        let status =
            serde_json::json!({"success": true, "data": {"status": "completed", "manifest": m}});
        assert_eq!(
            Manifest::parse(&serde_json::to_vec(&status).expect("json")),
            Ok(m.clone())
        );

        // Any field changed breaks the signature; another key is refused when one is pinned.
        let mut forged = m.clone();
        forged.records = 2;
        assert_eq!(
            forged.check_signature(None),
            Err("signature does not verify".to_string())
        );
        let other = Manifest::of(&view(), &signer(8)).expect("completed");
        assert_eq!(other.check_signature(None), Ok(()));
        assert_eq!(
            other.check_signature(Some(&pinned)),
            Err("signed by a different key than the pinned public key".to_string())
        );
    }

    #[test]
    fn only_completed_exports_have_a_manifest() {
        let s = signer(7);
        for status in [ExportStatus::Processing, ExportStatus::Failed] {
            let mut v = view();
            v.status = status;
            assert_eq!(Manifest::of(&v, &s), None);
        }
    }
}
