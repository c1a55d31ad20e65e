//! Graceful stop: requests in flight finish before the caller's deadline, and are cut at it.
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{WAIT, closed_within, eventually, get_on, options, read_response, start};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[tokio::test]
async fn a_request_in_flight_finishes_before_the_deadline() {
    let (server, gate) = start(options()).await;
    let addr = server.local_addr();
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get_on(&mut idle, "/").await, Some((200, "ok".to_owned())));
    let mut busy = TcpStream::connect(addr).await.expect("connect");
    busy.write_all(b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    eventually("the request in flight", WAIT, || {
        (gate.entered() == 1).then_some(())
    })
    .await;

    let stopping = tokio::spawn(server.stop(Some(Instant::now() + WAIT)));
    // The idle keep-alive connection closes at once; the listener is gone.
    assert!(closed_within(&mut idle, WAIT).await.is_some());
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "the listener is still open");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(!stopping.is_finished());

    gate.release_one();
    let answer = tokio::time::timeout(WAIT, read_response(&mut busy))
        .await
        .expect("answered");
    assert_eq!(answer, Some((200, "through the gate".to_owned())));
    let report = tokio::time::timeout(WAIT, stopping)
        .await
        .expect("stop returns once the request is done")
        .expect("stop task");
    assert_eq!(report.closed_at_deadline, 0);
    // Stopping also closed the connection the request came on.
    assert!(closed_within(&mut busy, WAIT).await.is_some());
}

#[tokio::test]
async fn at_the_deadline_what_is_left_is_closed_and_stop_returns() {
    let (server, gate) = start(options()).await;
    let addr = server.local_addr();
    let mut busy = TcpStream::connect(addr).await.expect("connect");
    busy.write_all(b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    eventually("the request in flight", WAIT, || {
        (gate.entered() == 1).then_some(())
    })
    .await;
    let grace = Duration::from_millis(300);
    let start = Instant::now();
    let report = tokio::time::timeout(WAIT, server.stop(Some(start + grace)))
        .await
        .expect("stop is bounded by its deadline");
    let took = start.elapsed();
    assert!(took >= grace, "{took:?}");
    assert!(took < grace + Duration::from_secs(1), "{took:?}");
    assert_eq!(report.closed_at_deadline, 1);
    // Closed without an answer.
    let answer = tokio::time::timeout(WAIT, read_response(&mut busy))
        .await
        .expect("closed");
    assert_eq!(answer, None);
}

#[tokio::test]
async fn a_dropped_handle_closes_its_connections() {
    let (server, gate) = start(options()).await;
    let addr = server.local_addr();
    let mut busy = TcpStream::connect(addr).await.expect("connect");
    busy.write_all(b"GET /gate HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    eventually("the request in flight", WAIT, || {
        (gate.entered() == 1).then_some(())
    })
    .await;
    drop(server);
    assert!(closed_within(&mut busy, WAIT).await.is_some());
}

#[tokio::test]
async fn an_address_in_use_is_a_clear_error() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = taken.local_addr().expect("addr");
    let err = rudder_server::Server::bind(options().bind_address(addr))
        .await
        .expect_err("in use");
    assert_eq!(err.to_string(), format!("cannot listen on {addr}"));
    let rudder_server::BindError::Bind { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
}
