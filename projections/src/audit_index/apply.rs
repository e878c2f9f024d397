//! The audit index as a projection: each new `AuditRecorded` becomes a ref chained to its
//! tenant's head, the batch's refs are stored a block per [`BLOCK_REFS`], then indexed in
//! memory.
//!
//! Invariants: an audit id is chained once (a second event with a known id is skipped, so a
//! tenant's chain never forks); the tree is committed before the in-memory state takes the
//! batch; `apply` is the only writer, so the heads read while folding are still current then.

use std::collections::HashSet;

use uuid::Uuid;

use super::refs::{AuditRef, REF_LEN};
use super::state::{action_key, IndexState};
use super::{AuditIndex, BLOCK_REFS, TREE};
use crate::audit_view::{canonical_entry_bytes, chain_hash_canonical, ChainRule};
use crate::event::Event;
use crate::overlay::{fold_new, prefixed};
use crate::projection::{Applied, Projection, Result};
use crate::sorted_index::BlockFile;
use crate::FastMap;

impl Projection for AuditIndex {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        let mut heads: FastMap<Uuid, ([u8; 32], u64)> = FastMap::default();
        let mut refs: Vec<AuditRef> = Vec::new();
        let mut fresh: HashSet<Uuid> = HashSet::new();
        let folded = {
            let state = self.state();
            fold_new(&self.tree, TREE, events, |_, a| {
                let Event::AuditRecorded(rec) = a.event else {
                    return Ok(());
                };
                let known = state.recent.contains_key(&rec.entry.id)
                    || self
                        .find_stored(&rec.entry.id, &state.older_runs(&rec.entry.id))?
                        .is_some();
                if known || !fresh.insert(rec.entry.id) {
                    // The same audit id twice would fork the tenant chain; the first one stands.
                    return Ok(());
                }
                let head = match heads.get(&rec.tenant_id) {
                    Some(h) => *h,
                    None => state
                        .heads
                        .get(&rec.tenant_id)
                        .copied()
                        .unwrap_or(([0; 32], 0)),
                };
                let sealed = rec.sealed.is_some();
                let rule = ChainRule::of(&rec.entry, sealed);
                let (hash, action) = match a.prepared.and_then(|p| p.audit.as_ref()) {
                    Some((canonical, action)) => {
                        (chain_hash_canonical(rule, &head.0, canonical), *action)
                    }
                    None => (
                        chain_hash_canonical(
                            rule,
                            &head.0,
                            &canonical_entry_bytes(&rec.entry, sealed),
                        ),
                        action_key(&rec.entry.action),
                    ),
                };
                refs.push(AuditRef {
                    id: rec.entry.id,
                    seq: a.seq,
                    tenant_id: rec.tenant_id,
                    created_at: rec.entry.created_at,
                    action_key: action,
                    chain_index: head.1 + 1,
                    hash,
                    prev_hash: head.0,
                });
                heads.insert(rec.tenant_id, (hash, head.1 + 1));
                Ok(())
            })?
        };
        let Some((mut ov, last)) = folded else {
            return Ok(());
        };
        for block in refs.chunks(BLOCK_REFS) {
            let mut bytes = Vec::with_capacity(block.len() * REF_LEN);
            for r in block {
                r.write(&mut bytes);
            }
            ov.insert(prefixed(b'g', &[&block[0].seq.to_be_bytes()]), bytes);
        }
        ov.commit(last)?;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        for block in refs.chunks(BLOCK_REFS) {
            state.insert_block(block)?;
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        // A new block file: the old one's blocks are all forgotten.
        let fresh = IndexState::new(
            state.recent_cap,
            state.file.as_ref().map(BlockFile::renewed),
        );
        *state = fresh;
        Ok(())
    }
}
