//! Property tests (proptest) of the pure parts every answer rests on: the event and record
//! codecs, the hash chain and its verifier, the audit list's query parser, and the CSV of
//! exports. Case counts are modest (24-256 a property) so the file runs in seconds in a debug
//! build; `PROPTEST_CASES=N` raises them all for a longer hunt.

use std::collections::HashMap;

use auditmem::api::extract::params;
use auditmem::export::rows;
use auditmem::log::record::{Record, RecordRef};
use auditmem::log::verify::{verify_tree, Verifier};
use auditmem::projections::audit_index::AuditRef;
use auditmem::projections::{
    AuditDetail, AuditEntry, AuditRecorded, CreditsConsumed, Event, KeyIssued, KeyRevoked,
    MemoriesDeleted, MemoriesDeletedByType, MemoriesExpired, MemoryAmend, MemoryCreated,
    MemoryDeleted, MemoryExtra, MemorySuperseded, MemoryType, MemoryUpdated, Permission, Plan,
    TenantCreated, TenantUpdated, Tokens,
};
use auditmem::registry::ErrorCode;
use auditmem::wire::audit::{AuditListQuery, Cursor, ListQuery, ListedEntry};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use serde_json::Value;
use strum::VariantArray;
use uuid::Uuid;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

/// Any f64 but NaN (which equals nothing, itself included).
fn float() -> impl Strategy<Value = f64> {
    prop::num::f64::NORMAL
        | prop::num::f64::SUBNORMAL
        | prop::num::f64::ZERO
        | prop::num::f64::INFINITE
}

fn finite() -> impl Strategy<Value = f64> {
    prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO
}

/// Text with what breaks formats: separators, quotes, line breaks, control and wide characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z ,;\"'\\r\\n\\t\u{0}é漢🦀\u{feff}]{0,24}",
    ]
}

