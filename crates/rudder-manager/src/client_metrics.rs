//! Every request a client sends to the API server, counted by its answer: client-go's
//! `rest_client_requests_total`, which controller-runtime exports for every operator.
//!
//! [`instrument`] wraps a [`kube::Client`] in a layer that counts each request, when its
//! answer's status line arrives (a watch is counted once, when it opens), under
//! [`REQUESTS_TOTAL`] with the labels
//!
//! | label | value |
//! |---|---|
//! | `code` | the HTTP status (`"200"`, `"403"`, `"409"`, ...), or `"<error>"` when no answer came (connection refused, TLS, timeout) |
//! | `method` | the HTTP method (`"GET"`, `"POST"`, `"PUT"`, `"PATCH"`, `"DELETE"`) |
//! | `host` | the API server's host and port as its URL names them (`"10.96.0.1:443"`), as client-go labels it |
//!
//! A [`kube::Client`] does not say which server it talks to, so the host is given to
//! [`instrument`]; the manager uses [`ManagerBuilder::api_host`], or by default
//! [`default_host`] (the server `kube::Config::infer` would pick). The manager
//! instruments the client it is given ([`ManagerBuilder::client_metrics`]), so its cache,
//! controllers, event recorder, leader election, certificate source and the typed client
//! that reconcilers get are all counted; an operator alerts on
//! `rate(rest_client_requests_total{code="403"}[5m]) > 0` to learn that its RBAC is short.
//!
//! The layer wraps a client already built, so each request crosses one more `tower::Buffer`
//! (a channel and a task wake-up) besides the counter's update: about 5-7% of a sequential
//! GET on a loopback API server, 12-16% at 16 at a time (`cargo bench -p rudder-manager
//! --bench client_metrics`), less against a server across a network.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = kube::Config::infer().await?;
//! let host = rudder_manager::client_metrics::host_of(&config.cluster_url);
//! let client = rudder_manager::client_metrics::instrument(kube::Client::try_from(config)?, &host);
//! // Every request through `client` (and its clones) is now counted.
//! # Ok(())
//! # }
//! ```
//!
//! [`ManagerBuilder::client_metrics`]: crate::ManagerBuilder::client_metrics
//! [`ManagerBuilder::api_host`]: crate::ManagerBuilder::api_host

use std::borrow::Cow;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;

/// The counter of API requests, by `code`, `method` and `host` (client-go's name).
pub const REQUESTS_TOTAL: &str = "rest_client_requests_total";

/// The `code` label of a request that got no answer.
pub const NO_ANSWER: &str = "<error>";

/// `client`, with every request it sends counted in [`REQUESTS_TOTAL`] under the `host`
/// label `host` (the API server's host and port, see [`host_of`]). Clones of the result
/// share the counting; `client` itself (and its other clones) is not counted.
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
    let counting = Counting {
        inner: client,
        host: metrics::SharedString::from(Arc::<str>::from(host)),
    };
    Client::new(counting, namespace).with_valid_until(valid_until)
}

/// Describes [`REQUESTS_TOTAL`] (its help text) to the recorder current at this call.
pub(crate) fn describe() {
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
/// should have its host given ([`ManagerBuilder::api_host`](crate::ManagerBuilder::api_host)).
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

/// The layer [`instrument`] puts in front of a client.
#[derive(Clone)]
struct Counting {
    inner: Client,
    host: metrics::SharedString,
}

impl tower_service::Service<Request<Body>> for Counting {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner client buffers (and waits for readiness) on its own.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let method = method_label(request.method());
        let host = self.host.clone();
        Box::pin(async move {
            let answer = inner.send(request).await;
            let code = match &answer {
                Ok(response) => code_label(response.status()),
                Err(_) => Cow::Borrowed(NO_ANSWER),
            };
            metrics::counter!(REQUESTS_TOTAL, "code" => code, "method" => method, "host" => host)
                .increment(1);
            answer
        })
    }
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
