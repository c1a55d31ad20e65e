//! An OTLP trace receiver on loopback for the `otlp` tests: HTTP/protobuf (`POST
//! /v1/traces`) or gRPC (`TraceService/Export`), each request decoded with the protocol's
//! own message definitions (`opentelemetry-proto`) and kept, its spans flattened with their
//! resource's attributes for the tests to look through.
//!
//! Included with `#[path = "support/otlp_receiver.rs"] mod otlp_receiver;`.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the receiver owns its tasks, aborted when it is dropped"
)]
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as received: its identity, attributes and resource, values as text.
#[derive(Clone, Debug)]
pub(crate) struct ReceivedSpan {
    pub(crate) name: String,
    pub(crate) trace_id: Vec<u8>,
    pub(crate) span_id: Vec<u8>,
    pub(crate) parent_span_id: Vec<u8>,
    pub(crate) attributes: BTreeMap<String, String>,
    pub(crate) resource: BTreeMap<String, String>,
}

type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;
type Headers = Arc<Mutex<Vec<http::HeaderMap>>>;

/// A receiver serving on a loopback port until dropped.
pub(crate) struct Receiver {
    addr: SocketAddr,
    received: Received,
    /// The headers of each HTTP export.
    headers: Headers,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Receives OTLP over HTTP with protobuf bodies.
    pub(crate) async fn http() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Received::default();
        let headers = Headers::default();
        let task = tokio::spawn({
            let received = Arc::clone(&received);
            let headers = Arc::clone(&headers);
            async move {
                let mut connections = tokio::task::JoinSet::new();
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let received = Arc::clone(&received);
                    let headers = Arc::clone(&headers);
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let received = Arc::clone(&received);
                        headers.lock().unwrap().push(request.headers().clone());
                        async move { Ok::<_, Infallible>(export_http(&received, request).await) }
                    });
                    connections.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        Self {
            addr,
            received,
            headers,
            task,
        }
    }

    /// Receives OTLP over gRPC.
    pub(crate) async fn grpc() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Received::default();
        let service = TraceServiceServer::new(Collector {
            received: Arc::clone(&received),
        });
        let task = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Self {
            addr,
            received,
            headers: Headers::default(),
            task,
        }
    }

    /// The headers of each HTTP export received so far.
    pub(crate) fn headers(&self) -> Vec<http::HeaderMap> {
        self.headers.lock().unwrap().clone()
    }

    /// The URL of the HTTP receiver's traces path (an `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub(crate) fn http_endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// The URL of the gRPC receiver.
    pub(crate) fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub(crate) fn spans(&self) -> Vec<ReceivedSpan> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for request in received.iter() {
            for resource_spans in &request.resource_spans {
                let resource = resource_spans
                    .resource
                    .as_ref()
                    .map(|resource| text_map(&resource.attributes))
                    .unwrap_or_default();
                for scope_spans in &resource_spans.scope_spans {
                    for span in &scope_spans.spans {
                        spans.push(ReceivedSpan {
                            name: span.name.clone(),
                            trace_id: span.trace_id.clone(),
                            span_id: span.span_id.clone(),
                            parent_span_id: span.parent_span_id.clone(),
                            attributes: text_map(&span.attributes),
                            resource: resource.clone(),
                        });
                    }
                }
            }
        }
        spans
    }
}

/// Decodes a `POST /v1/traces` body and answers as a collector does.
async fn export_http(received: &Received, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let wrong = |status: StatusCode| {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = status;
        response
    };
    if request.uri().path() != "/v1/traces" {
        return wrong(StatusCode::NOT_FOUND);
    }
    let protobuf = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value == "application/x-protobuf");
    if !protobuf {
        return wrong(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let Ok(body) = request.into_body().collect().await else {
        return wrong(StatusCode::BAD_REQUEST);
    };
    let Ok(decoded) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return wrong(StatusCode::BAD_REQUEST);
    };
    received.lock().unwrap().push(decoded);
    let mut response = Response::new(Full::new(Bytes::from(
        ExportTraceServiceResponse::default().encode_to_vec(),
    )));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

/// The gRPC trace service.
struct Collector {
    received: Received,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Attributes as text: strings as they are, other values as their `Debug` form.
fn text_map(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// How many of this process's threads are the SDK's batch processor
/// (`OpenTelemetry.Traces.BatchProcessor`, which Linux shortens to 15 bytes).
pub(crate) fn exporter_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == "OpenTelemetry.T")
        .count()
}

/// Waits (5 s at most) until no batch processor's thread is left: a joined thread's entry
/// in `/proc` may outlive the join by a moment, one that was not joined stays.
pub(crate) async fn no_exporter_thread() {
    rudder_envtest::poll::eventually(
        "the batch processor's thread joined",
        std::time::Duration::from_secs(5),
        async || (exporter_threads() == 0).then_some(()),
    )
    .await;
}
