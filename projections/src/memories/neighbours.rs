//! A stream's neighbours: in a hybrid search, a `context` memory found lifts the memories
//! written just before and after it in the same stream.
//!
//! Why: a conversation stored turn by turn answers a question across two turns (one asks,
//! the next answers; one names the thing, the next says what happened to it), and a query
//! matches one of them. On LoCoMo's development half, lifting each fused candidate's two
//! neighbours by [`NEIGHBOUR_SHARE`] of its fused score raises the default search's recall@5
//! from 0.578 to 0.611 and recall@10 from 0.674 to 0.708 (docs/SEARCH.md, "Neighbours").
//!
//! When it applies, and only then:
//! - both memories are of type `context` (a turn, an observation in a running context);
//!   facts and rules stand on their own, so they neither lift nor are lifted;
//! - they are in the same *stream*: the same `user_id`, `agent_id` and `session_id` (absent
//!   counts as a value), at least one of the three given;
//! - they are adjacent in the stream: the stream's nearest memory before or after, in the
//!   tenant's creation order (`created_at`, then id: ids are time-ordered), looked for among
//!   the [`NEIGHBOUR_REACH`] memories on each side (streams written interleaved beyond that
//!   have no neighbours);
//! - the neighbour is one the search admits (its filters, type, expiry, supersession).
//!
//! Semantic and keyword search are unchanged: the interface's search ranks by similarity.

use uuid::Uuid;

use super::state::State;
use super::tenant::TenantMemories;
use super::Extra;
use crate::event::MemoryType;

/// The share of a candidate's fused score each of its two neighbours gains. On LoCoMo's
/// development half 0.2 and 0.3 score within 0.4 points at recall@5 and @10 (0.1 gains half
/// as much, 0.5 loses at @10): the one parameter chosen there.
pub const NEIGHBOUR_SHARE: f32 = 0.2;

/// How many memories of the tenant, on each side, are looked through for a stream's neighbour.
pub const NEIGHBOUR_REACH: usize = 8;

/// Adds `share` of each entry's score to its neighbours' (an entry for a neighbour not in
/// `ranked` is appended), each from the scores as given, then orders `ranked` by score, best
/// first; equal scores keep their order (appended entries after the rest, in the order found).
pub fn lift(
    ranked: &mut Vec<(Uuid, f32)>,
    neighbours: impl Fn(&Uuid) -> [Option<Uuid>; 2],
    share: f32,
) {
    let given: Vec<(Uuid, f32)> = ranked.clone();
    let mut at: crate::FastMap<Uuid, usize> = ranked
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (*id, i))
        .collect();
    for (id, score) in given {
        for n in neighbours(&id).into_iter().flatten() {
            let i = *at.entry(n).or_insert_with(|| {
                ranked.push((n, 0.0));
                ranked.len() - 1
            });
            ranked[i].1 += share * score;
        }
    }
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
}

/// The stream a memory's scope puts it in, `None` when it is in none (no scope given).
fn stream(extra: Option<&Extra>) -> Option<(&Option<String>, &Option<String>, &Option<String>)> {
    let e = extra?;
    (e.user_id.is_some() || e.agent_id.is_some() || e.session_id.is_some()).then_some((
        &e.user_id,
        &e.agent_id,
        &e.session_id,
    ))
}

/// The `context` memories just before and after `id` in its stream, each when `admit` takes it.
pub(super) fn of(
    state: &State,
    t: &TenantMemories,
    id: &Uuid,
    admit: impl Fn(&Uuid) -> bool,
) -> [Option<Uuid>; 2] {
    let Some(k) = state.all.get(id) else {
        return [None, None];
    };
    if k.memory_type != MemoryType::Context {
        return [None, None];
    }
    let Some(mine) = stream(state.names.extra(id)) else {
        return [None, None];
    };
    let at = (k.created_at, *id);
    let same = |other: &Uuid| stream(state.names.extra(other)) == Some(mine);
    let pick = |found: Option<(&(i64, Uuid), &MemoryType)>| {
        found
            .filter(|(_, ty)| **ty == MemoryType::Context)
            .map(|((_, n), _)| *n)
            .filter(|n| admit(n))
    };
    let before = t
        .order
        .range(..at)
        .rev()
        .take(NEIGHBOUR_REACH)
        .find(|((_, n), _)| same(n));
    let after = t
        .order
        .range((std::ops::Bound::Excluded(at), std::ops::Bound::Unbounded))
        .take(NEIGHBOUR_REACH)
        .find(|((_, n), _)| same(n));
    [pick(before), pick(after)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(i: u128) -> Uuid {
        Uuid::from_u128(i)
    }

    #[test]
    fn a_candidate_lifts_its_neighbours_by_a_share_of_its_score() {
        // 1 <-> 2 <-> 3 <-> 4 in one stream; 5 has none.
        let next = |id: &Uuid| match id.as_u128() {
            1 => [None, Some(u(2))],
            2 => [Some(u(1)), Some(u(3))],
            3 => [Some(u(2)), Some(u(4))],
            4 => [Some(u(3)), None],
            _ => [None, None],
        };
        let mut ranked = vec![(u(1), 1.0), (u(5), 0.5), (u(3), 0.4)];
        lift(&mut ranked, next, 0.2);
        // 2 gains from 1 and 3 (0.2 + 0.08), 4 from 3 (0.08), 1 nothing (2 was not ranked).
        let want = [(1, 1.0), (5, 0.5), (3, 0.4), (2, 0.28), (4, 0.08)];
        assert_eq!(ranked.len(), want.len());
        for ((id, s), (wid, ws)) in ranked.iter().zip(want) {
            assert_eq!(id.as_u128(), wid);
            assert!((s - ws).abs() < 1e-6, "{id}: {s} != {ws}");
        }
    }

    #[test]
    fn a_neighbour_can_overtake_a_better_candidate() {
        let next = |id: &Uuid| match id.as_u128() {
            1 => [None, Some(u(2))],
            2 => [Some(u(1)), None],
            _ => [None, None],
        };
        let mut ranked = vec![(u(3), 0.56), (u(1), 0.5), (u(2), 0.45), (u(4), 0.52)];
        lift(&mut ranked, next, 0.2);
        let ids: Vec<u128> = ranked.iter().map(|r| r.0.as_u128()).collect();
        // 1: 0.5 + 0.09 = 0.59 leads; 2: 0.45 + 0.1 = 0.55 passes 4, not 3.
        assert_eq!(ids, vec![1, 3, 2, 4]);
    }

    #[test]
    fn no_neighbours_no_change() {
        let mut ranked = vec![(u(3), 0.5), (u(1), 0.5), (u(2), 0.1)];
        lift(&mut ranked, |_| [None, None], 0.2);
        assert_eq!(ranked, vec![(u(3), 0.5), (u(1), 0.5), (u(2), 0.1)]);
    }
}
