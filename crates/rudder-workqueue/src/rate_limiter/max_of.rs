//! The longest delay of several limiters.

use std::time::Duration;

use super::RateLimiter;

/// Asks every limiter and returns the longest delay, client-go's `MaxOfRateLimiter`.
/// [`forget`](RateLimiter::forget) goes to all of them; [`num_requeues`](RateLimiter::num_requeues)
/// is the largest count any of them reports.
pub struct MaxOf<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOf<K> {
    /// Combines `limiters`. With none, every delay is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> std::fmt::Debug for MaxOf<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<K> RateLimiter<K> for MaxOf<K> {
    fn when(&self, key: &K) -> Duration {
        // Every limiter must record the failure, so no short-circuit.
        self.limiters
            .iter()
            .map(|l| l.when(key))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, key: &K) {
        for l in &self.limiters {
            l.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ExponentialBackoff, TokenBucket, default_controller_rate_limiter};
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn takes_the_longest_delay() {
        let limiter: MaxOf<&str> = MaxOf::new(vec![
            Box::new(ExponentialBackoff::new(
                Duration::from_millis(1),
                Duration::from_secs(1),
            )),
            Box::new(TokenBucket::new(1.0, 2)),
        ]);
        // Bucket free for two, exponential 1 ms then 2 ms.
        assert_eq!(limiter.when(&"a"), Duration::from_millis(1));
        assert_eq!(limiter.when(&"a"), Duration::from_millis(2));
        // Bucket empty now: one second beats 4 ms.
        assert_eq!(limiter.when(&"a"), Duration::from_secs(1));
        assert_eq!(limiter.num_requeues(&"a"), 3);
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_matches_client_go() {
        let limiter = default_controller_rate_limiter::<u32>();
        // Within the burst, the per-key exponential decides.
        assert_eq!(limiter.when(&1), Duration::from_millis(5));
        assert_eq!(limiter.when(&1), Duration::from_millis(10));
        for key in 2..100 {
            assert_eq!(limiter.when(&key), Duration::from_millis(5));
        }
        // 100 tokens spent: the 101st failure anywhere waits for the bucket (100 ms at 10/s).
        assert_eq!(limiter.when(&500), Duration::from_millis(100));
    }
}
