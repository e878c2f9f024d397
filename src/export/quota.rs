//! A tenant's export quotas: live files (count and bytes) and exports started per hour.
//!
//! Decided by the appender's precondition of `POST /v1/audit/logs/export` against the exports
//! projection's [`Usage`], so two racing requests cannot both take the last place. A refusal
//! says when the quota frees (the `Retry-After`): the oldest live file expiring, or the hour
//! window moving past the oldest export started in it.

use std::time::Duration;

use auditmem_projections::exports::{ExportStatus, Usage, RECENT_MICROS};

/// The limits; 0 means no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// Export files at once: processing, or completed and not expired.
    pub max_files: u64,
    /// Bytes of the completed, unexpired files together. A file's size is known once it is
    /// written, so the export that takes a tenant past it completes, and the next is refused
    /// until enough files expire: the tenant holds at most this plus one file.
    pub max_bytes: u64,
    /// Exports started within any hour, failed ones included.
    pub max_per_hour: u64,
}

/// Why a new export is refused, and when it can pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub message: String,
    pub retry_after: Duration,
}

fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20)
}

/// How long from `now` until the `k`-th (1-based) of `times` (sorted ascending) is reached.
fn until_kth(times: &[i64], k: usize, now: i64) -> Option<Duration> {
    let at = *times.get(k.checked_sub(1)?)?;
    Some(Duration::from_micros(at.saturating_sub(now).max(0) as u64))
}

