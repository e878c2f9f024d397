//! The stored tree against a naive recomputation of RFC 9162's definitions (MTH, PATH, PROOF)
//! for every size up to a few thousand leaves.

use super::*;

fn leaf_of(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

/// RFC 9162's definitions over one list of leaf hashes, MTH memoised by range: the recursion
/// stays the RFC's, without recomputing the same subtree for every size.
struct Naive<'a> {
    leaves: &'a [Hash],
    memo: std::collections::HashMap<(usize, usize), Hash>,
}

impl Naive<'_> {
    /// RFC 9162 2.1.1 MTH(D[lo:hi]).
    fn mth(&mut self, lo: usize, hi: usize) -> Hash {
        if let Some(h) = self.memo.get(&(lo, hi)) {
            return *h;
        }
        let h = match hi - lo {
            0 => tlog_tiles::EMPTY_HASH,
            1 => self.leaves[lo],
            n => {
                let k = split(n);
                let l = self.mth(lo, lo + k);
                let r = self.mth(lo + k, hi);
                tlog_tiles::node_hash(l, r)
            }
        };
        self.memo.insert((lo, hi), h);
        h
    }

    /// RFC 9162 2.1.3.1 PATH(m, D[lo:hi]).
    fn path(&mut self, m: usize, lo: usize, hi: usize) -> Vec<Hash> {
        let n = hi - lo;
        if n <= 1 {
            return Vec::new();
        }
        let k = split(n);
        if m < k {
            let mut p = self.path(m, lo, lo + k);
            p.push(self.mth(lo + k, hi));
            p
        } else {
            let mut p = self.path(m - k, lo + k, hi);
            p.push(self.mth(lo, lo + k));
            p
        }
    }

    /// RFC 9162 2.1.4.1 SUBPROOF(m, D[lo:hi], b).
    fn subproof(&mut self, m: usize, lo: usize, hi: usize, b: bool) -> Vec<Hash> {
        let n = hi - lo;
        if m == n {
            return if b {
                Vec::new()
            } else {
                vec![self.mth(lo, hi)]
            };
        }
        let k = split(n);
        if m <= k {
            let mut p = self.subproof(m, lo, lo + k, b);
            p.push(self.mth(lo + k, hi));
            p
        } else {
            let mut p = self.subproof(m - k, lo + k, hi, false);
            p.push(self.mth(lo, lo + k));
            p
        }
    }
}

/// The largest power of two smaller than `n` (n > 1).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn open_tree() -> (tempfile::TempDir, sled::Db, MerkleTree) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = sled::Config::new()
        .path(dir.path())
        .temporary(true)
        .open()
        .expect("sled");
    let tree = MerkleTree::open(&db, dir.path()).expect("open");
    (dir, db, tree)
}

