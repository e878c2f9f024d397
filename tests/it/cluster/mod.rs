//! The log replicated on a NATS JetStream cluster (issue 24): a 3-node `nats-server` cluster on
//! free loopback ports and `auditmem serve --log nats://...` nodes on it, and the faults the
//! cluster must survive. `nats-server` must be on the PATH (`.ci/setup-tests` installs it).
//!
//! Select the group with `cargo test --test it cluster::`.

pub mod harness;

mod contention;
mod crash_cycles;
mod erasure;
mod expiry_once;
mod keys;
mod node_joins_empty;
mod occurred;
mod quorum_loss;
mod read_your_writes;
mod stream_resume;
mod webhooks;
