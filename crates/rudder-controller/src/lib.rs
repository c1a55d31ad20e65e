//! Reconcilers and controllers: workers that run your [`Reconciler`] over a rate-limited
//! priority work queue fed by watches, in the shape of Go controller-runtime's `reconcile`
//! and `controller` packages.
//!
//! Start with [`Controller::builder`]: name it, give it a reconciler, add watches, and
//! [`run`](Controller::run) it until its cancellation token fires.
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::core::ObjectMeta;
//! use rudder_controller::{Action, Context, Controller, Reconciler};
//! use rudder_handler::{EnqueueObject, Event, Request, channel};
//! use tokio::sync::mpsc;
//! use tokio_util::sync::CancellationToken;
//!
//! struct Recorder(mpsc::UnboundedSender<Request>);
//!
//! impl Reconciler for Recorder {
//!     type Error = std::convert::Infallible;
//!
//!     async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
//!         tracing::info!(reconcile_id = %ctx.reconcile_id(), "reconciling {request}");
//!         let _ = self.0.send(request);
//!         Ok(Action::done())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (seen_tx, mut seen) = mpsc::unbounded_channel();
//! let controller = Controller::builder("recorder", Recorder(seen_tx)).workers(2).build()?;
//! // Events from outside the cluster; with rudder-cache, watch a Kind source instead.
//! let (events, source) = channel::<ConfigMap>(16);
//! controller.watch(source, EnqueueObject, vec![]);
//!
//! let stop = CancellationToken::new();
//! let running = tokio::spawn({
//!     let (controller, stop) = (controller.clone(), stop.clone());
//!     async move { controller.run(stop).await }
//! });
//! let object = Arc::new(ConfigMap {
//!     metadata: ObjectMeta {
//!         namespace: Some("default".into()),
//!         name: Some("settings".into()),
//!         ..ObjectMeta::default()
//!     },
//!     ..ConfigMap::default()
//! });
//! events.send(Event::Generic { object }).await?;
//! assert_eq!(seen.recv().await, Some(Request::namespaced("default", "settings")));
//! stop.cancel();
//! running.await??;
//! # Ok(())
//! # }
//! ```
//!
//! # Reconcilers
//!
//! A [`Reconciler`] gets a [`Request`](rudder_handler::Request) and a [`Context`]
//! (cancellation, a reconcile id) and returns an [`Action`]: done, requeue with backoff, or
//! requeue after a delay, optionally at a priority. An error means "retry with backoff"; an
//! error whose chain holds a [`TerminalError`] is not retried, only counted and logged.
//!
//! # Controllers
//!
//! A [`Controller`] has a name unique in the process, watches added before or after it
//! starts, and `N` workers (default 1). `run` waits for every source to sync (default 2
//! minutes, else [`Error::CacheSyncTimeout`]), then reconciles; a request is never
//! reconciled by two workers at once, and a change during a reconcile causes exactly one more.
//! A panic in a reconcile is caught, logged, counted and retried (configurable). An optional
//! reconcile timeout cancels the reconcile's context. On stop: no new requests are taken,
//! in-flight reconciles get a grace period, then their contexts are cancelled, and `run`
//! returns once they have.
//!
//! Each reconcile runs in a tracing span `reconcile` with the controller, the request and
//! the reconcile id.
//!
//! # Metrics
//!
//! controller-runtime's names and labels; see [`metrics`].

mod controller;
mod error;
pub mod metrics;
mod reconciler;

pub use controller::{
    Builder, Controller, DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_SHUTDOWN_GRACE, WatchSpec,
};
pub use error::{Error, ErrorChain, Result, TerminalError, is_terminal};
pub use reconciler::{Action, Context, ReconcileId, Reconciler};
