//! [`Backoff`]: the one retry policy of the workspace, exponential, capped and jittered, that
//! forgets its streak after a healthy spell.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use tokio::time::Instant;

/// How long to wait before each retry of something that keeps failing: the wait doubles from
/// an initial one up to a cap, plus a random part (up to `jitter` times the wait) so that
/// many clients that failed together do not retry together; after a spell without any
/// failure it starts again from the initial wait.
///
/// [`Backoff::default`] is client-go's reflector's policy (800 ms doubling to 30 s, jitter
/// 1.0, so a wait is in `[d, 2d)`, forgotten after 2 minutes without a retry), which every
/// watch and retry loop of Rudder uses unless it says otherwise. Time is tokio's, so tests
/// run it on paused time.
///
/// ```
/// use std::time::Duration;
/// use rudder_core::backoff::Backoff;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1)).jitter(0.0);
/// assert_eq!(backoff.next_delay(), Duration::from_millis(100));
/// assert_eq!(backoff.next_delay(), Duration::from_millis(200));
/// backoff.reset();
/// assert_eq!(backoff.next_delay(), Duration::from_millis(100));
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    factor: f64,
    jitter: f64,
    reset_after: Duration,
    /// The wait before jitter that the next failure gets.
    next: Duration,
    /// When the last wait was handed out.
    last: Option<Instant>,
}

/// client-go's reflector: the first wait.
pub const DEFAULT_INITIAL: Duration = Duration::from_millis(800);
/// client-go's reflector: the longest wait before jitter.
pub const DEFAULT_CAP: Duration = Duration::from_secs(30);
/// client-go's reflector: a spell this long without a retry forgets the streak.
pub const DEFAULT_RESET_AFTER: Duration = Duration::from_secs(120);

impl Default for Backoff {
    fn default() -> Self {
        Self::new(DEFAULT_INITIAL, DEFAULT_CAP)
    }
}

impl Backoff {
    /// Waits from `initial` doubling to `cap`, with jitter 1.0 and a reset after
    /// [`DEFAULT_RESET_AFTER`] without a retry.
    pub fn new(initial: Duration, cap: Duration) -> Self {
        Self {
            initial,
            cap,
            factor: 2.0,
            jitter: 1.0,
            reset_after: DEFAULT_RESET_AFTER,
            next: initial,
            last: None,
        }
    }

    /// Each wait is the previous one times `factor` (at least 1).
    #[must_use]
    pub fn factor(mut self, factor: f64) -> Self {
        // Not a number, or below 1: no growth; infinite: straight to the cap.
        self.factor = if factor.is_nan() {
            1.0
        } else {
            factor.max(1.0)
        };
        self
    }

    /// A wait `d` becomes a random duration in `[d, d + jitter * d)`; `0.0` turns jitter
    /// off.
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        // Not a finite number: none; above 1 000: 1 000 (the sum is capped below anyway).
        self.jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1_000.0)
        } else {
            0.0
        };
        self
    }

    /// A spell this long without a retry starts the next streak from the initial wait.
    #[must_use]
    pub fn reset_after(mut self, after: Duration) -> Self {
        self.reset_after = after;
        self
    }

    /// The wait before the next retry, counting it as one more failure of the streak.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) >= self.reset_after)
        {
            self.next = self.initial;
        }
        self.last = Some(now);
        let base = self.next.min(self.cap);
        self.next = scaled(base, self.factor).min(self.cap);
        base.saturating_add(scaled(base, self.jitter * random_fraction()))
    }

    /// Waits [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Ends the streak: the next failure waits the initial wait.
    pub fn reset(&mut self) {
        self.next = self.initial;
        self.last = None;
    }
}

/// A random fraction in `[0, 1)`, from std's randomly keyed hasher (no random-number crate
/// for one number per retry).
/// `d` times `by`, saturating at `Duration::MAX` (never a panic: `by` is finite and not
/// negative here, or infinite for an infinite factor).
fn scaled(d: Duration, by: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * by).unwrap_or(Duration::MAX)
}

fn random_fraction() -> f64 {
    let random = RandomState::new().hash_one(Instant::now());
    // The top 53 bits as a fraction in [0, 1).
    #[allow(
        clippy::cast_precision_loss,
        reason = "53 bits fit a double's mantissa exactly"
    )]
    let fraction = (random >> 11) as f64 / (1_u64 << 53) as f64;
    fraction
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn extreme_settings_never_panic_and_stay_capped() {
        for (factor, jitter) in [
            (f64::INFINITY, 1.0),
            (f64::NAN, f64::NAN),
            (2.0, f64::INFINITY),
            (1e300, 1e300),
        ] {
            let cap = Duration::from_secs(30);
            let mut backoff = Backoff::new(Duration::from_secs(1), cap)
                .factor(factor)
                .jitter(jitter);
            for _ in 0..10 {
                let delay = backoff.next_delay();
                assert!(
                    delay <= cap.saturating_mul(1_001),
                    "{factor} {jitter}: {delay:?}"
                );
            }
        }
        let mut huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.next_delay(), Duration::MAX);
    }

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn waits_double_up_to_the_cap_without_jitter() {
        let mut backoff = Backoff::default().jitter(0.0);
        let waits: Vec<_> = (0..8).map(|_| backoff.next_delay()).collect();
        assert_eq!(
            waits,
            [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000].map(|ms| ms * MS)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_one_keeps_each_wait_in_d_to_2d() {
        let mut backoff = Backoff::default();
        let mut previous_base = Duration::ZERO;
        for base in [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000].map(|ms| ms * MS) {
            let wait = backoff.next_delay();
            assert!(wait >= base && wait < base * 2, "{wait:?} for {base:?}");
            assert!(base >= previous_base);
            previous_base = base;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_minutes_without_a_retry_forget_the_streak() {
        let mut backoff = Backoff::default().jitter(0.0);
        for _ in 0..5 {
            backoff.wait().await;
        }
        assert_eq!(backoff.next_delay(), 25600 * MS);
        // Retried within the spell: the streak goes on.
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(backoff.next_delay(), 30000 * MS);
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(backoff.next_delay(), 800 * MS);
        assert_eq!(backoff.next_delay(), 1600 * MS);
        backoff.reset();
        assert_eq!(backoff.next_delay(), 800 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn wait_sleeps_the_delay_on_tokio_time() {
        let mut backoff = Backoff::new(100 * MS, Duration::from_secs(1)).jitter(0.0);
        let start = Instant::now();
        backoff.wait().await;
        backoff.wait().await;
        assert_eq!(start.elapsed(), 300 * MS);
    }
}
