//! The append-only, hash-chained event log and the tools around it.
//!
//! - [`record`]: the record format and its hash.
//! - [`appender`]: the only writer of the `log` tree; one thread, group commit, and the seam
//!   to the log of record ([`appender::LogOfRecord`]).
//! - [`local`]: the log of record on one node: the `log` tree, synced per group.
//! - [`cluster`]: the log of record on a NATS JetStream stream, mirrored into the `log` tree
//!   ([`nats`] is its JetStream client).
//! - [`verify`]: proves a sequence of stored records is an unbroken chain.
//! - [`checkpoint`]: signed heads that anchor the chain outside the database.
//! - [`catch_up`]: folds records into the projections.

pub mod appender;
pub mod catch_up;
pub mod checkpoint;
pub mod cluster;
pub mod local;
pub mod record;
pub mod verify;

pub use cluster::nats;

use std::path::Path;

use auditmem_projections::event::AuditHead;
use auditmem_projections::vector_table::Spill;
use auditmem_projections::{Event, Projections};

pub use record::{Record, RecordRef};

pub const LOG_TREE: &str = "log";

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("storage: {0}")]
    Storage(#[from] sled::Error),
    #[error("record {seq} is undecodable: {why}")]
    Undecodable { seq: u64, why: String },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// Chain head: the last record's seq and hash (seq 0 and zeros for an empty log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Head {
    pub seq: u64,
    pub hash: [u8; 32],
}

/// Read access to the log tree.
#[derive(Clone)]
pub struct LogReader {
    tree: sled::Tree,
}

impl LogReader {
    pub fn open(db: &sled::Db) -> Result<Self, LogError> {
        Ok(Self {
            tree: db.open_tree(LOG_TREE)?,
        })
    }

    pub fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    pub fn head(&self) -> Result<Head, LogError> {
        let Some((k, v)) = self.tree.last()? else {
            return Ok(Head::default());
        };
        let key = record::seq_from_key(&k).unwrap_or(0);
        let mut last = None;
        for (i, piece) in record::pieces(&v).enumerate() {
            let seq = key.saturating_add(i as u64);
            let r = piece
                .record
                .map_err(|why| LogError::Undecodable { seq, why })?;
            let hash: [u8; 32] = r.hash.try_into().map_err(|_| LogError::Undecodable {
                seq,
                why: "hash is not 32 bytes".into(),
            })?;
            last = Some(Head { seq: r.seq, hash });
        }
        Ok(last.unwrap_or_default())
    }

    /// The stored value holding `seq` and the byte range of its record in it.
    fn locate(&self, seq: u64) -> Result<Option<(sled::IVec, std::ops::Range<usize>)>, LogError> {
        let Some((key, v)) = self.chunk_holding(seq)? else {
            return Ok(None);
        };
        Ok(record_in(seq, key, &v)?.map(|range| (v, range)))
    }

    /// The stored value `seq` would be in (found by a range lookup) and its first seq.
    fn chunk_holding(&self, seq: u64) -> Result<Option<(u64, sled::IVec)>, LogError> {
        let Some((k, v)) = self
            .tree
            .range(..=record::seq_key(seq))
            .next_back()
            .transpose()?
        else {
            return Ok(None);
        };
        Ok(Some((record::seq_from_key(&k).unwrap_or(0), v)))
    }

    pub fn get(&self, seq: u64) -> Result<Option<Record>, LogError> {
        match self.locate(seq)? {
            None => Ok(None),
            Some((v, range)) => {
                Record::decode(&v[range])
                    .map(Some)
                    .map_err(|e| LogError::Undecodable {
                        seq,
                        why: e.to_string(),
                    })
            }
        }
    }

    /// The vector (f32 little-endian bytes) carried by the memory event at `seq`, opened with
    /// `keys` when it is sealed: the memories projection keeps only that seq and reads the
    /// vector back from here at open. A sealed vector whose keys are gone is an error: the
    /// projection reads only live memories' vectors, whose keys exist.
    pub fn vector_at(
        &self,
        seq: u64,
        keys: &dyn auditmem_projections::seal::Keyring,
    ) -> Result<Option<Vec<u8>>, LogError> {
        let sealed = |why: String| LogError::Undecodable {
            seq,
            why: format!("sealed vector: {why}"),
        };
        let erased = || sealed("its keys were destroyed".into());
        Ok(match self.event(seq)? {
            Some((_, Event::MemoryCreated(e))) => Some(
                e.opened(keys)
                    .map_err(|e| sealed(e.to_string()))?
                    .ok_or_else(erased)?
                    .into_owned()
                    .vector,
            ),
            Some((_, Event::MemoryUpdated(e))) => {
                e.opened(keys)
                    .map_err(|e| sealed(e.to_string()))?
                    .ok_or_else(erased)?
                    .into_owned()
                    .vector
            }
            _ => None,
        })
    }

