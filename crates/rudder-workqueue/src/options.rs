//! How a key is added: now or later, rate limited or not, and at what priority.

use std::time::Duration;

/// Options for [`WorkQueue::add_with`](crate::WorkQueue::add_with).
///
/// ```
/// use std::time::Duration;
/// use rudder_workqueue::AddOptions;
///
/// let opts = AddOptions::new().after(Duration::from_secs(1)).priority(10);
/// assert_eq!(opts.priority, 10);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AddOptions {
    /// Run no sooner than this from now.
    pub after: Option<Duration>,
    /// Also wait what the queue's rate limiter says (the longer wait wins) and count a retry.
    pub rate_limited: bool,
    /// Higher runs first; the default is 0. Ties go to the key that became ready first.
    pub priority: i32,
}

impl AddOptions {
    /// Now, not rate limited, priority 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Run no sooner than `delay` from now.
    pub fn after(mut self, delay: Duration) -> Self {
        self.after = Some(delay);
        self
    }

    /// Also wait for the rate limiter.
    pub fn rate_limited(mut self) -> Self {
        self.rate_limited = true;
        self
    }

    /// Queue at `priority`.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
}
