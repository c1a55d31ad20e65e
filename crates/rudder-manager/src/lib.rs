//! The manager: what turns controllers into a process you deploy, in the shape of Go
//! controller-runtime's `manager` package.
//!
//! Start with [`Manager::builder`]: it holds the shared client and cache, runs the health
//! and metrics servers, and starts and stops runnables (controllers first of all) in order.
//!
//! ```no_run
//! use rudder_manager::Manager;
//! use rudder_core::runnable;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let manager = Manager::builder(client).name("my-operator").build()?;
//! // Controllers: manager.add_controller(Controller::builder(..).build()?), watching
//! // Kind sources made from manager.cache().
//! manager.add(runnable("heartbeat", false, |shutdown| async move {
//!     // Runs until the manager stops; then it has until the deadline to finish.
//!     let _deadline = shutdown.stopped().await;
//!     Ok(())
//! }));
//! manager.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Start and stop
//!
//! `start` brings up the probe server and the metrics server, waits for the cache's
//! informers to sync (within [`ManagerBuilder::cache_sync_timeout`]), then the runnables that need
//! no leadership, then (with [`ManagerBuilder::leader_election`] and
//! [warm standby](ManagerBuilder::warm_standby), the default) the controllers, whose workers
//! wait for leadership, then waits to be elected, then starts the other leader-only
//! runnables. It stops them in the reverse order, gives up
//! the Lease only once the leader-only runnables have stopped, and returns. If a runnable
//! fails, the manager stops the others and returns its error. [`Manager::start_until_signal`]
//! stops on SIGTERM or SIGINT; a second signal exits at once.
//!
//! Controllers (and other runnables) can be added to a running manager
//! ([`Manager::add_controller`], [`Manager::add`]: started at once, a leader-only one once this
//! replica leads) and removed from it ([`Manager::remove_controller`], [`Manager::remove`]:
//! stopped within the graceful-shutdown timeout while the others run on, its readiness probe
//! dropped). A removed controller's sources let go of the cache's informers they held, and an
//! informer nothing else holds or pinned stops and frees its memory.
//!
//! One deadline governs a stop: when it begins, the manager computes it from
//! [`GracefulShutdown`] (30 s by default) and hands it to every runnable through its
//! [`Shutdown`](rudder_core::Shutdown); no layer below runs a timer of its own. A controller cancels its in-flight
//! reconciles' contexts when that deadline is near (a quarter of the time left, at most 5 s,
//! before it), so a reconciler that watches its context returns in time and `start` returns
//! `Ok`. Runnables still running at the deadline are aborted and named in
//! [`Error::ShutdownTimeout`]; a runnable that panics is named in [`Error::Panicked`].
//!
//! # Probes and metrics
//!
//! `/healthz` and `/readyz` ([`health`]) have named checks, a per-check path, `?verbose`
//! and `?exclude=`; readiness includes `cache-sync`, which passes once the cache's informers
//! and every added controller's sources have synced. `/metrics` ([`metrics`]) serves every metric reported
//! through the `metrics` crate (work queues, controllers, leader election, and every API
//! request of the manager's client by status code in `rest_client_requests_total`:
//! [`rudder_client::layers`]) in Prometheus text format, plus `process_*` metrics;
//! [`ManagerBuilder::metrics_extra_handler`] adds more paths to that server.
//!
//! Both servers are tower services on [`rudder_server`], with its bounds: at most 512
//! connections at once, a 10 s limit to send a request's head, idle connections closed
//! after 90 s, 1 MiB request bodies, and accept errors (out of file descriptors, say) backed
//! off 5 ms doubling to 1 s instead of retried in a loop. At the cap a new connection is
//! still served: the one idle longest (no request in flight: a client that sent nothing, a
//! half-sent head, an idle keep-alive) is closed for it, and a request in flight is never
//! cut. So a flood of bad or idle clients, however many, cannot keep the kubelet's probes
//! from being answered: each probe costs the flood its oldest connection. Clients wait in
//! the kernel's listen backlog (the system's maximum, `net.core.somaxconn`, 4096 on a
//! current Linux, as with Go's `net/http`) only for their turn to be accepted, or while all
//! 512 connections have a request in flight. [`Manager::start`] also raises the process's
//! soft file-descriptor limit to its hard limit, as Go's runtime does
//! ([`ManagerBuilder::raise_fd_limit`] turns that off).
//!
//! # Secure metrics
//!
//! With [`ManagerBuilder::secure_metrics`], the metrics server serves HTTPS (a certificate
//! from files, reloaded when they change, from any [`rudder_webhook::CertificateStore`], or
//! the manager's self-signed one: [`SecureMetrics::self_signed`])
//! and lets a request through only if its bearer token is authenticated by the API server
//! (an `authentication.k8s.io/v1` TokenReview) and the user it names is authorized for the
//! request's verb on its path as a non-resource URL (an `authorization.k8s.io/v1`
//! SubjectAccessReview: `get` on `/metrics`), as Kubebuilder's scaffolded managers do
//! through controller-runtime's `WithAuthenticationAndAuthorization`. No token, or one not
//! authenticated, is `401` with `WWW-Authenticate: Bearer`; not allowed is `403`; a review
//! that fails (missing RBAC, the API server unreachable) is `500` and is not cached.
//! Decisions are cached ([`DEFAULT_ALLOWED_TTL`] 10 s when allowed, [`DEFAULT_DENIED_TTL`]
//! 2 s when refused, at most [`DEFAULT_CACHE_CAPACITY`] of each kind), and concurrent
//! requests needing the same review share one: a thousand scrapes in a burst cost one
//! TokenReview and one SubjectAccessReview. The operator then needs RBAC to create both
//! kinds of review; [`SecureMetrics`] lists it. The probe server stays plain HTTP.
//!
//! ```no_run
//! use rudder_manager::{Manager, SecureMetrics};
//!
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let manager = Manager::builder(client)
//!     .metrics_address(Some("0.0.0.0:8443".parse()?))
//!     .secure_metrics(SecureMetrics::files("/tmp/k8s-metrics-server/metrics-certs"))
//!     .build()?;
//! manager.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Webhook certificates
//!
//! [`ManagerBuilder::self_signed_webhook_certificates`] serves the webhook server with
//! certificates the operator makes itself ([`rudder_certs`]): kept in one Secret shared by
//! every replica, renewed and swapped in without a restart, the CA injected into the named
//! webhook configurations and CRDs. `start` loads them before the webhook server starts (an
//! unreadable Secret is [`Error::Certificates`]) and stops their tasks after it. The secure
//! metrics server can serve the same certificate ([`SecureMetrics::self_signed`]; put the
//! metrics Service's names in the certificate with `SelfSignedConfig::extra_names`).
//!
//! # Leader election
//!
//! [`leader_election`] (from `rudder-lease`, with
//! [`sharding`](rudder_lease::sharding)) elects one
//! leader among replicas with a `coordination.k8s.io/v1` Lease, compatible with client-go's (defaults: lease 15 s, renew deadline 10 s, retry 2 s).
//! If this replica loses the Lease, the manager stops its leader-only runnables and returns
//! [`Error::LeadershipLost`]: the process should then exit, to be restarted as a follower,
//! since another replica leads now.
//!
//! Controllers do not wait to be told: each gets a [`LeaderGate`](rudder_core::LeaderGate)
//! fed by the election's [`validity`](leader_election::LeaderElection::validity), and its
//! workers take a request only while the clock (monotonic) is before the send time of the
//! last successful acquire or renewal plus the lease duration, and leadership has not been
//! lost or given up. A leader whose renewals fail stops reconciling at its renew deadline; a
//! leader frozen past its lease (SIGSTOP, a long stall, a VM pause) starts no reconcile after
//! it resumes, before its renewing task has even run, and its manager then ends with
//! [`Error::LeadershipLost`]. Reconciles already running when the gate closes are not
//! interrupted.
//!
//! **Warm standby** ([`ManagerBuilder::warm_standby`], on by default): replicas that do not
//! lead start their controllers too, so their caches list and keep watching and their work
//! queues fill (one entry per key), while the workers wait behind the gate: nothing is
//! reconciled by a replica that does not lead. When one comes to lead, its workers start at
//! once on what was queued, with no cache to fill first. Every replica then holds the
//! controllers' caches; turn it off for memory-tight deployments (controllers then start
//! only on acquire, as before). Other leader-only runnables (closures made with
//! [`runnable`](rudder_core::runnable)`(.., true, ..)`) start only once the replica leads, either way.
//!
//! # Traces
//!
//! With the `otlp` feature and an OTLP endpoint configured (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! or `ManagerBuilder::otlp`), the manager exports its spans (reconciles, webhook requests,
//! API requests) to an OpenTelemetry collector, under the manager's name as the service name
//! and `ManagerBuilder::cluster_name` as `k8s.cluster.name`; with no endpoint there is no
//! exporter and no background work. A program with a subscriber of its own puts the
//! exporter's layer under it and hands the exporter over
//! (`ManagerBuilder::otlp_exporter`). The exporter is flushed and shut down last when the
//! manager stops, within its deadline. See the `otlp` module.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `webhook` | yes | the webhook server (rudder-webhook), self-signed webhook certificates (rudder-certs) and secure metrics: TLS on the server side, rustls on `ring`; without it the manager compiles no TLS stack |
//! | `profiling` | no | CPU profiles on demand in pprof's format on an opt-in address (module `profiling`, `ManagerBuilder::profiling_address`), with pprof-rs |
//! | `heap-profiling` | no | heap profiles too (`/debug/pprof/heap`), from jemalloc's sampling profiler: the binary makes `profiling::Jemalloc` its global allocator and starts with `_RJEM_MALLOC_CONF=prof:true`; builds jemalloc (C) (and `profiling`) |
//! | `otlp` | no | OpenTelemetry export over OTLP (HTTP/protobuf or gRPC, the `OTEL_*` variables; module `otlp`, `ManagerBuilder::otlp`, `ManagerBuilder::otlp_exporter`, `ManagerBuilder::cluster_name`), with the opentelemetry SDK and tracing-opentelemetry; the webhook server's spans take the API server's `traceparent` as their parent |

// Which feature brings an item, in docs.rs' rendering (`--cfg docsrs`, on nightly).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "webhook")]
mod authz;
pub mod health;
mod manager;
pub mod metrics;
#[cfg(feature = "otlp")]
#[cfg_attr(docsrs, doc(cfg(feature = "otlp")))]
pub mod otlp;
#[cfg(feature = "profiling")]
#[cfg_attr(docsrs, doc(cfg(feature = "profiling")))]
pub mod profiling;
pub mod rbac;
mod runnable;
mod server;
#[cfg(feature = "webhook")]
mod webhooks;

#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub use authz::{
    AuthStats, DEFAULT_ALLOWED_TTL, DEFAULT_CACHE_CAPACITY, DEFAULT_DENIED_TTL,
    DEFAULT_REVIEW_TIMEOUT, MAX_TOKEN_LENGTH, SecureMetrics,
};
pub use manager::{
    BuildError, DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_GRACEFUL_SHUTDOWN, DEFAULT_HEALTH_ADDRESS,
    DEFAULT_METRICS_ADDRESS, Error, ExtraHandler, GracefulShutdown, Manager, ManagerBuilder,
};
pub(crate) use rudder_lease::leader_election;
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub use server::SecureMetricsError;
