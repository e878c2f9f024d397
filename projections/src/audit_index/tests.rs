//! [`AuditIndex`] as a whole: counts, pages and chains per tenant, the block file, and the
//! id window past which ids are found in the stored runs.

use uuid::Uuid;

use super::*;
use crate::audit_view::chain_hash;
use crate::event::{AuditEntry, AuditRecorded, Event};
use crate::projection::{Applied, Projection};

fn entry(action: &str, created_at: i64) -> AuditEntry {
    AuditEntry {
        id: Uuid::now_v7(),
        action: action.into(),
        model_id: None,
        project_id: None,
        gateway_id: None,
        ip_address: None,
        user_agent: None,
        http_status: 200,
        is_success: true,
        is_cache_hit: false,
        error_code: None,
        error_msg: None,
        duration: None,
        credits_consumed: 0.0,
        balance_consumed_usd: 0.0,
        tokens: None,
        metadata: None,
        created_at,
        detail_hash: None,
    }
}

#[test]
fn given_a_block_file_then_the_index_answers_as_on_the_heap_and_holds_little() {
    // Given 3 x 2,048 + 500 entries of one tenant in two actions, a tenth of them dated in
    // the past (late), applied to an index on the heap and to one writing its sealed
    // blocks to a file, in group commits of 100,
    let mut events = Vec::new();
    let tenant = Uuid::now_v7();
    for i in 0..6_644i64 {
        let at = if i % 10 == 9 { i * 50 - 40_000 } else { i * 50 };
        let action = if i % 3 == 0 {
            "audit.list"
        } else {
            "memory.write"
        };
        events.push(Event::AuditRecorded(Box::new(AuditRecorded {
            tenant_id: tenant,
            entry: entry(action, 1_000_000 + at),
            detail: Default::default(),
            sealed: None,
            sealed_detail: None,
        })));
    }
    let applied = Applied::in_order(&events);
    let (heap_dir, file_dir, spill) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let heap_db = sled::open(heap_dir.path()).expect("open");
    let file_db = sled::open(file_dir.path()).expect("open");
    let heap = AuditIndex::open(&heap_db).expect("open");
    let filed = AuditIndex::open_in(&file_db, spill.path()).expect("open");
    for batch in applied.chunks(100) {
        heap.apply(batch).expect("apply");
        filed.apply(batch).expect("apply");
    }
    // then every count and page agrees, for all entries, an action and a time range,
    let all = Filter {
        tenant_id: tenant,
        action: None,
        from: i64::MIN,
        to: i64::MAX,
    };
    let filters = [
        all,
        Filter {
            action: Some("audit.list"),
            ..all
        },
        Filter {
            from: 1_000_000 + 40_000,
            to: 1_000_000 + 250_000,
            ..all
        },
    ];
    let check = |idx: &AuditIndex| -> Vec<(usize, Page, Page, Vec<u64>)> {
        filters
            .iter()
            .map(|f| {
                (
                    idx.count(f).expect("count"),
                    idx.page(f, 2_100, 50).expect("page"),
                    idx.after(f, (1_000_000 + 150_000, 0), u64::MAX, 30)
                        .expect("after"),
                    idx.in_log_order(f, None, u64::MAX, usize::MAX / 4)
                        .expect("in log order"),
                )
            })
            .collect()
    };
    let want = check(&heap);
    assert_eq!(want[0].0, 6_644);
    assert_eq!(want[0].1.items.len(), 50);
    assert_eq!(want[0].2.items.len(), 30);
    assert_eq!(check(&filed), want);
    // In log order a window at a time: the windows, joined, are the whole, ascending, and a
    // bound on seq cuts it.
    for (f, (count, _, _, whole)) in filters.iter().zip(&want) {
        // (the whole tenant is read from its log-order index, a time range or an action
        // from the time indexes: each holds every matching entry)
        assert_eq!(whole.len(), *count);
        assert!(whole.windows(2).all(|w| w[0] < w[1]));
        for limit in [1, 97, 5_000] {
            let (mut joined, mut after) = (Vec::new(), None);
            loop {
                let w = filed
                    .in_log_order(f, after, u64::MAX, limit)
                    .expect("window");
                assert!(w.len() <= limit);
                joined.extend_from_slice(&w);
                match w.last() {
                    Some(&last) if w.len() == limit => after = Some(last),
                    _ => break,
                }
            }
            assert_eq!(&joined, whole, "windows of {limit}");
        }
        if let Some(&mid) = whole.get(whole.len() / 2) {
            let below = heap
                .in_log_order(f, None, mid, usize::MAX / 4)
                .expect("below");
            assert_eq!(below, whole[..whole.len() / 2]);
        }
    }
    // the sealed blocks' words left the heap for the file (the blocks are the same in both:
    // the same inserts seal the same blocks; the file also keeps the words of blocks
    // unpacked for a late entry since),
    let moved = heap.index_heap_bytes() - filed.index_heap_bytes();
    assert!(moved >= 4 * 1024, "{moved} bytes moved");
    assert!(filed.index_file_bytes() >= moved as u64);
    assert_eq!(heap.index_file_bytes(), 0);
    // and a reopened index (a new file, rebuilt from the tree) answers the same.
    drop(filed);
    let reopened = AuditIndex::open_in(&file_db, spill.path()).expect("reopen");
    assert_eq!(check(&reopened), want);
}

