//! The chain verifier (`log::verify::Verifier`, what `auditmem verify` runs over a data dir or
//! a server's record stream) on logs built from sealed, re-linked, mis-keyed, mutated and raw
//! records, fed in arbitrary chunks, with signed checkpoints and an expected head as anchors.
//! Checks the verdict: clean exactly when every record is the genuine next link of the chain
//! under its own seq and every anchor names a hash the log holds there.
#![no_main]

use arbitrary::Arbitrary;
use auditmem::log::checkpoint::Checkpoint;
use auditmem::log::record::{record_hash, Record, ZERO_HASH};
use auditmem::log::verify::Verifier;
use auditmem::log::Head;
use ed25519_dalek::SigningKey;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Key {
    Next,
    Same,
    Skip(u8),
    At(u64),
}

#[derive(Arbitrary, Debug)]
enum Seq {
    Key,
    Before,
    After,
    At(u64),
}

#[derive(Arbitrary, Debug)]
enum Prev {
    Last,
    BeforeLast,
    Zero,
    At([u8; 32]),
}

#[derive(Arbitrary, Debug)]
enum Body {
    Sealed {
        seq: Seq,
        ts: i64,
        prev: Prev,
        event: Vec<u8>,
        /// Flip one byte of the stored bytes (index modulo the length).
        flip: Option<(u16, u8)>,
    },
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Step {
    key: Key,
    body: Body,
    /// Start a new chunk before this record.
    cut: bool,
}

#[derive(Arbitrary, Debug)]
enum AnchorHash {
    /// The hash the log holds at that seq (zeros if none).
    Held,
    At([u8; 32]),
}

#[derive(Arbitrary, Debug)]
struct Input {
    steps: Vec<Step>,
    checkpoints: Vec<(u64, AnchorHash)>,
    head: Option<(u64, AnchorHash)>,
}

fuzz_target!(|input: Input| {
    let key = SigningKey::from_bytes(&[7; 32]);
    let mut stored: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut cuts = Vec::new();
    // (key, hash) of each genuine record; the whole log is genuine while `genuine` holds.
    let mut held: Vec<(u64, [u8; 32])> = Vec::new();
    let mut genuine = true;
    let (mut last_key, mut last_hash, mut before_last) = (0u64, ZERO_HASH, ZERO_HASH);
    for step in input.steps.iter().take(64) {
        let k = match step.key {
            Key::Next => last_key.wrapping_add(1),
            Key::Same => last_key,
            Key::Skip(n) => last_key.wrapping_add(2 + n as u64),
            Key::At(k) => k,
        };
        let bytes = match &step.body {
            Body::Sealed {
                seq,
                ts,
                prev,
                event,
                flip,
            } => {
                let seq = match seq {
                    Seq::Key => k,
                    Seq::Before => k.wrapping_sub(1),
                    Seq::After => k.wrapping_add(1),
                    Seq::At(s) => *s,
                };
                let prev = match prev {
                    Prev::Last => last_hash,
                    Prev::BeforeLast => before_last,
                    Prev::Zero => ZERO_HASH,
                    Prev::At(h) => *h,
                };
                let (hash, mut bytes) = Record::seal_encoded(seq, *ts, &prev, event);
                if let Some((at, x)) = flip {
                    let i = *at as usize % bytes.len();
                    bytes[i] ^= x;
                }
                // Judged by value, whatever the choices were.
                let intact = Record::decode(&bytes).is_ok_and(|r| {
                    r.encode() == bytes
                        && record_hash(&r.prev, r.seq, r.ts_micros, &r.event) == r.hash
                });
                let links =
                    seq == k && k == last_key.wrapping_add(1) && k != 0 && prev == last_hash;
                if intact && links && genuine {
                    held.push((k, hash));
                } else {
                    genuine = false;
                }
                before_last = last_hash;
                last_hash = hash;
                bytes
            }
            Body::Raw(b) => {
                genuine = false;
                b.clone()
            }
        };
        if step.cut {
            cuts.push(stored.len());
        }
        last_key = k;
        stored.push((k, bytes));
    }
    let hash_at = |seq: u64, h: &AnchorHash| match h {
        AnchorHash::Held => held
            .iter()
            .find(|(k, _)| *k == seq)
            .map(|(_, h)| *h)
            .unwrap_or(ZERO_HASH),
        AnchorHash::At(h) => *h,
    };
    let anchors_hold = |seq: u64, hash: [u8; 32]| held.iter().any(|&(k, h)| k == seq && h == hash);
    let mut all_anchors_hold = true;
    let checkpoints: Vec<Checkpoint> = input
        .checkpoints
        .iter()
        .take(8)
        .map(|(seq, h)| {
            let hash = hash_at(*seq, h);
            all_anchors_hold &= anchors_hold(*seq, hash);
            Checkpoint::sign(&key, Head { seq: *seq, hash }, "2026-11-23T00:00:00.000Z")
        })
        .collect();
    let head = input.head.as_ref().map(|(seq, h)| {
        let hash = hash_at(*seq, h);
        all_anchors_hold &= anchors_hold(*seq, hash);
        Head { seq: *seq, hash }
    });
    let mut v = Verifier::new(checkpoints.iter().map(|c| c.seq).chain(head.map(|h| h.seq)));
    let mut from = 0;
    for cut in cuts.into_iter().chain([stored.len()]) {
        v.feed(&stored[from..cut]);
        from = cut;
    }
    let report = v.finish(head, &checkpoints, Some(&key.verifying_key()));
    let text = report.render();
    assert_eq!(
        report.clean(),
        genuine && all_anchors_hold,
        "genuine {genuine}, anchors hold {all_anchors_hold}: {text}"
    );
    if genuine {
        assert_eq!(report.valid, stored.len() as u64, "{text}");
    }
});
