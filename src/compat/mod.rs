//! APIs of other memory services, served over ours so their clients work unchanged.
//!
//! Each one is a translation only: its requests become calls of our `/v1` routes made in
//! process (`api::inprocess`), so they are authenticated, limited, charged and audited exactly
//! as the REST calls are, and its answers are ours in its shape. docs/COMPAT.md says what each
//! maps and what it does not.

pub mod mem0;
