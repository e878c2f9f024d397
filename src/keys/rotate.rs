//! `auditmem admin rotate-master-key`: every wrapped data key, subject record and the check
//! value re-wrapped under a new key-encryption key, offline (every server stopped).
//!
//! Each value is replaced atomically on its own (a file renamed over, a message published
//! before the old one is erased) and the check value last, so an interrupted rotation leaves a
//! store whose values open under one KEK or the other and whose check value is still the old
//! KEK's: the same command run again skips what is done and finishes. Until it has, no server
//! starts with the new KEK (its check value refuses it).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use auditmem_projections::seal::KeyId;

use super::dir::{is_temporary, shredded, write_replace, CHECK_FILE};
use super::kek::{Kek, Rewrap, WrappedBy};
use super::nats::Store;
use crate::log::cluster::NatsConfig;

/// What a rotation did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rotated {
    /// Values re-wrapped under the new KEK.
    pub rewrapped: u64,
    /// Values a previous, interrupted run had already re-wrapped.
    pub already: u64,
}

/// The old KEK, and the new one (generated at `new_path`, mode 0600, when the file does not
/// exist), refusing a new KEK that is the old one.
pub fn load_keks(old_path: &Path, new_path: &Path) -> anyhow::Result<(Kek, Kek)> {
    let old = Kek::load(old_path)?;
    let new = if new_path.exists() {
        Kek::load(new_path)?
    } else {
        Kek::generate(new_path)?
    };
    if new.opens_check(&old.check_value()) {
        bail!(
            "{} holds the same key as {}: a rotation needs a new key (remove {} to have one generated)",
            new_path.display(),
            old_path.display(),
            new_path.display()
        );
    }
    Ok((old, new))
}

