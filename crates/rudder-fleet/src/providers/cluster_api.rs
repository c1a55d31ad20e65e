//! [`ClusterApiClusters`]: one member cluster per provisioned Cluster API `Cluster` on the home
//! cluster, reached with its `<cluster>-kubeconfig` Secret.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject};
use rudder_core::{BoxError, Shutdown};
use rudder_manager::rbac::Permissions;

use super::joined::{JoinedKind, JoinedScope, member_name};
use crate::provider::{Announcer, Provider};

/// The label Cluster API puts on the Secrets it makes for a Cluster (its value is the
/// Cluster's name); the provider watches the Secrets that carry it.
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// The suffix of a Cluster's kubeconfig Secret's name, after the Cluster's.
const KUBECONFIG_SUFFIX: &str = "-kubeconfig";

/// One member cluster per Cluster API `Cluster` (`cluster.x-k8s.io`) on the home cluster, in
/// one namespace or in all, as multicluster-runtime's Cluster API provider has them.
///
/// A Cluster is engaged while it is provisioned and its kubeconfig Secret exists:
///
/// - *provisioned*: not being deleted, and its `status.phase` is `Provisioned`. A status
///   without a phase (a Cluster not written by Cluster API's own controller) counts as
///   provisioned once its control plane is: `status.initialization.controlPlaneInitialized`
///   (v1beta2) or `status.controlPlaneReady` (v1beta1) is `true`. A phase, when there is one,
///   decides: those two fields are never set back after provisioning, so a Cluster that is
///   `Deleting` or `Failed` still has them.
/// - *its kubeconfig Secret*: Cluster API's convention, the Secret `<cluster>-kubeconfig` in
///   the Cluster's namespace, the kubeconfig (its current context) under the key `value`.
///   Only Secrets labelled `cluster.x-k8s.io/cluster-name` are watched, as Cluster API labels
///   the Secrets it makes; [`secret_selector`](Self::secret_selector) chooses others (a
///   kubeconfig Secret made by hand).
///
/// The member is named `<namespace>/<name>` of its Cluster (the name multicluster-runtime
/// gives it). Both kinds are watched: a Cluster that becomes provisioned is engaged within
/// the watch's latency, a changed kubeconfig replaces the cluster, and a Cluster deleted, no
/// longer provisioned, or whose Secret is deleted is disengaged. A Secret without the key, or
/// whose kubeconfig does not parse, is logged at warn and counted
/// (`rudder_fleet_provider_errors_total`) once per version and changes nothing: a cluster
/// engaged from an earlier valid version stays. While the Cluster CRD is not served (the
/// server answers 404), the watch sees no Clusters: the members it announced are withdrawn,
/// and announced again once the CRD is served.
///
/// Needs `get`, `list` and `watch` on Clusters and on Secrets in the namespace (or cluster
/// wide), recorded on the manager when the fleet is built
/// ([`FleetBuilder::cluster_api`](crate::FleetBuilder::cluster_api)).
#[derive(Clone)]
pub struct ClusterApiClusters {
    scope: JoinedScope,
    version: String,
    secret_selector: String,
}

impl std::fmt::Debug for ClusterApiClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterApiClusters")
            .field("namespace", &self.scope.namespace)
            .field("version", &self.version)
            .field("secret_selector", &self.secret_selector)
            .finish_non_exhaustive()
    }
}

