//! The event codec's tests: round trips, older layouts and versions, and the closed sets'
//! names.

use serde_json::Value;

use super::*;
use crate::seal::{Keyring, Subject};

fn sample_audit() -> Event {
    Event::AuditRecorded(Box::new(AuditRecorded {
        tenant_id: Uuid::now_v7(),
        entry: AuditEntry {
            id: Uuid::now_v7(),
            action: "memory.write".into(),
            model_id: None,
            project_id: Some("p1".into()),
            gateway_id: None,
            ip_address: Some("127.0.0.1".into()),
            user_agent: Some("curl/8".into()),
            http_status: 200,
            is_success: true,
            is_cache_hit: false,
            error_code: None,
            error_msg: None,
            duration: Some(1.5),
            credits_consumed: 0.0,
            balance_consumed_usd: 0.0,
            tokens: Some(Tokens {
                prompt_tokens: 1,
                completion_tokens: 2,
                total_tokens: 3,
            }),
            metadata: Some(serde_json::json!({"team": "a", "n": [1, 2.5, -3]})),
            created_at: 1_700_000_000_123_000,
            detail_hash: Some([5; 32]),
        },
        detail: AuditDetail {
            request_body: Some(serde_json::json!({"content": "x"})),
            response_ref: Some(ResponseRef::List(ListRef {
                from: -5,
                to: i64::MAX,
                action: Some("gateway.chat".into()),
                after: Some((7, 8)),
                at_seq: 9,
                page: 1,
                page_size: 2,
                seqs: vec![3, 1],
                total: 2,
                next_cursor: None,
                show_hash: true,
            })),
            ..Default::default()
        },
        sealed: None,
        sealed_detail: None,
    }))
}

#[test]
fn audit_records_written_before_the_detail_hash_and_references_decode() {
    // An AuditRecorded as this build wrote it before `detail_hash` (entry) and
    // `response_ref` (detail) existed: both read back as None, in both layouts.
    #[derive(Serialize)]
    struct OldEntry {
        id: Uuid,
        action: String,
        model_id: Option<String>,
        project_id: Option<String>,
        gateway_id: Option<String>,
        ip_address: Option<String>,
        user_agent: Option<String>,
        http_status: u16,
        is_success: bool,
        is_cache_hit: bool,
        error_code: Option<i64>,
        error_msg: Option<String>,
        duration: Option<f64>,
        credits_consumed: f64,
        balance_consumed_usd: f64,
        tokens: Option<Tokens>,
        metadata: Option<Value>,
        created_at: i64,
    }
    #[derive(Serialize)]
    struct OldDetail {
        request_body: Option<Value>,
        response_body: Option<Value>,
        input_content: Option<Value>,
        output_content: Option<Value>,
        rag_query: Option<Vec<String>>,
        rag_results: Option<Vec<Value>>,
        memory_query: Option<Vec<String>>,
        memory_results: Option<Vec<Value>>,
        response_json: Option<String>,
    }
    #[derive(Serialize)]
    struct OldRecorded {
        tenant_id: Uuid,
        entry: OldEntry,
        detail: OldDetail,
    }
    #[derive(Serialize)]
    enum OldEvent {
        AuditRecorded(OldRecorded),
    }
    let Event::AuditRecorded(mut rec) = sample_audit() else {
        unreachable!()
    };
    rec.entry.detail_hash = None;
    rec.detail.response_ref = None;
    rec.detail.response_json = Some("{\"success\":true}".into());
    let e = rec.entry.clone();
    let d = rec.detail.clone();
    let old = OldEvent::AuditRecorded(OldRecorded {
        tenant_id: rec.tenant_id,
        entry: OldEntry {
            id: e.id,
            action: e.action,
            model_id: e.model_id,
            project_id: e.project_id,
            gateway_id: e.gateway_id,
            ip_address: e.ip_address,
            user_agent: e.user_agent,
            http_status: e.http_status,
            is_success: e.is_success,
            is_cache_hit: e.is_cache_hit,
            error_code: e.error_code,
            error_msg: e.error_msg,
            duration: e.duration,
            credits_consumed: e.credits_consumed,
            balance_consumed_usd: e.balance_consumed_usd,
            tokens: e.tokens,
            metadata: e.metadata,
            created_at: e.created_at,
        },
        detail: OldDetail {
            request_body: d.request_body,
            response_body: d.response_body,
            input_content: d.input_content,
            output_content: d.output_content,
            rag_query: d.rag_query,
            rag_results: d.rag_results,
            memory_query: d.memory_query,
            memory_results: d.memory_results,
            response_json: d.response_json,
        },
    });
    let want = Event::AuditRecorded(rec.clone());
    for bytes in [
        rmp_serde::to_vec(&(2u16, &old)).expect("encode"),
        rmp_serde::to_vec_named(&(1u16, &old)).expect("encode"),
    ] {
        assert_eq!(Event::decode(&bytes).expect("decode"), want);
        assert_eq!(
            Event::decode_audit_entry(&bytes).expect("entry"),
            Some((rec.tenant_id, rec.entry.clone()))
        );
    }
}

