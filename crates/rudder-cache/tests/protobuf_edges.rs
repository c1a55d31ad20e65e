//! What a real API server does not do, played by a loopback server: answering JSON when
//! asked for protobuf (an aggregated API server without protobuf), and protobuf that does
//! not decode. The informer goes on in JSON in both cases, and says so in its stats.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rudder_cache::{Informer, WireFormat};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The streaming list in JSON: one ConfigMap, then the end-of-initial-events bookmark.
const JSON_LIST: &str = concat!(
    r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"4"},"data":{"k":"v"}}}"#,
    "\n",
    r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
    "\n"
);

/// How the server answers a request that accepts protobuf.
#[derive(Clone, Copy)]
enum Protobuf {
    /// With JSON anyway.
    AnswerJson,
    /// With a protobuf frame that is not a watch event.
    Garbage,
}

/// Serves the streaming list on loopback, recording each request's `Accept` header; a
/// resumed watch is held open (with nothing sent) until the client goes.
async fn serve(listener: TcpListener, protobuf: Protobuf, accepts: Arc<Mutex<Vec<String>>>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let accepts = Arc::clone(&accepts);
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let Ok(n) = socket.read(&mut buf).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let accept = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("accept")
                        .then(|| value.trim().to_owned())
                })
                .unwrap_or_default();
            accepts.lock().unwrap().push(accept.clone());
            if !head.contains("sendInitialEvents=true") {
                // A resumed watch: open, silent, until the client closes it.
                let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.read(&mut buf).await;
                return;
            }
            let (content_type, body): (&str, Vec<u8>) =
                match (accept.contains("protobuf"), protobuf) {
                    (true, Protobuf::Garbage) => {
                        let mut frame = 7u32.to_be_bytes().to_vec();
                        frame.extend_from_slice(&[0xff; 7]);
                        ("application/vnd.kubernetes.protobuf;stream=watch", frame)
                    }
                    _ => ("application/json", JSON_LIST.as_bytes().to_vec()),
                };
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.write_all(&body).await;
            let _ = socket.shutdown().await;
        });
    }
}

/// An informer of ConfigMaps from a loopback server answering `protobuf` so: it syncs the
/// one ConfigMap, in JSON; returns the `Accept` headers the server saw.
async fn informer_against(protobuf: Protobuf) -> (Informer<ConfigMap>, Vec<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepts = Arc::new(Mutex::new(Vec::new()));
    let server = tokio::spawn(serve(listener, protobuf, Arc::clone(&accepts)));
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let informer = Informer::builder(api).skip_malformed().start();
    informer
        .wait_for_sync(Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(informer.store().len(), 1);
    let stats = informer.stats();
    assert_eq!(stats.wire_format, WireFormat::Json, "{stats:?}");
    informer.stop().await;
    server.abort();
    let seen = accepts.lock().unwrap().clone();
    (informer, seen)
}

#[tokio::test]
async fn a_server_answering_json_to_protobuf_is_read_in_json_from_then_on() {
    let (_, accepts) = informer_against(Protobuf::AnswerJson).await;
    // The first list asked for protobuf; the server answered JSON, and every request since
    // (the list again, the watches) asks for JSON.
    assert!(accepts.len() >= 2, "{accepts:?}");
    assert!(
        accepts[0].starts_with("application/vnd.kubernetes.protobuf"),
        "{accepts:?}"
    );
    assert!(
        accepts[1..]
            .iter()
            .all(|accept| !accept.contains("protobuf")),
        "{accepts:?}"
    );
}

#[tokio::test]
async fn protobuf_that_does_not_decode_falls_back_to_json() {
    let (informer, accepts) = informer_against(Protobuf::Garbage).await;
    assert!(
        accepts[0].starts_with("application/vnd.kubernetes.protobuf"),
        "{accepts:?}"
    );
    // The list again, in JSON, decoding each object on its own.
    assert!(
        accepts[1..]
            .iter()
            .any(|accept| !accept.contains("protobuf")),
        "{accepts:?}"
    );
    drop(informer);
}
