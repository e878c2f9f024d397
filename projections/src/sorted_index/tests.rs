//! The index's tests: every query against a sorted vector, on the heap and with a block file,
//! and the packing of sealed blocks.

use super::*;

/// The indexes each test runs on: one on the heap, one writing its sealed blocks to a file
/// (the directory is kept alive with it).
fn indexes() -> Vec<(SortedIndex, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = BlockFile::in_dir(dir.path());
    vec![
        (SortedIndex::new(), None),
        (SortedIndex::with_file(Some(file)), Some(dir)),
    ]
}

fn collect(it: impl Iterator<Item = io::Result<Key>>) -> Vec<Key> {
    it.collect::<io::Result<Vec<Key>>>().expect("read")
}

/// Checks every query against a sorted vector of the same keys.
fn assert_matches(idx: &SortedIndex, reference: &[Key]) {
    assert_eq!(idx.len(), reference.len());
    let all: Vec<Key> = collect(idx.between(0, idx.len()));
    assert_eq!(all, reference);
    for (i, k) in reference.iter().enumerate().step_by(37) {
        assert_eq!(idx.get(i).expect("get"), Some(*k));
        assert_eq!(idx.rank(*k).expect("rank"), i);
    }
    assert_eq!(idx.get(reference.len()).expect("get"), None);
    let desc: Vec<Key> = collect(idx.rev_from(usize::MAX));
    let want: Vec<Key> = reference.iter().rev().copied().collect();
    assert_eq!(desc, want);
    // At most the last block and one other are unpacked.
    let open = idx
        .blocks
        .iter()
        .filter(|b| matches!(b, Block::Open(_)))
        .count();
    assert!(open <= 2, "{open} unpacked blocks");
    for (i, b) in idx.blocks.iter().enumerate() {
        assert!(b.len() <= BLOCK && b.len() > 0);
        let sealed_allowed = i + 1 == idx.blocks.len() || idx.unsealed == Some(i);
        assert!(matches!(b, Block::Sealed(_)) || sealed_allowed, "block {i}");
    }
}

#[test]
fn bits_round_trip_at_every_width() {
    for width in 0..=64u32 {
        let max = if width == 0 {
            0
        } else {
            u64::MAX >> (64 - width)
        };
        let values: Vec<u64> = (0..200u64)
            .map(|i| match i % 4 {
                0 => max,
                1 => 0,
                _ => i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & max,
            })
            .collect();
        let bits = Bits::pack(&values);
        assert_eq!(bits.width, width);
        for (i, v) in values.iter().enumerate() {
            assert_eq!(bits.get(i), *v, "width {width} index {i}");
        }
    }
}

#[test]
fn packed_blocks_hold_extreme_keys() {
    let keys = vec![(i64::MIN, u64::MAX), (-5, 0), (0, 1 << 40), (i64::MAX, 7)];
    let mut p = Packed::new(&keys);
    let unpacked = |p: &Packed, file: Option<&BlockFile>| p.unpack(file).expect("unpack");
    assert_eq!(unpacked(&p, None), keys);
    assert_eq!(p.last, (i64::MAX, 7));
    // and read back the same from a block file.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = BlockFile::in_dir(dir.path());
    p.spill(&file);
    assert!(matches!(p.words, Words::File { .. }));
    assert_eq!(p.heap_bytes(), 0);
    assert_eq!(unpacked(&p, Some(&file)), keys);
    assert!(p.words(None).is_err());
}

#[test]
fn rank_and_select_match_a_sorted_vector() {
    for (mut idx, _dir) in indexes() {
        // Given keys inserted in a scrambled order, including duplicates,
        let mut reference = Vec::new();
        let mut x: u64 = 12345;
        for seq in 0..10_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let t = (x >> 33) as i64 % 5000;
            idx.insert((t, seq)).expect("insert");
            idx.insert((t, seq)).expect("insert again"); // idempotent
            reference.push((t, seq));
        }
        reference.sort();
        // then len, select and rank agree with the sorted vector.
        assert_matches(&idx, &reference);
        let (lo, hi) = idx.range(1000, 1999).expect("range");
        let expected = reference
            .iter()
            .filter(|(t, _)| (1000..=1999).contains(t))
            .count();
        assert_eq!(hi - lo, expected);
        let page = idx.descending(lo, hi, 3, 5).expect("page");
        let want: Vec<Key> = reference[lo..hi]
            .iter()
            .rev()
            .skip(3)
            .take(5)
            .copied()
            .collect();
        assert_eq!(page, want);
    }
}