#[test]
fn event_round_trips_through_msgpack() {
    let event = sample_audit();
    let bytes = event.encode().expect("encode");
    assert_eq!(Event::decode(&bytes).expect("decode"), event);
}

#[test]
fn newer_format_version_is_refused() {
    let bytes = rmp_serde::to_vec(&(EVENT_FORMAT_VERSION + 1, sample_audit())).expect("encode");
    assert!(
        matches!(Event::decode(&bytes), Err(EventCodecError::Version(v)) if v == EVENT_FORMAT_VERSION + 1)
    );
}

#[test]
fn audit_entry_decodes_alone_from_both_layouts() {
    let event = sample_audit();
    let Event::AuditRecorded(rec) = &event else {
        unreachable!()
    };
    let want = Some((rec.tenant_id, rec.entry.clone()));
    let v2 = event.encode().expect("encode");
    assert!(
        audit_head_v2(&v2, false).expect("v2").is_some(),
        "v2 takes the light path"
    );
    assert_eq!(Event::decode_audit_entry(&v2).expect("v2"), want);
    let v1 = rmp_serde::to_vec_named(&(1u16, &event)).expect("encode");
    assert_eq!(Event::decode_audit_entry(&v1).expect("v1"), want);
    let other = Event::CreditsConsumed(CreditsConsumed {
        tenant_id: rec.tenant_id,
        credits: 1.0,
        usd: 0.001,
        at: 1,
    })
    .encode()
    .expect("encode");
    assert_eq!(Event::decode_audit_entry(&other).expect("other"), None);
    let newer = rmp_serde::to_vec(&(EVENT_FORMAT_VERSION + 1, &event)).expect("encode");
    assert!(matches!(
        Event::decode_audit_entry(&newer),
        Err(EventCodecError::Version(_))
    ));
}

#[test]
fn version_1_named_maps_still_decode() {
    let event = sample_audit();
    let v1 = rmp_serde::to_vec_named(&(1u16, &event)).expect("encode");
    let v2 = event.encode().expect("encode");
    assert!(v2.len() * 2 < v1.len(), "{} vs {}", v2.len(), v1.len());
    assert_eq!(Event::decode(&v1).expect("decode v1"), event);
}

#[test]
fn missing_trailing_fields_decode_with_defaults() {
    // A record written before a field existed must still decode: new fields go last and
    // default, in both the array (v2) and the named-map (v1) layout.
    #[derive(Serialize)]
    struct OldUpdate {
        tenant_id: Uuid,
        name: Option<String>,
    }
    #[derive(Serialize)]
    enum OldEvent {
        TenantUpdated(OldUpdate),
    }
    #[derive(Deserialize, Debug)]
    struct Grown {
        tenant_id: Uuid,
        name: Option<String>,
        #[serde(default)]
        added_later: Option<u32>,
    }
    let id = Uuid::now_v7();
    let old = OldUpdate {
        tenant_id: id,
        name: Some("a".into()),
    };
    for bytes in [
        rmp_serde::to_vec(&old).expect("encode"),
        rmp_serde::to_vec_named(&old).expect("encode"),
    ] {
        let g: Grown = rmp_serde::from_slice(&bytes).expect("decode");
        assert_eq!(
            (g.tenant_id, g.name.as_deref(), g.added_later),
            (id, Some("a"), None)
        );
    }
    // A v1 event missing a required field is refused, never completed with an invented value.
    let bytes = rmp_serde::to_vec_named(&(
        1u16,
        OldEvent::TenantUpdated(OldUpdate {
            tenant_id: id,
            name: None,
        }),
    ))
    .expect("encode");
    let err = Event::decode(&bytes);
    assert!(err.is_err(), "{err:?}");
}

