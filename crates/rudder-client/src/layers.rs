//! Layers that observe a client's answers, composed once where a client is built.
//!
//! An [`ObserveLayer`] is a tower [`Layer`] over the HTTP service a [`kube::Client`] sends
//! through: each request's answer (its status, or [`Answer::None`] when none came: connection
//! refused, TLS, timeout) is handed to every [`Observer`] it holds, once the status line
//! arrives (a watch is observed once, when it opens). [`RequestCounter`] is the observer of
//! client-go's `rest_client_requests_total` ([`REQUESTS_TOTAL`]), labelled
//!
//! | label | value |
//! |---|---|
//! | `code` | the HTTP status (`"200"`, `"403"`, `"409"`, ...), or `"<error>"` when no answer came |
//! | `method` | the HTTP method (`"GET"`, `"POST"`, `"PUT"`, `"PATCH"`, `"DELETE"`) |
//! | `host` | the API server's host and port as its URL names them (`"10.96.0.1:443"`), as client-go labels it |
//!
//! and a fleet's member health is another. [`build`] makes a client from a [`kube::Config`]
//! with the layer inside kube's own stack (`ClientBuilder::with_layer`): every observer
//! behind the one request buffer the client has. [`instrument`] is for a client already
//! built (as a manager is given one): it wraps it, so each request crosses one more
//! `tower::Buffer` (a channel and a task wake-up) besides the observers' work (`cargo bench
//! -p rudder-client --bench layers -- --bench` measures both against a bare client).
//!
//! ```no_run
//! use rudder_client::layers::{self, ObserveLayer};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = kube::Config::infer().await?;
//! let host = layers::host_of(&config.cluster_url);
//! // One buffer: the counting is part of the client's own stack.
//! let client = layers::build(config, &ObserveLayer::new().count_requests(&host))?;
//! // Every request through `client` (and its clones) is now counted.
//! # drop(client);
//! # Ok(())
//! # }
//! ```

use std::borrow::Cow;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use tower_layer::Layer;
use tower_service::Service;

/// What a request got: the status of its answer, or none (connection refused, TLS failure,
/// timeout, a credential plugin that failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The answer's status line arrived with this status.
    Status(StatusCode),
    /// No answer came.
    None,
}

/// Sees every request's answer through an [`ObserveLayer`]. Called on the task that sent the
/// request, once per request, after the answer's status line (or the failure) and before the
/// caller gets it: keep it short and never block.
pub trait Observer: Send + Sync + 'static {
    /// One request with `method` got `answer`.
    fn observe(&self, method: &Method, answer: Answer);
}

/// The [`Layer`] that hands each answer to its [`Observer`]s, in the order they were added.
/// Cloning is cheap (the observers are shared).
#[derive(Clone, Default)]
pub struct ObserveLayer {
    observers: Arc<[Arc<dyn Observer>]>,
}

impl std::fmt::Debug for ObserveLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserveLayer")
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl ObserveLayer {
    /// A layer with no observer (it passes requests on unchanged).
    pub fn new() -> Self {
        Self::default()
    }

    /// This layer, with `observer` added after the ones it has.
    #[must_use]
    pub fn observe(self, observer: impl Observer) -> Self {
        self.observe_shared(Arc::new(observer))
    }

    /// [`observe`](Self::observe) for an observer shared with its owner (who reads what it
    /// recorded).
    #[must_use]
    pub fn observe_shared(self, observer: Arc<dyn Observer>) -> Self {
        let mut observers: Vec<Arc<dyn Observer>> = self.observers.iter().cloned().collect();
        observers.push(observer);
        Self {
            observers: observers.into(),
        }
    }

    /// This layer, counting every request in [`REQUESTS_TOTAL`] under `host`
    /// ([`RequestCounter`]).
    #[must_use]
    pub fn count_requests(self, host: &str) -> Self {
        self.observe(RequestCounter::new(host))
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            observers: Arc::clone(&self.observers),
        }
    }
}

/// The service an [`ObserveLayer`] makes: `S`, with each answer observed.
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    observers: Arc<[Arc<dyn Observer>]>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Observe<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observe")
            .field("inner", &self.inner)
            .field("observers", &self.observers.len())
            .finish()
    }
}

impl<S, B> Service<Request<Body>> for Observe<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<B>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let method = request.method().clone();
        let answer = self.inner.call(request);
        let observers = Arc::clone(&self.observers);
        Box::pin(async move {
            let answer = answer.await;
            let seen = match &answer {
                Ok(response) => Answer::Status(response.status()),
                Err(_) => Answer::None,
            };
            for observer in observers.iter() {
                observer.observe(&method, seen);
            }
            answer
        })
    }
}

/// A client for `config` with `layer` in its own stack, under its one request buffer (kube's
/// `ClientBuilder::try_from(config)`, `with_layer`, `build`).
///
/// # Errors
///
/// What [`kube::Client::try_from`] fails with (a TLS or proxy configuration it cannot use).
///
/// # Panics
///
/// Outside a Tokio runtime, as [`kube::Client::new`] does (its request buffer is a task).
pub fn build(config: kube::Config, layer: &ObserveLayer) -> Result<Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(layer)
        .build())
}