#[test]
fn given_entries_of_two_tenants_then_counts_pages_and_chains_are_per_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let idx = AuditIndex::open(&db).expect("open");
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let mut events = Vec::new();
    for i in 0..30i64 {
        let tenant = if i % 3 == 0 { b } else { a };
        let action = if i % 2 == 0 {
            "memory.write"
        } else {
            "audit.list"
        };
        events.push(Event::AuditRecorded(Box::new(AuditRecorded {
            tenant_id: tenant,
            entry: entry(action, 1000 + i),
            detail: Default::default(),
            sealed: None,
            sealed_detail: None,
        })));
    }
    let applied = Applied::in_order(&events);
    idx.apply(&applied[..10]).expect("apply");
    idx.apply(&applied).expect("apply overlapping");

    let all_a = Filter {
        tenant_id: a,
        action: None,
        from: i64::MIN,
        to: i64::MAX,
    };
    assert_eq!(idx.count(&all_a).expect("count"), 20);
    let writes_a = Filter {
        action: Some("memory.write"),
        ..all_a
    };
    assert_eq!(idx.count(&writes_a).expect("count"), 10);
    let ranged = Filter {
        from: 1010,
        to: 1019,
        ..all_a
    };
    // 1010..=1019 holds ten entries; 1012, 1015 and 1018 belong to tenant b.
    assert_eq!(idx.count(&ranged).expect("count"), 7);
    let page = idx.page(&all_a, 0, 3).expect("page");
    assert_eq!(page.total, 20);
    assert_eq!(page.items, vec![(1029, 30), (1028, 29), (1026, 27)]);
    let past = idx.page(&all_a, 100, 3).expect("page");
    assert_eq!((past.total, past.items.len()), (20, 0));
    let next = idx.after(&all_a, (1026, 27), 30, 2).expect("after");
    assert_eq!(next.items, vec![(1025, 26), (1023, 24)]);

    // Chains: each tenant's first entry links to zeros, each later one to the one before.
    let (head_a, n_a) = idx.head(&a);
    assert_eq!(n_a, 20);
    let mut prev = [0u8; 32];
    let mut n = 0;
    for e in events.iter() {
        let Event::AuditRecorded(r) = e else {
            unreachable!()
        };
        if r.tenant_id != a {
            continue;
        }
        let got = idx.get(&r.entry.id).expect("get").expect("ref");
        assert_eq!(got.prev_hash, prev);
        n += 1;
        assert_eq!(got.chain_index, n);
        assert_eq!(got.hash, chain_hash(&prev, &r.entry, r.sealed.is_some()));
        prev = got.hash;
    }
    assert_eq!(prev, head_a);

    // Reopening rebuilds the in-memory index from the tree.
    drop(idx);
    let idx = AuditIndex::open(&db).expect("reopen");
    assert_eq!(idx.count(&writes_a).expect("count"), 10);
    idx.reset().expect("reset");
    assert_eq!(idx.count(&all_a).expect("count"), 0);
}