/// Every name parses back to its value, serde writes the same name (events and the API
/// store and show serde's), and a name outside the set is refused listing the set.
fn names_round_trip<
    T: Named + std::str::FromStr<Err = String> + Serialize + PartialEq + std::fmt::Debug,
>() {
    for v in T::VARIANTS.iter().copied() {
        assert_eq!(v.as_str().parse::<T>(), Ok(v));
        assert_eq!(
            serde_json::to_value(v).expect("json"),
            serde_json::Value::from(v.as_str())
        );
    }
    assert!("gold".parse::<T>().is_err());
}

#[test]
fn names_parse_and_print() {
    names_round_trip::<Plan>();
    names_round_trip::<Permission>();
    names_round_trip::<MemoryType>();
    names_round_trip::<ExportFormat>();
    assert_eq!(
        "gold".parse::<Plan>(),
        Err("unknown plan 'gold' (expected free, basic, pro, business or custom)".into())
    );
    assert_eq!(
        "x".parse::<Permission>(),
        Err("unknown permission 'x' (expected audit.read, audit.export, memory.read, memory.write, memory.erase or webhooks.manage)".into())
    );
    assert_eq!(
        "opinion".parse::<MemoryType>(),
        Err("unknown memory_type 'opinion' (expected rule, fact or context)".into())
    );
}

/// `sample_audit` sealed under alice's key, as the gate writes it.
fn sealed_sample(ring: &crate::seal::MemoryKeyring) -> (AuditRecorded, AuditRecorded) {
    let Event::AuditRecorded(rec) = sample_audit() else {
        unreachable!()
    };
    let mut plain = *rec;
    plain.entry.error_msg = Some("no such user 078-05-1120".into());
    plain.detail.memory_query = Some(vec!["078-05-1120".into()]);
    let alice = crate::seal::Subject::User(plain.tenant_id, "alice".into());
    let sealed = AuditRecorded::sealed_for(
        plain.tenant_id,
        plain.entry.clone(),
        plain.detail.clone(),
        ring,
        &[alice],
    )
    .expect("seal");
    (plain, sealed)
}

#[test]
fn a_sealed_audit_record_holds_no_personal_field_in_the_clear() {
    let ring = crate::seal::MemoryKeyring::default();
    let (plain, sealed) = sealed_sample(&ring);
    let bytes = Event::AuditRecorded(Box::new(sealed.clone()))
        .encode()
        .expect("encode");
    for secret in [
        &b"078-05-1120"[..],
        b"curl/8",
        b"127.0.0.1",
        b"team",
        b"content",
        b"gateway.chat",
    ] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "{}",
            String::from_utf8_lossy(secret)
        );
    }
    // The clear part: the personal fields empty, the clear ones kept.
    assert_eq!(
        (
            &sealed.entry.ip_address,
            &sealed.entry.user_agent,
            &sealed.entry.error_msg,
            &sealed.entry.metadata,
        ),
        (&None, &None, &None, &None)
    );
    assert_eq!(sealed.detail, AuditDetail::default());
    assert_eq!(sealed.entry.project_id, plain.entry.project_id);
    assert_eq!(sealed.entry.tokens, plain.entry.tokens);
    // It decodes whole and through the list's light path, and opens to what was sealed.
    assert_eq!(
        Event::decode(&bytes).expect("decode"),
        Event::AuditRecorded(Box::new(sealed.clone()))
    );
    let head = Event::decode_audit_head(&bytes)
        .expect("head")
        .expect("audit");
    assert_eq!(head.sealed.as_ref(), sealed.sealed.as_ref());
    assert_eq!(head.entry, sealed.entry);
    let Opened::Open(p) = open_personal(&ring, &sealed).expect("open") else {
        panic!("a sealed entry with its key opens")
    };
    assert_eq!(p.detail, plain.detail);
    assert_eq!(p.fields.error_msg, plain.entry.error_msg);
    let mut shown = sealed.entry.clone();
    p.fields.restore_entry(&mut shown);
    shown.detail_hash = plain.entry.detail_hash;
    assert_eq!(shown, plain.entry);
    assert_eq!(
        sealed.entry.detail_hash,
        Some(crate::audit_view::personal_hash(&p))
    );
    // A list item opens the fields alone, from the light path.
    let Opened::Open(fields) =
        open_fields(&ring, head.tenant_id, head.entry.id, head.sealed.as_ref()).expect("open")
    else {
        panic!("opens")
    };
    assert_eq!(*fields, p.fields);
    // Moved to another entry neither part opens.
    assert!(open_fields(
        &ring,
        sealed.tenant_id,
        Uuid::now_v7(),
        head.sealed.as_ref()
    )
    .is_err());
    let mut moved = sealed.clone();
    let mut other = plain.entry.clone();
    other.id = Uuid::now_v7();
    moved.sealed_detail = Some(
        AuditRecorded::sealed_for(
            sealed.tenant_id,
            other,
            plain.detail.clone(),
            &ring,
            &[crate::seal::Subject::User(sealed.tenant_id, "alice".into())],
        )
        .expect("seal")
        .sealed_detail
        .expect("detail"),
    );
    assert!(open_personal(&ring, &moved).is_err());
    // With the key gone it is erased.
    assert_eq!(Event::sealing_of(&bytes), Some(head.sealed.map(|s| s.keys)));
    let keys = sealed.sealed.as_ref().expect("sealed").keys.clone();
    assert_eq!(ring.destroy(&keys).expect("destroy"), 1);
    assert!(matches!(open_personal(&ring, &sealed), Ok(Opened::Erased)));
}

