//! A server (or a proxy) that ends every watch at once with nothing sent: the engine waits
//! (its backoff) before each resume instead of asking again as fast as it is answered. A
//! real API server ends a watch only at its timeout, so a loopback server plays this one:
//! it answers the first streaming list with its end bookmark, then closes every watch at
//! once.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rudder_cache::watch::{self, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The end-of-initial-events bookmark, as one watch event line.
const END: &str = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;

/// Serves watches on loopback: the first (the streaming list) gets the end bookmark, every
/// other one is closed at once. Counts the watches resumed from a resourceVersion.
async fn serve(listener: TcpListener, resumed: Arc<AtomicUsize>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let resumed = Arc::clone(&resumed);
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
            let body = if head.contains("sendInitialEvents=true") {
                format!("{END}\n")
            } else {
                resumed.fetch_add(1, Ordering::SeqCst);
                String::new()
            };
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

#[tokio::test]
async fn watches_ended_at_once_are_resumed_after_a_wait() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resumed = Arc::new(AtomicUsize::new(0));
    let server = tokio::spawn(serve(listener, Arc::clone(&resumed)));
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = pin!(watch::watch(api, watch::Config::default()));
    // The list: Init, then InitDone at the bookmark.
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap()
        {
            Ok(Event::InitDone) => break,
            Ok(_) => {}
            Err(error) => panic!("{error}"),
        }
    }
    // Then two seconds of watches ended at once: with the backoff (800 ms, doubling, jitter
    // up to as much again) a handful of resumes, not one per round trip.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(item) = events.next().await {
            drop(item);
        }
    })
    .await;
    let resumes = resumed.load(Ordering::SeqCst);
    assert!(
        (1..=4).contains(&resumes),
        "{resumes} watches resumed in 2 s against a server ending each at once"
    );
    server.abort();
}
