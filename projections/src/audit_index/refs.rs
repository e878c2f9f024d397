//! The stored form of the audit index: fixed-size [`AuditRef`]s in blocks under
//! `g|first_seq`, and the reads that go to the tree for them.
//!
//! Invariants: a ref is [`REF_LEN`] bytes, its fields big-endian in declaration order; a
//! block holds up to [`BLOCK_REFS`](super::BLOCK_REFS) refs in seq order, keyed by its first
//! ref's seq, so the block holding a seq is the last one keyed at or below it. A block whose
//! length is not a multiple of [`REF_LEN`] is reported corrupt, never read in part.

use uuid::Uuid;

use super::{AuditIndex, TREE};
use crate::overlay::prefixed;
use crate::projection::{corrupt, Result};

/// Where an audit entry lives and its place in its tenant's chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditRef {
    pub id: Uuid,
    pub seq: u64,
    pub tenant_id: Uuid,
    pub created_at: i64,
    pub action_key: u64,
    /// 1-based position of the entry in its tenant's chain.
    pub chain_index: u64,
    pub hash: [u8; 32],
    pub prev_hash: [u8; 32],
}

pub(super) const REF_LEN: usize = 16 + 8 + 16 + 8 + 8 + 8 + 32 + 32;

impl AuditRef {
    pub(super) fn write(&self, v: &mut Vec<u8>) {
        v.extend_from_slice(self.id.as_bytes());
        v.extend_from_slice(&self.seq.to_be_bytes());
        v.extend_from_slice(self.tenant_id.as_bytes());
        v.extend_from_slice(&self.created_at.to_be_bytes());
        v.extend_from_slice(&self.action_key.to_be_bytes());
        v.extend_from_slice(&self.chain_index.to_be_bytes());
        v.extend_from_slice(&self.hash);
        v.extend_from_slice(&self.prev_hash);
    }

    pub(super) fn read(b: &[u8]) -> AuditRef {
        // Callers pass exactly REF_LEN bytes (blocks are checked to be a multiple of it).
        let arr = |o: usize| -> [u8; 8] {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            a
        };
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[0..16]);
        let mut tenant = [0u8; 16];
        tenant.copy_from_slice(&b[24..40]);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&b[64..96]);
        let mut prev_hash = [0u8; 32];
        prev_hash.copy_from_slice(&b[96..128]);
        AuditRef {
            id: Uuid::from_bytes(id),
            seq: u64::from_be_bytes(arr(16)),
            tenant_id: Uuid::from_bytes(tenant),
            created_at: i64::from_be_bytes(arr(40)),
            action_key: u64::from_be_bytes(arr(48)),
            chain_index: u64::from_be_bytes(arr(56)),
            hash,
            prev_hash,
        }
    }
}

pub(super) fn parse_block(b: &[u8]) -> Result<Vec<AuditRef>> {
    if !b.len().is_multiple_of(REF_LEN) {
        return Err(corrupt(TREE, format!("ref block of {} bytes", b.len())));
    }
    Ok(b.chunks_exact(REF_LEN).map(AuditRef::read).collect())
}

impl AuditIndex {
    /// Finds `id` among the refs stored in the runs `older_runs` names.
    pub(super) fn find_stored(
        &self,
        id: &Uuid,
        runs: &[(u64, Option<u64>)],
    ) -> Result<Option<AuditRef>> {
        for &(first, next) in runs {
            let from = prefixed(b'g', &[&first.to_be_bytes()]);
            let blocks = match next {
                Some(n) => self.tree.range(from..prefixed(b'g', &[&n.to_be_bytes()])),
                None => self.tree.range(from..prefixed(b'h', &[])),
            };
            for kv in blocks {
                let (_, block) = kv?;
                if !block.len().is_multiple_of(REF_LEN) {
                    return Err(corrupt(TREE, format!("ref block of {} bytes", block.len())));
                }
                // Compare the ids in place: a block is parsed only for the ref asked for.
                if let Some(raw) = block
                    .chunks_exact(REF_LEN)
                    .find(|r| &r[..16] == id.as_bytes())
                {
                    return Ok(Some(AuditRef::read(raw)));
                }
            }
        }
        Ok(None)
    }