/// An entry with no detail (a gateway entry without bodies) seals its personal fields alone:
/// no sealed detail, and it opens, hashes and erases as an entry with one does.
#[test]
fn an_entry_without_a_detail_seals_its_fields_alone() {
    let ring = crate::seal::MemoryKeyring::default();
    let Event::AuditRecorded(rec) = sample_audit() else {
        unreachable!()
    };
    let plain = *rec;
    let alice = Subject::User(plain.tenant_id, "alice".into());
    let sealed = AuditRecorded::sealed_for(
        plain.tenant_id,
        plain.entry.clone(),
        AuditDetail::default(),
        &ring,
        &[alice],
    )
    .expect("seal");
    assert!(sealed.sealed.is_some());
    assert_eq!(sealed.sealed_detail, None);
    assert_eq!(sealed.detail, AuditDetail::default());
    let bytes = Event::AuditRecorded(Box::new(sealed.clone()))
        .encode()
        .expect("encode");
    for secret in [&b"curl/8"[..], b"127.0.0.1", b"team"] {
        assert!(!bytes.windows(secret.len()).any(|w| w == secret));
    }
    assert_eq!(
        Event::decode(&bytes).expect("decode"),
        Event::AuditRecorded(Box::new(sealed.clone()))
    );
    let Opened::Open(p) = open_personal(&ring, &sealed).expect("open") else {
        panic!("a sealed entry with its key opens")
    };
    assert_eq!(p.detail, AuditDetail::default());
    assert_eq!(p.fields.ip_address.as_deref(), Some("127.0.0.1"));
    assert_eq!(p.fields.metadata, plain.entry.metadata);
    assert_eq!(
        sealed.entry.detail_hash,
        Some(crate::audit_view::personal_hash(&p))
    );
    let keys = sealed.sealed.as_ref().expect("sealed").keys.clone();
    assert_eq!(Event::sealing_of(&bytes), Some(Some(keys.clone())));
    // As stored: the msgpack of the key list, which decodes to the same ids; the same record
    // with its sealed value's fields named reads its ids decoded.
    let Some(Some(KeysRef::Stored(stored))) = Event::sealing_ref(&bytes) else {
        panic!("a sealed entry's key list is read as stored")
    };
    assert_eq!(stored, rmp_serde::to_vec(&keys).expect("encode"));
    assert_eq!(KeysRef::Stored(stored).ids(), Some(keys.clone()));
    let value = sealed.sealed.as_ref().expect("sealed");
    let compact = rmp_serde::to_vec(value).expect("encode");
    // The record ends with its sealed value, then an empty sealed detail (nil).
    let at = bytes.len() - 1 - compact.len();
    assert_eq!(
        (&bytes[at..bytes.len() - 1], bytes[bytes.len() - 1]),
        (&compact[..], 0xc0)
    );
    let named = [
        &bytes[..at],
        &rmp_serde::to_vec_named(value).expect("encode")[..],
        &[0xc0],
    ]
    .concat();
    assert_eq!(
        Event::sealing_ref(&named),
        Some(Some(KeysRef::Ids(keys.clone())))
    );
    assert_eq!(Event::sealing_of(&named), Some(Some(keys.clone())));
    // With the entry's time, as an erasure's receipt reads them, in both encodings.
    let created_at = plain.entry.created_at;
    assert_ne!(created_at, 0);
    assert_eq!(
        Event::audit_time_and_keys(&bytes),
        Some(AuditSealParts {
            created_at,
            keys: Some(KeysRef::Stored(stored))
        })
    );
    assert_eq!(
        Event::audit_time_and_keys(&named),
        Some(AuditSealParts {
            created_at,
            keys: Some(KeysRef::Ids(keys.clone()))
        })
    );
    assert_eq!(ring.destroy(&keys).expect("destroy"), 1);
    assert!(matches!(open_personal(&ring, &sealed), Ok(Opened::Erased)));
}

