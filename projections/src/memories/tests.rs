//! [`Memories`] as a whole, through its public API: events in, lists, searches, history and
//! the stored blocks out, across reopening and detaching.

use uuid::Uuid;

use super::block::dec_block;
use super::*;
use crate::event::{
    vector_to_bytes, Event, MemoriesDeletedByType, MemoryCreated, MemoryDeleted, MemoryUpdated,
};
use crate::overlay::prefixed;
use crate::projection::{Applied, Projection};

fn created(tenant: Uuid, id: u128, ty: MemoryType, v: [f32; 2], at: i64) -> Event {
    Event::MemoryCreated(MemoryCreated {
        memory_id: Uuid::from_u128(id),
        tenant_id: tenant,
        content: format!("memory {id}"),
        memory_type: ty,
        importance: 0.5,
        created_at: at,
        model: "m".into(),
        vector: vector_to_bytes(&v),
        extra: None,
        sealed: None,
    })
}

/// A keyring for a store whose events are in the clear (as records that predate sealing).
fn ring() -> Arc<dyn Keyring> {
    Arc::new(crate::seal::MemoryKeyring::default())
}

/// An empty projection on a new database (whose directory goes with the `TempDir`).
fn fresh() -> (tempfile::TempDir, sled::Db, Memories) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let p = Memories::open(&db, &|_| Ok(None), None, ring()).expect("open");
    (dir, db, p)
}

#[test]
fn given_memory_events_then_lists_search_and_history_follow() {
    let (_dir, db, p) = fresh();
    let (t, other) = (Uuid::from_u128(100), Uuid::from_u128(200));
    let events = [
        created(t, 1, MemoryType::Rule, [1.0, 0.0], 10),
        created(t, 2, MemoryType::Fact, [0.0, 1.0], 20),
        created(t, 3, MemoryType::Fact, [0.6, 0.8], 30),
        created(other, 4, MemoryType::Fact, [1.0, 0.0], 40),
        Event::MemoryUpdated(MemoryUpdated {
            memory_id: Uuid::from_u128(2),
            tenant_id: t,
            content: Some("changed".into()),
            importance: Some(0.9),
            updated_at: 50,
            model: Some("m".into()),
            vector: Some(vector_to_bytes(&[1.0, 0.0])),
            amend: None,
            sealed: None,
        }),
        Event::MemoryDeleted(MemoryDeleted {
            memory_id: Uuid::from_u128(1),
            tenant_id: t,
            deleted_at: 60,
        }),
    ];
    let applied = Applied::in_order(&events);
    p.apply(&applied[..3]).expect("apply");
    p.apply(&applied).expect("apply overlapping");

    let (total, page) = p.list(&t, None, 0, 10).expect("list");
    assert_eq!(total, 2);
    assert_eq!(
        page.iter().map(|m| m.id.as_u128()).collect::<Vec<_>>(),
        vec![3, 2]
    );
    assert_eq!(
        p.list(&t, Some(MemoryType::Rule), 0, 10).expect("list").0,
        0
    );
    let hits = p.search(&t, &[1.0, 0.0], None, 0.0, 5).expect("search");
    assert_eq!(
        hits[0].0.id.as_u128(),
        2,
        "the re-embedded memory now matches best"
    );
    assert_eq!(hits[0].0.content, "changed");
    assert!(
        p.search(&t, &[1.0, 0.0], None, 0.0, 5)
            .expect("search")
            .iter()
            .all(|(m, _)| m.id.as_u128() != 4),
        "no other tenant's memory"
    );
    assert_eq!(
        p.stored(&Uuid::from_u128(2))
            .expect("read")
            .expect("stored")
            .versions,
        vec![2, 5]
    );
    assert_eq!(
        p.stored(&Uuid::from_u128(1))
            .expect("read")
            .expect("stored")
            .deleted_at,
        Some(60)
    );
    assert_eq!(p.get(&t, &Uuid::from_u128(1)).expect("get"), None);

    let batch = Event::MemoriesDeletedByType(MemoriesDeletedByType {
        tenant_id: t,
        memory_type: MemoryType::Fact,
        memory_ids: p.ids_of_type(&t, MemoryType::Fact),
        deleted_at: 70,
    });
    p.apply(&[Applied::at(7, &batch)]).expect("apply");
    assert_eq!(p.count(&t), 0);
    assert_eq!(p.count(&other), 1);
    drop(p);
    // Reopening reads each live memory's vector back from "the log" (here: the events).
    let from_log = log_of(&events);
    let p = Memories::open(&db, &from_log, None, ring()).expect("reopen");
    assert_eq!((p.count(&t), p.count(&other)), (0, 1));
    let hits = p.search(&other, &[1.0, 0.0], None, 0.0, 5).expect("search");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].0.id.as_u128(), 4);
    assert!((hits[0].1.score - 1.0).abs() < 1e-6, "{:?}", hits[0].1);
    // A vector the log does not have is a clear error, not an empty table.
    assert!(Memories::open(&db, &|_| Ok(None), None, ring()).is_err());
}

