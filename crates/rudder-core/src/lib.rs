//! The contracts of Rudder: the traits and types a [`Source`], an [`EventHandler`], a
//! [`Predicate`], a [`Reconciler`] or a [`Runnable`] is written against, and the helpers
//! every Rudder crate shares. It is to Rudder what tower-service is to tower and kube-core to
//! kube: small (kube-core's types, tokio's sync and time, the work queue; no kube client, no
//! HTTP stack), so a library of reconcilers, handlers or sources depends on it alone.
//!
//! Start with [`Reconciler`] and [`EventHandler`]: a handler turns an [`Event`] into
//! [`Request`]s on the controller's [`Queue`], a reconciler gets one request at a time.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::core::ObjectMeta;
//! use rudder_core::{
//!     Action, Context, Event, EventHandler, Queue, ReconcileId, Reconciler, Request, enqueue,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! /// Queues the ConfigMap a copy names in its `mirror-of` label.
//! struct MirrorOf;
//!
//! impl EventHandler<ConfigMap> for MirrorOf {
//!     fn handle(&self, event: &Event<ConfigMap>, queue: &Queue) {
//!         let meta = &event.object().metadata;
//!         let source = meta.labels.as_ref().and_then(|labels| labels.get("mirror-of"));
//!         if let (Some(namespace), Some(source)) = (meta.namespace.as_deref(), source) {
//!             // At the priority the event deserves: old news waits behind fresh changes.
//!             enqueue(queue, event, Request::namespaced(namespace, source));
//!         }
//!     }
//! }
//!
//! /// Looks at a source again every minute.
//! struct Mirror;
//!
//! impl Reconciler for Mirror {
//!     type Error = std::convert::Infallible;
//!
//!     async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
//!         assert_eq!(ctx.controller(), "mirror");
//!         assert_eq!(request.name(), "settings");
//!         Ok(Action::requeue_after(Duration::from_secs(60)))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // What a controller does with them (rudder-controller runs this loop with workers,
//! // retries and metrics).
//! let queue = Queue::default();
//! let copy = Arc::new(ConfigMap {
//!     metadata: ObjectMeta {
//!         namespace: Some("default".into()),
//!         name: Some("settings-copy".into()),
//!         labels: Some([("mirror-of".to_owned(), "settings".to_owned())].into()),
//!         ..ObjectMeta::default()
//!     },
//!     ..ConfigMap::default()
//! });
//! MirrorOf.handle(&Event::Create { object: copy, initial_list: false }, &queue);
//! let item = queue.try_get().expect("queued");
//! let ctx = Context::new(CancellationToken::new(), ReconcileId::new(1), "mirror");
//! let Ok(action) = Mirror.reconcile(item.key().clone(), ctx).await;
//! assert_eq!(action, Action::requeue_after(Duration::from_secs(60)));
//! # }
//! ```
//!
//! # Which crate to depend on
//!
//! Depend on the smallest crate that has what you use (as tokio's "authoring libraries" and
//! axum's "depend on axum-core" advise); no crate above re-exports these types (each has
//! one path: here, or the facade's root, `rudder::Reconciler`), so what a library writes
//! against rudder-core plugs into all of them.
//!
//! | you write | depend on |
//! |---|---|
//! | an operator | `rudder`, the facade (re-exports everything below, wires it with builders) |
//! | a library of sources, event handlers, predicates, reconcilers or runnables | `rudder-core` alone |
//! | code that needs Rudder's concrete handlers, predicates or the `Kind` source | `rudder-handler` |
//! | controllers run without a manager | `rudder-controller` |
//! | shared informers and cache reads without controllers | `rudder-cache` |
//! | a work queue, with no Kubernetes at all | `rudder-workqueue` |
//! | an HTTP server for tower services, with no Kubernetes at all | `rudder-server` |
//! | tests against a real API server | `rudder-envtest`, as a dev-dependency |
//!
//! rudder-workqueue and rudder-server do not depend on this crate: they are used without
//! Kubernetes.
//!
//! # Events and requests
//!
//! An [`Event`] is one type from the informer that saw a change to the handlers that act on
//! it: `Create`, `Update`, `Delete` (from the cluster) and `Generic` (from outside it),
//! controller-runtime's names. A [`Request`] names an object (namespace and name); it is the
//! work queue's key, so a burst of events about one object becomes one reconcile.
//!
//! # Sources, handlers and predicates
//!
//! A [`Source`] starts into a stream of events and a [`Synced`] signal ([`Started`]);
//! declaring one has no side effects. A [`Predicate`] drops events before the handler; a
//! [`MetaPredicate`] reads only metadata ([`MetaEvent`]), so one applies to watches of every
//! type; [`Compose`] gives `and`, `or` and `not` of either. An [`EventHandler`] queues
//! requests with [`enqueue`], which puts old news (objects from the first list, resyncs that
//! changed nothing) at [`LOW_PRIORITY`].
//!
//! # Reconcilers
//!
//! A [`Reconciler`] gets a [`Request`] and a [`Context`] (cancellation, a [`ReconcileId`],
//! the controller's name) and returns an [`Action`]: done, requeue with backoff, or requeue
//! after a delay, at a priority if asked; a runner reads it through [`Action::next`]. Its
//! error converts into a [`BoxError`] and means "retry with backoff", unless its chain of
//! sources holds a [`TerminalError`] ([`is_terminal`]).
//!
//! # Reading your own writes
//!
//! A controller runs each reconcile inside a [`writes::WriteScope`] (its key, and the
//! controller's [`writes::WriteObserver`]); the writing client records each write with the
//! cache's tracker, which tells the observer when the cache has reached it, so the controller
//! hands a key to a worker only once the cache holds the key's own last writes.
//!
//! # Runnables, stopping and leadership
//!
//! A [`Runnable`] is what a manager starts and stops (a controller is one; [`runnable`]
//! makes one from a closure). It is stopped with a [`Shutdown`]: a stop signal carrying the
//! deadline to meet, handed down so that no layer runs a timer of its own for it. A
//! leader-only runnable may take a [`LeaderGate`], open only while this replica's
//! leadership is known to be valid by the monotonic clock.
//!
//! # Helpers
//!
//! [`ErrorChain`] displays an error with its sources; [`panic_message`] reads a caught
//! panic; [`sync`] recovers std locks from poisoning, and says once why that is right;
//! [`backoff::Backoff`] is the one retry policy (client-go's reflector's: exponential, capped,
//! jittered) every watch and retry loop of the workspace uses.

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]

pub mod backoff;
pub mod cause;
mod error;
mod event;
mod gate;
mod handler;
pub mod hash;
mod predicate;
mod reconcile;
mod request;
mod runnable;
mod shutdown;
mod source;
pub mod sync;
pub mod writes;

pub use error::{BoxError, ErrorChain, TerminalError, is_terminal, panic_message};
pub use event::Event;
pub use gate::LeaderGate;
pub use handler::{EventHandler, LOW_PRIORITY, Queue, enqueue};
pub use predicate::{And, Compose, MetaEvent, MetaPredicate, MetaPredicates, Not, Or, Predicate};
pub use reconcile::{Action, Context, Next, ReconcileId, Reconciler};
pub use request::Request;
pub use runnable::{Runnable, runnable};
pub use shutdown::Shutdown;
pub use source::{Source, SourceError, Started, Synced};
