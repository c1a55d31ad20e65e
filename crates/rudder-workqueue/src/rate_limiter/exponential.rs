//! Per-key exponential backoff: `base * 2^failures`, capped.

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::RateLimiter;
use super::failures::FailureTable;

/// Per-key exponential backoff, client-go's `ItemExponentialFailureRateLimiter`.
///
/// The n-th failure of a key (counting from zero) waits `base * 2^n`, never more than `max`:
/// with the defaults 5 ms, 10 ms, 20 ms, ... up to 1000 s. A key's count is cleared by
/// [`forget`](RateLimiter::forget), and dropped on its own once the key has not failed for
/// `forget_after` (default twice `max`), so keys that vanish without being forgotten do not
/// accumulate.
pub struct ExponentialBackoff<K> {
    base: Duration,
    max: Duration,
    failures: FailureTable<K>,
}

impl<K: Hash + Eq + Clone> ExponentialBackoff<K> {
    /// Backoff from `base`, doubling per failure, capped at `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self::with_forget_after(base, max, max.saturating_mul(2))
    }

    /// Like [`new`](Self::new), dropping a key's count once it has not failed for `forget_after`.
    pub fn with_forget_after(base: Duration, max: Duration, forget_after: Duration) -> Self {
        Self {
            base,
            max,
            failures: FailureTable::new(forget_after),
        }
    }
}

impl<K: Hash + Eq + Clone> Default for ExponentialBackoff<K> {
    /// client-go's numbers: 5 ms base, 1000 s cap.
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_secs(1000))
    }
}

impl<K> fmt::Debug for ExponentialBackoff<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExponentialBackoff")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> RateLimiter<K> for ExponentialBackoff<K> {
    fn when(&self, key: &K) -> Duration {
        let before = self.failures.fail(key);
        2u32.checked_pow(before)
            .and_then(|factor| self.base.checked_mul(factor))
            .map_or(self.max, |d| d.min(self.max))
    }

    fn forget(&self, key: &K) {
        self.failures.forget(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.count(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_from_base_and_caps() {
        let limiter = ExponentialBackoff::default();
        let got: Vec<_> = (0..20).map(|_| limiter.when(&"k")).collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(&got[..5], &[ms(5), ms(10), ms(20), ms(40), ms(80)]);
        // 5 ms * 2^18 = 1310.72 s, past the cap.
        assert_eq!(got[17], ms(655_360));
        assert_eq!(got[18], Duration::from_secs(1000));
        assert_eq!(got[19], Duration::from_secs(1000));
        assert_eq!(limiter.num_requeues(&"k"), 20);
        // Far past any shift width: still the cap, no overflow.
        for _ in 0..100 {
            assert_eq!(limiter.when(&"k"), Duration::from_secs(1000));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn forget_starts_over_and_keys_are_independent() {
        let limiter = ExponentialBackoff::default();
        limiter.when(&"a");
        limiter.when(&"a");
        assert_eq!(limiter.when(&"b"), Duration::from_millis(5));
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn keys_that_stop_failing_are_dropped() {
        let limiter = ExponentialBackoff::with_forget_after(
            Duration::from_millis(5),
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        for key in 0..5000u32 {
            limiter.when(&key);
        }
        assert_eq!(limiter.failures.len(), 5000);
        tokio::time::advance(Duration::from_secs(11)).await;
        // An idle key's count has expired even before the sweep runs.
        assert_eq!(limiter.num_requeues(&1), 0);
        for key in 5000..10_000u32 {
            limiter.when(&key);
        }
        // The sweep dropped the first 5000; the table holds only keys still failing.
        assert!(
            limiter.failures.len() <= 5000 + 1,
            "{}",
            limiter.failures.len()
        );
        assert_eq!(limiter.when(&1), Duration::from_millis(5));
    }
}
