//! [`Manager`]: holds the client and the cache, starts runnables in order, stops them in
//! reverse.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use kube::Client;
use kube_runtime::events::{Recorder, Reporter};
use metrics_exporter_prometheus::PrometheusHandle;
use rudder_cache::{Cache, CacheBuilder};
use rudder_controller::{Controller, ErrorChain, LeaderGate, Reconciler, Shutdown};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::health::{HealthChecks, Probe, check};
use crate::leader_election::{
    ConfigError, Error as ElectionError, LeaderElection, LeaderElectionConfig, Leadership,
};
use crate::rbac::{Permissions, Rules};
use crate::runnable::{BoxError, Runnable};
use crate::server::{Routes, serve};
use rudder_server::ServerHandle;

/// The default address of `/healthz` and `/readyz` (all interfaces: the kubelet probes the
/// pod's IP).
pub const DEFAULT_HEALTH_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8081);
/// The default address of `/metrics`.
pub const DEFAULT_METRICS_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);
/// How long `start` waits for the cache to sync, unless told otherwise.
pub const DEFAULT_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// How long runnables get to stop, unless told otherwise (controller-runtime's default).
pub const DEFAULT_GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(30);

/// How long the manager waits for runnables to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GracefulShutdown {
    /// Up to this long: the deadline handed to every runnable is the stop's start plus
    /// this; what still runs then is aborted and `start` reports [`Error::ShutdownTimeout`]
    /// naming it.
    After(Duration),
    /// Not at all: runnables are told to stop with a deadline of now (controllers cancel
    /// their reconciles' contexts at once) and whatever has not returned is aborted. That is
    /// what was asked for, so it is logged, not reported as an error.
    Immediately,
    /// As long as they take: runnables get no deadline (controllers never cancel their
    /// reconciles' contexts).
    Forever,
}

