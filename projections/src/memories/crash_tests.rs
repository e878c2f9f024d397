//! A large commit cut short between its sled batches (a crash): the events folded again from
//! the old checkpoint over the tree it left give what the uninterrupted commit gives.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::block::dec_block;
use super::*;
use crate::event::{
    vector_to_bytes, Event, MemoriesDeleted, MemoriesDeletedByType, MemoriesExpired, MemoryAmend,
    MemoryCreated, MemoryDeleted, MemorySuperseded, MemoryUpdated, SubjectsErased,
};
use crate::overlay::Split;
use crate::projection::{read_checkpoint, Applied, Projection, CHECKPOINT_KEY};

const T: Uuid = Uuid::from_u128(100);
const U: Uuid = Uuid::from_u128(200);

fn id(i: u128) -> Uuid {
    Uuid::from_u128(i)
}

fn created(tenant: Uuid, i: u128, ty: MemoryType) -> Event {
    Event::MemoryCreated(MemoryCreated {
        memory_id: id(i),
        tenant_id: tenant,
        content: format!("memory {i}"),
        memory_type: ty,
        importance: 0.5,
        created_at: i as i64,
        model: "m".into(),
        vector: vector_to_bytes(&[1.0, i as f32]),
        extra: None,
        sealed: None,
    })
}

fn updated(i: u128, at: i64, f: impl FnOnce(&mut MemoryUpdated)) -> Event {
    let mut e = MemoryUpdated {
        memory_id: id(i),
        tenant_id: T,
        content: None,
        importance: None,
        updated_at: at,
        model: None,
        vector: None,
        amend: None,
        sealed: None,
    };
    f(&mut e);
    Event::MemoryUpdated(e)
}

/// Tenant T's memories 0..600 created 50 a group (twelve blocks) and 700..708 in one block;
/// tenant U's 900..910 in one.
fn before() -> Vec<Vec<Event>> {
    let mut groups: Vec<Vec<Event>> = (0..12)
        .map(|g| {
            (g * 50..(g + 1) * 50)
                .map(|i| {
                    let ty = if i % 10 == 7 {
                        MemoryType::Rule
                    } else {
                        MemoryType::Fact
                    };
                    created(T, i, ty)
                })
                .collect()
        })
        .collect();
    groups.push(
        (700..708)
            .map(|i| created(T, i, MemoryType::Fact))
            .collect(),
    );
    groups.push(
        (900..910)
            .map(|i| created(U, i, MemoryType::Fact))
            .collect(),
    );
    groups
}

