//! When a failed delivery is tried again: three retries after about 1, 2 and 4 s, each
//! stretched or shrunk by up to a fifth at random, so that the retries of many notices that
//! failed together do not arrive together. Pure: the caller passes the randomness.

use std::time::Duration;

/// Retries after the first attempt.
pub const RETRIES: u32 = 3;

/// How far a delay may move either way, as a fraction of it.
pub const JITTER: f64 = 0.2;

/// The wait before retry `retry` (1 to [`RETRIES`]): `unit` (1 s in production) doubled for
/// each retry before it, times a factor in `[1 - JITTER, 1 + JITTER)` that `jitter` (in
/// `[0, 1)`) picks. `None` past the last retry.
pub fn retry_delay(retry: u32, unit: Duration, jitter: f64) -> Option<Duration> {
    if retry == 0 || retry > RETRIES {
        return None;
    }
    let base = unit * 2u32.pow(retry - 1);
    let factor = 1.0 - JITTER + 2.0 * JITTER * jitter.clamp(0.0, 1.0);
    Some(base.mul_f64(factor))
}

/// A random number in `[0, 1)`; the middle, 0.5 (no jitter), where the system's randomness
/// is unavailable.
pub fn random_jitter() -> f64 {
    let mut bytes = [0u8; 4];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0),
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn three_retries_after_about_one_two_and_four_seconds() {
        let middle: Vec<_> = (0..=4).map(|r| retry_delay(r, SECOND, 0.5)).collect();
        assert_eq!(middle, [None, Some(SECOND), Some(2 * SECOND), Some(4 * SECOND), None]);
        for (retry, base) in [(1, 1.0), (2, 2.0), (3, 4.0)] {
            let low = retry_delay(retry, SECOND, 0.0).expect("retry").as_secs_f64();
            let high = retry_delay(retry, SECOND, 0.999_999).expect("retry").as_secs_f64();
            assert!((low - base * 0.8).abs() < 1e-6, "retry {retry}: {low}");
            assert!(high < base * 1.2 && high > base * 1.199, "retry {retry}: {high}");
        }
        // Out-of-range randomness stays within the bounds.
        assert_eq!(retry_delay(1, SECOND, 7.0), Some(SECOND.mul_f64(1.2)));
        // The unit scales it all (tests run on milliseconds).
        assert_eq!(retry_delay(3, Duration::from_millis(10), 0.5), Some(Duration::from_millis(40)));
        for _ in 0..1000 {
            let j = random_jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }
}