#[test]
fn state_detached_and_attached_to_the_reopened_database_answers_and_takes_writes() {
    let (dir, db, p) = fresh();
    let t = Uuid::from_u128(100);
    let events = [
        created(t, 1, MemoryType::Rule, [1.0, 0.0], 10),
        created(t, 2, MemoryType::Fact, [0.0, 1.0], 20),
        Event::MemoryDeleted(MemoryDeleted {
            memory_id: Uuid::from_u128(1),
            tenant_id: t,
            deleted_at: 30,
        }),
    ];
    let applied = Applied::in_order(&events);
    p.apply(&applied[..2]).expect("apply");
    // Given the state detached, the database closed and opened again,
    let detached = p.detach().expect("detach");
    drop(db);
    let db = crate::reopen_db(dir.path());
    let p = Memories::attach(&db, detached).expect("attach");
    // then it answers as before, without reading anything back,
    assert_eq!(p.count(&t), 2);
    let hits = p.search(&t, &[0.0, 1.0], None, 0.0, 5).expect("search");
    assert_eq!(hits[0].0.id.as_u128(), 2);
    // and takes later events into the reopened tree.
    p.apply(&applied).expect("apply after attach");
    assert_eq!(p.count(&t), 1);
    assert_eq!(p.checkpoint().expect("checkpoint"), 3);
    drop(p);
    let from_log = log_of(&events);
    let p = Memories::open(&db, &from_log, None, ring()).expect("open from the tree");
    assert_eq!(p.count(&t), 1);
    assert_eq!(p.get(&t, &Uuid::from_u128(1)).expect("get"), None);
}

/// States stored in the tree's blocks, and how many blocks hold them.
fn stored_states(db: &sled::Db) -> (usize, usize) {
    let tree = db.open_tree(TREE).expect("tree");
    let mut states = 0;
    let mut blocks = 0;
    for kv in tree.scan_prefix([b'b']) {
        let (_, v) = kv.expect("read");
        states += dec_block(&v).expect("block").len();
        blocks += 1;
    }
    (states, blocks)
}

#[test]
fn updates_supersede_block_states_and_compaction_bounds_the_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    // Contents in a file of the dir, as in the service (the rows on the heap).
    let p = Memories::open(&db, &|_| Ok(None), texts_in(dir.path()), ring()).expect("open");
    let t = Uuid::from_u128(100);
    let mut events: Vec<Event> = (0..600)
        .map(|i| created(t, i, MemoryType::Fact, [1.0, i as f32], i as i64))
        .collect();
    for i in 0..500u128 {
        events.push(Event::MemoryUpdated(MemoryUpdated {
            memory_id: Uuid::from_u128(i),
            tenant_id: t,
            content: Some(format!("updated {i}")),
            importance: Some(0.25),
            updated_at: 1_000 + i as i64,
            model: None,
            vector: None,
            amend: None,
            sealed: None,
        }));
    }
    let applied = Applied::in_order(&events);
    // All creations in one batch (three blocks), then one update per batch.
    p.apply(&applied[..600]).expect("apply");
    assert_eq!(stored_states(&db), (600, 3));
    for a in &applied[600..] {
        p.apply(std::slice::from_ref(a)).expect("apply");
    }
    let (states, blocks) = stored_states(&db);
    assert!(states <= 4 * 600, "{states} states stored for 600 memories");
    assert!(blocks < 600, "{blocks} blocks");

    let before: Vec<StoredMemory> = (0..600)
        .map(|i| p.stored(&Uuid::from_u128(i)).expect("read").expect("kept"))
        .collect();
    assert_eq!(before[7].content, "updated 7");
    assert_eq!(before[7].versions, vec![8, 608]);
    assert_eq!(before[599].content, "memory 599");
    let listed = p.list(&t, None, 0, 600).expect("list");
    drop(p);
    let from_log = log_of(&events);
    let p = Memories::open(&db, &from_log, texts_in(dir.path()), ring()).expect("reopen");
    assert!(p.state().names.texts.in_file() > 0, "contents in the file");
    for (i, want) in before.iter().enumerate() {
        let got = p.stored(&Uuid::from_u128(i as u128)).expect("read");
        assert_eq!(got.as_ref(), Some(want), "memory {i} after reopening");
    }
    assert_eq!(p.list(&t, None, 0, 600).expect("list"), listed);
    assert_eq!(
        p.search(&t, &[1.0, 0.0], None, 0.0, 600)
            .expect("search")
            .len(),
        600
    );
}

