//! Rate limiting by token buckets: one per API key id, consulted by the `/v1` gate once per
//! authenticated request, and one per source address on the public transparency routes
//! (`/log/*`), which need no key.
//!
//! A bucket holds at most `burst` tokens and refills at `per_sec` tokens a second; a request
//! takes one token or is refused with the time until one is there (the `Retry-After`).
//!
//! Hand-written rather than `governor`: what we need is a few float operations under a lock
//! and the exact wait for the `Retry-After` header, and one mutex over a map is not a
//! bottleneck here, since every admitted `/v1` request then waits for a group commit with an
//! fsync (hundreds of microseconds) while the critical section takes tens of nanoseconds.
//! Memory is bounded: the map keeps at most `capacity` buckets, the least recently used one
//! forgotten first (it starts again full, as a new key or source would). For keys the map
//! only ever holds keys that passed authentication, so an unknown bearer string never gets a
//! bucket; for sources, an address is grouped as [`client_ip::source`] groups it.
//!
//! [`client_ip::source`]: crate::api::client_ip::source

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;
use uuid::Uuid;

/// Key buckets kept at most: far more keys than any deployment issues, a few MB at most.
pub const KEYS: usize = 1 << 20;
/// Source buckets kept at most on the public routes.
pub const SOURCES: usize = 16_384;

/// The per-bucket settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quota {
    /// Sustained requests per second.
    pub per_sec: f64,
    /// Requests a key may make at once after being idle.
    pub burst: u32,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by `K`: API key ids by default.
pub struct RateLimiter<K: Hash + Eq = Uuid> {
    quota: Option<Quota>,
    buckets: Mutex<LruCache<K, Bucket>>,
}

impl RateLimiter<Uuid> {
    /// Per API key. `per_sec` of 0 (or anything not a positive finite number) disables the
    /// limit.
    pub fn new(per_sec: f64, burst: u32) -> Self {
        Self::with_capacity(per_sec, burst, KEYS)
    }
}

impl RateLimiter<IpAddr> {
    /// Per source address (see the module's documentation); 0 disables the limit.
    pub fn per_source(per_sec: f64, burst: u32) -> Self {
        Self::with_capacity(per_sec, burst, SOURCES)
    }
}

