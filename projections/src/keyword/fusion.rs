//! Reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009): each ranked list gives a
//! document `weight / (k + rank)`, rank counted from 1, and the sums rank the union. It needs
//! no calibration between cosine similarities and BM25 scores, which live on unrelated scales.

use uuid::Uuid;

use crate::FastMap;

/// The fusion's constant and the weight of each list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fusion {
    /// Added to every rank: the larger, the flatter the curve (a list's first place counts
    /// little more than its tenth).
    pub k: f32,
    pub semantic_weight: f32,
    pub keyword_weight: f32,
    /// A keyword hit enters the fusion only if its BM25 score is at least this share of the
    /// query's [`query_weight`](super::KeywordIndex::query_weight). Why: a query that shares
    /// only an incidental word with some memories ("day", "make") still gets a full BM25
    /// ranking, and plain fusion then lifts those memories over the semantic answer; measured
    /// on the project's own retrieval set, that costs paraphrases 20 points of recall@1
    /// (docs/SEARCH.md). 0 keeps every hit (plain RRF); the default is 0.3.
    pub keyword_min_share: f32,
}

impl Default for Fusion {
    /// `k` = 2, the keyword list weighted 1.5 to the semantic list's 1, keyword hits gated at
    /// 0.3 of the query's weight: chosen on LoCoMo's development half from the grid of k 1-100,
    /// keyword weight 0.5-3 and gate 0-0.7 (`locomo_ablation`), as the best recall@5 + @10
    /// among the fusions that keep the project's own set's recall@5 (`search_eval`): 3.5 points
    /// of LoCoMo's recall@5 below the grid's best, which costs that set's paraphrases 10 points
    /// of recall@5. docs/SEARCH.md has the figures. A small `k` makes each list's first places
    /// count: a conversation's question names the turn's words (a name, a place) or its
    /// meaning, rarely both.
    fn default() -> Self {
        Self {
            k: 2.0,
            semantic_weight: 1.0,
            keyword_weight: 1.5,
            keyword_min_share: 0.3,
        }
    }
}

impl Fusion {
    /// The keyword ranking to fuse: the ids of `hits` (best first, as
    /// [`search`](super::KeywordIndex::search) returns them) whose score reaches
    /// `keyword_min_share * query_weight`.
    pub fn keyword_ranking(&self, hits: &[(Uuid, f32)], query_weight: f32) -> Vec<Uuid> {
        let floor = self.keyword_min_share * query_weight;
        hits.iter().filter(|h| h.1 >= floor).map(|h| h.0).collect()
    }
}

/// Fuses two rankings (best first, each id at most once per list; a repeat is ignored) into one,
/// best first, with each id's fused score. Equal scores are ordered by the semantic rank (the
/// default mode's order), then the keyword rank, then the id, so the result never depends on
/// hash order.
pub fn fuse(semantic: &[Uuid], keyword: &[Uuid], f: &Fusion) -> Vec<(Uuid, f32)> {
    // id -> (score, semantic rank, keyword rank); usize::MAX for "not in that list".
    let mut by_id: FastMap<Uuid, (f32, usize, usize)> = FastMap::default();
    for (i, id) in semantic.iter().enumerate() {
        let e = by_id.entry(*id).or_insert((0.0, usize::MAX, usize::MAX));
        if e.1 == usize::MAX {
            e.1 = i;
            e.0 += f.semantic_weight / (f.k + (i + 1) as f32);
        }
    }
    for (i, id) in keyword.iter().enumerate() {
        let e = by_id.entry(*id).or_insert((0.0, usize::MAX, usize::MAX));
        if e.2 == usize::MAX {
            e.2 = i;
            e.0 += f.keyword_weight / (f.k + (i + 1) as f32);
        }
    }
    let mut out: Vec<(Uuid, (f32, usize, usize))> = by_id.into_iter().collect();
    out.sort_by(|a, b| {
        b.1 .0
            .total_cmp(&a.1 .0)
            .then(a.1 .1.cmp(&b.1 .1))
            .then(a.1 .2.cmp(&b.1 .2))
            .then_with(|| a.0.cmp(&b.0))
    });
    out.into_iter().map(|(id, (s, _, _))| (id, s)).collect()
}
