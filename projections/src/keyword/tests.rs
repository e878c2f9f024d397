//! Scores computed by hand from BM25's formula (k1 = 1.2, b = 0.75, Lucene's idf) on corpora
//! small enough to check on paper.

use uuid::Uuid;

use super::{fuse, Bm25, Fusion, KeywordIndex, SERVICE_BM25};

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn all(_: &Uuid) -> bool {
    true
}

fn assert_hits(got: &[(Uuid, f32)], want: &[(Uuid, f32)]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "{got:?} vs {want:?}");
        assert!((g.1 - w.1).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}

/// d1 "apple banana" (2 tokens), d2 "apple apple cherry" (3), d3 "durian" (1): N = 3,
/// avgdl = 2.
fn tiny() -> KeywordIndex {
    let mut ix = KeywordIndex::with_stemming(false);
    ix.upsert(id(1), "Apple, banana.");
    ix.upsert(id(2), "apple APPLE cherry");
    ix.upsert(id(3), "durian");
    ix
}

#[test]
fn scores_are_bm25_computed_by_hand() {
    let ix = tiny();
    assert_eq!(ix.len(), 3);
    // apple: df 2, idf = ln(1 + 1.5/2.5) = 0.470004.
    // d2: tf 2, dl 3: idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 1.5)) = 0.566580.
    // d1: tf 1, dl 2 = avgdl: idf * 2.2 / 2.2 = idf.
    assert_hits(
        &ix.search("apple", 10, all),
        &[(id(2), 0.566_579_7), (id(1), 0.470_003_6)],
    );
    // durian: df 1, idf = ln(1 + 2.5/1.5); dl 1: idf * 2.2 / (1 + 1.2 * 0.625) = 1.233042.
    // A term repeated in the query counts once; a stop word ("the") and an unknown one add
    // nothing.
    assert_hits(
        &ix.search("the durian apple durian kiwi", 10, all),
        &[
            (id(3), 1.233_042_5),
            (id(2), 0.566_579_7),
            (id(1), 0.470_003_6),
        ],
    );
    assert_hits(&ix.search("apple", 1, all), &[(id(2), 0.566_579_7)]);
    assert!(ix.search("kiwi the", 10, all).is_empty());
    assert!(ix.search("apple", 0, all).is_empty());
}

#[test]
fn without_length_normalisation_only_the_term_frequency_counts() {
    // The service's BM25 (k1 0.6, b 0) on tiny(): apple's idf ln(1.6) = 0.470004;
    // d2 tf 2: idf * 2 * 1.6 / (2 + 0.6) = 0.578466 whatever its length; d1 tf 1: idf.
    let mut ix = KeywordIndex::with_stemming(false).with_bm25(SERVICE_BM25);
    ix.upsert(id(1), "Apple, banana.");
    ix.upsert(id(2), "apple APPLE cherry");
    ix.upsert(id(3), "durian");
    assert_eq!(SERVICE_BM25, Bm25 { k1: 0.6, b: 0.0 });
    assert_hits(
        &ix.search("apple", 10, all),
        &[(id(2), 0.578_466), (id(1), 0.470_003_6)],
    );
    // A longer document with the term once scores as a shorter one does.
    ix.upsert(id(4), "apple with many more words than the others hold");
    let hits = ix.search("apple", 10, all);
    let score = |n| hits.iter().find(|h| h.0 == id(n)).map(|h| h.1);
    assert_eq!(score(1), score(4));
    // The service's index scores so too.
    let mut d = KeywordIndex::default();
    d.upsert(id(1), "apple");
    d.upsert(id(2), "apple apple pear pear pear");
    d.upsert(id(3), "durian");
    let idf = (1.0f32 + 1.5 / 2.5).ln();
    assert_hits(
        &d.search("apple", 10, all),
        &[(id(2), idf * 2.0 * 1.6 / 2.6), (id(1), idf)],
    );
}

#[test]
fn upsert_replaces_the_earlier_text_and_its_statistics() {
    let mut ix = tiny();
    ix.upsert(id(2), "durian");
    assert_eq!(ix.len(), 3);
    assert!(ix.search("cherry", 10, all).is_empty());
    // apple now: df 1, N 3, avgdl 4/3; d1 dl 2: ln(1 + 2.5/1.5) * 2.2 / (1 + 1.2 * 1.375).
    assert_hits(&ix.search("apple", 10, all), &[(id(1), 0.814_273_3)]);
}

