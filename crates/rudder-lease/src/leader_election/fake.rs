//! A fake API server holding one Lease, for the timed unit tests of the elector: it answers
//! after a chosen latency (on tokio's clock, so paused-time tests control it) or fails on
//! demand, which a real API server cannot be made to do at a chosen instant. Lists and
//! watches always fail.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use kube::client::Body;
use rudder_core::sync::LockExt;
use tokio::time::{Instant, sleep};

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) method: Method,
    /// A list or a watch (any request with a field selector or `watch=true`).
    pub(crate) list_or_watch: bool,
    pub(crate) at: Instant,
    /// The holder written, for a create or an update.
    pub(crate) wrote_holder: Option<String>,
    /// The whole second of the `renewTime` written (as client-go serialises it), for a create
    /// or an update.
    pub(crate) wrote_renew_second: Option<i64>,
    /// The elector's validity when the request was sent, if one is observed.
    pub(crate) validity: Option<Option<Instant>>,
}

#[derive(Default)]
struct State {
    lease: Option<Lease>,
    version: u64,
    latency: Duration,
    failing: bool,
    seen: Vec<Seen>,
    validity: Option<tokio::sync::watch::Receiver<Option<Instant>>>,
}

/// The fake server; clones share it.
#[derive(Clone, Default)]
pub(crate) struct FakeApi {
    state: Arc<Mutex<State>>,
}

impl FakeApi {
    /// A client talking to this fake.
    pub(crate) fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock_unpoisoned())
    }

    /// Sets how long each answer takes.
    pub(crate) fn set_latency(&self, latency: Duration) {
        self.with(|s| s.latency = latency);
    }

    /// Records the elector's validity with every request.
    pub(crate) fn observe(&self, validity: tokio::sync::watch::Receiver<Option<Instant>>) {
        self.with(|s| s.validity = Some(validity));
    }

    /// Makes every request fail with a 500 (or succeed again).
    pub(crate) fn set_failing(&self, failing: bool) {
        self.with(|s| s.failing = failing);
    }

    /// The requests seen so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.with(|s| s.seen.clone())
    }

    /// The Lease's holder now.
    pub(crate) fn holder(&self) -> Option<String> {
        self.with(|s| {
            s.lease
                .as_ref()
                .and_then(|l| l.spec.as_ref())
                .and_then(|s| s.holder_identity.clone())
        })
    }

    /// Writes the Lease as another candidate would.
    pub(crate) fn write_holder(&self, holder: &str, lease_duration_seconds: i32) {
        self.with(|s| {
            let mut lease = s.lease.clone().unwrap_or_default();
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(holder.to_owned());
            spec.lease_duration_seconds = Some(lease_duration_seconds);
            spec.renew_time = Some(super::record::now());
            s.version += 1;
            lease.metadata.resource_version = Some(s.version.to_string());
            s.lease = Some(lease);
        });
    }

    async fn answer(self, request: Request<Body>) -> Response<Body> {
        let method = request.method().clone();
        let list_or_watch = request
            .uri()
            .query()
            .is_some_and(|q| q.contains("watch=true") || q.contains("fieldSelector"));
        let at = Instant::now();
        let Ok(body) = request.into_body().collect_bytes().await else {
            return status(StatusCode::BAD_REQUEST, "BadRequest");
        };
        let written = serde_json::from_slice::<Lease>(&body)
            .ok()
            .and_then(|l| l.spec);
        let wrote_renew_second = written
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0.as_second());
        let wrote_holder = written.and_then(|s| s.holder_identity);
        let (latency, failing) = self.with(|s| {
            let validity = s.validity.as_ref().map(|v| *v.borrow());
            s.seen.push(Seen {
                method: method.clone(),
                list_or_watch,
                at,
                wrote_holder,
                wrote_renew_second,
                validity,
            });
            (s.latency, s.failing)
        });
        sleep(latency).await;
        // The elector's watch is tested on a real API server; here it only fails.
        if failing || list_or_watch {
            return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
        }
        self.with(|s| match method {
            Method::GET => match &s.lease {
                Some(lease) => json(StatusCode::OK, lease),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            Method::POST | Method::PUT => {
                let Ok(mut lease) = serde_json::from_slice::<Lease>(&body) else {
                    return status(StatusCode::BAD_REQUEST, "BadRequest");
                };
                let current = s
                    .lease
                    .as_ref()
                    .map(|l| l.metadata.resource_version.clone());
                match (&method, current) {
                    (&Method::POST, Some(_)) => {
                        return status(StatusCode::CONFLICT, "AlreadyExists");
                    }
                    (&Method::PUT, None) => return status(StatusCode::NOT_FOUND, "NotFound"),
                    (&Method::PUT, Some(version)) if version != lease.metadata.resource_version => {
                        return status(StatusCode::CONFLICT, "Conflict");
                    }
                    _ => {}
                }
                s.version += 1;
                lease.metadata.resource_version = Some(s.version.to_string());
                s.lease = Some(lease.clone());
                json(StatusCode::OK, &lease)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        })
    }
}

fn json(code: StatusCode, lease: &Lease) -> Response<Body> {
    let mut response = Response::new(Body::from(serde_json::to_vec(lease).unwrap_or_default()));
    *response.status_mut() = code;
    response
}

fn status(code: StatusCode, reason: &str) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": reason, "reason": reason, "code": code.as_u16(),
    });
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response
}

impl tower_service::Service<Request<Body>> for FakeApi {
    type Response = Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let fake = self.clone();
        Box::pin(async move { Ok(fake.answer(request).await) })
    }
}
