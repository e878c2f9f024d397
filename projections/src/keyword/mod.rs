//! Keyword search over memory contents: one tenant's in-memory BM25 index, and reciprocal rank
//! fusion of its ranking with the semantic one (hybrid search).
//!
//! A [`KeywordIndex`] holds one tenant's memories only, so its statistics (the number of
//! documents, their mean length, each term's document frequency) are that tenant's: another
//! tenant's memories can change neither its scores nor its results. It is a projection like
//! the vector tables: nothing in it is persisted, `replay` and open rebuild it by upserting
//! every live memory's content.
//!
//! Layout (compact on purpose, it holds every live memory of every tenant):
//! - each memory gets a *slot* (`u32`), reused after a remove; postings name slots, not
//!   `Uuid`s (4 bytes against 16);
//! - a term is interned once (`term -> term id`), its postings are `(slot, tf)` pairs in no
//!   particular order (a query sums every posting of its terms into one accumulator, so order
//!   buys nothing, and unordered lists make a remove a swap);
//! - each slot keeps its length in tokens and the ids of its distinct terms, so a remove or a
//!   changed text finds its postings without the old text.
//!
//! - `tokenize`: the tokenizer shared by documents and queries;
//! - `fusion`: [`Fusion`] and [`fuse`];
//! - here: [`KeywordIndex`].

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use uuid::Uuid;

use crate::{FastMap, FastSet};

mod fusion;
#[cfg(test)]
mod tests;
pub mod tokenize;

pub use fusion::{fuse, Fusion};

/// BM25's term-frequency saturation.
pub const K1: f32 = 1.2;
/// BM25's length normalisation.
pub const B: f32 = 0.75;

/// BM25's two parameters; the default is [`K1`] and [`B`], Lucene's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25 {
    pub k1: f32,
    pub b: f32,
}

impl Default for Bm25 {
    fn default() -> Self {
        Bm25 { k1: K1, b: B }
    }
}

/// The service's BM25: strong saturation and no length normalisation, the best of the grid of
/// k1 0.6-2 and b 0-1 on LoCoMo's development half (`locomo_ablation`, docs/SEARCH.md). Why no
/// length normalisation: a memory is a sentence or a few, and the longer ones are not padded
/// with the query's words but hold more of what was said (a turn with its photo's caption);
/// normalising by length pushed exactly those down. k1 0.6 lets a repeated word count little.
pub const SERVICE_BM25: Bm25 = Bm25 { k1: 0.6, b: 0.0 };

/// One term's occurrence in one document.
#[derive(Clone, Copy, Debug)]
struct Posting {
    slot: u32,
    tf: u32,
}

/// A slot's document.
#[derive(Debug, Default)]
struct Doc {
    /// `None` once removed (the slot is then on the free list).
    id: Option<Uuid>,
    /// Tokens in the text (stop words excluded, an identifier's whole and parts all counted).
    len: u32,
    /// The distinct terms of the text, to find its postings again on remove.
    terms: Box<[u32]>,
}

/// One tenant's BM25 index over memory contents (`k1` = [`K1`], `b` = [`B`] unless
/// [`with_bm25`](Self::with_bm25) says otherwise).
///
/// Statistics count every document upserted and not removed: a memory the caller's `allow`
/// hides from a search (another type, expired, superseded) still counts in N, the mean length
/// and the document frequencies, so a filter changes which results come back but not their
/// scores. A deleted memory must be [`removed`](Self::remove) to leave the statistics.
#[derive(Debug)]
pub struct KeywordIndex {
    analyzer: tokenize::Analyzer,
    bm25: Bm25,
    docs: Vec<Doc>,
    free: Vec<u32>,
    slots: FastMap<Uuid, u32>,
    terms: FastMap<Box<str>, u32>,
    postings: Vec<Vec<Posting>>,
    /// Term ids no longer in the dictionary, for a new term to reuse.
    free_terms: Vec<u32>,
    /// Terms whose postings emptied since the last [`Self::compact_terms`] (an upper bound: a
    /// term may have been used again since).
    dead_terms: usize,
    /// Sum of the live documents' lengths.
    total_len: u64,
}

impl Default for KeywordIndex {
    /// The index the service uses: [`tokenize::Analyzer::default`] (Snowball stemming, the
    /// short stop list) scoring with [`SERVICE_BM25`]; the LoCoMo eval measured both
    /// (docs/SEARCH.md).
    fn default() -> Self {
        Self::with_analyzer(tokenize::Analyzer::default()).with_bm25(SERVICE_BM25)
    }
}

