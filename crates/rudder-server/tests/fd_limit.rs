//! Out of file descriptors, the accept loop backs off instead of spinning, and serves again
//! once descriptors are free. Its own test binary: the limit is process-wide.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{WAIT, eventually, options, read_response, start};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use rustix::time::{ClockId, clock_gettime};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// CPU time this process has used (user and system, every thread).
fn cpu_time() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_accept_loop_backs_off_and_recovers() {
    let saved = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(256),
            maximum: saved.maximum,
        },
    )
    .expect("lower the soft limit");

    let (server, _) = start(
        options()
            .max_connections(1000)
            .header_read_timeout(Duration::from_secs(30)),
    )
    .await;
    let addr = server.local_addr();
    // Client sockets made before the descriptors run out connect without needing one more.
    let sockets: Vec<TcpSocket> = (0..20)
        .map(|_| TcpSocket::new_v4().expect("socket"))
        .collect();
    let mut filler = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(file) => filler.push(file),
            Err(error) => {
                assert_eq!(error.raw_os_error(), Some(24), "{error}");
                break;
            }
        }
    }
    let mut clients: Vec<TcpStream> = Vec::new();
    for socket in sockets {
        let mut stream = tokio::time::timeout(WAIT, socket.connect(addr))
            .await
            .expect("connected in time")
            .expect("connect");
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        clients.push(stream);
    }
    eventually("an accept error", WAIT, || {
        (server.accept_errors() > 0).then_some(())
    })
    .await;

    // The measurement window: a second of accept errors, backed off.
    let (errors, cpu) = (server.accept_errors(), cpu_time());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (errors, cpu) = (server.accept_errors() - errors, cpu_time() - cpu);
    assert!(errors < 20, "{errors} accept errors in one second");
    assert!(
        cpu < Duration::from_millis(300),
        "{cpu:?} of CPU in one second"
    );

    // Descriptors free again: the queued clients are served (after at most one backoff
    // step of 1 s).
    drop(filler);
    let answers = futures::future::join_all(clients.iter_mut().map(|client| async move {
        tokio::time::timeout(WAIT, read_response(client))
            .await
            .ok()
            .flatten()
    }))
    .await;
    for answer in answers {
        assert_eq!(answer, Some((200, "ok".to_owned())));
    }
    let served = common::get(addr, "/").await;
    assert_eq!(served, Some((200, "ok".to_owned())));
    setrlimit(Resource::Nofile, saved).expect("restore the limit");
}