/// "The log" of `events` for reopening: the vector of the memory event at a seq (the
/// events' seqs counting from 1).
fn log_of(
    events: &[Event],
) -> impl Fn(u64) -> std::result::Result<Option<Vec<u8>>, String> + Sync + '_ {
    |seq| {
        Ok(
            match seq.checked_sub(1).and_then(|i| events.get(i as usize)) {
                Some(Event::MemoryCreated(e)) => Some(e.vector.clone()),
                Some(Event::MemoryUpdated(e)) => e.vector.clone(),
                _ => None,
            },
        )
    }
}

/// A spill setting that keeps vector rows on the heap and contents in a file in `dir`.
fn texts_in(dir: &std::path::Path) -> Option<Spill> {
    Some(Spill {
        dir: dir.to_path_buf(),
        rows: 0,
    })
}

#[test]
fn a_content_is_written_to_the_texts_once_until_it_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let p = Memories::open(&db, &|_| Ok(None), texts_in(dir.path()), ring()).expect("open");
    let t = Uuid::from_u128(100);
    let id = Uuid::from_u128(1);
    let first = created(t, 1, MemoryType::Fact, [1.0, 0.0], 10);
    p.apply(&[Applied::at(1, &first)]).expect("apply");
    let written = p.state().names.texts.len();
    assert_eq!(written, "memory 1".len() as u64);
    // Importance-only updates leave the content where it is,
    let updates: Vec<Event> = (0..300)
        .map(|i| {
            Event::MemoryUpdated(MemoryUpdated {
                memory_id: id,
                tenant_id: t,
                content: None,
                importance: Some(f64::from(i) / 300.0),
                updated_at: 20 + i64::from(i),
                model: None,
                vector: None,
                amend: None,
                sealed: None,
            })
        })
        .collect();
    for (i, e) in updates.iter().enumerate() {
        p.apply(&[Applied::at(2 + i as u64, e)]).expect("apply");
    }
    assert_eq!(p.state().names.texts.len(), written);
    // a new content is appended and shown,
    let changed = Event::MemoryUpdated(MemoryUpdated {
        memory_id: id,
        tenant_id: t,
        content: Some("x".repeat(500)),
        importance: None,
        updated_at: 1_000,
        model: None,
        vector: None,
        amend: None,
        sealed: None,
    });
    p.apply(&[Applied::at(400, &changed)]).expect("apply");
    assert_eq!(p.state().names.texts.len(), written + 500);
    assert!(p.state().names.texts.in_file() > 0, "contents in the file");
    let shown = p.get(&t, &id).expect("get").expect("live");
    assert_eq!(shown.content, "x".repeat(500));
    assert_eq!(shown.importance, 299.0 / 300.0);
    // and the stored state carries it across a reopen.
    drop(p);
    let from_log = log_of(std::slice::from_ref(&first));
    let p = Memories::open(&db, &from_log, texts_in(dir.path()), ring()).expect("reopen");
    let stored = p.stored(&id).expect("read").expect("kept");
    assert_eq!(stored.content, "x".repeat(500));
    assert_eq!(stored.versions.len(), 302);
}

