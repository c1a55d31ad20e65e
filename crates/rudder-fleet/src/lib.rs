//! One manager, many clusters: a [`Fleet`] of member clusters that join and leave while the
//! operator runs, and controllers declared once that run in each of them.
//!
//! The facade re-exports this crate as `rudder::multicluster`, which is where an operator
//! reaches it; depend on it alone to build a fleet without the facade.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use rudder_builder::Tools;
//! use rudder_core::Action;
//! use rudder_core::Context;
//! use rudder_core::Reconciler;
//! use rudder_fleet::{Fleet, KubeconfigSecrets};
//! use rudder_core::Request;
//! use rudder_manager::Manager;
//!
//! struct Stamp(Tools);
//!
//! impl Reconciler for Stamp {
//!     type Error = rudder_client::ClientError;
//!
//!     async fn reconcile(&self, request: Request, ctx: Context) -> Result<Action, Self::Error> {
//!         // `self.0` reads and writes the cluster this instance serves.
//!         let cluster = ctx.cluster().unwrap_or_default();
//!         if let Some(cm) = self.0.client().get::<ConfigMap>(&request).await? {
//!             tracing::info!(cluster, name = ?cm.metadata.name, "seen");
//!         }
//!         Ok(Action::done())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let manager = Manager::builder(kube::Client::try_default().await?).build()?;
//! // Member clusters: kubeconfig Secrets labelled
//! // `sigs.k8s.io/multicluster-runtime-kubeconfig=true` in `fleet-system`.
//! let fleet = Fleet::builder(&manager)
//!     .kubeconfig_secrets(KubeconfigSecrets::new("fleet-system"))
//!     .build()?;
//! fleet.new_controller().for_::<ConfigMap>().complete_with(Stamp)?;
//! manager.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Clusters
//!
//! A [`Provider`] announces member clusters by name with a client configuration, and
//! withdraws them: [`StaticClusters`] (a fixed list), [`KubeconfigDir`] (one kubeconfig file
//! per cluster in a directory, read again every 2 s), [`KubeconfigSecrets`] (one Secret per
//! cluster in a namespace of the home cluster, watched), [`ClusterApiClusters`] (one per
//! provisioned Cluster API `Cluster` with its `<cluster>-kubeconfig` Secret, watched) and
//! [`ClusterProfiles`] (one per healthy Cluster Inventory API `ClusterProfile` with the
//! kubeconfig Secret made for this consumer, watched). The fleet *engages* an announced
//! cluster: a client for it (counted in `rest_client_requests_total` under its host, and
//! watched for failures), a [`Cache`](rudder_cache::Cache) of its own, and one instance of
//! every fleet controller that serves it. It *disengages* a withdrawn one: its controllers
//! stop (their reconciles get the manager's graceful-shutdown timeout, and one still running
//! at its end is aborted), their queues and
//! queued keys are dropped, its informers stop and its cache's memory is freed; the other
//! clusters are not touched. A cluster announced again with a new configuration (rotated
//! credentials) is disengaged, then engaged with it.
//!
//! The *home* cluster is the manager's: leader election, a sharded fleet's Leases, the
//! kubeconfig Secrets and the controllers' Events live there.
//!
//! # Controllers
//!
//! [`Fleet::new_controller`] declares a controller as `rudder::new_controller` does: the
//! two builders share one declaration (`for_`, `owns`, `owns_writes`, `watches_kind`,
//! `watches`, `reads`, `permissions`, `event_filter`, `named`, `with_options`, ...), with a
//! source made for each member where the single-cluster builder takes one
//! ([`FleetControllerBuilder::watches`]). Its permissions are recorded on the manager, placed
//! as a member's cache watches, and rendered with its RBAC
//! ([Permissions](FleetControllerBuilder#permissions)). Each engaged cluster runs its own
//! instance: its own queue, workers (`Options::workers` are per cluster) and rate limiter,
//! its sources on that cluster's cache, and a reconciler made for it from [`Tools`](rudder_builder::Tools) whose client
//! reads that cluster's cache and writes to its API server. A reconcile's
//! [`Context::cluster`](rudder_core::Context::cluster) (and [`Tools::cluster`](rudder_builder::Tools::cluster))
//! names its cluster. Owner references, finalizers and read-your-writes work within each
//! cluster, as for one cluster. [`clusters`](FleetControllerBuilder::clusters) chooses a
//! subset.
//!
//! # Faults stay in their cluster
//!
//! A member that is slow, unreachable or refuses the credentials (401, 403) degrades only its
//! own keys: its informers retry with their backoff, its reconciles fail and back off in its
//! own queue, its workers are its own. An instance that ends with an error (its cache did not
//! sync within `Options::cache_sync_timeout`, for a cluster down when engaged) is started
//! again after 1 s, doubling to 60 s (each wait jittered up to twice as long), counted in
//! `rudder_fleet_controller_restarts_total`.
//!
//! **Readiness** never depends on a member: the manager's readiness probe reports the home
//! cluster's controllers, webhooks and caches as before, and a member's failure is not one of
//! them (a fleet of a hundred clusters must not go unready, and be restarted, because one is
//! down). A member's state is in the metrics below, and in [`Fleet::has_synced`] and
//! [`Cluster::health`].
//!
//! # Several replicas
//!
//! [`FleetBuilder::sharded`] spreads clusters (not keys) over the operator's replicas with
//! the Lease ring of `rudder_lease::sharding`: each cluster hashes to a shard, a replica engages a
//! cluster only while it holds its shard's Lease, and its instances take requests only while
//! that holding is valid by the monotonic clock (so a frozen replica stops by itself). A
//! shard moves only after the replica giving it up has disengaged its clusters, so no
//! cluster is served by two replicas at once; each replica caches only its own clusters.
//!
//! The fleet acts when told: a provider's announcement, a shard opening or closing in the
//! ring's gate, a disengagement ending, a member's controllers reporting they synced. Nothing
//! of it runs on a tick but each member's probe.
//!
//! # Metrics
//!
//! | metric | labels | |
//! |---|---|---|
//! | `rudder_fleet_clusters_engaged` | | clusters engaged on this replica |
//! | `rudder_fleet_cluster_engaged` | `cluster` | 1 while engaged here, 0 after |
//! | `rudder_fleet_cluster_synced` | `cluster` | 1 once every instance synced |
//! | `rudder_fleet_cluster_healthy` | `cluster` | 0 while its last answer was a failure |
//! | `rudder_fleet_cluster_request_failures_total` | `cluster`, `reason` | `unreachable`, `unauthorized`, `forbidden`, `server_error` |
//! | `rudder_fleet_controller_restarts_total` | `cluster`, `controller` | instances started again after an error |
//! | `rudder_fleet_provider_errors_total` | `provider` | unreadable announcements, failed runs |
//! | `rudder_fleet_cluster_engage_seconds` | `cluster` | from its announcement to every instance synced |
//!
//! The controllers' and queues' own metrics (`controller_runtime_reconcile_total`,
//! `workqueue_depth`, `rudder_controller_write_wait_seconds`, ...) carry a `cluster` label
//! for the instances of a fleet, and so do a member cache's (`rudder_cache_*`). A failure
//! state change of a member (failing, answering again) is logged once at warn or info, not
//! per request. See `docs/multicluster.md`.

// Unit tests may spawn: the test is the owner. The library build keeps clippy's
// `disallowed_methods` (clippy.toml: a spawn is owned by whoever joins it).
#![cfg_attr(
    test,
    allow(
        clippy::disallowed_methods,
        reason = "unit tests may spawn: the test owns its tasks"
    )
)]

mod cluster;
mod controller;
mod decide;
mod fleet;
pub mod metrics;
mod provider;
mod providers;

pub use cluster::{Cluster, ClusterHealth};
pub use controller::FleetControllerBuilder;
pub use fleet::{DEFAULT_PROBE_PERIOD, Fleet, FleetBuilder};
pub use provider::{Announcer, Provider};
pub use providers::{
    ClusterApiClusters, ClusterProfiles, DEFAULT_KUBECONFIG_KEY, DEFAULT_SECRET_LABEL,
    KubeconfigDir, KubeconfigSecrets, StaticClusters,
};