/// One group with every event kind the memories fold: 891 states written in four blocks (a
/// third of them memories it creates and changes no further: a fold again does not create them
/// twice), and the twelve blocks they leave removed (that of 700..708 falls below a quarter
/// current and hands its last state over): 16 changes.
fn the_group() -> Vec<Event> {
    let mut e: Vec<Event> = (1000..1300)
        .map(|i| created(T, i, MemoryType::Fact))
        .collect();
    e.push(created(T, 1300, MemoryType::Fact));
    e.push(updated(1300, 2_000, |u| u.content = Some("changed".into())));
    // Two updates of one memory, then of its importance again.
    e.push(updated(1, 2_001, |u| {
        u.content = Some("first".into());
        u.importance = Some(0.9);
    }));
    e.push(updated(1, 2_002, |u| u.importance = Some(0.1)));
    e.push(updated(2, 2_003, |u| {
        u.amend = Some(MemoryAmend {
            set_metadata: true,
            metadata: Some(r#"{"k":1}"#.into()),
            set_expires_at: true,
            expires_at: Some(i64::MAX),
            set_occurred_at: true,
            occurred_at: Some(5),
        })
    }));
    e.push(updated(3, 2_004, |u| {
        u.model = Some("n".into());
        u.vector = Some(vector_to_bytes(&[0.0, 1.0]));
    }));
    e.push(Event::MemorySuperseded(MemorySuperseded {
        memory_id: id(4),
        tenant_id: T,
        superseded_by: id(5),
        superseded_at: 2_005,
    }));
    // Deleted, then updated: the update is not taken.
    e.push(Event::MemoryDeleted(MemoryDeleted {
        memory_id: id(6),
        tenant_id: T,
        deleted_at: 2_006,
    }));
    e.push(updated(6, 2_007, |u| u.importance = Some(0.3)));
    e.push(Event::MemoriesDeletedByType(MemoriesDeletedByType {
        tenant_id: T,
        memory_type: MemoryType::Rule,
        memory_ids: vec![id(7), id(17)],
        deleted_at: 2_008,
    }));
    e.push(Event::MemoriesDeleted(MemoriesDeleted {
        tenant_id: T,
        memory_ids: vec![id(8), id(9)],
        deleted_at: 2_009,
    }));
    e.push(Event::MemoriesExpired(MemoriesExpired {
        tenant_id: T,
        memory_ids: vec![id(10)],
        expired_at: 2_010,
    }));
    for i in 700..707 {
        e.push(updated(i, 2_011, |u| u.importance = Some(0.7)));
    }
    // Two changes of a memory left live.
    e.push(updated(595, 2_012, |u| u.importance = Some(0.6)));
    e.push(updated(595, 2_012, |u| u.content = Some("again".into())));
    e.push(updated(901, 2_012, |u| {
        u.tenant_id = U;
        u.content = Some("other tenant".into());
    }));
    // Erased: the updated and deleted ones too, and five created above; U's 900 named too,
    // and left alone.
    e.push(Event::SubjectsErased(SubjectsErased {
        erasure_id: id(0xE),
        tenant_id: T,
        subjects: vec![crate::seal::Subject::User(T, "alice".into())],
        key_ids: Vec::new(),
        memory_ids: (0..580).chain(1000..1005).chain([900]).map(id).collect(),
        erased_at: 2_013,
    }));
    e.push(updated(590, 2_014, |u| u.importance = Some(0.2)));
    e
}

/// A store over a database of its own, the groups before the large one folded. The
/// database's directory goes with the `TempDir`.
fn store(events: &[Event], groups: &[usize]) -> (tempfile::TempDir, sled::Db, Memories) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let p = open(&db, events);
    let applied = Applied::in_order(events);
    let mut at = 0;
    for n in groups {
        p.apply(&applied[at..at + n]).expect("apply");
        at += n;
    }
    (dir, db, p)
}

/// The store over `db`, reading the vectors from `events` as from the log (seqs from 1).
fn open(db: &sled::Db, events: &[Event]) -> Memories {
    let ring: Arc<dyn crate::seal::Keyring> = Arc::new(crate::seal::MemoryKeyring::default());
    let log = |seq: u64| {
        Ok(
            match seq.checked_sub(1).and_then(|i| events.get(i as usize)) {
                Some(Event::MemoryCreated(e)) => Some(e.vector.clone()),
                Some(Event::MemoryUpdated(e)) => e.vector.clone(),
                _ => None,
            },
        )
    };
    Memories::open(db, &log, None, ring).expect("open")
}

/// What the tree says: each memory's state in the last block holding it, every other key (the
/// checkpoint's included), and how many blocks hold no such state. Not the blocks' bytes:
/// which states share a block follows a hash map's order (seeded per map), and a fold again
/// writes its blocks at part numbers of its own.
#[derive(Debug, PartialEq)]
struct Stored {
    states: BTreeMap<Uuid, StoredMemory>,
    others: Vec<(Vec<u8>, Vec<u8>)>,
    blocks_without_a_current_state: usize,
}

fn stored(db: &sled::Db) -> Stored {
    let tree = db.open_tree(TREE).expect("tree");
    let mut states = BTreeMap::new();
    let mut blocks: Vec<Vec<Uuid>> = Vec::new();
    let mut others = Vec::new();
    for kv in tree.iter() {
        let (k, v) = kv.expect("read");
        if k.first() == Some(&b'b') {
            let block = dec_block(&v).expect("block");
            blocks.push(block.iter().map(|m| m.id).collect());
            states.extend(block.into_iter().map(|m| (m.id, m)));
        } else {
            others.push((k.to_vec(), v.to_vec()));
        }
    }
    // A block holds a memory's current state when no later block holds that memory.
    let mut seen = std::collections::HashSet::new();
    let mut blocks_without_a_current_state = 0;
    for ids in blocks.iter().rev() {
        let current = ids.iter().filter(|id| seen.insert(**id)).count();
        if current == 0 {
            blocks_without_a_current_state += 1;
        }
    }
    Stored {
        states,
        others,
        blocks_without_a_current_state,
    }
}

