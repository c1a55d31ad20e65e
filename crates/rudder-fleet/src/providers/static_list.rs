//! [`StaticClusters`]: a fixed list of member clusters.

use futures::future::BoxFuture;
use rudder_core::{BoxError, Shutdown};

use crate::provider::{Announcer, Provider};

/// A fixed list of member clusters, each a name and a client configuration, announced when
/// the fleet starts and never withdrawn.
///
/// ```no_run
/// use rudder::multicluster::StaticClusters;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let east = kube::Config::infer().await?;
/// let clusters = StaticClusters::new().with("east", east);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct StaticClusters {
    clusters: Vec<(String, kube::Config)>,
}

impl std::fmt::Debug for StaticClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.clusters.iter().map(|(name, _)| name))
            .finish()
    }
}

impl StaticClusters {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the cluster `name`, reached with `config`.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, config: kube::Config) -> Self {
        self.clusters.push((name.into(), config));
        self
    }
}

impl Provider for StaticClusters {
    fn name(&self) -> String {
        "static".to_owned()
    }

    fn run(
        &self,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let list = self.clusters.clone();
        Box::pin(async move {
            for (name, config) in list {
                clusters.engage(name, config);
            }
            shutdown.stopped().await;
            Ok(())
        })
    }
}
