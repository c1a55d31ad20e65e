//! Rate limiters: how long a key waits before it is retried.
//!
//! [`WorkQueue::add_rate_limited`](crate::WorkQueue::add_rate_limited) asks the queue's limiter
//! [`RateLimiter::when`] a key may run again, and [`WorkQueue::forget`](crate::WorkQueue::forget)
//! tells it the key succeeded. The limiters here are client-go's, with its defaults:
//!
//! | limiter | delay |
//! |---|---|
//! | [`ExponentialBackoff`] | per key: `base * 2^failures`, capped (5 ms, 10 ms, 20 ms, ... 1000 s) |
//! | [`TokenBucket`] | overall: 10 per second with bursts of 100, never more than a maximum wait |
//! | [`FastSlow`] | per key: a short delay for the first attempts, then a long one |
//! | [`MaxOf`] | the longest delay any of its limiters gives |
//!
//! [`default_controller_rate_limiter`] is client-go's controller default: the longer of the
//! exponential per-key backoff and the overall bucket.

mod bucket;
mod default;
mod exponential;
mod failures;
mod fast_slow;
mod max_of;

use std::sync::Arc;
use std::time::Duration;

pub use bucket::TokenBucket;
pub use default::default_controller_rate_limiter;
pub use exponential::ExponentialBackoff;
pub use fast_slow::FastSlow;
pub use max_of::MaxOf;

/// Decides how long a key waits before it is retried.
///
/// Implementations must be cheap and must not block: the queue calls them on every
/// rate-limited add. Per-key state must be dropped by [`forget`](Self::forget), and should
/// also be dropped for keys that stop failing without being forgotten, so that state for keys
/// that are gone cannot pile up.
pub trait RateLimiter<K>: Send + Sync {
    /// Records a failure of `key` and returns how long it should wait before its next run.
    fn when(&self, key: &K) -> Duration;

    /// Clears what the limiter remembers about `key`: its next failure starts over.
    fn forget(&self, key: &K);

    /// How many failures of `key` the limiter remembers.
    fn num_requeues(&self, key: &K) -> u32;
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<R> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Arc<R> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}
