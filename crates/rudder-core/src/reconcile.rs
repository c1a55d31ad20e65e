//! The [`Reconciler`] trait, what it returns ([`Action`]) and what it is given ([`Context`]).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::cause::Causes;
use crate::{BoxError, Request};

/// Brings one object's actual state towards its desired state.
///
/// A reconciler is called with a [`Request`] (which object), never with the event that
/// caused it: it reads the current state and acts on it. It must be idempotent, since it can
/// run again for the same state. For one request it is never called twice at once.
pub trait Reconciler: Send + Sync + 'static {
    /// The reconciler's error: any error type, or a [`BoxError`] (`Box<dyn Error + Send +
    /// Sync>`), or anything else that converts into one (such as `anyhow::Error`). Returning
    /// one means "retry with backoff", unless the error or its chain of sources contains a
    /// [`TerminalError`](crate::TerminalError). The controller logs the whole chain
    /// ([`ErrorChain`](crate::ErrorChain)).
    type Error: Into<BoxError> + Send + 'static;

    /// Reconciles the object `request` names.
    fn reconcile(
        &self,
        request: Request,
        ctx: Context,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// What to do after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    next: Next,
    priority: Option<i32>,
}

/// When an [`Action`] asks for the request to run again: what a controller reads from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Not until something changes ([`Action::done`]).
    Done,
    /// After the rate limiter's delay ([`Action::requeue`]).
    Requeue,
    /// After the delay given ([`Action::requeue_after`]).
    RequeueAfter(Duration),
}

impl Action {
    /// Done until something changes; the request's backoff is forgotten.
    pub fn done() -> Self {
        Self {
            next: Next::Done,
            priority: None,
        }
    }

    /// Run again after the rate limiter's delay (the backoff grows, as for an error, but it
    /// is not counted as one).
    pub fn requeue() -> Self {
        Self {
            next: Next::Requeue,
            priority: None,
        }
    }

    /// Run again after `delay` (the backoff is forgotten).
    pub fn requeue_after(delay: Duration) -> Self {
        Self {
            next: Next::RequeueAfter(delay),
            priority: None,
        }
    }

    /// Requeue at `priority` (higher runs first; the default is 0).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// When the request should run again.
    pub fn next(&self) -> Next {
        self.next
    }

    /// The priority to requeue at, if one was given ([`with_priority`](Self::with_priority)).
    pub fn priority(&self) -> Option<i32> {
        self.priority
    }
}

/// What a reconcile is given besides its request.
#[derive(Clone)]
pub struct Context {
    cancel: CancellationToken,
    reconcile_id: ReconcileId,
    controller: Arc<str>,
    cluster: Option<Arc<str>>,
    causes: Option<Causes>,
}

impl Context {
    /// The context of one reconcile: `cancel` fires when it should give up, `reconcile_id`
    /// names it, `controller` is the name of the controller running it (an `Arc<str>`, so
    /// a controller hands each reconcile a clone of its own name rather than a copy). A
    /// controller makes one per reconcile; a test calling a reconciler directly makes its
    /// own.
    pub fn new(
        cancel: CancellationToken,
        reconcile_id: ReconcileId,
        controller: impl Into<Arc<str>>,
    ) -> Self {
        Self {
            cancel,
            reconcile_id,
            controller: controller.into(),
            cluster: None,
            causes: None,
        }
    }

    /// This context for a reconcile queued by `causes` (a controller sets it).
    #[must_use]
    pub fn with_causes(mut self, causes: Causes) -> Self {
        self.causes = Some(causes);
        self
    }

    /// Why this reconcile runs: the first add of its key since it last ran, the last one,
    /// and how many were merged (see [`crate::cause`]). `None` when whoever queued the key
    /// recorded no cause (a handler called outside a controller's watch) or the context was
    /// made by hand.
    pub fn causes(&self) -> Option<&Causes> {
        self.causes.as_ref()
    }

    /// This context for a reconcile of a request in the member cluster `cluster` (a
    /// controller serving one cluster of a fleet sets it).
    #[must_use]
    pub fn with_cluster(mut self, cluster: impl Into<Arc<str>>) -> Self {
        self.cluster = Some(cluster.into());
        self
    }

    /// The member cluster the request belongs to, for a controller serving one cluster of a
    /// fleet (the `rudder` facade's multi-cluster controllers); `None` for a controller of
    /// one cluster.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// Completes when the reconcile should give up: its timeout passed or the controller is
    /// stopping past its grace period.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    /// Whether the reconcile should give up.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The token behind [`cancelled`](Self::cancelled), to hand to other tasks.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// This reconcile's id, unique in the process; it is in the reconcile's tracing span.
    pub fn reconcile_id(&self) -> ReconcileId {
        self.reconcile_id
    }

    /// The controller's name.
    pub fn controller(&self) -> &str {
        &self.controller
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("controller", &self.controller)
            .field("cluster", &self.cluster)
            .field("reconcile_id", &self.reconcile_id)
            .field("causes", &self.causes)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// A reconcile's id: unique within the process (the controllers draw them from one counter),
/// shown as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReconcileId(u64);

impl ReconcileId {
    /// The id `id`; whoever runs reconciles keeps them unique.
    pub fn new(id: u64) -> Self {
        Self(id)
    }

    /// The number behind the id.
    pub fn get(&self) -> u64 {
        self.0
    }
}

impl fmt::Display for ReconcileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for ReconcileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReconcileId({self})")
    }
}
