//! The server's bounds against real TCP clients: header and idle timeouts, body limit and
//! body read timeout, and
//! a flood of bad clients below the connection cap (the cap itself: `shedding.rs`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{WAIT, closed_within, eventually, get, get_on, options, read_response, start};
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[tokio::test]
async fn a_half_sent_request_head_is_cut_at_the_header_timeout() {
    let timeout = Duration::from_millis(200);
    let (server, _) = start(
        options()
            .header_read_timeout(timeout)
            .idle_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    let mut half = TcpStream::connect(addr).await.expect("connect");
    half.write_all(b"GET /slow?ms=1 HT").await.expect("write");
    let took = closed_within(&mut half, WAIT)
        .await
        .expect("closed at the header timeout");
    assert!(took >= timeout - Duration::from_millis(20), "{took:?}");
    // A client that sends nothing at all is held to the same timeout.
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let took = closed_within(&mut silent, WAIT)
        .await
        .expect("closed at the header timeout");
    assert!(took >= timeout - Duration::from_millis(20), "{took:?}");
    // On a kept-alive connection, the timer starts at the next request's first byte, not
    // when the connection went idle: a head sent slowly after an idle spell longer than the
    // header timeout is served.
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get_on(&mut kept, "/").await, Some((200, "ok".to_owned())));
    assert!(closed_within(&mut kept, timeout * 2).await.is_none());
    kept.write_all(b"GET / HTTP/1.1\r\n").await.expect("write");
    assert!(closed_within(&mut kept, timeout / 2).await.is_none());
    kept.write_all(b"Host: test\r\n\r\n").await.expect("write");
    let answer = tokio::time::timeout(WAIT, read_response(&mut kept)).await;
    assert_eq!(answer.expect("answered"), Some((200, "ok".to_owned())));
    // And a slow head on it is cut like any other.
    kept.write_all(b"GET / HTTP/1.1\r\n").await.expect("write");
    assert!(closed_within(&mut kept, WAIT).await.is_some());
}

#[tokio::test]
async fn an_idle_connection_is_closed_but_a_slow_request_is_not_cut() {
    let idle = Duration::from_millis(300);
    let (server, _) = start(
        options()
            .idle_timeout(idle)
            .header_read_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get_on(&mut kept, "/").await, Some((200, "ok".to_owned())));
    let took = closed_within(&mut kept, WAIT)
        .await
        .expect("closed at the idle timeout");
    assert!(took >= idle - Duration::from_millis(50), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    eventually("no open connection", WAIT, || {
        (server.open_connections() == 0).then_some(())
    })
    .await;
    // A request three times as long as the idle timeout is answered, and the connection
    // is reused after it.
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(
        get_on(&mut slow, "/slow?ms=900").await,
        Some((200, "slow done".to_owned()))
    );
    assert_eq!(get_on(&mut slow, "/").await, Some((200, "ok".to_owned())));
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413() {
    let (server, _) = start(options().max_body_size(Some(1024))).await;
    let addr = server.local_addr();
    let post = |head: String, body: Vec<u8>| async move {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(head.as_bytes()).await.expect("write");
        // The server may answer and close before taking the whole body.
        let _ = stream.write_all(&body).await;
        tokio::time::timeout(WAIT, read_response(&mut stream))
            .await
            .expect("answered in time")
    };
    let small = post(
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n".to_owned(),
        vec![b'a'; 1000],
    )
    .await;
    assert_eq!(small, Some((200, "1000".to_owned())));
    // Declared too large: answered without calling the service.
    let (status, _) = post(
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n".to_owned(),
        vec![b'a'; 5000],
    )
    .await
    .expect("a response");
    assert_eq!(status, 413);
    // Chunked, so only found while reading: 413 whatever the service answered.
    let mut chunked = Vec::new();
    for _ in 0..5 {
        chunked.extend_from_slice(b"200\r\n");
        chunked.extend_from_slice(&[b'b'; 0x200]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let (status, body) = post(
        "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_owned(),
        chunked,
    )
    .await
    .expect("a response");
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("1024"), "{body}");
}

#[tokio::test]
async fn a_body_trickled_past_the_body_read_timeout_is_answered_408_and_closed() {
    let timeout = Duration::from_millis(400);
    let (server, _) = start(
        options()
            .body_read_timeout(timeout)
            .header_read_timeout(Duration::from_secs(30))
            .idle_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    // A head, then one byte of a 100-byte body, then nothing: the service's read of the
    // body fails at the timeout, and the client is told so whatever the service answered.
    let started = Instant::now();
    let mut stalled = TcpStream::connect(addr).await.expect("connect");
    stalled
        .write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\na")
        .await
        .expect("write");
    let answer = tokio::time::timeout(WAIT, read_response(&mut stalled))
        .await
        .expect("answered in time");
    let took = started.elapsed();
    let (status, body) = answer.expect("a response");
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("not received within"), "{body}");
    assert!(took >= timeout - Duration::from_millis(20), "{took:?}");
    assert!(
        closed_within(&mut stalled, WAIT).await.is_some(),
        "the connection is closed after a 408"
    );
    // A body sent in two pieces but whole within the timeout is served as usual.
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab")
        .await
        .expect("write");
    tokio::time::sleep(timeout / 4).await;
    slow.write_all(b"cd").await.expect("write");
    let answer = tokio::time::timeout(WAIT, read_response(&mut slow))
        .await
        .expect("answered in time");
    assert_eq!(answer, Some((200, "4".to_owned())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_idle_clients_do_not_stop_normal_requests() {
    // 600 connections, both ends in this process.
    rudder_server::raise_fd_limit().expect("raise the fd limit");
    // Random bytes without a line end look like a slow head and hold a connection until the
    // header timeout, so the cap is raised above the flood to see that it slows nobody.
    let (server, _) = start(options().max_connections(1024)).await;
    let addr = server.local_addr();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut held = Vec::new();
    for _ in 0..100 {
        let mut garbage = vec![0u8; rng.random_range(16..512)];
        rng.fill(&mut garbage[..]);
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        // The server may already have answered 400 and closed.
        let _ = stream.write_all(&garbage).await;
        held.push(stream);
    }
    for _ in 0..500 {
        held.push(TcpStream::connect(addr).await.expect("connect"));
    }
    for n in 0..20 {
        let start = Instant::now();
        let answer = get(addr, "/").await;
        assert_eq!(answer, Some((200, "ok".to_owned())), "request {n}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "request {n} took {:?}",
            start.elapsed()
        );
    }
    assert_eq!(server.accept_errors(), 0);
    drop(held);
}
