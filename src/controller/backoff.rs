//! Exponential backoff with jitter for failed reads and reconciliations:
//! 1 s, 2 s, 4 s … up to 5 minutes, each drawn from the upper half of its
//! step so that retries of many objects spread out instead of arriving together.

use std::time::Duration;

pub const FIRST: Duration = Duration::from_secs(1);
pub const MAX: Duration = Duration::from_secs(300);

/// The wait before retry number `failures` (1 after the first failure);
/// `random` is uniform in [0, 1).
pub fn delay(failures: u32, random: f64) -> Duration {
    let step = FIRST.saturating_mul(1u32 << failures.saturating_sub(1).min(16)).min(MAX);
    let random = if random.is_finite() { random.clamp(0.0, 1.0) } else { 0.0 };
    step.mul_f64(0.5 + random / 2.0).max(FIRST)
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
    fn random_numbers_spread() {
        let draws: Vec<f64> = (0..64).map(|_| random()).collect();
        assert!(draws.iter().all(|r| (0.0..1.0).contains(r)));
        let distinct: std::collections::BTreeSet<u64> = draws.iter().map(|r| r.to_bits()).collect();
        assert!(distinct.len() > 60);
    }
}
