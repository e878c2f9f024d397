//! A write batch that can be read back before it is applied.
//!
//! Several events in one group may touch the same key (a tenant created and then updated in
//! one group commit); the overlay lets `apply` read its own pending writes, then lands them,
//! with the checkpoint, as one atomic sled batch.

use crate::projection::{read_checkpoint, Applied, Result, CHECKPOINT_KEY};
use crate::FastMap;

pub(crate) struct Overlay<'t> {
    tree: &'t sled::Tree,
    pending: FastMap<Vec<u8>, Option<Vec<u8>>>,
    /// The checkpoint stored when the overlay was started.
    base: u64,
}

impl<'t> Overlay<'t> {
    pub fn new(tree: &'t sled::Tree, base: u64) -> Self {
        Self {
            tree,
            pending: FastMap::default(),
            base,
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.pending.get(key) {
            return Ok(v.clone());
        }
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    pub fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.pending.insert(key, Some(value));
    }

    pub fn remove(&mut self, key: Vec<u8>) {
        self.pending.insert(key, None);
    }

    /// Every key starting with `prefix` as the overlay sees it: the tree's, less those removed
    /// here, with those inserted here. It walks all pending writes, so it is for rare events
    /// (a deletion), not for one folded per record.
    pub fn keys_with_prefix(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        for k in self.tree.scan_prefix(prefix).keys() {
            let k = k?;
            if !self.pending.contains_key(k.as_ref()) {
                keys.push(k.to_vec());
            }
        }
        keys.extend(
            self.pending
                .iter()
                .filter(|(k, v)| v.is_some() && k.starts_with(prefix))
                .map(|(k, _)| k.clone()),
        );
        Ok(keys)
    }

    /// Writes every pending change and the new checkpoint in one atomic batch.
    ///
    /// With no change pending, nothing is written unless the stored checkpoint trails by
    /// [`CHECKPOINT_LAG`] or more: on the append path a group of audit events would otherwise
    /// cost every other projection a sled batch of its own, and re-folding events that change
    /// nothing here is harmless.
    pub fn commit(self, checkpoint: u64) -> Result<()> {
        if self.pending.is_empty() && checkpoint.saturating_sub(self.base) < CHECKPOINT_LAG {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for (k, v) in self.pending {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        batch.insert(CHECKPOINT_KEY, &checkpoint.to_be_bytes());
        self.tree.apply_batch(batch)?;
        Ok(())
    }
}

pub(crate) fn prefixed(prefix: u8, parts: &[&[u8]]) -> Vec<u8> {
    let len = 1 + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut key = Vec::with_capacity(len);
    key.push(prefix);
    for p in parts {
        key.extend_from_slice(p);
    }
    key
}

/// How far a projection's checkpoint may trail the events it has seen before an empty commit
/// writes it anyway: a bound on what the next start re-reads for it.
pub(crate) const CHECKPOINT_LAG: u64 = 65_536;

/// The shared shape of every projection's `apply`: fold the events above the tree's checkpoint
/// into one overlay. Returns the overlay and the last seq folded (for `commit`), or `None` when
/// every event was already applied.
pub(crate) fn fold_new<'t>(
    tree: &'t sled::Tree,
    name: &'static str,
    events: &[Applied<'_>],
    mut fold: impl FnMut(&mut Overlay<'t>, &Applied<'_>) -> Result<()>,
) -> Result<Option<(Overlay<'t>, u64)>> {
    let cp = read_checkpoint(tree, name)?;
    let mut ov = Overlay::new(tree, cp);
    let mut last = cp;
    for a in events.iter().filter(|a| a.seq > cp) {
        fold(&mut ov, a)?;
        last = a.seq;
    }
    Ok((last > cp).then_some((ov, last)))
}
