//! [`WatchDelay`]: a loopback proxy in front of a [`TestEnv`]'s API server that forwards every
//! request at once but each line of a watch late, so a test can show what a controller does
//! while its cache is behind its own writes.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::AbortOnDropHandle;

use crate::env::TestEnv;
use crate::error::{Error, Result};

/// How long the proxy waits for a request's body from its client, and for the head of the API
/// server's answer. Loopback answers in milliseconds; this only keeps a broken peer from
/// holding a task for ever.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// A loopback HTTP proxy in front of a [`TestEnv`]'s API server that delays watch events.
///
/// Every request to [`config`](Self::config)'s URL (or through [`client`](Self::client)) goes
/// on to the API server with the env's TLS and admin credentials: method, path and query,
/// `Content-Type`, `Accept` and the body. The answer comes back with its status,
/// `Content-Type` and body, errors included, so a `404` is still a [`kube::Error::Api`].
///
/// A watch (`watch=true` or `watch=1` in the query, which covers kube's watchers, bookmarks
/// and streaming lists alike) answers with one JSON event per line. The proxy reads those
/// lines as they come and forwards each one [`delay`](Self::delay) after it arrived, in order:
/// a line that arrived at `t` goes out at `t + delay`, whatever came before it, so delays do
/// not add up. Nothing else is delayed, so a controller's writes and reads return as fast as
/// ever while its informer learns of them late: the cache is behind its own writes.
///
/// - [`set_delay`](Self::set_delay) changes the delay of the lines that arrive from then on.
///   Lines still leave in arrival order, so after a shorter delay is set a new line waits for
///   the older ones before it.
/// - [`stall`](Self::stall) holds every line from then on, as a watch that is cut off
///   (writes whose events never reach the informer), until [`resume`](Self::resume)
///   releases them in order, each at its own release time or at once if that has passed.
///
/// Dropping the proxy stops it: its listener closes and its connections and watches end.
/// A client that hangs up ends the forwarding of its watch.
///
/// ```no_run
/// use std::time::Duration;
///
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, PostParams};
/// use rudder_envtest::{TestEnv, WatchDelay};
///
/// # async fn demo(cm: ConfigMap) -> Result<(), Box<dyn std::error::Error>> {
/// let env = TestEnv::builder().shared().await?;
/// let ns = env.namespace("acts_on_a_stale_cache").await?;
/// let slow = WatchDelay::start(env, Duration::from_millis(300))?;
///
/// // The controller under test runs with `slow.client()`: its informer sees every event
/// // 300 ms after it happened, while its own writes return at once.
/// let through_proxy: Api<ConfigMap> = Api::namespaced(slow.client(), ns.name());
/// through_proxy.create(&PostParams::default(), &cm).await?;
///
/// // From here on no event reaches it, until `resume`.
/// slow.stall();
/// ns.api::<ConfigMap>().create(&PostParams::default(), &cm).await.ok();
/// slow.resume();
/// # Ok(())
/// # }
/// ```
pub struct WatchDelay {
    addr: SocketAddr,
    config: kube::Config,
    client: kube::Client,
    control: Arc<Control>,
    _stop: DropGuard,
    /// The accepting task, which owns the connections' (and they their watches'): aborted,
    /// with all of them, when the proxy is dropped.
    _serve: AbortOnDropHandle<()>,
}

impl std::fmt::Debug for WatchDelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchDelay")
            .field("addr", &self.addr)
            .field("settings", &*self.control.settings.borrow())
            .finish_non_exhaustive()
    }
}

