//! [`Options`]: where a server listens and the limits it holds every connection to.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The default bind address: loopback, any free port. Servers meant for other hosts (probes,
/// metrics, webhooks) set their own.
pub const DEFAULT_BIND_ADDRESS: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// The default cap on open connections.
///
/// Containers commonly start with a soft `RLIMIT_NOFILE` of 1024. A server capped at 512
/// leaves the other half to the rest of the process (API server connections, watches,
/// files) even while clients hold every connection it allows, and the cap is well above what
/// probes, Prometheus scrapes and an API server calling a webhook ever open (a few each).
/// At the cap a new client is still served: the connection idle longest is closed for it
/// ([At the cap](crate#at-the-cap)). Only while every connection has a request in
/// flight do clients wait in the kernel's listen backlog, holding no descriptor here: up to
/// the backlog's size ([`system_backlog`](crate::system_backlog), 4096 on a current Linux),
/// past which the kernel drops their SYNs and they retry after a second.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The default header read timeout: how long a client has to send a complete request head,
/// counted from the first byte of the request (for a new connection, from the moment it was
/// accepted). A real client sends its head in milliseconds; this tolerates slow networks.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The default idle timeout: a keep-alive connection with no request in flight and no byte of
/// a new one for this long is closed (controller-runtime's 90 s, which matches Go's HTTP
/// client, so clients usually close first).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The default handshake timeout: how long an [`Acceptor`](crate::Acceptor) (a TLS
/// handshake, say) may take to turn an accepted TCP stream into the stream HTTP is served on.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default body read timeout: how long a client has, from the end of a request's head, to
/// send the whole body. The API server gives a webhook call at most 30 s (`timeoutSeconds`),
/// so no caller of Rudder's servers needs longer; a client that trickles its body is answered
/// `408` and its connection closed.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default request body limit: 1 MiB, Go's `MaxHeaderBytes`-sized bound on what a probe
/// or metrics request could need. Webhooks raise it (Kubernetes sends up to about 3 MiB
/// objects, so controller-runtime's webhook allows 7 MiB).
pub const DEFAULT_MAX_BODY_SIZE: u64 = 1024 * 1024;

/// Where a server listens and how it bounds its clients. Every field has a default (the
/// `DEFAULT_*` constants); set the ones to change with the builder methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub(crate) bind_address: SocketAddr,
    pub(crate) max_connections: usize,
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) body_read_timeout: Duration,
    pub(crate) max_body_size: Option<u64>,
    pub(crate) http2: bool,
    pub(crate) listen_backlog: Option<u32>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            bind_address: DEFAULT_BIND_ADDRESS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            max_body_size: Some(DEFAULT_MAX_BODY_SIZE),
            http2: false,
            listen_backlog: None,
        }
    }
}

impl Options {
    /// The defaults, listening on `addr` (port 0 picks a free port).
    pub fn new(addr: SocketAddr) -> Self {
        Self::default().bind_address(addr)
    }

    /// Where to listen (default [`DEFAULT_BIND_ADDRESS`]).
    pub fn bind_address(mut self, addr: SocketAddr) -> Self {
        self.bind_address = addr;
        self
    }

    /// How many connections may be open at once (default [`DEFAULT_MAX_CONNECTIONS`]; at
    /// least 1). At the cap a new client takes the slot of the connection idle longest,
    /// which is closed; a request in flight is never cut, and while every connection has
    /// one the new client waits for one to finish.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How many connections the kernel may complete and queue before the server accepts
    /// them (default: the system's maximum, [`system_backlog`](crate::system_backlog), as
    /// Go's `net/http` listens; at least 1). The kernel caps it at its own maximum
    /// (`net.core.somaxconn` on Linux). A client arriving at a full queue has its SYN
    /// dropped and retries after a second.
    pub fn listen_backlog(mut self, backlog: u32) -> Self {
        self.listen_backlog = Some(backlog.max(1));
        self
    }

    /// The listen backlog a server bound with these options asks for: the configured one,
    /// or the system's maximum.
    pub fn backlog(&self) -> u32 {
        self.listen_backlog
            .unwrap_or_else(crate::listener::system_backlog)
    }

    /// How long a client has to send a complete request head (default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`]); the connection is closed when it has not.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a connection may wait with no request in flight (default
    /// [`DEFAULT_IDLE_TIMEOUT`]); it is closed after. A slow request in flight is not cut.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How long the acceptor's handshake may take (default [`DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long a client has, once a request's head is in, to send the whole body (default
    /// [`DEFAULT_BODY_READ_TIMEOUT`]). Past it the service's read of the body fails with
    /// [`BodyError::TimedOut`](crate::BodyError::TimedOut) and the client is answered
    /// `408 Request Timeout`, its connection closed.
    pub fn body_read_timeout(mut self, timeout: Duration) -> Self {
        self.body_read_timeout = timeout;
        self
    }

    /// The largest request body served, in bytes (default [`DEFAULT_MAX_BODY_SIZE`]); larger
    /// ones are answered `413 Payload Too Large`. `None` for no limit.
    pub fn max_body_size(mut self, max: Option<u64>) -> Self {
        self.max_body_size = max;
        self
    }

    /// Serves HTTP/2 on connections whose handshake agreed on it (TLS ALPN `h2`, see
    /// [`Acceptor::negotiated_http2`](crate::Acceptor::negotiated_http2)); HTTP/1.1 on the
    /// others. Off by default, as in controller-runtime since the HTTP/2 "rapid reset"
    /// attack (CVE-2023-44487); hyper bounds the streams a client may reset. The acceptor
    /// must also offer `h2` (rudder-webhook's `Tls::with_http2`). With HTTP/2 the header
    /// read timeout bounds the wait for the first request of a connection, and the idle
    /// timeout the waits between requests.
    #[cfg(feature = "http2")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http2")))]
    pub fn http2(mut self, enabled: bool) -> Self {
        self.http2 = enabled;
        self
    }

    /// Whether HTTP/2 is served where negotiated (always `false` without the `http2`
    /// feature).
    pub fn is_http2(&self) -> bool {
        self.http2
    }
}