/// `client`, with every request it sends counted in [`REQUESTS_TOTAL`] under the `host`
/// label `host` (the API server's host and port, see [`host_of`]): for a client already
/// built; one made here from a `Config` is counted without the extra buffer this costs
/// ([`build`] with [`ObserveLayer::count_requests`]). Clones of the result share the
/// counting; `client` itself (and its other clones) is not counted.
///
/// The result keeps `client`'s default namespace and credential expiry, and answers with
/// the same errors (a transport failure is still the `kube::Error` it was). Each count is
/// made through the `metrics` recorder current when the answer arrives, so a client
/// instrumented before the recorder is installed is counted once it is.
///
/// # Panics
///
/// Outside a Tokio runtime, as [`kube::Client::new`] does (its request buffer is a task).
pub fn instrument(client: Client, host: &str) -> Client {
    let namespace = client.default_namespace().to_owned();
    let valid_until = *client.valid_until();
    let counting = ObserveLayer::new()
        .count_requests(host)
        .layer(Sending(client));
    Client::new(counting, namespace).with_valid_until(valid_until)
}

/// A built client as the service a layer wraps.
#[derive(Clone)]
struct Sending(Client);

impl Service<Request<Body>> for Sending {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The client buffers (and waits for readiness) on its own.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = self.0.clone();
        Box::pin(async move { client.send(request).await })
    }
}

/// The observer of [`REQUESTS_TOTAL`]: counts each request under its answer's code, its
/// method and the host it was made with.
#[derive(Clone, Debug)]
pub struct RequestCounter {
    host: metrics::SharedString,
}

impl RequestCounter {
    /// Counts under the `host` label `host` (see [`host_of`]).
    pub fn new(host: &str) -> Self {
        Self {
            host: metrics::SharedString::from(Arc::<str>::from(host)),
        }
    }
}

impl Observer for RequestCounter {
    fn observe(&self, method: &Method, answer: Answer) {
        let code = match answer {
            Answer::Status(status) => code_label(status),
            Answer::None => Cow::Borrowed(NO_ANSWER),
        };
        metrics::counter!(REQUESTS_TOTAL, "code" => code, "method" => method_label(method), "host" => self.host.clone())
            .increment(1);
    }
}

/// The counter of API requests, by `code`, `method` and `host` (client-go's name).
pub const REQUESTS_TOTAL: &str = "rest_client_requests_total";

/// The `code` label of a request that got no answer.
pub const NO_ANSWER: &str = "<error>";

/// Describes [`REQUESTS_TOTAL`] (its help text) to the recorder current at this call.
pub fn describe() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "Number of HTTP requests to the API server, partitioned by status code, method, and host."
    );
}

/// The `host` label for a server at `url`: its host and port as the URL writes them
/// (`https://10.96.0.1:443` gives `10.96.0.1:443`, `https://example.com` gives
/// `example.com`), as client-go takes it from the request's URL.
pub fn host_of(url: &http::Uri) -> String {
    match (url.host(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => String::new(),
    }
}

/// The host (see [`host_of`]) of the API server that [`kube::Config::infer`] would choose,
/// read as it reads it: the current context's cluster in the kubeconfig (`KUBECONFIG`, or
/// `~/.kube/config`), else the in-cluster service's `KUBERNETES_SERVICE_HOST` and
/// `KUBERNETES_SERVICE_PORT`. `None` when neither is there; a client made another way
/// should have its host given (rudder-manager's `ManagerBuilder::api_host`).
pub fn default_host() -> Option<String> {
    let from_kubeconfig = kube::config::Kubeconfig::read().ok().and_then(|config| {
        let context = config.current_context.as_deref()?;
        let cluster = config
            .contexts
            .iter()
            .find(|c| c.name == context)?
            .context
            .as_ref()?
            .cluster
            .clone();
        let server = config
            .clusters
            .iter()
            .find(|c| c.name == cluster)?
            .cluster
            .as_ref()?
            .server
            .as_deref()?
            .parse::<http::Uri>()
            .ok()?;
        Some(host_of(&server))
    });
    from_kubeconfig.or_else(|| {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").ok()?;
        // An IPv6 address is bracketed in a URL, so in its host label too.
        Some(if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        })
    })
}

/// A method as a label, without allocating for the ones Kubernetes uses.
fn method_label(method: &Method) -> Cow<'static, str> {
    Cow::Borrowed(match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => return Cow::Owned(method.as_str().to_owned()),
    })
}

/// A status as a label, without allocating for the ones the API server gives.
fn code_label(status: StatusCode) -> Cow<'static, str> {
    Cow::Borrowed(match status.as_u16() {
        200 => "200",
        201 => "201",
        202 => "202",
        204 => "204",
        304 => "304",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        405 => "405",
        409 => "409",
        410 => "410",
        413 => "413",
        415 => "415",
        422 => "422",
        429 => "429",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        other => return Cow::Owned(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_the_urls_host_and_port() {
        let host = |url: &str| host_of(&url.parse().unwrap_or_default());
        assert_eq!(host("https://10.96.0.1:443"), "10.96.0.1:443");
        assert_eq!(host("https://example.com/prefix"), "example.com");
        assert_eq!(host("https://[::1]:6443"), "[::1]:6443");
        assert_eq!(host("/relative"), "");
    }

    #[test]
    fn labels_are_the_numbers_and_names_on_the_wire() {
        for code in 100..600 {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
            assert_eq!(code_label(status), status.as_u16().to_string());
        }
        for method in [
            "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "PROPFIND",
        ] {
            let parsed = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
            assert_eq!(method_label(&parsed), method);
        }
    }
}
