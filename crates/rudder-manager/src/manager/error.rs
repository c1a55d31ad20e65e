//! The errors of a manager's two entry points, [`ManagerBuilder::build`] and
//! [`Manager::start`].

use std::net::SocketAddr;
use std::time::Duration;

#[cfg(doc)]
use super::{Manager, ManagerBuilder};
use crate::leader_election::{ConfigError, Error as ElectionError};
use crate::runnable::BoxError;

/// Errors that end a manager's [`start`](Manager::start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The secure metrics server could not start (its certificate is missing or does not
    /// parse, or its address is taken); nothing else was started.
    #[cfg(feature = "webhook")]
    #[error("cannot start the secure metrics server on {addr}")]
    SecureMetrics {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: crate::server::SecureMetricsError,
    },
    /// A runnable failed; the manager stopped the others. Whether a restart helps depends on
    /// the runnable's error.
    #[error("{name} failed")]
    Runnable {
        /// The runnable's name.
        name: String,
        /// Its error.
        #[source]
        source: BoxError,
    },
    /// This replica lost its leader lease; its leader-only runnables were stopped. The
    /// process should exit (and be restarted by its Deployment), since another replica now
    /// leads and this one's in-memory state may be stale.
    #[error("leader election lost")]
    LeadershipLost,
    /// A server could not listen on its address (in use, or not permitted).
    #[error("cannot listen for {what} on {addr}")]
    Bind {
        /// `health probes` or `metrics`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Runnables were still running when the graceful-shutdown deadline passed; they were
    /// aborted. A controller here has a reconcile that did not return after its context was
    /// cancelled.
    #[error("runnables did not stop within {timeout:?}: {}", left.join(", "))]
    ShutdownTimeout {
        /// The graceful-shutdown timeout.
        timeout: Duration,
        /// The names of the runnables that were aborted.
        left: Vec<String>,
    },
    /// A runnable panicked; the manager stopped the others.
    #[error("{name} panicked: {message}")]
    Panicked {
        /// The runnable's name.
        name: String,
        /// The panic's message.
        message: String,
    },
    /// The webhook server could not start (its certificate is missing or does not parse,
    /// or its address is taken); nothing else was started.
    #[cfg(feature = "webhook")]
    #[error("cannot start the webhook server")]
    Webhook(#[source] rudder_webhook::StartError),
    /// The self-signed webhook certificates could not be read, created or renewed in their
    /// Secret ([`ManagerBuilder::self_signed_webhook_certificates`]: RBAC on Secrets, an
    /// unreachable API server); the webhook server was not started.
    #[cfg(feature = "webhook")]
    #[error("cannot load the self-signed webhook certificates")]
    Certificates(#[source] rudder_certs::Error),
    /// `start` was called twice.
    #[error("the manager was already started")]
    AlreadyStarted,
    /// The cache's informers did not sync within the cache-sync timeout (a type not served,
    /// missing RBAC, an unreachable API server); no runnable was started.
    #[error("the cache did not sync")]
    CacheSync(#[source] rudder_cache::SyncError),
    /// Leader election failed outright (not merely waiting for another leader).
    #[error("leader election failed")]
    LeaderElection(#[source] ElectionError),
}

/// Why a manager could not be built ([`ManagerBuilder::build`]); nothing was started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The Prometheus recorder could not be installed (another global `metrics` recorder
    /// was installed first: pass its handle with [`ManagerBuilder::metrics_handle`]).
    #[error("cannot install the Prometheus recorder")]
    Metrics(#[source] metrics_exporter_prometheus::BuildError),
    /// The leader-election settings are inconsistent; fix the configuration.
    #[error("invalid leader election configuration")]
    LeaderElectionConfig(#[source] ConfigError),
    /// [`SecureMetrics::self_signed`](crate::SecureMetrics::self_signed) needs
    /// [`ManagerBuilder::self_signed_webhook_certificates`] too.
    #[cfg(feature = "webhook")]
    #[error(
        "secure metrics are to use the self-signed certificates, but self_signed_webhook_certificates is not set"
    )]
    SecureMetricsWithoutSelfSigned,
}