/// An optional JSON value that is never `Some(null)`: on disk `Some(null)` and `None` are the
/// same msgpack nil, so the codec cannot tell them apart (found by this test in CI).
fn optional_json() -> impl Strategy<Value = Option<Value>> {
    option::of(json_value().prop_filter("null is absent", |v| !v.is_null()))
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite().prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec((text(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn plan() -> impl Strategy<Value = Plan> {
    prop::sample::select(Plan::VARIANTS.to_vec())
}

fn memory_extra() -> impl Strategy<Value = MemoryExtra> {
    (
        option::of(text()),
        option::of(text()),
        option::of(text()),
        option::of(text()),
        option::of(any::<i64>()),
        option::of(any::<i64>()),
    )
        .prop_map(
            |(user_id, agent_id, session_id, metadata, expires_at, occurred_at)| MemoryExtra {
                user_id,
                agent_id,
                session_id,
                metadata,
                expires_at,
                occurred_at,
            },
        )
}

fn memory_type() -> impl Strategy<Value = MemoryType> {
    prop::sample::select(MemoryType::VARIANTS.to_vec())
}

fn tokens() -> impl Strategy<Value = Tokens> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(p, c, t)| Tokens {
        prompt_tokens: p,
        completion_tokens: c,
        total_tokens: t,
    })
}

/// Audit entries with `created_at` anywhere `f64` fields anything but NaN: what the codec must
/// carry.
fn audit_entry_with(floats: fn() -> BoxedStrategy<f64>) -> impl Strategy<Value = AuditEntry> {
    (
        (
            uuid(),
            text(),
            option::of(text()),
            option::of(text()),
            option::of(text()),
            option::of(text()),
            option::of(text()),
        ),
        (
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            option::of(any::<i64>()),
            option::of(text()),
            option::of(floats()),
            floats(),
            floats(),
        ),
        (
            option::of(tokens()),
            optional_json(),
            any::<i64>(),
            option::of(any::<[u8; 32]>()),
        ),
    )
        .prop_map(
            |(
                (id, action, model_id, project_id, gateway_id, ip_address, user_agent),
                (
                    http_status,
                    is_success,
                    is_cache_hit,
                    error_code,
                    error_msg,
                    duration,
                    credits_consumed,
                    balance_consumed_usd,
                ),
                (tokens, metadata, created_at, detail_hash),
            )| AuditEntry {
                id,
                action,
                model_id,
                project_id,
                gateway_id,
                ip_address,
                user_agent,
                http_status,
                is_success,
                is_cache_hit,
                error_code,
                error_msg,
                duration,
                credits_consumed,
                balance_consumed_usd,
                tokens,
                metadata,
                created_at,
                detail_hash,
            },
        )
}

fn detail() -> impl Strategy<Value = AuditDetail> {
    (
        optional_json(),
        optional_json(),
        option::of(vec(text(), 0..3)),
        option::of(vec(json_value(), 0..3)),
        option::of(text()),
    )
        .prop_map(
            |(request_body, input_content, memory_query, memory_results, response_json)| {
                AuditDetail {
                    request_body,
                    input_content,
                    memory_query,
                    memory_results,
                    response_json,
                    ..Default::default()
                }
            },
        )
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (uuid(), text(), plan(), any::<bool>(), float(), any::<i64>()).prop_map(
            |(tenant_id, name, plan, subscription_active, credits, created_at)| {
                Event::TenantCreated(TenantCreated {
                    tenant_id,
                    name,
                    plan,
                    subscription_active,
                    credits,
                    created_at,
                })
            }
        ),
        (
            uuid(),
            option::of(text()),
            option::of(plan()),
            option::of(any::<bool>()),
            option::of(float()),
            any::<i64>()
        )
            .prop_map(
                |(tenant_id, name, plan, subscription_active, credits, updated_at)| {
                    Event::TenantUpdated(TenantUpdated {
                        tenant_id,
                        name,
                        plan,
                        subscription_active,
                        credits,
                        updated_at,
                    })
                }
            ),
        (
            uuid(),
            uuid(),
            any::<[u8; 32]>(),
            prop::sample::subsequence(Permission::VARIANTS.to_vec(), 0..=4),
            option::of(text()),
            any::<i64>()
        )
            .prop_map(
                |(key_id, tenant_id, key_hash, permissions, name, created_at)| {
                    Event::KeyIssued(KeyIssued {
                        key_id,
                        tenant_id,
                        key_hash,
                        permissions,
                        name,
                        created_at,
                        scope: None,
                    })
                }
            ),
        (uuid(), uuid(), any::<i64>()).prop_map(|(key_id, tenant_id, revoked_at)| {
            Event::KeyRevoked(KeyRevoked {
                key_id,
                tenant_id,
                revoked_at,
            })
        }),
        (uuid(), audit_entry_with(|| float().boxed()), detail()).prop_map(
            |(tenant_id, entry, detail)| {
                Event::AuditRecorded(Box::new(AuditRecorded {
                    tenant_id,
                    entry,
                    detail,
                    sealed: None,
                    sealed_detail: None,
                }))
            }
        ),
        (
            uuid(),
            uuid(),
            text(),
            memory_type(),
            float(),
            any::<i64>(),
            text(),
            vec(any::<u8>(), 0..64),
            option::of(memory_extra())
        )
            .prop_map(
                |(
                    memory_id,
                    tenant_id,
                    content,
                    memory_type,
                    importance,
                    created_at,
                    model,
                    vector,
                    extra,
                )| {
                    Event::MemoryCreated(MemoryCreated {
                        memory_id,
                        tenant_id,
                        content,
                        memory_type,
                        importance,
                        created_at,
                        model,
                        vector,
                        extra,
                        sealed: None,
                    })
                }
            ),
        (
            uuid(),
            uuid(),
            option::of(text()),
            option::of(float()),
            any::<i64>(),
            option::of(text()),
            option::of(vec(any::<u8>(), 0..64)),
            option::of(
                (
                    any::<bool>(),
                    option::of(text()),
                    any::<bool>(),
                    option::of(any::<i64>()),
                    any::<bool>(),
                    option::of(any::<i64>())
                )
                    .prop_map(
                        |(
                            set_metadata,
                            metadata,
                            set_expires_at,
                            expires_at,
                            set_occurred_at,
                            occurred_at,
                        )| {
                            MemoryAmend {
                                set_metadata,
                                metadata,
                                set_expires_at,
                                expires_at,
                                set_occurred_at,
                                occurred_at,
                            }
                        }
                    )
            )
        )
            .prop_map(
                |(memory_id, tenant_id, content, importance, updated_at, model, vector, amend)| {
                    Event::MemoryUpdated(MemoryUpdated {
                        memory_id,
                        tenant_id,
                        content,
                        importance,
                        updated_at,
                        model,
                        vector,
                        amend,
                        sealed: None,
                    })
                }
            ),
        (uuid(), uuid(), any::<i64>()).prop_map(|(memory_id, tenant_id, deleted_at)| {
            Event::MemoryDeleted(MemoryDeleted {
                memory_id,
                tenant_id,
                deleted_at,
            })
        }),
        (uuid(), memory_type(), vec(uuid(), 0..5), any::<i64>()).prop_map(
            |(tenant_id, memory_type, memory_ids, deleted_at)| {
                Event::MemoriesDeletedByType(MemoriesDeletedByType {
                    tenant_id,
                    memory_type,
                    memory_ids,
                    deleted_at,
                })
            }
        ),
        (uuid(), float(), float(), any::<i64>()).prop_map(|(tenant_id, credits, usd, at)| {
            Event::CreditsConsumed(CreditsConsumed {
                tenant_id,
                credits,
                usd,
                at,
            })
        }),
        (uuid(), vec(uuid(), 0..5), any::<i64>()).prop_map(
            |(tenant_id, memory_ids, deleted_at)| {
                Event::MemoriesDeleted(MemoriesDeleted {
                    tenant_id,
                    memory_ids,
                    deleted_at,
                })
            }
        ),
        (uuid(), vec(uuid(), 0..5), any::<i64>()).prop_map(
            |(tenant_id, memory_ids, expired_at)| {
                Event::MemoriesExpired(MemoriesExpired {
                    tenant_id,
                    memory_ids,
                    expired_at,
                })
            }
        ),
        (uuid(), uuid(), uuid(), any::<i64>()).prop_map(
            |(memory_id, tenant_id, superseded_by, superseded_at)| {
                Event::MemorySuperseded(MemorySuperseded {
                    memory_id,
                    tenant_id,
                    superseded_by,
                    superseded_at,
                })
            }
        ),
    ]
}

/// Stored records of a chain over `events` (seq from 1), as the appender writes them.
fn seal_chain(events: &[(i64, Vec<u8>)]) -> Vec<(u64, Vec<u8>)> {
    let mut prev = [0u8; 32];
    events
        .iter()
        .enumerate()
        .map(|(i, (ts, event))| {
            let seq = i as u64 + 1;
            let (hash, bytes) = Record::seal_encoded(seq, *ts, &prev, event);
            prev = hash;
            (seq, bytes)
        })
        .collect()
}

fn verify(stored: &[(u64, Vec<u8>)], chunk: usize) -> auditmem::log::verify::Report {
    let mut v = Verifier::new([]);
    for part in stored.chunks(chunk.max(1)) {
        v.feed(part);
    }
    v.finish(None, &[], None)
}

/// Events as the log holds them: real encodings, and raw bytes (the chain must not care).
fn chain_events() -> impl Strategy<Value = Vec<(i64, Vec<u8>)>> {
    vec(
        (
            any::<i64>(),
            prop_oneof![
                event().prop_map(|e| e.encode().expect("encode")),
                vec(any::<u8>(), 0..300),
            ],
        ),
        1..24,
    )
}

// ---------------------------------------------------------------------------------------------
// Event and record codecs
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn event_encode_then_decode_is_identity(e in event()) {
        let bytes = e.encode().expect("encode");
        prop_assert_eq!(&Event::decode(&bytes).expect("decode"), &e);
        // Lists and exports read the entry alone: the same entry as the full decode.
        let want = match &e {
            Event::AuditRecorded(rec) => Some((rec.tenant_id, rec.entry.clone())),
            _ => None,
        };
        prop_assert_eq!(Event::decode_audit_entry(&bytes).expect("decode entry"), want);
    }

    #[test]
    fn record_encode_then_decode_is_identity(
        seq in any::<u64>(),
        ts in any::<i64>(),
        prev in any::<[u8; 32]>(),
        event in vec(any::<u8>(), 0..600),
    ) {
        let r = Record::seal(seq, ts, prev, event.clone());
        let bytes = r.encode();
        prop_assert_eq!(&Record::decode(&bytes).expect("decode"), &r);
        prop_assert_eq!(Record::seal_encoded(seq, ts, &prev, &event), (r.hash, bytes.clone()));
        let rr = RecordRef::decode(&bytes).expect("decode ref");
        prop_assert_eq!((rr.seq, rr.ts_micros, rr.prev, rr.hash, rr.event), (seq, ts, &prev[..], &r.hash[..], &event[..]));
        prop_assert_eq!(rr.computed_hash(), r.hash);
        prop_assert!(auditmem::log::record::is_canonical(&bytes, &rr));
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..512)) {
        let _ = Event::decode(&bytes);
        let _ = Event::decode_audit_entry(&bytes);
        let _ = Record::decode(&bytes);
        let _ = RecordRef::decode(&bytes);
        let _ = verify(&[(1, bytes.clone())], 1);
        // A stored value is split into records by where each decoded record ends: the pieces
        // cover the value exactly, in order, whatever it holds.
        let mut end = 0;
        for p in auditmem::log::record::pieces(&bytes) {
            prop_assert_eq!(p.range.start, end);
            end = p.range.end;
        }
        prop_assert_eq!(end, bytes.len());
    }

    #[test]
    fn decoders_never_panic_on_damaged_encodings(
        e in event(),
        damage in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        // Random bytes rarely get past the first marker; a real encoding with a few bytes
        // changed, or cut short, reaches every level of the decoders.
        let mut bytes = e.encode().expect("encode");
        for (at, b) in damage {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let _ = Event::decode(&bytes);
        let _ = Event::decode_audit_entry(&bytes);
        let short = &bytes[..cut.index(bytes.len() + 1)];
        let _ = Event::decode(short);
        let _ = Event::decode_audit_entry(short);
        let record = Record::seal(1, 0, [0; 32], bytes).encode();
        let _ = Record::decode(&record[..cut.index(record.len() + 1)]);
        let _ = RecordRef::decode(&record[..cut.index(record.len() + 1)]);
    }
}