#[test]
fn a_typed_list_pages_through_its_type_only_with_its_own_total() {
    let (_dir, _db, p) = fresh();
    let t = Uuid::from_u128(100);
    // Ids 0..9 created at times 0..9; every third a rule, the rest facts.
    let ty = |i: u128| match i % 3 {
        0 => MemoryType::Rule,
        _ => MemoryType::Fact,
    };
    let mut events: Vec<Event> = (0..10)
        .map(|i| created(t, i, ty(i), [1.0, i as f32], i as i64))
        .collect();
    events.push(Event::MemoryDeleted(MemoryDeleted {
        memory_id: Uuid::from_u128(6),
        tenant_id: t,
        deleted_at: 100,
    }));
    p.apply(&Applied::in_order(&events)).expect("apply");
    let ids = |page: Vec<MemoryView>| page.iter().map(|m| m.id.as_u128()).collect::<Vec<_>>();

    let (total, page) = p.list(&t, Some(MemoryType::Rule), 0, 2).expect("list");
    assert_eq!((total, ids(page)), (3, vec![9, 3]));
    let (total, page) = p.list(&t, Some(MemoryType::Rule), 2, 2).expect("list");
    assert_eq!((total, ids(page)), (3, vec![0]));
    let (total, page) = p.list(&t, Some(MemoryType::Fact), 1, 3).expect("list");
    assert_eq!((total, ids(page)), (6, vec![7, 5, 4]));
    assert_eq!(
        p.list(&t, Some(MemoryType::Context), 0, 10).expect("list"),
        (0, Vec::new())
    );
    assert_eq!(p.list(&t, None, 0, 100).expect("list").0, 9);
    let mut rules = p.ids_of_type(&t, MemoryType::Rule);
    rules.sort();
    assert_eq!(rules, [0, 3, 9].map(Uuid::from_u128).to_vec());
}

#[test]
fn records_of_an_older_build_are_read_and_replaced_when_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let t = Uuid::from_u128(100);
    let first = created(t, 1, MemoryType::Rule, [1.0, 0.0], 10);
    let Event::MemoryCreated(c) = &first else {
        unreachable!()
    };
    let old = StoredMemory {
        id: c.memory_id,
        tenant_id: t,
        content: c.content.clone(),
        memory_type: c.memory_type,
        importance: c.importance,
        created_at: c.created_at,
        updated_at: c.created_at,
        model: c.model.clone(),
        // Older builds copied the vector in.
        vector: c.vector.clone(),
        versions: vec![1],
        deleted_at: None,
        vector_seq: 0,
        extra: None,
        sealed: None,
        erased: false,
        keys: Vec::new(),
    };
    let tree = db.open_tree(TREE).expect("tree");
    let key = prefixed(b'm', &[c.memory_id.as_bytes()]);
    tree.insert(&key, rmp_serde::to_vec_named(&old).expect("encode"))
        .expect("insert");
    tree.insert(crate::projection::CHECKPOINT_KEY, &1u64.to_be_bytes())
        .expect("checkpoint");

    let p = Memories::open(&db, &|_| Ok(None), None, ring()).expect("open");
    assert_eq!(
        p.get(&t, &c.memory_id).expect("get").map(|m| m.content),
        Some(c.content.clone())
    );
    let deleted = Event::MemoryDeleted(MemoryDeleted {
        memory_id: c.memory_id,
        tenant_id: t,
        deleted_at: 20,
    });
    p.apply(&[Applied::at(2, &deleted)]).expect("apply");
    assert_eq!(
        tree.get(&key).expect("read"),
        None,
        "the old record is gone"
    );
    drop(p);
    let p = Memories::open(&db, &|_| Ok(None), None, ring()).expect("reopen");
    assert_eq!(p.get(&t, &c.memory_id).expect("get"), None);
    let kept = p.stored(&c.memory_id).expect("read").expect("kept");
    assert_eq!((kept.deleted_at, kept.versions), (Some(20), vec![1, 2]));
}

