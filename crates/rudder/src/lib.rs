//! Rudder: a controller runtime for Kubernetes in Rust, what Go's controller-runtime is to Go
//! operators. This crate is the one to depend on: it re-exports the layers and wires them
//! with a builder.
//!
//! Start with [`Manager`](manager::Manager) and [`new_controller`]: declare a controller for a primary type,
//! the types it owns, and complete it with your [`Reconciler`].
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::{ConfigMap, Secret};
//! use rudder::prelude::*;
//!
//! struct Mirror;
//!
//! impl Reconciler for Mirror {
//!     // Any error type will do, or a boxed one.
//!     type Error = Box<dyn std::error::Error + Send + Sync>;
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
//! rudder::new_controller(&manager)
//!     .for_::<ConfigMap>()
//!     .owns::<Secret>()
//!     .with_options(ControllerOptions::new().workers(2))
//!     .complete(Mirror)
//!     .await?;
//! manager.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Declaring has no side effects: the builder records what to watch, and the shared
//! informers are asked for when the controller starts (so a `complete` that fails leaves
//! nothing behind, and a manager whose cache has several default namespaces serves its
//! controllers from one informer per namespace). The builder also takes predicates for
//! every watch ([`ControllerBuilder::event_filter`], controller-runtime's
//! `WithEventFilter`) and per watch (`for_with`, `owns_with`, `watches_kind_with`,
//! `watches_with`; compose them with [`Compose`]: `a.and(b)`, `a.or(b)`,
//! `a.not()`), [`controller::Options`] (workers, rate limiter, timeouts), and with
//! [`ControllerBuilder::complete_with`] makes the reconciler from its [`Tools`]: the typed
//! [`client::Client`] (reads from the shared cache, writes inferred from the object) and an
//! event recorder reporting as the controller.
//!
//! # Layers
//!
//! | module | crate | what it holds |
//! |---|---|---|
//! | the crate root | rudder-core | the contracts: [`Event`], [`Request`], the [`Source`], [`EventHandler`], [`Predicate`], [`Reconciler`] and [`Runnable`] traits, [`cause`], [`backoff`], [`writes`] |
//! | [`workqueue`] | rudder-workqueue | the dedup / delaying / rate-limited / priority work queue |
//! | [`cache`] | rudder-cache | shared informers, indexed stores, the cache reader |
//! | [`handler`] | rudder-handler | the sources, event handlers and predicates over the contracts |
//! | [`controller`](mod@controller) | rudder-controller | reconcilers and controllers |
//! | [`manager`] | rudder-manager | the manager, probes, metrics, RBAC rules |
//! | [`lease`] | rudder-lease | leader election and sharding by Leases |
//! | [`server`] | rudder-server | the HTTP server under the manager's endpoints and the webhooks |
//! | [`client`] | rudder-client | the reconciler's typed client, its helpers and layers |
//! | [`multicluster`] | rudder-fleet | one manager over a fleet of member clusters |
//! | [`webhook`] | rudder-webhook | admission and conversion webhooks, their TLS server, manifests |
//! | [`certs`] | rudder-certs | self-signed webhook certificates: shared, rotated, injected |
//!
//! # Many clusters
//!
//! [`multicluster`] runs controllers over a fleet of member clusters from one manager: a
//! [`multicluster::Fleet`] engages the clusters its providers announce (kubeconfig Secrets,
//! files, a list, Cluster API Clusters, ClusterProfiles) and disengages them as they go, and a controller declared once with
//! [`multicluster::Fleet::new_controller`] runs in each member, with that member's client and
//! cache, its faults kept to its own keys. See `docs/multicluster.md`.
//!
//! # Client
//!
//! [`client::Client`] reads from the cache and writes with the object's own `Api`:
//! `create`, `update`, `update_status`, `patch`, `patch_status`, `apply`, `apply_status`,
//! `delete`. `update`, `update_status` and `patch_status` are conditional on the
//! resourceVersion the object carries, so a write computed from a stale read is a conflict
//! ([`client::ClientError::is_conflict`]), never a lost update; `patch` is conditional only
//! when the patch carries `metadata.resourceVersion`; `apply` and `apply_status` (server-side
//! apply, forcing) are not; `delete` is conditional on the uid, so a newer object of the same
//! name is left alone. [`events`]
//! re-exports the Event types, so an operator needs no direct kube-runtime dependency.
//!
//! [`client`] also has helpers: [`client::set_controller_reference`] (which
//! refuses a second controller owner), [`client::create_or_update`] and
//! [`client::create_or_patch`] (write only when the mutation changed something, and say
//! which happened), [`client::add_finalizer`] / [`client::remove_finalizer`] /
//! [`client::has_finalizer`] (and kube-runtime's [`client::finalizer`] flow),
//! [`client::is_controlled_by`], [`client::apply`] (server-side apply with a field owner),
//! and [`client::apply_crd`] (install a CRD at start and wait until it is served).
//!
//! # Status conditions
//!
//! [`conditions`] sets, finds and removes the `status.conditions` of an object by type, as
//! apimachinery's `meta.SetStatusCondition` does (`lastTransitionTime` moves only when the
//! status does, and the setter says whether anything changed), and gives a custom
//! resource's `Vec<Condition>` its schema: a list map keyed by `type`
//! ([`conditions::schema`], for `#[schemars(schema_with = ..)]`).
//!
//! # Deploying: manifests and least-privilege RBAC from the code
//!
//! The builders record what the operator needs from the cluster as they declare it:
//! `for_`, `owns` and `watches_kind` the reads and writes of their types (in the namespaces
//! the cache watches: a Role per namespace, or a ClusterRole), `complete_with` the Events its
//! recorder writes, the manager its Lease, secure metrics' reviews and self-signed
//! certificates; [`ControllerBuilder::permissions`] declares what the reconciler writes
//! beyond that ([`manager::rbac::Permissions`], whose [`Verb`](manager::rbac::Verb) has no wildcard).
//! [`manifests::manifests`] renders, from a manager built as the binary builds it (with
//! [`ManagerBuilder::render_only`](manager::ManagerBuilder::render_only), so no cluster is
//! needed), every object that runs it: CRDs, ServiceAccount, Roles and ClusterRole with
//! bindings, the Deployment (probes, metrics and webhook ports, a termination grace period
//! longer than the graceful shutdown, requests and a memory limit), the metrics Service, a
//! NetworkPolicy admitting only the webhook and metrics ports, the webhook Service and
//! configurations; `to_yaml` gives them to `kubectl apply -f -`. `cargo rudder new` (the
//! `cargo-rudder` command) scaffolds a project that does all this; `docs/deploying-an-operator.md` walks through it.
//!
//! # Features
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `workqueue` | yes | [`workqueue`] |
//! | `cache` | yes | [`cache`] |
//! | `handler` | yes | [`handler`] (and `cache`) |
//! | `controller` | yes | [`controller`](mod@controller) (and `handler`, `workqueue`) |
//! | `manager` | yes | [`manager`] and the controller builder (and `controller`) |
//! | `webhook` | yes | [`webhook`] and its builder, [`certs`], secure metrics, [`manifests`] (and `manager`): TLS on the server side, rustls on `ring` |
//! | `webhook-http2` | no | HTTP/2 for the webhook server when its options ask for it (`webhook::Options::http2(true)`; and `webhook`) |
//! | `profiling` | no | CPU profiles in pprof's format on an opt-in address (`ManagerBuilder::profiling_address`, `rudder::manager::profiling`; and `manager`) |
//! | `heap-profiling` | no | heap profiles too (`/debug/pprof/heap`), from jemalloc's sampling profiler: the binary makes `rudder::manager::profiling::Jemalloc` its global allocator and turns the profiler on (`_RJEM_MALLOC_CONF=prof:true`); builds jemalloc (C) (and `profiling`) |
//! | `otlp` | no | OpenTelemetry export over OTLP, HTTP/protobuf or gRPC, configured by the `OTEL_*` variables (`rudder::manager::otlp`, `ManagerBuilder::otlp`, `ManagerBuilder::cluster_name`; and `manager`): reconcile, webhook and API-request spans, the webhook's span a child of the API server's `traceparent` |
//! | `rustls-tls` | yes | TLS to the API server with rustls, `ring` as its crypto provider |
//! | `envtest` | no | `rudder::envtest` (rudder-envtest): the test control plane, for dev-dependencies |
//! | `openssl-tls` | no | TLS to the API server with OpenSSL (turn default features off to leave rustls out) |
//! | `schemars` | yes | [`conditions::schema`], the schema of a custom resource's conditions (with schemars) |
//!
//! The library crates under the facade choose no TLS stack for the client, so an operator
//! compiles only the one it picks here (or on `kube` itself); with neither, only `http://` API
//! servers can be reached. Serving TLS (webhooks, secure metrics) is the `webhook` feature's,
//! always rustls: an operator without webhooks that talks to its API server through OpenSSL
//! turns the default features off and picks `manager` and `openssl-tls`, and compiles no
//! rustls and no `ring`
//! (`cargo tree -p rudder-runtime --no-default-features --features manager,openssl-tls -i rustls`
//! finds nothing; CI checks it).

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]
// Which feature brings an item, in docs.rs' rendering (`--cfg docsrs`, on nightly).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "manager")]
mod builder;
pub mod conditions;
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub mod manifests;
#[cfg(feature = "webhook")]
mod webhook_builder;

