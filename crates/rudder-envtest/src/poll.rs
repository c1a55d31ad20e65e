//! Waiting for a condition with a deadline, the way tests against a real API server (or any
//! server on another task) must, instead of sleeping for a guessed time: [`eventually`] for a
//! value an async check finds, [`until`] for a plain `bool`, and [`Poll`] for another
//! interval or an answer instead of a panic.
//!
//! Time is tokio's clock, so a test on paused time (`#[tokio::test(start_paused = true)]`)
//! polls on paused time, and a deadline there is tokio time, not wall time.

use std::fmt;
use std::time::Duration;

/// How often [`eventually`] and [`until`] check, unless a [`Poll`] says otherwise.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Calls `check` every [`POLL_INTERVAL`] until it returns `Some`, and returns that value.
///
/// # Panics
///
/// After `timeout` without a value, with a message naming `what`: this is an assertion for
/// tests.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// let mut calls = 0;
/// let third = rudder_envtest::poll::eventually("the third call", Duration::from_secs(5), async || {
///     calls += 1;
///     (calls == 3).then_some(calls)
/// })
/// .await;
/// assert_eq!(third, 3);
/// # }
/// ```
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    Poll::new(what, timeout).eventually(check).await
}

/// Checks `condition` every [`POLL_INTERVAL`] until it holds: [`eventually`] for a
/// condition that needs no `await` (an atomic counter, a channel's length, a flag).
///
/// # Panics
///
/// After `timeout` with `condition` still false, naming `what`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::time::Duration;
///
/// let done = Arc::new(AtomicBool::new(false));
/// tokio::spawn({
///     let done = Arc::clone(&done);
///     async move { done.store(true, Ordering::SeqCst) }
/// });
/// rudder_envtest::poll::until("the task done", Duration::from_secs(5), || {
///     done.load(Ordering::SeqCst)
/// })
/// .await;
/// # }
/// ```
pub async fn until(what: &str, timeout: Duration, condition: impl FnMut() -> bool) {
    Poll::new(what, timeout).until(condition).await;
}

/// A wait for something named, with a deadline and an interval between checks.
///
/// [`eventually`] and [`until`] are this with [`POLL_INTERVAL`]; make one to check more
/// often (a benchmark timing how soon something happens) or on paused time at a finer
/// step, or to get a [`TimedOut`] to handle instead of a panic.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
///
/// use rudder_envtest::poll::Poll;
///
/// let mut calls = 0;
/// Poll::new("the second call", Duration::from_secs(5))
///     .every(Duration::from_millis(1))
///     .until(|| {
///         calls += 1;
///         calls == 2
///     })
///     .await;
///
/// let never = Poll::new("a value that never comes", Duration::from_millis(30))
///     .try_eventually(async || None::<()>)
///     .await;
/// assert!(never.is_err());
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a Poll does nothing until one of its waits is awaited"]
pub struct Poll<'a> {
    what: &'a str,
    timeout: Duration,
    interval: Duration,
}

impl<'a> Poll<'a> {
    /// A wait for `what` of at most `timeout`, checking every [`POLL_INTERVAL`].
    pub fn new(what: &'a str, timeout: Duration) -> Self {
        Self {
            what,
            timeout,
            interval: POLL_INTERVAL,
        }
    }

    /// Checks every `interval` instead.
    pub fn every(self, interval: Duration) -> Self {
        Self { interval, ..self }
    }

    /// Calls `check` until it returns `Some`, and returns that value; the last call is made
    /// at or after the deadline, so a check that passes just in time counts.
    ///
    /// # Panics
    ///
    /// After the timeout without a value, naming what was awaited.
    pub async fn eventually<T>(self, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {:?} waiting for {}",
                self.timeout,
                self.what
            );
            tokio::time::sleep(self.interval).await;
        }
    }

    /// Checks `condition` until it holds.
    ///
    /// # Panics
    ///
    /// After the timeout with `condition` still false, naming what was awaited.
    pub async fn until(self, mut condition: impl FnMut() -> bool) {
        self.eventually(async || condition().then_some(())).await;
    }

    /// As [`eventually`](Self::eventually), but a timeout is an answer, not a panic.
    ///
    /// # Errors
    ///
    /// [`TimedOut`] after the timeout without a value.
    pub async fn try_eventually<T>(
        self,
        mut check: impl AsyncFnMut() -> Option<T>,
    ) -> Result<T, TimedOut> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            if let Some(value) = check().await {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TimedOut {
                    what: self.what.to_owned(),
                    timeout: self.timeout,
                });
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}

/// A [`Poll`] ran out of time: what it waited for, and how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedOut {
    /// What was awaited, as the poll named it.
    pub what: String,
    /// How long it waited.
    pub timeout: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.timeout, self.what
        )
    }
}

impl std::error::Error for TimedOut {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Poll, TimedOut};

    #[tokio::test(start_paused = true)]
    async fn checks_at_the_interval_until_the_deadline_then_times_out() {
        let start = tokio::time::Instant::now();
        let mut calls = 0;
        let result = Poll::new("nothing", Duration::from_millis(100))
            .every(Duration::from_millis(10))
            .try_eventually(async || {
                calls += 1;
                None::<()>
            })
            .await;
        assert_eq!(
            result,
            Err(TimedOut {
                what: "nothing".into(),
                timeout: Duration::from_millis(100)
            })
        );
        // One check at 0 ms and one after each 10 ms step, the last at the deadline.
        assert_eq!(calls, 11);
        assert_eq!(start.elapsed(), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn returns_the_first_value_without_waiting_more() {
        let start = tokio::time::Instant::now();
        let mut calls = 0;
        let value = Poll::new("the third call", Duration::from_secs(1))
            .eventually(async || {
                calls += 1;
                (calls == 3).then_some(calls * 10)
            })
            .await;
        assert_eq!(value, 30);
        assert_eq!(start.elapsed(), 2 * super::POLL_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 50ms waiting for the flag")]
    async fn until_fails_the_test_naming_what_it_awaited() {
        super::until("the flag", Duration::from_millis(50), || false).await;
    }
}