#[test]
fn superseded_and_expired_memories_leave_totals_pages_and_search() {
    use crate::event::{MemoryExtra, MemorySuperseded};
    use crate::memories::MemoryQuery;
    let (_dir, _db, p) = fresh();
    let t = Uuid::from_u128(100);
    // Five facts and a rule; fact 2 expired long ago (not swept), fact 3 superseded by 5.
    let mut events: Vec<Event> = (1..=5)
        .map(|i| created(t, i, MemoryType::Fact, [1.0, i as f32], i as i64))
        .collect();
    events.push(created(t, 6, MemoryType::Rule, [1.0, 0.0], 6));
    if let Event::MemoryCreated(c) = &mut events[1] {
        c.extra = Some(MemoryExtra {
            expires_at: Some(1),
            ..MemoryExtra::default()
        });
    }
    events.push(Event::MemorySuperseded(MemorySuperseded {
        memory_id: Uuid::from_u128(3),
        tenant_id: t,
        superseded_by: Uuid::from_u128(5),
        superseded_at: 7,
    }));
    p.apply(&Applied::in_order(&events)).expect("apply");
    let ids = |page: Vec<MemoryView>| page.iter().map(|m| m.id.as_u128()).collect::<Vec<_>>();
    let listed = |q: MemoryQuery<'_>, offset| {
        let (total, page) = p.list(&t, q, offset, 2).expect("list");
        (total, ids(page))
    };
    let facts = MemoryQuery::from(Some(MemoryType::Fact));
    assert_eq!(listed(facts, 0), (3, vec![5, 4]));
    assert_eq!(listed(facts, 2), (3, vec![1]));
    assert_eq!(listed(MemoryQuery::default(), 0), (4, vec![6, 5]));
    let with_superseded = MemoryQuery {
        include_superseded: true,
        ..facts
    };
    assert_eq!(listed(with_superseded, 0), (4, vec![5, 4]));
    assert_eq!(listed(with_superseded, 2), (4, vec![3, 1]));
    // The rule's count is its own
    assert_eq!(listed(Some(MemoryType::Rule).into(), 0), (1, vec![6]));
    // Search and get agree: the expired one is gone, the superseded one only by id
    let found: Vec<u128> = p
        .search(&t, &[1.0, 0.0], None, -1.0, 10)
        .expect("search")
        .iter()
        .map(|(m, _)| m.id.as_u128())
        .collect();
    assert!(
        !found.contains(&2) && !found.contains(&3) && found.len() == 4,
        "{found:?}"
    );
    assert_eq!(p.get(&t, &Uuid::from_u128(2)).expect("get"), None);
    assert!(p.get(&t, &Uuid::from_u128(3)).expect("get").is_some());
    assert_eq!(p.expired(i64::MAX, 10), vec![(t, vec![Uuid::from_u128(2)])]);
}

