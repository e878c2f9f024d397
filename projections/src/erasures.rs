//! Erasures: every data key an erasure event named, and where each erasure sits in the log.
//!
//! Invariants:
//! - A key named by a `SubjectsErased` event is destroyed when the event is folded: the fold
//!   runs only once the event is durable in the log, so no key is ever destroyed for an
//!   erasure the log could lose, and every node that folds the event destroys it (idempotent:
//!   destroying a key that is gone already is nothing).
//! - In a server ([`Erasures::shred_in_background`]) the fold only retires the keys (this
//!   process opens and seals nothing under them from then on) and a thread of this projection
//!   destroys them in the store, so that the destroy's syncs hold neither the applier (every
//!   tenant's writes wait for it) nor a lock a request takes. [`Erasures::wait_destroyed`] is
//!   how the erasure's receipt waits for them to be gone.
//! - The ids of every named key stay in this tree (state and checkpoint in one sled batch,
//!   rebuilt by replay), so [`Erasures::enforce`] can destroy, before the service serves, any
//!   of them a restore from a backup (or a crash between the append and the destroy) brought
//!   back. Key ids are random: the tree says nothing about whom a key served.
//! - Each erasure's log position is kept by its id, for the receipt.

use std::collections::BTreeSet;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

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
    /// Where retired keys are destroyed, once [`Erasures::shred_in_background`] started it;
    /// without it the fold destroys them itself.
    shredder: OnceLock<Shredder>,
}

/// A job of the shredder: the log position of the erasure, and the keys it named.
type ShredJob = (u64, Vec<KeyId>);

/// The thread that destroys the keys the fold retired.
struct Shredder {
    jobs: Sender<ShredJob>,
    progress: Arc<ShredProgress>,
}

/// The erasures whose keys are retired and not yet destroyed, by log position.
#[derive(Default)]
struct ShredProgress {
    state: Mutex<Shredding>,
    moved: Condvar,
}

#[derive(Default)]
struct Shredding {
    /// Log positions of the erasures whose keys wait to be destroyed.
    pending: BTreeSet<u64>,
    /// Why the last destroy failed, until one passes.
    failed: Option<String>,
}

impl ShredProgress {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shredding> {
        // A set and a string: still consistent after a panic elsewhere.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long the shredder waits before it tries a failed destroy again.
const SHRED_RETRY: Duration = Duration::from_secs(1);

/// The shredder's loop, until the projection is dropped: the retired keys destroyed, what
/// queued meanwhile in one destroy; a failed destroy is tried again until it passes (a stop
/// in between leaves the keys named, and [`Erasures::enforce`] destroys them at the next
/// start).
fn shred_loop(jobs: Receiver<ShredJob>, keys: Arc<dyn Keyring>, progress: Arc<ShredProgress>) {
    let mut ids: Vec<KeyId> = Vec::new();
    let mut upto = 0u64;
    loop {
        let next = if ids.is_empty() {
            match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        } else {
            match jobs.recv_timeout(SHRED_RETRY) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        for (seq, more) in next
            .into_iter()
            .chain(std::iter::from_fn(|| jobs.try_recv().ok()))
        {
            upto = upto.max(seq);
            ids.extend(more);
        }
        ids.sort();
        ids.dedup();
        let outcome = keys.destroy(&ids);
        let mut s = progress.lock();
        match outcome {
            Ok(_) => {
                ids.clear();
                s.failed = None;
                s.pending = s.pending.split_off(&upto.saturating_add(1));
            }
            Err(e) => s.failed = Some(e.to_string()),
        }
        drop(s);
        progress.moved.notify_all();
    }
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
            shredder: OnceLock::new(),
        })
    }

    /// From now on the fold retires the keys an erasure names and a thread of this projection
    /// destroys them in the store (see the module's invariants); the thread ends when the
    /// projection is dropped.
    pub fn shred_in_background(&self) -> std::io::Result<()> {
        if self.shredder.get().is_some() {
            return Ok(());
        }
        let (jobs, queue) = std::sync::mpsc::channel();
        let progress = Arc::new(ShredProgress::default());
        let (keys, shared) = (self.keys.clone(), progress.clone());
        std::thread::Builder::new()
            .name("erasure-shred".into())
            .spawn(move || shred_loop(queue, keys, shared))?;
        let _ = self.shredder.set(Shredder { jobs, progress });
        Ok(())
    }

