//! [`Cluster`]: one engaged member cluster (its client and its cache), and the observer of
//! its API server's answers.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use http::Method;
use rudder_cache::Cache;
use rudder_client::layers::{Answer, Observer};
use tokio_util::sync::CancellationToken;

use crate::metrics::{CLUSTER_HEALTHY, REQUEST_FAILURES_TOTAL};

/// One member cluster while it is engaged on this replica: its name, a client for its API
/// server and a cache of its own (informers started by the controllers that serve it).
/// Cloning gives another handle; the cache stops when the fleet disengages the cluster.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    kube: kube::Client,
    cache: Cache,
    token: CancellationToken,
    health: Arc<Health>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.inner.name)
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster called `name` reached with `kube` (built with `health` observing its
    /// answers), with a cache built by `cache`.
    pub(crate) fn new(
        name: Arc<str>,
        kube: kube::Client,
        health: Arc<Health>,
        cache: impl FnOnce(kube::Client, &CancellationToken) -> Cache,
    ) -> Self {
        let token = CancellationToken::new();
        let cache = cache(kube.clone(), &token);
        Self {
            inner: Arc::new(Inner {
                name,
                kube,
                cache,
                token,
                health,
            }),
        }
    }

    /// The cluster's name, as its provider announced it.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub(crate) fn name_arc(&self) -> Arc<str> {
        Arc::clone(&self.inner.name)
    }

    /// A client for the cluster's API server (counted in `rest_client_requests_total`
    /// under its host, and in the fleet's health metrics).
    pub fn kube(&self) -> &kube::Client {
        &self.inner.kube
    }

    /// The cluster's cache: informers of this cluster only.
    pub fn cache(&self) -> &Cache {
        &self.inner.cache
    }

    /// What the cluster's API server's last answer said.
    pub fn health(&self) -> ClusterHealth {
        self.inner.health.state()
    }

    /// Records a request that got no answer in time (the fleet's probe, past its timeout): a
    /// failure like a refused connection, since no answer reaches the health layer.
    pub(crate) fn record_unanswered(&self) {
        self.inner.health.record(ClusterHealth::Unreachable);
    }

    /// Cancelled when the cluster is stopped (disengaged).
    pub(crate) fn stopped(&self) -> CancellationToken {
        self.inner.token.clone()
    }

    /// Stops the cache's informers and waits for their tasks.
    pub(crate) async fn stop(&self) {
        self.inner.token.cancel();
        self.inner.cache.stop().await;
    }
}

impl rudder_builder::declaration::Place for Cluster {
    fn cache(&self) -> &Cache {
        Cluster::cache(self)
    }
}

impl rudder_builder::declaration::Member for Cluster {
    fn name(&self) -> &str {
        Cluster::name(self)
    }

    fn kube(&self) -> &kube::Client {
        Cluster::kube(self)
    }

    fn cache(&self) -> &Cache {
        Cluster::cache(self)
    }
}

/// What a member cluster's API server's last answer said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterHealth {
    /// No request answered yet.
    Unknown,
    /// The last request got an answer that is not one of the failures below.
    Healthy,
    /// No answer: connection refused, TLS failure, timeout.
    Unreachable,
    /// 401: the credentials are not (or no longer) accepted.
    Unauthorized,
    /// 403: the identity may not do what was asked (RBAC revoked or short).
    Forbidden,
    /// 5xx: the server failed.
    ServerError,
}

impl ClusterHealth {
    /// The `reason` label of a failure (`None` for `Healthy` and `Unknown`).
    pub fn reason(self) -> Option<&'static str> {
        match self {
            Self::Unknown | Self::Healthy => None,
            Self::Unreachable => Some("unreachable"),
            Self::Unauthorized => Some("unauthorized"),
            Self::Forbidden => Some("forbidden"),
            Self::ServerError => Some("server_error"),
        }
    }

    /// Whether the last answer was a failure.
    pub fn is_failing(self) -> bool {
        self.reason().is_some()
    }

    fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Healthy,
            2 => Self::Unreachable,
            3 => Self::Unauthorized,
            4 => Self::Forbidden,
            5 => Self::ServerError,
            _ => Self::Unknown,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Self::Unknown => 0,
            Self::Healthy => 1,
            Self::Unreachable => 2,
            Self::Unauthorized => 3,
            Self::Forbidden => 4,
            Self::ServerError => 5,
        }
    }
}

/// The health of one member cluster, updated by every answer its client gets.
pub(crate) struct Health {
    cluster: Arc<str>,
    state: AtomicU8,
}

impl Health {
    pub(crate) fn new(cluster: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            cluster,
            state: AtomicU8::new(ClusterHealth::Unknown.as_u8()),
        })
    }

    pub(crate) fn state(&self) -> ClusterHealth {
        ClusterHealth::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Records one answer (or a request unanswered in time): counts a failure, and logs
    /// when the cluster starts failing and when it answers again (once per streak, not per
    /// request nor per change of reason, so a cluster that is down does not flood the log).
    pub(crate) fn record(&self, now: ClusterHealth) {
        let cluster = self.cluster.to_string();
        if let Some(reason) = now.reason() {
            metrics::counter!(REQUEST_FAILURES_TOTAL, "cluster" => cluster.clone(), "reason" => reason)
                .increment(1);
        }
        let before = ClusterHealth::from_u8(self.state.swap(now.as_u8(), Ordering::Relaxed));
        if before == now {
            return;
        }
        metrics::gauge!(CLUSTER_HEALTHY, "cluster" => cluster.clone()).set(if now.is_failing() {
            0.0
        } else {
            1.0
        });
        match (before.reason(), now.reason()) {
            (None, Some(reason)) => tracing::warn!(
                cluster = %cluster,
                reason,
                "a member cluster's API server is failing; only its own keys are affected"
            ),
            (Some(was), Some(reason)) => {
                tracing::debug!(cluster = %cluster, was, reason, "a failing member cluster's API server fails otherwise");
            }
            (Some(_), None) => {
                tracing::info!(cluster = %cluster, "a member cluster's API server answers again");
            }
            (None, None) => {}
        }
    }
}

/// The member's health sees every answer of the member's client: an observer in the layer
/// built into that client's stack (one request buffer for the counting and the health).
impl Observer for Health {
    fn observe(&self, _: &Method, answer: Answer) {
        self.record(match answer {
            Answer::Status(status) => match status.as_u16() {
                401 => ClusterHealth::Unauthorized,
                403 => ClusterHealth::Forbidden,
                500..=599 => ClusterHealth::ServerError,
                _ => ClusterHealth::Healthy,
            },
            Answer::None => ClusterHealth::Unreachable,
        });
    }
}
