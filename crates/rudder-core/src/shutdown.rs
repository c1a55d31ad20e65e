//! [`Shutdown`]: a stop signal that carries the deadline the stop must meet.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TrackedFuture;

/// A stop signal with its deadline, handed down from whoever stops (the manager) to what it
/// stops (controllers, runnables), so one deadline governs one stop and no layer below runs
/// a timer of its own for it.
///
/// [`stop`](Self::stop) records the deadline, then fires the signal; [`stopped`](Self::stopped)
/// waits for the signal and answers the deadline: `Some(instant)` (finish by then) or `None`
/// (take as long as needed). Cloning gives another handle to the same signal.
///
/// A runnable still running at the deadline is aborted by whoever stops it; the tasks it
/// spawned (in a `JoinSet` it owns, aborted when the runnable is dropped) are joined with it
/// when they were [`track`](Self::track)ed: see [`tracked_ended`](Self::tracked_ended).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use rudder_core::Shutdown;
/// use tokio::time::Instant;
///
/// let shutdown = Shutdown::new();
/// let deadline = Instant::now() + Duration::from_secs(5);
/// shutdown.stop(Some(deadline));
/// assert_eq!(shutdown.stopped().await, Some(deadline));
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    token: CancellationToken,
    deadline: Arc<OnceLock<Option<Instant>>>,
    /// The runnable's tasks, joined by whoever aborts it.
    tasks: TaskTracker,
}

impl Shutdown {
    /// A signal not fired yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A signal fired when `token` is cancelled. A stop through the token alone carries no
    /// deadline ([`deadline`](Self::deadline) says `None` and [`was_given_deadline`] is
    /// false): the receiver then uses its own default.
    ///
    /// [`was_given_deadline`]: Self::was_given_deadline
    pub fn from_token(token: CancellationToken) -> Self {
        Self {
            token,
            deadline: Arc::default(),
            tasks: TaskTracker::new(),
        }
    }

    /// Fires the signal with `deadline` (`None`: no deadline). The first stop's deadline
    /// holds; later calls change nothing.
    pub fn stop(&self, deadline: Option<Instant>) {
        let _ = self.deadline.set(deadline);
        self.token.cancel();
    }

    /// Waits until the signal fires, and returns the deadline.
    pub async fn stopped(&self) -> Option<Instant> {
        self.token.cancelled().await;
        self.deadline()
    }

    /// Whether the signal has fired.
    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The deadline of the stop, if one was given.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.get().copied().flatten()
    }

    /// Whether the stop was given through [`stop`](Self::stop) (with or without a deadline)
    /// rather than by cancelling the token alone.
    pub fn was_given_deadline(&self) -> bool {
        self.deadline.get().is_some()
    }

    /// The underlying token (cancelled when the signal fires), for `select!` or for APIs
    /// that take a token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Tracks `future`, the body of a task the runnable spawns, so that
    /// [`tracked_ended`](Self::tracked_ended) waits for it. Track only what is aborted when
    /// the runnable is dropped (a task in a `JoinSet` the runnable owns): an aborted runnable
    /// cannot join its own tasks, so whoever aborted it does, through this signal.
    pub fn track<F: Future>(&self, future: F) -> TrackedFuture<F> {
        self.tasks.track_future(future)
    }

    /// Waits until every future [`track`](Self::track)ed on this signal has ended (completed
    /// or been dropped with its aborted task). Whoever aborts a runnable at the deadline
    /// awaits this after joining the runnable's own task, so nothing the runnable spawned
    /// runs once its stop has returned.
    pub async fn tracked_ended(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}