#[test]
fn a_scope_filtered_search_follows_deletes_expiry_metadata_and_reopening() {
    use crate::event::{MemoriesDeleted, MemoriesExpired, MemoryAmend, MemoryExtra};
    use crate::memories::filter::{FilterField, FilterOp, Operand};
    use crate::memories::MemoryQuery;
    let (_dir, db, p) = fresh();
    let t = Uuid::from_u128(100);
    // Ten memories of user "ana" (ids 1-10, team "red") among thirty of "ben".
    let mut events: Vec<Event> = (1..=40)
        .map(|i| {
            let mut e = created(t, i, MemoryType::Fact, [1.0, i as f32 / 10.0], i as i64);
            if let Event::MemoryCreated(c) = &mut e {
                c.extra = Some(MemoryExtra {
                    user_id: Some(if i <= 10 { "ana" } else { "ben" }.into()),
                    metadata: (i <= 10).then(|| r#"{"team":"red"}"#.into()),
                    ..MemoryExtra::default()
                });
            }
            e
        })
        .collect();
    events.push(Event::MemoryDeleted(MemoryDeleted {
        memory_id: Uuid::from_u128(1),
        tenant_id: t,
        deleted_at: 50,
    }));
    events.push(Event::MemoriesDeleted(MemoriesDeleted {
        tenant_id: t,
        memory_ids: vec![Uuid::from_u128(2), Uuid::from_u128(11)],
        deleted_at: 51,
    }));
    events.push(Event::MemoriesExpired(MemoriesExpired {
        tenant_id: t,
        memory_ids: vec![Uuid::from_u128(3)],
        expired_at: 52,
    }));
    // Memory 4 moves to team "blue".
    events.push(Event::MemoryUpdated(MemoryUpdated {
        memory_id: Uuid::from_u128(4),
        tenant_id: t,
        content: None,
        importance: None,
        updated_at: 53,
        model: None,
        vector: None,
        amend: Some(MemoryAmend {
            set_metadata: true,
            metadata: Some(r#"{"team":"blue"}"#.into()),
            ..MemoryAmend::default()
        }),
        sealed: None,
    }));
    p.apply(&Applied::in_order(&events)).expect("apply");
    let red = Filter::Cond {
        field: FilterField::Metadata("team".into()),
        op: FilterOp::Eq,
        operand: Operand::One("red".into()),
    };
    let ana = Filter::Cond {
        field: FilterField::UserId,
        op: FilterOp::Eq,
        operand: Operand::One("ana".into()),
    };
    let found = |p: &Memories, filter| -> Vec<u128> {
        let query = MemoryQuery {
            filter: Some(filter),
            ..MemoryQuery::default()
        };
        p.search(&t, &[1.0, 0.0], query, -1.0, 5)
            .expect("search")
            .iter()
            .map(|(m, _)| m.id.as_u128())
            .collect()
    };
    let bound = |p: &Memories, f| {
        p.state().tenants[&t]
            .scopes
            .candidates(f)
            .map(|c| c.bound())
    };
    // Through the index (ana's 10 of 40): the deleted and expired ones are gone from it, and
    // memory 4 from team "red"; the same once rebuilt at open.
    let check = |p: &Memories| {
        assert_eq!(found(p, &ana), vec![4, 5, 6, 7, 8]);
        assert_eq!(found(p, &red), vec![5, 6, 7, 8, 9]);
        assert_eq!((bound(p, &ana), bound(p, &red)), (Some(7), Some(6)));
    };
    check(&p);
    drop(p);
    check(&Memories::open(&db, &log_of(&events), None, ring()).expect("reopen"));
}

#[test]
fn each_tenants_history_is_its_memory_events_and_survives_reopening() {
    let (dir, db, p) = fresh();
    let (t, other) = (Uuid::from_u128(100), Uuid::from_u128(200));
    let events = [
        created(t, 1, MemoryType::Fact, [1.0, 0.0], 10),
        created(other, 2, MemoryType::Fact, [1.0, 0.0], 20),
        created(t, 3, MemoryType::Rule, [0.0, 1.0], 30),
        Event::MemoryDeleted(MemoryDeleted {
            memory_id: Uuid::from_u128(1),
            tenant_id: t,
            deleted_at: 40,
        }),
        Event::MemoriesDeletedByType(MemoriesDeletedByType {
            tenant_id: t,
            memory_type: MemoryType::Rule,
            memory_ids: vec![Uuid::from_u128(3)],
            deleted_at: 50,
        }),
    ];
    let applied = Applied::in_order(&events);
    p.apply(&applied[..2]).expect("apply");
    p.apply(&applied[2..]).expect("apply");
    assert_eq!(p.history_up_to(&t, u64::MAX, 10), Ok(vec![1, 3, 4, 5]));
    assert_eq!(p.history_up_to(&t, 3, 10), Ok(vec![1, 3]));
    assert_eq!(p.history_up_to(&other, u64::MAX, 10), Ok(vec![2]));
    assert_eq!(p.history_up_to(&t, u64::MAX, 3), Err(4));
    assert_eq!(
        p.history_up_to(&Uuid::from_u128(9), u64::MAX, 10),
        Ok(vec![])
    );
    drop(p);
    // Rebuilt from the stored states at open, deleted memories' versions included.
    let from_log = log_of(&events);
    let p = Memories::open(&db, &from_log, None, ring()).expect("reopen");
    assert_eq!(p.history_up_to(&t, u64::MAX, 10), Ok(vec![1, 3, 4, 5]));
    assert_eq!(p.history_up_to(&other, u64::MAX, 10), Ok(vec![2]));
    drop(dir);
}

#[test]
fn a_past_store_judges_expiry_at_its_own_time() {
    let event = Event::MemoryCreated(MemoryCreated {
        extra: Some(crate::event::MemoryExtra {
            expires_at: Some(100),
            ..Default::default()
        }),
        ..match created(Uuid::from_u128(100), 1, MemoryType::Fact, [1.0, 0.0], 10) {
            Event::MemoryCreated(e) => e,
            _ => unreachable!("a creation"),
        }
    });
    let t = Uuid::from_u128(100);
    let before = Memories::past(ring(), 99).expect("past");
    before
        .apply(&Applied::in_order(std::slice::from_ref(&event)))
        .expect("apply");
    assert_eq!(before.list(&t, None, 0, 10).expect("list").0, 1);
    let after = Memories::past(ring(), 100).expect("past");
    after
        .apply(&Applied::in_order(std::slice::from_ref(&event)))
        .expect("apply");
    assert_eq!(after.list(&t, None, 0, 10).expect("list").0, 0);
    assert!(after.get(&t, &Uuid::from_u128(1)).expect("get").is_none());
}

#[test]
fn a_hybrid_search_lifts_the_neighbours_of_a_found_turn_in_its_stream() {
    use crate::event::MemoryExtra;
    use crate::memories::MemoryQuery;
    // Ana's turns 1, 2, 3 in order; 2 is what the query finds; 9 is another user's turn, close
    // to the query by meaning only. `ty` and `user` of turns 1 and 3 vary per case.
    let search = |ty: MemoryType, user3: &str, mode: SearchMode| -> Vec<u128> {
        let (_dir, _db, p) = fresh();
        let t = Uuid::from_u128(100);
        let turn = |id: u128, ty, user: &str, v: [f32; 2], text: &str| {
            let mut e = created(t, id, ty, v, id as i64);
            if let Event::MemoryCreated(c) = &mut e {
                c.content = text.into();
                c.extra = Some(MemoryExtra {
                    user_id: Some(user.into()),
                    ..MemoryExtra::default()
                });
            }
            e
        };
        let events = [
            turn(1, ty, "ana", [0.1, 0.995], "How was your week?"),
            turn(
                2,
                MemoryType::Context,
                "ana",
                [1.0, 0.0],
                "I went to the support group",
            ),
            turn(3, ty, user3, [0.0, 1.0], "It helped a lot, I felt accepted"),
            turn(9, MemoryType::Context, "ben", [0.8, 0.6], "memory nine"),
        ];
        p.apply(&Applied::in_order(&events)).expect("apply");
        p.search_in_mode(
            &t,
            "support group",
            &[1.0, 0.0],
            MemoryQuery::default(),
            -1.0,
            3,
            mode,
            &Fusion::default(),
        )
        .expect("search")
        .iter()
        .map(|f| f.memory.id.as_u128())
        .collect()
    };
    // Fused: 2 (both lists' first), 9, 1, 3; each of 2's neighbours gains a fifth of its score
    // and passes 9, which has no neighbour in its stream.
    assert_eq!(
        search(MemoryType::Context, "ana", SearchMode::Hybrid),
        vec![2, 1, 3]
    );
    // Facts stand alone; another user's turn is another stream; semantic search ranks by
    // similarity alone.
    assert_eq!(
        search(MemoryType::Fact, "ana", SearchMode::Hybrid),
        vec![2, 9, 1]
    );
    assert_eq!(
        search(MemoryType::Context, "cy", SearchMode::Hybrid),
        vec![2, 1, 9]
    );
    assert_eq!(
        search(MemoryType::Context, "ana", SearchMode::Semantic),
        vec![2, 9, 1]
    );
}

#[test]
fn a_large_erasure_hides_its_memories_a_chunk_a_hold_and_leaves_the_indexes_off_the_applier() {
    let (_dir, _db, p) = fresh();
    let (t, other) = (Uuid::from_u128(100), Uuid::from_u128(200));
    // 300 memories erased (more than a landing chunk), one kept, and another tenant's one.
    let mut events: Vec<Event> = (0..301)
        .map(|i| created(t, i, MemoryType::Fact, [1.0, i as f32], i as i64))
        .collect();
    events.push(created(other, 1_000, MemoryType::Fact, [1.0, 0.0], 5));
    events.push(Event::SubjectsErased(crate::event::SubjectsErased {
        erasure_id: Uuid::from_u128(0xE),
        tenant_id: t,
        subjects: vec![crate::seal::Subject::User(t, "alice".into())],
        key_ids: Vec::new(),
        // The other tenant's memory is named too: an erasure leaves it alone.
        memory_ids: (0..300).chain([1_000]).map(Uuid::from_u128).collect(),
        erased_at: 900,
    }));
    let applied = Applied::in_order(&events);
    p.apply(&applied[..302]).expect("apply");
    // What a read sees between two holds of the state's lock (taking it here: it is free):
    // the tenant's count and the ids a list and a search show.
    let mut seen: Vec<(usize, usize, usize)> = Vec::new();
    p.apply_pausing(&applied[302..], &mut || {
        let listed = p.list(&t, None, 0, 400).expect("list").1;
        let hits = p.search(&t, &[1.0, 0.0], None, -1.0, 400).expect("search");
        seen.push((p.count(&t), listed.len(), hits.len()));
    })
    .expect("apply the erasure");
    // The 300 hidden and landed 256 a hold: a read between the holds shows the 44 not yet
    // landed and the one the erasure leaves.
    assert_eq!(seen, vec![(45, 45, 45), (1, 1, 1)]);
    // Hidden from every read once `apply` returned.
    assert_eq!(p.count(&t), 1);
    let listed: Vec<u128> = p
        .list(&t, None, 0, 10)
        .expect("list")
        .1
        .iter()
        .map(|m| m.id.as_u128())
        .collect();
    assert_eq!(listed, vec![300]);
    let hits = p.search(&t, &[1.0, 0.0], None, -1.0, 10).expect("search");
    assert_eq!(
        hits.iter().map(|(m, _)| m.id.as_u128()).collect::<Vec<_>>(),
        vec![300]
    );
    // Out of the vectors and postings once the unindexing thread is done.
    assert_eq!(indexed_once_unindexed(&p, &t), (1, 1, 0));
    assert_eq!(indexed_once_unindexed(&p, &other), (1, 1, 0));
    let erased = p.stored(&Uuid::from_u128(7)).expect("read").expect("kept");
    assert_eq!(
        (
            erased.erased,
            erased.content.as_str(),
            erased.versions,
            erased.deleted_at
        ),
        (true, "", vec![8, 303], Some(900))
    );
    assert_eq!(p.count(&other), 1);
}

/// A large erasure hides and lands its memories a chunk a hold, and leaves the one memory it
/// does not name in every index: the unindexing thread takes the others out of the scopes and
/// vectors a chunk a hold and out of the keyword postings in one last pass.
#[test]
fn a_large_erasure_leaves_only_what_it_does_not_name_in_the_indexes() {
    let (_dir, _db, p) = fresh();
    let t = Uuid::from_u128(100);
    let events = all_but_one_erased(t, 300);
    let applied = Applied::in_order(&events);
    p.apply(&applied[..300]).expect("apply");
    let mut pauses = 0;
    p.apply_pausing(&applied[300..], &mut || pauses += 1)
        .expect("apply the erasure");
    // 299 memories: hidden and landed in two holds, a pause after each.
    assert_eq!(pauses, 2);
    assert_eq!(p.count(&t), 1);
    assert_eq!(indexed_once_unindexed(&p, &t), (1, 1, 0));
}

/// `n` memories of `tenant` created, then an erasure of all but the last.
fn all_but_one_erased(tenant: Uuid, n: u128) -> Vec<Event> {
    let mut events: Vec<Event> = (0..n)
        .map(|i| created(tenant, i, MemoryType::Fact, [1.0, i as f32], i as i64))
        .collect();
    events.push(Event::SubjectsErased(crate::event::SubjectsErased {
        erasure_id: Uuid::from_u128(0xE),
        tenant_id: tenant,
        subjects: vec![crate::seal::Subject::User(tenant, "alice".into())],
        key_ids: Vec::new(),
        memory_ids: (0..n - 1).map(Uuid::from_u128).collect(),
        erased_at: 900,
    }));
    events
}

/// The tenant's vectors, keyword documents and memories still being unindexed, once the
/// unindexing thread is done.
fn indexed_once_unindexed(p: &Memories, tenant: &Uuid) -> (usize, usize, usize) {
    p.wait_unindexed().expect("unindexed");
    let state = p.state();
    let t = &state.tenants[tenant];
    (t.vectors.len(), t.keywords.len(), t.unindexing)
}

/// The unindexing thread gives way to prompt work between its holds (`niced::give_way`): with
/// a query's embedding running throughout, each of its three holds is followed by a wait of
/// its bound, and the memories still leave the indexes.
#[test]
fn the_unindexing_thread_gives_way_to_prompt_work_between_its_holds() {
    let (_dir, _db, p) = fresh();
    let t = Uuid::from_u128(100);
    let events = all_but_one_erased(t, 600);
    let applied = Applied::in_order(&events);
    p.apply(&applied[..600]).expect("apply");
    let _alone = crate::niced::PROMPT_TESTS
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let prompt = crate::niced::Prompt::begin();
    let start = std::time::Instant::now();
    p.apply(&applied[600..]).expect("apply the erasure");
    p.wait_unindexed().expect("unindexed");
    let took = start.elapsed();
    drop(prompt);
    // 599 memories: three holds of at most 256, each followed by a wait of 50 ms.
    assert!(took >= std::time::Duration::from_millis(150), "{took:?}");
    assert_eq!(p.count(&t), 1);
    assert_eq!(indexed_once_unindexed(&p, &t), (1, 1, 0));
}
