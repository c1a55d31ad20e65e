//! [`Provider`]: what announces member clusters to a fleet, and [`Announcer`], how it does.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use rudder_core::{BoxError, Shutdown};
use tokio::sync::mpsc;

/// A source of member clusters: it tells the fleet which clusters exist, by name, with the
/// client configuration to reach each, and when one goes away.
///
/// A provider runs from the moment its fleet starts (when the manager starts) until the
/// fleet's shutdown fires, announcing through the [`Announcer`] it is given. Announcing a
/// name again with a new configuration (a rotated kubeconfig) replaces the cluster: the fleet
/// disengages the old one and engages the new. A provider that returns an error is logged
/// and counted (`rudder_fleet_provider_errors_total`) and run again after a backoff (1 s
/// doubling to 60 s, each wait jittered up to twice as long); the clusters it announced
/// stay as they are meanwhile.
///
/// The built-in providers: [`StaticClusters`](crate::StaticClusters),
/// [`KubeconfigDir`](crate::KubeconfigDir),
/// [`KubeconfigSecrets`](crate::KubeconfigSecrets),
/// [`ClusterApiClusters`](crate::ClusterApiClusters) and
/// [`ClusterProfiles`](crate::ClusterProfiles).
pub trait Provider: Send + Sync + 'static {
    /// The provider's name, for logs and the `provider` label.
    fn name(&self) -> String;

    /// What the provider needs on the home cluster (the manager records it when the fleet is
    /// built); nothing by default.
    fn permissions(&self) -> rudder_manager::rbac::Permissions {
        rudder_manager::rbac::Permissions::new()
    }

    /// Announces clusters through `clusters` until `shutdown` fires (then returns `Ok`).
    fn run(
        &self,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// What a provider says about one cluster.
pub(crate) enum Announcement {
    /// The cluster `name` exists and is reached with `config`.
    Engage {
        name: String,
        config: Box<kube::Config>,
        provider: Arc<str>,
    },
    /// The cluster `name` is gone.
    Disengage { name: String, provider: Arc<str> },
}

/// A provider's handle on its fleet: [`engage`](Self::engage) and
/// [`disengage`](Self::disengage). Cloning gives another handle.
#[derive(Clone)]
pub struct Announcer {
    tx: mpsc::UnboundedSender<Announcement>,
    provider: Arc<str>,
}

impl fmt::Debug for Announcer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Announcer")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl Announcer {
    pub(crate) fn new(tx: mpsc::UnboundedSender<Announcement>, provider: &str) -> Self {
        Self {
            tx,
            provider: Arc::from(provider),
        }
    }

    /// Says the cluster `name` exists and is reached with `config`. A name already
    /// announced is replaced (the fleet disengages the old cluster, then engages this one);
    /// a provider should announce a name again only when its configuration changed.
    ///
    /// The name labels the cluster's metrics and logs and is what
    /// [`Context::cluster`](rudder_core::Context::cluster) says: a DNS label is best.
    pub fn engage(&self, name: impl Into<String>, config: kube::Config) {
        // The fleet is gone only after its shutdown, when providers should stop anyway.
        let _ = self.tx.send(Announcement::Engage {
            name: name.into(),
            config: Box::new(config),
            provider: Arc::clone(&self.provider),
        });
    }

    /// Says the cluster `name` is gone: the fleet disengages it (stops its controllers and
    /// informers, drops its queued keys). Unknown names are ignored.
    pub fn disengage(&self, name: impl Into<String>) {
        let _ = self.tx.send(Announcement::Disengage {
            name: name.into(),
            provider: Arc::clone(&self.provider),
        });
    }
}
