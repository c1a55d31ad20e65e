//! [`Manager`]: holds the client and the cache, starts runnables in order, stops them in
//! reverse.
//!
//! By concern: `options.rs` (defaults, [`GracefulShutdown`], [`ExtraHandler`]), `error.rs`,
//! `builder.rs` ([`ManagerBuilder`]), this file (the [`Manager`] handle and what it holds),
//! `run.rs` (the start and stop sequence), `group.rs` (runnables started together),
//! `signals.rs` ([`Manager::start_until_signal`]).

mod builder;
mod error;
mod group;
mod options;
mod run;
mod signals;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::Client;
use kube_runtime::events::Recorder;
use metrics_exporter_prometheus::PrometheusHandle;
use rudder_cache::Cache;
use rudder_controller::Controller;
use rudder_core::Reconciler;
use rudder_core::sync::LockExt;
use tokio_util::sync::CancellationToken;

pub use builder::ManagerBuilder;
pub use error::{BuildError, Error};
pub use options::{
    DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_GRACEFUL_SHUTDOWN, DEFAULT_HEALTH_ADDRESS,
    DEFAULT_METRICS_ADDRESS, ExtraHandler, GracefulShutdown,
};

use crate::health::HealthChecks;
use crate::leader_election::LeaderElection;
use crate::rbac::{Permissions, Rules, RulesRecorder};
use crate::runnable::Runnable;
use rudder_client::reads::DeclaredReads;

type SyncProbes = Arc<Mutex<Vec<(String, Box<dyn Fn() -> bool + Send + Sync>)>>>;

/// What reaches a running manager: a runnable added, a removal asked for (told whether
/// there was such a runnable once it has ended).
pub(crate) enum Late {
    Add(Box<dyn Runnable>),
    Remove {
        name: String,
        done: tokio::sync::oneshot::Sender<bool>,
    },
}

#[derive(Default)]
struct Bound {
    health: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    #[cfg(feature = "profiling")]
    profiling: Option<SocketAddr>,
}

/// Runs controllers and other runnables as one process: controller-runtime's manager.
///
/// Start order: the health and metrics servers, the cache's sync, runnables that need no
/// leadership, (with leader election and [warm standby](ManagerBuilder::warm_standby))
/// controllers with their workers held behind the leader gate, then the election, then the
/// other leader-only runnables (and controllers, without warm standby). Stop order is the
/// reverse, within the graceful-shutdown timeout. If any runnable fails, the manager stops
/// the rest and returns that error.
pub struct Manager {
    #[cfg(feature = "webhook")]
    pub(crate) tls: crate::webhooks::Parts,
    extra: Arc<Vec<(String, ExtraHandler)>>,
    raise_fd_limit: bool,
    permissions: Arc<Mutex<Rules>>,
    require_declared_reads: bool,
    render_only: bool,
    cache_sync_timeout: Duration,
    warm_standby: bool,
    client: Client,
    election: Option<LeaderElection>,
    cache: Cache,
    cache_token: CancellationToken,
    recorder: Recorder,
    health: HealthChecks,
    synced: SyncProbes,
    metrics: Option<PrometheusHandle>,
    health_address: Option<SocketAddr>,
    metrics_address: Option<SocketAddr>,
    #[cfg(feature = "profiling")]
    profiling_address: Option<SocketAddr>,
    graceful_shutdown: GracefulShutdown,
    runnables: Mutex<Vec<Box<dyn Runnable>>>,
    /// Where runnables added and removed while the manager runs go (`None` before it starts
    /// its runnables and once it stops them). Locked before `runnables`.
    late: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Late>>>,
    bound: Mutex<Bound>,
    started: std::sync::atomic::AtomicBool,
    /// The deadline of the stop once it began (`None` inside: no deadline), for what stops
    /// last (the servers).
    stop_deadline: OnceLock<Option<tokio::time::Instant>>,
    /// The OTLP exporter: started first, shut down last.
    #[cfg(feature = "otlp")]
    otlp: crate::otlp::Managed,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("health_address", &self.health_address)
            .field("metrics_address", &self.metrics_address)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// The shared client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The shared cache: informers created here are shared by every controller.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Records permissions the operator needs (resolved where the cache watches each type),
    /// for rendering its RBAC ([`permissions`](Self::permissions)). The `rudder` controller
    /// builder records what each controller watches, owns and declares.
    pub fn record_permissions(&self, permissions: &Permissions) {
        let rules = permissions.resolve(&self.cache);
        self.permissions.lock_unpoisoned().merge(&rules);
    }

