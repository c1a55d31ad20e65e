//! The manager's defaults and the option types its builder and its handle share.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use super::{Error, ManagerBuilder};

/// The default address of `/healthz` and `/readyz` (all interfaces: the kubelet probes the
/// pod's IP).
pub const DEFAULT_HEALTH_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8081);
/// The default address of `/metrics`.
pub const DEFAULT_METRICS_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);
/// How long `start` waits for the cache to sync, unless told otherwise.
pub const DEFAULT_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// How long runnables get to stop, unless told otherwise (controller-runtime's default).
pub const DEFAULT_GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(30);

/// How long the manager waits for runnables to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GracefulShutdown {
    /// Up to this long: the deadline handed to every runnable is the stop's start plus
    /// this; what still runs then is aborted and `start` reports [`Error::ShutdownTimeout`]
    /// naming it.
    After(Duration),
    /// Not at all: runnables are told to stop with a deadline of now (controllers cancel
    /// their reconciles' contexts at once) and whatever has not returned is aborted. That is
    /// what was asked for, so it is logged, not reported as an error.
    Immediately,
    /// As long as they take: runnables get no deadline (controllers never cancel their
    /// reconciles' contexts).
    Forever,
}

/// An extra handler on the metrics server ([`ManagerBuilder::metrics_extra_handler`]): the
/// request in, the response out, with its own status, headers and body.
pub type ExtraHandler = Arc<
    dyn Fn(
            http::Request<rudder_server::Body>,
        ) -> futures::future::BoxFuture<
            'static,
            http::Response<http_body_util::Full<hyper::body::Bytes>>,
        > + Send
        + Sync,
>;
