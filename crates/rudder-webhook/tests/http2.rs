//! HTTP/2 is opt-in: offered by ALPN and served, streams multiplexed on one connection, when
//! the options ask for it; HTTP/1.1 only otherwise. Idle HTTP/2 connections are closed and a
//! stop lets a request in flight finish.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![cfg(feature = "http2")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Client, review, serve, tls_config};
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use rudder_webhook::admission::{Defaulter, Denial, Warnings};
use rudder_webhook::{Webhook, WebhookServer, mutate_path};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const BY_PROTOCOL: &str = rudder_webhook::metrics::REQUESTS_BY_PROTOCOL_TOTAL;

/// Set when a review of the ConfigMap named `slow` reaches the defaulter.
static SLOW_STARTED: AtomicBool = AtomicBool::new(false);

/// Adds a label; waits first when the ConfigMap is named `slow`.
struct Label;

impl Defaulter<ConfigMap> for Label {
    async fn default(
        &self,
        config_map: &mut ConfigMap,
        _request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        if config_map.metadata.name.as_deref() == Some("slow") {
            SLOW_STARTED.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        config_map
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("via".to_owned(), "h2".to_owned());
        Ok(Vec::new())
    }
}

fn register(server: &WebhookServer) {
    server
        .register(mutate_path::<ConfigMap>(), Webhook::defaulter(Label))
        .unwrap();
}

/// A TLS connection offering `alpn`.
async fn connect(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> Result<TlsStream<TcpStream>, String> {
    let mut config = (*tls_config(ca)).clone();
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|error| error.to_string())?;
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|error| error.to_string())
}

/// An HTTP/2 connection: its sender, and the task driving it (ends when the connection
/// closes).
async fn http2(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
) -> (SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
    let tls = connect(addr, ca, &[b"h2", b"http/1.1"]).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driver)
}

fn config_map_review(uid: &str, name: &str) -> Value {
    review(
        uid,
        "CREATE",
        ("", "v1", "ConfigMap"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})),
        None,
    )
}

async fn post(sender: &mut SendRequest<Full<Bytes>>, body: &Value) -> (StatusCode, Value) {
    sender.ready().await.unwrap();
    let request = Request::post(format!("https://localhost{}", mutate_path::<ConfigMap>()))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn http2_is_served_when_asked_for_with_streams_multiplexed() {
    let over_http2 = || common::counter(BY_PROTOCOL, r#"{protocol="HTTP/2"}"#);
    let before = over_http2();
    let served = serve(|options| options.http2(true), register).await;
    assert!(served.server.options().is_http2());
    let addr = served.running.local_addr();
    let (sender, _driver) = http2(addr, &served.ca.der).await;
    // Sixteen reviews at once on the one connection, each answered with its own uid.
    let answers = futures::future::join_all((0..16).map(|i| {
        let mut sender = sender.clone();
        async move { post(&mut sender, &config_map_review(&format!("uid-{i}"), "a")).await }
    }))
    .await;
    for (i, (status, answer)) in answers.into_iter().enumerate() {
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["response"]["uid"], format!("uid-{i}"));
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
    }
    // Counted by protocol (other tests of this binary may add theirs meanwhile).
    assert!(over_http2() >= before + 16.0);
    // A client offering only HTTP/1.1 is served HTTP/1.1 by the same server.
    let mut client = Client::connect(addr, &served.ca.der).await.unwrap();
    let answer = client
        .review(
            &mutate_path::<ConfigMap>(),
            &config_map_review("uid-h1", "a"),
        )
        .await;
    assert_eq!(answer["response"]["uid"], "uid-h1");
}

#[tokio::test]
async fn without_the_option_only_http11_is_offered() {
    let served = serve(|options| options, register).await;
    assert!(!served.server.options().is_http2());
    let addr = served.running.local_addr();
    let tls = connect(addr, &served.ca.der, &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    // A client that speaks HTTP/2 only finds no protocol in common.
    assert!(connect(addr, &served.ca.der, &[b"h2"]).await.is_err());
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_and_a_stop_lets_a_request_finish() {
    let served = serve(
        |options| options.http2(true).idle_timeout(Duration::from_millis(300)),
        register,
    )
    .await;
    let addr = served.running.local_addr();

    // Idle after one request: the server closes the connection.
    let (mut sender, driver) = http2(addr, &served.ca.der).await;
    let (status, _) = post(&mut sender, &config_map_review("uid-idle", "a")).await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the idle HTTP/2 connection was not closed")
        .unwrap();

    // A request in flight when the stop begins is answered; the connection then closes.
    let (mut sender, driver) = http2(addr, &served.ca.der).await;
    let slow =
        tokio::spawn(
            async move { post(&mut sender, &config_map_review("uid-slow", "slow")).await },
        );
    // The stop begins once the request is in the handler (it waits 500 ms there).
    common::eventually("the slow request is in flight", async || {
        SLOW_STARTED.load(Ordering::SeqCst)
    })
    .await;
    let report = served
        .running
        .stop(Some(tokio::time::Instant::now() + Duration::from_secs(10)))
        .await;
    let (status, answer) = slow.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["response"]["uid"], "uid-slow");
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the connection was not closed after the stop")
        .unwrap();
    assert_eq!(
        report.closed_at_deadline, 0,
        "nothing was cut at the deadline"
    );
}

#[tokio::test]
async fn an_http2_connection_without_a_first_request_is_closed_at_the_header_timeout() {
    // The idle timeout stays long: only the header timeout can close this connection.
    let served = serve(
        |options| {
            options
                .http2(true)
                .header_read_timeout(Duration::from_millis(300))
                .idle_timeout(Duration::from_secs(600))
        },
        register,
    )
    .await;
    let opened = tokio::time::Instant::now();
    let (_sender, driver) = http2(served.running.local_addr(), &served.ca.der).await;
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("an HTTP/2 connection that sent no request was kept open")
        .unwrap();
    // Closed by the timer, not at once for another reason.
    assert!(
        opened.elapsed() >= Duration::from_millis(250),
        "{:?}",
        opened.elapsed()
    );
}