    /// The tenant and entry of the audit event at `seq` (`None` for another event), its
    /// detail left undecoded: what lists and exports show.
    pub fn audit_entry(&self, seq: u64) -> Result<Option<AuditHead>, LogError> {
        match self.locate(seq)? {
            Some((v, range)) => audit_entry_of(seq, &v[range]),
            None => Ok(None),
        }
    }

    /// [`LogReader::audit_entry`] for ascending seqs: `chunk` keeps the key of the stored value
    /// last read, so a seq in the same chunk is read by that key (a point lookup), not found by
    /// a range lookup. Each call still reads the chunk from the tree, which keeps sled's cache
    /// within its limit (see the export's `encode_chunk`).
    pub fn audit_entry_from(
        &self,
        seq: u64,
        chunk: &mut Option<u64>,
    ) -> Result<Option<AuditHead>, LogError> {
        let near = chunk.filter(|key| seq >= *key && seq - key < record::CHUNK_RECORDS as u64);
        if let Some(key) = near {
            if let Some(v) = self.tree.get(record::seq_key(key))? {
                if let Some(range) = record_in(seq, key, &v)? {
                    return audit_entry_of(seq, &v[range]);
                }
            }
        }
        // Not in the chunk last read (past its end, or another chunk).
        let Some((key, v)) = self.chunk_holding(seq)? else {
            return Ok(None);
        };
        *chunk = Some(key);
        match record_in(seq, key, &v)? {
            Some(range) => audit_entry_of(seq, &v[range]),
            None => Ok(None),
        }
    }

