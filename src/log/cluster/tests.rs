//! The cluster's log of record driven on the in-memory stream ([`super::fake`]): the rare
//! interleavings of several nodes on one stream (a lost race, a lost acknowledgement, two
//! nodes deciding the same rule at once, a node far behind) as ordinary unit tests of the real
//! writer, applier and mirror.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use auditmem_projections::{
    Event, ExportFormat, ExportRequested, Plan, Projections, TenantCreated,
};
use uuid::Uuid;

use super::fake::{FakeStream, LostAck};
use super::mirror_position;
use super::stream::StreamMessage;
use crate::log::appender::{AppendError, Appender, AppenderThread, Committed, Precondition};
use crate::log::record::{self, Record};
use crate::log::{Head, LogReader};
use crate::registry::ErrorCode;

const TIMEOUT: Duration = Duration::from_secs(5);

/// The refusal of every write after a failure, as `/healthz` says it.
const REFUSING: &str = "the log refuses writes after a storage failure, until a restart";

/// A writer on a fake stream, over a data dir of its own.
struct Node {
    db: sled::Db,
    projections: Arc<Projections>,
    appender: Appender,
    thread: AppenderThread,
    dir: tempfile::TempDir,
}

impl Node {
    fn start(stream: &FakeStream, name: &str) -> Node {
        Node::start_in(stream, name, tempfile::tempdir().expect("tempdir"))
    }

    fn start_in(stream: &FakeStream, name: &str, dir: tempfile::TempDir) -> Node {
        let db = open_when_released(dir.path());
        let projections = Arc::new(
            crate::log::open_projections(
                &db,
                None,
                Arc::new(auditmem_projections::seal::MemoryKeyring::default()),
            )
            .expect("open the projections"),
        );
        let (appender, thread) = super::start_with(
            db.clone(),
            dir.path(),
            projections.clone(),
            0,
            stream.client(name),
            TIMEOUT,
            tokio::runtime::Handle::current(),
        )
        .expect("start the appender");
        Node {
            db,
            projections,
            appender,
            thread,
            dir,
        }
    }

    /// Stops the writer and closes the data dir, which is handed back.
    /// The node's data dir, held by nothing else.
    async fn stop(self) -> tempfile::TempDir {
        let Node {
            db,
            projections,
            appender,
            thread,
            dir,
        } = self;
        thread.stop().await;
        drop((appender, projections));
        db.flush().expect("flush");
        drop(db);
        dir
    }

    /// Every record of the mirror, seq 1 first.
    fn mirror(&self) -> Vec<Record> {
        let log = LogReader::open(&self.db).expect("the log tree");
        let head = log.head().expect("the mirror's head");
        (1..=head.seq)
            .map(|seq| log.get(seq).expect("read").expect("a record at every seq"))
            .collect()
    }

    fn position(&self) -> u64 {
        mirror_position(&self.db).expect("the mirror's position")
    }

    fn has_tenant(&self, id: &Uuid) -> bool {
        self.projections
            .tenants
            .tenant(id)
            .expect("read the tenants")
            .is_some()
    }
}

fn tenant(n: u128) -> (Uuid, Event) {
    let id = Uuid::from_u128(n);
    let event = Event::TenantCreated(TenantCreated {
        tenant_id: id,
        name: format!("tenant {n}"),
        plan: Plan::Business,
        subscription_active: true,
        credits: 0.0,
        created_at: 1_700_000_000_000_000,
    });
    (id, event)
}

fn export_requested(tenant: Uuid, export: u128) -> Event {
    Event::ExportRequested(ExportRequested {
        export_id: Uuid::from_u128(export),
        tenant_id: tenant,
        format: ExportFormat::Csv,
        start_time: 0,
        end_time: 1_700_000_000_000_000,
        estimated_records: 0,
        with_chain: false,
        requested_at: 1_700_000_000_000_000,
    })
}