    /// A handle that records rules already placed on this manager, for rendering with the
    /// rest ([`permissions`](Self::permissions)): for what outlives a borrow of the manager
    /// and places its rules against another cache (a fleet's controllers, against the shape
    /// of a member cluster's cache).
    pub fn rules_recorder(&self) -> RulesRecorder {
        RulesRecorder(Arc::clone(&self.permissions))
    }

    /// Every permission the operator needs: what was recorded with
    /// [`record_permissions`](Self::record_permissions), and the manager's own: leader
    /// election (get, create, update on its Lease's namespace's `leases`, and list, watch
    /// unless its watch is off), secure metrics
    /// (create `tokenreviews` and `subjectaccessreviews`), self-signed webhook certificates
    /// (get, list, watch, create, update on Secrets in their namespace; get, list, watch,
    /// update on the kinds of the configured injection targets).
    pub fn permissions(&self) -> Rules {
        let mut rules = self.permissions.lock_unpoisoned().clone();
        rules.merge(&self.own_rules());
        rules
    }

    /// The check of cached reads against [`permissions`](Self::permissions) that the
    /// `rudder` typed client of each controller makes before a read starts an informer; `None`
    /// when the manager was built with
    /// [`require_declared_reads(false)`](ManagerBuilder::require_declared_reads) or
    /// [`render_only`](ManagerBuilder::render_only).
    pub fn declared_reads(&self) -> Option<DeclaredReads> {
        (self.require_declared_reads && !self.render_only).then(|| {
            DeclaredReads::new(
                Arc::clone(&self.permissions),
                self.own_rules(),
                self.cache.clone(),
            )
        })
    }

    /// The manager's own rules: its Lease, secure metrics' reviews, the self-signed
    /// certificates.
    fn own_rules(&self) -> Rules {
        crate::rbac::manager_rules(
            self.election.as_ref().map(LeaderElection::config),
            #[cfg(feature = "webhook")]
            self.tls.has_secure_metrics(),
            #[cfg(feature = "webhook")]
            self.tls.certificates_config(),
        )
    }

    /// Whether the manager was built with [`ManagerBuilder::render_only`].
    pub fn is_render_only(&self) -> bool {
        self.render_only
    }

    /// Where `/healthz` and `/readyz` are configured to listen (before `start`; see
    /// [`health_address`](Self::health_address) for where they do).
    pub fn configured_health_address(&self) -> Option<SocketAddr> {
        self.health_address
    }