/// A search candidate in the bounded heap: the *worst* kept result is at the top, so a better
/// one replaces it. Equal scores order by id, so results never depend on hash order.
#[derive(PartialEq)]
struct Candidate(f32, Uuid);

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // "Greater" = worse: lower score, then higher id.
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl KeywordIndex {
    /// An empty index under [`tokenize::Analyzer::plural`]: `stemming` applies the plural
    /// stemmer ([`tokenize::stem`]) to documents and queries alike, with the short stop list.
    pub fn with_stemming(stemming: bool) -> Self {
        Self::with_analyzer(tokenize::Analyzer::plural(stemming))
    }

    /// An empty index whose documents and queries `analyzer` tokenizes, scoring with Lucene's
    /// BM25 ([`Bm25::default`]).
    pub fn with_analyzer(analyzer: tokenize::Analyzer) -> Self {
        Self {
            analyzer,
            bm25: Bm25::default(),
            docs: Vec::new(),
            free: Vec::new(),
            slots: FastMap::default(),
            terms: FastMap::default(),
            postings: Vec::new(),
            free_terms: Vec::new(),
            dead_terms: 0,
            total_len: 0,
        }
    }

    /// The same index scoring with `bm25`'s parameters (the ablation measures others).
    pub fn with_bm25(mut self, bm25: Bm25) -> Self {
        self.bm25 = bm25;
        self
    }

    /// Live documents.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Indexes `text` as `id`'s, replacing whatever text `id` had.
    pub fn upsert(&mut self, id: Uuid, text: &str) {
        // Count the text's terms first, so each term gets one posting with its frequency.
        let mut counts: FastMap<u32, u32> = FastMap::default();
        let mut len = 0u32;
        let analyzer = self.analyzer;
        tokenize::analyze(text, &analyzer, |t| {
            len += 1;
            let term = self.term_id(t);
            *counts.entry(term).or_insert(0) += 1;
        });
        let slot = match self.slots.get(&id) {
            Some(&slot) => {
                self.unindex(slot);
                slot
            }
            None => {
                let slot = match self.free.pop() {
                    Some(s) => s,
                    None => {
                        self.docs.push(Doc::default());
                        // A tenant with 4 billion memories is far beyond what one process holds.
                        u32::try_from(self.docs.len() - 1).unwrap_or(u32::MAX)
                    }
                };
                self.slots.insert(id, slot);
                slot
            }
        };
        let mut terms: Vec<u32> = Vec::with_capacity(counts.len());
        for (term, tf) in counts {
            self.postings[term as usize].push(Posting { slot, tf });
            terms.push(term);
        }
        self.docs[slot as usize] = Doc {
            id: Some(id),
            len,
            terms: terms.into_boxed_slice(),
        };
        self.total_len += u64::from(len);
        self.compact_terms();
    }

    /// Forgets `id`; nothing if it is not indexed.
    pub fn remove(&mut self, id: &Uuid) {
        if let Some(slot) = self.slots.remove(id) {
            self.unindex(slot);
            self.docs[slot as usize] = Doc::default();
            self.free.push(slot);
            self.compact_terms();
        }
    }

    /// Forgets every id of `ids` that is indexed, in one pass over each posting list they touch:
    /// removed one at a time, a term every one of them holds has its list scanned once per
    /// memory: quadratic in an erasure's size, under the lock every search waits on.
    pub fn remove_many(&mut self, ids: &[Uuid]) {
        // The removed slots as a bit set (a bit a slot of the index, 125 KB at a million): the
        // lists of a small vocabulary hold about every document, and a hash look-up a posting
        // would cost several times the pass.
        let mut dead = vec![0u64; self.docs.len().div_ceil(64)];
        let mut freed: Vec<u32> = Vec::new();
        let mut touched: FastSet<u32> = FastSet::default();
        for id in ids {
            let Some(slot) = self.slots.remove(id) else {
                continue;
            };
            let doc = std::mem::take(&mut self.docs[slot as usize]);
            self.total_len -= u64::from(doc.len);
            touched.extend(doc.terms.iter().copied());
            dead[slot as usize / 64] |= 1 << (slot % 64);
            freed.push(slot);
        }
        if freed.is_empty() {
            return;
        }
        for term in touched {
            let list = &mut self.postings[term as usize];
            list.retain(|p| dead[p.slot as usize / 64] & (1 << (p.slot % 64)) == 0);
            if list.is_empty() {
                *list = Vec::new();
                self.dead_terms += 1;
            }
        }
        self.free.extend(freed);
        self.compact_terms();
    }

    /// Takes `slot`'s postings out and its length off the total; the slot keeps its id.
    fn unindex(&mut self, slot: u32) {
        let doc = std::mem::take(&mut self.docs[slot as usize]);
        self.total_len -= u64::from(doc.len);
        for &term in doc.terms.iter() {
            let list = &mut self.postings[term as usize];
            if let Some(i) = list.iter().position(|p| p.slot == slot) {
                list.swap_remove(i);
            }
            if list.is_empty() {
                *list = Vec::new();
                self.dead_terms += 1;
            }
        }
        self.docs[slot as usize].id = doc.id;
    }

    /// Drops the dictionary's terms no document uses any more (order ids, codes of deleted
    /// memories), once they are many: one pass over the dictionary per as many removals, so
    /// churn neither grows the dictionary for ever nor costs a pass per remove.
    fn compact_terms(&mut self) {
        if self.dead_terms < 1024 || self.dead_terms < self.terms.len() / 2 {
            return;
        }
        let postings = &self.postings;
        let free = &mut self.free_terms;
        self.terms.retain(|_, &mut t| {
            let used = !postings[t as usize].is_empty();
            if !used {
                free.push(t);
            }
            used
        });
        self.dead_terms = 0;
    }

    /// The id of `term`, interned if new.
    fn term_id(&mut self, term: &str) -> u32 {
        if let Some(&t) = self.terms.get(term) {
            return t;
        }
        let t = match self.free_terms.pop() {
            Some(t) => t,
            None => {
                self.postings.push(Vec::new());
                u32::try_from(self.postings.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.terms.insert(term.into(), t);
        t
    }

    /// BM25's inverse document frequency, Lucene's form: `ln(1 + (N - df + 0.5) / (df + 0.5))`,
    /// positive for every df, so a match always adds to a score.
    fn idf(n: f32, df: f32) -> f32 {
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// The `k` best matches of `query` among the documents `allow` accepts, best first, each
    /// with its BM25 score (> 0: a document sharing no term with the query is never returned).
    /// A term repeated in the query counts once. Equal scores come in id order.
    pub fn search(&self, query: &str, k: usize, allow: impl Fn(&Uuid) -> bool) -> Vec<(Uuid, f32)> {
        if k == 0 || self.slots.is_empty() {
            return Vec::new();
        }
        let mut seen: FastSet<u32> = FastSet::default();
        tokenize::analyze(query, &self.analyzer, |t| {
            if let Some(&term) = self.terms.get(t) {
                seen.insert(term);
            }
        });
        if seen.is_empty() {
            return Vec::new();
        }
        let n = self.slots.len() as f32;
        let avgdl = self.total_len as f32 / n;
        // Per-slot sums; a dense array is faster than a map once a common term touches many.
        let mut acc = vec![0f32; self.docs.len()];
        let mut touched: Vec<u32> = Vec::new();
        let Bm25 { k1, b } = self.bm25;
        for &term in &seen {
            let list = &self.postings[term as usize];
            let idf = Self::idf(n, list.len() as f32);
            for p in list {
                let dl = self.docs[p.slot as usize].len as f32;
                let tf = p.tf as f32;
                let s = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl));
                let a = &mut acc[p.slot as usize];
                if *a == 0.0 {
                    touched.push(p.slot);
                }
                *a += s;
            }
        }
        let mut heap: BinaryHeap<Candidate> = BinaryHeap::with_capacity(k + 1);
        for slot in touched {
            let score = acc[slot as usize];
            // Cheap rejection before the caller's filter, which may be a map lookup.
            if heap.len() == k {
                if let Some(worst) = heap.peek() {
                    if score < worst.0 {
                        continue;
                    }
                }
            }
            let Some(id) = self.docs[slot as usize].id else {
                continue;
            };
            if !allow(&id) {
                continue;
            }
            heap.push(Candidate(score, id));
            if heap.len() > k {
                heap.pop();
            }
        }
        // Ascending order of "worse" is best first.
        heap.into_sorted_vec()
            .into_iter()
            .map(|Candidate(s, id)| (id, s))
            .collect()
    }

    /// The score of a document of the mean length that holds every term of `query` once: the
    /// yardstick of [`Fusion::keyword_ranking`]. A query term no document holds counts with
    /// the idf of a term in no document (the largest), so a query of mostly unknown words has
    /// a large yardstick that an incidental match of one common word falls far short of.
    pub fn query_weight(&self, query: &str) -> f32 {
        let n = self.slots.len() as f32;
        let mut seen: FastSet<String> = FastSet::default();
        tokenize::analyze(query, &self.analyzer, |t| {
            seen.insert(t.to_string());
        });
        seen.iter()
            .map(|t| {
                let df = self
                    .terms
                    .get(t.as_str())
                    .map_or(0, |&term| self.postings[term as usize].len());
                Self::idf(n, df as f32)
            })
            .sum()
    }

    /// The bytes this index holds on the heap (capacities, and an estimate of the hash maps'
    /// tables: one control byte and one entry per bucket).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let map = |cap: usize, entry: usize| cap * (entry + 1);
        let docs = self.docs.capacity() * size_of::<Doc>()
            + self
                .docs
                .iter()
                .map(|d| d.terms.len() * size_of::<u32>())
                .sum::<usize>();
        let postings = self.postings.capacity() * size_of::<Vec<Posting>>()
            + self
                .postings
                .iter()
                .map(|l| l.capacity() * size_of::<Posting>())
                .sum::<usize>();
        let terms = map(self.terms.capacity(), size_of::<(Box<str>, u32)>())
            + self.terms.keys().map(|k| k.len()).sum::<usize>();
        docs + postings
            + terms
            + map(self.slots.capacity(), size_of::<(Uuid, u32)>())
            + (self.free.capacity() + self.free_terms.capacity()) * size_of::<u32>()
    }
}