// ---------------------------------------------------------------------------------------------
// The hash chain
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn appended_chains_verify(events in chain_events(), chunk in 1usize..8) {
        let stored = seal_chain(&events);
        let rep = verify(&stored, chunk);
        prop_assert!(rep.clean(), "{}", rep.render());
        prop_assert_eq!((rep.valid, rep.records, rep.head_seq), (stored.len() as u64, stored.len() as u64, stored.len() as u64));
    }

    #[test]
    fn changing_any_byte_of_any_record_is_detected(
        events in chain_events(),
        record in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let mut stored = seal_chain(&events);
        let i = record.index(stored.len());
        let j = byte.index(stored[i].1.len());
        stored[i].1[j] ^= xor;
        let rep = verify(&stored, 4);
        prop_assert!(!rep.clean(), "record {} byte {} ^ {:#04x} went unnoticed", i + 1, j, xor);
        // The damage is reported at the damaged record or the next (a changed link field).
        let first = rep.first_failure().expect("a failure").seq;
        prop_assert!(first == i as u64 + 1 || first == i as u64 + 2, "{}", rep.render());
    }
}

proptest! {
    // Each case opens a sled database: fewer of them.
    #![proptest_config(cases(32))]

    #[test]
    fn stored_chains_verify_and_changed_bytes_are_caught_in_the_tree(
        events in chain_events(),
        record in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree(auditmem::log::LOG_TREE).expect("tree");
        let mut stored = seal_chain(&events);
        for (seq, bytes) in &stored {
            tree.insert(seq.to_be_bytes(), bytes.clone()).expect("insert");
        }
        let rep = verify_tree(&tree, None, &[], None, &|_| {});
        prop_assert!(rep.clean(), "{}", rep.render());
        let i = record.index(stored.len());
        let j = byte.index(stored[i].1.len());
        stored[i].1[j] ^= xor;
        tree.insert(stored[i].0.to_be_bytes(), stored[i].1.clone()).expect("insert");
        let rep = verify_tree(&tree, None, &[], None, &|_| {});
        prop_assert!(!rep.clean(), "record {} byte {} ^ {:#04x} went unnoticed", i + 1, j, xor);
    }
}

