//! What sealing costs a value and an audit entry (docs/PERFORMANCE.md, "Sealing"):
//! `cargo bench -p auditmem-projections --bench seal`.
//!
//! - `seal/N`, `open/N`: one XChaCha20-Poly1305 seal and open of an N-byte value (50: an
//!   entry's personal fields; 200: a short detail; 1,000: a detail with bodies) under a key set
//!   of one data key, with an audit entry's associated data.
//! - `entry/gateway`: `AuditRecorded::sealed_for` of an entry as the load driver's `ingest`
//!   scenario sends it (ip address, user agent, no detail): the salt, the salted digest, the
//!   encoding and the seal, with a keyring that hands out one cached seal key as the service's
//!   does once a subject's key is known.
//! - `verify/sealing_of`: `Event::sealing_of` of that entry's event bytes, its key set
//!   decoded; `verify/sealing_ref`: `Event::sealing_ref`, the key set as stored, which is what
//!   `verify` reads from every record.
//!
//! Times are the bench thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), not wall time: on a
//! shared machine a thread waiting for a core would count its wait.
//!
//! Which ChaCha20 and Poly1305 code runs is chosen at build time (`.cargo/config.toml`); to
//! compare backends, run it under each with `RUSTFLAGS` and a target dir of its own, e.g.
//! `RUSTFLAGS="--cfg chacha20_force_sse2 --cfg poly1305_force_soft"
//! CARGO_TARGET_DIR=target/seal-sse2 cargo bench -p auditmem-projections --bench seal`.

use std::hint::black_box;
use std::time::Duration;

use auditmem_projections::event::{AuditDetail, AuditEntry, AuditRecorded, Event, Tokens};
use auditmem_projections::seal::{DataKey, KeyError, KeyId, Keyring, SealKey, Sealed, Subject};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uuid::Uuid;

/// The CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; this clock exists on every Linux
    // the service runs on, and on failure `ts` stays zero (a sample of 0, seen at once).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Criterion's measurement as the thread's CPU time.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }

    fn end(&self, started: Duration) -> Duration {
        thread_cpu().saturating_sub(started)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanos
    }
}

/// Values in CPU nanoseconds, unscaled.
struct Nanos;

impl ValueFormatter for Nanos {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "ns (CPU)"
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) | Throughput::Elements(n) => {
                *n as f64
            }
        };
        for v in values {
            *v = per * 1e9 / *v;
        }
        "/s (CPU)"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// A keyring of one data key whose seal key is derived once: what the service's keyring
/// answers from its caches for a subject seen before.
struct OneKey {
    id: KeyId,
    key: SealKey,
}

impl OneKey {
    fn new() -> Self {
        let id = KeyId::random();
        let data = DataKey::generate();
        OneKey {
            id,
            key: SealKey::derive(&[(id, &data)]),
        }
    }
}

impl Keyring for OneKey {
    fn key_of(&self, _: &Subject) -> Result<KeyId, KeyError> {
        Ok(self.id)
    }

    fn find(&self, _: &Subject) -> Result<Option<KeyId>, KeyError> {
        Ok(Some(self.id))
    }

    fn seal_key(&self, _: &[KeyId]) -> Result<Option<SealKey>, KeyError> {
        Ok(Some(self.key.clone()))
    }

    fn destroy(&self, _: &[KeyId]) -> Result<usize, KeyError> {
        Ok(0)
    }

    fn keys_of_tenant(&self, _: Uuid) -> Result<Vec<(Subject, KeyId)>, KeyError> {
        Ok(Vec::new())
    }
}

/// An entry as `benches/load`'s `gateway_entry` sends it, after the ingestion's checks.
fn gateway_entry(i: u64) -> AuditEntry {
    let prompt = 50 + (i * 7919) % 2000;
    let completion = 10 + (i * 104_729) % 800;
    AuditEntry {
        id: Uuid::from_u128(u128::from(i) + 1),
        action: "chat.completion".into(),
        model_id: Some("claude-sonnet".into()),
        project_id: Some(format!("proj-{}", i % 17)),
        gateway_id: None,
        ip_address: Some(format!("10.0.{}.{}", (i / 256) % 256, i % 256)),
        user_agent: Some("gateway/1.4".into()),
        http_status: 200,
        is_success: true,
        is_cache_hit: false,
        error_code: None,
        error_msg: None,
        duration: Some((i % 900) as f64 + 12.5),
        credits_consumed: ((prompt + completion) as f64) / 1000.0,
        balance_consumed_usd: 0.0,
        tokens: Some(Tokens {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }),
        metadata: None,
        created_at: 1_764_000_000_000_000,
        detail_hash: None,
    }
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let ring = OneKey::new();
    let ids = [ring.id];
    let tenant = Uuid::from_u128(7);
    let aad = auditmem_projections::event::audit_aad(tenant, Uuid::from_u128(9));

    let mut seal = c.benchmark_group("seal");
    for n in [50usize, 200, 1000] {
        let value: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        seal.bench_with_input(BenchmarkId::from_parameter(n), &value, |b, v| {
            b.iter(|| Sealed::seal(&ring.key, &ids, black_box(&aad), black_box(v)))
        });
    }
    seal.finish();

    let mut open = c.benchmark_group("open");
    for n in [50usize, 200, 1000] {
        let value: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let sealed = Sealed::seal(&ring.key, &ids, &aad, &value);
        open.bench_with_input(BenchmarkId::from_parameter(n), &sealed, |b, s| {
            b.iter(|| s.open(&ring.key, black_box(&aad)).map(|v| v.len()))
        });
    }
    open.finish();

    let subjects = [Subject::Tenant(tenant)];
    let mut entry = c.benchmark_group("entry");
    let mut i = 0u64;
    entry.bench_function("gateway", |b| {
        b.iter_batched(
            || {
                i += 1;
                gateway_entry(i)
            },
            |e| {
                AuditRecorded::sealed_for(tenant, e, AuditDetail::default(), &ring, &subjects)
                    .map(|r| r.sealed.map(|s| s.ct.len()))
            },
            criterion::BatchSize::SmallInput,
        )
    });
    entry.finish();

    let bytes = AuditRecorded::sealed_for(
        tenant,
        gateway_entry(1),
        AuditDetail::default(),
        &ring,
        &subjects,
    )
    .ok()
    .and_then(|r| Event::AuditRecorded(Box::new(r)).encode().ok())
    .unwrap_or_default();
    assert!(
        matches!(Event::sealing_of(&bytes), Some(Some(ref k)) if k == &ids),
        "the bench's entry reads as sealed under its key"
    );
    let mut verify = c.benchmark_group("verify");
    verify.bench_function("sealing_of", |b| {
        b.iter(|| Event::sealing_of(black_box(&bytes)))
    });
    verify.bench_function("sealing_ref", |b| {
        b.iter(|| Event::sealing_ref(black_box(&bytes)))
    });
    verify.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench
}
criterion_main!(benches);
