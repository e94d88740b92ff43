//! Storm control, pure and driven by the caller's clock: a coalescing window
//! per workload, a token bucket over all patches, and a minimum interval
//! between two patches of one workload.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// Changes within `window` of a workload's first pending change are coalesced
/// into one patch when the window closes.
#[derive(Debug)]
pub struct Coalescer<K> {
    window: Duration,
    /// Workload -> when its window opened.
    pending: HashMap<K, Instant>,
}

impl<K: Eq + Hash + Clone> Coalescer<K> {
    pub fn new(window: Duration) -> Self {
        Coalescer { window, pending: HashMap::new() }
    }

    /// Records a change; opens the window unless one is open already.
    pub fn changed(&mut self, key: K, now: Instant) {
        self.pending.entry(key).or_insert(now);
    }

    /// Removes and returns every workload whose window has closed, oldest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<(K, Instant)> {
        let mut due: Vec<(K, Instant)> = self
            .pending
            .iter()
            .filter(|(_, opened)| **opened + self.window <= now)
            .map(|(k, o)| (k.clone(), *o))
            .collect();
        due.sort_by_key(|(_, opened)| *opened);
        for (key, _) in &due {
            self.pending.remove(key);
        }
        due
    }

    /// Forgets `key` (deleted, or out of scope).
    pub fn remove(&mut self, key: &K) {
        self.pending.remove(key);
    }

    /// Forgets everything (this replica stopped leading).
    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// When the next window closes.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.values().min().map(|opened| *opened + self.window)
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The smallest rate the bucket accepts: one patch a day.
const MIN_RATE: f64 = 1.0 / 86_400.0;
/// The longest single wait it asks for.
const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// At most `rate` patches per second on average, `burst` at once.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `rate` is positive and finite and `burst` at least 1 (checked with the
    /// command line); anything else is clamped rather than trusted.
    pub fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        let rate = if rate.is_finite() { rate.max(MIN_RATE) } else { MIN_RATE };
        TokenBucket { rate, burst, tokens: burst, last: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes a token, or says how long until one is available.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.rate;
            Err(Duration::try_from_secs_f64(wait).unwrap_or(Duration::MAX).min(MAX_WAIT))
        }
    }
}

/// Remembers when each workload was last patched.
#[derive(Debug)]
pub struct MinInterval<K> {
    interval: Duration,
    last: HashMap<K, Instant>,
}

impl<K: Eq + Hash> MinInterval<K> {
    pub fn new(interval: Duration) -> Self {
        MinInterval { interval, last: HashMap::new() }
    }

    /// When `key` may be patched again (now or later).
    pub fn ready_at(&self, key: &K, now: Instant) -> Instant {
        self.last.get(key).map_or(now, |last| (*last + self.interval).max(now))
    }

    pub fn patched(&mut self, key: K, now: Instant) {
        if !self.interval.is_zero() {
            self.last.insert(key, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_of_changes_is_one_patch_when_the_window_closes() {
        let t0 = Instant::now();
        let mut c = Coalescer::new(2000 * MS);
        for i in 0..50 {
            c.changed("web", t0 + i * 30 * MS);
        }
        assert!(c.take_due(t0 + 1999 * MS).is_empty());
        assert_eq!(c.next_due(), Some(t0 + 2000 * MS), "the window opened at the first change");
        assert_eq!(c.take_due(t0 + 2000 * MS), vec![("web", t0)]);
        assert!(c.is_empty());
        c.changed("web", t0 + 2500 * MS);
        assert_eq!(c.next_due(), Some(t0 + 4500 * MS), "a later change opens a new window");
    }

    #[test]
    fn due_workloads_come_oldest_first() {
        let t0 = Instant::now();
        let mut c = Coalescer::new(10 * MS);
        c.changed("b", t0 + MS);
        c.changed("a", t0);
        c.changed("c", t0 + 50 * MS);
        let due: Vec<_> = c.take_due(t0 + 20 * MS).into_iter().map(|(k, _)| k).collect();
        assert_eq!(due, ["a", "b"]);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_bucket_allows_a_burst_then_paces_at_the_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 20, t0);
        assert!((0..20).all(|_| bucket.take(t0).is_ok()));
        let wait = bucket.take(t0).expect_err("empty");
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
        assert!(bucket.take(t0 + 200 * MS).is_ok());
        assert!(bucket.take(t0 + 200 * MS).is_err());
        // Over the next 10 s, 5 per second: 50, give or take float rounding at the edge.
        let taken =
            (1..=1000).filter(|i| bucket.take(t0 + 200 * MS + *i * 10 * MS).is_ok()).count();
        assert!((49..=50).contains(&taken), "{taken}");
    }

    #[test]
    fn a_bucket_never_panics_on_odd_rates() {
        let t0 = Instant::now();
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE] {
            let mut bucket = TokenBucket::new(rate, 0, t0);
            assert!(bucket.take(t0).is_ok(), "a burst of at least one");
            let wait = bucket.take(t0).expect_err("then empty");
            assert!(wait <= MAX_WAIT, "{rate}: {wait:?}");
        }
    }

    #[test]
    fn min_interval_delays_a_second_patch() {
        let t0 = Instant::now();
        let mut m = MinInterval::new(60_000 * MS);
        assert_eq!(m.ready_at(&"web", t0), t0);
        m.patched("web", t0);
        assert_eq!(m.ready_at(&"web", t0 + MS), t0 + 60_000 * MS);
        assert_eq!(m.ready_at(&"other", t0 + MS), t0 + MS);
        let mut zero = MinInterval::new(Duration::ZERO);
        zero.patched("web", t0);
        assert_eq!(zero.ready_at(&"web", t0 + MS), t0 + MS);
    }
}