impl WatchDelay {
    /// Starts a proxy for `env`'s API server on `127.0.0.1` (a free port), delaying each watch
    /// line by `delay`.
    ///
    /// It runs on the calling tokio runtime (its tasks, and the clients it makes, belong to
    /// that runtime), so start one per test.
    ///
    /// # Errors
    ///
    /// [`Error::Proxy`] when called outside a tokio runtime or no loopback port can be bound;
    /// [`Error::Kube`] when a client cannot be built.
    pub fn start(env: &TestEnv, delay: Duration) -> Result<Self> {
        tokio::runtime::Handle::try_current().map_err(|error| Error::Proxy {
            action: "find a tokio runtime to run",
            source: std::io::Error::other(error),
        })?;
        let listen = |source| Error::Proxy {
            action: "listen on 127.0.0.1 for",
            source,
        };
        let listener =
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).map_err(listen)?;
        listener.set_nonblocking(true).map_err(listen)?;
        let addr = listener.local_addr().map_err(listen)?;
        let listener = TcpListener::from_std(listener).map_err(listen)?;

        let upstream = env.client()?;
        let config = proxy_config(env.config(), addr);
        let client = kube::Client::try_from(config.clone()).map_err(|source| Error::Kube {
            context: "build a client of the watch-delay proxy".to_owned(),
            source,
        })?;
        let stop = CancellationToken::new();
        let control = Arc::new(Control {
            settings: watch::Sender::new(Settings {
                delay,
                stalled: false,
            }),
            forwarded: AtomicU64::new(0),
            held: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            stop: stop.clone(),
        });
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: the proxy holds it, aborted when it is dropped"
        )]
        let serve = AbortOnDropHandle::new(tokio::spawn(serve(
            listener,
            Arc::clone(&control),
            upstream,
        )));
        tracing::debug!(%addr, ?delay, "watch-delay proxy listening");
        Ok(Self {
            addr,
            config,
            client,
            control,
            _stop: stop.drop_guard(),
            _serve: serve,
        })
    }

    /// The address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client configuration for the proxy: `http://127.0.0.1:PORT`, no credentials (the
    /// proxy adds the env's), the env's default namespace and timeouts. For a binary under
    /// test, or a client with options of its own.
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// A client through the proxy, made on the runtime [`start`](Self::start) ran on; clones
    /// share its connections.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The delay of the lines arriving now.
    pub fn delay(&self) -> Duration {
        self.control.settings.borrow().delay
    }

    /// Delays the watch lines that arrive from now on by `delay`; lines already held keep
    /// their release time.
    pub fn set_delay(&self, delay: Duration) {
        self.control
            .settings
            .send_modify(|settings| settings.delay = delay);
    }

    /// Holds every watch line from now on, the ones already waiting included, until
    /// [`resume`](Self::resume): the informers behind the proxy see no event meanwhile.
    pub fn stall(&self) {
        self.control
            .settings
            .send_modify(|settings| settings.stalled = true);
    }

    /// Releases the lines held since [`stall`](Self::stall), in order, each at its release
    /// time or at once if that has passed, and forwards the lines to come as before.
    pub fn resume(&self) {
        self.control
            .settings
            .send_modify(|settings| settings.stalled = false);
    }

    /// Whether [`stall`](Self::stall) holds the lines.
    pub fn is_stalled(&self) -> bool {
        self.control.settings.borrow().stalled
    }

    /// How many watch lines have been forwarded to the proxy's clients.
    pub fn lines_forwarded(&self) -> u64 {
        self.control.forwarded.load(Ordering::SeqCst)
    }

    /// How many watch lines have arrived from the API server and wait to be forwarded (for
    /// their release time, or for [`resume`](Self::resume)).
    pub fn lines_held(&self) -> u64 {
        self.control.held.load(Ordering::SeqCst)
    }

    /// How many watches the proxy forwards now; one ends when the API server ends it, when
    /// its client hangs up, or when the proxy is dropped.
    pub fn open_watches(&self) -> u64 {
        self.control.watches.load(Ordering::SeqCst)
    }
}

/// What the proxy's owner changes while it runs, watched by every forwarding watch.
#[derive(Clone, Copy, Debug)]
struct Settings {
    delay: Duration,
    stalled: bool,
}

