//! Sealed memories, given/when/then on a real sled database and an in-memory keyring: what the
//! tree and the events hold (no content, no metadata in the clear), what reads show, and an
//! erased memory (its key destroyed, or named by `SubjectsErased`) gone from every index.

use std::sync::Arc;

use uuid::Uuid;

use super::filter::{Filter, FilterField, FilterOp, Operand};
use super::*;
use crate::event::{
    memory_subjects, vector_to_bytes, Event, MemoryAmend, MemoryCreated, MemoryExtra,
    MemoryUpdated, SubjectsErased,
};
use crate::keyword::Fusion;
use crate::projection::{Applied, Projection};
use crate::seal::{MemoryKeyring, Subject};

const T: Uuid = Uuid::from_u128(100);
const ALICE_SECRET: &str = "zanzibar-078-05-1120";
const ALICE_META: &str = "quixotic-meta-4471";
const BOB_SECRET: &str = "pelican-bob-9931";

/// A memory of user `user` in tenant `T`, sealed under its subjects in `ring`.
fn sealed(
    ring: &MemoryKeyring,
    id: u128,
    user: &str,
    content: &str,
    metadata: &str,
    v: [f32; 2],
) -> Event {
    let e = MemoryCreated {
        memory_id: Uuid::from_u128(id),
        tenant_id: T,
        content: content.into(),
        memory_type: MemoryType::Fact,
        importance: 0.5,
        created_at: id as i64,
        model: "m".into(),
        vector: vector_to_bytes(&v),
        extra: Some(MemoryExtra {
            user_id: Some(user.into()),
            metadata: Some(format!(r#"{{"note":"{metadata}"}}"#)),
            ..MemoryExtra::default()
        }),
        sealed: None,
    };
    let subjects = e.subjects();
    Event::MemoryCreated(e.sealed_for(ring, &subjects).expect("seal"))
}

/// "The log" of `events` (seqs from 1): each memory event's vector, opened with `ring`.
fn log_of<'a>(
    events: &'a [Event],
    ring: &'a MemoryKeyring,
) -> impl Fn(u64) -> std::result::Result<Option<Vec<u8>>, String> + Sync + 'a {
    move |seq| {
        Ok(
            match seq.checked_sub(1).and_then(|i| events.get(i as usize)) {
                Some(Event::MemoryCreated(e)) => e
                    .opened(ring)
                    .map_err(|e| e.to_string())?
                    .map(|e| e.into_owned().vector),
                Some(Event::MemoryUpdated(e)) => e
                    .opened(ring)
                    .map_err(|e| e.to_string())?
                    .and_then(|e| e.into_owned().vector),
                _ => None,
            },
        )
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Whether any key or value of the memories' tree holds `needle`.
fn tree_holds(db: &sled::Db, needle: &str) -> bool {
    db.open_tree(TREE)
        .expect("tree")
        .iter()
        .map(|kv| kv.expect("read"))
        .any(|(k, v)| contains(&k, needle) || contains(&v, needle))
}

fn open(
    db: &sled::Db,
    events: &[Event],
    ring: &Arc<MemoryKeyring>,
    dir: &std::path::Path,
) -> Memories {
    let spill = Some(Spill {
        dir: dir.to_path_buf(),
        rows: 0,
    });
    Memories::open(db, &log_of(events, ring), spill, ring.clone()).expect("open")
}

/// The ids a search in `mode` for `text` (embedded as `v`) finds in tenant `T`.
fn found(p: &Memories, text: &str, v: [f32; 2], mode: SearchMode) -> Vec<u128> {
    p.search_in_mode(
        &T,
        text,
        &v,
        MemoryQuery::default(),
        -1.0,
        10,
        mode,
        &Fusion::default(),
    )
    .expect("search")
    .iter()
    .map(|f| f.memory.id.as_u128())
    .collect()
}

fn listed(p: &Memories) -> Vec<u128> {
    let (_, page) = p.list(&T, None, 0, 10).expect("list");
    page.iter().map(|m| m.id.as_u128()).collect()
}

fn noted(p: &Memories, note: &str) -> Vec<u128> {
    let f = Filter::Cond {
        field: FilterField::Metadata("note".into()),
        op: FilterOp::Eq,
        operand: Operand::One(note.into()),
    };
    let (_, page) = p
        .list(
            &T,
            MemoryQuery {
                filter: Some(&f),
                ..MemoryQuery::default()
            },
            0,
            10,
        )
        .expect("list");
    page.iter().map(|m| m.id.as_u128()).collect()
}

/// Alice's memory (1) and Bob's (2), sealed, applied to a store over a new database.
fn given_two_users() -> (
    tempfile::TempDir,
    sled::Db,
    Arc<MemoryKeyring>,
    Vec<Event>,
    Memories,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path().join("db")).expect("open");
    let ring = Arc::new(MemoryKeyring::default());
    let events = vec![
        sealed(&ring, 1, "alice", ALICE_SECRET, ALICE_META, [1.0, 0.0]),
        sealed(&ring, 2, "bob", BOB_SECRET, "bob-meta", [0.0, 1.0]),
    ];
    let p = open(&db, &[], &ring, dir.path());
    p.apply(&Applied::in_order(&events)).expect("apply");
    (dir, db, ring, events, p)
}

fn alice_key(ring: &MemoryKeyring) -> crate::seal::KeyId {
    ring.find(&Subject::User(T, "alice".into()))
        .expect("ring")
        .expect("alice has a key")
}

#[test]
fn given_a_sealed_memory_then_no_stored_byte_holds_its_content_metadata_or_vector() {
    let (dir, db, ring, events, p) = given_two_users();
    let Event::MemoryCreated(e) = &events[0] else {
        unreachable!()
    };
    // The event: personal fields empty in the clear, sealed under alice's and its own key.
    assert_eq!((e.content.as_str(), e.vector.len()), ("", 0));
    assert_eq!(e.extra.as_ref().and_then(|x| x.metadata.clone()), None);
    assert_eq!(
        e.extra.as_ref().and_then(|x| x.user_id.as_deref()),
        Some("alice")
    );
    assert_eq!(e.sealed.as_ref().map(|s| s.keys.len()), Some(2));
    let record = events[0].encode().expect("encode");
    let clear_vector = vector_to_bytes(&[1.0, 0.0]);
    assert!(!contains(&record, ALICE_SECRET) && !contains(&record, ALICE_META));
    assert!(!record.windows(8).any(|w| w == clear_vector.as_slice()));
    assert_eq!(Event::decode(&record).expect("decode"), events[0]);
    // The tree: neither the content nor the metadata.
    for secret in [ALICE_SECRET, ALICE_META, BOB_SECRET] {
        assert!(!tree_holds(&db, secret), "{secret} in the tree");
    }
    let stored = p.stored(&Uuid::from_u128(1)).expect("read").expect("kept");
    assert_eq!((stored.content.as_str(), stored.erased), ("", false));
    assert!(stored.sealed.is_some());
    // Reads show them, as they do once reopened (keyword index, filters, vectors rebuilt).
    let check = |p: &Memories| {
        let m = p.get(&T, &Uuid::from_u128(1)).expect("get").expect("live");
        assert_eq!(m.content, ALICE_SECRET);
        let meta = m.extra.and_then(|x| x.metadata_value());
        assert_eq!(meta, Some(serde_json::json!({ "note": ALICE_META })));
        assert_eq!(listed(p), vec![2, 1]);
        assert_eq!(
            found(p, ALICE_SECRET, [1.0, 0.0], SearchMode::Keyword),
            vec![1]
        );
        assert_eq!(found(p, "x", [1.0, 0.0], SearchMode::Semantic), vec![1, 2]);
        assert_eq!(noted(p, ALICE_META), vec![1]);
    };
    check(&p);
    drop(p);
    check(&open(&db, &events, &ring, dir.path()));
}

#[test]
fn given_a_sealed_memory_when_updated_then_the_new_content_and_metadata_are_sealed_too() {
    let (dir, db, ring, mut events, p) = given_two_users();
    let id = Uuid::from_u128(1);
    let subjects = memory_subjects(T, id, Some("alice"), None, None);
    let update = MemoryUpdated {
        memory_id: id,
        tenant_id: T,
        content: Some("ocelot-new-content-5512".into()),
        importance: Some(0.9),
        updated_at: 50,
        model: Some("m".into()),
        vector: Some(vector_to_bytes(&[0.6, 0.8])),
        amend: Some(MemoryAmend {
            set_metadata: true,
            metadata: Some(r#"{"note":"lynx-meta-7781"}"#.into()),
            ..MemoryAmend::default()
        }),
        sealed: None,
    }
    .sealed_for(&*ring, &subjects)
    .expect("seal");
    events.push(Event::MemoryUpdated(update));
    p.apply(&[Applied::at(3, &events[2])]).expect("apply");
    for secret in ["ocelot-new-content-5512", "lynx-meta-7781", ALICE_SECRET] {
        assert!(!tree_holds(&db, secret), "{secret} in the tree");
        assert!(!contains(&events[2].encode().expect("encode"), secret));
    }
    let check = |p: &Memories| {
        let m = p.get(&T, &id).expect("get").expect("live");
        assert_eq!(
            (m.content.as_str(), m.importance),
            ("ocelot-new-content-5512", 0.9)
        );
        assert_eq!(noted(p, "lynx-meta-7781"), vec![1]);
        assert_eq!(noted(p, ALICE_META), Vec::<u128>::new());
        assert_eq!(found(p, "ocelot", [0.6, 0.8], SearchMode::Keyword), vec![1]);
        assert_eq!(
            found(p, ALICE_SECRET, [0.6, 0.8], SearchMode::Keyword),
            Vec::<u128>::new()
        );
        assert_eq!(
            p.stored(&id).expect("read").expect("kept").versions,
            vec![1, 3]
        );
    };
    check(&p);
    drop(p);
    check(&open(&db, &events, &ring, dir.path()));
}

/// No search mode finds Alice's memory by its text, and a semantic search of `page` results
/// and the duplicate check's nearest neighbour both give Bob's where hers would rank first.
fn no_search_finds_alice(p: &Memories, page: usize) {
    for mode in [
        SearchMode::Semantic,
        SearchMode::Keyword,
        SearchMode::Hybrid,
    ] {
        assert_eq!(
            found(p, ALICE_SECRET, [1.0, 0.0], mode)
                .into_iter()
                .filter(|id| *id == 1)
                .count(),
            0,
            "{mode:?}"
        );
    }
    assert_eq!(
        p.search(&T, &[1.0, 0.0], None, -1.0, page)
            .expect("search")
            .iter()
            .map(|(m, _)| m.id.as_u128())
            .collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(
        p.nearest(&T, &[1.0, 0.0], None)
            .expect("nearest")
            .map(|n| n.0),
        Some(Uuid::from_u128(2))
    );
}

/// Alice's memory is erased, Bob's untouched: in every read and index.
fn then_alice_is_erased(p: &Memories) {
    let alice = Uuid::from_u128(1);
    assert_eq!(p.get(&T, &alice).expect("get"), None);
    assert_eq!(listed(p), vec![2]);
    assert_eq!(p.list(&T, None, 0, 10).expect("list").0, 1);
    assert_eq!(p.count(&T), 1);
    no_search_finds_alice(p, 10);
    assert_eq!(
        found(p, BOB_SECRET, [0.0, 1.0], SearchMode::Keyword),
        vec![2]
    );
    assert_eq!(noted(p, ALICE_META), Vec::<u128>::new());
    let state = p.state();
    let t = &state.tenants[&T];
    assert_eq!(t.vectors.len(), 1);
    assert_eq!(t.keywords.search(ALICE_SECRET, 10, |_| true), Vec::new());
    assert_eq!(t.keywords.len(), 1);
    assert!(state
        .names
        .held(&alice)
        .is_none_or(|h| h.extra.metadata.is_none()));
    let stored = p.stored(&alice).expect("read").expect("kept");
    assert!(stored.erased);
    assert_eq!(
        (stored.content.as_str(), stored.sealed.is_none()),
        ("", true)
    );
    let bob = p.get(&T, &Uuid::from_u128(2)).expect("get").expect("live");
    assert_eq!(bob.content, BOB_SECRET);
}

#[test]
fn given_a_sealed_memory_when_its_key_is_destroyed_then_it_is_erased_once_reopened() {
    let (dir, db, ring, events, p) = given_two_users();
    drop(p);
    ring.destroy(&[alice_key(&ring)]).expect("destroy");
    let p = open(&db, &events, &ring, dir.path());
    then_alice_is_erased(&p);
    // A replay over the same log, with the key gone, ends the same.
    let again = sled::open(dir.path().join("replay")).expect("open");
    let r = open(&again, &[], &ring, dir.path());
    r.apply(&Applied::in_order(&events)).expect("replay");
    then_alice_is_erased(&r);
    assert_eq!(
        r.stored(&Uuid::from_u128(1))
            .expect("read")
            .expect("kept")
            .versions,
        vec![1]
    );
}

#[test]
fn given_subjects_erased_then_its_memories_leave_every_index_at_once_and_replay_agrees() {
    let (dir, db, ring, mut events, p) = given_two_users();
    let alice = Uuid::from_u128(1);
    events.push(Event::SubjectsErased(SubjectsErased {
        erasure_id: Uuid::from_u128(0xE),
        tenant_id: T,
        subjects: vec![Subject::User(T, "alice".into())],
        key_ids: vec![alice_key(&ring)],
        memory_ids: vec![alice],
        erased_at: 90,
    }));
    // Applied while alice's key still exists: gone from every read and index at once.
    p.apply(&[Applied::at(3, &events[2])]).expect("apply");
    then_alice_is_erased(&p);
    let stored = p.stored(&alice).expect("read").expect("kept");
    assert_eq!(
        (stored.versions.clone(), stored.deleted_at),
        (vec![1, 3], Some(90))
    );
    for secret in [ALICE_SECRET, ALICE_META] {
        assert!(!tree_holds(&db, secret), "{secret} in the tree");
    }
    // Reopened (the key is destroyed right after the event), and replayed: the same.
    drop(p);
    ring.destroy(&[alice_key(&ring)]).expect("destroy");
    then_alice_is_erased(&open(&db, &events, &ring, dir.path()));
    let again = sled::open(dir.path().join("replay")).expect("open");
    let r = open(&again, &[], &ring, dir.path());
    r.apply(&Applied::in_order(&events)).expect("replay");
    then_alice_is_erased(&r);
    let replayed = r.stored(&alice).expect("read").expect("kept");
    assert_eq!(
        (replayed.versions, replayed.deleted_at),
        (vec![1, 3], Some(90))
    );
}

#[test]
fn an_erasure_naming_another_tenants_memory_leaves_it_alone() {
    let (_dir, _db, ring, _events, p) = given_two_users();
    let foreign = Event::SubjectsErased(SubjectsErased {
        erasure_id: Uuid::from_u128(0xE),
        tenant_id: Uuid::from_u128(999),
        subjects: vec![Subject::Tenant(Uuid::from_u128(999))],
        key_ids: Vec::new(),
        memory_ids: vec![Uuid::from_u128(1)],
        erased_at: 90,
    });
    p.apply(&[Applied::at(3, &foreign)]).expect("apply");
    assert_eq!(listed(&p), vec![2, 1]);
    let m = p.get(&T, &Uuid::from_u128(1)).expect("get").expect("live");
    assert_eq!(m.content, ALICE_SECRET);
    drop(ring);
}

#[test]
fn a_memory_hidden_ahead_of_a_large_batch_landing_is_shown_by_no_read_while_still_indexed() {
    let (_dir, _db, _ring, _events, p) = given_two_users();
    let alice = Uuid::from_u128(1);
    let mut m = p.stored(&alice).expect("read").expect("kept");
    sealing::erase(&mut m);
    m.deleted_at = Some(90);
    // What a batch of more than `LAND_CHUNK` memories does to a memory it drops as it lands.
    let hidden = super::apply::hide(&mut p.state.write().expect("lock"), &m);
    assert!(hidden);
    {
        let state = p.state();
        let t = &state.tenants[&T];
        assert_eq!((t.vectors.len(), t.keywords.len(), t.unindexing), (2, 2, 1));
    }
    assert_eq!(p.get(&T, &alice).expect("get"), None);
    assert_eq!(listed(&p), vec![2]);
    assert_eq!(p.list(&T, None, 0, 10).expect("list").0, 1);
    assert_eq!(noted(&p, ALICE_META), Vec::<u128>::new());
    // The search still fills its page from the others, and the duplicate check passes it by.
    no_search_finds_alice(&p, 1);
}