    /// Calls `visit` with each record at `seqs` (ascending), in order: each chunk is read once
    /// and walked once, where [`LogReader::audit_entry_from`] reads the chunk and walks to the
    /// record for every record, and chunks near each other are read by one forward walk of the
    /// tree ([`ChunkWalk`]). An erasure's receipt passes over every entry of a tenant this
    /// way. A seq with no record is passed over; a chunk that stops parsing before a wanted
    /// record, or a record stored under another seq, is an error, as for a single read.
    pub fn visit_records(
        &self,
        seqs: &[u64],
        visit: impl FnMut(u64, RecordRef<'_>) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        self.visit_records_reaching(seqs, WALK_REACH, visit)
    }

    /// [`LogReader::visit_records`], walking to a seq at most `reach` past the walk's next
    /// chunk (the tests try each way on a small log).
    fn visit_records_reaching(
        &self,
        seqs: &[u64],
        reach: u64,
        mut visit: impl FnMut(u64, RecordRef<'_>) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let mut walk = ChunkWalk::new(&self.tree, reach);
        let mut i = 0;
        let mut visited: Option<u64> = None;
        // A seq asked for twice is visited once: `i` passes over what was visited.
        let pass_visited = |i: &mut usize, visited: Option<u64>| {
            while seqs
                .get(*i)
                .is_some_and(|s| visited.is_some_and(|v| *s <= v))
            {
                *i += 1;
            }
        };
        loop {
            pass_visited(&mut i, visited);
            let Some(&first) = seqs.get(i) else { break };
            let start = i;
            if let Some((key, v)) = walk.holding(first)? {
                for (index, piece) in record::pieces(&v).enumerate() {
                    let at = key.saturating_add(index as u64);
                    pass_visited(&mut i, visited);
                    let Some(&want) = seqs.get(i) else { break };
                    let r = match piece.record {
                        Ok(r) => r,
                        // A piece that does not parse hides the records after it in its
                        // chunk; one wanted in a later chunk is read there.
                        Err(_) if walk.next_start().is_some_and(|next| want >= next) => break,
                        Err(why) => return Err(LogError::Undecodable { seq: want, why }),
                    };
                    if want != at {
                        continue;
                    }
                    if r.seq != at {
                        return Err(LogError::Undecodable {
                            seq: at,
                            why: format!(
                                "the record stored at seq {at} was sealed as seq {}",
                                r.seq
                            ),
                        });
                    }
                    visit(at, r)?;
                    visited = Some(at);
                    i += 1;
                }
            }
            // A wanted seq past the end of the chunk that holds it: no record there.
            if i == start {
                i += 1;
            }
        }
        Ok(())
    }

    /// The event stored at `seq`.
    pub fn event(&self, seq: u64) -> Result<Option<(Record, Event)>, LogError> {
        match self.get(seq)? {
            None => Ok(None),
            Some(r) => {
                let e = Event::decode(&r.event).map_err(|e| LogError::Undecodable {
                    seq,
                    why: e.to_string(),
                })?;
                Ok(Some((r, e)))
            }
        }
    }

    /// The stored bytes of every record from `from` on, in order, each with its seq (its
    /// place in the log: the key of its chunk plus its index there). Where a chunk stops
    /// parsing as records its rest comes as one more item: decoding it fails where it is read,
    /// and a verifier names it.
    pub fn records_from(&self, from: u64) -> Records {
        // The chunk holding `from` starts at or before it. A storage error finding it is the
        // first item, not a reason to start later and skip records.
        let (start, failed) = match self.tree.range(..=record::seq_key(from)).next_back() {
            Some(Ok((k, _))) => (record::seq_from_key(&k).unwrap_or(from), None),
            Some(Err(e)) => (from, Some(LogError::from(e))),
            None => (from, None),
        };
        Records {
            from,
            chunks: self.tree.range(record::seq_key(start)..),
            current: None,
            failed,
        }
    }
}

/// Iterator of [`LogReader::records_from`].
pub struct Records {
    from: u64,
    chunks: sled::Iter,
    /// The chunk being walked: its value, the seq of its next record and where that starts.
    current: Option<(sled::IVec, u64, usize)>,
    /// A storage error met before the first chunk, yielded first.
    failed: Option<LogError>,
}

impl Iterator for Records {
    type Item = Result<(u64, sled::IVec), LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        loop {
            if let Some((value, seq, at)) = &mut self.current {
                // An empty value is one (undecodable) item.
                if *at < value.len() || (*at == 0 && value.is_empty()) {
                    let piece = record::pieces(&value[*at..]).next()?;
                    let this = *seq;
                    let (start, len) = (*at + piece.range.start, piece.range.len());
                    *seq = seq.saturating_add(1);
                    *at = start + len.max(1);
                    if this < self.from {
                        continue;
                    }
                    return Some(Ok((this, value.subslice(start, len))));
                }
                self.current = None;
            }
            match self.chunks.next()? {
                Err(e) => return Some(Err(e.into())),
                Ok((k, v)) => {
                    let key = record::seq_from_key(&k).unwrap_or(0);
                    self.current = Some((v, key, 0));
                }
            }
        }
    }
}

/// The byte range of `seq`'s record in the stored value `value` whose first record is `key`;
/// `None` where the value ends before it.
/// Reads the chunks holding ascending seqs. sled reads a leaf (up to 16 chunks, ~0.5 MB) whole
/// and keeps it for its iterator's next item, but a lookup of its own for each chunk reads the
/// leaf again when it is not in the cache: a pass over a tenant's 100,000 entries spent four
/// fifths of its time pulling leaves. So the next chunk is taken from one forward iterator,
/// and a seq far past it (other tenants' records between) is looked up, not walked to.
struct ChunkWalk<'a> {
    tree: &'a sled::Tree,
    /// The forward iterator, from past the chunk last returned; `None` before the first lookup.
    iter: Option<sled::Iter>,
    /// The iterator's next chunk, read to see where it starts; `None` when it has no more.
    next: Option<(u64, sled::IVec)>,
    /// How far past `next` a seq is walked to rather than looked up ([`WALK_REACH`]).
    reach: u64,
}

/// How far past the walk's next chunk a seq is looked up instead of walked to: at most 32
/// records a chunk, so at least 32 chunks, two leaves or more.
const WALK_REACH: u64 = 1024;

impl<'a> ChunkWalk<'a> {
    fn new(tree: &'a sled::Tree, reach: u64) -> Self {
        ChunkWalk {
            tree,
            iter: None,
            next: None,
            reach,
        }
    }