#[test]
fn ids_past_the_recent_window_are_found_in_the_stored_runs_and_still_refused_twice() {
    // Given a window of 300 ids and 2,000 entries applied in group commits of assorted
    // sizes (one entry, a few, more than a block), some with ids that are not UUIDv7
    // (scattered leading bits),
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let idx = AuditIndex::open_with_recent(&db, 300).expect("open");
    let tenant = Uuid::now_v7();
    let events: Vec<Event> = (0..2000i64)
        .map(|i| {
            let mut e = entry("gateway.chat", 1000 + i);
            if i % 97 == 0 {
                e.id = Uuid::from_u128(
                    (i as u128 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835),
                );
            }
            Event::AuditRecorded(Box::new(AuditRecorded {
                tenant_id: tenant,
                entry: e,
                detail: Default::default(),
                sealed: None,
                sealed_detail: None,
            }))
        })
        .collect();
    let applied = Applied::in_order(&events);
    let mut at = 0;
    for size in [1usize, 7, 300, 1, 1, 513, 40].into_iter().cycle() {
        let end = (at + size).min(applied.len());
        idx.apply(&applied[..end]).expect("apply");
        at = end;
        if at == applied.len() {
            break;
        }
    }
    let all = Filter {
        tenant_id: tenant,
        action: None,
        from: i64::MIN,
        to: i64::MAX,
    };
    assert_eq!(idx.count(&all).expect("count"), 2000);
    // then memory holds a bounded window of ids, not all of them,
    {
        let state = idx.state();
        assert!(
            state.recent.len() <= 300 + 2 * BLOCK_REFS,
            "{}",
            state.recent.len()
        );
        assert_eq!(state.recent.len(), state.recent_order.len());
        assert!(state.recent_from > 0);
    }
    // every id, old or new, is found with its seq, and an unknown one is not,
    let check = |idx: &AuditIndex| {
        for (a, e) in applied.iter().zip(&events) {
            let Event::AuditRecorded(r) = e else {
                unreachable!()
            };
            let got = idx.get(&r.entry.id).expect("get").expect("found");
            assert_eq!((got.id, got.seq), (r.entry.id, a.seq));
        }
        assert_eq!(idx.get(&Uuid::now_v7()).expect("get"), None);
        assert_eq!(idx.get(&Uuid::from_u128(u128::MAX / 3)).expect("get"), None);
    };
    check(&idx);
    // and an old id appended again is refused, as a recent one is (the chain stays one).
    let Event::AuditRecorded(first) = &events[3] else {
        unreachable!()
    };
    let Event::AuditRecorded(last) = &events[1999] else {
        unreachable!()
    };
    let again = [first.clone(), last.clone()].map(Event::AuditRecorded);
    let mut applied_again = Applied::in_order(&again);
    for (k, a) in applied_again.iter_mut().enumerate() {
        a.seq = 2001 + k as u64;
    }
    let head = idx.head(&tenant);
    idx.apply(&applied_again).expect("apply duplicates");
    assert_eq!(idx.count(&all).expect("count"), 2000);
    assert_eq!(idx.head(&tenant), head);
    // Detached and attached to the database opened again, nothing is read back,
    let detached = idx.detach();
    drop(db);
    let db = crate::reopen_db(dir.path());
    let idx = AuditIndex::attach(&db, detached).expect("attach");
    check(&idx);
    assert_eq!(idx.head(&tenant), head);
    // and reopened from the tree, the window and the runs are rebuilt alike.
    drop(idx);
    let idx = AuditIndex::open_with_recent(&db, 300).expect("reopen");
    check(&idx);
    assert_eq!(idx.head(&tenant), head);
}

