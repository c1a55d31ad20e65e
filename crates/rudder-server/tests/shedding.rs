//! At the connection cap the server sheds the connection idle longest to serve a new client:
//! a flood of idle and garbage connections cannot keep a probe waiting, and a request in
//! flight is never cut.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{WAIT, closed_within, eventually, get_on, options, read_response, start};
use rand::{Rng, SeedableRng};
use rudder_server::{DEFAULT_MAX_CONNECTIONS, raise_fd_limit};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Connections the flood holds open: more than twice the default cap.
const FLOOD: usize = 1200;

/// What a probe may take behind the flood: half of the kubelet's default 1 s probe timeout,
/// so a pass leaves room for a loaded machine, and a probe that waits for a slot (until the
/// 10 s header timeout frees one) fails by far.
const PROBE_BUDGET: Duration = Duration::from_millis(500);

/// A kubelet-style probe on a new connection: connect, one GET with `Connection: close`,
/// the answer read. Waits up to 15 s, past the header timeout, so a probe stuck behind the
/// cap reports how long it took rather than only that it was late.
async fn probe(addr: SocketAddr) -> (Option<(u16, String)>, Duration) {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(15), async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.37\r\n\
                  Accept: */*\r\nConnection: close\r\n\r\n",
            )
            .await
            .ok()?;
        read_response(&mut stream).await
    })
    .await
    .ok()
    .flatten();
    (answer, started.elapsed())
}

/// Opens `n` connections that never finish a request: a third send nothing, a third a
/// request head cut off in a header, a third random method-like letters with no line end
/// (garbage the parser must wait on, not reject).
async fn flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(24);
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let bytes: Vec<u8> = match i % 3 {
            0 => Vec::new(),
            1 => {
                let mut head = b"GET /readyz HTTP/1.1\r\nHost: flood\r\nX-Pad: ".to_vec();
                let pad = rng.random_range(1..200);
                head.extend((0..pad).map(|_| rng.random_range(b'a'..=b'z')));
                head
            }
            _ => {
                let len = rng.random_range(8..64);
                (0..len).map(|_| rng.random_range(b'A'..=b'Z')).collect()
            }
        };
        // A shed connection may already be closed by the server: that is what is tested.
        let _ = stream.write_all(&bytes).await;
        held.push(stream);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_behind_1200_idle_and_garbage_connections_is_answered_at_once() {
    // Each connection is two descriptors in this process, the client's and the server's.
    let limit = raise_fd_limit().expect("raise the fd limit");
    let needed = 2 * FLOOD as u64 + 256;
    assert!(
        limit.after.is_none_or(|soft| soft >= needed),
        "the descriptor limit {limit:?} is too low for {FLOOD} connections"
    );
    let (server, _) = start(options()).await;
    let addr = server.local_addr();
    let held = flood(addr, FLOOD).await;
    // A probe right behind the flood waits its turn in the backlog, each connection ahead
    // of it shedding one.
    let (answer, behind) = probe(addr).await;
    println!("probe right behind a flood of {FLOOD} connections: {behind:?}");
    assert_eq!(answer, Some((200, "ok".to_owned())));
    assert!(behind < PROBE_BUDGET, "the probe took {behind:?}");
    // The whole flood is in: every connection is open or was shed (the probe, closed by its
    // own request, is neither), and the server holds no more than its cap. Without
    // shedding, the connections past the cap would wait in the backlog instead.
    eventually("the flood accepted", WAIT, || {
        let (open, shed) = (server.open_connections(), server.shed_connections());
        (open as u64 + shed == FLOOD as u64 && open <= DEFAULT_MAX_CONNECTIONS).then_some(())
    })
    .await;
    let beyond_cap = (FLOOD - DEFAULT_MAX_CONNECTIONS) as u64;

    let mut took = Vec::new();
    for n in 0..5 {
        let (answer, elapsed) = probe(addr).await;
        println!("probe {n} behind {FLOOD} held connections: {elapsed:?}");
        assert_eq!(answer, Some((200, "ok".to_owned())), "probe {n}");
        took.push(elapsed);
    }
    let slowest = took.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < PROBE_BUDGET,
        "the slowest probe took {slowest:?}: {took:?}"
    );
    // The probes cost the flood a connection or two more: each may find the slot its
    // predecessor left free. The cap still holds.
    let shed = server.shed_connections() - beyond_cap;
    assert!((1..=6).contains(&shed), "{shed} shed for 6 probes");
    assert!(server.open_connections() <= DEFAULT_MAX_CONNECTIONS);
    assert_eq!(server.accept_errors(), 0);
    drop(held);
}

#[tokio::test]
async fn at_the_cap_the_connection_idle_longest_is_shed() {
    let (server, _) = start(
        options()
            .max_connections(3)
            .header_read_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    let mut first = TcpStream::connect(addr).await.expect("connect");
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    let mut third = TcpStream::connect(addr).await.expect("connect");
    eventually("three open connections", WAIT, || {
        (server.open_connections() == 3).then_some(())
    })
    .await;
    // A request on the second makes it idle only since its answer: the first, silent since
    // its accept, is now the one idle longest.
    assert_eq!(get_on(&mut kept, "/").await, Some((200, "ok".to_owned())));
    let mut fourth = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get_on(&mut fourth, "/").await, Some((200, "ok".to_owned())));
    assert!(closed_within(&mut first, WAIT).await.is_some());
    assert_eq!(server.shed_connections(), 1);
    // The second, used again, outlives the third, idle since its accept, and so does the
    // fourth, idle since its answer.
    assert_eq!(get_on(&mut kept, "/").await, Some((200, "ok".to_owned())));
    let mut fifth = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(get_on(&mut fifth, "/").await, Some((200, "ok".to_owned())));
    assert!(closed_within(&mut third, WAIT).await.is_some());
    assert_eq!(server.shed_connections(), 2);
    for stream in [&mut kept, &mut fourth, &mut fifth] {
        assert_eq!(get_on(stream, "/").await, Some((200, "ok".to_owned())));
    }
}

#[tokio::test]
async fn a_request_in_flight_is_never_shed() {
    let cap = 8;
    let (server, gate) = start(
        options()
            .max_connections(cap)
            .header_read_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    // The oldest connection has a request in flight, held in the handler.
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /gate HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write");
    eventually("the slow request in its handler", WAIT, || {
        (gate.entered() == 1).then_some(())
    })
    .await;
    let mut idle = Vec::new();
    for _ in 1..cap {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
    }
    // Three times the cap in new clients, held open, each served by shedding the connection
    // idle longest: the silent ones first, then earlier new clients, never the slow one.
    let mut clients = Vec::new();
    for n in 0..3 * cap {
        let mut client = TcpStream::connect(addr).await.expect("connect");
        assert_eq!(
            get_on(&mut client, "/").await,
            Some((200, "ok".to_owned())),
            "client {n}"
        );
        clients.push(client);
    }
    assert_eq!(server.shed_connections(), 3 * cap as u64);
    for (n, stream) in idle.iter_mut().enumerate() {
        assert!(
            closed_within(stream, WAIT).await.is_some(),
            "idle connection {n} was not shed"
        );
    }
    // The slow request was never cut: it is answered once its handler is let through, on
    // its connection.
    gate.release_one();
    let answer = tokio::time::timeout(WAIT, read_response(&mut slow)).await;
    assert_eq!(
        answer.expect("answered in time"),
        Some((200, "through the gate".to_owned()))
    );
}

#[tokio::test]
async fn at_the_cap_with_every_request_in_flight_a_client_waits_for_one_to_finish() {
    let (server, gate) = start(
        options()
            .max_connections(2)
            .header_read_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET /gate HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .expect("write");
        busy.push(stream);
    }
    eventually("two requests in their handler", WAIT, || {
        (gate.entered() == 2).then_some(())
    })
    .await;
    // Nothing is idle, so nothing is shed: the third client waits.
    let mut third = TcpStream::connect(addr).await.expect("connect");
    third
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .expect("write");
    let early = tokio::time::timeout(Duration::from_millis(300), read_response(&mut third)).await;
    assert!(early.is_err(), "answered at the cap: {early:?}");
    assert_eq!(server.shed_connections(), 0);
    // One request finishes: its answer is delivered whole, then its connection, idle now,
    // gives its slot to the waiting client.
    gate.release_one();
    let reads = busy
        .iter_mut()
        .map(|stream| Box::pin(read_response(stream)));
    let (answer, _, held) = tokio::time::timeout(WAIT, futures::future::select_all(reads))
        .await
        .expect("the released request answered");
    assert_eq!(answer, Some((200, "through the gate".to_owned())));
    for other in held {
        let early = tokio::time::timeout(Duration::from_millis(300), other).await;
        assert!(
            early.is_err(),
            "a request still at the gate answered: {early:?}"
        );
    }
    let answer = tokio::time::timeout(WAIT, read_response(&mut third))
        .await
        .expect("answered once a request finished");
    assert_eq!(answer, Some((200, "ok".to_owned())));
    assert_eq!(server.shed_connections(), 1);
    gate.release_one();
}
