//! The probe and metrics servers: their routes as one tower service, served by rudder-server
//! with its default limits.

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

use crate::health::HealthChecks;
use crate::manager::ExtraHandler;

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
}

/// Binds `addr` and serves `routes` with rudder-server's default limits.
pub(crate) async fn serve(addr: SocketAddr, routes: Routes) -> std::io::Result<ServerHandle> {
    let server = Server::bind(Options::new(addr))
        .await
        .map_err(|error| match error {
            BindError::Bind { source, .. } => source,
            other => std::io::Error::other(other),
        })?;
    Ok(server.serve(routes))
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