impl ClusterApiClusters {
    /// The Clusters (`cluster.x-k8s.io/v1beta2`) in `namespace` of the home cluster.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self::scoped(Some(namespace.into()))
    }

    /// The Clusters in every namespace of the home cluster.
    pub fn all_namespaces() -> Self {
        Self::scoped(None)
    }

    fn scoped(namespace: Option<String>) -> Self {
        Self {
            scope: JoinedScope::new(namespace),
            version: "v1beta2".to_owned(),
            secret_selector: CLUSTER_NAME_LABEL.to_owned(),
        }
    }

    /// Watches the Clusters at API version `version` of `cluster.x-k8s.io` (default
    /// `v1beta2`, which Cluster API serves from 1.11; `v1beta1` for older management
    /// clusters).
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Watches the Secrets selected by `selector` (a label selector; empty for every Secret
    /// of the namespace) instead of those labelled `cluster.x-k8s.io/cluster-name`. Only
    /// those named `<cluster>-kubeconfig` are read.
    #[must_use]
    pub fn secret_selector(mut self, selector: impl Into<String>) -> Self {
        self.secret_selector = selector.into();
        self
    }

    /// Watches the Clusters and Secrets with `client` instead of the manager's.
    #[must_use]
    pub fn client(mut self, client: kube::Client) -> Self {
        self.scope.client = Some(client);
        self
    }

    /// The client set with [`client`](Self::client), else `home`.
    pub(crate) fn resolve_client(&mut self, home: &kube::Client) {
        self.scope.resolve_client(home);
    }

    /// The Clusters' resource at the chosen version.
    fn resource(&self) -> ApiResource {
        ApiResource {
            group: "cluster.x-k8s.io".to_owned(),
            version: self.version.clone(),
            api_version: format!("cluster.x-k8s.io/{}", self.version),
            kind: "Cluster".to_owned(),
            plural: "clusters".to_owned(),
        }
    }
}

impl Provider for ClusterApiClusters {
    fn name(&self) -> String {
        self.scope.name("cluster-api")
    }

    fn permissions(&self) -> Permissions {
        self.scope.permissions(&self.resource())
    }

    fn run(
        &self,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let kind = JoinedKind {
            resource: self.resource(),
            what: "Cluster API Clusters",
            ready: provisioned,
            secret_selector: self.secret_selector.clone(),
            secret_member: kubeconfig_secret_member,
            key: "value".to_owned(),
        };
        self.scope
            .run(kind, "Cluster API", self.name(), clusters, shutdown)
    }
}

/// Whether a Cluster is provisioned, as [`ClusterApiClusters`] documents.
fn provisioned(cluster: &DynamicObject) -> bool {
    if cluster.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let status = &cluster.data["status"];
    match status["phase"].as_str() {
        Some(phase) => phase == "Provisioned",
        None => {
            status["initialization"]["controlPlaneInitialized"].as_bool() == Some(true)
                || status["controlPlaneReady"].as_bool() == Some(true)
        }
    }
}

/// The Cluster a `<cluster>-kubeconfig` Secret is for.
fn kubeconfig_secret_member(secret: &Secret) -> Option<String> {
    let name = secret.metadata.name.as_deref()?;
    let cluster = name.strip_suffix(KUBECONFIG_SUFFIX)?;
    (!cluster.is_empty()).then(|| member_name(secret.metadata.namespace.as_deref(), cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(status: serde_json::Value) -> DynamicObject {
        let mut object = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "east", "namespace": "fleet"},
        });
        object["status"] = status;
        serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_phase_decides_when_there_is_one() {
        assert!(provisioned(&cluster(
            serde_json::json!({"phase": "Provisioned"})
        )));
        assert!(!provisioned(&cluster(serde_json::json!({
            "phase": "Deleting",
            "initialization": {"controlPlaneInitialized": true},
        }))));
        assert!(!provisioned(&cluster(serde_json::json!({}))));
    }

    #[test]
    fn without_a_phase_an_initialized_control_plane_counts() {
        assert!(provisioned(&cluster(serde_json::json!({
            "initialization": {"controlPlaneInitialized": true},
        }))));
        assert!(provisioned(&cluster(
            serde_json::json!({"controlPlaneReady": true})
        )));
        assert!(!provisioned(&cluster(
            serde_json::json!({"controlPlaneReady": false})
        )));
    }

    #[test]
    fn only_kubeconfig_secrets_name_a_cluster() {
        let secret = |name: &str| Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("fleet".to_owned()),
                ..Default::default()
            },
            ..Secret::default()
        };
        assert_eq!(
            kubeconfig_secret_member(&secret("east-kubeconfig")).as_deref(),
            Some("fleet/east")
        );
        assert_eq!(kubeconfig_secret_member(&secret("east-ca")), None);
        assert_eq!(kubeconfig_secret_member(&secret("-kubeconfig")), None);
    }
}
