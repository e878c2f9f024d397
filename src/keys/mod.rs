//! The service's keyring: every subject's data key, wrapped by the key-encryption key (KEK),
//! where every node that serves the data reads it and where destroying a key is a real delete.
//!
//! - [`kek`]: the KEK file and the wrapped forms every store holds (the check value, wrapped
//!   data keys, subject records).
//! - [`dir`]: one node's keyring ([`DirKeyring`]), files under `<data_dir>/keys`.
//! - [`nats`]: a cluster's keyring ([`NatsKeyring`], `--log nats://...`), a JetStream stream
//!   every API node reads, whose destroy securely erases the messages on every replica.
//! - [`rotate`]: `auditmem admin rotate-master-key`, every wrapped value re-wrapped under a
//!   new KEK.
//!
//! Invariants: a store holds nothing in the clear but key ids, tenant ids and subject digests;
//! a store opens only with the KEK its check value was made with; a subject has at most one
//! live key, the same on every node.

pub mod dir;
pub mod kek;
pub mod nats;
pub mod rotate;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use auditmem_projections::seal::{Keyring, Retirements};

pub use dir::DirKeyring;
pub use kek::{Kek, KekError};
pub use nats::NatsKeyring;

/// The key directory's name in a data dir.
pub const KEYS_DIR: &str = "keys";

/// Opens the keyring of `data_dir` (its `keys` directory) with the KEK at `kek_path`.
pub fn open_in(data_dir: &Path, kek_path: &Path) -> Result<Arc<DirKeyring>, OpenError> {
    DirKeyring::open(&data_dir.join(KEYS_DIR), kek_path).map(Arc::new)
}

/// The keyring a data dir is served with: its cluster's key store when its log is on NATS
/// (`cluster`), else its own key directory.
pub fn open(
    data_dir: &Path,
    kek_path: &Path,
    cluster: Option<&crate::log::cluster::NatsConfig>,
) -> Result<Arc<dyn Keyring>, OpenError> {
    let ring: Arc<dyn Keyring> = match cluster {
        None => open_in(data_dir, kek_path)?,
        Some(config) => Arc::new(NatsKeyring::open(config, kek_path)?),
    };
    // Counted, so the audit tails' shared renders know when an erasure retired a key.
    Ok(Arc::new(Retirements::new(ring)))
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Kek(#[from] KekError),
    #[error("the key-encryption key {kek} does not open the keys in {store}: it is not the key they were wrapped with (pass the right one with --master-key-file)")]
    WrongKek { store: String, kek: PathBuf },
    #[error("the key-encryption key {kek} is missing but {store} holds keys: without it no sealed data can be read; restore that file or pass --master-key-file")]
    MissingKek { store: String, kek: PathBuf },
    #[error("the key-encryption key {kek} does not exist: on a cluster every API node needs the same KEK file; make it once (`openssl rand -hex 32 > FILE`, mode 0600), copy it to every node and name it with --master-key-file")]
    NoClusterKek { kek: PathBuf },
    #[error("key directory {dir}: {source}")]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("the cluster's key store {store}: {reason}")]
    Cluster { store: String, reason: String },
}
