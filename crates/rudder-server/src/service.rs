//! The adapter between a tower service and hyper: body limit, in-flight tracking, and
//! errors turned into answers.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::Frame;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Bytes, Incoming};
use tower_service::Service;

use crate::activity::{Activity, InFlight};
use crate::body::Body;

/// The error type services and bodies are boxed into.
// The one definition is rudder-core's; this crate serves HTTP without Kubernetes and so
// does not depend on it (the two are the same type, so errors pass between them).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body as hyper writes it: the service's, boxed.
type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// A tower service the server can serve, with its future and body boxed. Implemented for
/// every service [`Server::serve`](crate::Server::serve) accepts; `B` is its body type.
pub(crate) trait HttpService<B>: Clone + Send + 'static {
    /// Waits for the service to be ready and calls it.
    fn call_boxed(
        &mut self,
        request: Request<Body>,
    ) -> BoxFuture<'static, Result<Response<ResponseBody>, BoxError>>;
}

impl<S, B> HttpService<B> for S
where
    S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    fn call_boxed(
        &mut self,
        request: Request<Body>,
    ) -> BoxFuture<'static, Result<Response<ResponseBody>, BoxError>> {
        // A clone per request, readied and called once: tower's contract for shared
        // services (the clone that was readied is the one called).
        let mut service = self.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .map_err(Into::into)?;
            let response = service.call(request).await.map_err(Into::into)?;
            Ok(response.map(|body| body.map_err(Into::into).boxed_unsync()))
        })
    }
}

/// hyper's view of a tower service on one connection.
pub(crate) struct Adapter<S, B> {
    service: S,
    activity: Arc<Activity>,
    max_body_size: Option<u64>,
    body_read_timeout: Duration,
    _body: std::marker::PhantomData<fn() -> B>,
}

impl<S, B> Adapter<S, B> {
    pub(crate) fn new(
        service: S,
        activity: Arc<Activity>,
        max_body_size: Option<u64>,
        body_read_timeout: Duration,
    ) -> Self {
        Self {
            service,
            activity,
            max_body_size,
            body_read_timeout,
            _body: std::marker::PhantomData,
        }
    }
}

impl<S: HttpService<B>, B> hyper::service::Service<Request<Incoming>> for Adapter<S, B> {
    type Response = Response<Guarded>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Guarded>, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.request();
        let limit = self.max_body_size;
        if let Some(limit) = limit
            && declared_length(&request).is_some_and(|length| length > limit)
        {
            return Box::pin(std::future::ready(Ok(too_large(limit, in_flight))));
        }
        let exceeded = Arc::new(AtomicBool::new(false));
        let timed_out = Arc::new(AtomicBool::new(false));
        let timeout = self.body_read_timeout;
        let request = request.map(|body| {
            Body::new(
                body,
                limit,
                Arc::clone(&exceeded),
                timeout,
                Arc::clone(&timed_out),
            )
        });
        let mut service = self.service.clone();
        Box::pin(async move {
            let answered = service.call_boxed(request).await;
            if let Some(limit) = limit
                && exceeded.load(Ordering::Relaxed)
            {
                return Ok(too_large(limit, in_flight));
            }
            if timed_out.load(Ordering::Relaxed) {
                tracing::debug!(?timeout, "request body not received in time; answering 408");
                return Ok(closing(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!("request body not received within {timeout:?}\n"),
                    in_flight,
                ));
            }
            Ok(match answered {
                Ok(response) => response.map(|body| Guarded {
                    body,
                    _in_flight: in_flight,
                }),
                Err(error) => {
                    tracing::warn!(%error, "service failed; answering 500");
                    plain(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal server error\n",
                        in_flight,
                    )
                }
            })
        })
    }
}

/// A response body that holds its request's [`InFlight`] until hyper has written it (or
/// dropped it with the connection).
pub(crate) struct Guarded {
    body: ResponseBody,
    _in_flight: InFlight,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The request's `Content-Length`, if it has a valid one.
fn declared_length<T>(request: &Request<T>) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// `413 Payload Too Large`; the connection is closed after it, since the rest of the body
/// is not read.
fn too_large(limit: u64, in_flight: InFlight) -> Response<Guarded> {
    closing(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("request body larger than {limit} bytes\n"),
        in_flight,
    )
}

/// A plain answer after which the connection is closed: the rest of the request's body is
/// not read.
fn closing(status: StatusCode, text: &str, in_flight: InFlight) -> Response<Guarded> {
    let mut response = plain(status, text, in_flight);
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn plain(status: StatusCode, text: &str, in_flight: InFlight) -> Response<Guarded> {
    let body = http_body_util::Full::new(Bytes::from(text.to_owned()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(Guarded {
        body,
        _in_flight: in_flight,
    });
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
