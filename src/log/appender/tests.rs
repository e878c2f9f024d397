//! The appender's answers against the applier's progress, on a real data dir.

use std::sync::Arc;
use std::time::Duration;

use auditmem_projections::{Event, Plan, Projections, TenantCreated};
use uuid::Uuid;

use super::{Appender, AppenderThread, Durability};

/// Long enough for an answer that does not wait for the applier to arrive on a loaded machine.
const ARRIVES: Duration = Duration::from_secs(10);
/// How long an answer that waits for the stalled applier is watched not arriving.
const STALLED: Duration = Duration::from_millis(300);

fn started(dir: &tempfile::TempDir) -> (Appender, AppenderThread, Arc<Projections>) {
    let db = sled::open(dir.path()).expect("open the data dir");
    let projections = Arc::new(
        crate::log::open_projections(
            &db,
            None,
            Arc::new(auditmem_projections::seal::MemoryKeyring::default()),
        )
        .expect("open the projections"),
    );
    let (appender, thread) =
        Appender::start(db, dir.path(), projections.clone(), Durability::Fsync, 0)
            .expect("start the appender");
    (appender, thread, projections)
}

fn created(n: u128) -> Event {
    Event::TenantCreated(TenantCreated {
        tenant_id: Uuid::from_u128(n),
        name: format!("tenant {n}"),
        plan: Plan::Business,
        subscription_active: true,
        credits: 0.0,
        created_at: 1_700_000_000_000_000,
    })
}

// The guard stalls the applier thread, never a runtime worker: holding it across the awaits
// is the test.
#[allow(clippy::await_holding_lock)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_stalled_applier_then_a_read_is_answered_once_stored_and_caught_up_waits_for_its_fold(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (appender, thread, projections) = started(&dir);
    let a = Uuid::from_u128(3);
    let held = appender.hold_applier();

    // A write waits for its fold, so it is not answered while the applier is held,
    let write = tokio::spawn({
        let appender = appender.clone();
        async move { appender.append(vec![created(1)]).await }
    });
    tokio::time::sleep(STALLED).await;
    assert!(!write.is_finished(), "a write was answered before its fold");
    // but a read's entry is answered once durable, with its position, before any fold,
    let read = tokio::time::timeout(ARRIVES, appender.append_read(vec![created(3)]))
        .await
        .expect("a read is answered while the applier is stalled")
        .expect("the read's append");
    assert_eq!((read.first_seq, read.last_seq), (2, 2));
    assert_eq!(appender.head().seq, 0);
    assert!(projections.tenants.tenant(&a).expect("read").is_none());
    // and what reads the folded state waits for it.
    let waiting = tokio::spawn({
        let appender = appender.clone();
        async move { appender.caught_up().await }
    });
    tokio::time::sleep(STALLED).await;
    assert!(!waiting.is_finished(), "caught up before the read's fold");

    drop(held);
    let write = tokio::time::timeout(ARRIVES, write)
        .await
        .expect("the write is answered once folded")
        .expect("join")
        .expect("the write's append");
    assert_eq!(write.last_seq, 1);
    tokio::time::timeout(ARRIVES, waiting)
        .await
        .expect("caught up once folded")
        .expect("join");
    assert!(appender.head().seq >= 2);
    assert!(projections.tenants.tenant(&a).expect("read").is_some());
    thread.stop().await;
}
