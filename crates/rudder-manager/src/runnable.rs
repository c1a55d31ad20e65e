//! [`Runnable`]: anything the manager starts, runs until cancelled, and stops.

use std::future::Future;

use futures::future::BoxFuture;
use rudder_controller::{Controller, Reconciler};
use tokio_util::sync::CancellationToken;

/// An error a runnable ends with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Something the manager starts and stops: a controller, a server, a periodic job.
///
/// `start` runs until `cancel` fires, then returns promptly. Returning an error (or returning
/// before `cancel` fires, with an error) stops the whole manager with that error; returning
/// `Ok` early just ends that runnable.
pub trait Runnable: Send + 'static {
    /// A name for logs and errors.
    fn name(&self) -> String;

    /// Whether it may only run on the elected leader (default: yes, as controllers).
    fn needs_leader_election(&self) -> bool {
        true
    }

    /// Runs until `cancel` fires.
    fn start(
        self: Box<Self>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BoxError>>;
}

impl<R: Reconciler> Runnable for Controller<R> {
    fn name(&self) -> String {
        format!("controller {}", Controller::name(self))
    }

    fn start(
        self: Box<Self>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { self.run(cancel).await.map_err(BoxError::from) })
    }
}

/// A runnable from a closure: `f(cancel)` runs until `cancel` fires.
pub fn runnable<F, Fut>(name: impl Into<String>, needs_leader_election: bool, f: F) -> impl Runnable
where
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
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
    F: FnOnce(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    fn name(&self) -> String {
        self.name.clone()
    }

    fn needs_leader_election(&self) -> bool {
        self.leader
    }

    fn start(
        self: Box<Self>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin((self.f)(cancel))
    }
}
