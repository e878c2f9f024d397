//! A memory's content and metadata at rest: sealed under the keys its events were sealed
//! under (its subjects'), never in the clear in the tree or the texts file.
//!
//! A memory's state comes in two forms while a batch is applied:
//! - *sealed*: `sealed` holds its content and metadata, `content` is empty (what the texts
//!   file and the tree keep; metadata stays in the clear only in memory, for filters);
//! - *open*: `sealed` is absent and `content` holds the text, `keys` the key ids to seal it
//!   under (none: a memory whose events predate sealing, which stays in the clear).
//!
//! [`seal_state`] turns the open form into the sealed one, [`open_state`] the other way;
//! [`at_rest`] is what the tree stores of either. A memory whose keys are gone (erased)
//! keeps neither: its content and metadata are dropped and `erased` is set.

use std::borrow::Cow;
use std::io;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoredMemory;
use crate::seal::{KeyError, Keyring, Sealed};

/// A memory state's sealed fields.
#[derive(Serialize, Deserialize)]
struct StatePersonal {
    content: String,
    #[serde(default)]
    metadata: Option<String>,
}

/// Associated data of a memory's sealed state: bound to the memory, and distinct from its
/// events' (`memory/v1`), so neither opens in the other's place.
fn state_aad(id: &Uuid) -> Vec<u8> {
    let mut aad = b"memory-state/v1".to_vec();
    aad.extend_from_slice(id.as_bytes());
    aad
}

pub(super) fn key_err(e: KeyError) -> io::Error {
    io::Error::other(format!("keyring: {e}"))
}

/// Marks `m` erased: its personal fields dropped, nothing left to open.
pub(super) fn erase(m: &mut StoredMemory) {
    m.erased = true;
    m.content = String::new();
    m.sealed = None;
    if let Some(x) = m.extra.take() {
        m.extra = super::Extra {
            metadata: None,
            ..x
        }
        .or_none();
    }
}

/// Seals an open `m` (with keys, not erased) in place; `m.content` keeps its text for the
/// caller to index. A key gone meanwhile erases it. Whether it changed `m`.
pub(super) fn seal_state(m: &mut StoredMemory, ring: &dyn Keyring) -> io::Result<bool> {
    if m.sealed.is_some() || m.keys.is_empty() || m.erased {
        return Ok(false);
    }
    let Some(key) = ring.seal_key(&m.keys).map_err(key_err)? else {
        erase(m);
        return Ok(true);
    };
    let personal = StatePersonal {
        content: std::mem::take(&mut m.content),
        metadata: m.extra.as_ref().and_then(|x| x.metadata.clone()),
    };
    // Two strings: encoding into a Vec cannot fail.
    let bytes = zeroize::Zeroizing::new(rmp_serde::to_vec(&personal).unwrap_or_default());
    m.sealed = Some(Sealed::seal(&key, &m.keys, &state_aad(&m.id), &bytes));
    m.content = personal.content;
    Ok(true)
}

/// A state's content and metadata, opened.
pub(super) type Personal = (String, Option<String>);

/// The content and metadata of a sealed state; `Ok(None)` when its keys are gone.
pub(super) fn open_sealed(
    sealed: &Sealed,
    id: &Uuid,
    ring: &dyn Keyring,
) -> io::Result<Option<Personal>> {
    let Some(bytes) = sealed.open_with(ring, &state_aad(id)).map_err(key_err)? else {
        return Ok(None);
    };
    let p: StatePersonal = rmp_serde::from_slice(&bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("memory {id}: {e}")))?;
    Ok(Some((p.content, p.metadata)))
}

/// `m` in the open form (as it is when it is not sealed); erased when its keys are gone.
pub(super) fn open_state(m: &mut StoredMemory, ring: &dyn Keyring) -> io::Result<()> {
    let Some(sealed) = m.sealed.take() else {
        return Ok(());
    };
    m.keys = sealed.keys.clone();
    match open_sealed(&sealed, &m.id, ring)? {
        Some((content, metadata)) => {
            m.content = content;
            if metadata.is_some() {
                m.extra.get_or_insert_with(Default::default).metadata = metadata;
            }
        }
        None => erase(m),
    }
    Ok(())
}

/// What the tree stores of `m`: a sealed state without its content and metadata in the clear.
pub(super) fn at_rest(m: &StoredMemory) -> Cow<'_, StoredMemory> {
    if m.sealed.is_none() {
        return Cow::Borrowed(m);
    }
    let mut s = m.clone();
    s.content = String::new();
    if let Some(x) = s.extra.take() {
        s.extra = super::Extra {
            metadata: None,
            ..x
        }
        .or_none();
    }
    Cow::Owned(s)
}

/// The bytes the texts file keeps of `m`: its sealed state, or its content when it has none
/// (a memory that predates sealing; an erased one, whose content is empty). The memory's
/// state says which (`Kept::sealed_text`).
pub(super) fn text_bytes(m: &StoredMemory) -> Vec<u8> {
    match &m.sealed {
        // Key ids, a nonce and bytes: encoding into a Vec cannot fail.
        Some(s) => rmp_serde::to_vec(s).unwrap_or_default(),
        None => m.content.as_bytes().to_vec(),
    }
}

/// What the texts file holds for a memory.
pub(super) enum Text {
    Clear(String),
    Sealed(Sealed),
}

/// The text `bytes` read back: a sealed state when `sealed`, else a content.
pub(super) fn text_of(bytes: Vec<u8>, sealed: bool) -> io::Result<Text> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    if sealed {
        rmp_serde::from_slice(&bytes)
            .map(Text::Sealed)
            .map_err(|e| bad(format!("sealed text: {e}")))
    } else {
        String::from_utf8(bytes)
            .map(Text::Clear)
            .map_err(|e| bad(e.to_string()))
    }
}