proptest! {
    #![proptest_config(cases(64))]

    /// The appender's layout: group commits cut into chunks of consecutive records, one sled
    /// key each. A chain stored so verifies; any byte of any chunk changed is caught, at a
    /// record of that chunk or the first after it.
    #[test]
    fn chunked_chains_verify_and_changed_bytes_are_caught_in_their_chunk(
        events in chain_events(),
        groups in vec(1usize..80, 1..40),
        chunk in any::<prop::sample::Index>(),
        byte in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let tree = db.open_tree(auditmem::log::LOG_TREE).expect("tree");
        let stored = seal_chain(&events);
        let mut values: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut records = stored.iter();
        for size in groups.iter().cycle() {
            let mut chunks = auditmem::log::record::Chunker::default();
            for (seq, bytes) in records.by_ref().take(*size) {
                chunks.push(*seq, bytes.clone());
            }
            let group = chunks.finish();
            if group.is_empty() {
                break;
            }
            values.extend(group);
        }
        for (key, value) in &values {
            tree.insert(key.to_be_bytes(), value.clone()).expect("insert");
        }
        let rep = verify_tree(&tree, None, &[], None, &|_| {});
        prop_assert!(rep.clean(), "{}", rep.render());
        prop_assert_eq!((rep.records, rep.head_seq), (stored.len() as u64, stored.len() as u64));
        let i = chunk.index(values.len());
        let (key, mut value) = values[i].clone();
        let j = byte.index(value.len());
        value[j] ^= xor;
        tree.insert(key.to_be_bytes(), value).expect("insert");
        let rep = verify_tree(&tree, None, &[], None, &|_| {});
        prop_assert!(!rep.clean(), "chunk {} byte {} ^ {:#04x} went unnoticed", key, j, xor);
        let next = values.get(i + 1).map_or(stored.len() as u64 + 1, |(k, _)| *k);
        let first = rep.first_failure().expect("a failure").seq;
        prop_assert!((key..=next).contains(&first), "chunk {key}..{next}: {}", rep.render());
    }
}

