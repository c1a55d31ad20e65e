//! A small HTTP/1 server on hyper for the probe and metrics endpoints.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Answers a request: `(status, content type, body)`.
pub(crate) type Handler = Arc<
    dyn Fn(String, String) -> BoxFuture<'static, Option<(u16, &'static str, String)>> + Send + Sync,
>;

/// A listening server: its address, and the task serving it.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

/// Binds `addr` and serves `handler` until `cancel` fires; connections in progress are
/// closed when it does. Unknown paths get 404.
pub(crate) async fn serve(
    name: &'static str,
    addr: SocketAddr,
    handler: Handler,
    cancel: CancellationToken,
) -> std::io::Result<Server> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    tracing::info!(server = name, %addr, "serving");
    let task = tokio::spawn(async move {
        let connections = TaskTracker::new();
        loop {
            let accepted = tokio::select! {
                () = cancel.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let (stream, _) = match accepted {
                Ok(conn) => conn,
                Err(error) => {
                    tracing::warn!(server = name, %error, "accept failed");
                    continue;
                }
            };
            let handler = Arc::clone(&handler);
            let cancel = cancel.clone();
            connections.spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let handler = Arc::clone(&handler);
                    async move { Ok::<_, Infallible>(respond(&handler, &req).await) }
                });
                let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    () = cancel.cancelled() => {}
                    result = conn => {
                        if let Err(error) = result {
                            tracing::debug!(server = name, %error, "connection ended with an error");
                        }
                    }
                }
            });
        }
        connections.close();
        connections.wait().await;
    });
    Ok(Server { addr, task })
}

async fn respond(handler: &Handler, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let (status, content_type, body) = match handler(path, query).await {
        Some(answer) => answer,
        None => (404, "text/plain; charset=utf-8", "not found\n".to_owned()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}