impl<K: Hash + Eq> RateLimiter<K> {
    /// At most `capacity` buckets, the least recently used one forgotten first; 0 for
    /// `per_sec` disables the limit.
    pub fn with_capacity(per_sec: f64, burst: u32, capacity: usize) -> Self {
        let quota = (per_sec.is_finite() && per_sec > 0.0).then_some(Quota {
            per_sec,
            burst: burst.max(1),
        });
        Self {
            quota,
            buckets: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    pub fn quota(&self) -> Option<Quota> {
        self.quota
    }

    /// Takes a token of `key`'s bucket, or says how long until one is there.
    pub fn check(&self, key: K) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: K, now: Instant) -> Result<(), Duration> {
        self.refilled(key, now, |bucket, q| {
            if bucket.tokens >= 1.0 {
                bucket.tokens -= 1.0;
                Ok(())
            } else {
                // A refused request takes nothing, so a client that honours Retry-After gets
                // in.
                Err(wait_for_one(bucket, q))
            }
        })
        .unwrap_or(Ok(()))
    }

    /// `act` on `key`'s bucket, refilled up to `now`; None without a quota.
    fn refilled<R>(
        &self,
        key: K,
        now: Instant,
        act: impl FnOnce(&mut Bucket, Quota) -> R,
    ) -> Option<R> {
        let q = self.quota?;
        let burst = f64::from(q.burst);
        // A poisoned lock only means another request panicked mid-update of plain numbers;
        // the map is still usable.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.get_or_insert_mut(key, || Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * q.per_sec).min(burst);
        bucket.at = now;
        Some(act(bucket, q))
    }

    /// Takes a token of `key`'s bucket, now or, when it holds none, the next one to come: the
    /// bucket then owes it (its tokens go below zero), so the readers that reserve one after
    /// another are given turns `1 / per_sec` apart. Returns how long to wait before acting on
    /// it (zero when a token was there). The caller bounds how many wait at once.
    pub fn reserve(&self, key: K) -> Duration {
        self.reserve_at(key, Instant::now())
    }

    fn reserve_at(&self, key: K, now: Instant) -> Duration {
        self.refilled(key, now, |bucket, q| {
            let wait = match bucket.tokens >= 1.0 {
                true => Duration::ZERO,
                false => wait_for_one(bucket, q),
            };
            bucket.tokens -= 1.0;
            wait
        })
        .unwrap_or(Duration::ZERO)
    }
}

/// How long until `bucket` holds a whole token again. A rate so small that the wait overflows
/// a Duration waits "forever".
fn wait_for_one(bucket: &Bucket, q: Quota) -> Duration {
    Duration::try_from_secs_f64((1.0 - bucket.tokens) / q.per_sec).unwrap_or(Duration::MAX)
}
/// The `Retry-After` value for a wait: whole seconds (the header has no fractions), rounded up
/// so a client that waits that long finds a token, and at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs();
    let rounded = if wait.subsec_nanos() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    };
    rounded.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_admitted_then_the_key_waits_for_the_refill() {
        let limiter = RateLimiter::new(2.0, 3);
        let key = Uuid::now_v7();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.check_at(key, t0), Ok(()));
        }
        let wait = limiter.check_at(key, t0).expect_err("bucket empty");
        assert_eq!(wait, Duration::from_millis(500));
        // Refused requests do not push the refill back.
        assert!(limiter.check_at(key, t0).is_err());
        assert_eq!(limiter.check_at(key, t0 + wait), Ok(()));
        assert!(limiter.check_at(key, t0 + wait).is_err());
    }

    #[test]
    fn the_bucket_never_holds_more_than_the_burst() {
        let limiter = RateLimiter::new(100.0, 2);
        let key = Uuid::now_v7();
        let t0 = Instant::now();
        assert_eq!(limiter.check_at(key, t0), Ok(()));
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(limiter.check_at(key, later), Ok(()));
        assert_eq!(limiter.check_at(key, later), Ok(()));
        assert!(limiter.check_at(key, later).is_err());
    }

    #[test]
    fn reserved_tokens_are_owed_and_given_in_turns_a_refill_apart() {
        let limiter = RateLimiter::new(10.0, 2);
        let key = Uuid::now_v7();
        let t0 = Instant::now();
        assert_eq!(limiter.reserve_at(key, t0), Duration::ZERO);
        assert_eq!(limiter.reserve_at(key, t0), Duration::ZERO);
        assert_eq!(limiter.reserve_at(key, t0), Duration::from_millis(100));
        assert_eq!(limiter.reserve_at(key, t0), Duration::from_millis(200));
        // The refill pays the debt first: 300 ms later (3 tokens) one is there, not two.
        let later = t0 + Duration::from_millis(300);
        assert_eq!(limiter.reserve_at(key, later), Duration::ZERO);
        assert_eq!(limiter.reserve_at(key, later), Duration::from_millis(100));
        // Another key's bucket is its own.
        assert_eq!(limiter.reserve_at(Uuid::now_v7(), t0), Duration::ZERO);
        // No limit: never a wait.
        let unlimited = RateLimiter::new(0.0, 1);
        for _ in 0..100 {
            assert_eq!(unlimited.reserve_at(key, t0), Duration::ZERO);
        }
    }

    #[test]
    fn keys_have_buckets_of_their_own() {
        let limiter = RateLimiter::new(1.0, 1);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let t0 = Instant::now();
        assert_eq!(limiter.check_at(a, t0), Ok(()));
        assert!(limiter.check_at(a, t0).is_err());
        assert_eq!(limiter.check_at(b, t0), Ok(()));
    }

    #[test]
    fn the_least_recently_used_bucket_is_forgotten_at_capacity() {
        let limiter = RateLimiter::<u8>::with_capacity(1.0, 1, 2);
        let t0 = Instant::now();
        assert_eq!(limiter.check_at(1, t0), Ok(()));
        assert_eq!(limiter.check_at(2, t0), Ok(()));
        assert!(limiter.check_at(1, t0).is_err());
        // A third source pushes out the least recently used one (2): it starts full again.
        assert_eq!(limiter.check_at(3, t0), Ok(()));
        assert_eq!(limiter.check_at(2, t0), Ok(()));
        assert!(limiter.check_at(3, t0).is_err());
    }

    #[test]
    fn zero_or_nonsense_rates_disable_the_limit() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let limiter = RateLimiter::new(rate, 1);
            assert_eq!(limiter.quota(), None);
            let key = Uuid::now_v7();
            let t0 = Instant::now();
            for _ in 0..1000 {
                assert_eq!(limiter.check_at(key, t0), Ok(()));
            }
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_and_at_least_one() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(5)), 5);
    }
}
