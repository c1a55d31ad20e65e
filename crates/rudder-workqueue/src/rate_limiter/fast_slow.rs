//! Per-key fast then slow retries.

use std::hash::Hash;
use std::time::Duration;

use super::RateLimiter;
use super::failures::FailureTable;

/// client-go's `ItemFastSlowRateLimiter`: a key's first `fast_attempts` retries wait `fast`,
/// later ones wait `slow`. Counts are cleared by [`forget`](RateLimiter::forget), and dropped
/// once a key has not failed for `forget_after` (default twice `slow`, at least a minute).
pub struct FastSlow<K> {
    fast: Duration,
    slow: Duration,
    fast_attempts: u32,
    failures: FailureTable<K>,
}

impl<K: Hash + Eq + Clone> FastSlow<K> {
    /// `fast_attempts` retries after `fast`, then every `slow`.
    pub fn new(fast: Duration, slow: Duration, fast_attempts: u32) -> Self {
        let forget_after = slow.saturating_mul(2).max(Duration::from_secs(60));
        Self {
            fast,
            slow,
            fast_attempts,
            failures: FailureTable::new(forget_after),
        }
    }
}

impl<K> std::fmt::Debug for FastSlow<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastSlow")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("fast_attempts", &self.fast_attempts)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> RateLimiter<K> for FastSlow<K> {
    fn when(&self, key: &K) -> Duration {
        if self.failures.fail(key) < self.fast_attempts {
            self.fast
        } else {
            self.slow
        }
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
    async fn fast_attempts_then_slow() {
        let limiter = FastSlow::new(Duration::from_millis(5), Duration::from_secs(10), 3);
        let got: Vec<_> = (0..5).map(|_| limiter.when(&"k")).collect();
        let fast = Duration::from_millis(5);
        let slow = Duration::from_secs(10);
        assert_eq!(got, [fast, fast, fast, slow, slow]);
        assert_eq!(limiter.num_requeues(&"k"), 5);
        limiter.forget(&"k");
        assert_eq!(limiter.when(&"k"), fast);
    }
}