/// The state a [`WatchDelay`] shares with its tasks.
#[derive(Debug)]
struct Control {
    settings: watch::Sender<Settings>,
    forwarded: AtomicU64,
    held: AtomicU64,
    watches: AtomicU64,
    stop: CancellationToken,
}

/// The answer's body: the API server's own, or the delayed lines of a watch.
type ProxyBody = Either<kube::client::Body, LineBody>;

/// The proxy's configuration: the env's, pointed at the proxy and without credentials or TLS.
fn proxy_config(env: &kube::Config, addr: SocketAddr) -> kube::Config {
    // A socket address is always an authority; the fallback only keeps this free of panics.
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(addr.to_string())
        .path_and_query("/")
        .build()
        .unwrap_or_default();
    let mut config = kube::Config::new(uri);
    config.default_namespace.clone_from(&env.default_namespace);
    config.connect_timeout = env.connect_timeout;
    config.read_timeout = env.read_timeout;
    config.write_timeout = env.write_timeout;
    config
}

/// Accepts connections until the proxy is dropped; dropping the set of connections then ends
/// the ones still open.
async fn serve(listener: TcpListener, control: Arc<Control>, upstream: kube::Client) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = control.stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(
                        stream,
                        Arc::clone(&control),
                        upstream.clone(),
                    ));
                }
                Err(error) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::debug!(%error, "watch-delay proxy: accept failed");
                    tokio::select! {
                        () = control.stop.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves one client connection (HTTP/1.1, keep-alive) until the client closes it.
async fn serve_connection(stream: TcpStream, control: Arc<Control>, upstream: kube::Client) {
    let service = hyper::service::service_fn(move |request| {
        let control = Arc::clone(&control);
        let upstream = upstream.clone();
        async move { Ok::<_, Infallible>(forward(&control, &upstream, request).await) }
    });
    if let Err(error) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%error, "watch-delay proxy: connection ended");
    }
}

/// Forwards one request; what fails on the way is a `502` with a `Status` saying why, so a
/// kube client reports it as an API error.
async fn forward(
    control: &Arc<Control>,
    upstream: &kube::Client,
    request: Request<Incoming>,
) -> Response<ProxyBody> {
    match try_forward(control, upstream, request).await {
        Ok(response) => response,
        Err(message) => {
            tracing::debug!(%message, "watch-delay proxy: could not forward");
            bad_gateway(&message)
        }
    }
}

async fn try_forward(
    control: &Arc<Control>,
    upstream: &kube::Client,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, String> {
    let (parts, body) = request.into_parts();
    let watch = is_watch(parts.uri.query());
    let body = tokio::time::timeout(FORWARD_TIMEOUT, body.collect())
        .await
        .map_err(|_| "the request's body did not arrive in time".to_owned())?
        .map_err(|error| format!("could not read the request's body: {error}"))?
        .to_bytes();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let mut outgoing = Request::builder().method(parts.method).uri(target);
    for name in [CONTENT_TYPE, ACCEPT] {
        for value in parts.headers.get_all(&name) {
            outgoing = outgoing.header(&name, value);
        }
    }
    let outgoing = outgoing
        .body(kube::client::Body::from(body))
        .map_err(|error| format!("could not build the request: {error}"))?;
    let response = tokio::time::timeout(FORWARD_TIMEOUT, upstream.send(outgoing))
        .await
        .map_err(|_| "the api server did not answer in time".to_owned())?
        .map_err(|error| format!("the api server could not be reached: {error}"))?;

    let (parts, body) = response.into_parts();
    let mut answer = Response::builder().status(parts.status);
    if let Some(content_type) = parts.headers.get(CONTENT_TYPE) {
        answer = answer.header(CONTENT_TYPE, content_type);
    }
    // A refused watch (a 410, a 422) is an answer, not an event: it goes back at once.
    let body = if watch && parts.status.is_success() {
        // A protobuf watch (`application/vnd.kubernetes.protobuf;stream=watch`) sends
        // length-prefixed frames, each one event: delayed one by one like JSON's lines.
        let framed = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.contains("protobuf"));
        Either::Right(LineBody::start(Arc::clone(control), body, framed))
    } else {
        Either::Left(body)
    };
    answer
        .body(body)
        .map_err(|error| format!("could not build the answer: {error}"))
}

