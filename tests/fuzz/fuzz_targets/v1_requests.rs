//! The tenant API's request bodies and query strings: memory create, update, batch delete,
//! search, extract, the export request, and the memory and audit-log list queries. The first
//! byte picks the request (modulo 8, in the order of `auditmem::fuzzing::V1`: '0' create
//! memory ... '5' export, '6' memory list query, '7' audit list query), the rest is the input,
//! run through `auditmem::fuzzing::request`: the handler's extractor and checks, and for the
//! export request its command (`auditmem::command::export`).
#![no_main]

use auditmem::fuzzing::{request, V1};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let _ = request(V1[pick as usize % V1.len()], input);
});