// ---------------------------------------------------------------------------------------------
// The audit list's query parser
// ---------------------------------------------------------------------------------------------

/// Percent-encodes every byte but unreserved ones (as a client would).
fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The query map the handler gets for `query`, through axum's own extractor; `None` when no
/// HTTP request could carry it (not a valid URI).
fn extract(query: &str) -> Option<HashMap<String, String>> {
    let uri: axum::http::Uri = format!("/v1/audit/logs?{query}").parse().ok()?;
    let axum::extract::Query(map) =
        axum::extract::Query::<HashMap<String, String>>::try_from_uri(&uri)
            .unwrap_or_else(|e| panic!("the query map extractor refused {query:?}: {e}"));
    Some(map)
}

const PARAMS: [&str; 7] = [
    "start_time",
    "end_time",
    "action",
    "page",
    "page_size",
    "cursor",
    "other",
];

fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>().prop_map(|s| pct(&s)),
        "[-+0-9:TZ. %&=]{0,30}",
        "-?[0-9]{1,22}",
        "20[0-9]{2}-[01][0-9]-[0-3][0-9](T[0-2][0-9]:[0-5][0-9](:[0-6][0-9](\\.[0-9]{1,9})?)?)?(Z|[+-][01][0-9]:[0-5][0-9])?",
        "[A-Za-z0-9_-]{0,40}",
    ]
}

