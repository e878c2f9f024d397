//! The admin API's request bodies: tenant create and update, key create, audit ingestion.
//! The first byte picks the request (modulo 4: '0' create tenant, '1' update tenant, '2'
//! create key, '3' ingest), the rest is the body, run through `auditmem::fuzzing::request`:
//! the handler's extractor and checks, then its command (`auditmem::command::admin`) against
//! projections holding one tenant. The events a valid body yields must survive the log's
//! codec, since replay decodes exactly those bytes.
#![no_main]

use auditmem::fuzzing::{request, ADMIN};
use auditmem::projections::Event;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let Ok(events) = request(ADMIN[pick as usize % ADMIN.len()], body) else {
        return;
    };
    for e in &events {
        let bytes = e.encode().expect("an accepted body's event encodes");
        let back = Event::decode(&bytes).expect("an accepted body's event decodes");
        // Compared as bytes: events hold floats, and NaN != NaN.
        assert_eq!(
            back.encode().expect("encodes"),
            bytes,
            "changed by the codec"
        );
        if let Event::AuditRecorded(rec) = e {
            let (tenant, entry) = Event::decode_audit_entry(&bytes)
                .expect("the entry decodes")
                .expect("an audit event has an entry");
            assert_eq!(tenant, rec.tenant_id);
            assert_eq!(
                rmp_serde::to_vec(&entry).ok(),
                rmp_serde::to_vec(&rec.entry).ok()
            );
        }
    }
});