/// The precondition `POST /v1/audit/logs/export` appends with (`command::export`): one
/// export in progress per tenant (2203), then the quotas (none here).
fn no_export_in_progress(projections: &Projections, tenant: Uuid) -> Precondition {
    let ctx = crate::command::Context::new(
        projections,
        1_700_000_000_000_000,
        crate::command::Clock::Fixed(1_700_000_000_000_000),
        crate::command::Ids::V7,
    );
    let rules = crate::command::export::ExportRules {
        retention_days: 90,
        quota: crate::export::quota::Quota {
            max_files: 0,
            max_bytes: 0,
            max_per_hour: 0,
        },
        ttl: std::time::Duration::from_secs(3600),
    };
    crate::command::export::may_start(&ctx, tenant, &rules)
}

/// `events` sealed after `head` at `ts`, as another node publishes them: the message's
/// payload and the head it ends on.
fn sealed(head: Head, ts: i64, events: &[Event]) -> (Vec<u8>, Head) {
    let (mut seq, mut prev) = (head.seq, head.hash);
    let mut payload = Vec::new();
    for e in events {
        seq += 1;
        let (hash, bytes) = Record::seal_encoded(seq, ts, &prev, &e.encode().expect("encode"));
        payload.extend_from_slice(&bytes);
        prev = hash;
    }
    (payload, Head { seq, hash: prev })
}

/// The records of a stream message.
fn records(payload: &[u8]) -> Vec<Record> {
    if payload.is_empty() {
        return Vec::new();
    }
    record::pieces(payload)
        .map(|p| Record::decode(&payload[p.range]).expect("a record"))
        .collect()
}

/// Every record the stream holds, in order.
fn stream_records(messages: &[StreamMessage]) -> Vec<Record> {
    messages.iter().flat_map(|m| records(&m.payload)).collect()
}

/// Who published each message, by stream sequence.
fn publishers(stream: &FakeStream) -> Vec<(u64, Option<String>)> {
    stream
        .messages()
        .into_iter()
        .map(|m| (m.seq, m.publisher))
        .collect()
}

fn seqs(c: Committed) -> (u64, u64) {
    (c.first_seq, c.last_seq)
}

/// Waits until `appender`'s head reaches `seq`; the head then.
async fn head_reaches(appender: &Appender, seq: u64) -> Head {
    let mut head = appender.subscribe();
    let reached = tokio::time::timeout(Duration::from_secs(10), head.wait_for(|h| h.seq >= seq))
        .await
        .expect("the head reaches the seq in time")
        .expect("the appender runs");
    *reached
}