    /// Where the chunk after the one returned last starts, when there is one.
    fn next_start(&self) -> Option<u64> {
        self.next.as_ref().map(|(start, _)| *start)
    }

    fn advance(&mut self) -> Result<(), LogError> {
        self.next = match self.iter.as_mut().and_then(Iterator::next) {
            Some(item) => {
                let (k, v) = item?;
                Some((record::seq_from_key(&k).unwrap_or(0), v))
            }
            None => None,
        };
        Ok(())
    }

    /// The chunk holding `seq`: the last one starting at or before it. Seqs are asked for in
    /// ascending order, each past the start of the chunk returned before; `None` when no chunk
    /// starts after that one and at or before `seq` (`seq` is then in the chunk returned
    /// before, past its end, or before the first).
    fn holding(&mut self, seq: u64) -> Result<Option<(u64, sled::IVec)>, LogError> {
        let far = match (&self.iter, &self.next) {
            (None, _) => true,
            (Some(_), Some((start, _))) => start.saturating_add(self.reach) < seq,
            (Some(_), None) => return Ok(None),
        };
        if far {
            let found = self
                .tree
                .range(..=record::seq_key(seq))
                .next_back()
                .transpose()?
                .map(|(k, v)| (record::seq_from_key(&k).unwrap_or(0), v));
            self.iter = Some(self.tree.range(record::seq_key(seq.saturating_add(1))..));
            self.advance()?;
            return Ok(found);
        }
        let mut found = None;
        while let Some((start, _)) = &self.next {
            if *start > seq {
                break;
            }
            found = self.next.take();
            self.advance()?;
        }
        Ok(found)
    }
}

fn record_in(seq: u64, key: u64, value: &[u8]) -> Result<Option<std::ops::Range<usize>>, LogError> {
    let Some(index) = seq
        .checked_sub(key)
        .and_then(|i| usize::try_from(i).ok())
        .filter(|i| *i < record::CHUNK_RECORDS)
    else {
        return Ok(None);
    };
    // A chunk that stops parsing before `seq` hides it: that is an error, not an absence.
    let found = record::pieces(value)
        .take(index + 1)
        .enumerate()
        .find(|(i, p)| *i == index || p.record.is_err());
    match found {
        None => Ok(None),
        Some((_, p)) => match p.record {
            Ok(r) if r.seq == seq => Ok(Some(p.range)),
            Ok(r) => Err(LogError::Undecodable {
                seq,
                why: format!("the record stored at seq {seq} was sealed as seq {}", r.seq),
            }),
            Err(why) => Err(LogError::Undecodable { seq, why }),
        },
    }
}

/// The tenant, entry and sealed part of the stored record `value` at `seq`, if it holds an
/// audit event.
fn audit_entry_of(seq: u64, value: &[u8]) -> Result<Option<AuditHead>, LogError> {
    let undecodable = |why: String| LogError::Undecodable { seq, why };
    let r = RecordRef::decode(value).map_err(|e| undecodable(e.to_string()))?;
    Event::decode_audit_head(r.event).map_err(|e| undecodable(e.to_string()))
}

/// Opens every projection over `db`, the memories projection reading vectors from its log;
/// large vector tables keep their f32 rows in unlinked files as `spill` says (in the data dir,
/// in the service), or on the heap without one.
pub fn open_projections(
    db: &sled::Db,
    spill: Option<Spill>,
    keys: std::sync::Arc<dyn auditmem_projections::seal::Keyring>,
) -> anyhow::Result<Projections> {
    let log = LogReader::open(db)?;
    let vectors = |seq: u64| log.vector_at(seq, &*keys).map_err(|e| e.to_string());
    Ok(Projections::open(db, &vectors, spill, keys.clone())?)
}

/// The spill settings of a data dir: its vector tables' f32 rows in files in the dir itself
/// from `rows` rows on (0: never).
pub fn spill_in(dir: &Path, rows: usize) -> Option<Spill> {
    (rows > 0).then(|| Spill {
        dir: dir.to_path_buf(),
        rows,
    })
}

/// Opens the sled database of a data dir with the settings the service uses.
pub fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    open_db_with_cache(dir, 256 * 1024 * 1024)
}

