//! The manager's probe server under bad clients: idle and garbage connections slow nobody.
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;
use rudder_manager::Manager;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LOOPBACK_ANY_PORT: Option<SocketAddr> = Some(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    0,
));

/// How long a test waits for the manager to do something.
const WAIT: Duration = Duration::from_secs(30);

/// `GET path` over HTTP/1.0: the status, or `None` if no answer came within a second.
async fn status(addr: SocketAddr, path: &str) -> Option<u16> {
    let answer = tokio::time::timeout(
        Duration::from_secs(1),
        rudder_envtest::http::get(addr, path),
    )
    .await;
    Some(answer.ok()?.ok()?.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_while_idle_and_garbage_connections_are_open() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("bad-clients").await.unwrap();
    let namespace = ns.name().to_owned();
    let m = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(LOOPBACK_ANY_PORT)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
    let health = eventually("the probe server", WAIT, async || m.health_address()).await;
    eventually("/readyz to answer 200", WAIT, async || {
        (status(health, "/readyz").await == Some(200)).then_some(())
    })
    .await;

    // 300 connections that never send a byte, and 50 that send bytes that are not HTTP.
    let mut held = Vec::new();
    for _ in 0..300 {
        held.push(TcpStream::connect(health).await.unwrap());
    }
    for n in 0..50u8 {
        let mut stream = TcpStream::connect(health).await.unwrap();
        let garbage: Vec<u8> = (0..200u8)
            .map(|i| i.wrapping_mul(31).wrapping_add(n) | 0x80)
            .collect();
        stream.write_all(&garbage).await.unwrap();
        held.push(stream);
    }
    for poll in 0..10 {
        let started = Instant::now();
        assert_eq!(status(health, "/readyz").await, Some(200), "poll {poll}");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "poll {poll} took {:?}",
            started.elapsed()
        );
    }
    drop(held);
    stop.cancel();
    running.await.unwrap().unwrap();
}