/// Every memory as the store answers it: its state, and each tenant's list and history.
fn answers(p: &Memories) -> Answers {
    let ids = (0..620).chain(700..708).chain(900..910).chain(1000..1301);
    let states = ids.map(|i| p.stored(&id(i)).expect("read")).collect();
    let listed = [T, U]
        .iter()
        .map(|t| p.list(t, None, 0, 1_000).expect("list").0)
        .collect();
    let history = [T, U]
        .iter()
        .map(|t| p.history_up_to(t, u64::MAX, 10_000).expect("history"))
        .collect();
    (states, listed, history)
}

type Answers = (Vec<Option<StoredMemory>>, Vec<usize>, Vec<Vec<u64>>);

fn same_answers(p: &Memories, want: &Answers, what: &str) {
    let got = answers(p);
    for (g, w) in got.0.iter().zip(&want.0) {
        assert_eq!(g, w, "{what}");
    }
    assert_eq!((&got.1, &got.2), (&want.1, &want.2), "{what}");
}

#[test]
fn a_large_commit_cut_short_between_its_batches_folds_again_to_the_same_store() {
    let mut events: Vec<Event> = before().concat();
    let groups: Vec<usize> = before().iter().map(Vec::len).collect();
    let first = events.len() as u64;
    events.extend(the_group());
    let applied = Applied::in_order(&events);
    let large = &applied[first as usize..];
    let last = applied.last().map_or(0, |a| a.seq);
    // Two changes a batch: eight batches, the four new blocks in the first two, the twelve
    // removals in the other six.
    let split = Split {
        keys: 2,
        bytes: usize::MAX,
    };

    let (_dir, db, whole) = store(&events, &groups);
    whole
        .apply_split(large, &mut || {}, split, usize::MAX)
        .expect("apply");
    let want = stored(&db);
    let want_answers = answers(&whole);
    assert_eq!(want.blocks_without_a_current_state, 0);
    assert_eq!(
        want.others,
        vec![(CHECKPOINT_KEY.to_vec(), last.to_be_bytes().to_vec())]
    );
    assert_eq!(want.states.len(), 618 + 301);
    let erased = &want.states[&id(1)];
    assert_eq!(
        (erased.erased, erased.deleted_at, &erased.versions[..]),
        (
            true,
            Some(2_013),
            &[2, first + 303, first + 304, last - 1][..]
        )
    );
    let kept = &want.states[&id(590)];
    assert_eq!(
        (kept.importance, &kept.versions[..]),
        (0.2, &[591, last][..])
    );
    let twice = &want.states[&id(595)];
    assert_eq!(
        (
            twice.importance,
            twice.content.as_str(),
            &twice.versions[..]
        ),
        (0.6, "again", &[596, last - 4, last - 3][..])
    );
    let deleted = &want.states[&id(6)];
    assert_eq!((deleted.importance, deleted.deleted_at), (0.5, Some(2_006)));

    // Cut short after each batch in turn: the tree keeps the old checkpoint; reopened, the
    // group folded again as one, or in two (as the catch-up at a start reads the log).
    let mut cut = 0;
    'cuts: loop {
        cut += 1;
        for halves in [1, 2] {
            let (_dir, db, p) = store(&events, &groups);
            if p.apply_split(large, &mut || {}, split, cut).is_ok() {
                break 'cuts;
            }
            drop(p);
            let tree = db.open_tree(TREE).expect("tree");
            assert_eq!(
                read_checkpoint(&tree, TREE).expect("cp"),
                first,
                "cut after {cut}"
            );
            let p = open(&db, &events);
            for half in large.chunks(large.len().div_ceil(halves)) {
                p.apply(half).expect("fold again");
            }
            assert_eq!(stored(&db), want, "cut after {cut}, folded in {halves}");
            same_answers(
                &p,
                &want_answers,
                &format!("cut after {cut}, folded in {halves}"),
            );
            drop(p);
            same_answers(
                &open(&db, &events),
                &want_answers,
                &format!("reopened, cut after {cut}"),
            );
        }
    }
    assert_eq!(cut, 8, "the batches of the group");
}
