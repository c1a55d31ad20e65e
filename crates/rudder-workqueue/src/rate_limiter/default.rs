//! [`default_controller_rate_limiter`]: the limiters client-go's controllers use, composed.

use super::{ExponentialBackoff, MaxOf, TokenBucket};

/// client-go's default controller rate limiter: the longer of [`ExponentialBackoff::default`]
/// (5 ms doubling to 1000 s per key) and [`TokenBucket::default`] (10 per second, burst 100).
pub fn default_controller_rate_limiter<K>() -> MaxOf<K>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    MaxOf::new(vec![
        Box::new(ExponentialBackoff::default()),
        Box::new(TokenBucket::default()),
    ])
}
