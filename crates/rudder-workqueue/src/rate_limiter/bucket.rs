//! An overall token bucket: a steady rate with bursts, shared by every key.

// parking_lot's lock, as the queue's: no poisoning (nothing panics while holding it).
use parking_lot::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::RateLimiter;

/// An overall token bucket, client-go's `BucketRateLimiter`: `rate` retries per second with
/// bursts of up to `burst`, whatever the key.
///
/// Each [`when`](RateLimiter::when) takes a token; when none is left it reserves the next one
/// and returns the wait until it is due. A wait never exceeds `max_wait` (default 1000 s, the
/// exponential cap): once the reservations run that far ahead, further callers get `max_wait`
/// without deepening the debt, so a storm of failures cannot push retries out without bound.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    max_wait: Duration,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens available; negative when future tokens are reserved.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// `rate` tokens per second, up to `burst` banked; a full bucket to start with.
    ///
    /// A rate that is not a positive finite number is treated as one token per second, and a
    /// burst of zero as one, so that the bucket always lets work through eventually.
    pub fn new(rate: f64, burst: u32) -> Self {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            1.0
        };
        let burst = f64::from(burst.max(1));
        Self {
            rate,
            burst,
            max_wait: Duration::from_secs(1000),
            state: Mutex::new(BucketState {
                tokens: burst,
                updated: Instant::now(),
            }),
        }
    }

    /// Caps the wait [`when`](RateLimiter::when) returns.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    fn reserve(&self) -> Duration {
        let now = Instant::now();
        let mut st = self.state.lock();
        let elapsed = now.saturating_duration_since(st.updated).as_secs_f64();
        st.tokens = (st.tokens + elapsed * self.rate).min(self.burst);
        st.updated = now;
        let floor = -(self.max_wait.as_secs_f64() * self.rate);
        if st.tokens - 1.0 < floor {
            return self.max_wait;
        }
        st.tokens -= 1.0;
        if st.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.tokens / self.rate).min(self.max_wait)
        }
    }
}

impl Default for TokenBucket {
    /// client-go's numbers: 10 per second, burst 100.
    fn default() -> Self {
        Self::new(10.0, 100)
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn when(b: &TokenBucket) -> Duration {
        RateLimiter::<u32>::when(b, &0)
    }

    #[tokio::test(start_paused = true)]
    async fn burst_is_free_then_rate_spaces_reservations() {
        let bucket = TokenBucket::default();
        for _ in 0..100 {
            assert_eq!(when(&bucket), Duration::ZERO);
        }
        let waits: Vec<_> = (0..3).map(|_| when(&bucket)).collect();
        assert_eq!(waits, [100, 200, 300].map(Duration::from_millis));
        // Time refills the bucket at the rate.
        tokio::time::advance(Duration::from_secs(1)).await;
        // 3 reserved, 10 refilled: 7 free tokens.
        for _ in 0..7 {
            assert_eq!(when(&bucket), Duration::ZERO);
        }
        assert_eq!(when(&bucket), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_never_exceed_max_wait() {
        let bucket = TokenBucket::new(1.0, 1).with_max_wait(Duration::from_secs(5));
        let waits: Vec<_> = (0..10).map(|_| when(&bucket)).collect();
        assert_eq!(waits[0], Duration::ZERO);
        assert_eq!(waits[1], Duration::from_secs(1));
        assert!(waits.iter().all(|w| *w <= Duration::from_secs(5)));
        assert_eq!(waits[9], Duration::from_secs(5));
        // The debt did not grow past max_wait: after 5 s a token is free again... after 6 s.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(when(&bucket), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn nonsense_rate_still_lets_work_through() {
        let bucket = TokenBucket::new(f64::NAN, 0);
        assert_eq!(when(&bucket), Duration::ZERO);
        assert_eq!(when(&bucket), Duration::from_secs(1));
    }
}
