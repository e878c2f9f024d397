//! The memory store's shapes, one module per shape: the checked fields the bodies share
//! ([`fields`]), creating and updating a memory ([`write`]), batches ([`batch`]), listing and
//! querying ([`list`]), search ([`search`]), extraction ([`extract`]), a memory's history
//! ([`history`]), the memory as every answer shows it ([`answer`]) and reads as of a log
//! position ([`as_of`]).
//!
//! Every item is also here, at `crate::wire::memory::X`, which is where the handlers take them
//! from.

pub mod answer;
pub mod as_of;
pub mod batch;
pub mod extract;
pub mod fields;
pub mod history;
pub mod list;
pub mod search;
pub mod write;

pub use answer::*;
pub use as_of::*;
pub use batch::*;
pub use extract::*;
pub use fields::*;
pub use history::*;
pub use list::*;
pub use search::*;
pub use write::*;

/// A body as serde reads it, for the tests of the checks.
#[cfg(test)]
fn parse<T: for<'de> serde::Deserialize<'de>>(body: serde_json::Value) -> T {
    serde_json::from_value(body).expect("parses")
}
