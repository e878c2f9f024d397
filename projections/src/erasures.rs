//! Erasures: every data key an erasure event named, and where each erasure sits in the log.
//!
//! Invariants:
//! - A key named by a `SubjectsErased` event is destroyed when the event is folded: the fold
//!   runs only once the event is durable in the log, so no key is ever destroyed for an
//!   erasure the log could lose, and every node that folds the event destroys it (idempotent:
//!   destroying a key that is gone already is nothing).
//! - The ids of every named key stay in this tree (state and checkpoint in one sled batch,
//!   rebuilt by replay), so [`Erasures::enforce`] can destroy, before the service serves, any
//!   of them a restore from a backup (or a crash between the append and the fold) brought
//!   back. Key ids are random: the tree says nothing about whom a key served.
//! - Each erasure's log position is kept by its id, for the receipt.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::Event;
use crate::overlay::{fold_new, prefixed};
use crate::projection::{corrupt, Applied, Projection, ProjectionError, Result};
use crate::seal::{KeyId, Keyring};

pub const TREE: &str = "erasures";

/// One erasure as the log holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErasureView {
    pub erasure_id: Uuid,
    pub tenant_id: Uuid,
    /// The log position of the erasure event.
    pub seq: u64,
    pub erased_at: i64,
    pub key_ids: usize,
    pub memories: usize,
}

pub struct Erasures {
    tree: sled::Tree,
    keys: Arc<dyn Keyring>,
}

fn dec(bytes: &[u8]) -> Result<ErasureView> {
    rmp_serde::from_slice(bytes).map_err(|e| corrupt(TREE, format!("erasure: {e}")))
}

fn enc(v: &ErasureView) -> Vec<u8> {
    // Plain struct of integers and ids: encoding into a Vec cannot fail.
    rmp_serde::to_vec_named(v).unwrap_or_default()
}

fn store_error(e: crate::seal::KeyError) -> ProjectionError {
    ProjectionError::Io(std::io::Error::other(format!(
        "destroying erased keys: {e}"
    )))
}

impl Erasures {
    pub fn open(db: &sled::Db, keys: Arc<dyn Keyring>) -> Result<Self> {
        Ok(Self {
            tree: db.open_tree(TREE)?,
            keys,
        })
    }

    /// The erasure `id`, once its event is folded.
    pub fn get(&self, id: &Uuid) -> Result<Option<ErasureView>> {
        self.tree
            .get(prefixed(b'e', &[id.as_bytes()]))?
            .map(|v| dec(&v))
            .transpose()
    }

    /// Every key id an erasure event named, in id order.
    pub fn named_keys(&self) -> Result<Vec<KeyId>> {
        let mut out = Vec::new();
        for kv in self.tree.scan_prefix([b'k']) {
            let (k, _) = kv?;
            let id: [u8; 16] = k[1..]
                .try_into()
                .map_err(|_| corrupt(TREE, "a key id is not 16 bytes"))?;
            out.push(KeyId(id));
        }
        Ok(out)
    }

    /// Destroys every named key the keyring still holds (brought back by a restore from a
    /// backup, or left by a crash between an erasure's append and its fold); returns how many
    /// there were. The service calls it at start, before it serves.
    pub fn enforce(&self) -> Result<usize> {
        let named = self.named_keys()?;
        if named.is_empty() {
            return Ok(0);
        }
        self.keys.destroy(&named).map_err(store_error)
    }
}

