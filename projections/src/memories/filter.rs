//! Filters over memories (the API's `filters`, in the shape of mem0's v2 filters, read and
//! checked by the service's wire layer): `AND`/`OR`/`NOT` over conditions on a memory's
//! scope, type, importance, times and metadata keys.
//!
//! A condition on a field the memory does not have (no `user_id`, no such metadata key) is
//! false, and so its `NOT` is true; `ne` and `nin` are the negations of `eq` and `in`, so a
//! memory without the field passes them.

use serde_json::Value;

use super::Extra;
use crate::event::MemoryType;

/// What a condition looks at.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterField {
    UserId,
    AgentId,
    SessionId,
    MemoryType,
    Importance,
    CreatedAt,
    UpdatedAt,
    /// The caller's `occurred_at`; a memory without one matches no comparison.
    OccurredAt,
    /// `metadata.<key>`: a top-level key of the metadata object.
    Metadata(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterOp {
    Eq,
    Ne,
    In,
    Nin,
    Gt,
    Gte,
    Lt,
    Lte,
    /// A string field holding the text (case-insensitively), or a metadata array holding the
    /// value.
    Contains,
}

/// A condition's operand, checked against its field by the wire layer: times are
/// microseconds, a type is its name.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    One(Value),
    Many(Vec<Value>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Cond {
        field: FilterField,
        op: FilterOp,
        operand: Operand,
    },
}

/// A memory as a filter sees it.
pub struct Subject<'a> {
    pub memory_type: MemoryType,
    pub importance: f64,
    pub created_at: i64,
    pub updated_at: i64,
    pub extra: Option<&'a Extra>,
    /// The metadata object, parsed.
    pub metadata: Option<&'a Value>,
}

impl Filter {
    pub fn matches(&self, m: &Subject<'_>) -> bool {
        match self {
            Filter::And(all) => all.iter().all(|f| f.matches(m)),
            Filter::Or(any) => any.iter().any(|f| f.matches(m)),
            Filter::Not(f) => !f.matches(m),
            Filter::Cond { field, op, operand } => {
                let value = field_value(field, m);
                match op {
                    FilterOp::Ne => !compare(value.as_ref(), FilterOp::Eq, operand),
                    FilterOp::Nin => !compare(value.as_ref(), FilterOp::In, operand),
                    op => compare(value.as_ref(), *op, operand),
                }
            }
        }
    }

    /// Whether the filter holds a condition at all (`{"AND": []}` holds none and matches
    /// everything).
    pub fn has_condition(&self) -> bool {
        match self {
            Filter::And(all) | Filter::Or(all) => all.iter().any(Filter::has_condition),
            Filter::Not(f) => f.has_condition(),
            Filter::Cond { .. } => true,
        }
    }
}

fn field_value(field: &FilterField, m: &Subject<'_>) -> Option<Value> {
    let scope = |f: fn(&Extra) -> &Option<String>| {
        m.extra
            .and_then(|e| f(e).as_ref())
            .map(|s| Value::String(s.clone()))
    };
    match field {
        FilterField::UserId => scope(|e| &e.user_id),
        FilterField::AgentId => scope(|e| &e.agent_id),
        FilterField::SessionId => scope(|e| &e.session_id),
        FilterField::MemoryType => Some(Value::String(<&str>::from(m.memory_type).to_string())),
        FilterField::Importance => serde_json::Number::from_f64(m.importance).map(Value::Number),
        FilterField::CreatedAt => Some(Value::from(m.created_at)),
        FilterField::UpdatedAt => Some(Value::from(m.updated_at)),
        FilterField::OccurredAt => m.extra.and_then(|e| e.occurred_at).map(Value::from),
        FilterField::Metadata(key) => m.metadata.and_then(|md| md.get(key)).cloned(),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn order(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn compare(value: Option<&Value>, op: FilterOp, operand: &Operand) -> bool {
    use std::cmp::Ordering::*;
    let Some(value) = value else {
        return false;
    };
    match (op, operand) {
        (FilterOp::Eq, Operand::One(o)) => equal(value, o),
        (FilterOp::In, Operand::Many(list)) => list.iter().any(|o| equal(value, o)),
        (FilterOp::Gt, Operand::One(o)) => order(value, o) == Some(Greater),
        (FilterOp::Gte, Operand::One(o)) => matches!(order(value, o), Some(Greater | Equal)),
        (FilterOp::Lt, Operand::One(o)) => order(value, o) == Some(Less),
        (FilterOp::Lte, Operand::One(o)) => matches!(order(value, o), Some(Less | Equal)),
        (FilterOp::Contains, Operand::One(o)) => match (value, o) {
            (Value::String(s), Value::String(part)) => {
                s.to_lowercase().contains(&part.to_lowercase())
            }
            (Value::Array(items), o) => items.iter().any(|i| equal(i, o)),
            _ => false,
        },
        // The wire layer pairs every operator with its operand's arity.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(field: FilterField, op: FilterOp, operand: Value) -> Filter {
        let operand = match operand {
            Value::Array(list) if matches!(op, FilterOp::In | FilterOp::Nin) => Operand::Many(list),
            v => Operand::One(v),
        };
        Filter::Cond { field, op, operand }
    }

    #[test]
    fn conditions_and_their_negations() {
        let extra = Extra {
            user_id: Some("alice".into()),
            occurred_at: Some(500),
            ..Extra::default()
        };
        let md = json!({"topic": "billing", "tags": ["vip", "eu"], "score": 3});
        let m = Subject {
            memory_type: crate::event::MemoryType::Fact,
            importance: 0.7,
            created_at: 1_000,
            updated_at: 2_000,
            extra: Some(&extra),
            metadata: Some(&md),
        };
        use FilterField::*;
        use FilterOp::*;
        let t = |f: Filter| f.matches(&m);
        assert!(t(cond(UserId, Eq, json!("alice"))));
        assert!(!t(cond(UserId, Ne, json!("alice"))));
        assert!(!t(cond(AgentId, Eq, json!("bot"))));
        // No agent: `ne` and `nin` hold, comparisons do not.
        assert!(t(cond(AgentId, Ne, json!("bot"))));
        assert!(t(cond(AgentId, Nin, json!(["bot"]))));
        assert!(t(cond(MemoryType, In, json!(["rule", "fact"]))));
        assert!(t(cond(Importance, Gte, json!(0.7))));
        assert!(!t(cond(Importance, Gt, json!(0.7))));
        assert!(t(cond(CreatedAt, Lt, json!(1_001))));
        assert!(t(cond(UpdatedAt, Lte, json!(2_000))));
        assert!(t(cond(OccurredAt, Gte, json!(500))));
        assert!(!t(cond(OccurredAt, Lt, json!(500))));
        assert!(t(cond(Metadata("topic".into()), Contains, json!("BILL"))));
        assert!(t(cond(Metadata("tags".into()), Contains, json!("eu"))));
        assert!(t(cond(Metadata("score".into()), Eq, json!(3.0))));
        assert!(!t(cond(Metadata("missing".into()), Eq, json!(1))));
        let both = Filter::And(vec![
            cond(UserId, Eq, json!("alice")),
            Filter::Not(Box::new(cond(Metadata("topic".into()), Eq, json!("sales")))),
        ]);
        assert!(t(both));
        assert!(!t(Filter::Or(vec![
            cond(UserId, Eq, json!("bob")),
            cond(Importance, Lt, json!(0.5)),
        ])));
        assert!(!Filter::And(vec![Filter::Or(vec![])]).has_condition());
        assert!(Filter::Not(Box::new(cond(UserId, Eq, json!("a")))).has_condition());
    }
}