    /// Where `/metrics` is configured to listen (before `start`; see
    /// [`metrics_address`](Self::metrics_address) for where it does).
    pub fn configured_metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_address
    }

    /// Whether `/metrics` is served over HTTPS (`ManagerBuilder::secure_metrics`, with the
    /// feature `webhook`; always `false` without it).
    pub fn has_secure_metrics(&self) -> bool {
        #[cfg(feature = "webhook")]
        return self.tls.has_secure_metrics();
        #[cfg(not(feature = "webhook"))]
        false
    }

    /// How long runnables get to stop ([`ManagerBuilder::graceful_shutdown`]).
    pub fn graceful_shutdown(&self) -> GracefulShutdown {
        self.graceful_shutdown
    }

    /// The leader election, if configured.
    pub fn leader_election(&self) -> Option<&LeaderElection> {
        self.election.as_ref()
    }

    /// A recorder for Kubernetes Events, reporting as the manager's name.
    pub fn event_recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// The liveness and readiness checks, to add your own.
    pub fn health_checks(&self) -> &HealthChecks {
        &self.health
    }

    /// Where the probe server listens, once started.
    pub fn health_address(&self) -> Option<SocketAddr> {
        self.bound.lock_unpoisoned().health
    }

    /// Where the metrics server listens, once started.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.bound.lock_unpoisoned().metrics
    }

    /// Where the profiling server listens, once started
    /// ([`ManagerBuilder::profiling_address`](crate::ManagerBuilder::profiling_address)).
    #[cfg(feature = "profiling")]
    #[cfg_attr(docsrs, doc(cfg(feature = "profiling")))]
    pub fn profiling_address(&self) -> Option<SocketAddr> {
        self.bound.lock_unpoisoned().profiling
    }

    /// Adds a runnable, started by [`start`](Self::start); added while the manager runs, it
    /// starts at once (a leader-only one once this replica leads, as at start). Added once
    /// the manager has stopped, it never runs (logged at warn).
    pub fn add(&self, runnable: impl Runnable) {
        let runnable: Box<dyn Runnable> = Box::new(runnable);
        let late = self.late.lock_unpoisoned();
        match late.as_ref() {
            Some(sender) => {
                if let Err(refused) = sender.send(Late::Add(runnable)) {
                    Self::never_runs(&refused.0);
                }
            }
            None if self.started.load(std::sync::atomic::Ordering::SeqCst)
                && self.stop_deadline.get().is_some() =>
            {
                Self::never_runs(&Late::Add(runnable));
            }
            None => self.runnables.lock_unpoisoned().push(runnable),
        }
    }

    /// Logs that a runnable added after the stop never runs.
    fn never_runs(late: &Late) {
        if let Late::Add(runnable) = late {
            tracing::warn!(runnable = %runnable.name(), "added to a manager that has stopped; it never runs");
        }
    }

    /// Adds a controller (a leader-only runnable, unless sharded) and makes readiness wait
    /// for its sources. Before [`start`](Self::start) or while the manager runs: added
    /// while it runs, the controller starts at once (once this replica leads, if it needs
    /// to), its sources start the informers they need, and readiness waits for them too.
    pub fn add_controller<R: Reconciler>(&self, controller: Controller<R>) {
        let probe = controller.clone();
        self.synced.lock_unpoisoned().push((
            format!("controller {}", controller.name()),
            Box::new(move || probe.has_synced()),
        ));
        self.add(controller);
    }

    /// Removes the runnable called `name` (its [`Runnable::name`]), before or while the
    /// manager runs, and returns whether there was one. A running one is told to stop with
    /// the graceful-shutdown timeout as its deadline (and aborted past it), and this returns
    /// once it has ended; the other runnables go on, and an error it ends with is logged, not
    /// the manager's. `false` too when the manager stopped first (which stopped it anyway).
    pub async fn remove(&self, name: &str) -> bool {
        let answer = {
            let late = self.late.lock_unpoisoned();
            match late.as_ref() {
                Some(sender) => {
                    let (done, answer) = tokio::sync::oneshot::channel();
                    let sent = sender.send(Late::Remove {
                        name: name.to_owned(),
                        done,
                    });
                    sent.is_ok().then_some(answer)
                }
                None => {
                    let mut runnables = self.runnables.lock_unpoisoned();
                    let before = runnables.len();
                    runnables.retain(|r| r.name() != name);
                    let removed = runnables.len() < before;
                    drop(runnables);
                    if removed {
                        self.forget_probe(name);
                    }
                    return removed;
                }
            }
        };
        let removed = match answer {
            Some(answer) => answer.await.unwrap_or(false),
            None => false,
        };
        if removed {
            self.forget_probe(name);
        }
        removed
    }

    /// Removes the controller called `name` ([`Controller::name`]) as
    /// [`remove`](Self::remove) does: its workers finish their reconciles (within the
    /// graceful-shutdown timeout), its queue is dropped, and its sources stop, which lets go
    /// of the cache's informers they held: an informer no other controller or reader holds
    /// (or pinned) stops and its memory is freed (see `rudder_cache::InformerUse`).
    /// Readiness no longer waits for it. Runnables added with it (a shard ring) stay.
    pub async fn remove_controller(&self, name: &str) -> bool {
        self.remove(&format!("controller {name}")).await
    }

    /// Readiness stops waiting for the runnable called `name`.
    fn forget_probe(&self, name: &str) {
        self.synced
            .lock_unpoisoned()
            .retain(|(probe, _)| probe != name);
    }
}
