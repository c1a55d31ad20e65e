//! Rudder: a controller runtime for Kubernetes in Rust, what Go's controller-runtime is to Go
//! operators. This crate is the one to depend on: it re-exports the layers and wires them
//! with a builder.
//!
//! Start with [`Manager`] and [`controller()`]: declare a controller for a primary type,
//! the types it owns, and complete it with your [`Reconciler`].
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//! use rudder::prelude::*;
//!
//! struct Sync;
//!
//! impl Reconciler for Sync {
//!     type Error = std::convert::Infallible;
//!
//!     async fn reconcile(&self, request: Request, _ctx: Context) -> Result<Action, Self::Error> {
//!         println!("reconciling {request}");
//!         Ok(Action::done())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let manager = Manager::builder(client).name("my-operator").build()?;
//! rudder::controller(&manager)
//!     .for_::<ConfigMap>()
//!     .owns::<Secret>()
//!     .workers(2)
//!     .complete(Sync)
//!     .await?;
//! manager.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The builder also takes predicates for every watch ([`ControllerBuilder::event_filter`],
//! controller-runtime's `WithEventFilter`) and per watch (`for_with`, `owns_with`, the last
//! argument of `watches`), options (workers, rate limiter, timeouts), and with
//! [`ControllerBuilder::complete_with`] makes the reconciler from its [`Tools`]: the
//! manager's client, the shared cache and an event recorder reporting as the controller.
//!
//! # Layers
//!
//! | module | crate | what it holds |
//! |---|---|---|
//! | [`workqueue`] | rudder-workqueue | the dedup / delaying / rate-limited / priority work queue |
//! | [`cache`] | rudder-cache | shared informers, indexed stores, the cache reader |
//! | [`handler`] | rudder-handler | requests, events, sources, event handlers, predicates |
//! | [`controller`](mod@controller) | rudder-controller | reconcilers and controllers |
//! | [`manager`] | rudder-manager | the manager, probes, metrics, leader election |
//!
//! # Client helpers
//!
//! [`client`] has what reconcilers write with: [`client::set_controller_reference`] (which
//! refuses a second controller owner), [`client::create_or_update`] and
//! [`client::create_or_patch`] (write only when the mutation changed something, and say
//! which happened), [`client::add_finalizer`] / [`client::remove_finalizer`] /
//! [`client::has_finalizer`] (and kube-runtime's [`client::finalizer`] flow),
//! [`client::is_controlled_by`], [`client::apply`] (server-side apply with a field owner),
//! and [`client::apply_crd`] (install a CRD at start and wait until it is served).
//!
//! # Features
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `workqueue` | yes | [`workqueue`] |
//! | `cache` | yes | [`cache`] |
//! | `handler` | yes | [`handler`] (and `cache`) |
//! | `controller` | yes | [`controller`](mod@controller) (and `handler`, `workqueue`) |
//! | `manager` | yes | [`manager`] and the builder (and `controller`) |

#[cfg(feature = "manager")]
mod builder;
pub mod client;
#[cfg(feature = "manager")]
mod tools;

/// The work queue: rudder-workqueue.
#[cfg(feature = "workqueue")]
pub use rudder_workqueue as workqueue;

/// Shared informers and the cache reader: rudder-cache.
#[cfg(feature = "cache")]
pub use rudder_cache as cache;

/// Requests, events, sources, event handlers, predicates: rudder-handler.
#[cfg(feature = "handler")]
pub use rudder_handler as handler;

/// Reconcilers and controllers: rudder-controller.
#[cfg(feature = "controller")]
pub use rudder_controller as controller;

/// The manager, probes, metrics and leader election: rudder-manager.
#[cfg(feature = "manager")]
pub use rudder_manager as manager;

#[cfg(feature = "manager")]
#[doc(inline)]
pub use builder::{ControllerBuilder, controller};
#[cfg(feature = "cache")]
#[doc(inline)]
pub use rudder_cache::Cache;
#[cfg(feature = "controller")]
#[doc(inline)]
pub use rudder_controller::{Action, Context, Controller, Reconciler, TerminalError};
#[cfg(feature = "handler")]
#[doc(inline)]
pub use rudder_handler::Request;
#[cfg(feature = "manager")]
#[doc(inline)]
pub use rudder_manager::Manager;
#[cfg(feature = "workqueue")]
#[doc(inline)]
pub use rudder_workqueue::WorkQueue;
#[cfg(feature = "manager")]
#[doc(inline)]
pub use tools::Tools;

/// The names an operator uses most, to `use rudder::prelude::*`.
pub mod prelude {
    #[cfg(feature = "manager")]
    pub use crate::Tools;
    #[cfg(feature = "cache")]
    pub use rudder_cache::Cache;
    #[cfg(feature = "controller")]
    pub use rudder_controller::{Action, Context, Controller, Reconciler, TerminalError};
    #[cfg(feature = "handler")]
    pub use rudder_handler::{EnqueueObject, EnqueueOwner, GenerationChanged, Kind, Request};
    #[cfg(feature = "manager")]
    pub use rudder_manager::Manager;
}

/// Errors of the builder API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API server does not serve a watched type (a CRD not installed, or the wrong
    /// group or version); install it, then build the controller.
    #[error("the API server does not serve {kind}")]
    NotServed {
        /// `group/version Kind`.
        kind: String,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// The cache could not provide an informer for a watched type.
    #[cfg(feature = "cache")]
    #[error("cannot watch a type through the cache")]
    Cache(#[source] rudder_cache::Error),
    /// The controller could not be built (a duplicate or empty name).
    #[cfg(feature = "controller")]
    #[error("cannot build the controller")]
    Controller(#[source] rudder_controller::Error),
}

/// The result of the builder API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
