//! What the server's integration tests share: a test service, raw HTTP clients, polling
//! (rudder-envtest's, every 5 ms).
#![allow(dead_code, unreachable_pub, clippy::expect_used, clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use rudder_envtest::poll::Poll;
use rudder_server::{Body, Options, Server, ServerHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// How long a test waits for something that should happen promptly.
pub const WAIT: Duration = Duration::from_secs(5);

/// What the test service shares with its test: a gate `/gate` requests wait on, and how
/// many have entered it.
#[derive(Clone)]
pub struct Gate {
    pub open: Arc<Semaphore>,
    pub entered: Arc<AtomicUsize>,
}

impl Gate {
    pub fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    /// Lets one waiting request through.
    pub fn release_one(&self) {
        self.open.add_permits(1);
    }
}

/// `/` answers `ok`; `/slow?ms=N` answers after N ms; `/gate` answers once the gate lets it
/// through; `/echo` answers the length of the body it read (400 if it could not).
pub async fn start(options: Options) -> (ServerHandle, Gate) {
    let gate = Gate {
        open: Arc::new(Semaphore::new(0)),
        entered: Arc::default(),
    };
    let shared = gate.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let gate = shared.clone();
        async move {
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let (status, text) = match path.as_str() {
                "/" => (StatusCode::OK, "ok".to_owned()),
                "/slow" => {
                    let ms = query
                        .strip_prefix("ms=")
                        .and_then(|ms| ms.parse().ok())
                        .unwrap_or(100);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    (StatusCode::OK, "slow done".to_owned())
                }
                "/gate" => {
                    gate.entered.fetch_add(1, Ordering::SeqCst);
                    let permit = gate.open.acquire().await.expect("gate open");
                    permit.forget();
                    (StatusCode::OK, "through the gate".to_owned())
                }
                "/echo" => match request.into_body().collect().await {
                    Ok(body) => (StatusCode::OK, format!("{}", body.to_bytes().len())),
                    Err(error) => (StatusCode::BAD_REQUEST, error.to_string()),
                },
                _ => (StatusCode::NOT_FOUND, "not found".to_owned()),
            };
            let mut response = Response::new(Full::new(Bytes::from(text)));
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        }
    });
    let server = Server::bind(options).await.expect("bind");
    (server.serve(service), gate)
}

/// Options on loopback, any port.
pub fn options() -> Options {
    Options::new("127.0.0.1:0".parse().unwrap())
}

/// Reads one response from `stream`: (status, body). `None` if the connection closed (or
/// failed) before a whole response arrived.
pub async fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = find(&buf, b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status = head.get(9..12)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
    Some((status, body))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A keep-alive GET on `stream`, within [`WAIT`].
pub async fn get_on(stream: &mut TcpStream, path: &str) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    tokio::time::timeout(WAIT, read_response(stream))
        .await
        .ok()
        .flatten()
}

/// A GET on a new connection, within [`WAIT`].
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::time::timeout(WAIT, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    get_on(&mut stream, path).await
}

/// Waits until the peer closes `stream` (EOF or reset), up to `within`; how long that took,
/// or `None` if it stayed open. Bytes the server sends first (an error answer) are read
/// past.
pub async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| start.elapsed())
}

/// Polls `check` every 5 ms until it gives a value, or panics after `within` naming `what`.
pub async fn eventually<T>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    Poll::new(what, within)
        .every(Duration::from_millis(5))
        .eventually(async || check())
        .await
}