#[test]
fn given_two_tenants_interleaved_then_tenant_after_reads_one_tenants_refs_in_log_order() {
    // Given 700 entries of tenants A and B, every third one A's, applied in group commits of
    // 50 (so 14 blocks),
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let events: Vec<Event> = (0..700i64)
        .map(|i| {
            Event::AuditRecorded(Box::new(AuditRecorded {
                tenant_id: if i % 3 == 0 { a } else { b },
                entry: entry("memory.write", 1_000_000 + i),
                detail: Default::default(),
                sealed: None,
                sealed_detail: None,
            }))
        })
        .collect();
    let applied = Applied::in_order(&events);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let index = AuditIndex::open(&db).expect("open");
    for batch in applied.chunks(50) {
        index.apply(batch).expect("apply");
    }
    let a_seqs: Vec<u64> = (1..=700u64).filter(|s| (s - 1) % 3 == 0).collect();
    // when A's refs are read a batch of 7 at a time from every starting point (inside a
    // block, on a block's first seq, past the end),
    for start in [0u64, 1, 2, 49, 50, 51, 333, 699, 700, 800] {
        let mut got = Vec::new();
        let mut after = start;
        loop {
            let (refs, reached) = index.tenant_after(&a, after, 700, 7).expect("read");
            assert!(refs.len() <= 7);
            assert!(reached >= after, "{reached} < {after}");
            got.extend(refs.iter().map(|r| r.seq));
            assert!(refs.iter().all(|r| r.tenant_id == a));
            if reached >= 700 || (refs.is_empty() && reached == after) {
                break;
            }
            after = reached;
        }
        // then they are exactly A's seqs past the start, once each, in log order,
        let want: Vec<u64> = a_seqs.iter().copied().filter(|s| *s > start).collect();
        assert_eq!(got, want, "from {start}");
    }
    // and a read never goes past the head it is given.
    let (refs, reached) = index.tenant_after(&a, 0, 10, 100).expect("read");
    assert_eq!(
        refs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![1, 4, 7, 10]
    );
    assert_eq!(reached, 10);
    let (refs, reached) = index.tenant_after(&b, 9, 9, 100).expect("read");
    assert!(refs.is_empty());
    assert_eq!(reached, 9);
}

#[test]
fn a_tenant_with_few_entries_in_a_busy_log_is_read_in_one_pass_of_its_own() {
    // Given 40,000 entries of B with one of A's every 10,000, dated out of log order (late
    // forwarded entries), in group commits of 1,000,
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let events: Vec<Event> = (0..40_003i64)
        .map(|i| {
            Event::AuditRecorded(Box::new(AuditRecorded {
                tenant_id: if i % 10_001 == 5 { a } else { b },
                entry: entry("memory.write", 1_000_000 - i),
                detail: Default::default(),
                sealed: None,
                sealed_detail: None,
            }))
        })
        .collect();
    let a_seqs: Vec<u64> = (1..=40_003u64).filter(|s| (s - 1) % 10_001 == 5).collect();
    assert_eq!(a_seqs, vec![6, 10_007, 20_008, 30_009]);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::open(dir.path()).expect("open");
    let index = AuditIndex::open(&db).expect("open");
    for batch in Applied::in_order(&events).chunks(1_000) {
        index.apply(batch).expect("apply");
    }
    // when A is read from the start up to the head, one read answers all of its entries, in
    // log order, and has reached the head,
    let (refs, reached) = index.tenant_after(&a, 0, 40_003, 256).expect("read");
    assert_eq!(refs.iter().map(|r| r.seq).collect::<Vec<_>>(), a_seqs);
    assert!(refs.iter().all(|r| r.tenant_id == a));
    assert_eq!(
        refs.iter().map(|r| r.chain_index).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(reached, 40_003);
    // from inside the log, on one of A's positions, and a limit cut where it stops,
    let (refs, reached) = index.tenant_after(&a, 10_007, 40_003, 256).expect("read");
    assert_eq!(
        refs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![20_008, 30_009]
    );
    assert_eq!(reached, 40_003);
    let (refs, reached) = index.tenant_after(&a, 0, 40_003, 2).expect("read");
    assert_eq!(
        refs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![6, 10_007]
    );
    assert_eq!(reached, 10_007);
    let (refs, reached) = index.tenant_after(&a, 6, 20_007, 256).expect("read");
    assert_eq!(refs.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![10_007]);
    assert_eq!(reached, 20_007);
    // and B, the busy one, reads its own in order past A's, its batches joined whole.
    let (mut got, mut after) = (Vec::new(), 0);
    loop {
        let (refs, reached) = index.tenant_after(&b, after, 40_003, 256).expect("read");
        assert!(refs.len() <= 256);
        got.extend(refs.iter().map(|r| r.seq));
        if reached >= 40_003 {
            break;
        }
        after = reached;
    }
    let want: Vec<u64> = (1..=40_003u64).filter(|s| !a_seqs.contains(s)).collect();
    assert_eq!(got, want);
}