    /// The ref of the entry stored at log `seq`.
    pub fn at_seq(&self, seq: u64) -> Result<Option<AuditRef>> {
        let upper = prefixed(b'g', &[&seq.to_be_bytes()]);
        let Some(kv) = self.tree.range(prefixed(b'g', &[])..=upper).next_back() else {
            return Ok(None);
        };
        let (_, block) = kv?;
        let refs = parse_block(&block)?;
        Ok(refs
            .binary_search_by_key(&seq, |r| r.seq)
            .ok()
            .map(|i| refs[i]))
    }

    /// The refs of `tenant_id`'s entries with `after < seq <= upto`, in log order, at most
    /// `limit` of them, and how far that read: every ref of the tenant up to that seq is in the
    /// answer, so a caller resumes after it. A live tail reads its tenant's entries this way.
    /// The seqs come from the tenant's log-order index, the refs from the blocks holding them
    /// (each block read once), so a read costs the tenant's own entries, however many other
    /// tenants' lie between them.
    ///
    /// Every entry up to the log's head is in the index (the applier folds a group before the
    /// head moves), so a caller passing `upto` at or below the head misses none.
    pub fn tenant_after(
        &self,
        tenant_id: &Uuid,
        after: u64,
        upto: u64,
        limit: usize,
    ) -> Result<(Vec<AuditRef>, u64)> {
        if upto <= after {
            return Ok((Vec::new(), after));
        }
        let limit = limit.max(1);
        let seqs = self.tenant_seqs(tenant_id, after, upto, limit)?;
        let refs = self
            .at_seqs(&seqs)?
            .into_iter()
            .zip(&seqs)
            .map(|(r, seq)| {
                r.ok_or_else(|| {
                    corrupt(TREE, format!("seq {seq} is indexed but has no stored ref"))
                })
            })
            .collect::<Result<Vec<AuditRef>>>()?;
        Ok((refs, crate::log_order::reached(&seqs, upto, limit)))
    }

    /// Refs of several seqs, reading each stored block once.
    pub fn at_seqs(&self, seqs: &[u64]) -> Result<Vec<Option<AuditRef>>> {
        let mut out = Vec::with_capacity(seqs.len());
        let mut cached: Vec<AuditRef> = Vec::new();
        for &seq in seqs {
            let hit = cached
                .binary_search_by_key(&seq, |r| r.seq)
                .ok()
                .map(|i| cached[i]);
            if let Some(r) = hit {
                out.push(Some(r));
                continue;
            }
            let upper = prefixed(b'g', &[&seq.to_be_bytes()]);
            match self.tree.range(prefixed(b'g', &[])..=upper).next_back() {
                None => out.push(None),
                Some(kv) => {
                    let (_, block) = kv?;
                    cached = parse_block(&block)?;
                    out.push(
                        cached
                            .binary_search_by_key(&seq, |r| r.seq)
                            .ok()
                            .map(|i| cached[i]),
                    );
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_reads_back_as_written_and_a_torn_block_is_corrupt() {
        let r = AuditRef {
            id: Uuid::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
            seq: u64::MAX - 1,
            tenant_id: Uuid::from_u128(7),
            created_at: -5,
            action_key: 0x1122_3344_5566_7788,
            chain_index: 3,
            hash: [0xab; 32],
            prev_hash: [0xcd; 32],
        };
        let mut bytes = Vec::new();
        r.write(&mut bytes);
        r.write(&mut bytes);
        assert_eq!(bytes.len(), 2 * REF_LEN);
        assert_eq!(parse_block(&bytes).expect("parse"), vec![r, r]);
        assert!(parse_block(&bytes[..REF_LEN + 1]).is_err());
        assert_eq!(parse_block(&[]).expect("parse"), Vec::new());
    }
}
