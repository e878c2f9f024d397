//! Record decoding: arbitrary bytes as a stored log record (`Record::decode`,
//! `RecordRef::decode`, `record::is_canonical`), the event they carry (`Event::decode`,
//! `Event::decode_audit_entry`), the verifier's check of one record, and the same bytes as a
//! stored chunk of records (`record::pieces`).
#![no_main]

use auditmem::log::record::{is_canonical, pieces, Record, RecordRef};
use auditmem::log::verify::Verifier;
use auditmem::projections::Event;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Record::decode(data) {
        // Whatever decodes re-encodes canonically, to itself.
        let bytes = r.encode();
        let again = RecordRef::decode(&bytes).expect("an encoded record decodes");
        assert!(is_canonical(&bytes, &again), "encode() is not canonical");
        assert_eq!(Record::decode(&bytes).expect("decodes"), r);
    }
    if let Ok(rr) = RecordRef::decode(data) {
        let _ = rr.computed_hash();
        if is_canonical(data, &rr) {
            // The verifier trusts "canonical" to mean "exactly the bytes sealing writes": a
            // second encoding that passed would be an undetected change of stored bytes.
            let r = Record::decode(data).expect("canonical bytes decode as a Record");
            assert_eq!(r.encode(), data, "is_canonical accepted other bytes");
            assert_eq!(
                Record::seal_encoded(r.seq, r.ts_micros, &r.prev, &r.event).1 == data,
                rr.computed_hash() == r.hash,
                "a canonical record with its own hash is what sealing writes"
            );
        }
        event(rr.event);
        let mut v = Verifier::new([rr.seq]);
        v.feed(&[(rr.seq.max(1), data)]);
        let report = v.finish(None, &[], None);
        let _ = report.render();
    }
    // As a stored value: the pieces cover it exactly and in order, and each record found
    // decodes to the same from its own bytes.
    let mut end = 0;
    for p in pieces(data) {
        assert_eq!(p.range.start, end, "pieces leave a gap or overlap");
        end = p.range.end;
        if let Ok(r) = &p.record {
            let alone = RecordRef::decode(&data[p.range.clone()]).expect("a piece decodes alone");
            assert_eq!((alone.seq, alone.hash, alone.event), (r.seq, r.hash, r.event));
        }
    }
    assert_eq!(end, data.len(), "pieces do not reach the end");
    event(data);
});

/// Event decoding; what decodes re-encodes stably, and the audit-entry shortcut agrees with
/// the full decode.
fn event(bytes: &[u8]) {
    let full = Event::decode(bytes);
    let entry = Event::decode_audit_entry(bytes);
    let Ok(e) = full else { return };
    let enc = e.encode().expect("a decoded event encodes");
    let back = Event::decode(&enc).expect("an encoded event decodes");
    // Compared as bytes: events hold floats, and NaN != NaN.
    assert_eq!(
        back.encode().expect("encodes"),
        enc,
        "not stable through the codec"
    );
    if let (Event::AuditRecorded(rec), Ok(Some((tenant, entry)))) = (&e, &entry) {
        assert_eq!(*tenant, rec.tenant_id);
        assert_eq!(
            rmp_serde::to_vec(entry).ok(),
            rmp_serde::to_vec(&rec.entry).ok(),
            "decode_audit_entry disagrees with decode"
        );
    }
}