#[test]
fn keys_in_order_are_sealed_into_packed_blocks() {
    for (mut idx, dir) in indexes() {
        // Given keys arriving in order, as nearly all audit entries do (a busy tenant: a
        // few hundred microseconds apart, seqs shared with other tenants),
        let n = BLOCK * 5 + 7;
        let key = |s: u64| (1_700_000_000_000_000 + s as i64 * 350, 1_000_000 + s * 3);
        for s in 0..n as u64 {
            idx.insert(key(s)).expect("insert");
        }
        // then every block but the last is sealed, at under 5 bytes a key on the heap, or
        // none with a block file (where the words went),
        assert_eq!(idx.blocks.len(), 6);
        for b in &idx.blocks[..5] {
            let Block::Sealed(p) = b else {
                panic!("an unsealed full block")
            };
            assert_eq!(p.len as usize, BLOCK);
            match dir {
                None => assert!(b.heap_bytes() <= BLOCK * 5, "{} bytes", b.heap_bytes()),
                Some(_) => assert_eq!(b.heap_bytes(), 0),
            }
        }
        if let Some(f) = &idx.file {
            let words: u64 = idx.blocks[..5]
                .iter()
                .map(|b| match b {
                    Block::Sealed(p) => (p.ts_words() + p.column_words(p.seq_width)) as u64 * 8,
                    Block::Open(_) => 0,
                })
                .sum();
            assert_eq!(f.len(), words);
        }
        let mut reference: Vec<Key> = (0..n as u64).map(key).collect();
        assert_matches(&idx, &reference);
        // and late keys landing in sealed blocks unpack one at a time, split full ones and
        // stay in order.
        for (i, s) in [0u64, 700, 701, 2000, 5000, 9000, 3, 4100]
            .into_iter()
            .enumerate()
        {
            let k = (key(s).0 + 1, 5_000_000 + i as u64);
            idx.insert(k).expect("insert late");
            reference.push(k);
            reference.sort();
            assert_matches(&idx, &reference);
        }
        // A window in the middle, across block edges, matches the sorted vector.
        let (lo, hi) = (BLOCK - 5, 3 * BLOCK + 9);
        assert_eq!(collect(idx.between(lo, hi)), reference[lo..hi].to_vec());
        assert_eq!(
            collect(idx.rev_from(lo + 3)),
            reference[..lo + 3]
                .iter()
                .rev()
                .copied()
                .collect::<Vec<_>>()
        );
        let page = idx.descending(lo, hi, 2, 3000).expect("page");
        let want: Vec<Key> = reference[lo..hi]
            .iter()
            .rev()
            .skip(2)
            .take(3000)
            .copied()
            .collect();
        assert_eq!(page, want);
    }
}

#[test]
fn a_stream_of_late_keys_keeps_one_block_unpacked() {
    for (mut idx, _dir) in indexes() {
        // Given a full index and then late keys walking backwards over every block,
        let mut reference = Vec::new();
        for s in 0..(BLOCK * 4) as u64 {
            idx.insert((s as i64 * 10, s)).expect("insert");
            reference.push((s as i64 * 10, s));
        }
        for (i, t) in (0..(BLOCK * 4) as i64).rev().step_by(97).enumerate() {
            let k = (t * 10 + 5, 1_000_000 + i as u64);
            idx.insert(k).expect("insert late");
            reference.push(k);
        }
        reference.sort();
        // then the answers match and no more than two blocks are ever unpacked.
        assert_matches(&idx, &reference);
    }
}

#[test]
fn descending_past_the_end_is_empty() {
    for (mut idx, _dir) in indexes() {
        for s in 0..10 {
            idx.insert((s as i64, s)).expect("insert");
        }
        assert!(idx.descending(0, 10, 10, 5).expect("page").is_empty());
        assert_eq!(
            idx.descending(0, 10, 8, 5).expect("page"),
            vec![(1, 1), (0, 0)]
        );
    }
    assert!(SortedIndex::new()
        .descending(0, 0, 0, 5)
        .expect("page")
        .is_empty());
}
