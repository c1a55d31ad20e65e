//! The [`Source`] contract: where events come from, and whether a source has caught up.
//!
//! A source yields a stream of [`Event`]s and a [`Synced`] signal that turns on once it has
//! delivered the state it started from. The sources themselves live in rudder-handler
//! (`channel`, `from_stream`, and `Kind` on a shared informer from rudder-cache).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::watch;

use crate::{BoxError, Event};

/// Produces events for one watch of a controller.
///
/// Declaring a source has no side effects: what it reads from is resolved in
/// [`start`](Self::start), when the controller that holds it runs (rudder-handler's `Kind`
/// asks the cache for its informers then, as controller-runtime's `source.Kind` does).
pub trait Source<K>: Send + 'static {
    /// Starts the source: its stream of events and the signal that turns on once it has
    /// delivered the state it started from. The stream ends when the source has nothing
    /// more to give (a channel whose senders are all gone); a source on the cluster runs
    /// until the stream is dropped.
    ///
    /// # Errors
    ///
    /// When the source cannot start (for a `Kind`: the cache refused the informer, e.g.
    /// because it was stopped). The controller's `run` fails with it.
    fn start(self: Box<Self>) -> Result<Started<K>, SourceError>;
}

/// Why a source could not start: any error, boxed (the same type as [`BoxError`]).
pub type SourceError = BoxError;

/// A started source: its events and whether it has caught up.
pub struct Started<K> {
    /// The events, in the order the source saw them.
    pub events: BoxStream<'static, Event<K>>,
    /// Turns on once the source has delivered the state it started from.
    pub synced: Synced,
}

impl<K> Started<K> {
    /// A started source from its parts.
    pub fn new(events: BoxStream<'static, Event<K>>, synced: Synced) -> Self {
        Self { events, synced }
    }
}

impl<K> std::fmt::Debug for Started<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("synced", &self.synced)
            .finish_non_exhaustive()
    }
}

/// Whether a source has synced: cheap to clone, observable from anywhere.
#[derive(Clone)]
pub struct Synced(SyncedInner);

#[derive(Clone)]
enum SyncedInner {
    Flag(Arc<watch::Sender<bool>>),
    Custom(Arc<CustomSync>),
}

struct CustomSync {
    is_synced: Box<dyn Fn() -> bool + Send + Sync>,
    wait: Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>,
}

impl std::fmt::Debug for Synced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Synced").field(&self.is_synced()).finish()
    }
}

impl Synced {
    /// A signal that is off until [`mark`](Self::mark) is called.
    pub fn new() -> Self {
        Self(SyncedInner::Flag(Arc::new(watch::Sender::new(false))))
    }

    /// A signal that is on from the start, for sources with no initial state to catch up on.
    pub fn already() -> Self {
        Self(SyncedInner::Flag(Arc::new(watch::Sender::new(true))))
    }

    /// A signal read from elsewhere: `is_synced` says whether it is on, and `wait` returns a
    /// future that completes once it is (or never, if it never will be).
    pub fn from_fn(
        is_synced: impl Fn() -> bool + Send + Sync + 'static,
        wait: impl Fn() -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Self {
        Self(SyncedInner::Custom(Arc::new(CustomSync {
            is_synced: Box::new(is_synced),
            wait: Box::new(wait),
        })))
    }

    /// Turns the signal on (no effect on a signal made with [`from_fn`](Self::from_fn)).
    pub fn mark(&self) {
        if let SyncedInner::Flag(flag) = &self.0 {
            flag.send_replace(true);
        }
    }

    /// Whether the signal is on.
    pub fn is_synced(&self) -> bool {
        match &self.0 {
            SyncedInner::Flag(flag) => *flag.borrow(),
            SyncedInner::Custom(custom) => (custom.is_synced)(),
        }
    }

    /// Waits until the signal is on.
    pub async fn wait(&self) {
        match &self.0 {
            SyncedInner::Flag(flag) => {
                let mut rx = flag.subscribe();
                // The sender lives in `self`, so the channel cannot close while we wait.
                let _ = rx.wait_for(|synced| *synced).await;
            }
            SyncedInner::Custom(custom) => (custom.wait)().await,
        }
    }
}

impl Default for Synced {
    fn default() -> Self {
        Self::new()
    }
}