/// Segment size of new data dirs: sled writes any page over a quarter segment as a file of its
/// own, and a log leaf holds up to 16 keys, each a chunk of up to 64 KiB of records
/// (`record::CHUNK_BYTES`; an audited list response is 30-60 KB). With sled's 512 KiB default
/// nearly every leaf written would be a separate blob file, an extra file creation on the
/// append path; 8 MiB keeps such leaves inline.
const SEGMENT_SIZE: usize = 8 << 20;

/// The segment size a data dir was created with (sled refuses to open it with another), or
/// [`SEGMENT_SIZE`] for a new one.
fn segment_size(dir: &Path) -> usize {
    std::fs::read(dir.join("conf"))
        .ok()
        .and_then(|conf| {
            String::from_utf8_lossy(&conf)
                .lines()
                .find_map(|l| l.strip_prefix("segment_size: ")?.trim().parse().ok())
        })
        .unwrap_or(SEGMENT_SIZE)
}

/// Like [`open_db`] with another page cache size: one-off scans (replay) want the whole log
/// in cache so sled never re-reads a page.
pub fn open_db_with_cache(dir: &Path, cache_bytes: u64) -> Result<sled::Db, sled::Error> {
    sled::Config::new()
        .path(dir)
        .segment_size(segment_size(dir))
        // The appender decides durability itself (flush + fdatasync per group); sled's own
        // background flusher stays as a backstop.
        .flush_every_ms(Some(500))
        .cache_capacity(cache_bytes)
        .open()
}

#[cfg(test)]
mod tests {
    use super::*;
    use auditmem_projections::{AuditRecorded, CreditsConsumed};

    fn audit(tenant: uuid::Uuid, n: u64) -> Event {
        let (mut entry, _) = crate::wire::audit::tests::sample();
        entry.id = uuid::Uuid::now_v7();
        entry.action = format!("gateway.chat{n}");
        entry.created_at = n as i64;
        Event::AuditRecorded(Box::new(AuditRecorded {
            tenant_id: tenant,
            entry,
            detail: Default::default(),
            sealed: None,
            sealed_detail: None,
        }))
    }

    #[test]
    fn data_dirs_reopen_with_the_segment_size_they_were_created_with() {
        // A dir made with sled's 512 KiB default and a new one (8 MiB) both open.
        let old = tempfile::tempdir().expect("tempdir");
        let db = sled::Config::new().path(old.path()).open().expect("create");
        db.insert(b"k", b"v".to_vec()).expect("insert");
        db.flush().expect("flush");
        drop(db);
        assert_eq!(segment_size(old.path()), 512 * 1024);
        let db = open_db(old.path()).expect("reopen an old dir");
        assert_eq!(db.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));