/// Prefix sizes worth a look in a tree of `t`: the edges and the middle for every `t`; every
/// power of two and its neighbours for one size in 16 and around powers of two.
fn interesting(t: u64) -> Vec<u64> {
    let mut v = vec![0, 1, t / 2, t.saturating_sub(1), t];
    let near_power = [t.saturating_sub(1), t, t + 1]
        .iter()
        .any(|x| x.is_power_of_two());
    if t.is_multiple_of(16) || near_power {
        let mut p = 1;
        while p <= t {
            v.extend([p - 1, p, p + 1]);
            p *= 2;
        }
    }
    v.retain(|&m| m <= t);
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn every_size_matches_the_rfc_definitions() {
    const N: u64 = 2100;
    let (_dir, _db, tree) = open_tree();
    let hashes: Vec<[u8; 32]> = (1..=N).map(leaf_of).collect();
    let leaves: Vec<Hash> = (1..=N).map(|s| leaf_hash(s, &leaf_of(s))).collect();
    // Appended in groups of varying sizes, as the applier does.
    let mut at = 0usize;
    let mut group = 1usize;
    while at < hashes.len() {
        let end = (at + group).min(hashes.len());
        tree.append(at as u64 + 1, &hashes[at..end])
            .expect("append");
        at = end;
        group = group % 37 + 1;
    }
    assert_eq!(tree.size(), N);
    assert_eq!(tree.root(0).expect("root 0"), tlog_tiles::EMPTY_HASH);
    let mut naive = Naive {
        leaves: &leaves,
        memo: std::collections::HashMap::new(),
    };
    for t in 0..=N {
        let ts = t as usize;
        let root = tree.root(t).expect("root");
        assert_eq!(root, naive.mth(0, ts), "root of size {t}");
        for m in interesting(t) {
            if m < t {
                let p = tree.inclusion(m, t).expect("inclusion");
                assert_eq!(p, naive.path(m as usize, 0, ts), "PATH({m}, {t})");
                tlog_tiles::check_record(&p, t, root, m, leaves[m as usize])
                    .expect("inclusion verifies");
            }
            let c = tree.consistency(m, t).expect("consistency");
            if m > 0 {
                assert_eq!(
                    c,
                    naive.subproof(m as usize, 0, ts, true),
                    "PROOF({m}, {t})"
                );
                let old = naive.mth(0, m as usize);
                tlog_tiles::check_tree(&c, t, root, m, old).expect("consistency verifies");
            } else {
                assert!(c.is_empty(), "from 0 the proof is empty");
            }
        }
    }
    // Beyond the tree: errors, not panics.
    assert!(matches!(
        tree.root(N + 1),
        Err(TlogError::OutOfRange { size: N, .. })
    ));
    assert!(matches!(
        tree.inclusion(N, N),
        Err(TlogError::OutOfRange { .. })
    ));
    assert!(matches!(
        tree.consistency(5, 4),
        Err(TlogError::OutOfRange { .. })
    ));
}

#[test]
fn a_wrong_leaf_or_root_does_not_verify() {
    let (_dir, _db, tree) = open_tree();
    let hashes: Vec<[u8; 32]> = (1..=100).map(leaf_of).collect();
    tree.append(1, &hashes).expect("append");
    let root = tree.root(100).expect("root");
    let p = tree.inclusion(41, 100).expect("proof");
    let good = leaf_hash(42, &leaf_of(42));
    assert!(tlog_tiles::check_record(&p, 100, root, 41, good).is_ok());
    // The same record hash under another seq is another leaf.
    let moved = leaf_hash(43, &leaf_of(42));
    assert!(tlog_tiles::check_record(&p, 100, root, 41, moved).is_err());
    let mut bad = p.clone();
    bad[0].0[0] ^= 1;
    assert!(tlog_tiles::check_record(&bad, 100, root, 41, good).is_err());
    let other = tree.root(99).expect("root 99");
    assert!(tlog_tiles::check_record(&p, 100, other, 41, good).is_err());
}

#[test]
fn appends_overlap_gaps_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hashes: Vec<[u8; 32]> = (1..=700).map(leaf_of).collect();
    let root;
    {
        let db = sled::open(dir.path()).expect("sled");
        let tree = MerkleTree::open(&db, dir.path()).expect("open");
        tree.append(1, &hashes[..580]).expect("append");
        // Overlapping what is there is skipped; a gap is refused and changes nothing.
        tree.append(550, &hashes[549..600]).expect("overlap");
        assert_eq!(tree.size(), 600);
        assert!(matches!(
            tree.append(602, &hashes[601..620]),
            Err(TlogError::Gap {
                size: 600,
                first_seq: 602
            })
        ));
        assert!(matches!(
            tree.append(0, &hashes[..1]),
            Err(TlogError::Gap { .. })
        ));
        assert_eq!(tree.size(), 600);
        root = tree.root(600).expect("root");
        db.flush().expect("flush");
    }
    // Reopened, the tree holds what its complete level-0 tiles cover (512 leaves: dropping the
    // tree synced them); the rest comes again from the log, as `catch_up` feeds it.
    let db = sled::open(dir.path()).expect("sled");
    let tree = MerkleTree::open(&db, dir.path()).expect("reopen");
    assert_eq!(tree.size(), 512);
    tree.append(513, &hashes[512..600]).expect("the tail again");
    assert_eq!(tree.root(600).expect("root"), root);
    tree.append(601, &hashes[600..])
        .expect("append after reopen");
    let fresh = {
        let (_d, _db, t) = open_tree();
        t.append(1, &hashes).expect("append all");
        t.root(700).expect("root")
    };
    assert_eq!(tree.root(700).expect("root"), fresh);
}

/// The tile files are written without a sync: at open, whatever lies past the last sync's mark
/// (tiles a crash may have left half written or full of zeros) is cut and comes again from
/// the log; files shorter than the mark (lost) make the tree start over from the log.
#[test]
fn unsynced_or_lost_tiles_are_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hashes: Vec<[u8; 32]> = (1..=1300).map(leaf_of).collect();
    let fresh = {
        let (_d, _db, t) = open_tree();
        t.append(1, &hashes).expect("append all");
        t.root(1300).expect("root")
    };
    let db = sled::open(dir.path()).expect("sled");
    let tree = MerkleTree::open(&db, dir.path()).expect("open");
    tree.append(1, &hashes[..600]).expect("append");
    tree.sync().expect("sync");
    tree.append(601, &hashes[600..1100]).expect("append");
    // A crash: no sync of the tiles past 512 leaves, and garbage where they were.
    std::mem::forget(tree);
    let level0 = dir.path().join(DIR).join("level-0");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&level0)
        .expect("level 0");
    f.write_all_at(&[0xAB; 3 * 8192], 2 * 8192)
        .expect("garbage");
    drop(f);
    let tree = MerkleTree::open(&db, dir.path()).expect("reopen");
    assert_eq!(tree.size(), 512);
    assert_eq!(
        std::fs::metadata(&level0).expect("level 0").len(),
        2 * 8192,
        "the unsynced tail is cut"
    );
    tree.append(513, &hashes[512..]).expect("the tail again");
    assert_eq!(tree.root(1300).expect("root"), fresh);
    drop(tree);

    // The files lost (or older than the mark): the tree starts over.
    std::fs::remove_dir_all(dir.path().join(DIR)).expect("remove");
    let tree = MerkleTree::open(&db, dir.path()).expect("reopen");
    assert_eq!(tree.size(), 0);
    tree.append(1, &hashes).expect("from the start");
    assert_eq!(tree.root(1300).expect("root"), fresh);
}

