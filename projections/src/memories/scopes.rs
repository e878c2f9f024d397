//! Per tenant: its live memories by each `user_id`, `agent_id` and `session_id` value and by
//! each scalar (string, number, boolean) value of a top-level metadata key, so a search whose
//! filter pins one scores only those memories. Without it a selective filter is asked about
//! nearly every row of the table (few rows pass, so the best kept so far never fills): ~30 ms
//! for a 1% filter at 100,000 memories, against ~1 ms through this index
//! (`benches/memory_search.rs`).
//!
//! Scopes are set when a memory is created and never change; its metadata may (`PATCH`), so a
//! memory is indexed again whenever what it holds differs from what was indexed.

use std::collections::HashMap;

use serde_json::Value;
use uuid::Uuid;

use super::filter::{Filter, FilterField, FilterOp, Operand};
use super::state::Held;
use crate::FastSet;

#[derive(Default)]
pub(super) struct ScopeIndex {
    by: HashMap<Key, FastSet<Uuid>>,
}

/// A field and one value of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    User(Box<str>),
    Agent(Box<str>),
    Session(Box<str>),
    Meta(Box<str>, Scalar),
}

/// A scalar JSON value, equal exactly when the filter's equality holds (numbers by their
/// `f64` value, as `filter::equal` compares them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Scalar {
    Str(Box<str>),
    Bool(bool),
    /// The `f64`'s bits, `-0.0` as `0.0`.
    Num(u64),
}

impl Scalar {
    fn of(v: &Value) -> Option<Self> {
        match v {
            Value::String(s) => Some(Self::Str(s.as_str().into())),
            Value::Bool(b) => Some(Self::Bool(*b)),
            Value::Number(n) => n.as_f64().map(|f| Self::Num((f + 0.0).to_bits())),
            _ => None,
        }
    }
}

impl Key {
    /// The key of `field` at `value` in a filter, `None` when the index holds no such key
    /// (another field, a metadata object or array, `null`); `Some(None)` when nothing can
    /// match (a scope compared with anything but a string).
    fn of(field: &FilterField, value: &Value) -> Option<Option<Self>> {
        let scope = |k: fn(Box<str>) -> Key| Some(value.as_str().map(|s| k(s.into())));
        match field {
            FilterField::UserId => scope(Key::User),
            FilterField::AgentId => scope(Key::Agent),
            FilterField::SessionId => scope(Key::Session),
            FilterField::Metadata(key) => {
                Scalar::of(value).map(|v| Some(Key::Meta(key.as_str().into(), v)))
            }
            _ => None,
        }
    }

    /// Every key a memory holding `held` is indexed under.
    fn all_of(held: Option<&Held>) -> Vec<Key> {
        let Some(h) = held else {
            return Vec::new();
        };
        let e = &h.extra;
        let mut keys: Vec<Key> = [
            e.user_id.as_deref().map(|s| Key::User(s.into())),
            e.agent_id.as_deref().map(|s| Key::Agent(s.into())),
            e.session_id.as_deref().map(|s| Key::Session(s.into())),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(Value::Object(md)) = &h.metadata {
            keys.extend(
                md.iter()
                    .filter_map(|(k, v)| Scalar::of(v).map(|v| Key::Meta(k.as_str().into(), v))),
            );
        }
        keys
    }
}

/// The memories a filter can match, as a union of the index's sets; every memory it matches is
/// in one of them (it may match fewer: the caller still asks the filter).
pub(super) struct Candidates<'a> {
    pub(super) sets: Vec<&'a FastSet<Uuid>>,
}

impl Candidates<'_> {
    /// At most this many memories (the sets of an `OR` over two fields may share some).
    pub(super) fn bound(&self) -> usize {
        self.sets.iter().map(|s| s.len()).sum()
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = &Uuid> {
        self.sets.iter().flat_map(|s| s.iter())
    }
}