        let new = tempfile::tempdir().expect("tempdir");
        drop(open_db(new.path()).expect("create"));
        assert_eq!(segment_size(new.path()), SEGMENT_SIZE);
        assert!(open_db(new.path()).is_ok());
    }

    /// A log of 200 records in a fresh data dir: 1..=50 one per key (as data dirs of earlier
    /// builds hold them), the rest in chunks of groups of several sizes, as the appender
    /// writes them.
    struct MixedLayout {
        _dir: tempfile::TempDir,
        log: LogReader,
        /// The tenant of most audit entries.
        tenant: uuid::Uuid,
        /// Every record's stored bytes, seq 1 first.
        stored: Vec<Vec<u8>>,
    }

    fn mixed_layout_log() -> MixedLayout {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("open");
        let log = LogReader::open(&db).expect("log");
        let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        let mut prev = [0u8; 32];
        let mut stored = Vec::new();
        let mut groups = [1usize, 7, 40, 1, 33, 64, 4].into_iter().cycle();
        let mut chunks = record::Chunker::default();
        let mut left = 0;
        for seq in 1..=200u64 {
            let event = match seq % 5 {
                0 => Event::CreditsConsumed(CreditsConsumed {
                    tenant_id: a,
                    credits: 1.0,
                    usd: 0.0,
                    at: 0,
                }),
                1 => audit(b, seq),
                _ => audit(a, seq),
            };
            let bytes = event.encode().expect("encode");
            let (hash, encoded) = Record::seal_encoded(seq, seq as i64, &prev, &bytes);
            prev = hash;
            stored.push(encoded.clone());
            if seq <= 50 {
                log.tree()
                    .insert(record::seq_key(seq), encoded)
                    .expect("insert");
                continue;
            }
            chunks.push(seq, encoded);
            left = if left == 0 {
                groups.next().unwrap_or(1)
            } else {
                left
            } - 1;
            if left == 0 || seq == 200 {
                log.tree()
                    .apply_batch(std::mem::take(&mut chunks).into_batch())
                    .expect("batch");
            }
        }
        MixedLayout {
            _dir: dir,
            log,
            tenant: a,
            stored,
        }
    }

    #[test]
    fn records_are_read_by_seq_whichever_way_they_are_stored() {
        let MixedLayout {
            _dir, log, stored, ..
        } = mixed_layout_log();
        // Fewer keys than records: the chunks are there.
        assert!(log.tree().len() < 120, "{} keys", log.tree().len());
        for seq in 1..=200u64 {
            let r = log.get(seq).expect("get").expect("present");
            assert_eq!(r.encode(), stored[seq as usize - 1], "seq {seq}");
        }
        assert_eq!(log.get(0).expect("get"), None);
        assert_eq!(log.get(201).expect("get"), None);
        assert_eq!(log.get(u64::MAX).expect("get"), None);
        let last = Record::decode(&stored[199]).expect("decode");
        assert_eq!(
            log.head().expect("head"),
            Head {
                seq: 200,
                hash: last.hash
            }
        );
        for from in [1u64, 2, 50, 51, 52, 90, 199, 200, 201] {
            let read: Vec<(u64, Vec<u8>)> = log
                .records_from(from)
                .map(|item| item.map(|(seq, v)| (seq, v.to_vec())))
                .collect::<Result<_, _>>()
                .expect("read");
            let want: Vec<(u64, Vec<u8>)> = (from..=200)
                .map(|seq| (seq, stored[seq as usize - 1].clone()))
                .collect();
            assert_eq!(read, want, "from {from}");
        }
    }

    #[test]
    fn a_chunk_that_stops_parsing_is_read_as_an_error_where_it_does() {
        let MixedLayout {
            _dir, log, stored, ..
        } = mixed_layout_log();
        // The chunk holding seq 70 loses the last byte of its tenth record: that record now
        // swallows the next one's first byte, and the rest of the chunk does not parse.
        let (k, value) = log
            .tree()
            .range(..=record::seq_key(70))
            .next_back()
            .expect("a chunk")
            .expect("read");
        let key = record::seq_from_key(&k).expect("key");
        let next = log
            .tree()
            .range(record::seq_key(key + 1)..)
            .next()
            .and_then(|kv| kv.ok())
            .and_then(|(k, _)| record::seq_from_key(&k))
            .expect("a next chunk");
        assert!(next > key + 12, "chunk {key}..{next} is long enough");
        let tenth = key + 9;
        let cut: usize = stored[key as usize - 1..tenth as usize]
            .iter()
            .map(Vec::len)
            .sum::<usize>()
            - 1;
        let mut broken = value[..cut].to_vec();
        broken.extend_from_slice(&value[cut + 1..]);
        log.tree()
            .insert(record::seq_key(key), broken)
            .expect("insert");
        assert_eq!(
            log.get(tenth - 1).expect("intact").map(|r| r.encode()),
            Some(stored[tenth as usize - 2].clone())
        );
        let swallowed = log.get(tenth).expect("still decodes").expect("present");
        assert_ne!(swallowed.encode(), stored[tenth as usize - 1]);
        for seq in [tenth + 1, tenth + 3] {
            assert!(
                matches!(log.get(seq), Err(LogError::Undecodable { seq: s, .. }) if s == seq),
                "seq {seq}"
            );
        }
        assert_eq!(
            log.get(next).expect("next chunk").map(|r| r.seq),
            Some(next)
        );
        // A scan yields the records that parse, the rest of the chunk as one item (which does
        // not decode), then the next chunk.
        let read: Vec<(u64, Vec<u8>)> = log
            .records_from(key)
            .map(|item| item.map(|(seq, v)| (seq, v.to_vec())))
            .take_while(|item| item.as_ref().map_or(true, |(seq, _)| *seq <= next))
            .collect::<Result<_, _>>()
            .expect("read");
        let seqs: Vec<u64> = read.iter().map(|(seq, _)| *seq).collect();
        let mut want: Vec<u64> = (key..=tenth + 1).collect();
        want.push(next);
        assert_eq!(seqs, want);
        assert!(RecordRef::decode(&read[want.len() - 2].1).is_err());
        // Visited in order: the records before the break are read, one after it is an error
        // that names it, and a pass that wants none after it does not see the break.
        let before = visited(&log, &[key, tenth - 1]).expect("before the break");
        assert_eq!(
            before.iter().map(|v| v.0).collect::<Vec<_>>(),
            vec![key, tenth - 1]
        );
        assert!(matches!(
            visited(&log, &[key, tenth + 3, next]),
            Err(LogError::Undecodable { seq, .. }) if seq == tenth + 3
        ));
        // A record of the next chunk is read there, however far the walk reaches.
        for reach in [WALK_REACH, 0] {
            let read = visited_reaching(&log, &[key, next], reach).expect("past the break");
            assert_eq!(
                read.iter().map(|v| v.0).collect::<Vec<_>>(),
                vec![key, next]
            );
        }
    }

    /// The records `visit_records` visits at `seqs`, as (seq, hash, event).
    type Visited = Vec<(u64, Vec<u8>, Vec<u8>)>;

    fn visited(log: &LogReader, seqs: &[u64]) -> Result<Visited, LogError> {
        visited_reaching(log, seqs, WALK_REACH)
    }

    fn visited_reaching(log: &LogReader, seqs: &[u64], reach: u64) -> Result<Visited, LogError> {
        let mut out = Vec::new();
        log.visit_records_reaching(seqs, reach, |seq, r| {
            out.push((seq, r.hash.to_vec(), r.event.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn records_visited_in_order_are_the_records_read_one_by_one() {
        let MixedLayout {
            _dir, log, stored, ..
        } = mixed_layout_log();
        // Dense, sparse, across both layouts and chunk ends, past the end, one asked twice.
        let dense: Vec<u64> = (1..=200).filter(|s| s % 7 != 3).collect();
        let sparse: Vec<u64> = vec![2, 50, 51, 90, 90, 150, 199, 200, 201, 250];
        for seqs in [dense, sparse, vec![], vec![0, 300]] {
            let mut want: Visited = seqs
                .iter()
                .filter(|s| (1..=200).contains(*s))
                .map(|&s| {
                    let r = Record::decode(&stored[s as usize - 1]).expect("decode");
                    (s, r.hash.to_vec(), r.event)
                })
                .collect();
            want.dedup();
            // Walked to, looked up past a few records, looked up each time.
            for reach in [WALK_REACH, 40, 0] {
                assert_eq!(
                    visited_reaching(&log, &seqs, reach).expect("visit"),
                    want,
                    "{seqs:?}, reach {reach}"
                );
            }
        }
        // The visitor's error ends the pass.
        let mut n = 0;
        let err = log.visit_records(&[3, 4, 5], |seq, _| {
            n += 1;
            Err(LogError::Undecodable {
                seq,
                why: "no".into(),
            })
        });
        assert!(matches!(err, Err(LogError::Undecodable { seq: 3, .. })));
        assert_eq!(n, 1);
    }

    #[test]
    fn audit_entries_read_in_order_match_one_by_one_reads() {
        let MixedLayout {
            _dir,
            log,
            tenant: a,
            ..
        } = mixed_layout_log();
        // Dense, sparse, with seqs past the end and of other events, over both layouts.
        let dense: Vec<u64> = (12..=160).filter(|s| s % 5 != 1).collect();
        let sparse: Vec<u64> = vec![2, 90, 150, 199, 200, 250];
        for seqs in [dense, sparse] {
            let one_by_one: Vec<_> = seqs
                .iter()
                .map(|&s| log.audit_entry(s).expect("read"))
                .collect();
            let mut chunk = None;
            let in_order: Vec<_> = seqs
                .iter()
                .map(|&s| log.audit_entry_from(s, &mut chunk).expect("read"))
                .collect();
            assert_eq!(in_order, one_by_one);
            assert_eq!(in_order[0].as_ref().map(|h| h.tenant_id), Some(a));
            assert!(in_order.iter().any(Option::is_none));
            for (seq, got) in seqs.iter().zip(&in_order) {
                if let Some(AuditHead { entry, .. }) = got {
                    assert_eq!(entry.action, format!("gateway.chat{seq}"));
                }
            }
        }
    }
}
