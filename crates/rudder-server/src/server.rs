//! [`Server`] and [`ServerHandle`]: binding, the accept loop with its backoff and connection
//! cap (shedding the connection idle longest for a new client), and the bounded graceful stop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Bytes;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

use crate::acceptor::{Acceptor, PlainTcp};
use crate::body::Body;
use crate::connection::{self, Limits, Signals};
use crate::listener;
use crate::options::Options;
use crate::service::{BoxError, HttpService};
use crate::shedding::{Registry, Shedding};

/// The first wait after an accept error (Go's `net/http`).
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest wait after accept errors in a row (Go's `net/http`).
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How often, at most, the accept loop logs that it is at the connection cap (with the
/// connections shed since its last such line): a flood logs a line every ten seconds, not
/// one per client.
const CAP_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a server could not start listening.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The address is in use, not local, or not permitted. Retrying helps only once whatever
    /// holds the address lets it go.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's answer (`AddrInUse`, `PermissionDenied`, ...).
        #[source]
        source: std::io::Error,
    },
}

/// A bound listener with its options, not yet serving: [`Server::bind`], then
/// [`serve`](Server::serve).
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    options: Options,
}

impl Server {
    /// Binds `options`' address and listens with its backlog ([`Options::backlog`]: the
    /// system's maximum unless configured). Nothing is served until [`serve`](Self::serve).
    pub async fn bind(options: Options) -> Result<Self, BindError> {
        let wanted = options.bind_address;
        let bound = listener::listen(wanted, options.backlog()).and_then(|listener| {
            let addr = listener.local_addr()?;
            Ok((listener, addr))
        });
        let (listener, addr) = bound.map_err(|source| BindError::Bind {
            addr: wanted,
            source,
        })?;
        Ok(Self {
            listener,
            addr,
            options,
        })
    }

    /// The address bound (with the port picked, when the options asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `service` over plain TCP until the returned handle is stopped (or dropped).
    ///
    /// Each request is handed to a clone of `service`, readied first. An error from the
    /// service is logged and answered `500`; the connection stays open.
    pub fn serve<S, B>(self, service: S) -> ServerHandle
    where
        S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.serve_with(PlainTcp, service)
    }

    /// Serves `service` on the streams `acceptor` makes of accepted TCP connections (a TLS
    /// handshake, say); otherwise as [`serve`](Self::serve).
    pub fn serve_with<A, S, B>(self, acceptor: A, service: S) -> ServerHandle
    where
        A: Acceptor,
        S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let stats = Arc::new(Stats::default());
        let registry = Arc::new(Registry::default());
        let accepting = CancellationToken::new();
        let signals = Signals {
            graceful: CancellationToken::new(),
            hard: CancellationToken::new(),
        };
        let connections = TaskTracker::new();
        let limits = Limits {
            header_read_timeout: self.options.header_read_timeout,
            idle_timeout: self.options.idle_timeout,
            handshake_timeout: self.options.handshake_timeout,
            body_read_timeout: self.options.body_read_timeout,
            max_body_size: self.options.max_body_size,
            http2: self.options.http2,
        };
        let accept_loop = AcceptLoop {
            listener: self.listener,
            cap: Cap {
                slots: Arc::new(Semaphore::new(self.options.max_connections)),
                registry: Arc::clone(&registry),
                log: CapLog::default(),
            },
            acceptor,
            service,
            limits,
            signals: signals.clone(),
            connections: connections.clone(),
            stats: Arc::clone(&stats),
            stop: accepting.clone(),
        };
        tracing::info!(addr = %self.addr, "serving");
        #[allow(
            clippy::disallowed_methods,
            reason = "owned: `ServerHandle::stop` joins it (a dropped handle ends it at once)"
        )]
        let task = tokio::spawn(accept_loop.run());
        ServerHandle {
            addr: self.addr,
            accepting,
            signals,
            connections,
            accept_task: Some(task),
            stats,
            registry,
        }
    }
}

/// A running server. [`stop`](Self::stop) it; dropping it closes everything at once.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    accepting: CancellationToken,
    signals: Signals,
    connections: TaskTracker,
    accept_task: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
    registry: Arc<Registry>,
}

/// How a [`ServerHandle::stop`] went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StopReport {
    /// Connections still open at the deadline, closed then (their requests cut).
    pub closed_at_deadline: usize,
}

impl ServerHandle {
    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accept errors so far (each followed by a backoff wait).
    pub fn accept_errors(&self) -> u64 {
        self.stats.accept_errors.load(Ordering::Relaxed)
    }

    /// Connections open now (including those in their handshake).
    pub fn open_connections(&self) -> usize {
        self.connections.len()
    }

    /// Connections closed so far at the connection cap to give their slot to a new client,
    /// each the one idle longest ([At the cap](crate#at-the-cap)).
    pub fn shed_connections(&self) -> u64 {
        self.registry.shed_count()
    }