impl ScopeIndex {
    /// Memory `id`, indexed as holding `old` (`None`: not indexed), now holds `new` (`None`:
    /// nothing, or it is gone).
    pub(super) fn replace(&mut self, id: Uuid, old: Option<&Held>, new: Option<&Held>) {
        if old.is_none() && new.is_none() {
            return;
        }
        let (old, new) = (Key::all_of(old), Key::all_of(new));
        for k in old.iter().filter(|k| !new.contains(k)) {
            if let Some(set) = self.by.get_mut(k) {
                set.remove(&id);
                if set.is_empty() {
                    self.by.remove(k);
                }
            }
        }
        for k in new.into_iter().filter(|k| !old.contains(k)) {
            self.by.entry(k).or_default().insert(id);
        }
    }

    /// What `filter` can match by its indexed conditions alone, or `None` when they do not
    /// narrow it: `eq`/`in` on a scope or on a metadata key with scalar operands gives those
    /// values' memories, `AND` the smallest of its parts that narrow, `OR` the union when
    /// every part narrows. Anything else (`NOT`, `ne`, ranges, other fields) does not narrow.
    pub(super) fn candidates(&self, filter: &Filter) -> Option<Candidates<'_>> {
        match filter {
            Filter::And(all) => all
                .iter()
                .filter_map(|f| self.candidates(f))
                .min_by_key(Candidates::bound),
            Filter::Or(any) if !any.is_empty() => {
                let mut sets = Vec::new();
                for f in any {
                    sets.extend(self.candidates(f)?.sets);
                }
                Some(Candidates { sets })
            }
            Filter::Cond {
                field,
                op: op @ (FilterOp::Eq | FilterOp::In),
                operand,
            } => {
                let values: &[Value] = match (op, operand) {
                    (FilterOp::Eq, Operand::One(v)) => std::slice::from_ref(v),
                    (FilterOp::In, Operand::Many(vs)) => vs,
                    _ => return None,
                };
                let mut sets = Vec::new();
                for v in values {
                    if let Some(set) = Key::of(field, v)?.and_then(|k| self.by.get(&k)) {
                        sets.push(set);
                    }
                }
                Some(Candidates { sets })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Extra;
    use super::*;
    use serde_json::json;

    fn held(user: &str, agent: Option<&str>, metadata: Value) -> Held {
        Held {
            extra: Extra {
                user_id: Some(user.into()),
                agent_id: agent.map(Into::into),
                ..Extra::default()
            },
            metadata: Some(metadata),
        }
    }

    fn cond(field: FilterField, op: FilterOp, operand: Operand) -> Filter {
        Filter::Cond { field, op, operand }
    }

    fn ids(c: Option<Candidates<'_>>) -> Option<Vec<u128>> {
        c.map(|c| {
            let mut v: Vec<u128> = c.ids().map(|id| id.as_u128()).collect();
            v.sort_unstable();
            v
        })
    }

    #[test]
    fn indexed_conditions_narrow_and_others_do_not() {
        let mut ix = ScopeIndex::default();
        let one = held(
            "ana",
            Some("bot"),
            json!({"team": "red", "n": 1, "ok": true}),
        );
        let two = held(
            "ana",
            None,
            json!({"team": "blue", "n": 1.0, "deep": {"a": 1}}),
        );
        let three = held("ben", Some("bot"), json!({"team": "red", "n": -0.0}));
        let four = held("cy", None, json!({"n": "1", "none": null}));
        for (i, h) in [&one, &two, &three, &four].into_iter().enumerate() {
            ix.replace(Uuid::from_u128(i as u128 + 1), None, Some(h));
        }
        let user = |s: &str| cond(FilterField::UserId, FilterOp::Eq, Operand::One(s.into()));
        let agent = |s: &str| cond(FilterField::AgentId, FilterOp::Eq, Operand::One(s.into()));
        let meta = |k: &str, v: Value| {
            cond(
                FilterField::Metadata(k.into()),
                FilterOp::Eq,
                Operand::One(v),
            )
        };
        let important = cond(
            FilterField::Importance,
            FilterOp::Gte,
            Operand::One(0.5.into()),
        );

        assert_eq!(ids(ix.candidates(&user("ana"))), Some(vec![1, 2]));
        assert_eq!(ids(ix.candidates(&user("nobody"))), Some(vec![]));
        // A number never equals a string scope.
        let number = cond(FilterField::UserId, FilterOp::Eq, Operand::One(7.into()));
        assert_eq!(ids(ix.candidates(&number)), Some(vec![]));
        let within = cond(
            FilterField::UserId,
            FilterOp::In,
            Operand::Many(vec!["ben".into(), "cy".into(), "zed".into()]),
        );
        assert_eq!(ids(ix.candidates(&within)), Some(vec![3, 4]));
        // Metadata scalars, numbers by value (1 is 1.0, -0.0 is 0), never a string "1".
        assert_eq!(
            ids(ix.candidates(&meta("team", json!("red")))),
            Some(vec![1, 3])
        );
        assert_eq!(ids(ix.candidates(&meta("n", json!(1)))), Some(vec![1, 2]));
        assert_eq!(ids(ix.candidates(&meta("n", json!(0.0)))), Some(vec![3]));
        assert_eq!(ids(ix.candidates(&meta("n", json!("1")))), Some(vec![4]));
        assert_eq!(ids(ix.candidates(&meta("ok", json!(true)))), Some(vec![1]));
        assert_eq!(ids(ix.candidates(&meta("team", json!(1)))), Some(vec![]));
        // Objects, arrays and null are not indexed: such a condition does not narrow.
        assert_eq!(ids(ix.candidates(&meta("deep", json!({"a": 1})))), None);
        assert_eq!(ids(ix.candidates(&meta("none", Value::Null))), None);
        // AND: the smallest part that narrows; a part that does not is left to the filter.
        let and = Filter::And(vec![important.clone(), user("ana"), agent("bot")]);
        assert_eq!(ids(ix.candidates(&and)), Some(vec![1, 2]));
        let and = Filter::And(vec![user("ben"), agent("bot")]);
        assert_eq!(ids(ix.candidates(&and)), Some(vec![3]));
        assert_eq!(
            ids(ix.candidates(&Filter::And(vec![important.clone()]))),
            None
        );
        // OR narrows only when every part does (the union may hold a memory twice).
        let or = Filter::Or(vec![user("cy"), agent("bot")]);
        assert_eq!(ids(ix.candidates(&or)), Some(vec![1, 3, 4]));
        assert_eq!(
            ids(ix.candidates(&Filter::Or(vec![user("cy"), important.clone()]))),
            None
        );
        assert_eq!(ids(ix.candidates(&Filter::Or(vec![]))), None);
        // NOT, ne and ranges never narrow.
        assert_eq!(
            ids(ix.candidates(&Filter::Not(Box::new(user("ana"))))),
            None
        );
        let ne = cond(
            FilterField::UserId,
            FilterOp::Ne,
            Operand::One("ana".into()),
        );
        assert_eq!(ids(ix.candidates(&ne)), None);
        assert_eq!(ids(ix.candidates(&important)), None);

        // New metadata moves the memory to its new values and keeps its scopes.
        let one_later = held("ana", Some("bot"), json!({"team": "blue"}));
        ix.replace(Uuid::from_u128(1), Some(&one), Some(&one_later));
        assert_eq!(
            ids(ix.candidates(&meta("team", json!("red")))),
            Some(vec![3])
        );
        assert_eq!(
            ids(ix.candidates(&meta("team", json!("blue")))),
            Some(vec![1, 2])
        );
        assert_eq!(ids(ix.candidates(&meta("ok", json!(true)))), Some(vec![]));
        assert_eq!(ids(ix.candidates(&user("ana"))), Some(vec![1, 2]));
        // Removal takes the memory out of every key it was under, and empty keys go.
        ix.replace(Uuid::from_u128(1), Some(&one_later), None);
        assert_eq!(ids(ix.candidates(&user("ana"))), Some(vec![2]));
        assert_eq!(ids(ix.candidates(&agent("bot"))), Some(vec![3]));
        ix.replace(Uuid::from_u128(4), Some(&four), None);
        assert!(!ix.by.contains_key(&Key::User("cy".into())));
        // ana, ben, bot, team red and blue, n 1 and 0.
        assert_eq!(ix.by.len(), 7);
    }
}