/// A `502 Bad Gateway` as the API server words its errors.
fn bad_gateway(message: &str) -> Response<ProxyBody> {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("watch-delay proxy: {message}"),
        "reason": "BadGateway",
        "code": StatusCode::BAD_GATEWAY.as_u16(),
    });
    let mut response = Response::new(Either::Left(kube::client::Body::from(
        status.to_string().into_bytes(),
    )));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Whether a query asks for a watch: `watch` set to a value Go's `strconv.ParseBool` takes as
/// true, as the API server reads it.
fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|query| {
        query.split('&').any(|pair| {
            matches!(
                pair.split_once('='),
                Some(("watch", "1" | "t" | "T" | "true" | "TRUE" | "True"))
            )
        })
    })
}

/// The body of a delayed watch: the lines its forwarding task releases. The task is the
/// body's: aborted when the body is dropped (its client gone, or its connection closed).
#[derive(Debug)]
struct LineBody {
    lines: mpsc::Receiver<Result<Bytes, kube::Error>>,
    _forwarding: AbortOnDropHandle<()>,
}

impl LineBody {
    /// Starts the task forwarding `upstream`'s lines and returns the body they go to.
    fn start<B>(control: Arc<Control>, upstream: B, framed: bool) -> Self
    where
        B: Body<Data = Bytes, Error = kube::Error> + Send + Unpin + 'static,
    {
        // A few lines in flight: the task holds the rest, with their release times.
        let (lines, receiver) = mpsc::channel(16);
        // Counted here, not in the task, so a watch is open as soon as its answer is.
        let open = OpenWatch::new(control);
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: the body holds it, aborted when the body is dropped"
        )]
        let forwarding = tokio::spawn(forward_lines(open, upstream, lines, framed));
        Self {
            lines: receiver,
            _forwarding: AbortOnDropHandle::new(forwarding),
        }
    }
}

/// A watch counted open, and the lines it holds: both uncounted when it is dropped, at the
/// end of its forwarding or with its task aborted.
struct OpenWatch {
    control: Arc<Control>,
    queue: VecDeque<Held>,
}

