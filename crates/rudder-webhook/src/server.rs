//! [`WebhookServer`] (the registry of paths, usable before start) and
//! [`RunningWebhookServer`] (serving, readiness, stop).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rudder_core::sync::RwLockExt;
use rudder_server::{Body, BodyError, Server, ServerHandle, StopReport};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::certificate::CertificateStore;
use crate::certwatcher::{FileWatcher, LoadError};
use crate::conversion::{Conversions, KindConversion};
use crate::error::RegisterError;
use crate::metrics::{self, PathLabel, RequestMetrics};
use crate::options::{CertificateSource, Options};
use crate::paths::CONVERT_PATH;
use crate::tls::{Tls, handshake_with_self};
use crate::webhook::Webhook;

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// [`WebhookServer::start`] was already called on this server (or a clone of it).
    #[error("the webhook server was already started")]
    AlreadyStarted,
    /// The certificate files could not be loaded; the error names them. Retrying helps
    /// once they are there and valid.
    #[error("cannot load the webhook serving certificate")]
    Certificate(#[source] LoadError),
    /// The certificate store given holds no certificate yet.
    #[error("the webhook certificate store holds no certificate")]
    NoCertificate,
    /// The TLS configuration could not be built (no protocol version the provider
    /// supports); not retryable.
    #[error("cannot configure TLS")]
    Tls(#[source] rustls::Error),
    /// The address could not be bound.
    #[error("cannot listen for webhooks")]
    Bind(#[source] rudder_server::BindError),
}

/// The webhook server before it starts: a cheap, cloneable handle to a registry of
/// webhooks by path. Webhooks may be registered through any clone, before or after
/// [`start`](Self::start).
#[derive(Clone, Debug)]
pub struct WebhookServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    options: Options,
    routes: Routes,
    conversions: Conversions,
    started: AtomicBool,
}

type Routes = Arc<RwLock<HashMap<String, Route>>>;

/// A registered webhook, with its path as the label of its metrics.
#[derive(Clone, Debug)]
struct Route {
    webhook: Webhook,
    label: PathLabel,
}

impl Route {
    fn new(path: &str, webhook: Webhook) -> Self {
        Self {
            webhook,
            label: metrics::path_label(path),
        }
    }
}

impl WebhookServer {
    /// A server with no webhooks yet, set up by `options`. Nothing is read or bound until
    /// [`start`](Self::start).
    pub fn new(options: Options) -> Self {
        Self {
            inner: Arc::new(Inner {
                options,
                routes: Arc::default(),
                conversions: Conversions::default(),
                started: AtomicBool::new(false),
            }),
        }
    }

    /// The options the server was made with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// Serves `webhook` at `path`. A path taken, or one not starting with `/`, is an error.
    pub fn register(
        &self,
        path: impl Into<String>,
        webhook: impl Into<Webhook>,
    ) -> Result<(), RegisterError> {
        let path = path.into();
        if !path.starts_with('/') {
            return Err(RegisterError::InvalidPath { path });
        }
        let mut routes = self.routes_mut();
        if routes.contains_key(&path) {
            return Err(RegisterError::DuplicatePath { path });
        }
        let route = Route::new(&path, webhook.into());
        routes.insert(path, route);
        Ok(())
    }

    /// Registers a kind's conversions at [`CONVERT_PATH`], the one path that serves every
    /// kind. Fails unless every version in `served_versions` is the hub or one of its
    /// spokes, or when the kind already has conversions.
    pub fn register_conversion<H>(
        &self,
        conversion: KindConversion<H>,
        served_versions: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<(), RegisterError> {
        let erased = conversion.into_erased()?;
        let served: Vec<String> = served_versions.into_iter().map(Into::into).collect();
        erased.check_covers(&served)?;
        let mut routes = self.routes_mut();
        match routes.get(CONVERT_PATH) {
            Some(existing) if !existing.webhook.is_conversion() => {
                return Err(RegisterError::DuplicatePath {
                    path: CONVERT_PATH.to_owned(),
                });
            }
            Some(_) => {}
            None => {
                routes.insert(
                    CONVERT_PATH.to_owned(),
                    Route::new(
                        CONVERT_PATH,
                        Webhook::conversion(self.inner.conversions.clone()),
                    ),
                );
            }
        }
        self.inner.conversions.insert(erased)
    }

    /// Registers a kind's conversions with the versions `crd` serves (see
    /// [`register_conversion`](Self::register_conversion)).
    pub fn register_conversion_for_crd<H>(
        &self,
        conversion: KindConversion<H>,
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    ) -> Result<(), RegisterError> {
        let served = crd
            .spec
            .versions
            .iter()
            .filter(|version| version.served)
            .map(|version| version.name.clone());
        self.register_conversion(conversion, served)
    }

    /// Whether no webhook is registered (a manager need not start an empty server).
    pub fn is_empty(&self) -> bool {
        self.routes().is_empty()
    }

    /// The paths registered, sorted.
    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.routes().keys().cloned().collect();
        paths.sort();
        paths
    }

    /// Whether a conversion webhook is registered (readiness then must not wait on cache
    /// sync: the API server needs this server to list the kind).
    pub fn has_conversion(&self) -> bool {
        self.routes().contains_key(CONVERT_PATH)
    }

    /// Loads the certificate, binds, and serves. Callable once per server.
    ///
    /// A file source is read first, so a missing or bad pair fails the start with an error
    /// naming the files; it is then polled for changes every
    /// [`Options::cert_poll_period`] until the server stops.
    pub async fn start(&self) -> Result<RunningWebhookServer, StartError> {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return Err(StartError::AlreadyStarted);
        }
        // At start, not in `new`: the recorder is more likely installed by now, and a
        // description given to no recorder is lost.
        metrics::describe();
        metrics::register_counters();
        let options = &self.inner.options;
        let stop_watcher = CancellationToken::new();
        let (store, watcher) = match &options.certificate {
            CertificateSource::Store(store) => {
                if store.current().is_none() {
                    return Err(StartError::NoCertificate);
                }
                (store.clone(), None)
            }
            source @ CertificateSource::Files { .. } => {
                let (cert, key) = source.paths().unwrap_or_default();
                let store = CertificateStore::new();
                let watcher = FileWatcher::load(cert, key, store.clone())
                    .await
                    .map_err(StartError::Certificate)?;
                (store, Some(watcher))
            }
        };
        let tls = Tls::offering(&store, options.is_http2()).map_err(StartError::Tls)?;
        let server = Server::bind(options.server_options())
            .await
            .map_err(StartError::Bind)?;
        let addr = server.local_addr();
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: `RunningWebhookServer::stop` joins it"
        )]
        let watcher = watcher.map(|watcher| {
            tokio::spawn(watcher.run(options.cert_poll_period, stop_watcher.clone()))
        });
        let router = Router {
            routes: Arc::clone(&self.inner.routes),
        };
        let handle = server.serve_with(tls, router);
        Ok(RunningWebhookServer {
            handle,
            addr,
            store,
            watcher,
            _watcher_guard: stop_watcher.clone().drop_guard(),
            stop_watcher,
            probe_timeout: READY_PROBE_TIMEOUT,
        })
    }

    fn routes(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Route>> {
        self.inner.routes.read_unpoisoned()
    }

    fn routes_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Route>> {
        self.inner.routes.write_unpoisoned()
    }
}