    /// Stops the server and returns once every connection has ended.
    ///
    /// Stops accepting at once (the listener closes), asks every connection to finish its
    /// request in flight and close (idle connections close at once), and at `deadline`
    /// closes whatever is left. `None` waits for in-flight requests however long they take
    /// (each still bound by the server's timeouts while it waits for a client). The deadline
    /// is the caller's: the server runs no timer of its own for its stop.
    pub async fn stop(mut self, deadline: Option<Instant>) -> StopReport {
        self.accepting.cancel();
        if let Some(task) = self.accept_task.take() {
            // The loop ends at once on cancellation; a panic in it has nothing to hand on.
            let _ = task.await;
        }
        self.signals.graceful.cancel();
        self.connections.close();
        let finished = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, self.connections.wait())
                .await
                .is_ok(),
            None => {
                self.connections.wait().await;
                true
            }
        };
        let mut report = StopReport {
            closed_at_deadline: 0,
        };
        if !finished {
            report.closed_at_deadline = self.connections.len();
            tracing::warn!(
                addr = %self.addr,
                connections = report.closed_at_deadline,
                "connections still open at the stop deadline; closing them"
            );
            self.signals.hard.cancel();
            // Each connection's task ends as soon as it sees the signal: dropping hyper's
            // connection closes the socket.
            self.connections.wait().await;
        }
        tracing::info!(addr = %self.addr, "stopped");
        report
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        // A handle dropped without `stop` leaves nothing behind: the accept loop ends and
        // every connection closes.
        self.accepting.cancel();
        self.signals.graceful.cancel();
        self.signals.hard.cancel();
    }
}

#[derive(Debug, Default)]
struct Stats {
    accept_errors: AtomicU64,
}

struct AcceptLoop<A, S> {
    listener: TcpListener,
    cap: Cap,
    acceptor: A,
    service: S,
    limits: Limits,
    signals: Signals,
    connections: TaskTracker,
    stats: Arc<Stats>,
    stop: CancellationToken,
}

impl<A: Acceptor, S> AcceptLoop<A, S> {
    async fn run<B: 'static>(mut self)
    where
        S: HttpService<B>,
    {
        let mut backoff = Backoff::default();
        loop {
            let accepted = tokio::select! {
                () = self.stop.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            let tcp = match accepted {
                Ok((tcp, _peer)) => {
                    backoff.reset();
                    tcp
                }
                Err(error) if per_connection(&error) => {
                    // The failure belongs to one client that went away while queued; the
                    // next accept is unaffected.
                    tracing::debug!(%error, "accept failed for one connection");
                    continue;
                }
                Err(error) => {
                    self.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    let wait = backoff.next();
                    tracing::warn!(%error, retry_in = ?wait, "accept failed; backing off");
                    tokio::select! {
                        () = self.stop.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
            };
            // Accepted before a slot is found, so that a connection is shed only for a client
            // that is really there.
            let Some(permit) = self.cap.slot(&self.stop, &self.connections).await else {
                return;
            };
            // Small answers go out at once rather than waiting on Nagle's algorithm.
            let _ = tcp.set_nodelay(true);
            let serving = connection::serve(
                tcp,
                self.acceptor.clone(),
                self.service.clone(),
                self.limits,
                self.signals.clone(),
                self.cap.registry.register(),
            );
            self.connections.spawn(async move {
                serving.await;
                drop(permit);
            });
        }
    }
}

/// The connection cap: its slots, and the open connections to shed from when they are all
/// taken.
struct Cap {
    slots: Arc<Semaphore>,
    registry: Arc<Registry>,
    log: CapLog,
}

impl Cap {
    /// A slot for a client just accepted: a free one below the cap. At the cap, the
    /// connection idle longest is asked to close, and its slot goes to the new client once
    /// it has. While every connection has a request in flight nothing is shed: the new
    /// client waits (and nothing more is accepted) until one finishes or closes. `None` once
    /// `stop` is cancelled.
    async fn slot(
        &mut self,
        stop: &CancellationToken,
        open: &TaskTracker,
    ) -> Option<OwnedSemaphorePermit> {
        loop {
            if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
                return Some(permit);
            }
            let shedding = self.registry.shed_longest_idle();
            self.log
                .at_cap(shedding, open.len(), self.registry.shed_count());
            tokio::select! {
                () = stop.cancelled() => return None,
                permit = Arc::clone(&self.slots).acquire_owned() => return permit.ok(),
                // A connection went idle, or declined its shed: look again.
                () = self.registry.changed() => {}
            }
        }
    }
}

/// The accept loop's rate-limited account of being at the cap.
#[derive(Debug, Default)]
struct CapLog {
    last: Option<Instant>,
    shed_at_last: u64,
}

impl CapLog {
    fn at_cap(&mut self, shedding: Shedding, connections: usize, shed: u64) {
        let now = Instant::now();
        if self.last.is_some_and(|last| now < last + CAP_LOG_INTERVAL) {
            return;
        }
        self.last = Some(now);
        let shed_since_last_log = shed - self.shed_at_last;
        self.shed_at_last = shed;
        match shedding {
            Shedding::NoneIdle => tracing::warn!(
                connections,
                shed_since_last_log,
                "at the connection cap with a request in flight on every connection: \
                 a new client waits for one to finish"
            ),
            Shedding::Asked | Shedding::Pending => tracing::warn!(
                connections,
                shed_since_last_log,
                "at the connection cap: closing the connections idle longest to serve new clients"
            ),
        }
    }
}

/// Errors that concern one queued connection, not the listener.
fn per_connection(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
    )
}

/// Go's `net/http` accept backoff: 5 ms, doubling to 1 s, reset by a successful accept.
#[derive(Debug, Default)]
struct Backoff {
    last: Option<Duration>,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let wait = match self.last {
            None => ACCEPT_BACKOFF_MIN,
            Some(last) => (last * 2).min(ACCEPT_BACKOFF_MAX),
        };
        self.last = Some(wait);
        wait
    }

    fn reset(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_5ms_to_1s_and_resets() {
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..10).map(|_| backoff.next().as_millis() as u64).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        backoff.reset();
        assert_eq!(backoff.next(), ACCEPT_BACKOFF_MIN);
    }
}
