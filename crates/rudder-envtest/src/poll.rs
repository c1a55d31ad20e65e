//! [`eventually`]: wait for a condition with a deadline, the way tests against a real API
//! server must (its effects are asynchronous), instead of sleeping for a guessed time.

use std::time::Duration;

/// How often [`eventually`] checks.
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
/// let third = rudder_envtest::eventually("the third call", Duration::from_secs(5), async || {
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
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}