/// How long [`RunningWebhookServer::check_ready`]'s handshake may take.
const READY_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A serving webhook server: [`check_ready`](Self::check_ready) for readiness,
/// [`stop`](Self::stop) to finish. Dropping it closes every connection at once.
#[derive(Debug)]
pub struct RunningWebhookServer {
    handle: ServerHandle,
    addr: SocketAddr,
    store: CertificateStore,
    watcher: Option<JoinHandle<()>>,
    stop_watcher: CancellationToken,
    /// Stops the certificate polling when the server is dropped without `stop`.
    _watcher_guard: DropGuard,
    probe_timeout: Duration,
}

impl RunningWebhookServer {
    /// The address served (with the port picked, when the options asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The certificate store served from (the file source's, or the one given).
    pub fn certificate_store(&self) -> &CertificateStore {
        &self.store
    }

    /// Ready when a certificate is loaded and a TLS connection to the server itself
    /// completes its handshake presenting that certificate. The error says what failed.
    pub async fn check_ready(&self) -> Result<(), String> {
        handshake_with_self(self.addr, &self.store, self.probe_timeout).await
    }

    /// Stops accepting, lets requests in flight finish until `deadline` (`None`: however
    /// long they take), closes what is left, and stops the certificate polling.
    pub async fn stop(self, deadline: Option<tokio::time::Instant>) -> StopReport {
        self.stop_watcher.cancel();
        let report = self.handle.stop(deadline).await;
        if let Some(watcher) = self.watcher {
            // The poll loop ends at once on cancellation; a panic in it has nothing to
            // hand on.
            let _ = watcher.await;
        }
        report
    }
}

/// The tower service rudder-server calls: routes by path, reads the body, checks the
/// content type, records the metrics.
#[derive(Clone)]
struct Router {
    routes: Routes,
}

impl tower_service::Service<Request<Body>> for Router {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        metrics::request_protocol(request.version());
        let route = self
            .routes
            .read_unpoisoned()
            .get(request.uri().path())
            .cloned();
        Box::pin(async move {
            let Some(Route { webhook, label }) = route else {
                return Ok(plain(StatusCode::NOT_FOUND, "no webhook at this path\n"));
            };
            let span = request_span(&request);
            let recorded = RequestMetrics::start(&label);
            let response = serve(webhook, request).instrument(span.clone()).await;
            let status = response.status().as_u16();
            span.record("http.response.status_code", status);
            if status >= 500 {
                span.record("otel.status_code", "ERROR");
            }
            recorded.finish(status);
            Ok(response)
        })
    }
}

async fn serve(webhook: Webhook, request: Request<Body>) -> Response<Full<Bytes>> {
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(BodyError::TooLarge { limit }) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body larger than {limit} bytes\n"),
            );
        }
        Err(BodyError::TimedOut { timeout }) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                &format!("request body not received within {timeout:?}\n"),
            );
        }
        Err(error) => {
            return plain(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {error}\n"),
            );
        }
    };
    if body.is_empty() {
        return plain(StatusCode::BAD_REQUEST, "request body is empty\n");
    }
    if !json {
        return plain(
            StatusCode::BAD_REQUEST,
            "content type must be application/json\n",
        );
    }
    match webhook.call(body).await {
        Ok(answer) => {
            let mut response = Response::new(Full::new(answer));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(rejection) => plain(rejection.status, &format!("{}\n", rejection.message)),
    }
}

/// The span of one webhook request (named `webhook`, a server span in OpenTelemetry's
/// terms), with the attributes OpenTelemetry's HTTP conventions name. With the `otlp`
/// feature, the W3C trace context the API server sends (`traceparent`, `tracestate`) is its
/// parent, so the request joins the trace of the API call that caused it.
fn request_span(request: &Request<Body>) -> tracing::Span {
    let span = tracing::info_span!(
        "webhook",
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %request.method(),
        url.path = request.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    #[cfg(feature = "otlp")]
    crate::trace_context::set_parent(&span, request.headers());
    span
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