/// Past 65,536 leaves the tree has level-2 tiles: roots and proofs there, and a reopen that
/// rebuilds the partial tiles of levels 1 and 2 from the stored ones.
#[test]
fn large_trees_across_tile_levels() {
    const N: u64 = 70_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let hashes: Vec<[u8; 32]> = (1..=N).map(leaf_of).collect();
    let leaves: Vec<Hash> = (1..=N).map(|s| leaf_hash(s, &leaf_of(s))).collect();
    let mut naive = Naive {
        leaves: &leaves,
        memo: std::collections::HashMap::new(),
    };
    let db = sled::open(dir.path()).expect("sled");
    let tree = MerkleTree::open(&db, dir.path()).expect("open");
    tree.append(1, &hashes[..69_999]).expect("append");
    for t in [65_535u64, 65_536, 65_537, 69_999] {
        let root = tree.root(t).expect("root");
        assert_eq!(root, naive.mth(0, t as usize), "root of {t}");
        for m in [0u64, 1, 255, 256, 257, 65_535, t / 3, t - 1] {
            if m >= t {
                continue;
            }
            let p = tree.inclusion(m, t).expect("inclusion");
            assert_eq!(p, naive.path(m as usize, 0, t as usize), "PATH({m}, {t})");
            if m > 0 {
                let c = tree.consistency(m, t).expect("consistency");
                assert_eq!(
                    c,
                    naive.subproof(m as usize, 0, t as usize, true),
                    "PROOF({m}, {t})"
                );
            }
        }
    }
    db.flush().expect("flush");
    drop(tree);
    let tree = MerkleTree::open(&db, dir.path()).expect("reopen");
    assert_eq!(tree.size(), 69_888);
    tree.append(69_889, &hashes[69_888..])
        .expect("the tail again");
    assert_eq!(tree.root(N).expect("root"), naive.mth(0, N as usize));
    // The level-1 tile 0 is complete (65,536 leaves), level 2 holds one partial hash.
    let t = Tile::new(TILE_HEIGHT, 1, 0, 256, false);
    let data = tree.tile(&t, N).expect("level 1");
    assert_eq!(&data[..32], &naive.mth(0, 256).0);
    let t = Tile::new(TILE_HEIGHT, 2, 0, 1, false);
    assert_eq!(
        tree.tile(&t, N).expect("level 2"),
        naive.mth(0, 65_536).0.to_vec()
    );
}

#[test]
fn tiles_hold_the_levels_hashes() {
    let (_dir, _db, tree) = open_tree();
    let n = 256 * 3 + 17;
    let hashes: Vec<[u8; 32]> = (1..=n).map(leaf_of).collect();
    tree.append(1, &hashes).expect("append");
    let leaves: Vec<Hash> = (1..=n).map(|s| leaf_hash(s, &leaf_of(s))).collect();
    // A full level-0 tile: 256 leaf hashes.
    let t = Tile::new(TILE_HEIGHT, 0, 1, 256, false);
    let data = tree.tile(&t, n).expect("tile");
    assert_eq!(data.len(), 256 * 32);
    assert_eq!(&data[..32], &leaves[256].0);
    // The partial tile at the right edge.
    let t = Tile::new(TILE_HEIGHT, 0, 3, 17, false);
    assert_eq!(tree.tile(&t, n).expect("partial").len(), 17 * 32);
    // A level-1 tile holds the roots of the full level-0 tiles.
    let t = Tile::new(TILE_HEIGHT, 1, 0, 3, false);
    let data = tree.tile(&t, n).expect("level 1");
    let mut naive = Naive {
        leaves: &leaves,
        memo: std::collections::HashMap::new(),
    };
    assert_eq!(&data[32..64], &naive.mth(256, 512).0);
    // Wider than the tree completes: refused.
    let t = Tile::new(TILE_HEIGHT, 0, 3, 18, false);
    assert!(tree.tile(&t, n).is_err());
    let t = Tile::new(TILE_HEIGHT, 1, 0, 4, false);
    assert!(tree.tile(&t, n).is_err());
}

/// The tree's leaf and node hashes are tlog_tiles' (RFC 6962's), for seqs and hashes of every
/// byte.
#[test]
fn leaf_and_node_hashes_are_rfc_6962s() {
    for i in 0..300u64 {
        let seq = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i << 3);
        let a: [u8; 32] = std::array::from_fn(|j| (i as usize * 7 + j * 13) as u8);
        let b: [u8; 32] = std::array::from_fn(|j| (i as usize * 11 + j * 5 + 1) as u8);
        assert_eq!(
            leaf_hash(seq, &a).0,
            tlog_tiles::record_hash(&leaf_data(seq, &a)).0,
            "leaf {i}"
        );
        let (l, r) = (Hash(a), Hash(b));
        assert_eq!(
            node_hash(&l, &r).0,
            tlog_tiles::node_hash(l, r).0,
            "node {i}"
        );
    }
}