#[test]
fn plaintext_audit_records_of_earlier_builds_decode_as_such() {
    // An AuditRecorded of three fields, as builds before sealing wrote it, in both layouts.
    #[derive(Serialize)]
    enum OldEvent {
        AuditRecorded(OldRecorded),
    }
    #[derive(Serialize)]
    struct OldRecorded {
        tenant_id: Uuid,
        entry: AuditEntry,
        detail: AuditDetail,
    }
    let Event::AuditRecorded(rec) = sample_audit() else {
        unreachable!()
    };
    let old = OldEvent::AuditRecorded(OldRecorded {
        tenant_id: rec.tenant_id,
        entry: rec.entry.clone(),
        detail: rec.detail.clone(),
    });
    for bytes in [
        rmp_serde::to_vec(&(2u16, &old)).expect("encode"),
        rmp_serde::to_vec_named(&(1u16, &old)).expect("encode"),
    ] {
        assert_eq!(
            Event::decode(&bytes).expect("decode"),
            Event::AuditRecorded(rec.clone())
        );
        let head = Event::decode_audit_head(&bytes)
            .expect("head")
            .expect("audit");
        assert_eq!((head.entry, head.sealed), (rec.entry.clone(), None));
        assert_eq!(Event::sealing_of(&bytes), Some(None));
        assert_eq!(
            Event::audit_time_and_keys(&bytes),
            Some(AuditSealParts {
                created_at: rec.entry.created_at,
                keys: None
            })
        );
        let ring = crate::seal::MemoryKeyring::default();
        let Event::AuditRecorded(decoded) = Event::decode(&bytes).expect("decode") else {
            unreachable!()
        };
        assert!(matches!(open_personal(&ring, &decoded), Ok(Opened::Plain)));
    }
    let other = Event::CreditsConsumed(CreditsConsumed {
        tenant_id: rec.tenant_id,
        credits: 1.0,
        usd: 0.001,
        at: 1,
    })
    .encode()
    .expect("encode");
    assert_eq!(Event::sealing_of(&other), None);
    assert_eq!(Event::audit_time_and_keys(&other), None);
}

#[test]
fn sealed_memory_events_round_trip_with_or_without_extra_and_older_ones_still_decode() {
    use crate::seal::MemoryKeyring;
    let ring = MemoryKeyring::default();
    let plain = MemoryCreated {
        memory_id: Uuid::from_u128(7),
        tenant_id: Uuid::from_u128(1),
        content: "wombat-secret-1234".into(),
        memory_type: MemoryType::Fact,
        importance: 0.5,
        created_at: 1,
        model: "m".into(),
        vector: vector_to_bytes(&[0.6, 0.8]),
        extra: None,
        sealed: None,
    };
    // No scope: only the memory's own key; `extra` absent, `sealed` still in its place.
    let subjects = plain.subjects();
    assert_eq!(
        subjects,
        vec![Subject::Memory(Uuid::from_u128(1), Uuid::from_u128(7))]
    );
    let sealed = plain.clone().sealed_for(&ring, &subjects).expect("seal");
    let event = Event::MemoryCreated(sealed.clone());
    let bytes = event.encode().expect("encode");
    assert!(!bytes.windows(18).any(|w| w == b"wombat-secret-1234"));
    assert_eq!(Event::decode(&bytes).expect("decode"), event);
    let opened = sealed.opened(&ring).expect("ring").expect("open");
    assert_eq!(*opened, plain);
    // The id is bound: moved to another memory, the sealed fields do not open.
    let mut moved = sealed.clone();
    moved.memory_id = Uuid::from_u128(8);
    assert!(moved.opened(&ring).is_err());
    // A record from before `sealed` (and written without `extra`) decodes as it was.
    #[derive(Serialize)]
    struct Before {
        memory_id: Uuid,
        tenant_id: Uuid,
        content: String,
        memory_type: MemoryType,
        importance: f64,
        created_at: i64,
        model: String,
        #[serde(with = "serde_bytes")]
        vector: Vec<u8>,
    }
    #[derive(Serialize)]
    enum OldEvent {
        MemoryCreated(Before),
    }
    let old = OldEvent::MemoryCreated(Before {
        memory_id: plain.memory_id,
        tenant_id: plain.tenant_id,
        content: plain.content.clone(),
        memory_type: plain.memory_type,
        importance: plain.importance,
        created_at: plain.created_at,
        model: plain.model.clone(),
        vector: plain.vector.clone(),
    });
    let bytes = rmp_serde::to_vec(&(EVENT_FORMAT_VERSION, old)).expect("encode");
    assert_eq!(
        Event::decode(&bytes).expect("decode"),
        Event::MemoryCreated(plain.clone())
    );
    // Once its key is destroyed, it is erased.
    let key = ring.find(&subjects[0]).expect("ring").expect("a key");
    ring.destroy(&[key]).expect("destroy");
    assert_eq!(sealed.opened(&ring).expect("ring"), None);
}

