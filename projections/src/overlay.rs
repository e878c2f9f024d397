//! A write batch that can be read back before it is applied.
//!
//! Several events in one group may touch the same key (a tenant created and then updated in
//! one group commit); the overlay lets `apply` read its own pending writes, then lands them,
//! with the checkpoint, as one atomic sled batch ([`Overlay::commit`]), or a large commit as
//! several, the checkpoint in the last ([`Overlay::commit_in_batches`]).

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

    /// [`Self::commit`], but a commit of more than `split.keys` changes or `split.bytes` bytes
    /// of keys and values lands in sled batches of at most `split.keys` changes, each closed
    /// once it reaches `split.bytes`: sled applies a batch under a lock that every other write
    /// to the db takes (the log's next group included), so one batch of an erasure's states
    /// would hold every tenant's next write for as long as it takes.
    ///
    /// Not atomic: the inserts land first, in key order, then the removals, and the checkpoint
    /// only with the last batch, so a crash between two batches leaves some of the inserts,
    /// or all of them and some of the removals, under the old checkpoint, and the events are
    /// folded again on the next start. Only for a projection whose fold gives the same result
    /// over any such prefix of its writes, and whose inserts keep what its removals drop (the
    /// memories': docs/ARCHITECTURE.md).
    ///
    /// Stops after `limit` batches (fewer than it takes only in a test of such a crash).
    /// Returns the batches it took (one for a commit that fits in one), and whether the
    /// checkpoint was in them.
    pub fn commit_in_batches(
        self,
        checkpoint: u64,
        split: Split,
        limit: usize,
    ) -> Result<(usize, bool)> {
        let size = |(k, v): (&Vec<u8>, &Option<Vec<u8>>)| k.len() + v.as_ref().map_or(0, Vec::len);
        if self.pending.len() <= split.keys
            && self.pending.iter().map(size).sum::<usize>() <= split.bytes
        {
            self.commit(checkpoint)?;
            return Ok((1, true));
        }
        let (mut inserts, mut removals): (Vec<_>, Vec<_>) =
            self.pending.into_iter().partition(|(_, v)| v.is_some());
        inserts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        removals.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut changes = inserts.into_iter().chain(removals).peekable();
        let mut written = 0;
        let mut landed = false;
        while written < limit && !landed {
            let mut batch = sled::Batch::default();
            let (mut keys, mut bytes) = (0, 0);
            while keys < split.keys && bytes < split.bytes {
                let Some((k, v)) = changes.next() else {
                    break;
                };
                keys += 1;
                bytes += size((&k, &v));
                match v {
                    Some(v) => batch.insert(k, v),
                    None => batch.remove(k),
                }
            }
            landed = changes.peek().is_none();
            if landed {
                batch.insert(CHECKPOINT_KEY, &checkpoint.to_be_bytes());
            }
            self.tree.apply_batch(batch)?;
            written += 1;
        }
        Ok((written, landed))
    }
}

/// How [`Overlay::commit_in_batches`] splits a large commit: at most `keys` changes a batch,
/// a batch closed once its keys and values reach `bytes`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    pub keys: usize,
    pub bytes: usize,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree holding keys `r000`..`r299` and checkpoint 7.
    fn tree_with_old_keys(db: &sled::Db) -> sled::Tree {
        let tree = db.open_tree("t").expect("tree");
        for i in 0..300 {
            tree.insert(format!("r{i:03}"), b"old").expect("insert");
        }
        tree.insert(CHECKPOINT_KEY, &7u64.to_be_bytes())
            .expect("insert");
        tree
    }

    /// Removes every `r` key and inserts `i000`..`i999` (ten-byte values): 1,300 changes.
    fn large_commit(ov: &mut Overlay<'_>) {
        for i in 0..300 {
            ov.remove(format!("r{i:03}").into_bytes());
        }
        for i in 0..1000 {
            ov.insert(
                format!("i{i:03}").into_bytes(),
                format!("value {i:04}").into_bytes(),
            );
        }
    }

    /// Every key of the tree but the checkpoint, and the checkpoint.
    fn contents(tree: &sled::Tree) -> (Vec<String>, u64) {
        let keys = tree
            .iter()
            .keys()
            .map(|k| k.expect("read"))
            .filter(|k| k.as_ref() != CHECKPOINT_KEY)
            .map(|k| String::from_utf8_lossy(&k).into_owned())
            .collect();
        (keys, read_checkpoint(tree, "t").expect("checkpoint"))
    }

    fn names(prefix: char, range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("{prefix}{i:03}")).collect()
    }

    #[test]
    fn a_large_commit_lands_every_change_and_the_checkpoint_in_several_batches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let tree = tree_with_old_keys(&db);
        let mut ov = Overlay::new(&tree, 7);
        large_commit(&mut ov);
        let split = Split {
            keys: 256,
            bytes: usize::MAX,
        };
        // 1,300 changes, 256 a batch.
        assert_eq!(
            ov.commit_in_batches(9, split, usize::MAX).expect("commit"),
            (6, true)
        );
        assert_eq!(contents(&tree), (names('i', 0..1000), 9));
        assert_eq!(
            tree.get("i123").expect("read").as_deref(),
            Some(&b"value 0123"[..])
        );

        // Fewer changes than `keys`, more bytes: an insert is 14 bytes of key and value, a
        // removal 4, and a batch closes once it reaches 1,000: 13 batches of 72 inserts (1,008
        // bytes), one of 64 and 26 removals, one of 250 removals and one of the last 24.
        let tree = tree_with_old_keys(&db);
        let mut ov = Overlay::new(&tree, 7);
        large_commit(&mut ov);
        let split = Split {
            keys: 10_000,
            bytes: 1_000,
        };
        assert_eq!(
            ov.commit_in_batches(9, split, usize::MAX).expect("commit"),
            (16, true)
        );
        assert_eq!(contents(&tree), (names('i', 0..1000), 9));

        // A commit of at most `keys` changes and `bytes` bytes is one batch.
        let mut ov = Overlay::new(&tree, 9);
        ov.remove(b"i000".to_vec());
        ov.insert(b"j".to_vec(), b"v".to_vec());
        assert_eq!(
            ov.commit_in_batches(10, split, usize::MAX).expect("commit"),
            (1, true)
        );
        let (keys, checkpoint) = contents(&tree);
        assert_eq!(
            (keys.first().map(String::as_str), keys.len(), checkpoint),
            (Some("i001"), 1000, 10)
        );
    }

    #[test]
    fn a_large_commit_cut_short_leaves_its_first_inserts_and_the_old_checkpoint() {
        let split = Split {
            keys: 256,
            bytes: usize::MAX,
        };
        // What the tree holds after the commit stopped once `batches` had landed.
        let cut = |batches: usize| {
            let dir = tempfile::tempdir().expect("tempdir");
            let db = sled::open(dir.path()).expect("open");
            let tree = tree_with_old_keys(&db);
            let mut ov = Overlay::new(&tree, 7);
            large_commit(&mut ov);
            assert_eq!(
                ov.commit_in_batches(9, split, batches).expect("commit"),
                (batches, false)
            );
            contents(&tree)
        };
        // Two batches of six: the first 512 inserts in key order, nothing removed.
        let mut want = names('i', 0..512);
        want.extend(names('r', 0..300));
        assert_eq!(cut(2), (want, 7));
        // Five: every insert, and the first 280 removals.
        let mut want = names('i', 0..1000);
        want.extend(names('r', 280..300));
        assert_eq!(cut(5), (want, 7));
    }
}