#[test]
fn remove_takes_the_document_out_of_results_and_statistics() {
    let mut ix = tiny();
    ix.upsert(id(2), "durian");
    ix.remove(&id(1));
    ix.remove(&id(99));
    assert_eq!(ix.len(), 2);
    assert!(ix.search("apple banana", 10, all).is_empty());
    // durian: N 2, df 2, both dl 1 = avgdl: ln(1.2); equal scores in id order.
    assert_hits(
        &ix.search("durian", 10, all),
        &[(id(2), 0.182_321_56), (id(3), 0.182_321_56)],
    );
    // The freed slot is reused by a new id, which then answers alone for its text.
    ix.upsert(id(4), "banana");
    assert_eq!(ix.docs.len(), 3);
    assert_eq!(ix.search("banana", 10, all).len(), 1);
    assert_eq!(ix.search("banana", 10, all)[0].0, id(4));
}

#[test]
fn a_filtered_out_document_is_not_returned_but_still_counts() {
    let ix = tiny();
    let not_d2 = |u: &Uuid| *u != id(2);
    // d1's score is the one it has unfiltered: d2 still counts in N, df and avgdl.
    assert_hits(&ix.search("apple", 10, not_d2), &[(id(1), 0.470_003_6)]);
    // The filter applies before the cut to k: the best allowed one comes back.
    assert_hits(&ix.search("apple", 1, not_d2), &[(id(1), 0.470_003_6)]);
    assert!(ix.search("apple", 10, |_| false).is_empty());
}

#[test]
fn one_index_per_tenant_keeps_statistics_apart() {
    let a = tiny();
    let mut b = KeywordIndex::with_stemming(false);
    for n in 0..50 {
        b.upsert(id(100 + n), "apple apple apple everywhere");
    }
    // Tenant b's fifty apples change nothing in tenant a's scores.
    assert_hits(
        &a.search("apple", 10, all),
        &[(id(2), 0.566_579_7), (id(1), 0.470_003_6)],
    );
    assert_eq!(b.search("apple", 100, all).len(), 50);
}

#[test]
fn an_exact_code_outranks_its_pieces_and_its_near_duplicates_do_not_match() {
    let mut ix = KeywordIndex::default();
    ix.upsert(id(1), "Checkout fails with E1234 on the SKU-4471 page");
    ix.upsert(id(2), "Checkout fails with E1243 on the SKU 4471 page");
    ix.upsert(
        id(3),
        "Gateway returned ERR_CONN_RESET after the v2.3.1 upgrade",
    );
    let e1234 = ix.search("e1234", 10, all);
    assert_eq!(e1234.len(), 1);
    assert_eq!(e1234[0].0, id(1));
    let sku = ix.search("sku-4471", 10, all);
    assert_eq!(sku.iter().map(|h| h.0).collect::<Vec<_>>(), [id(1), id(2)]);
    assert!(sku[0].1 > sku[1].1);
    assert_eq!(ix.search("err_conn_reset", 10, all)[0].0, id(3));
    assert_eq!(ix.search("reset", 10, all)[0].0, id(3));
    assert_eq!(ix.search("V2.3.1", 10, all)[0].0, id(3));
    // Plural stemming: "upgrades" finds "upgrade".
    assert_eq!(ix.search("upgrades", 10, all)[0].0, id(3));
}

