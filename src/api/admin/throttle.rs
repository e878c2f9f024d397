//! Failed admin authentication, throttled per source.
//!
//! Each source (an IPv4 address or an IPv6 /64, as [`client_ip::source`] groups them) has a
//! bucket of `per_min` failures that refills at `per_min` a minute. A wrong token takes one; a
//! source with less than one left is refused (429 with `Retry-After`) before its token is even
//! compared, so a throttled source learns nothing about any guess, the right one included:
//! letting the right token through a lockout would let an attacker keep guessing and only
//! watch for a success. What the lockout costs is that an operator who shares a source with an
//! attacker (one NAT, or every client behind a proxy when `--trust-proxy` is off) waits with it;
//! a source that made no failures is never throttled by another's, and the right token takes
//! nothing from the bucket.
//!
//! Memory is bounded: at most [`SOURCES`] buckets, the source that failed least recently
//! forgotten first (it starts again with a full bucket, as a new source would).
//!
//! [`client_ip::source`]: crate::api::client_ip::source

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

/// Sources remembered at most (a bucket is a few dozen bytes).
pub const SOURCES: usize = 16_384;

struct Bucket {
    failures_left: f64,
    at: Instant,
}

pub struct AuthThrottle {
    /// Failures a minute, burst and sustained; `None` when the throttle is off.
    per_min: Option<f64>,
    buckets: Mutex<LruCache<IpAddr, Bucket>>,
}

impl AuthThrottle {
    /// `per_min` of 0 switches the throttle off.
    pub fn new(per_min: u32) -> Self {
        Self::with_capacity(per_min, SOURCES)
    }

    fn with_capacity(per_min: u32, sources: usize) -> Self {
        Self {
            per_min: (per_min > 0).then_some(f64::from(per_min)),
            buckets: Mutex::new(LruCache::new(
                NonZeroUsize::new(sources).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// `Err(wait)` while `source` has no failure left to make: how long until it has one.
    pub fn check(&self, source: IpAddr) -> Result<(), Duration> {
        self.check_at(source, Instant::now())
    }

    /// Counts a failed authentication of `source`.
    pub fn failed(&self, source: IpAddr) {
        self.failed_at(source, Instant::now())
    }

    fn check_at(&self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        let Some(per_min) = self.per_min else {
            return Ok(());
        };
        // A poisoned lock only means a panic mid-update of plain numbers; the map stays usable.
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let Some(bucket) = buckets.peek(&source) else {
            return Ok(());
        };
        let left = refilled(bucket, per_min, now);
        if left >= 1.0 {
            Ok(())
        } else {
            Err(Duration::try_from_secs_f64((1.0 - left) * 60.0 / per_min).unwrap_or(Duration::MAX))
        }
    }

    fn failed_at(&self, source: IpAddr, now: Instant) {
        let Some(per_min) = self.per_min else {
            return;
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = buckets.get_or_insert_mut(source, || Bucket {
            failures_left: per_min,
            at: now,
        });
        bucket.failures_left = (refilled(bucket, per_min, now) - 1.0).max(0.0);
        bucket.at = now;
    }
}

fn refilled(bucket: &Bucket, per_min: f64, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    (bucket.failures_left + elapsed * per_min / 60.0).min(per_min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_is_refused_after_its_failures_until_one_refills() {
        let t = AuthThrottle::new(6); // one failure back every 10 s
        let (a, t0) = (ip("192.0.2.1"), Instant::now());
        for _ in 0..6 {
            assert_eq!(t.check_at(a, t0), Ok(()));
            t.failed_at(a, t0);
        }
        assert_eq!(t.check_at(a, t0), Err(Duration::from_secs(10)));
        assert_eq!(
            t.check_at(a, t0 + Duration::from_secs(4)),
            Err(Duration::from_secs(6))
        );
        assert_eq!(t.check_at(a, t0 + Duration::from_secs(10)), Ok(()));
        // Refused checks take nothing; one more failure locks it again.
        t.failed_at(a, t0 + Duration::from_secs(10));
        assert!(t.check_at(a, t0 + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn sources_do_not_share_failures_and_zero_is_off() {
        let t = AuthThrottle::new(1);
        let t0 = Instant::now();
        t.failed_at(ip("192.0.2.1"), t0);
        assert!(t.check_at(ip("192.0.2.1"), t0).is_err());
        assert_eq!(t.check_at(ip("192.0.2.2"), t0), Ok(()));
        let off = AuthThrottle::new(0);
        for _ in 0..100 {
            off.failed_at(ip("192.0.2.1"), t0);
        }
        assert_eq!(off.check_at(ip("192.0.2.1"), t0), Ok(()));
    }

    #[test]
    fn memory_holds_the_most_recently_failed_sources() {
        let t = AuthThrottle::with_capacity(1, 2);
        let t0 = Instant::now();
        for s in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
            t.failed_at(ip(s), t0);
        }
        assert_eq!(t.buckets.lock().unwrap().len(), 2);
        assert_eq!(t.check_at(ip("192.0.2.1"), t0), Ok(()));
        assert!(t.check_at(ip("192.0.2.3"), t0).is_err());
    }
}
