//! [`KubeconfigSecrets`]: one member cluster per labelled kubeconfig Secret in a namespace
//! of the home cluster.

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rudder_cache::watch::{self as engine, Event};
use rudder_core::{BoxError, Shutdown};
use rudder_manager::rbac::{Permissions, RuleScope, Verb};

use super::{config_from_bytes, fingerprint, kubeconfig_bytes, unlisted};
use crate::provider::{Announcer, Provider};

/// The label that marks a kubeconfig Secret by default (multicluster-runtime's convention).
pub const DEFAULT_SECRET_LABEL: &str = "sigs.k8s.io/multicluster-runtime-kubeconfig=true";

/// The key of the Secret's data that holds the kubeconfig by default.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// One member cluster per Secret in a namespace of the home cluster (the manager's), selected
/// by label, named by the Secret's name, reached with the kubeconfig in one key of its data
/// (its current context): the convention multicluster-runtime's kubeconfig provider uses
/// ([`DEFAULT_SECRET_LABEL`], [`DEFAULT_KUBECONFIG_KEY`]); Cluster API's `<cluster>-kubeconfig`
/// Secrets keep theirs under `value` ([`key`](Self::key)), and
/// [`ClusterApiClusters`](crate::ClusterApiClusters) serves them only while their
/// `Cluster` is provisioned.
///
/// The Secrets are watched: a Secret created engages its cluster within the watch's latency,
/// a changed kubeconfig replaces it, a deleted Secret (or one whose label was removed)
/// disengages it. A Secret without the key, or whose kubeconfig does not parse, is logged at
/// warn and counted (`rudder_fleet_provider_errors_total`) once per version and changes
/// nothing. Needs `get`, `list` and `watch` on Secrets in the namespace, recorded on the
/// manager when the fleet is built.
#[derive(Clone)]
pub struct KubeconfigSecrets {
    client: Option<kube::Client>,
    namespace: String,
    selector: String,
    key: String,
}

impl std::fmt::Debug for KubeconfigSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeconfigSecrets")
            .field("namespace", &self.namespace)
            .field("selector", &self.selector)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl KubeconfigSecrets {
    /// The Secrets labelled [`DEFAULT_SECRET_LABEL`] in `namespace` of the home cluster,
    /// their kubeconfig under [`DEFAULT_KUBECONFIG_KEY`].
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            client: None,
            namespace: namespace.into(),
            selector: DEFAULT_SECRET_LABEL.to_owned(),
            key: DEFAULT_KUBECONFIG_KEY.to_owned(),
        }
    }

    /// Selects the Secrets by `selector` (a label selector) instead.
    #[must_use]
    pub fn selector(mut self, selector: impl Into<String>) -> Self {
        self.selector = selector.into();
        self
    }

    /// Reads the kubeconfig from the data key `key` instead.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Watches the Secrets with `client` instead of the manager's.
    #[must_use]
    pub fn client(mut self, client: kube::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// The client set with [`client`](Self::client), else `home`.
    pub(crate) fn resolve_client(&mut self, home: &kube::Client) {
        if self.client.is_none() {
            self.client = Some(home.clone());
        }
    }
}

impl Provider for KubeconfigSecrets {
    fn name(&self) -> String {
        format!("kubeconfig-secrets {}", self.namespace)
    }

    fn permissions(&self) -> Permissions {
        Permissions::new().resource(
            RuleScope::Namespace(self.namespace.clone()),
            "",
            "secrets",
            [Verb::Get, Verb::List, Verb::Watch],
        )
    }

    fn run(
        &self,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let provider = self.name();
        let key = self.key.clone();
        let client = self.client.clone();
        let namespace = self.namespace.clone();
        let selector = self.selector.clone();
        Box::pin(async move {
            let Some(client) = client else {
                return Err("the kubeconfig Secrets provider has no client".into());
            };
            let api: Api<Secret> = Api::namespaced(client, &namespace);
            let config = engine::Config::default().labels(&selector);
            let mut events = std::pin::pin!(engine::watch(api, config));
            // Per Secret name: the fingerprint of the kubeconfig last seen, and whether it
            // was announced.
            let mut seen: HashMap<String, (u64, bool)> = HashMap::new();
            // Names listed by the relist in progress (a set: each listed Secret is looked up
            // once at the relist's end).
            let mut listed: HashSet<String> = HashSet::new();
            loop {
                let event = tokio::select! {
                    event = events.next() => event,
                    _ = shutdown.stopped() => return Ok(()),
                };
                let Some(event) = event else {
                    return Ok(());
                };
                match event {
                    Ok(Event::Init) => listed.clear(),
                    Ok(Event::InitApply(secret)) => {
                        if let Some(name) = secret.metadata.name.clone() {
                            listed.insert(name);
                        }
                        apply(&secret, &key, &mut seen, &clusters, &provider).await;
                    }
                    Ok(Event::InitDone) => {
                        for name in unlisted(&seen, &listed) {
                            if let Some((_, true)) = seen.remove(&name) {
                                clusters.disengage(name);
                            }
                        }
                        listed.clear();
                    }
                    Ok(Event::Apply(secret)) => {
                        apply(&secret, &key, &mut seen, &clusters, &provider).await;
                    }
                    Ok(Event::Delete(secret)) => {
                        if let Some(name) = secret.metadata.name
                            && let Some((_, true)) = seen.remove(&name)
                        {
                            clusters.disengage(name);
                        }
                    }
                    Err(error) => {
                        // The engine retries with its backoff; clusters stay as they are.
                        tracing::warn!(%error, provider = %provider, "watching kubeconfig Secrets failed; retrying");
                        crate::metrics::provider_error(&provider);
                    }
                }
            }
        })
    }
}

/// Engages the cluster of `secret` if its kubeconfig is new or changed.
async fn apply(
    secret: &Secret,
    key: &str,
    seen: &mut HashMap<String, (u64, bool)>,
    clusters: &Announcer,
    provider: &str,
) {
    let Some(name) = secret.metadata.name.clone() else {
        return;
    };
    let Some(bytes) = kubeconfig_bytes(secret, key) else {
        let print = fingerprint(b"");
        if seen.get(&name).is_none_or(|(p, _)| *p != print) {
            tracing::warn!(cluster = %name, key, "a kubeconfig Secret has no kubeconfig under its key; the cluster is left as it was");
            crate::metrics::provider_error(provider);
            let announced = seen.get(&name).is_some_and(|(_, a)| *a);
            seen.insert(name, (print, announced));
        }
        return;
    };
    let print = fingerprint(&bytes);
    if seen.get(&name).is_some_and(|(p, _)| *p == print) {
        return;
    }
    let announced = seen.get(&name).is_some_and(|(_, a)| *a);
    match config_from_bytes(&bytes).await {
        Ok(config) => {
            clusters.engage(name.clone(), config);
            seen.insert(name, (print, true));
        }
        Err(error) => {
            tracing::warn!(cluster = %name, %error, "a kubeconfig Secret does not parse; the cluster is left as it was");
            crate::metrics::provider_error(provider);
            seen.insert(name, (print, announced));
        }
    }
}
