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
//! use rudder_controller::{Action, Context, Controller, Options, Reconciler};
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
//! let controller = Controller::builder("recorder", Recorder(seen_tx))
//!     .options(Options::new().workers(2))
//!     .build()?;
//! // Events from outside the cluster; with rudder-cache, watch a Kind source instead.
//! let (events, source) = channel::<ConfigMap>(16);
//! controller.watch(source, EnqueueObject, vec![])?;
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
//! These types, with [`Shutdown`] and [`LeaderGate`], are rudder-core's, re-exported here:
//! a library of reconcilers depends on rudder-core alone.
//!
//! # Controllers
//!
//! A [`Controller`] has a name unique in the process, watches added before or after it
//! starts, and [`Options`] (workers, default 1; timeouts; the retry rate limiter). Sources
//! start when `run` does (a `Kind` asks the cache for its informers then, not when it was
//! declared). `run` waits for every source to sync (default 2 minutes, else
//! [`RunError::CacheSyncTimeout`]), then reconciles; a request is never reconciled by two
//! workers at once, and a change during a reconcile causes exactly one more. A panic in a
//! reconcile is caught, logged, counted and retried (configurable). An optional reconcile
//! timeout cancels the reconcile's context.
//!
//! # Leadership
//!
//! A [`LeaderGate`] ([`Controller::set_leader_gate`]) decides when workers may take
//! requests; by default it is always open. A gate following a leader's validity
//! (`Some(valid_until)` while leading, `None` otherwise, on a `tokio::sync::watch` channel;
//! the manager hands its controllers one fed by its Lease) is open only while
//! `now < valid_until` on tokio's monotonic clock, checked at the moment a worker takes a
//! request. So a replica that stopped renewing (its API server unreachable, or the whole
//! process frozen and resumed after its lease ran out) starts no reconcile past
//! `valid_until`, even before anything has told it that it lost. Sources start and sync
//! whatever the gate says, and their events wait in the queue (one entry per key), so a
//! gated controller on a replica that does not lead keeps a warm queue, reconciled as soon
//! as the gate opens. A request taken as the gate closed goes back to the queue at its
//! priority; reconciles already running when it closes are not interrupted.
//!
//! # Sharding
//!
//! A [`ShardGate`] ([`Controller::set_shard_gate`]) splits a controller's keys among
//! replicas: keys hash into shards, and a worker reconciles a key only while its shard is
//! open here (held by this replica and valid by the monotonic clock, as the leader gate);
//! other keys are dropped as they are taken, and each shard's keys are queued from the cache
//! when it opens. Each admitted key holds a [`ShardPermit`] while it runs, so a shard can be
//! closed and drained before it is handed off; a reconcile whose shard's validity passes
//! while it runs is cancelled (context cancelled, future dropped). `rudder-lease`'s `sharding` module (re-exported
//! as `rudder_manager::sharding`) owns the shards through Leases; see `docs/sharding.md`.
//!
//! # Stopping
//!
//! [`Controller::run_until`] takes a [`Shutdown`]: a stop signal carrying the deadline the
//! stop must meet, handed down by the manager. On stop no new requests are taken; in-flight
//! reconciles may finish, and their contexts are cancelled when the deadline is near (a
//! quarter of the time left, at most 5 s, before it) so they can return in time; `run`
//! returns once they have. [`Controller::run`] with a plain token uses the controller's own
//! grace period ([`Options::shutdown_grace`]) instead.
//!
//! Each reconcile runs in a tracing span `reconcile` with the controller, the request and
//! the reconcile id.
//!
//! # Metrics
//!
//! controller-runtime's names and labels; see [`metrics`].

mod controller;
mod error;
mod gate;
pub mod metrics;
mod options;
mod reconciler;
mod runnable;
mod shard;
mod shutdown;

pub use controller::{Builder, Controller, WatchSpec};
pub use error::{BuildError, ErrorChain, Result, RunError, TerminalError, is_terminal};
pub use gate::LeaderGate;
pub use options::{DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_SHUTDOWN_GRACE, Options};
pub use reconciler::{Action, BoxError, Context, Next, ReconcileId, Reconciler};
pub use shard::{KeyAffinity, KeyLister, ShardGate, ShardPermit, fnv1a, fnv1a64, mix};
pub use shutdown::Shutdown;