/// Micros that chrono can format and parse back (years 1 to 9999).
fn time_micros() -> impl Strategy<Value = i64> {
    -62_135_596_800_000_000i64..253_402_300_799_999_999i64
}

fn rfc3339(micros: i64, offset_minutes: i32) -> String {
    let t = chrono::DateTime::from_timestamp_micros(micros).expect("in range");
    match chrono::FixedOffset::east_opt(offset_minutes * 60) {
        Some(off) if offset_minutes != 0 => t
            .with_timezone(&off)
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, false),
        _ => t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn any_query_parses_or_is_a_400(
        pairs in vec((prop::sample::select(PARAMS.to_vec()), query_value()), 0..6),
        raw in any::<String>(),
    ) {
        let built: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        for query in [built.join("&"), raw] {
            let Some(map) = extract(&query) else { continue };
            match params::<AuditListQuery>(&map) {
                Ok(q) => {
                    prop_assert!(q.page >= 1 && (1..=100).contains(&q.page_size), "{:?}", q);
                    if let (Some(s), Some(e)) = (q.start, q.end) {
                        prop_assert!(s <= e);
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e.code, ErrorCode::BadRequest, "{:?}", e);
                    prop_assert_eq!(e.code.status().as_u16(), 400);
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn valid_parameters_round_trip(
        times in option::of((time_micros(), 0i64..1_000_000_000_000, -14 * 60..=14 * 60i32)),
        start_only in any::<bool>(),
        page in option::of(1usize..1_000_000),
        page_size in option::of(1usize..1_000),
        action in option::of("[a-z]{1,8}(\\.[a-z_]{1,8}){0,2}"),
        cursor in option::of((any::<i64>(), any::<u64>(), any::<u64>())),
    ) {
        let mut query = Vec::new();
        let (mut start, mut end) = (None, None);
        if let Some((s, span, offset)) = times {
            let e = s.saturating_add(span).min(253_402_300_799_999_999);
            query.push(format!("start_time={}", pct(&rfc3339(s, offset))));
            start = Some(s);
            if !start_only {
                query.push(format!("end_time={}", pct(&rfc3339(e, -offset))));
                end = Some(e);
            }
        }
        if let Some(p) = page {
            query.push(format!("page={p}"));
        }
        if let Some(p) = page_size {
            query.push(format!("page_size={p}"));
        }
        if let Some(a) = &action {
            query.push(format!("action={}", pct(a)));
        }
        let cursor = cursor.map(|(created_at, seq, snapshot)| Cursor { created_at, seq, snapshot });
        if let Some(c) = &cursor {
            query.push(format!("cursor={}", c.encode()));
        }
        let query = query.join("&");
        let map = extract(&query).expect("a valid URI");
        let parsed = params::<AuditListQuery>(&map);
        prop_assert_eq!(
            parsed.as_ref().ok(),
            Some(&ListQuery {
                start,
                end,
                page: page.unwrap_or(1),
                page_size: page_size.unwrap_or(50).min(100),
                action,
                cursor,
            }),
            "{} gave {:?}", query, parsed
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The audit index's sorted blocks (bit-packed once full)
// ---------------------------------------------------------------------------------------------

/// Keys as the audit index meets them: mostly ascending (a tenant's entries as they are
/// appended), with late ones anywhere and extreme magnitudes, in runs long enough to fill,
/// seal and split several 2,048-pair blocks.
fn index_keys() -> impl Strategy<Value = Vec<(i64, u64)>> {
    let step = prop_oneof![
        8 => (0i64..5_000, 1u64..50).prop_map(|(dt, ds)| (dt, ds, false)),
        1 => (any::<i64>(), any::<u64>()).prop_map(|(t, s)| (t, s, true)),
        1 => (-5_000_000i64..0, 1u64..50).prop_map(|(dt, ds)| (dt, ds, false)),
    ];
    (any::<i64>(), any::<u64>(), vec(step, 1..7_000)).prop_map(|(t0, s0, steps)| {
        let (mut t, mut s) = (t0 / 2, s0 / 2);
        steps
            .into_iter()
            .map(|(dt, ds, absolute)| {
                if absolute {
                    (dt, ds)
                } else {
                    t = t.saturating_add(dt);
                    s = s.wrapping_add(ds);
                    (t, s)
                }
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn the_sorted_index_answers_as_a_sorted_vector(
        keys in index_keys(),
        probes in vec(any::<i64>(), 8),
        in_file in any::<bool>(),
    ) {
        use auditmem::projections::sorted_index::{BlockFile, SortedIndex};
        // On the heap, or with its sealed blocks in a block file (as the service runs it).
        let dir = tempfile::tempdir().expect("tempdir");
        let file = in_file.then(|| BlockFile::in_dir(dir.path()));
        let mut idx = SortedIndex::with_file(file);
        for k in &keys {
            idx.insert(*k).expect("insert");
        }
        let mut want = keys.clone();
        want.sort_unstable();
        want.dedup();
        let all = |it: &mut dyn Iterator<Item = std::io::Result<(i64, u64)>>| {
            it.collect::<std::io::Result<Vec<_>>>().expect("read")
        };
        prop_assert_eq!(idx.len(), want.len());
        prop_assert_eq!(all(&mut idx.between(0, want.len())), want.clone());
        let rev: Vec<(i64, u64)> = want.iter().rev().copied().collect();
        prop_assert_eq!(all(&mut idx.rev_from(want.len())), rev);
        for (i, k) in want.iter().enumerate().step_by(101) {
            prop_assert_eq!(idx.get(i).expect("get"), Some(*k));
            prop_assert_eq!(idx.rank(*k).expect("rank"), i);
        }
        // Ranges by time, with probes inside and outside the keys, match a filter.
        let times: Vec<i64> = probes.iter().copied().chain(want.iter().step_by(997).map(|k| k.0)).collect();
        for pair in times.windows(2) {
            let (from, to) = (pair[0].min(pair[1]), pair[0].max(pair[1]));
            let (lo, hi) = idx.range(from, to).expect("range");
            let n = want.iter().filter(|k| from <= k.0 && k.0 <= to).count();
            prop_assert_eq!(hi - lo, n);
            let page = idx.descending(lo, hi, 3, 50).expect("page");
            let expect: Vec<(i64, u64)> = want[lo..hi].iter().rev().skip(3).take(50).copied().collect();
            prop_assert_eq!(page, expect);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The CSV of exports
// ---------------------------------------------------------------------------------------------

fn read_csv(bytes: &[u8]) -> Vec<Vec<String>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes)
        .records()
        .map(|r| {
            r.expect("a CSV record")
                .iter()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

fn sample_ref(entry: &AuditEntry) -> AuditRef {
    AuditRef {
        id: entry.id,
        seq: 7,
        tenant_id: Uuid::from_u128(1),
        created_at: entry.created_at,
        action_key: 1,
        chain_index: 3,
        hash: [7; 32],
        prev_hash: [9; 32],
    }
}

/// Entries as the service can hold them: times chrono can show, finite numbers, and no empty
/// text (ingestion and the gate store empty text as absent: a CSV cell cannot tell "" from
/// null, so an entry holding "" could not be verified from its CSV export).
fn showable_entry() -> impl Strategy<Value = AuditEntry> {
    (audit_entry_with(|| finite().boxed()), time_micros()).prop_map(|(mut e, t)| {
        e.created_at = t;
        if e.action.is_empty() {
            e.action = "gateway.chat".into();
        }
        for field in [
            &mut e.model_id,
            &mut e.project_id,
            &mut e.gateway_id,
            &mut e.ip_address,
            &mut e.user_agent,
            &mut e.error_msg,
        ] {
            if field.as_deref() == Some("") {
                *field = None;
            }
        }
        e
    })
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn csv_cells_read_back_as_written(rows_in in vec(vec(text(), 1..6), 1..6), width in 1usize..6) {
        // Every row as wide as the header, as in an export.
        let rows_in: Vec<Vec<String>> = rows_in
            .into_iter()
            .map(|mut r| { r.resize(width, String::new()); r })
            .collect();
        // Behind a header row, as in an export (a reader drops a byte order mark at the very
        // start of a file: a first cell starting with U+FEFF would lose it).
        let header: Vec<String> = (0..width).map(|i| format!("c{i}")).collect();
        let mut w = rows::csv_writer(Vec::new());
        w.write_record(&header).expect("header");
        for r in &rows_in {
            w.write_record(r).expect("write");
        }
        let bytes = w.into_inner().expect("flush");
        let table = read_csv(&bytes);
        prop_assert_eq!(&table[0], &header);
        prop_assert_eq!(&table[1..], &rows_in[..]);
    }

    #[test]
    fn exported_csv_rows_read_back_as_the_list_shows_them(
        entries in vec(showable_entry(), 1..4),
        with_chain in any::<bool>(),
    ) {
        let columns = rows::columns(with_chain);
        let mut w = rows::csv_writer(Vec::new());
        rows::write_header(&mut w, with_chain).expect("header");
        let mut cell = Vec::new();
        for e in &entries {
            rows::write_csv_row(&mut w, e, &sample_ref(e), with_chain, &mut cell).expect("row");
        }
        let bytes = w.into_inner().expect("flush");
        // The cells themselves come back.
        let table = read_csv(&bytes);
        prop_assert_eq!(table.len(), entries.len() + 1);
        for (row, e) in table[1..].iter().zip(&entries) {
            let cells: Vec<String> = rows::csv_cells(e, &sample_ref(e), with_chain);
            prop_assert_eq!(row, &cells);
        }
        // And what `verify --export` parses is what the list shows (the chain hashes those).
        let parsed = rows::parse(&bytes).expect("parse");
        for (got, e) in parsed.iter().zip(&entries) {
            let want = serde_json::to_value(ListedEntry::new(e.clone(), &sample_ref(e), false)).expect("json");
            for c in &columns[..rows::columns(false).len()] {
                prop_assert_eq!(&got[&c.name], &want[&c.name], "column {}", c.name);
            }
        }
    }
}

/// Regression, found by `changing_any_byte_of_any_record_is_detected` in a probe: msgpack has
/// several encodings of one integer, so a record whose timestamp marker went from uint 64 to
/// int 64 decoded to the same fields and hash, and verify called the chain intact.
#[test]
fn a_re_encoded_record_is_detected() {
    let stored = seal_chain(&[(1_700_000_000_000_000, b"event".to_vec())]);
    let mut bytes = stored[0].1.clone();
    assert_eq!(bytes[..3], [0x95, 0x01, 0xcf]);
    bytes[2] = 0xd3;
    assert_eq!(
        Record::decode(&bytes).ok(),
        Record::decode(&stored[0].1).ok()
    );
    let rep = verify(&[(1, bytes)], 1);
    assert!(!rep.clean(), "{}", rep.render());
}