/// Errors that end a manager's [`start`](Manager::start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The secure metrics server could not start (its certificate is missing or does not
    /// parse, or its address is taken); nothing else was started.
    #[cfg(feature = "webhook")]
    #[error("cannot start the secure metrics server on {addr}")]
    SecureMetrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: crate::server::SecureMetricsError,
    },
    /// A runnable failed; the manager stopped the others. Whether a restart helps depends on
    /// the runnable's error.
    #[error("{name} failed")]
    Runnable {
        /// The runnable's name.
        name: String,
        /// Its error.
        #[source]
        source: BoxError,
    },
    /// This replica lost its leader lease; its leader-only runnables were stopped. The
    /// process should exit (and be restarted by its Deployment), since another replica now
    /// leads and this one's in-memory state may be stale.
    #[error("leader election lost")]
    LeadershipLost,
    /// A server could not listen on its address (in use, or not permitted).
    #[error("cannot listen for {what} on {addr}")]
    Bind {
        /// `health probes` or `metrics`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Runnables were still running when the graceful-shutdown deadline passed; they were
    /// aborted. A controller here has a reconcile that did not return after its context was
    /// cancelled.
    #[error("runnables did not stop within {timeout:?}: {}", left.join(", "))]
    ShutdownTimeout {
        /// The graceful-shutdown timeout.
        timeout: Duration,
        /// The names of the runnables that were aborted.
        left: Vec<String>,
    },
    /// A runnable panicked; the manager stopped the others.
    #[error("{name} panicked: {message}")]
    Panicked {
        /// The runnable's name.
        name: String,
        /// The panic's message.
        message: String,
    },
    /// The webhook server could not start (its certificate is missing or does not parse,
    /// or its address is taken); nothing else was started.
    #[cfg(feature = "webhook")]
    #[error("cannot start the webhook server")]
    Webhook(#[source] rudder_webhook::StartError),
    /// The self-signed webhook certificates could not be read, created or renewed in their
    /// Secret ([`ManagerBuilder::self_signed_webhook_certificates`]: RBAC on Secrets, an
    /// unreachable API server); the webhook server was not started.
    #[cfg(feature = "webhook")]
    #[error("cannot load the self-signed webhook certificates")]
    Certificates(#[source] rudder_certs::Error),
    /// `start` was called twice.
    #[error("the manager was already started")]
    AlreadyStarted,
    /// The cache's informers did not sync within the cache-sync timeout (a type not served,
    /// missing RBAC, an unreachable API server); no runnable was started.
    #[error("the cache did not sync")]
    CacheSync(#[source] rudder_cache::SyncError),
    /// Leader election failed outright (not merely waiting for another leader).
    #[error("leader election failed")]
    LeaderElection(#[source] ElectionError),
}

/// Why a manager could not be built ([`ManagerBuilder::build`]); nothing was started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The Prometheus recorder could not be installed (another global `metrics` recorder
    /// was installed first: pass its handle with [`ManagerBuilder::metrics_handle`]).
    #[error("cannot install the Prometheus recorder")]
    Metrics(#[source] metrics_exporter_prometheus::BuildError),
    /// The leader-election settings are inconsistent; fix the configuration.
    #[error("invalid leader election configuration")]
    LeaderElectionConfig(#[source] ConfigError),
    /// [`SecureMetrics::self_signed`](crate::SecureMetrics::self_signed) needs
    /// [`ManagerBuilder::self_signed_webhook_certificates`] too.
    #[cfg(feature = "webhook")]
    #[error(
        "secure metrics are to use the self-signed certificates, but self_signed_webhook_certificates is not set"
    )]
    SecureMetricsWithoutSelfSigned,
}

/// Builds a [`Manager`].
pub struct ManagerBuilder {
    client: Client,
    name: String,
    health_address: Option<SocketAddr>,
    metrics_address: Option<SocketAddr>,
    metrics_handle: Option<PrometheusHandle>,
    graceful_shutdown: GracefulShutdown,
    cache: Box<dyn FnOnce(CacheBuilder) -> CacheBuilder + Send>,
    leader_election: Option<LeaderElectionConfig>,
    warm_standby: bool,
    cache_sync_timeout: Duration,
    extra: Vec<(String, ExtraHandler)>,
    raise_fd_limit: bool,
    client_metrics: bool,
    api_host: Option<String>,
    /// The webhook server, self-signed certificates and secure metrics.
    #[cfg(feature = "webhook")]
    pub(crate) tls: crate::webhooks::Declared,
    render_only: bool,
}

/// An extra handler on the metrics server ([`ManagerBuilder::metrics_extra_handler`]): the
/// request in, the response out, with its own status, headers and body.
pub type ExtraHandler = Arc<
    dyn Fn(
            http::Request<rudder_server::Body>,
        ) -> futures::future::BoxFuture<
            'static,
            http::Response<http_body_util::Full<hyper::body::Bytes>>,
        > + Send
        + Sync,
>;

impl std::fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerBuilder")
            .field("name", &self.name)
            .field("health_address", &self.health_address)
            .field("metrics_address", &self.metrics_address)
            .field("graceful_shutdown", &self.graceful_shutdown)
            .finish_non_exhaustive()
    }
}

impl ManagerBuilder {
    /// The name events are reported under (default `rudder`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Where `/healthz` and `/readyz` listen (default [`DEFAULT_HEALTH_ADDRESS`]); `None`
    /// for no server. Port 0 picks a free port ([`Manager::health_address`] tells which).
    pub fn health_probe_address(mut self, addr: Option<SocketAddr>) -> Self {
        self.health_address = addr;
        self
    }

    /// Where `/metrics` listens (default [`DEFAULT_METRICS_ADDRESS`]); `None` for no server.
    pub fn metrics_address(mut self, addr: Option<SocketAddr>) -> Self {
        self.metrics_address = addr;
        self
    }

    /// Renders `/metrics` from this handle instead of installing the process-wide recorder
    /// ([`crate::metrics::prometheus`]).
    pub fn metrics_handle(mut self, handle: PrometheusHandle) -> Self {
        self.metrics_handle = Some(handle);
        self
    }

    /// How long runnables get to stop (default 30 s).
    pub fn graceful_shutdown(mut self, shutdown: GracefulShutdown) -> Self {
        self.graceful_shutdown = shutdown;
        self
    }

    /// Configures the shared cache (default namespace, per-type options, resync).
    pub fn cache(mut self, f: impl FnOnce(CacheBuilder) -> CacheBuilder + Send + 'static) -> Self {
        self.cache = Box::new(f);
        self
    }

    /// Serves `handler` at `path` on the metrics server too (controller-runtime's extra
    /// metrics handlers, e.g. a pprof-like debug page). `path` must start with `/` and must
    /// not be `/metrics`.
    ///
    /// The handler gets the whole request (its body a [`rudder_server::Body`], cut off at
    /// the server's 1 MiB limit) and answers with its own status, headers and body (a
    /// `String`, `Vec<u8>`, `&'static str` or `Bytes`):
    ///
    /// ```no_run
    /// # fn demo(client: kube::Client) -> Result<(), rudder_manager::BuildError> {
    /// let manager = rudder_manager::Manager::builder(client)
    ///     .metrics_extra_handler("/debug/version", |_request| async {
    ///         http::Response::builder()
    ///             .header("content-type", "text/plain")
    ///             .header("cache-control", "no-store")
    ///             .body(env!("CARGO_PKG_VERSION"))
    ///             .unwrap_or_default()
    ///     })
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn metrics_extra_handler<F, Fut, B>(mut self, path: impl Into<String>, handler: F) -> Self
    where
        F: Fn(http::Request<rudder_server::Body>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = http::Response<B>> + Send + 'static,
        B: Into<hyper::body::Bytes>,
    {
        let handler: ExtraHandler = Arc::new(move |request| {
            let answer = handler(request);
            Box::pin(async move {
                answer
                    .await
                    .map(|body| http_body_util::Full::new(body.into()))
            })
        });
        self.extra.push((path.into(), handler));
        self
    }

    /// Whether `start` raises the process's soft file-descriptor limit to its hard limit,
    /// as Go's runtime does (default `true`; [`rudder_server::raise_fd_limit`]). Containers
    /// often start with a soft limit of 1024, which a busy operator can run out of; the
    /// limit is process-wide, so turn this off if the process manages it itself.
    pub fn raise_fd_limit(mut self, raise: bool) -> Self {
        self.raise_fd_limit = raise;
        self
    }

    /// How long `start` waits for the cache's informers to sync before starting runnables
    /// (default [`DEFAULT_CACHE_SYNC_TIMEOUT`]).
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.cache_sync_timeout = timeout;
        self
    }

    /// Marks the manager as built only to render its manifests (RBAC, Deployment, webhook
    /// configurations): the `rudder` builders then record what they declare without asking
    /// the API server anything (a controller's `complete` skips its check that the watched
    /// types are served), so the client may point nowhere. Such a manager is not meant to be
    /// started.
    pub fn render_only(mut self, render_only: bool) -> Self {
        self.render_only = render_only;
        self
    }

    /// Runs leader-only runnables (controllers) only while this replica holds the Lease
    /// `config` names; without this, every replica runs them.
    ///
    /// Controllers get a [`LeaderGate`] fed by the election's
    /// [`validity`](LeaderElection::validity): their workers take a request only while
    /// `now` is before the last successful acquire or renewal (its send time) plus the
    /// lease duration, on the monotonic clock, and not after leadership is lost or given up.
    /// So a leader whose renewals fail stops reconciling by itself, and a leader frozen past
    /// its lease (SIGSTOP, a VM pause) starts no reconcile after it resumes; its manager then
    /// ends with [`Error::LeadershipLost`]. With [`warm_standby`](Self::warm_standby) (the
    /// default) controllers also run on replicas that do not lead.
    pub fn leader_election(mut self, config: LeaderElectionConfig) -> Self {
        self.leader_election = Some(config);
        self
    }

    /// With leader election, whether controllers start on every replica, leading or not
    /// (default `true`; controller-runtime's warm-up). A replica that does not lead then
    /// starts its controllers' sources, so their informers list and keep watching, and
    /// their events fill the work queues, while the workers wait behind the
    /// [`LeaderGate`]: nothing is reconciled by a replica that does not lead. When it comes
    /// to lead, its workers start at once on what was queued, with no cache to fill on that
    /// path. Readiness (`cache-sync`) then passes on every replica once its controllers'
    /// sources have synced (without warm standby, a replica that does not lead has not
    /// started its controllers, so it is not ready).
    ///
    /// A follower's work queues hold every key its controllers saw (each once), so its
    /// `workqueue_depth` is the size of what it watches, not a backlog, and the first
    /// requests a new leader takes report in `workqueue_queue_duration_seconds` the time
    /// they waited while it followed; alert on the leader's (`leader_election_master_status`
    /// is 1 there).
    ///
    /// The price is memory and API-server load: every replica holds the caches and watches
    /// the controllers need. Turn it off for memory-tight deployments: controllers then
    /// start only once this replica leads, as other leader-only runnables always do
    /// (runnables that do not take a [`LeaderGate`], such as
    /// [`runnable`](crate::runnable) closures with `needs_leader_election`).
    pub fn warm_standby(mut self, on: bool) -> Self {
        self.warm_standby = on;
        self
    }

    /// The `host` label of `rest_client_requests_total`: the API server's host and port as
    /// its URL names them ([`client_metrics::host_of`](crate::client_metrics::host_of)).
    /// Default: [`client_metrics::default_host`](crate::client_metrics::default_host), the
    /// server `kube::Client::try_default` talks to (empty if there is none); set it when the
    /// client was made from another configuration.
    pub fn api_host(mut self, host: impl Into<String>) -> Self {
        self.api_host = Some(host.into());
        self
    }

    /// Whether to count every request of the manager's client in
    /// `rest_client_requests_total{code, method, host}` ([`client_metrics`](crate::client_metrics);
    /// default on). The manager's cache, controllers, event recorder, leader election,
    /// certificate source and [`Manager::client`] all use the instrumented client. Turn it
    /// off when the client given to [`Manager::builder`] is already instrumented.
    ///
    /// The counting layer is made in [`build`](Self::build), which must then run inside a
    /// Tokio runtime (where the client was made); outside one, nothing is counted and a
    /// warning says so.
    pub fn client_metrics(mut self, on: bool) -> Self {
        self.client_metrics = on;
        self
    }

    /// Builds the manager. Nothing starts until [`Manager::start`].
    pub fn build(mut self) -> Result<Manager, BuildError> {
        if self.client_metrics {
            if tokio::runtime::Handle::try_current().is_ok() {
                let host = self
                    .api_host
                    .take()
                    .or_else(crate::client_metrics::default_host)
                    .unwrap_or_default();
                self.client = crate::client_metrics::instrument(self.client, &host);
            } else {
                tracing::warn!(
                    "ManagerBuilder::build ran outside a Tokio runtime: API requests are not \
                     counted in rest_client_requests_total"
                );
            }
        }
        let health = HealthChecks::default();
        // Resolved before anything global (the metrics recorder) is installed.
        #[cfg(feature = "webhook")]
        let tls = self.tls.build(&health)?;
        let election = self
            .leader_election
            .map(|config| LeaderElection::new(self.client.clone(), config))
            .transpose()
            .map_err(BuildError::LeaderElectionConfig)?;
        let metrics = match (self.metrics_address, self.metrics_handle) {
            (None, handle) => handle,
            (Some(_), Some(handle)) => Some(handle),
            (Some(_), None) => Some(crate::metrics::prometheus().map_err(BuildError::Metrics)?),
        };
        let cache_token = CancellationToken::new();
        let cache = (self.cache)(Cache::builder(self.client.clone())).build(&cache_token);
        let reporter = Reporter {
            controller: self.name.clone(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        health.add(Probe::Liveness, "ping", check(|| async { Ok(()) }));
        let synced: SyncProbes = Arc::default();
        let probes = Arc::clone(&synced);
        let cache_probe = cache.clone();
        #[cfg(feature = "webhook")]
        let converting = tls.converter();
        #[cfg(not(feature = "webhook"))]
        let converting = || false;
        health.add(
            Probe::Readiness,
            "cache-sync",
            check(move || {
                // A replica that is not ready has no Service endpoints, so the API server
                // could not call its conversion webhook, so the cache (which lists through
                // that conversion) could never sync: with a conversion webhook, readiness
                // does not wait on the cache.
                let converts = converting();
                let mut pending = probes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .filter(|(_, synced)| !synced())
                    .map(|(name, _)| name.clone())
                    .collect::<Vec<_>>();
                let (unsynced, failed) = (cache_probe.unsynced_count(), cache_probe.failed_count());
                // Read one after the other: a failure in between must not underflow.
                let starting = unsynced.saturating_sub(failed);
                if starting > 0 {
                    pending.push(format!("{starting} cache informer(s)"));
                }
                if failed > 0 {
                    pending.push(format!("{failed} failed cache informer(s) (see the log)"));
                }
                async move {
                    if pending.is_empty() || converts {
                        Ok(())
                    } else {
                        Err(format!("not synced: {}", pending.join(", ")))
                    }
                }
            }),
        );
        Ok(Manager {
            #[cfg(feature = "webhook")]
            tls,
            permissions: Mutex::default(),
            render_only: self.render_only,
            extra: Arc::new(self.extra),
            raise_fd_limit: self.raise_fd_limit,
            cache_sync_timeout: self.cache_sync_timeout,
            warm_standby: self.warm_standby,
            election,
            recorder: Recorder::new(self.client.clone(), reporter),
            client: self.client,
            cache,
            cache_token,
            health,
            synced,
            metrics,
            health_address: self.health_address,
            metrics_address: self.metrics_address,
            graceful_shutdown: self.graceful_shutdown,
            runnables: Mutex::new(Vec::new()),
            bound: Mutex::new(Bound::default()),
            started: std::sync::atomic::AtomicBool::new(false),
            stop_deadline: OnceLock::new(),
        })
    }
}

type SyncProbes = Arc<Mutex<Vec<(String, Box<dyn Fn() -> bool + Send + Sync>)>>>;

#[derive(Default)]
struct Bound {
    health: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
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
    permissions: Mutex<Rules>,
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
    graceful_shutdown: GracefulShutdown,
    runnables: Mutex<Vec<Box<dyn Runnable>>>,
    bound: Mutex<Bound>,
    started: std::sync::atomic::AtomicBool,
    /// The deadline of the stop once it began (`None` inside: no deadline), for what stops
    /// last (the servers).
    stop_deadline: OnceLock<Option<tokio::time::Instant>>,
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
    /// Starts building a manager on `client`.
    pub fn builder(client: Client) -> ManagerBuilder {
        ManagerBuilder {
            client,
            name: "rudder".to_owned(),
            health_address: Some(DEFAULT_HEALTH_ADDRESS),
            metrics_address: Some(DEFAULT_METRICS_ADDRESS),
            metrics_handle: None,
            graceful_shutdown: GracefulShutdown::After(DEFAULT_GRACEFUL_SHUTDOWN),
            cache: Box::new(|b| b),
            leader_election: None,
            warm_standby: true,
            cache_sync_timeout: DEFAULT_CACHE_SYNC_TIMEOUT,
            extra: Vec::new(),
            raise_fd_limit: true,
            client_metrics: true,
            api_host: None,
            #[cfg(feature = "webhook")]
            tls: crate::webhooks::Declared::default(),
            render_only: false,
        }
    }

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
        self.permissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .merge(&rules);
    }

    /// Every permission the operator needs: what was recorded with
    /// [`record_permissions`](Self::record_permissions), and the manager's own: leader
    /// election (get, create, update on its Lease's namespace's `leases`, and list, watch
    /// unless its watch is off), secure metrics
    /// (create `tokenreviews` and `subjectaccessreviews`), self-signed webhook certificates
    /// (get, list, watch, create, update on Secrets in their namespace; get, list, watch,
    /// update on the kinds of the configured injection targets).
    pub fn permissions(&self) -> Rules {
        let mut rules = self
            .permissions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        rules.merge(&crate::rbac::manager_rules(
            self.election.as_ref().map(LeaderElection::config),
            #[cfg(feature = "webhook")]
            self.tls.has_secure_metrics(),
            #[cfg(feature = "webhook")]
            self.tls.certificates_config(),
        ));
        rules
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
        self.bound
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .health
    }

    /// Where the metrics server listens, once started.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.bound
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .metrics
    }

    /// Adds a runnable, started by [`start`](Self::start).
    pub fn add(&self, runnable: impl Runnable) {
        self.runnables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(runnable));
    }

    /// Adds a controller (a leader-only runnable) and makes readiness wait for its sources.
    pub fn add_controller<R: Reconciler>(&self, controller: Controller<R>) {
        let probe = controller.clone();
        self.synced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((
                format!("controller {}", controller.name()),
                Box::new(move || probe.has_synced()),
            ));
        self.add(controller);
    }

    /// Runs everything until `cancel` fires or a runnable fails, then stops everything in
    /// reverse order and returns.
    pub async fn start(&self, cancel: CancellationToken) -> Result<(), Error> {
        if self.started.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::AlreadyStarted);
        }
        // Again at start: a handle given to the builder belongs to a recorder installed
        // elsewhere, whose descriptions only the recorder present now can take.
        crate::metrics::describe();
        let mut servers = Vec::new();
        let result = self.run(&cancel, &mut servers).await;
        // Servers last: probes keep answering while the rest stops, within the same
        // deadline as everything else (set when the stop began, or now if the run ended
        // before any runnable started).
        let deadline = self.stop_deadline();
        // The webhook server after the controllers (which may still write objects it is
        // called for), before the probes.
        #[cfg(feature = "webhook")]
        self.tls.stop(deadline).await;
        futures::future::join_all(servers.into_iter().map(|s| s.stop(deadline))).await;
        self.cache_token.cancel();
        self.cache.stop().await;
        result
    }

    async fn run(
        &self,
        cancel: &CancellationToken,
        servers: &mut Vec<ServerHandle>,
    ) -> Result<(), Error> {
        if self.raise_fd_limit {
            match rudder_server::raise_fd_limit() {
                Ok(limit) if limit.raised() => tracing::info!(
                    from = ?limit.before,
                    to = ?limit.after,
                    "raised the soft file descriptor limit to the hard limit"
                ),
                Ok(limit) => {
                    tracing::debug!(limit = ?limit.after, "file descriptor limit unchanged");
                }
                Err(error) => tracing::warn!(%error, "cannot raise the file descriptor limit"),
            }
        }
        if let Some(addr) = self.health_address {
            let routes = Routes::Health(self.health.clone());
            let server = listen("health probes", addr, routes).await?;
            self.bound
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .health = Some(server.local_addr());
            servers.push(server);
        }
        if let (Some(addr), Some(handle)) = (self.metrics_address, self.metrics.clone()) {
            let routes = Routes::Metrics {
                handle,
                extra: Arc::clone(&self.extra),
            };
            #[cfg(feature = "webhook")]
            let secure = self
                .tls
                .serve_metrics(addr, routes.clone(), &self.client)
                .await;
            #[cfg(not(feature = "webhook"))]
            let secure: Option<Result<ServerHandle, Error>> = None;
            let server = match secure {
                Some(served) => served?,
                None => listen("metrics", addr, routes).await?,
            };
            self.bound
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .metrics = Some(server.local_addr());
            servers.push(server);
        }

        // The webhook server before the cache: a conversion webhook is on the cache's own
        // path (its lists are converted by it), so waiting for the cache first would never
        // end.
        // Self-signed certificates before the webhook server: it must have one to serve.
        #[cfg(feature = "webhook")]
        self.tls.start(&self.client).await?;

        // Caches next: informers created so far (by controllers' sources) list first.
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            synced = self.cache.wait_for_sync(self.cache_sync_timeout) => {
                synced.map_err(Error::CacheSync)?;
            }
        }

        let runnables = std::mem::take(
            &mut *self
                .runnables
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let (leader, plain): (Vec<_>, Vec<_>) = runnables
            .into_iter()
            .partition(|r| r.needs_leader_election());
        let plain_stop = Shutdown::new();
        let leader_stop = Shutdown::new();
        let election_token = CancellationToken::new();
        let mut plain_set = Group::default();
        let mut leader_set = Group::default();
        for r in plain {
            plain_set.spawn(r, plain_stop.clone());
        }
        // With an election, every runnable that takes the gate gets it (so a leader whose
        // leadership runs out stops taking work at once, whatever else is going on); with
        // warm standby those start now, before this replica leads, and wait on it.
        let (warm, cold): (Vec<_>, Vec<_>) = match &self.election {
            Some(election) => {
                let gate = LeaderGate::new(election.validity());
                leader
                    .into_iter()
                    .map(|mut r| (r.set_leader_gate(gate.clone()) && self.warm_standby, r))
                    .partition(|(warm, _)| *warm)
            }
            None => (Vec::new(), leader.into_iter().map(|r| (false, r)).collect()),
        };
        if !warm.is_empty() {
            tracing::info!(
                runnables = warm.len(),
                "warm standby: starting controllers before leading; they reconcile once this replica leads"
            );
        }
        for (_, r) in warm {
            leader_set.spawn(r, leader_stop.clone());
        }
        let mut leader = Some(cold.into_iter().map(|(_, r)| r).collect::<Vec<_>>());
        let mut leadership: Option<Leadership> = None;
        let mut lost: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(std::future::pending());
        let acquiring = async {
            match &self.election {
                Some(election) => election.acquire(election_token.clone()).await.map(Some),
                None => Ok(None),
            }
        };
        let mut acquiring = std::pin::pin!(acquiring);
        let mut electing = true;

        let mut failure = None;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                acquired = &mut acquiring, if electing => {
                    electing = false;
                    match acquired {
                        Ok(held) => {
                            if let Some(held) = held {
                                let signal = held.lost();
                                lost = Box::pin(async move {
                                    signal.await;
                                });
                                leadership = Some(held);
                            }
                            for r in leader.take().into_iter().flatten() {
                                leader_set.spawn(r, leader_stop.clone());
                            }
                        }
                        Err(error) => {
                            failure = Some(Error::LeaderElection(error));
                            break;
                        }
                    }
                }
                () = &mut lost => {
                    tracing::error!("leader election lost: stopping leader-only runnables");
                    failure = Some(Error::LeadershipLost);
                    break;
                }
                Some(ended) = leader_set.join_next(), if !leader_set.is_empty() => {
                    if let Some(error) = ended {
                        failure = Some(error);
                        break;
                    }
                }
                Some(ended) = plain_set.join_next(), if !plain_set.is_empty() => {
                    if let Some(error) = ended {
                        failure = Some(error);
                        break;
                    }
                }
            }
        }
        // One deadline for the whole stop, handed down to every runnable.
        let now = tokio::time::Instant::now();
        let deadline = self.stop_deadline();
        tracing::info!(deadline_in = ?deadline.map(|d| d.saturating_duration_since(now)), "stopping runnables");
        let mut stuck = Vec::new();
        leader_stop.stop(deadline);
        stuck.extend(leader_set.drain(deadline, &mut failure).await);
        // Leadership is given up (released, if configured) only once nothing that needs it
        // runs. An election still in progress is let finish its request, so it can release
        // a Lease it just took.
        election_token.cancel();
        if electing {
            let _ = acquiring.await;
        }
        if let Some(held) = leadership
            && held.finished().await.is_err()
            && failure.is_none()
        {
            failure = Some(Error::LeadershipLost);
        }
        plain_stop.stop(deadline);
        stuck.extend(plain_set.drain(deadline, &mut failure).await);
        if let Some(error) = failure {
            return Err(error);
        }
        match self.graceful_shutdown {
            GracefulShutdown::After(timeout) if !stuck.is_empty() => Err(Error::ShutdownTimeout {
                timeout,
                left: stuck,
            }),
            GracefulShutdown::Immediately if !stuck.is_empty() => {
                tracing::info!(aborted = %stuck.join(", "), "stopped immediately, as configured");
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The deadline of this manager's stop, fixed the first time it is asked for (when the
    /// stop begins) from [`GracefulShutdown`]; `None`: no deadline.
    fn stop_deadline(&self) -> Option<tokio::time::Instant> {
        *self.stop_deadline.get_or_init(|| {
            let now = tokio::time::Instant::now();
            match self.graceful_shutdown {
                GracefulShutdown::After(d) => Some(now + d),
                GracefulShutdown::Immediately => Some(now),
                GracefulShutdown::Forever => None,
            }
        })
    }

    /// Runs until SIGTERM or SIGINT, then stops gracefully; a second signal exits the
    /// process at once (status 1). The handlers are in place before any runnable starts.
    pub async fn start_until_signal(&self) -> Result<(), Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let cancel = CancellationToken::new();
        let watcher = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some(tokio::spawn(signals(term, int, cancel.clone()))),
            _ => {
                tracing::warn!("cannot listen for signals; stop the manager with its token");
                None
            }
        };
        let result = self.start(cancel).await;
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        result
    }
}

