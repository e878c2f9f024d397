//! The memory filter language (`filters` of search, query and batch delete), in the shape of
//! mem0's v2 filters, read into [`Filter`] with every refusal naming the path of the part that
//! is wrong (`filters.AND[1].importance.gte: ...`).
//!
//! ```json
//! {"AND": [{"user_id": "alice"},
//!          {"OR": [{"importance": {"gte": 0.8}}, {"metadata.topic": {"in": ["billing", "eu"]}}]},
//!          {"NOT": {"memory_type": "context"}}]}
//! ```
//!
//! An object's keys are ANDed; a field's value is the operand of `eq`, or an object of
//! operators (`eq`, `ne`, `in`, `nin`, `gt`, `gte`, `lt`, `lte`, `contains`), ANDed too.

use auditmem_projections::memories::filter::{Filter, FilterField, FilterOp, Operand};
use auditmem_projections::MemoryType;
use serde_json::Value;

use super::field::Invalid;
use super::time::parse_time;

/// Nesting of `AND`/`OR`/`NOT` a filter may have at most.
pub const MAX_DEPTH: usize = 8;
/// Conditions (and list items) a filter may hold at most.
pub const MAX_CONDITIONS: usize = 100;
/// Characters of a `metadata.<key>` key at most.
const MAX_KEY_CHARS: usize = 64;

const FIELDS: &str = "user_id, agent_id, session_id, memory_type, importance, created_at, updated_at, occurred_at or metadata.<key>";

/// `filters` read from its JSON, or the refusal naming the offending part's path.
pub fn parse_filter(raw: &Value) -> Result<Filter, Invalid> {
    let mut budget = MAX_CONDITIONS;
    let f = node(raw, "filters", 0, &mut budget)?;
    if !f.has_condition() {
        return Err(Invalid::new("filters: holds no condition"));
    }
    Ok(f)
}

fn refuse(path: &str, why: impl std::fmt::Display) -> Invalid {
    Invalid(format!("{path}: {why}"))
}