fn who(name: &str) -> Option<String> {
    Some(name.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_race_is_folded_checked_again_and_published_on_the_new_head() {
    let stream = FakeStream::new();
    let a = Node::start(&stream, "a");
    let (t1, e1) = tenant(1);
    let first = a.appender.append(vec![e1]).await.expect("the first write");
    assert_eq!(seqs(first), (1, 1));
    // b's two records, sealed on a's first, land right before a's next publish is looked at.
    let (t2, e2) = tenant(2);
    let (t3, e3) = tenant(3);
    let (from_b, b_head) = sealed(a.appender.head(), 1_000, &[e2, e3]);
    stream.land_before_next_publish_of("a", "b", from_b.clone());
    let (t4, e4) = tenant(4);
    // The precondition notes whether it sees b's tenant each time it is decided.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let check: Precondition = {
        let seen = seen.clone();
        Box::new(move |p: &Projections| {
            let known = p.tenants.tenant(&t2).ok().flatten().is_some();
            seen.lock().expect("the notes").push(known);
            Ok(())
        })
    };
    let second = a
        .appender
        .append_checked(vec![e4], check)
        .await
        .expect("the second write");

    // After b's records 2 and 3.
    assert_eq!(seqs(second), (4, 4));
    // Decided on a's head (b's tenant unknown), then again on b's (known).
    assert_eq!(*seen.lock().expect("the notes"), vec![false, true]);
    assert_eq!(
        publishers(&stream),
        vec![(1, None), (2, who("a")), (3, who("b")), (4, who("a"))]
    );
    // The lost attempt and the one that landed.
    assert_eq!(stream.attempts("a"), 3);
    let messages = stream.messages();
    assert_eq!(messages[2].payload.as_ref(), from_b.as_slice());
    let last = records(&messages[3].payload);
    assert_eq!(last.len(), 1);
    // Sealed anew on b's head.
    assert_eq!((last[0].seq, last[0].prev), (4, b_head.hash));
    assert_eq!(
        a.appender.head(),
        Head {
            seq: 4,
            hash: last[0].hash
        }
    );
    assert_eq!(a.position(), 4);
    assert_eq!(a.mirror(), stream_records(&messages));
    for t in [t1, t2, t3, t4] {
        assert!(a.has_tenant(&t), "tenant {t}");
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_retried_after_a_lost_acknowledgement_is_stored_and_answered_once() {
    let stream = FakeStream::new();
    let a = Node::start(&stream, "a");
    stream.lose_next_ack_of("a", LostAck::IdKept);
    let (t1, e1) = tenant(1);
    let c = a
        .appender
        .append(vec![e1])
        .await
        .expect("answered once acknowledged");
    assert_eq!(seqs(c), (1, 1));
    // The retry was answered as a duplicate: one copy in the stream.
    assert_eq!(stream.attempts("a"), 2);
    assert_eq!(publishers(&stream), vec![(1, None), (2, who("a"))]);
    let stored = records(&stream.messages()[1].payload);
    assert_eq!(stored.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1]);
    assert_eq!(
        a.appender.head(),
        Head {
            seq: 1,
            hash: stored[0].hash
        }
    );
    assert_eq!(a.position(), 2);
    assert_eq!(a.mirror(), stored);
    assert!(a.has_tenant(&t1));
    assert!(!a.appender.cluster_down());
    // The chain goes on from there.
    let (_, e2) = tenant(2);
    let c = a.appender.append(vec![e2]).await.expect("the next write");
    assert_eq!(seqs(c), (2, 2));
    assert_eq!(
        publishers(&stream),
        vec![(1, None), (2, who("a")), (3, who("a"))]
    );
    assert_eq!(a.mirror(), stream_records(&stream.messages()));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_past_the_duplicate_window_finds_its_own_group_by_folding_it() {
    let stream = FakeStream::new();
    let a = Node::start(&stream, "a");
    // Stored, unacknowledged, and its id no longer known to the stream: the retry loses the
    // race to the first attempt itself.
    stream.lose_next_ack_of("a", LostAck::IdForgotten);
    let (t1, e1) = tenant(1);
    let c = a
        .appender
        .append(vec![e1])
        .await
        .expect("answered from the fold");
    assert_eq!(seqs(c), (1, 1));
    assert_eq!(stream.attempts("a"), 2);
    assert_eq!(publishers(&stream), vec![(1, None), (2, who("a"))]);
    let stored = records(&stream.messages()[1].payload);
    assert_eq!(stored.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1]);
    assert_eq!(a.appender.head().hash, stored[0].hash);
    assert_eq!(a.position(), 2);
    assert_eq!(a.mirror(), stored);
    assert!(a.has_tenant(&t1));
    let (_, e2) = tenant(2);
    let c = a.appender.append(vec![e2]).await.expect("the next write");
    assert_eq!(seqs(c), (2, 2));
    assert_eq!(a.mirror(), stream_records(&stream.messages()));
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_asking_for_an_export_at_once_land_exactly_one_and_refuse_the_other_2203() {
    let stream = FakeStream::new();
    let a = Node::start(&stream, "a");
    let b = Node::start(&stream, "b");
    let tenant = Uuid::from_u128(7);
    stream.hold_publishes();
    let ask = |node: &Node, export: u128| {
        let appender = node.appender.clone();
        let check = no_export_in_progress(&node.projections, tenant);
        tokio::spawn(async move {
            appender
                .append_checked(vec![export_requested(tenant, export)], check)
                .await
        })
    };
    let from_a = ask(&a, 1);
    let from_b = ask(&b, 2);
    // Both decided "no export in progress" on the empty log and wait at the stream.
    stream.wait_held(2).await;
    stream.release("a");
    let landed = from_a.await.expect("a's task").expect("a's export lands");
    assert_eq!(seqs(landed), (1, 1));
    stream.release("b");
    match from_b.await.expect("b's task") {
        Err(AppendError::Rejected(r)) => {
            assert_eq!(r.code, ErrorCode::ExportInProgress);
            assert_eq!(r.code.code(), 2203);
            assert_eq!(r.message, "an export task is in progress");
        }
        other => panic!("b's export: {other:?}"),
    }
    // b lost the race, folded a's export, decided again and published nothing more.
    assert_eq!(stream.attempts("b"), 1);
    assert_eq!(publishers(&stream), vec![(1, None), (2, who("a"))]);
    let stored = stream_records(&stream.messages());
    assert_eq!(stored.len(), 1);
    for node in [&a, &b] {
        assert_eq!(
            node.projections
                .exports
                .processing_of(&tenant)
                .expect("read the exports"),
            Some(Uuid::from_u128(1))
        );
        assert_eq!(
            node.appender.head(),
            Head {
                seq: 1,
                hash: stored[0].hash
            }
        );
        assert_eq!(node.position(), 2);
        assert_eq!(node.mirror(), stored);
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_starts_behind_folds_the_whole_stream_then_writes_after_it() {
    let stream = FakeStream::new();
    let tenants: Vec<(Uuid, Event)> = (1..=5).map(tenant).collect();
    let events: Vec<Event> = tenants.iter().map(|(_, e)| e.clone()).collect();
    // b wrote three messages before a starts.
    let (m2, h2) = sealed(Head::default(), 10, &events[0..2]);
    let (m3, h3) = sealed(h2, 11, &events[2..3]);
    let (m4, h4) = sealed(h3, 12, &events[3..5]);
    for m in [m2, m3, m4] {
        stream.append("b", m);
    }
    let a = Node::start(&stream, "a");
    assert_eq!(head_reaches(&a.appender, 5).await, h4);
    assert_eq!(a.position(), 4);
    assert_eq!(a.mirror(), stream_records(&stream.messages()));
    for (t, _) in &tenants {
        assert!(a.has_tenant(t), "tenant {t}");
    }
    // a's own write follows b's last record.
    let (t6, e6) = tenant(6);
    let c = a.appender.append(vec![e6]).await.expect("a's write");
    assert_eq!(seqs(c), (6, 6));
    let messages = stream.messages();
    assert_eq!(messages[4].publisher.as_deref(), Some("a"));
    let mine = records(&messages[4].payload);
    assert_eq!((mine[0].seq, mine[0].prev), (6, h4.hash));
    assert!(a.has_tenant(&t6));

    // A crash between the mirror's write and its position: the position says message 3, the
    // mirror holds message 4's records too. At restart message 4 is folded again: its records
    // are found in the mirror, compared, and skipped.
    let dir = a.stop().await;
    {
        let db = open_when_released(dir.path());
        db.open_tree("cluster")
            .expect("the position's tree")
            .insert("stream_seq", &3u64.to_be_bytes())
            .expect("set the position back");
        db.flush().expect("flush");
    }
    let a = Node::start_in(&stream, "a", dir);
    let head = head_reaches(&a.appender, 6).await;
    assert_eq!(head.hash, mine[0].hash);
    let (_, e7) = tenant(7);
    let c = a
        .appender
        .append(vec![e7])
        .await
        .expect("the write after the restart");
    assert_eq!(seqs(c), (7, 7));
    assert_eq!(a.position(), 6);
    assert_eq!(a.mirror(), stream_records(&stream.messages()));
    assert!(a.appender.refusing().is_none());
    a.stop().await;
}

/// Starts a node behind b's message of records 1 and 2, lets it fold that, then has b
/// publish what `next` makes of the head (after a's own write when `a_writes`). What the
/// node answers the write after it, and the node.
async fn after_a_bad_message(
    a_writes: bool,
    next: impl FnOnce(Head, &[Event]) -> Vec<u8>,
) -> (Result<Committed, AppendError>, Node, Head) {
    let stream = FakeStream::new();
    let (_, e1) = tenant(1);
    let (_, e2) = tenant(2);
    let (m2, h2) = sealed(Head::default(), 10, &[e1, e2]);
    stream.append("b", m2);
    let a = Node::start(&stream, "a");
    assert_eq!(head_reaches(&a.appender, 2).await, h2);
    let mut head = h2;
    if a_writes {
        let (_, e) = tenant(30);
        assert_eq!(
            seqs(a.appender.append(vec![e]).await.expect("a's write")),
            (3, 3)
        );
        head = a.appender.head();
    }
    let (_, e3) = tenant(3);
    stream.append("b", next(h2, &[e3]));
    let (_, e4) = tenant(4);
    let answer = a.appender.append(vec![e4]).await;
    // Nothing of the message was mirrored or applied.
    assert_eq!(a.appender.head(), head);
    assert_eq!(a.position(), if a_writes { 3 } else { 2 });
    assert_eq!(a.appender.refusing().as_deref(), Some(REFUSING));
    (answer, a, head)
}

fn refused_for(answer: Result<Committed, AppendError>) -> String {
    match answer {
        Err(AppendError::Storage(why)) => why,
        other => panic!("a write after the stream forked: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_a_stream_that_does_not_continue_its_chain() {
    // A record whose prev is not the head's hash.
    let (answer, a, _) = after_a_bad_message(false, |head, events| {
        let other = Head {
            seq: head.seq,
            hash: [9; 32],
        };
        sealed(other, 20, events).0
    })
    .await;
    assert_eq!(
        refused_for(answer),
        "the log stream does not continue this node's chain: stream message 3: record 3 does not follow record 2"
    );
    a.stop().await;

    // A record after a gap.
    let (answer, a, _) = after_a_bad_message(false, |head, events| {
        let ahead = Head {
            seq: head.seq + 1,
            hash: head.hash,
        };
        sealed(ahead, 20, events).0
    })
    .await;
    assert_eq!(
        refused_for(answer),
        "the log stream does not continue this node's chain: stream message 3: record 4 does not follow record 2"
    );
    a.stop().await;

    // A record whose bytes no longer match its hash.
    let (answer, a, _) = after_a_bad_message(false, |head, events| {
        let mut payload = sealed(head, 20, events).0;
        if let Some(last) = payload.last_mut() {
            *last ^= 1;
        }
        payload
    })
    .await;
    assert_eq!(
        refused_for(answer),
        "the log stream does not continue this node's chain: stream message 3: record 3 does not match its hash"
    );
    a.stop().await;

    // Another record 3 than the one a wrote and mirrored: a fork.
    let (answer, a, _) = after_a_bad_message(true, |head, events| sealed(head, 20, events).0).await;
    assert_eq!(
        refused_for(answer),
        "the log stream does not continue this node's chain: stream message 4: record 3 differs from the mirror's"
    );
    a.stop().await;
}

/// Opens the data dir `dir`, waiting (at most 10 s) for a stopped node's last sled handle to
/// go: sled unlocks the dir when its last handle drops, which a stopped appender's threads may
/// do a moment after `stop` returns on a loaded machine.
fn open_when_released(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match crate::log::open_db(dir) {
            Ok(db) => return db,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("open {}: {e}", dir.display()),
        }
    }
}