/// Rotates the keys of the data dir `data_dir` (its `keys` directory) from `old` to `new`.
pub fn rotate_dir(data_dir: &Path, old: &Kek, new: &Kek) -> anyhow::Result<Rotated> {
    // A server holds sled's lock on `db` while it runs: taking it proves none does.
    let _lock = lock_data_dir(data_dir)?;
    let dir = data_dir.join(super::KEYS_DIR);
    let check_path = dir.join(CHECK_FILE);
    let check = fs::read(&check_path).with_context(|| {
        format!(
            "{} has no keys to rotate (no {})",
            data_dir.display(),
            check_path.display()
        )
    })?;
    let rewrap = Rewrap { old, new };
    let check_by = match rewrap.check(&check) {
        WrappedBy::Neither(why) => bail!("{why}: {}", wrong_kek(old, &check_path)),
        by => by,
    };
    let data = files_in(&dir.join("data"))?;
    let mut subjects = Vec::new();
    for tenant in files_in(&dir.join("subjects"))? {
        subjects.extend(files_in(&tenant)?);
    }
    let pb = crate::cli::progress((data.len() + subjects.len() + 1) as u64, "re-wrapping keys");
    let mut done = Rotated::default();
    let mut count = |changed: Option<Vec<u8>>, path: &Path| -> anyhow::Result<()> {
        match changed {
            Some(bytes) => {
                write_replace(path, &bytes)
                    .with_context(|| format!("rewriting {}", path.display()))?;
                done.rewrapped += 1;
            }
            None => done.already += 1,
        }
        pb.inc(1);
        Ok(())
    };
    for path in &data {
        let id = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(KeyId::from_hex)
            .with_context(|| format!("{} is not named by a key id", path.display()))?;
        let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if shredded(&bytes) {
            continue;
        }
        let changed = rewrap
            .key(&id, &bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        count(changed, path)?;
    }
    for path in &subjects {
        let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if shredded(&bytes) {
            continue;
        }
        let changed = rewrap
            .subject(&bytes)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        count(changed, path)?;
    }
    let changed = (check_by == WrappedBy::Old).then(|| new.check_value());
    count(changed, &check_path)?;
    pb.finish_and_clear();
    Ok(done)
}

/// Rotates the keys of a cluster's key store (every API node stopped) from `old` to `new`.
pub async fn rotate_cluster(config: &NatsConfig, old: &Kek, new: &Kek) -> anyhow::Result<Rotated> {
    let store = Store::connect(config, false).await?;
    let names = store.names.clone();
    let check = store
        .first(&names.check())
        .await?
        .with_context(|| format!("the key store {} holds no keys", names.stream))?;
    let rewrap = Rewrap { old, new };
    let check_by = match rewrap.check(&check.payload) {
        WrappedBy::Neither(why) => bail!("{why} (the stream {})", names.stream),
        by => by,
    };
    let keys = store.subjects(&names.all_keys()).await?;
    let subjects = store.subjects(&names.subjects_of("*")).await?;
    let pb = crate::cli::progress((keys.len() + subjects.len() + 1) as u64, "re-wrapping keys");
    let mut done = Rotated::default();
    for (name, is_key) in keys
        .iter()
        .map(|k| (k, true))
        .chain(subjects.iter().map(|s| (s, false)))
    {
        let Some(m) = store.first(name).await? else {
            pb.inc(1);
            continue;
        };
        let changed = if is_key {
            let id = name
                .rsplit('.')
                .next()
                .and_then(KeyId::from_hex)
                .with_context(|| format!("{name} is not named by a key id"))?;
            rewrap.key(&id, &m.payload)
        } else {
            rewrap.subject(&m.payload)
        }
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        match changed {
            Some(bytes) => {
                let last = store
                    .stream
                    .get_last_raw_message_by_subject(name)
                    .await
                    .with_context(|| format!("reading {name}"))?;
                if last.sequence != m.sequence {
                    // An interrupted run published the new value and did not erase the old.
                    store.erase(m.sequence).await?;
                    done.already += 1;
                } else {
                    store.replace(name, m.sequence, bytes, &m.headers).await?;
                    done.rewrapped += 1;
                }
            }
            None => done.already += 1,
        }
        pb.inc(1);
    }
    if check_by == WrappedBy::Old {
        store
            .replace(
                &names.check(),
                check.sequence,
                new.check_value(),
                &check.headers,
            )
            .await?;
        done.rewrapped += 1;
    } else {
        done.already += 1;
    }
    pb.inc(1);
    pb.finish_and_clear();
    Ok(done)
}

fn wrong_kek(old: &Kek, check: &Path) -> String {
    format!(
        "{} is not the key-encryption key of {}",
        old.path().display(),
        check.display()
    )
}

/// The entries of `dir` but temporary files, sorted; none when it does not exist.
fn files_in(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if !is_temporary(&path) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// sled's own lock on the data dir's `db` file (an exclusive `flock`), held until dropped.
fn lock_data_dir(data_dir: &Path) -> anyhow::Result<fs::File> {
    let db = data_dir.join("db");
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&db)
        .with_context(|| {
            format!(
                "{} is not an auditmem data dir (no {})",
                data_dir.display(),
                db.display()
            )
        })?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |e| {
            anyhow::anyhow!(
                "{} is in use ({e}): stop the server before rotating its keys",
                data_dir.display()
            )
        },
    )?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{DirKeyring, OpenError};
    use auditmem_projections::seal::{Keyring, Sealed, Subject};
    use uuid::Uuid;

    #[test]
    fn every_key_opens_under_the_new_kek_and_an_interrupted_run_finishes() {
        let tmp = tempfile::tempdir().expect("tmp");
        let data = tmp.path();
        fs::write(data.join("db"), b"").expect("db");
        let (old_path, new_path) = (data.join("master.key"), tmp.path().join("new.key"));
        let ring = crate::keys::open_in(data, &old_path).expect("open");
        let subjects: Vec<Subject> = (0..5)
            .map(|i| Subject::User(Uuid::nil(), format!("user-{i}")))
            .collect();
        let sealed: Vec<Sealed> = subjects
            .iter()
            .map(|s| {
                Sealed::seal_for(&*ring, std::slice::from_ref(s), b"", b"secret").expect("seal")
            })
            .collect();
        drop(ring);

        let (old, new) = load_keks(&old_path, &new_path).expect("keks");
        // An interrupted run: one data file re-wrapped, nothing else.
        let dir = data.join("keys");
        let first = &files_in(&dir.join("data")).expect("files")[0];
        let id =
            KeyId::from_hex(first.file_name().and_then(|n| n.to_str()).expect("name")).expect("id");
        let bytes = Rewrap {
            old: &old,
            new: &new,
        }
        .key(&id, &fs::read(first).expect("read"))
        .expect("rewrap")
        .expect("changed");
        write_replace(first, &bytes).expect("write");

        let done = rotate_dir(data, &old, &new).expect("rotate");
        assert_eq!(
            done,
            Rotated {
                rewrapped: 10,
                already: 1
            }
        );
        assert_eq!(
            rotate_dir(data, &old, &new).expect("again"),
            Rotated {
                rewrapped: 0,
                already: 11
            }
        );
        assert!(matches!(
            DirKeyring::open(&dir, &old_path),
            Err(OpenError::WrongKek { .. })
        ));
        let ring = DirKeyring::open(&dir, &new_path).expect("open with the new KEK");
        for (s, v) in subjects.iter().zip(&sealed) {
            assert_eq!(ring.find(s).expect("find"), Some(v.keys[0]));
            let plain = v.open_with(&ring, b"").expect("open").expect("live");
            assert_eq!(plain.as_slice(), b"secret");
        }
        // Two KEKs neither of which wrapped the keys: refused, naming the old one.
        let other = Kek::generate(&tmp.path().join("other.key")).expect("other");
        let third = Kek::generate(&tmp.path().join("third.key")).expect("third");
        let err = rotate_dir(data, &other, &third)
            .map(|_| ())
            .expect_err("wrong old KEK");
        assert!(err.to_string().contains("other.key"), "{err}");
    }
}