fn node(raw: &Value, path: &str, depth: usize, budget: &mut usize) -> Result<Filter, Invalid> {
    if depth > MAX_DEPTH {
        return Err(refuse(
            path,
            format!("nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    let Value::Object(map) = raw else {
        return Err(refuse(path, "must be an object"));
    };
    if map.is_empty() {
        return Err(refuse(path, "must not be empty"));
    }
    let mut all = Vec::with_capacity(map.len());
    for (key, value) in map {
        let here = format!("{path}.{key}");
        all.push(match key.as_str() {
            "AND" | "OR" => {
                let Value::Array(items) = value else {
                    return Err(refuse(&here, "must be an array of filters"));
                };
                if items.is_empty() {
                    return Err(refuse(&here, "must hold at least one filter"));
                }
                let parts = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| node(item, &format!("{here}[{i}]"), depth + 1, budget))
                    .collect::<Result<Vec<_>, _>>()?;
                if key == "AND" {
                    Filter::And(parts)
                } else {
                    Filter::Or(parts)
                }
            }
            "NOT" => Filter::Not(Box::new(match value {
                Value::Array(items) if !items.is_empty() => Filter::And(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| node(item, &format!("{here}[{i}]"), depth + 1, budget))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                Value::Object(_) => node(value, &here, depth + 1, budget)?,
                _ => return Err(refuse(&here, "must be a filter or an array of filters")),
            })),
            name => condition(name, value, &here, budget)?,
        });
    }
    Ok(if all.len() == 1 {
        all.pop().unwrap_or(Filter::And(Vec::new()))
    } else {
        Filter::And(all)
    })
}

fn field_of(name: &str, path: &str) -> Result<FilterField, Invalid> {
    Ok(match name {
        "user_id" => FilterField::UserId,
        "agent_id" => FilterField::AgentId,
        "session_id" => FilterField::SessionId,
        "memory_type" => FilterField::MemoryType,
        "importance" => FilterField::Importance,
        "created_at" => FilterField::CreatedAt,
        "updated_at" => FilterField::UpdatedAt,
        "occurred_at" => FilterField::OccurredAt,
        _ => match name.strip_prefix("metadata.") {
            Some(key) if !key.is_empty() && key.chars().count() <= MAX_KEY_CHARS => {
                FilterField::Metadata(key.to_string())
            }
            Some(_) => {
                return Err(refuse(
                    path,
                    format!("a metadata key is 1 to {MAX_KEY_CHARS} characters"),
                ))
            }
            None => {
                return Err(refuse(
                    path,
                    format!("unknown field; filter on {FIELDS}, or AND, OR, NOT"),
                ))
            }
        },
    })
}

fn op_of(name: &str, path: &str) -> Result<FilterOp, Invalid> {
    Ok(match name {
        "eq" => FilterOp::Eq,
        "ne" => FilterOp::Ne,
        "in" => FilterOp::In,
        "nin" => FilterOp::Nin,
        "gt" => FilterOp::Gt,
        "gte" => FilterOp::Gte,
        "lt" => FilterOp::Lt,
        "lte" => FilterOp::Lte,
        "contains" => FilterOp::Contains,
        _ => {
            return Err(refuse(
                path,
                "unknown operator; use eq, ne, in, nin, gt, gte, lt, lte or contains",
            ))
        }
    })
}

fn condition(name: &str, value: &Value, path: &str, budget: &mut usize) -> Result<Filter, Invalid> {
    let field = field_of(name, path)?;
    let ops: Vec<(FilterOp, &Value, String)> = match value {
        Value::Object(ops) => {
            if ops.is_empty() {
                return Err(refuse(path, "must name at least one operator"));
            }
            ops.iter()
                .map(|(op, v)| {
                    let here = format!("{path}.{op}");
                    op_of(op, &here).map(|op| (op, v, here))
                })
                .collect::<Result<_, _>>()?
        }
        v => vec![(FilterOp::Eq, v, path.to_string())],
    };
    let mut conds = Vec::with_capacity(ops.len());
    for (op, v, here) in ops {
        let operand = match op {
            FilterOp::In | FilterOp::Nin => {
                let Value::Array(items) = v else {
                    return Err(refuse(&here, "must be an array"));
                };
                if items.is_empty() {
                    return Err(refuse(&here, "must hold at least one value"));
                }
                spend(budget, items.len(), &here)?;
                Operand::Many(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| operand(&field, op, item, &format!("{here}[{i}]")))
                        .collect::<Result<_, _>>()?,
                )
            }
            _ => {
                spend(budget, 1, &here)?;
                Operand::One(operand(&field, op, v, &here)?)
            }
        };
        conds.push(Filter::Cond {
            field: field.clone(),
            op,
            operand,
        });
    }
    Ok(if conds.len() == 1 {
        conds.pop().unwrap_or(Filter::And(Vec::new()))
    } else {
        Filter::And(conds)
    })
}

fn spend(budget: &mut usize, n: usize, path: &str) -> Result<(), Invalid> {
    *budget = budget.checked_sub(n).ok_or_else(|| {
        refuse(
            path,
            format!("a filter holds at most {MAX_CONDITIONS} conditions and values"),
        )
    })?;
    Ok(())
}

/// One operand, checked against its field and operator.
fn operand(field: &FilterField, op: FilterOp, v: &Value, path: &str) -> Result<Value, Invalid> {
    let ordered = matches!(
        op,
        FilterOp::Gt | FilterOp::Gte | FilterOp::Lt | FilterOp::Lte
    );
    match field {
        FilterField::UserId | FilterField::AgentId | FilterField::SessionId => {
            if ordered {
                return Err(refuse(path, "this field takes eq, ne, in, nin or contains"));
            }
            match v {
                Value::String(s) => Ok(Value::String(s.clone())),
                _ => Err(refuse(path, "must be a string")),
            }
        }
        FilterField::MemoryType => {
            if ordered || op == FilterOp::Contains {
                return Err(refuse(path, "memory_type takes eq, ne, in or nin"));
            }
            match v.as_str().map(str::parse::<MemoryType>) {
                Some(Ok(t)) => Ok(Value::String(<&str>::from(t).to_string())),
                _ => Err(refuse(path, "must be one of rule, fact, context")),
            }
        }
        FilterField::Importance => {
            if op == FilterOp::Contains {
                return Err(refuse(
                    path,
                    "importance takes eq, ne, in, nin, gt, gte, lt or lte",
                ));
            }
            match v {
                Value::Number(n) if n.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)) => {
                    Ok(v.clone())
                }
                _ => Err(refuse(path, "must be a number from 0.0 to 1.0")),
            }
        }
        FilterField::CreatedAt | FilterField::UpdatedAt | FilterField::OccurredAt => {
            if op == FilterOp::Contains {
                return Err(refuse(
                    path,
                    "a time takes eq, ne, in, nin, gt, gte, lt or lte",
                ));
            }
            match v {
                Value::String(s) => parse_time(path, s).map(Value::from),
                _ => Err(refuse(
                    path,
                    "must be an ISO 8601 time such as 2026-01-31T12:00:00Z",
                )),
            }
        }
        FilterField::Metadata(_) => match v {
            Value::Array(_) | Value::Object(_) => {
                Err(refuse(path, "must be a string, number, boolean or null"))
            }
            Value::String(_) | Value::Number(_) => Ok(v.clone()),
            _ if ordered => Err(refuse(path, "must be a string or a number")),
            _ => Ok(v.clone()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(v: Value) -> String {
        parse_filter(&v).expect_err("refused").0
    }

    #[test]
    fn filters_are_read_with_their_operators() {
        let f = parse_filter(
            &json!({"AND": [{"user_id": "alice"}, {"importance": {"gte": 0.5, "lt": 0.9}}]}),
        )
        .expect("parses");
        assert_eq!(
            f,
            Filter::And(vec![
                Filter::Cond {
                    field: FilterField::UserId,
                    op: FilterOp::Eq,
                    operand: Operand::One(json!("alice")),
                },
                Filter::And(vec![
                    Filter::Cond {
                        field: FilterField::Importance,
                        op: FilterOp::Gte,
                        operand: Operand::One(json!(0.5)),
                    },
                    Filter::Cond {
                        field: FilterField::Importance,
                        op: FilterOp::Lt,
                        operand: Operand::One(json!(0.9)),
                    },
                ]),
            ])
        );
        let t =
            parse_filter(&json!({"created_at": {"gte": "2026-01-31T12:00:00Z"}})).expect("parses");
        assert_eq!(
            t,
            Filter::Cond {
                field: FilterField::CreatedAt,
                op: FilterOp::Gte,
                operand: Operand::One(json!(1_769_860_800_000_000i64)),
            }
        );
    }

    #[test]
    fn every_refusal_names_its_path() {
        assert_eq!(refused(json!([])), "filters: must be an object");
        assert_eq!(refused(json!({})), "filters: must not be empty");
        assert_eq!(
            refused(json!({"AND": []})),
            "filters.AND: must hold at least one filter"
        );
        assert_eq!(
            refused(json!({"AND": [{"user_id": "a"}, {"importance": {"gte": 2}}]})),
            "filters.AND[1].importance.gte: must be a number from 0.0 to 1.0"
        );
        assert_eq!(
            refused(json!({"OR": [{"colour": "red"}]})),
            format!("filters.OR[0].colour: unknown field; filter on {FIELDS}, or AND, OR, NOT")
        );
        assert_eq!(
            refused(json!({"user_id": {"like": "a%"}})),
            "filters.user_id.like: unknown operator; use eq, ne, in, nin, gt, gte, lt, lte or contains"
        );
        assert_eq!(
            refused(json!({"memory_type": {"in": ["fact", "note"]}})),
            "filters.memory_type.in[1]: must be one of rule, fact, context"
        );
        assert_eq!(
            refused(json!({"NOT": 3})),
            "filters.NOT: must be a filter or an array of filters"
        );
        assert_eq!(
            refused(json!({"metadata.tags": {"eq": [1]}})),
            "filters.metadata.tags.eq: must be a string, number, boolean or null"
        );
        assert!(refused(json!({"updated_at": {"lt": "yesterday"}}))
            .starts_with("filters.updated_at.lt must be an ISO 8601 time"));
        let mut deep = json!({"user_id": "a"});
        for _ in 0..=MAX_DEPTH {
            deep = json!({ "NOT": deep });
        }
        assert!(refused(deep).ends_with(&format!("nested deeper than {MAX_DEPTH} levels")));
        let many: Vec<Value> = (0..=MAX_CONDITIONS)
            .map(|i| json!(format!("u{i}")))
            .collect();
        assert_eq!(
            refused(json!({"user_id": {"in": many}})),
            format!(
                "filters.user_id.in: a filter holds at most {MAX_CONDITIONS} conditions and values"
            )
        );
    }
}