/// Starts a server, naming it in the error if its address is unavailable.
async fn listen(
    what: &'static str,
    addr: SocketAddr,
    routes: Routes,
) -> Result<ServerHandle, Error> {
    serve(addr, routes)
        .await
        .map_err(|source| Error::Bind { what, addr, source })
}

/// Runnables started together, each task known by its name so that what is left at a
/// deadline, or what panicked, can be named.
#[derive(Default)]
struct Group {
    set: JoinSet<Result<(), BoxError>>,
    names: HashMap<tokio::task::Id, String>,
}

impl Group {
    fn spawn(&mut self, r: Box<dyn Runnable>, shutdown: Shutdown) {
        let name = r.name();
        tracing::info!(runnable = %name, "starting");
        let handle = self.set.spawn(r.start(shutdown));
        self.names.insert(handle.id(), name);
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Waits for the next runnable to end: `None` if none is running, `Some(None)` if it
    /// ended well, `Some(Some(error))` if the manager should stop with `error`.
    async fn join_next(&mut self) -> Option<Option<Error>> {
        let ended = self.set.join_next_with_id().await?;
        Some(self.ended_with(ended))
    }

    /// The error a finished runnable should stop the manager with, if any.
    fn ended_with(
        &mut self,
        ended: Result<(tokio::task::Id, Result<(), BoxError>), tokio::task::JoinError>,
    ) -> Option<Error> {
        let (id, result) = match ended {
            Ok((id, result)) => (id, Ok(result)),
            Err(join) => (join.id(), Err(join)),
        };
        let name = self
            .names
            .remove(&id)
            .unwrap_or_else(|| "a runnable".to_owned());
        match result {
            Ok(Ok(())) => None,
            Ok(Err(source)) => {
                tracing::error!(runnable = %name, error = %ErrorChain(&*source), "runnable failed; stopping the manager");
                Some(Error::Runnable { name, source })
            }
            Err(join) if join.is_panic() => {
                let message = panic_message(&*join.into_panic());
                tracing::error!(runnable = %name, panic = %message, "runnable panicked; stopping the manager");
                Some(Error::Panicked { name, message })
            }
            // Aborted: only the manager aborts, and it names what it aborted itself.
            Err(_) => None,
        }
    }

    /// Waits for every runnable to end until `deadline`; aborts and names what is left
    /// after it.
    async fn drain(
        &mut self,
        deadline: Option<tokio::time::Instant>,
        failure: &mut Option<Error>,
    ) -> Vec<String> {
        loop {
            let next = match deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, self.set.join_next_with_id()).await {
                        Ok(next) => next,
                        Err(_) => break,
                    }
                }
                None => self.set.join_next_with_id().await,
            };
            let Some(ended) = next else {
                return Vec::new();
            };
            if let Some(error) = self.ended_with(ended)
                && failure.is_none()
            {
                *failure = Some(error);
            }
        }
        let mut left: Vec<String> = self.names.drain().map(|(_, name)| name).collect();
        left.sort();
        tracing::warn!(
            left = %left.join(", "),
            "runnables still running at the graceful-shutdown deadline; aborting them"
        );
        self.set.abort_all();
        while self.set.join_next().await.is_some() {}
        left
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// Cancels on the first SIGTERM or SIGINT; exits on the second.
async fn signals(
    mut term: tokio::signal::unix::Signal,
    mut int: tokio::signal::unix::Signal,
    cancel: CancellationToken,
) {
    for n in 0..2 {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if n == 0 {
            tracing::info!("signal received: stopping gracefully (send another to exit at once)");
            cancel.cancel();
        } else {
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        }
    }
}