#[test]
fn remove_many_leaves_what_removing_one_at_a_time_leaves() {
    let texts = |n: u128| {
        format!(
            "alice said fact {n} about the weather and her dog d{}",
            n % 7
        )
    };
    let (mut one, mut many, mut rest) = (
        KeywordIndex::with_stemming(true),
        KeywordIndex::with_stemming(true),
        KeywordIndex::with_stemming(true),
    );
    for n in 0..300u128 {
        one.upsert(id(n), &texts(n));
        many.upsert(id(n), &texts(n));
        if n % 3 == 0 {
            rest.upsert(id(n), &texts(n));
        }
    }
    let gone: Vec<Uuid> = (0..300u128)
        .filter(|n| n % 3 != 0)
        .map(id)
        .chain([id(999)])
        .collect();
    for g in &gone {
        one.remove(g);
    }
    many.remove_many(&gone);
    assert_eq!((many.len(), one.len(), rest.len()), (100, 100, 100));
    assert_eq!(many.total_len, rest.total_len);
    for q in ["alice weather", "fact 3", "d3 dog", "fact 4", "d1"] {
        let want = rest.search(q, 20, all);
        assert_hits(&many.search(q, 20, all), &want);
        assert_hits(&one.search(q, 20, all), &want);
    }
    // The freed slots are reused, and a new document answers alone for its text.
    let slots = many.docs.len();
    many.upsert(id(1000), "zebra");
    assert_eq!(many.docs.len(), slots);
    assert_eq!(
        many.search("zebra", 10, all),
        vec![(id(1000), many.search("zebra", 10, all)[0].1)]
    );
}

#[test]
fn terms_no_document_uses_leave_the_dictionary() {
    let mut ix = KeywordIndex::with_stemming(false);
    ix.upsert(id(0), "kept");
    for n in 1..=3000u128 {
        ix.upsert(id(n), &format!("order ord{n}"));
    }
    assert_eq!(ix.terms.len(), 3002);
    for n in 1..=3000u128 {
        ix.remove(&id(n));
    }
    // Compaction runs once half the dictionary is dead: at most a few hundred remain.
    assert!(ix.terms.len() < 1100, "{}", ix.terms.len());
    assert_eq!(ix.search("kept", 10, all).len(), 1);
    // Reused term ids answer for their new terms only.
    ix.upsert(id(5000), "fresh words");
    assert_eq!(ix.search("fresh", 10, all)[0].0, id(5000));
    assert!(ix.search("order ord7", 10, all).is_empty());
    assert!(ix.heap_bytes() > 0);
}

#[test]
fn fusion_sums_weighted_reciprocal_ranks() {
    let (a, b, c) = (id(1), id(2), id(3));
    // The paper's fusion: k 60, lists weighted alike.
    let f = Fusion {
        k: 60.0,
        semantic_weight: 1.0,
        keyword_weight: 1.0,
        keyword_min_share: 0.0,
    };
    let got = fuse(&[a, b], &[b, c], &f);
    assert_hits(
        &got,
        &[
            (b, 1.0 / 62.0 + 1.0 / 61.0),
            (a, 1.0 / 61.0),
            (c, 1.0 / 62.0),
        ],
    );
    // Equal scores: the semantic list's order first, whatever the ids.
    let got = fuse(&[c], &[a], &f);
    assert_eq!(got.iter().map(|h| h.0).collect::<Vec<_>>(), [c, a]);
    // Weights and the constant.
    let w = Fusion {
        k: 10.0,
        semantic_weight: 1.0,
        keyword_weight: 3.0,
        keyword_min_share: 0.0,
    };
    assert_hits(
        &fuse(&[a, c], &[c], &w),
        &[(c, 1.0 / 12.0 + 3.0 / 11.0), (a, 1.0 / 11.0)],
    );
    // A repeat within a list counts once, at its first rank.
    assert_hits(&fuse(&[a, a], &[], &f), &[(a, 1.0 / 61.0)]);
}

#[test]
fn the_keyword_ranking_keeps_the_hits_that_cover_enough_of_the_query() {
    let ix = tiny();
    // apple: ln(1.6) = 0.470004; kiwi, in no document: ln(1 + 3.5/0.5) = ln 8 = 2.079442.
    assert!((ix.query_weight("the apple apple") - 0.470_003_6).abs() < 1e-6);
    assert!((ix.query_weight("apple kiwi") - 2.549_445_6).abs() < 1e-6);
    let hits = ix.search("apple kiwi", 10, all);
    let share = |s: f32| Fusion {
        keyword_min_share: s,
        ..Fusion::default()
    };
    let w = ix.query_weight("apple kiwi");
    // d2 0.566580 / 2.549446 = 0.222, d1 0.470004 / 2.549446 = 0.184.
    assert_eq!(share(0.0).keyword_ranking(&hits, w), [id(2), id(1)]);
    assert_eq!(share(0.2).keyword_ranking(&hits, w), [id(2)]);
    assert!(share(0.23).keyword_ranking(&hits, w).is_empty());
}
