//! The probe and metrics servers: their routes as one tower service, served by rudder-server
//! with its default limits; the metrics server optionally over HTTPS behind the
//! authentication and authorization filter ([`crate::authz`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Bytes;
use metrics_exporter_prometheus::PrometheusHandle;
use rudder_server::{BindError, Body, Options, Server, ServerHandle};

use rudder_server::StopReport;
#[cfg(feature = "webhook")]
use rudder_webhook::{CertificateStore, FileWatcher, Tls};
use tokio_util::sync::{CancellationToken, DropGuard};

#[cfg(feature = "webhook")]
use crate::authz::{MetricsCertificate, SecureMetrics};
use crate::health::HealthChecks;
use crate::manager::ExtraHandler;

/// Why the secure metrics server could not start; nothing else was started after it.
#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecureMetricsError {
    /// The certificate files are missing or do not make a serving certificate. Retrying
    /// helps once they are in place.
    #[error("cannot load the metrics server's certificate")]
    Certificate(#[source] rudder_webhook::LoadError),
    /// rustls refused the TLS configuration (does not happen with the `ring` provider).
    #[error("cannot configure TLS")]
    Tls(#[source] rustls::Error),
    /// The address is in use or not permitted.
    #[error("cannot listen")]
    Bind(#[source] std::io::Error),
    /// [`SecureMetrics::self_signed`] without the manager's self-signed certificates (the
    /// manager's [`build`](crate::ManagerBuilder::build) refuses this first).
    #[error("secure metrics from self-signed certificates, but none are configured")]
    NoSelfSignedSource,
}

/// The routes of one of the manager's servers.
#[derive(Clone)]
pub(crate) enum Routes {
    /// `/healthz` and `/readyz`, with their per-check paths.
    Health(HealthChecks),
    /// `/metrics` and the extra handlers.
    Metrics {
        handle: PrometheusHandle,
        extra: Arc<Vec<(String, ExtraHandler)>>,
    },
    /// `/debug/pprof/`: CPU profiles on demand.
    #[cfg(feature = "profiling")]
    Profiles(crate::profiling::Profiler),
}

/// A server the manager runs, with the certificate watcher it owns (secure metrics from
/// files): [`stop`](Self::stop) stops the server, then the watcher, and joins it. Dropped
/// without `stop`, both end at once.
pub(crate) struct Served {
    handle: ServerHandle,
    /// Tasks that run beside the server (a certificate file watcher, the metrics registry's
    /// upkeep), stopped and joined after it.
    companions: Vec<Companion>,
}

/// A task running beside a server, and the guard that stops it.
struct Companion {
    stop: DropGuard,
    task: tokio::task::JoinHandle<()>,
}

/// How often the metrics registry's histograms are drained when nothing scrapes them: the
/// recorder keeps every sample until a render or an upkeep takes it, so a manager nobody
/// scrapes would grow by each observation.
const UPKEEP_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

impl Served {
    fn new(handle: ServerHandle) -> Self {
        Self {
            handle,
            companions: Vec::new(),
        }
    }

    /// Runs `task` beside the server until it stops; `task` ends when its token fires.
    fn with_companion<F>(mut self, task: impl FnOnce(CancellationToken) -> F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: Served::stop joins it after the server stops"
        )]
        let task = tokio::spawn(task(stop.clone()));
        self.companions.push(Companion {
            stop: stop.drop_guard(),
            task,
        });
        self
    }

    /// Drains `handle`'s histograms every [`UPKEEP_PERIOD`] while the server runs.
    pub(crate) fn with_upkeep(self, handle: PrometheusHandle) -> Self {
        self.with_companion(move |stop| async move {
            let mut ticks = tokio::time::interval(UPKEEP_PERIOD);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = ticks.tick() => handle.run_upkeep(),
                }
            }
        })
    }

    /// The address served.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.handle.local_addr()
    }

    /// Stops the server (see [`ServerHandle::stop`]), then the tasks beside it, which end at
    /// once on their signal, and joins them.
    pub(crate) async fn stop(self, deadline: Option<tokio::time::Instant>) -> StopReport {
        let report = self.handle.stop(deadline).await;
        for Companion { stop, task } in self.companions {
            drop(stop);
            // A panic in the task's loop has nothing to hand on.
            let _ = task.await;
        }
        report
    }
}

/// Binds `addr` and serves `routes` with rudder-server's default limits.
pub(crate) async fn serve(addr: SocketAddr, routes: Routes) -> std::io::Result<Served> {
    let server = Server::bind(Options::new(addr))
        .await
        .map_err(|error| match error {
            BindError::Bind { source, .. } => source,
            other => std::io::Error::other(other),
        })?;
    Ok(Served::new(server.serve(routes)))
}