impl OpenWatch {
    fn new(control: Arc<Control>) -> Self {
        control.watches.fetch_add(1, Ordering::SeqCst);
        Self {
            control,
            queue: VecDeque::new(),
        }
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let held = self.queue.len() as u64;
        self.control.held.fetch_sub(held, Ordering::SeqCst);
        self.control.watches.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Body for LineBody {
    type Data = Bytes;
    type Error = kube::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, kube::Error>>> {
        self.lines
            .poll_recv(cx)
            .map(|line| line.map(|line| line.map(Frame::data)))
    }
}

/// A line read from the API server and when it may leave.
struct Held {
    line: Bytes,
    release: Instant,
}

/// Reads `upstream`'s lines as they come and sends each to `lines` at its release time, until
/// the API server ends the watch (and every held line has gone), the client hangs up, or the
/// proxy is dropped; then closes the watch counted by [`LineBody::start`].
async fn forward_lines<B>(
    mut open: OpenWatch,
    mut upstream: B,
    lines: mpsc::Sender<Result<Bytes, kube::Error>>,
    framed: bool,
) where
    B: Body<Data = Bytes, Error = kube::Error> + Unpin,
{
    let control = Arc::clone(&open.control);
    let mut settings = control.settings.subscribe();
    let mut splitter = LineSplitter {
        framed,
        ..LineSplitter::default()
    };
    let queue = &mut open.queue;
    let mut upstream_open = true;
    // An error that broke the API server's stream, passed on once the lines before it left.
    let mut broken = None;
    loop {
        let stalled = settings.borrow_and_update().stalled;
        if !upstream_open && queue.is_empty() {
            if let Some(error) = broken.take() {
                // The client sees its stream break, as it would have without the proxy.
                tokio::select! {
                    _ = lines.send(Err(error)) => {}
                    () = control.stop.cancelled() => {}
                }
            }
            break;
        }
        let next_release = queue.front().map(|held| held.release).filter(|_| !stalled);
        tokio::select! {
            () = control.stop.cancelled() => break,
            () = lines.closed() => break,
            frame = upstream.frame(), if upstream_open => {
                let arrived = Instant::now();
                let delay = control.settings.borrow().delay;
                upstream_open = matches!(frame, Some(Ok(_)));
                let arrived_lines: Vec<Bytes> = match frame {
                    Some(Ok(frame)) => frame
                        .into_data()
                        .map(|data| splitter.push(&data))
                        .unwrap_or_default(),
                    Some(Err(error)) => {
                        broken = Some(error);
                        splitter.finish().into_iter().collect()
                    }
                    None => splitter.finish().into_iter().collect(),
                };
                control.held.fetch_add(arrived_lines.len() as u64, Ordering::SeqCst);
                let release = arrived + delay;
                queue.extend(arrived_lines.into_iter().map(|line| Held { line, release }));
            }
            permit = async {
                if let Some(release) = next_release {
                    tokio::time::sleep_until(release).await;
                }
                lines.reserve().await
            }, if next_release.is_some() => {
                let Ok(permit) = permit else { break };
                if let Some(held) = queue.pop_front() {
                    permit.send(Ok(held.line));
                    control.held.fetch_sub(1, Ordering::SeqCst);
                    control.forwarded.fetch_add(1, Ordering::SeqCst);
                }
            }
            changed = settings.changed() => if changed.is_err() { break },
        }
    }
    // Closed before the body ends (`lines` is dropped after it).
    drop(open);
}

/// Cuts a byte stream into lines, each with its `\n`, however the stream's chunks fall.
#[derive(Debug, Default)]
struct LineSplitter {
    partial: Vec<u8>,
    /// Protobuf frames (a 4-byte big-endian length, then as many bytes) instead of lines.
    framed: bool,
}

impl LineSplitter {
    /// The lines (or frames, with their length prefixes) that `data` completes.
    fn push(&mut self, data: &Bytes) -> Vec<Bytes> {
        if self.framed {
            return self.push_frames(data);
        }
        let mut lines = Vec::new();
        let mut rest = data.clone();
        while let Some(end) = rest.iter().position(|&byte| byte == b'\n') {
            let line = rest.split_to(end + 1);
            if self.partial.is_empty() {
                lines.push(line);
            } else {
                self.partial.extend_from_slice(&line);
                lines.push(Bytes::from(std::mem::take(&mut self.partial)));
            }
        }
        self.partial.extend_from_slice(&rest);
        lines
    }

    fn push_frames(&mut self, data: &Bytes) -> Vec<Bytes> {
        self.partial.extend_from_slice(data);
        let mut frames = Vec::new();
        let mut start = 0;
        while let Some(prefix) = self.partial.get(start..start + 4) {
            let length = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
            let end = start + 4 + length;
            if self.partial.len() < end {
                break;
            }
            frames.push(Bytes::copy_from_slice(&self.partial[start..end]));
            start = end;
        }
        self.partial.drain(..start);
        frames
    }

    /// What is left after the last `\n` (or the last whole frame), at the end of the stream.
    fn finish(&mut self) -> Option<Bytes> {
        (!self.partial.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.partial)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A stand-in for the API server's watch body: the chunks a test sends, as they come.
    struct Chunks(mpsc::UnboundedReceiver<Result<Bytes, kube::Error>>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = kube::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, kube::Error>>> {
            self.0
                .poll_recv(cx)
                .map(|chunk| chunk.map(|chunk| chunk.map(Frame::data)))
        }
    }

    fn control(delay: Duration) -> Arc<Control> {
        Arc::new(Control {
            settings: watch::Sender::new(Settings {
                delay,
                stalled: false,
            }),
            forwarded: AtomicU64::new(0),
            held: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            stop: CancellationToken::new(),
        })
    }

    /// A forwarding task on a stand-in body: the sender of its chunks and its body.
    fn forwarding(
        control: &Arc<Control>,
    ) -> (mpsc::UnboundedSender<Result<Bytes, kube::Error>>, LineBody) {
        let (chunks, receiver) = mpsc::unbounded_channel();
        (
            chunks,
            LineBody::start(Arc::clone(control), Chunks(receiver), false),
        )
    }

    /// The next line and how long after `start` it came.
    async fn next_line(body: &mut LineBody, start: Instant) -> (String, Duration) {
        let frame = body.frame().await.unwrap().unwrap();
        let line = frame.into_data().unwrap();
        (String::from_utf8_lossy(&line).into_owned(), start.elapsed())
    }

    fn chunk(text: &'static str) -> Result<Bytes, kube::Error> {
        Ok(Bytes::from_static(text.as_bytes()))
    }

    #[test]
    fn lines_are_cut_however_the_chunks_fall() {
        let mut splitter = LineSplitter::default();
        assert!(splitter.push(&Bytes::from_static(b"{\"a\":")).is_empty());
        assert_eq!(
            splitter.push(&Bytes::from_static(b"1}\n{\"b\":2}\n{\"c\"")),
            [&b"{\"a\":1}\n"[..], &b"{\"b\":2}\n"[..]]
        );
        assert_eq!(
            splitter.push(&Bytes::from_static(b":3}\n")),
            [&b"{\"c\":3}\n"[..]]
        );
        assert_eq!(splitter.finish(), None);
        assert!(splitter.push(&Bytes::from_static(b"tail")).is_empty());
        assert_eq!(splitter.finish().as_deref(), Some(&b"tail"[..]));
    }

    #[test]
    fn protobuf_frames_are_cut_however_the_chunks_fall() {
        let mut wire = Vec::new();
        for payload in [&b"ab\ncd"[..], b"", b"\n\n\n"] {
            wire.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
            wire.extend_from_slice(payload);
        }
        for size in 1..wire.len() {
            let mut splitter = LineSplitter {
                framed: true,
                ..LineSplitter::default()
            };
            let frames: Vec<Bytes> = wire
                .chunks(size)
                .flat_map(|chunk| splitter.push(&Bytes::copy_from_slice(chunk)))
                .collect();
            assert_eq!(frames.len(), 3, "chunks of {size}");
            assert_eq!(frames.concat(), wire, "chunks of {size}");
            assert_eq!(splitter.finish(), None);
        }
    }

    #[test]
    fn watch_is_read_as_the_api_server_reads_it() {
        assert!(is_watch(Some("watch=true")));
        assert!(is_watch(Some(
            "allowWatchBookmarks=true&resourceVersion=12&timeoutSeconds=290&watch=1"
        )));
        assert!(is_watch(Some("sendInitialEvents=true&watch=True")));
        assert!(!is_watch(Some("watch=false")));
        assert!(!is_watch(Some("watch=0&limit=500")));
        assert!(!is_watch(Some("allowWatchBookmarks=true")));
        assert!(!is_watch(None));
    }

    #[tokio::test(start_paused = true)]
    async fn each_line_leaves_its_delay_after_it_arrived_without_adding_up() {
        let control = control(Duration::from_millis(300));
        let (chunks, mut body) = forwarding(&control);
        let start = Instant::now();
        chunks.send(chunk("one\ntw")).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        chunks.send(chunk("o\n")).unwrap();
        assert_eq!(
            next_line(&mut body, start).await,
            ("one\n".into(), Duration::from_millis(300))
        );
        assert_eq!(
            next_line(&mut body, start).await,
            ("two\n".into(), Duration::from_millis(400))
        );
        assert_eq!(control.forwarded.load(Ordering::SeqCst), 2);
        assert_eq!(control.held.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_delay_applies_to_the_lines_that_arrive_after_it() {
        let control = control(Duration::from_millis(300));
        let (chunks, mut body) = forwarding(&control);
        let start = Instant::now();
        chunks.send(chunk("slow\n")).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        control.settings.send_modify(|s| s.delay = Duration::ZERO);
        chunks.send(chunk("fast\n")).unwrap();
        // The later line waits for the one before it: lines keep their order.
        assert_eq!(
            next_line(&mut body, start).await,
            ("slow\n".into(), Duration::from_millis(300))
        );
        assert_eq!(
            next_line(&mut body, start).await,
            ("fast\n".into(), Duration::from_millis(300))
        );
        chunks.send(chunk("now\n")).unwrap();
        assert_eq!(
            next_line(&mut body, start).await,
            ("now\n".into(), Duration::from_millis(300))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_holds_every_line_until_resumed_then_releases_them_in_order() {
        let control = control(Duration::from_millis(100));
        let (chunks, mut body) = forwarding(&control);
        let start = Instant::now();
        control.settings.send_modify(|s| s.stalled = true);
        chunks.send(chunk("a\n")).unwrap();
        tokio::time::sleep(Duration::from_millis(950)).await;
        chunks.send(chunk("b\nc\n")).unwrap();
        let nothing = tokio::time::timeout(Duration::from_secs(1), body.frame()).await;
        assert!(nothing.is_err(), "a line left while stalled");
        assert_eq!(control.held.load(Ordering::SeqCst), 3);

        // At 1950 ms: a and b/c were due at 100 and 1050 ms, so all leave now.
        control.settings.send_modify(|s| s.stalled = false);
        for expected in ["a\n", "b\n", "c\n"] {
            assert_eq!(
                next_line(&mut body, start).await,
                (expected.into(), Duration::from_millis(1950))
            );
        }
        assert_eq!(control.held.load(Ordering::SeqCst), 0);
        assert_eq!(control.forwarded.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_watch_comes_after_its_held_lines() {
        let control = control(Duration::from_millis(200));
        let (chunks, mut body) = forwarding(&control);
        let start = Instant::now();
        chunks.send(chunk("last\nno newline")).unwrap();
        drop(chunks);
        assert_eq!(
            next_line(&mut body, start).await,
            ("last\n".into(), Duration::from_millis(200))
        );
        assert_eq!(
            next_line(&mut body, start).await,
            ("no newline".into(), Duration::from_millis(200))
        );
        assert!(body.frame().await.is_none());
        tokio::task::yield_now().await;
        assert_eq!(control.watches.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_hangs_up_ends_the_forwarding() {
        let control = control(Duration::from_secs(10));
        let (chunks, body) = forwarding(&control);
        chunks.send(chunk("held\n")).unwrap();
        crate::poll::until("the line held", Duration::from_secs(1), || {
            control.held.load(Ordering::SeqCst) == 1
        })
        .await;
        drop(body);
        crate::poll::until("the forwarding ended", Duration::from_secs(1), || {
            control.watches.load(Ordering::SeqCst) == 0
        })
        .await;
        assert_eq!(control.held.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_proxy_ends_the_forwarding() {
        let control = control(Duration::from_secs(10));
        let (_chunks, _body) = forwarding(&control);
        crate::poll::until("the forwarding started", Duration::from_secs(1), || {
            control.watches.load(Ordering::SeqCst) == 1
        })
        .await;
        control.stop.cancel();
        crate::poll::until("the forwarding ended", Duration::from_secs(1), || {
            control.watches.load(Ordering::SeqCst) == 0
        })
        .await;
    }
}
