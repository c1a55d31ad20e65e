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
//! use rudder_controller::{Controller, Options};
//! use rudder_core::Action;
//! use rudder_core::Context;
//! use rudder_core::Reconciler;
//! use rudder_handler::{EnqueueObject, channel};
//! use rudder_core::Event;
//! use rudder_core::Request;
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
//! A [`Reconciler`] gets a [`Request`](rudder_core::Request) and a [`Context`]
//! (cancellation, a reconcile id) and returns an [`Action`]: done, requeue with backoff, or
//! requeue after a delay, optionally at a priority. An error means "retry with backoff"; an
//! error whose chain holds a [`TerminalError`] is not retried, only counted and logged.
//! These types, with [`Shutdown`] and [`LeaderGate`], are rudder-core's (their one path;
//! this crate does not re-export them): a library of reconcilers depends on rudder-core
//! alone.
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
//! # Reading your own writes
//!
//! On by default ([`Options::read_your_writes`]): no reconcile runs on a cache older than the
//! controller's own last write (the design, figures and comparisons: `docs/read-your-writes.md`
//! in the repository). Each reconcile runs inside a
//! [`WriteScope`](rudder_core::writes::WriteScope); the writing client (the `rudder`
//! facade's `Client`, and its create-or-update, finalizer, apply, status and delete helpers)
//! records every successful write with the cache's write tracker
//! (`rudder_cache::writes::WriteTracker`): the object and the resourceVersion the server returned,
//! or for a delete the uid. Every write of a reconcile counts for the key reconciled,
//! whether it wrote the key's own object or a child (creates and deletes of owned objects
//! are expectations on the owner's key).
//!
//! What is guaranteed:
//!
//! - A key is handed to a worker only once the cache has reached every write of its last
//!   reconcile, per object: the cache holds that version or a newer state (for a delete: not
//!   the deleted object). Until then the key is *held*: back in the queue, taking no worker,
//!   queued the moment the last write arrives. Other keys never wait behind it.
//! - The wait is bounded ([`Options::write_wait`], default [`DEFAULT_WRITE_WAIT`]); past it
//!   the key runs anyway, counted in `rudder_controller_write_wait_timeouts_total` and logged
//!   with the objects named.
//! - A read through the client inside a reconcile (`get`, `list`) waits, within the same
//!   bound, for the key's own pending writes of what it reads (made in this reconcile), so
//!   it returns at least the version written. It does not wait for other keys' writes: a
//!   reconcile never waits behind another key.
//! - With [`Options::filter_own_echoes`], the watch event that is exactly the echo of the
//!   controller's own write is dropped, so a status update does not trigger a reconcile of
//!   its own (off by default).
//! - A sharded controller hands its recent writes over with each shard it releases (the
//!   shard Lease's fence annotation, [`Controller::recent_writes`]); the next owner holds the
//!   shard's keys until its own cache has them ([`Controller::expect_writes`]).
//! - With no write pending, a key costs one uncontended lock and a hash lookup on its way to
//!   the reconciler, and an informer event one atomic load.
//!
//! What is not:
//!
//! - Other clients' writes, and this process's writes outside a reconcile (or through a bare
//!   `kube::Api`, or in a task the reconcile spawned), are not waited for.
//! - A replica that dies or freezes hands nothing over: its successor takes its shards when
//!   their Leases expire, which is their fence; writes older than the fence window (twice the
//!   bound, at least 10 s) are not handed over.
//! - Objects the cache does not watch (no informer of the type covers the namespace without
//!   selectors when the write is made) are not waited for: no informer would deliver them.
//! - "Newer" is exact only where resourceVersions compare: Kubernetes 1.35 and later
//!   (KEP-5504), which the manager detects as it starts. On older servers a write is reached
//!   when the cache holds exactly the version written (or the object was deleted or replaced
//!   since); if another writer changes the object again before the cache delivers this one
//!   and a relist skips it, the key waits out the bound.
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
//! while it runs is cancelled (context cancelled, future dropped). `rudder-lease`'s `sharding` module
//! (`rudder::lease::sharding` in the facade) owns the shards through Leases; see `docs/sharding.md`.
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
//!
//! [`LeaderGate`]: rudder_core::LeaderGate
//! [`Shutdown`]: rudder_core::Shutdown
//! [`Context`]: rudder_core::Context
//! [`Action`]: rudder_core::Action
//! [`TerminalError`]: rudder_core::TerminalError

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]

mod controller;
mod error;
mod gate;
pub mod metrics;
mod options;
mod own_writes;
mod reconciler;
mod runnable;
mod shard;
mod shutdown;

pub use controller::{Builder, Controller, WatchSpec};
pub use error::{BuildError, Result, RunError};
pub use options::{
    DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_SHUTDOWN_GRACE, DEFAULT_WRITE_WAIT, Options,
};
pub(crate) use reconciler::Reconciler;
pub use shard::{KeyAffinity, KeyLister, ShardGate, ShardPermit};