impl Projection for Erasures {
    fn name(&self) -> &'static str {
        TREE
    }

    fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    fn apply(&self, events: &[Applied<'_>]) -> Result<()> {
        // A group without an erasure writes nothing but, every `CHECKPOINT_LAG` records, the
        // checkpoint (`Overlay::commit`), as every projection does: so a start after a crash
        // does not fold the whole log again for this one.
        let mut destroy = Vec::new();
        let folded = fold_new(&self.tree, TREE, events, |ov, a| {
            if let Event::SubjectsErased(e) = a.event {
                for id in &e.key_ids {
                    ov.insert(prefixed(b'k', &[&id.0]), a.seq.to_be_bytes().to_vec());
                }
                destroy.extend_from_slice(&e.key_ids);
                let view = ErasureView {
                    erasure_id: e.erasure_id,
                    tenant_id: e.tenant_id,
                    seq: a.seq,
                    erased_at: e.erased_at,
                    key_ids: e.key_ids.len(),
                    memories: e.memory_ids.len(),
                };
                ov.insert(prefixed(b'e', &[e.erasure_id.as_bytes()]), enc(&view));
            }
            Ok(())
        })?;
        if let Some((ov, last)) = folded {
            // Named first, then destroyed: a crash in between leaves a named key that
            // `enforce` destroys at the next start.
            ov.commit(last)?;
            if !destroy.is_empty() {
                self.keys.destroy(&destroy).map_err(store_error)?;
            }
        }
        Ok(())
    }

    fn reset(&self) -> Result<()> {
        self.tree.clear()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::SubjectsErased;
    use crate::seal::{MemoryKeyring, Sealed, Subject};

    fn erasure(id: u128, key_ids: Vec<KeyId>) -> Event {
        Event::SubjectsErased(SubjectsErased {
            erasure_id: Uuid::from_u128(id),
            tenant_id: Uuid::nil(),
            subjects: vec![Subject::User(Uuid::nil(), "alice".into())],
            key_ids,
            memory_ids: vec![Uuid::from_u128(7)],
            erased_at: 42,
        })
    }

    #[test]
    fn folding_an_erasure_destroys_its_keys_and_a_restored_key_is_destroyed_again() {
        let db = sled::Config::new().temporary(true).open().expect("db");
        let ring = Arc::new(MemoryKeyring::default());
        let alice = Subject::User(Uuid::nil(), "alice".into());
        let bob = Subject::User(Uuid::nil(), "bob".into());
        let sealed = Sealed::seal_for(ring.as_ref(), &[alice], b"", b"078-05-1120").expect("seal");
        let kept = Sealed::seal_for(ring.as_ref(), &[bob], b"", b"bob's").expect("seal");
        let erasures = Erasures::open(&db, ring.clone()).expect("open");

        // Given an erasure naming alice's key, when folded at seq 5, then the key is gone,
        // bob's is not, and the erasure is found by its id at its seq.
        let event = erasure(1, sealed.keys.clone());
        erasures.apply(&[Applied::at(5, &event)]).expect("apply");
        assert!(sealed
            .open_with(ring.as_ref(), b"")
            .expect("ring")
            .is_none());
        assert!(kept.open_with(ring.as_ref(), b"").expect("ring").is_some());
        let view = erasures
            .get(&Uuid::from_u128(1))
            .expect("get")
            .expect("folded");
        assert_eq!((view.seq, view.key_ids, view.memories), (5, 1, 1));
        assert_eq!(erasures.named_keys().expect("named"), sealed.keys);
        assert_eq!(erasures.checkpoint().expect("cp"), 5);

        // A keyring that holds the key again (a restore of the key store) loses it at enforce.
        let restored = Arc::new(MemoryKeyring::default());
        let again = Erasures::open(&db, restored.clone()).expect("reopen");
        let back = restored
            .key_of(&Subject::Tenant(Uuid::nil()))
            .expect("a key");
        assert_eq!(again.enforce().expect("enforce"), 0);
        let named_back = erasure(2, vec![back]);
        // Folded again at or below the checkpoint, nothing happens.
        again.apply(&[Applied::at(5, &named_back)]).expect("apply");
        assert_eq!(
            restored.find(&Subject::Tenant(Uuid::nil())).expect("find"),
            Some(back)
        );
        again.apply(&[Applied::at(6, &named_back)]).expect("apply");
        assert_eq!(
            restored.find(&Subject::Tenant(Uuid::nil())).expect("find"),
            None
        );
    }

    #[test]
    fn the_checkpoint_follows_groups_without_an_erasure() {
        let db = sled::Config::new().temporary(true).open().expect("db");
        let erasures = Erasures::open(&db, Arc::new(MemoryKeyring::default())).expect("open");
        let other = Event::KeyRevoked(crate::event::KeyRevoked {
            key_id: Uuid::nil(),
            tenant_id: Uuid::nil(),
            revoked_at: 0,
        });
        erasures.apply(&[Applied::at(3, &other)]).expect("apply");
        assert_eq!(erasures.checkpoint().expect("cp"), 0);
        let far = crate::overlay::CHECKPOINT_LAG + 3;
        erasures.apply(&[Applied::at(far, &other)]).expect("apply");
        assert_eq!(erasures.checkpoint().expect("cp"), far);
    }

    #[test]
    fn enforce_destroys_every_named_key_still_held() {
        let db = sled::Config::new().temporary(true).open().expect("db");
        let ring = Arc::new(MemoryKeyring::default());
        let alice = Subject::User(Uuid::nil(), "alice".into());
        let id = ring.key_of(&alice).expect("key");
        // The projection names the key (a fold whose destroy a crash cut off is modelled by a
        // ring that had none of it then).
        let empty = Arc::new(MemoryKeyring::default());
        let erasures = Erasures::open(&db, empty).expect("open");
        erasures
            .apply(&[Applied::at(1, &erasure(1, vec![id]))])
            .expect("apply");
        let erasures = Erasures::open(&db, ring.clone()).expect("reopen");
        assert_eq!(ring.find(&alice).expect("find"), Some(id));
        assert_eq!(erasures.enforce().expect("enforce"), 1);
        assert_eq!(ring.find(&alice).expect("find"), None);
        assert_eq!(erasures.enforce().expect("again"), 0);
    }
}
