//! [`ManagerBuilder`]: what a manager is configured with, and [`build`](ManagerBuilder::build),
//! which makes the client, cache, health checks and election without starting anything.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kube::Client;
use kube_runtime::events::{Recorder, Reporter};
use metrics_exporter_prometheus::PrometheusHandle;
use rudder_cache::{Cache, CacheBuilder};
use tokio_util::sync::CancellationToken;

use super::error::BuildError;
use super::options::{
    DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_GRACEFUL_SHUTDOWN, DEFAULT_HEALTH_ADDRESS,
    DEFAULT_METRICS_ADDRESS, ExtraHandler, GracefulShutdown,
};
use super::{Bound, Manager, SyncProbes};
use crate::health::{HealthChecks, Probe, check};
use crate::leader_election::{LeaderElection, LeaderElectionConfig};
use rudder_core::sync::LockExt;
#[cfg(doc)]
use {super::Error, rudder_core::LeaderGate};

/// Builds a [`Manager`].
pub struct ManagerBuilder {
    client: Client,
    name: String,
    health_address: Option<SocketAddr>,
    metrics_address: Option<SocketAddr>,
    #[cfg(feature = "profiling")]
    profiling_address: Option<SocketAddr>,
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
    require_declared_reads: bool,
    /// What the manager exports spans with: a configuration, or an exporter made by the
    /// program (`None`: the `OTEL_*` variables alone).
    #[cfg(feature = "otlp")]
    otlp: Option<Result<crate::otlp::Otlp, crate::otlp::OtlpExporter>>,
    #[cfg(feature = "otlp")]
    cluster_name: Option<String>,
}

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
    /// The name events are reported under (default `rudder`); with the `otlp` feature, also
    /// the service name spans are exported under, unless `OTEL_SERVICE_NAME` or
    /// `OTEL_RESOURCE_ATTRIBUTES` names one.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How spans are exported over OTLP (default: [`Otlp::new`](crate::otlp::Otlp::new), the
    /// `OTEL_*` variables alone). At start, if an endpoint is configured, the manager builds
    /// the exporter and installs a subscriber with its layer as the global default (if the
    /// process has none; otherwise it logs that spans are not exported: see
    /// [`otlp_exporter`](Self::otlp_exporter)); it shuts the exporter down when it stops.
    #[cfg(feature = "otlp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
    pub fn otlp(mut self, otlp: crate::otlp::Otlp) -> Self {
        self.otlp = Some(Ok(otlp));
        self
    }

    /// An exporter whose [layer](crate::otlp::OtlpExporter::layer) the program put under its
    /// own subscriber: the manager installs nothing, and flushes and shuts the exporter down
    /// when it stops, within its stop's deadline.
    #[cfg(feature = "otlp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
    pub fn otlp_exporter(mut self, exporter: crate::otlp::OtlpExporter) -> Self {
        self.otlp = Some(Err(exporter));
        self
    }

    /// The name of the cluster this manager runs against, exported as the resource
    /// attribute `k8s.cluster.name` (the API gives no cluster a name of its own). It applies
    /// to the exporter the manager builds ([`otlp`](Self::otlp)), not to one it is handed.
    #[cfg(feature = "otlp")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
    pub fn cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = Some(name.into());
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

    /// Where to serve CPU profiles in pprof's format (`/debug/pprof/profile?seconds=N`,
    /// [`crate::profiling`]), or `None` (the default) for no profiling server:
    /// controller-runtime's `PprofBindAddress`. With secure metrics it is served as they are
    /// (HTTPS, behind TokenReview and SubjectAccessReview); without, plain HTTP to anyone
    /// who reaches it, so bind it to loopback. Port 0 picks a free port
    /// ([`Manager::profiling_address`] tells which).
    #[cfg(feature = "profiling")]
    #[cfg_attr(docsrs, doc(cfg(feature = "profiling")))]
    pub fn profiling_address(mut self, addr: Option<SocketAddr>) -> Self {
        self.profiling_address = addr;
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

    /// Whether a controller's typed client (the `rudder` facade's `Tools::client`) refuses
    /// a read from the cache of a type that no declaration covers (default `true`). Reads
    /// start informers on demand, at run time, after the RBAC was rendered from what the
    /// builders recorded; an informer of a type nothing declared has no rule in that RBAC,
    /// and the API server refuses it in a cluster (403) while the test cluster's admin reads
    /// it fine. With the check, such a read fails at once with an error naming the
    /// declaration to add (`reads::<K>()` on the controller, see
    /// [`rudder_client::reads::Undeclared`]), wherever the operator runs. Turn it
    /// off for an operator whose RBAC is written by hand rather than rendered
    /// ([`Manager::declared_reads`] is `None` then).
    pub fn require_declared_reads(mut self, require: bool) -> Self {
        self.require_declared_reads = require;
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
    /// [`runnable`](rudder_core::runnable) closures with `needs_leader_election`).
    pub fn warm_standby(mut self, on: bool) -> Self {
        self.warm_standby = on;
        self
    }

    /// The `host` label of `rest_client_requests_total`: the API server's host and port as
    /// its URL names them ([`host_of`](rudder_client::layers::host_of)).
    /// Default: [`default_host`](rudder_client::layers::default_host), the
    /// server `kube::Client::try_default` talks to (empty if there is none); set it when the
    /// client was made from another configuration.
    pub fn api_host(mut self, host: impl Into<String>) -> Self {
        self.api_host = Some(host.into());
        self
    }

    /// Whether to count every request of the manager's client in
    /// `rest_client_requests_total{code, method, host}` ([`rudder_client::layers`];
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
        self.count_api_requests();
        let health = HealthChecks::default();
        // Resolved before anything global (the metrics recorder) is installed.
        #[cfg(feature = "webhook")]
        let tls = self.tls.build(&health)?;
        let election = self
            .leader_election
            .map(|config| LeaderElection::new(self.client.clone(), config))
            .transpose()
            .map_err(BuildError::LeaderElectionConfig)?;
        let metrics = metrics_handle(self.metrics_address, self.metrics_handle)?;
        let cache_token = CancellationToken::new();
        let cache = (self.cache)(Cache::builder(self.client.clone())).build(&cache_token);
        let reporter = Reporter {
            controller: self.name.clone(),
            instance: std::env::var("HOSTNAME").ok(),
        };
        health.add(Probe::Liveness, "ping", check(|| async { Ok(()) }));
        let synced: SyncProbes = Arc::default();
        #[cfg(feature = "webhook")]
        let converting = tls.converter();
        #[cfg(not(feature = "webhook"))]
        let converting = || false;
        add_cache_sync_check(&health, &cache, &synced, converting);
        Ok(Manager {
            #[cfg(feature = "webhook")]
            tls,
            permissions: Arc::default(),
            require_declared_reads: self.require_declared_reads,
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
            #[cfg(feature = "profiling")]
            profiling_address: self.profiling_address,
            graceful_shutdown: self.graceful_shutdown,
            runnables: Mutex::new(Vec::new()),
            late: Mutex::new(None),
            bound: Mutex::new(Bound::default()),
            started: std::sync::atomic::AtomicBool::new(false),
            stop_deadline: OnceLock::new(),
            #[cfg(feature = "otlp")]
            otlp: match self.otlp {
                None => crate::otlp::Managed::configured(
                    crate::otlp::Otlp::new(),
                    &self.name,
                    self.cluster_name,
                ),
                Some(Ok(otlp)) => {
                    crate::otlp::Managed::configured(otlp, &self.name, self.cluster_name)
                }
                Some(Err(exporter)) => crate::otlp::Managed::given(exporter),
            },
        })
    }
}

