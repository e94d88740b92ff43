//! Exponential backoff with jitter for failed reads and reconciliations:
//! 1 s, 2 s, 4 s … up to 5 minutes, each drawn from the upper half of its
//! step so that retries of many objects spread out instead of arriving together;
//! and a shorter one for watches ([`WatchBackoff`]).

use std::time::Duration;

pub const FIRST: Duration = Duration::from_secs(1);
pub const MAX: Duration = Duration::from_secs(300);

/// The wait before retry number `failures` (1 after the first failure);
/// `random` is uniform in [0, 1).
pub fn delay(failures: u32, random: f64) -> Duration {
    delay_within(FIRST, MAX, failures, random)
}

fn delay_within(first: Duration, max: Duration, failures: u32, random: f64) -> Duration {
    let step = first.saturating_mul(1u32 << failures.saturating_sub(1).min(16)).min(max);
    let random = if random.is_finite() { random.clamp(0.0, 1.0) } else { 0.0 };
    step.mul_f64(0.5 + random / 2.0).max(first)
}

/// First and longest wait before a failed watch is started again.
pub const WATCH_FIRST: Duration = Duration::from_millis(250);
pub const WATCH_MAX: Duration = Duration::from_secs(5);

/// The backoff of the watches: 250 ms doubling to at most 5 s, jittered as [`delay`], reset by
/// the first event that arrives. While the API server restarts every watch fails, and one
/// resumed from an older resourceVersion than its new watch cache gets 410 and relists. kube's
/// default (up to 30 s) kept the controller blind for 20 s after a 4 s restart of a real
/// kube-apiserver (tests/control_plane/relist.rs); a few requests per watch every 5 s are
/// nothing to an API server that is up.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(delay_within(WATCH_FIRST, WATCH_MAX, self.failures, random()))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A uniform random number in [0, 1) from the operating system (0.5 if it has none).
pub fn random() -> f64 {
    let mut bytes = [0u8; 8];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_one_second_to_five_minutes_with_jitter() {
        let s = Duration::from_secs;
        assert_eq!(delay(1, 0.0), s(1), "never under a second");
        assert_eq!(delay(1, 0.999), s(1));
        assert_eq!(delay(2, 0.0), s(1));
        assert_eq!(delay(2, 0.5), s(1).mul_f64(1.5));
        assert_eq!(delay(3, 0.0), s(2));
        assert_eq!(delay(3, 1.0), s(4));
        assert_eq!(delay(9, 1.0), s(256));
        assert_eq!(delay(10, 1.0), MAX);
        assert_eq!(delay(u32::MAX, 1.0), MAX, "no overflow");
        assert_eq!(delay(10, 0.0), MAX / 2);
        assert_eq!(delay(4, f64::NAN), s(4));
    }

    #[test]
    fn watches_retry_within_five_seconds_and_start_over_after_an_event() {
        use kube::runtime::utils::Backoff as _;
        let mut backoff = WatchBackoff::default();
        let waits: Vec<Duration> = backoff.by_ref().take(12).collect();
        assert_eq!(waits[0], WATCH_FIRST, "{waits:?}");
        assert!(waits.iter().all(|w| *w <= WATCH_MAX), "{waits:?}");
        assert!(waits[11] >= WATCH_MAX / 2, "{waits:?}");
        backoff.reset();
        assert_eq!(backoff.next(), Some(WATCH_FIRST));
    }

    #[test]
    fn random_numbers_spread() {
        let draws: Vec<f64> = (0..64).map(|_| random()).collect();
        assert!(draws.iter().all(|r| (0.0..1.0).contains(r)));
        let distinct: std::collections::BTreeSet<u64> = draws.iter().map(|r| r.to_bits()).collect();
        assert!(distinct.len() > 60);
    }
}
