//! The listen backlog: servers listen with the system's maximum (or the configured value),
//! and a burst of connections the server has not yet accepted does not delay a probe into
//! the kernel's 1 s SYN retransmission.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::Command;
use std::task::Poll;
use std::time::Duration;

use common::{WAIT, options, read_response, start};
use futures::future::{join_all, maybe_done};
use rudder_server::{Server, raise_fd_limit, system_backlog};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// `net.core.somaxconn`, read here rather than through the crate.
fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .expect("read somaxconn")
        .trim()
        .parse()
        .expect("somaxconn is a number")
}

/// The backlog the kernel holds for the socket listening on `addr`: `ss`'s `Send-Q` column
/// for a listening socket is its `sk_max_ack_backlog` (tokio and std offer no way to read it
/// back, and `/proc/net/tcp` does not show it).
fn kernel_backlog(addr: SocketAddr) -> u32 {
    let output = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{}", addr.port())])
        .output()
        .expect("run ss (iproute2) to read the socket's backlog");
    assert!(output.status.success(), "ss failed: {output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let [line] = lines[..] else {
        panic!("expected one listening socket on {addr}, ss says:\n{text}");
    };
    // State, Recv-Q (connections queued now), Send-Q (the backlog), local address, peer.
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[0], "LISTEN", "{line}");
    assert_eq!(fields[3], addr.to_string(), "{line}");
    fields[2].parse().expect("Send-Q is a number")
}

#[tokio::test]
async fn servers_listen_with_the_system_backlog() {
    assert_eq!(system_backlog(), somaxconn());
    let server = Server::bind(options()).await.unwrap();
    assert_eq!(kernel_backlog(server.local_addr()), somaxconn());
}

#[tokio::test]
async fn a_configured_backlog_is_the_one_listened_with() {
    let server = Server::bind(options().listen_backlog(300)).await.unwrap();
    // The kernel caps any backlog at somaxconn.
    assert_eq!(kernel_backlog(server.local_addr()), 300.min(somaxconn()));
}

/// Connections opened at once, more than mio's 128 and under Linux's default 4096.
const BURST: usize = 3000;

/// A burst of connections the server has not accepted yet, then a probe: the probe is
/// connected and answered in well under the kubelet's 1 s timeout. The connects are issued
/// on the server's own (single) thread without yielding, so the kernel queues all of them
/// before the server accepts any, as happens when a burst arrives faster than it accepts.
/// With a backlog of 128 the queue overflows, the kernel drops the probe's SYN, and the
/// probe connects only at its retransmission a second later.
#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_connections_leaves_a_probe_answered_at_once() {
    // Each connection is two descriptors in this process, the client's and the server's.
    let limit = raise_fd_limit().unwrap();
    let needed = 2 * BURST as u64 + 256;
    assert!(
        limit.after.is_none_or(|soft| soft >= needed),
        "the descriptor limit {limit:?} is too low for {BURST} connections"
    );
    assert!(
        somaxconn() as usize > BURST,
        "somaxconn must exceed the burst"
    );
    // The cap is above the burst: this test is about the backlog, not the cap.
    let (server, _gate) = start(options().max_connections(BURST + 16)).await;
    let addr = server.local_addr();

    let mut burst = Vec::with_capacity(BURST);
    for _ in 0..BURST {
        let mut connect = Box::pin(maybe_done(TcpStream::connect(addr)));
        poll_once(connect.as_mut()).await;
        burst.push(connect);
    }
    let started = std::time::Instant::now();
    let mut probe = Box::pin(maybe_done(TcpStream::connect(addr)));
    poll_once(probe.as_mut()).await;
    let answer = tokio::time::timeout(WAIT, async {
        probe.as_mut().await;
        let mut stream = probe
            .as_mut()
            .take_output()
            .unwrap()
            .expect("the probe connects");
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n")
            .await
            .expect("the probe's request is sent");
        read_response(&mut stream).await
    })
    .await
    .expect("the probe is answered");
    let took = started.elapsed();
    assert_eq!(answer, Some((200, "ok".to_owned())));
    assert!(
        took < Duration::from_millis(500),
        "the probe took {took:?} behind {BURST} connections"
    );

    // Every connection of the burst was queued too, none dropped.
    tokio::time::timeout(WAIT, join_all(burst.iter_mut().map(Pin::as_mut)))
        .await
        .expect("the burst connects");
    for connect in &mut burst {
        let stream = connect.as_mut().take_output().unwrap();
        stream.expect("a connection of the burst connects");
    }
    let report = server.stop(Some(tokio::time::Instant::now() + WAIT)).await;
    assert_eq!(report.closed_at_deadline, 0);
}

/// Polls `future` once, in the calling task and without yielding to other tasks: for a
/// connect, that issues the SYN (the connect system call); the handshake's result is kept
/// by the `MaybeDone` for a later poll.
async fn poll_once<F: Future<Output = ()> + ?Sized>(mut future: Pin<&mut F>) {
    poll_fn(|cx| {
        // Ready or not, the connect has been issued: that is all this poll is for.
        let _ = future.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}