impl ManagerBuilder {
    /// Wraps the client so that its API requests are counted (`rest_client_*`), if asked
    /// and possible (the wrapper needs a Tokio runtime).
    fn count_api_requests(&mut self) {
        if !self.client_metrics {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            let host = self
                .api_host
                .take()
                .or_else(rudder_client::layers::default_host)
                .unwrap_or_default();
            self.client = rudder_client::layers::instrument(self.client.clone(), &host);
        } else {
            tracing::warn!(
                "ManagerBuilder::build ran outside a Tokio runtime: API requests are not \
                 counted in rest_client_requests_total"
            );
        }
    }
}

/// The recorder's handle `/metrics` renders: the one given, or (when `/metrics` is served
/// and none was given) a Prometheus recorder installed now.
fn metrics_handle(
    address: Option<SocketAddr>,
    handle: Option<PrometheusHandle>,
) -> Result<Option<PrometheusHandle>, BuildError> {
    Ok(match (address, handle) {
        (None, handle) => handle,
        (Some(_), Some(handle)) => Some(handle),
        (Some(_), None) => Some(crate::metrics::prometheus().map_err(BuildError::Metrics)?),
    })
}

/// Adds the `cache-sync` readiness check: every registered controller's sources and every
/// cache informer synced, unless a conversion webhook is registered (`converting`).
fn add_cache_sync_check(
    health: &HealthChecks,
    cache: &Cache,
    synced: &SyncProbes,
    converting: impl Fn() -> bool + Send + Sync + 'static,
) {
    let probes = Arc::clone(synced);
    let cache_probe = cache.clone();
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
                .lock_unpoisoned()
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
}

impl Manager {
    /// Starts building a manager on `client`.
    pub fn builder(client: Client) -> ManagerBuilder {
        ManagerBuilder {
            client,
            name: "rudder".to_owned(),
            health_address: Some(DEFAULT_HEALTH_ADDRESS),
            metrics_address: Some(DEFAULT_METRICS_ADDRESS),
            #[cfg(feature = "profiling")]
            profiling_address: None,
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
            require_declared_reads: true,
            #[cfg(feature = "otlp")]
            otlp: None,
            #[cfg(feature = "otlp")]
            cluster_name: None,
        }
    }
}