/// Binds `addr` and serves `routes` over HTTPS with `secure`'s certificate, behind its
/// filter (reviews made with `client`).
///
/// A file source's watcher runs while the server does, owned by the [`Served`] returned:
/// stopped and joined after the server.
#[cfg(feature = "webhook")]
pub(crate) async fn serve_secure(
    addr: SocketAddr,
    routes: Routes,
    secure: &SecureMetrics,
    client: kube::Client,
) -> Result<Served, SecureMetricsError> {
    let (store, watcher) = match &secure.certificate {
        MetricsCertificate::Store(store) => {
            if store.current().is_none() {
                tracing::warn!(%addr, "the metrics certificate store holds no certificate yet; TLS handshakes fail until it does");
            }
            (store.clone(), None)
        }
        // Filled by the manager's self-signed source once it loads, after this binds.
        MetricsCertificate::SelfSignedStore(store) => (store.clone(), None),
        MetricsCertificate::SelfSigned => return Err(SecureMetricsError::NoSelfSignedSource),
        MetricsCertificate::Files { cert, key } => {
            let store = CertificateStore::new();
            let watcher = FileWatcher::load(cert.clone(), key.clone(), store.clone())
                .await
                .map_err(SecureMetricsError::Certificate)?;
            (store, Some(watcher))
        }
    };
    let tls = Tls::new(&store).map_err(SecureMetricsError::Tls)?;
    let server = Server::bind(Options::new(addr))
        .await
        .map_err(|error| match error {
            BindError::Bind { source, .. } => SecureMetricsError::Bind(source),
            other => SecureMetricsError::Bind(std::io::Error::other(other)),
        })?;
    let served = Served::new(server.serve_with(tls, secure.filter(client, routes)));
    Ok(match watcher {
        Some(watcher) => {
            let period = secure.cert_poll_period;
            served.with_companion(move |stop| watcher.run(period, stop))
        }
        None => served,
    })
}

impl tower_service::Service<Request<Body>> for Routes {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let routes = self.clone();
        Box::pin(async move { Ok(routes.answer(request).await) })
    }
}

impl Routes {
    async fn answer(self, request: Request<Body>) -> Response<Full<Bytes>> {
        let path = request.uri().path();
        match self {
            Routes::Health(health) => {
                let query = request.uri().query().unwrap_or_default();
                match health.answer(path, query).await {
                    Some((status, body)) => text(status, "text/plain; charset=utf-8", body),
                    None => not_found(),
                }
            }
            Routes::Metrics { handle, extra } => {
                if path == "/metrics" {
                    return text(
                        200,
                        "text/plain; version=0.0.4; charset=utf-8",
                        crate::metrics::render(&handle),
                    );
                }
                let handler = extra
                    .iter()
                    .find(|(p, _)| p == path)
                    .map(|(_, h)| Arc::clone(h));
                match handler {
                    Some(handler) => handler(request).await,
                    None => not_found(),
                }
            }
            #[cfg(feature = "profiling")]
            Routes::Profiles(profiler) => profile(&profiler, &request).await,
        }
    }
}

/// Answers a profiling request (see [`crate::profiling`]).
#[cfg(feature = "profiling")]
async fn profile(
    profiler: &crate::profiling::Profiler,
    request: &Request<Body>,
) -> Response<Full<Bytes>> {
    use crate::profiling::{INDEX, seconds};
    const PLAIN: &str = "text/plain; charset=utf-8";
    match request.uri().path() {
        "/debug/pprof" | "/debug/pprof/" => text(200, PLAIN, INDEX.to_owned()),
        "/debug/pprof/profile" => {
            if request.method() != http::Method::GET {
                return text(405, PLAIN, "only GET\n".to_owned());
            }
            let answer = match seconds(request.uri().query()) {
                Ok(seconds) => profiler.cpu(seconds).await,
                Err(error) => Err(error),
            };
            profile_answer(answer, "profile", "attachment; filename=\"profile\"")
        }
        #[cfg(feature = "heap-profiling")]
        "/debug/pprof/heap" => {
            if request.method() != http::Method::GET {
                return text(405, PLAIN, "only GET\n".to_owned());
            }
            profile_answer(
                profiler.heap().await,
                "heap",
                "attachment; filename=\"heap\"",
            )
        }
        _ => not_found(),
    }
}

/// A profile (`name`, for the log) as an attachment (its `Content-Disposition`), or why
/// there is none.
#[cfg(feature = "profiling")]
fn profile_answer(
    answer: Result<Vec<u8>, crate::profiling::ProfileError>,
    name: &'static str,
    disposition: &'static str,
) -> Response<Full<Bytes>> {
    use crate::profiling::ProfileError;
    match answer {
        Ok(bytes) => {
            let mut response = Response::new(Full::new(Bytes::from(bytes)));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static(disposition),
            );
            response
        }
        Err(error) => {
            let status = match &error {
                ProfileError::Busy => 409,
                ProfileError::Seconds(_) => 400,
                ProfileError::Profiler(_) => {
                    tracing::warn!(%error, profile = name, "a profile failed");
                    500
                }
                #[cfg(feature = "heap-profiling")]
                ProfileError::HeapUnavailable(_) => {
                    tracing::warn!(%error, "a heap profile was asked for and cannot be taken");
                    501
                }
            };
            text(status, "text/plain; charset=utf-8", format!("{error}\n"))
        }
    }
}

fn not_found() -> Response<Full<Bytes>> {
    text(404, "text/plain; charset=utf-8", "not found\n".to_owned())
}

fn text(status: u16, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