/// `skip_value` passes over exactly one value, as serde's `IgnoredAny` does, for every kind of
/// msgpack value, and refuses bytes that end inside one.
#[test]
fn skipping_a_msgpack_value_lands_where_decoding_it_would() {
    let long = "x".repeat(70_000);
    let values: Vec<Vec<u8>> = vec![
        rmp_serde::to_vec(&serde_json::json!({
            "a": [1, -1, 127, 128, -33, 255, 256, 65_536, -70_000, 1u64 << 40, -(1i64 << 40)],
            "f": [1.5, 0.1],
            "s": ["", "short", "y".repeat(40), "z".repeat(300)],
            "n": null, "t": true, "u": false,
        }))
        .expect("encode"),
        rmp_serde::to_vec(&serde_json::json!({ "long": long })).expect("encode"),
        rmp_serde::to_vec(&(0..20).collect::<Vec<u32>>()).expect("encode"),
        rmp_serde::to_vec(&(0..70_000).map(|i| i % 3).collect::<Vec<u32>>()).expect("encode"),
        rmp_serde::to_vec(
            &(0..20)
                .map(|i| (i, i))
                .collect::<std::collections::BTreeMap<u32, u32>>(),
        )
        .expect("encode"),
        rmp_serde::to_vec(&serde_bytes::ByteBuf::from(vec![1u8; 300])).expect("encode"),
        rmp_serde::to_vec(&serde_bytes::ByteBuf::from(vec![1u8; 70_000])).expect("encode"),
        rmp_serde::to_vec(&1.25f32).expect("encode"),
        sample_audit().encode().expect("encode"),
        // ext 8, fixext 1, 2, 4, 8, 16.
        vec![0xc7, 3, 5, 1, 2, 3],
        vec![0xd4, 5, 1],
        vec![0xd5, 5, 1, 2],
        vec![0xd6, 5, 1, 2, 3, 4],
        vec![0xd7, 5, 1, 2, 3, 4, 5, 6, 7, 8],
        [&[0xd8, 5][..], &[9; 16]].concat(),
    ];
    for v in &values {
        let mut bytes = v.clone();
        bytes.extend_from_slice(&[0xc3, 0x07]);
        let mut rd = &bytes[..];
        assert_eq!(super::skip_value(&mut rd), Some(()), "{v:02x?}");
        assert_eq!(rd, &[0xc3, 0x07], "{v:02x?}");
        // Where serde's decoder ends up too (it reads no ext, which rmp_serde decodes apart).
        if !matches!(v[0], 0xc7 | 0xd4..=0xd8) {
            let mut rest = &bytes[..];
            let mut de = rmp_serde::Deserializer::new(&mut rest);
            serde::de::IgnoredAny::deserialize(&mut de).expect("decodes");
            drop(de);
            assert_eq!(rest, &[0xc3, 0x07]);
        }
        for cut in [1, v.len() / 2, v.len() - 1] {
            let mut rd = &v[..cut];
            assert_eq!(super::skip_value(&mut rd), None, "{v:02x?} cut at {cut}");
        }
    }
    // The unused marker, and a count of values larger than the bytes left.
    assert_eq!(super::skip_value(&mut &[0xc1][..]), None);
    assert_eq!(
        super::skip_value(&mut &[0xdd, 0xff, 0xff, 0xff, 0xff, 0x01][..]),
        None
    );
}