impl Quota {
    /// Whether the tenant, whose exports count as `usage` (see [`Usage`]), may start one
    /// more at `now` (micros). `ttl` is how long a file lives once completed: the wait when
    /// only an export still processing holds the place.
    pub fn check(&self, usage: &[Usage], now: i64, ttl: Duration) -> Result<(), Exceeded> {
        let mut reasons = Vec::new();
        let mut wait = Duration::ZERO;
        let live: Vec<&Usage> = usage.iter().filter(|u| u.live(now)).collect();
        // Completed live files by expiry: the order in which they free their place.
        let mut expiring: Vec<(i64, u64)> = live
            .iter()
            .filter(|u| u.status == ExportStatus::Completed)
            .filter_map(|u| Some((u.expires_at?, u.bytes)))
            .collect();
        expiring.sort_unstable();

        let files = live.len() as u64;
        if self.max_files > 0 && files >= self.max_files {
            // One place must free: as many files must expire as the count is over the limit.
            let k = (files - self.max_files + 1) as usize;
            let times: Vec<i64> = expiring.iter().map(|e| e.0).collect();
            wait = wait.max(until_kth(&times, k, now).unwrap_or(ttl));
            reasons.push(format!(
                "{files} export files are live (at most {})",
                self.max_files
            ));
        }

        let bytes: u64 = expiring.iter().map(|e| e.1).sum();
        if self.max_bytes > 0 && bytes >= self.max_bytes {
            // Files expire in order until what is left is under the limit.
            let mut left = bytes;
            let mut freed_at = None;
            for &(at, size) in &expiring {
                left -= size;
                if left < self.max_bytes {
                    freed_at = Some(at);
                    break;
                }
            }
            let w = freed_at.map_or(ttl, |at| {
                Duration::from_micros(at.saturating_sub(now).max(0) as u64)
            });
            wait = wait.max(w);
            reasons.push(format!(
                "the live export files hold {} MiB (at most {} MiB)",
                mib(bytes),
                mib(self.max_bytes)
            ));
        }

        let since = now - RECENT_MICROS;
        let mut started: Vec<i64> = usage
            .iter()
            .map(|u| u.requested_at)
            .filter(|&t| t > since)
            .collect();
        started.sort_unstable();
        let count = started.len() as u64;
        if self.max_per_hour > 0 && count >= self.max_per_hour {
            // The window must move past as many starts as the count is over the limit.
            let k = (count - self.max_per_hour + 1) as usize;
            let leave: Vec<i64> = started.iter().map(|t| t + RECENT_MICROS).collect();
            wait = wait.max(until_kth(&leave, k, now).unwrap_or(Duration::ZERO));
            reasons.push(format!(
                "{count} exports were started in the last hour (at most {})",
                self.max_per_hour
            ));
        }

        if reasons.is_empty() {
            return Ok(());
        }
        let secs = crate::api::rate_limit::retry_after_secs(wait);
        Err(Exceeded {
            message: format!(
                "the export quota is used up: {}; retry after {secs} s",
                reasons.join("; ")
            ),
            retry_after: Duration::from_secs(secs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    const S: i64 = 1_000_000;
    const NOW: i64 = 1_800_000_000 * S;
    const TTL: Duration = Duration::from_secs(7 * 86_400);

    fn completed(requested_at: i64, bytes: u64, expires_at: i64) -> Usage {
        Usage {
            export_id: Uuid::now_v7(),
            requested_at,
            status: ExportStatus::Completed,
            bytes,
            expires_at: Some(expires_at),
        }
    }

    fn failed(requested_at: i64) -> Usage {
        Usage {
            export_id: Uuid::now_v7(),
            requested_at,
            status: ExportStatus::Failed,
            bytes: 0,
            expires_at: None,
        }
    }

    fn quota(max_files: u64, max_bytes: u64, max_per_hour: u64) -> Quota {
        Quota {
            max_files,
            max_bytes,
            max_per_hour,
        }
    }

    #[test]
    fn under_every_limit_passes_and_zero_is_no_limit() {
        let usage = [completed(NOW - 2 * 3600 * S, 10, NOW + 100 * S)];
        assert_eq!(quota(2, 11, 1).check(&usage, NOW, TTL), Ok(()));
        let many: Vec<Usage> = (0..50)
            .map(|i| completed(NOW - i * S, 1 << 30, NOW + S))
            .collect();
        assert_eq!(quota(0, 0, 0).check(&many, NOW, TTL), Ok(()));
    }

    #[test]
    fn too_many_live_files_wait_for_the_oldest_to_expire() {
        let usage = [
            completed(NOW - 5 * 3600 * S, 1, NOW + 300 * S),
            completed(NOW - 4 * 3600 * S, 1, NOW + 100 * S),
            // Expired: neither counts nor frees anything.
            completed(NOW - 9 * 3600 * S, 1, NOW - S),
        ];
        let e = quota(2, 0, 0)
            .check(&usage, NOW, TTL)
            .expect_err("two live files");
        assert_eq!(e.retry_after, Duration::from_secs(100));
        assert_eq!(
            e.message,
            "the export quota is used up: 2 export files are live (at most 2); retry after 100 s"
        );
        // Two over the limit: the second expiry frees the place.
        let e = quota(1, 0, 0).check(&usage, NOW, TTL).expect_err("over");
        assert_eq!(e.retry_after, Duration::from_secs(300));
    }

    #[test]
    fn too_many_bytes_wait_until_enough_files_expire() {
        let usage = [
            completed(NOW - 5 * 3600 * S, 600 << 20, NOW + 50 * S),
            completed(NOW - 4 * 3600 * S, 600 << 20, NOW + 70 * S),
            completed(NOW - 3 * 3600 * S, 100 << 20, NOW + 10 * S),
        ];
        // 1300 MiB held, 1024 allowed: the 100 MiB file going first is not enough, the next
        // one (600 MiB, at +50 s) is.
        let e = quota(0, 1024 << 20, 0)
            .check(&usage, NOW, TTL)
            .expect_err("bytes");
        assert_eq!(e.retry_after, Duration::from_secs(50));
        assert!(
            e.message
                .contains("the live export files hold 1300 MiB (at most 1024 MiB)"),
            "{}",
            e.message
        );
        assert_eq!(quota(0, 1301 << 20, 0).check(&usage, NOW, TTL), Ok(()));
    }

    #[test]
    fn too_many_starts_in_the_hour_wait_for_the_window_to_move() {
        let usage = [
            failed(NOW - 3000 * S),
            failed(NOW - 1000 * S),
            completed(NOW - 10 * S, 1, NOW + TTL.as_micros() as i64),
            // Over an hour ago: outside the window.
            failed(NOW - 4000 * S),
        ];
        let e = quota(0, 0, 3)
            .check(&usage, NOW, TTL)
            .expect_err("per hour");
        // The oldest start in the window leaves it 600 s from now.
        assert_eq!(e.retry_after, Duration::from_secs(600));
        assert_eq!(
            e.message,
            "the export quota is used up: 3 exports were started in the last hour (at most 3); retry after 600 s"
        );
        assert_eq!(quota(0, 0, 4).check(&usage, NOW, TTL), Ok(()));
    }

    #[test]
    fn several_limits_name_each_and_wait_for_the_last() {
        let usage = [
            completed(NOW - 3000 * S, 10 << 20, NOW + 20 * S),
            completed(NOW - 100 * S, 10 << 20, NOW + 9000 * S),
        ];
        let e = quota(2, 0, 2).check(&usage, NOW, TTL).expect_err("both");
        assert_eq!(e.retry_after, Duration::from_secs(600));
        assert!(
            e.message
                .contains("2 export files are live (at most 2); 2 exports were started"),
            "{}",
            e.message
        );
    }
}