    /// Blocks until the keys of every erasure folded at or before `seq` are destroyed in the
    /// store; an error when the last try to destroy them failed (they stay retired and named,
    /// and are tried again).
    pub fn wait_destroyed(&self, seq: u64) -> Result<()> {
        let Some(shredder) = self.shredder.get() else {
            return Ok(());
        };
        let mut s = shredder.progress.lock();
        while s.pending.first().is_some_and(|p| *p <= seq) {
            if let Some(why) = &s.failed {
                return Err(ProjectionError::Io(std::io::Error::other(format!(
                    "destroying erased keys: {why}"
                ))));
            }
            s = shredder
                .progress
                .moved
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// Destroys the keys the erasure at `seq` named: here, or retired here and destroyed by
    /// the shredder.
    fn destroy_named(&self, seq: u64, ids: Vec<KeyId>) -> Result<()> {
        let Some(shredder) = self.shredder.get() else {
            return self.keys.destroy(&ids).map(|_| ()).map_err(store_error);
        };
        if !self.keys.retire(&ids).map_err(store_error)? {
            return Ok(());
        }
        shredder.progress.lock().pending.insert(seq);
        if let Err(returned) = shredder.jobs.send((seq, ids)) {
            // The thread is gone (it only ends with the projection): destroy them here.
            shredder.progress.lock().pending.remove(&seq);
            let (_, ids) = returned.0;
            self.keys.destroy(&ids).map_err(store_error)?;
        }
        Ok(())
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
        let mut at = 0;
        let folded = fold_new(&self.tree, TREE, events, |ov, a| {
            if let Event::SubjectsErased(e) = a.event {
                at = a.seq;
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
                self.destroy_named(at, destroy)?;
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

    /// A ring that forgets a key in memory when it is retired (as the service's does), and
    /// says which thread destroyed each key.
    #[derive(Default)]
    struct Retiring {
        ring: MemoryKeyring,
        retired: Mutex<Vec<KeyId>>,
        destroyed_on: Mutex<Vec<Option<String>>>,
    }

    impl Keyring for Retiring {
        fn key_of(&self, subject: &Subject) -> std::result::Result<KeyId, crate::seal::KeyError> {
            self.ring.key_of(subject)
        }
        fn find(
            &self,
            subject: &Subject,
        ) -> std::result::Result<Option<KeyId>, crate::seal::KeyError> {
            self.ring.find(subject)
        }
        fn seal_key(
            &self,
            ids: &[KeyId],
        ) -> std::result::Result<Option<crate::seal::SealKey>, crate::seal::KeyError> {
            let retired = self.retired.lock().expect("lock");
            if ids.iter().any(|id| retired.contains(id)) {
                return Ok(None);
            }
            self.ring.seal_key(ids)
        }
        fn destroy(&self, ids: &[KeyId]) -> std::result::Result<usize, crate::seal::KeyError> {
            let name = std::thread::current().name().map(str::to_string);
            self.destroyed_on.lock().expect("lock").push(name);
            self.ring.destroy(ids)
        }
        fn retire(&self, ids: &[KeyId]) -> std::result::Result<bool, crate::seal::KeyError> {
            self.retired.lock().expect("lock").extend_from_slice(ids);
            Ok(true)
        }
        fn keys_of_tenant(
            &self,
            tenant: Uuid,
        ) -> std::result::Result<Vec<(Subject, KeyId)>, crate::seal::KeyError> {
            self.ring.keys_of_tenant(tenant)
        }
    }

    #[test]
    fn shredding_in_background_the_fold_retires_and_the_shredder_destroys() {
        let db = sled::Config::new().temporary(true).open().expect("db");
        let ring = Arc::new(Retiring::default());
        let alice = Subject::User(Uuid::nil(), "alice".into());
        let sealed = Sealed::seal_for(
            ring.as_ref(),
            std::slice::from_ref(&alice),
            b"",
            b"078-05-1120",
        )
        .expect("seal");
        let erasures = Erasures::open(&db, ring.clone()).expect("open");
        erasures.shred_in_background().expect("shredder");

        // Given an erasure folded at seq 9, then its keys are retired at once, and once
        // `wait_destroyed(9)` returns they are destroyed, by the shredder's thread.
        let event = erasure(1, sealed.keys.clone());
        erasures.apply(&[Applied::at(9, &event)]).expect("apply");
        assert_eq!(*ring.retired.lock().expect("lock"), sealed.keys);
        assert!(sealed
            .open_with(ring.as_ref(), b"")
            .expect("ring")
            .is_none());
        erasures.wait_destroyed(9).expect("destroyed");
        assert_eq!(ring.ring.find(&alice).expect("find"), None);
        assert_eq!(
            *ring.destroyed_on.lock().expect("lock"),
            vec![Some("erasure-shred".to_string())]
        );
        // Nothing pending: waiting for a later position returns at once.
        erasures.wait_destroyed(u64::MAX).expect("nothing pending");
        assert_eq!(erasures.named_keys().expect("named"), sealed.keys);
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