/// The reconciler's typed client (reads from the cache, writes inferred from the object),
/// its helpers, the check of a read against the declared RBAC, and the layers that observe
/// a client's answers: rudder-client.
pub use rudder_client as client;

/// The contracts every layer shares, at the facade's root: events, requests, the source,
/// handler, predicate, reconciler and runnable traits, errors, and the modules `backoff`,
/// `cause` and `writes` (rudder-core; its helpers for the layers, `hash`, `sync` and
/// `panic_message`, stay there). Each has this one path (and the
/// [`prelude`] for the most used): the layers' crates use them without re-exporting them,
/// and the facade has no `core` module to make a bare `core::` ambiguous after
/// `use rudder::*`.
#[doc(inline)]
pub use rudder_core::{
    Action, And, BoxError, Compose, Context, ErrorChain, Event, EventHandler, LOW_PRIORITY,
    LeaderGate, MetaEvent, MetaPredicate, MetaPredicates, Next, Not, Or, Predicate, Queue,
    ReconcileId, Reconciler, Request, Runnable, Shutdown, Source, SourceError, Started, Synced,
    TerminalError, backoff, cause, enqueue, is_terminal, runnable, writes,
};

/// The work queue: rudder-workqueue.
#[cfg(feature = "workqueue")]
#[cfg_attr(docsrs, doc(cfg(feature = "workqueue")))]
pub use rudder_workqueue as workqueue;

