//! [`Runnable`]: anything the manager (rudder-manager) starts, runs until cancelled, and
//! stops.

use std::future::Future;

use futures::future::BoxFuture;

use crate::{BoxError, LeaderGate, Shutdown};

/// Something the manager starts and stops: a controller, a server, a periodic job.
///
/// `start` runs until its [`Shutdown`] fires, then stops by the deadline the shutdown carries
/// (the manager's graceful-shutdown deadline, handed down: a runnable runs no stop timer of
/// its own). Returning an error (or returning before the stop, with an error) stops the whole
/// manager with that error; returning `Ok` early just ends that runnable. A runnable still
/// running at the deadline is aborted and named in the manager's `Error::ShutdownTimeout`;
/// one that panics stops the manager with `Error::Panicked`.
pub trait Runnable: Send + 'static {
    /// A name for logs and errors.
    fn name(&self) -> String;

    /// Whether it may only run on the elected leader (default: yes, as controllers).
    fn needs_leader_election(&self) -> bool {
        true
    }

    /// Offers a leader-only runnable the gate that says when this replica may do
    /// leader-only work ([`LeaderGate`]: open while its leadership is known to be valid);
    /// returns whether it takes it. The manager offers it (with leader election) before
    /// `start`. A runnable that takes it promises to do no leader-only work while the gate
    /// is closed, so the manager may start it before this replica leads (warm standby,
    /// rudder-manager's `ManagerBuilder::warm_standby`); one that does not (the default)
    /// starts only once this replica leads. Controllers take it: their sources run and queue,
    /// their workers wait on the gate.
    fn set_leader_gate(&mut self, gate: LeaderGate) -> bool {
        let _ = gate;
        false
    }

    /// Runs until `shutdown` fires, then stops by its deadline.
    fn start(self: Box<Self>, shutdown: Shutdown) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// A runnable from a closure: `f(shutdown)` runs until `shutdown` fires
/// (`shutdown.stopped().await` returns the deadline to stop by).
pub fn runnable<F, Fut>(name: impl Into<String>, needs_leader_election: bool, f: F) -> impl Runnable
where
    F: FnOnce(Shutdown) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    FnRunnable {
        name: name.into(),
        leader: needs_leader_election,
        f,
    }
}

struct FnRunnable<F> {
    name: String,
    leader: bool,
    f: F,
}

impl<F, Fut> Runnable for FnRunnable<F>
where
    F: FnOnce(Shutdown) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    fn name(&self) -> String {
        self.name.clone()
    }

    fn needs_leader_election(&self) -> bool {
        self.leader
    }

    fn start(self: Box<Self>, shutdown: Shutdown) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((self.f)(shutdown))
    }
}
