//! Per-API-key rate limiting: one token bucket per key id, consulted by the `/v1` gate once per
//! authenticated request.
//!
//! A bucket holds at most `burst` tokens and refills at `per_sec` tokens a second; a request
//! takes one token or is refused with the time until one is there (the `Retry-After`).
//!
//! Hand-written rather than `governor`: what we need is a few float operations under a lock
//! and the exact wait for the `Retry-After` header, and one mutex over a `HashMap` is not a
//! bottleneck here, since every admitted request then waits for a group commit with an fsync
//! (hundreds of microseconds) while the critical section takes tens of nanoseconds. The map
//! only ever holds keys that passed authentication, so it is bounded by the keys the operator
//! issued; an unknown bearer string never gets a bucket.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// The per-key bucket settings.
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

pub struct RateLimiter {
    quota: Option<Quota>,
    buckets: Mutex<HashMap<Uuid, Bucket>>,
}

impl RateLimiter {
    /// `per_sec` of 0 (or anything not a positive finite number) disables the limit.
    pub fn new(per_sec: f64, burst: u32) -> Self {
        let quota = (per_sec.is_finite() && per_sec > 0.0).then_some(Quota {
            per_sec,
            burst: burst.max(1),
        });
        Self {
            quota,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn quota(&self) -> Option<Quota> {
        self.quota
    }

    /// Takes a token of `key`'s bucket, or says how long until one is there.
    pub fn check(&self, key: Uuid) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: Uuid, now: Instant) -> Result<(), Duration> {
        let Some(q) = self.quota else {
            return Ok(());
        };
        let burst = f64::from(q.burst);
        // A poisoned lock only means another request panicked mid-update of plain numbers;
        // the map is still usable.
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * q.per_sec).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            // A refused request takes nothing, so a client that honours Retry-After gets in.
            // A rate so small that the wait overflows a Duration waits "forever".
            Err(
                Duration::try_from_secs_f64((1.0 - bucket.tokens) / q.per_sec)
                    .unwrap_or(Duration::MAX),
            )
        }
    }
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
    fn keys_have_buckets_of_their_own() {
        let limiter = RateLimiter::new(1.0, 1);
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let t0 = Instant::now();
        assert_eq!(limiter.check_at(a, t0), Ok(()));
        assert!(limiter.check_at(a, t0).is_err());
        assert_eq!(limiter.check_at(b, t0), Ok(()));
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