/// Shared informers and the cache reader: rudder-cache.
#[cfg(feature = "cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "cache")))]
pub use rudder_cache as cache;

/// Requests, events, sources, event handlers, predicates: rudder-handler.
#[cfg(feature = "handler")]
#[cfg_attr(docsrs, doc(cfg(feature = "handler")))]
pub use rudder_handler as handler;

/// Reconcilers and controllers: rudder-controller.
#[cfg(feature = "controller")]
#[cfg_attr(docsrs, doc(cfg(feature = "controller")))]
pub use rudder_controller as controller;

/// The manager, probes, metrics and leader election: rudder-manager.
#[cfg(feature = "manager")]
#[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
pub use rudder_manager as manager;

/// Admission and conversion webhooks, their server and manifests: rudder-webhook (the
/// manager runs the server; declare webhooks with [`new_webhook`]).
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub use rudder_webhook as webhook;

/// Leader election and sharding by Leases: rudder-lease.
#[cfg(feature = "manager")]
#[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
pub use rudder_lease as lease;

/// The HTTP server under the manager's endpoints and the webhook server: rudder-server.
#[cfg(feature = "manager")]
#[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
pub use rudder_server as server;

/// Webhook certificates the operator makes itself: a CA and a serving certificate shared
/// through one Secret, renewed, and injected into webhook configurations and CRDs:
/// rudder-certs (turn it on with
/// [`ManagerBuilder::self_signed_webhook_certificates`](manager::ManagerBuilder::self_signed_webhook_certificates)).
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub use rudder_certs as certs;

/// One manager, many clusters: a fleet of member clusters engaged and disengaged as providers
/// announce them, and controllers declared once that run in each: rudder-fleet.
#[cfg(feature = "manager")]
#[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
pub use rudder_fleet as multicluster;

/// The test control plane: a real kube-apiserver and etcd for tests, rudder-envtest (feature
/// `envtest`, for dev-dependencies).
#[cfg(feature = "envtest")]
#[cfg_attr(docsrs, doc(cfg(feature = "envtest")))]
pub use rudder_envtest as envtest;

#[cfg(feature = "manager")]
#[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
#[doc(inline)]
pub use builder::{ControllerBuilder, new_controller};
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
#[doc(inline)]
pub use webhook_builder::{WebhookBuilder, WebhookManifests, new_webhook, webhook_manifests};

/// Kubernetes Events: what [`Tools::record`] and [`Tools::publish`] take (kube-runtime's
/// types, re-exported so an operator does not depend on kube-runtime in lockstep).
///
/// These are Event *objects* written to the API server for people to read (`kubectl get
/// events`), a different thing from [`Event`], the change to an object that
/// informers report and handlers act on.
pub mod events {
    pub use kube_runtime::events::{Event, EventType, Recorder, Reporter};
}
#[cfg(feature = "manager")]
#[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
#[doc(inline)]
pub use rudder_builder::{Error, FleetError, Result, Tools};

/// The names an operator uses most, to `use rudder::prelude::*`.
pub mod prelude {
    #[cfg(feature = "manager")]
    #[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
    pub use crate::Tools;
    pub use crate::events::EventType;
    #[cfg(feature = "cache")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cache")))]
    pub use rudder_cache::Cache;
    #[cfg(feature = "controller")]
    #[cfg_attr(docsrs, doc(cfg(feature = "controller")))]
    pub use rudder_controller::{Controller, Options as ControllerOptions};
    pub use rudder_core::{Action, Compose, Context, Reconciler, Request, TerminalError};
    #[cfg(feature = "handler")]
    #[cfg_attr(docsrs, doc(cfg(feature = "handler")))]
    pub use rudder_handler::{EnqueueObject, EnqueueOwner, GenerationChanged, Kind};
    #[cfg(feature = "manager")]
    #[cfg_attr(docsrs, doc(cfg(feature = "manager")))]
    pub use rudder_manager::Manager;
}
