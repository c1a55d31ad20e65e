//! OpenTelemetry export (`otlp` feature) under the program's own subscriber, over gRPC: an
//! admission request that carries a W3C `traceparent` (as the API server sends when its
//! tracing is configured) is served in a `webhook` span of that trace, a child of the span
//! the header names, and the span reaches a gRPC receiver on loopback (decoded with the
//! protocol's own messages) with the service name and cluster of the exporter. The manager,
//! handed the exporter, shuts it down when it stops.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/otlp_receiver.rs"]
mod otlp_receiver;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use otlp_receiver::Receiver;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;
use rudder_manager::otlp::{Otlp, Protocol};
use rudder_webhook::admission::AdmissionHandler;
use rudder_webhook::{Options, Webhook};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tracing_subscriber::layer::SubscriberExt;

/// The trace and the parent span the test's `traceparent` names.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

struct Allow;

impl AdmissionHandler for Allow {
    async fn handle(&self, request: AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        AdmissionResponse::from(&request)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_span_joins_the_trace_of_the_traceparent_sent() {
    let receiver = Receiver::grpc().await;
    let exporter = Otlp::new()
        .protocol(Protocol::Grpc)
        .endpoint(receiver.grpc_endpoint())
        .service_name("webhook-operator")
        .cluster_name("cluster-a")
        .build()
        .unwrap()
        .expect("an endpoint is configured");
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(exporter.layer()))
        .unwrap();

    let dir = std::env::temp_dir().join(format!("rudder-otlp-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("tls.crt"), certified.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), certified.signing_key.serialize_pem()).unwrap();
    let ca = certified.cert.der().clone();

    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("otlp-webhook").await.unwrap();
    let manager = fixtures::manager_builder(ns.client(), ns.name())
        .webhook_options(
            Options::new()
                .bind_address("127.0.0.1:0".parse().unwrap())
                .cert_dir(&dir),
        )
        .otlp_exporter(exporter)
        .build()
        .unwrap();
    manager
        .webhook_server()
        .register("/allow", Webhook::admission(Allow))
        .unwrap();
    let manager = Arc::new(manager);
    let (stop, task) = fixtures::start_shared(&manager);
    let addr = eventually("the webhook server", Duration::from_secs(30), async || {
        manager.webhook_address().await
    })
    .await;

    let status = post_review(addr, &ca, &format!("00-{TRACE_ID}-{PARENT_ID}-01")).await;
    assert_eq!(status, 200);
    // A header that does not parse leaves the span a root and the review answered.
    assert_eq!(post_review(addr, &ca, "00-not-a-trace-01").await, 200);

    let trace_id = unhex(TRACE_ID);
    let parent = unhex(PARENT_ID);
    let span = eventually(
        "the webhook span at the receiver",
        Duration::from_secs(60),
        async || {
            receiver
                .spans()
                .into_iter()
                .find(|span| span.name == "webhook" && span.trace_id == trace_id)
        },
    )
    .await;
    assert_eq!(span.parent_span_id, parent, "{span:?}");
    assert_eq!(span.attributes["url.path"], "/allow", "{span:?}");
    assert_eq!(
        span.attributes["http.response.status_code"], "200",
        "{span:?}"
    );
    assert_eq!(
        span.resource["service.name"], "webhook-operator",
        "{span:?}"
    );
    assert_eq!(span.resource["k8s.cluster.name"], "cluster-a", "{span:?}");

    assert_eq!(otlp_receiver::exporter_threads(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
    otlp_receiver::no_exporter_thread().await;
    // The second review's span, a root of a trace of its own, was flushed by the stop.
    let roots = receiver
        .spans()
        .into_iter()
        .filter(|span| span.name == "webhook" && span.trace_id != trace_id)
        .collect::<Vec<_>>();
    assert_eq!(roots.len(), 1, "{roots:?}");
    assert!(roots[0].parent_span_id.is_empty(), "{roots:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// POSTs an admission review to `/allow` with `traceparent`: the answer's status.
async fn post_review(
    addr: std::net::SocketAddr,
    ca: &CertificateDer<'static>,
    traceparent: &str,
) -> u16 {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(rudder_envtest::tls::client_config([ca.clone()]).unwrap())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7c2f7e4e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "traced",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "tester"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "traced"}},
            "dryRun": false,
        }
    });
    let request = http::Request::post("https://localhost/allow")
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("traceparent", traceparent)
        .body(Full::new(Bytes::from(serde_json::to_vec(&review).unwrap())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    drop(sender);
    driver.await.unwrap().unwrap();
    status
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}
