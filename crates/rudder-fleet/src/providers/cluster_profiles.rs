//! [`ClusterProfiles`]: one member cluster per healthy ClusterProfile (SIG-Multicluster's
//! Cluster Inventory API) on the home cluster, reached with the kubeconfig Secret its cluster
//! manager made for this consumer.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject};
use rudder_core::{BoxError, Shutdown};
use rudder_manager::rbac::Permissions;

use super::joined::{JoinedKind, JoinedScope, member_name};
use crate::provider::{Announcer, Provider};

/// The label that names the consumer a kubeconfig Secret is for.
const CONSUMER_LABEL: &str = "x-k8s.io/cluster-inventory-consumer";

/// The label that names the ClusterProfile a kubeconfig Secret is for.
const PROFILE_LABEL: &str = "x-k8s.io/cluster-profile";

/// The condition of a healthy ClusterProfile.
const HEALTHY: &str = "ControlPlaneHealthy";

/// One member cluster per `ClusterProfile` (`multicluster.x-k8s.io/v1alpha1`, SIG-Multicluster's
/// Cluster Inventory API, KEP-4322) on the home cluster, in one namespace or in all, with the
/// Secret-based credentials multicluster-runtime's cluster-inventory-api provider reads.
///
/// A profile is engaged while it is healthy and its credentials exist:
///
/// - *healthy*: not being deleted, and its `ControlPlaneHealthy` condition is `True`.
/// - *its credentials*: one Secret in the profile's namespace labelled
///   `x-k8s.io/cluster-inventory-consumer=<consumer>` (this operator's name as the cluster
///   manager knows it) and `x-k8s.io/cluster-profile=<profile>`, the kubeconfig (its current
///   context) under the key `Config`. Two such Secrets for one profile are an error (logged,
///   counted, the cluster left as it was), as they are for multicluster-runtime.
///
/// The member is named `<namespace>/<name>` of its profile. Both kinds are watched: a profile
/// that turns healthy is engaged within the watch's latency, a changed kubeconfig replaces the
/// cluster, and a profile deleted, no longer healthy, or whose Secret is deleted is
/// disengaged. A Secret without the key, or whose kubeconfig does not parse, is logged at
/// warn and counted (`rudder_fleet_provider_errors_total`) once per version and changes
/// nothing.
///
/// Not supported: credentials from `status.accessProviders` (or the deprecated
/// `status.credentialProviders`) with exec credential plugins (KEP-5339), and Secrets pushed
/// into a consumer's own namespace (labelled for the consumer) rather than the profile's.
///
/// Needs `get`, `list` and `watch` on ClusterProfiles and on Secrets in the namespace (or
/// cluster wide), recorded on the manager when the fleet is built
/// ([`FleetBuilder::cluster_profiles`](crate::FleetBuilder::cluster_profiles)).
#[derive(Clone)]
pub struct ClusterProfiles {
    scope: JoinedScope,
    consumer: String,
}

impl std::fmt::Debug for ClusterProfiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterProfiles")
            .field("namespace", &self.scope.namespace)
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

impl ClusterProfiles {
    /// The ClusterProfiles in `namespace` of the home cluster, with the Secrets made for
    /// `consumer` (a label value).
    pub fn new(namespace: impl Into<String>, consumer: impl Into<String>) -> Self {
        Self {
            scope: JoinedScope::new(Some(namespace.into())),
            consumer: consumer.into(),
        }
    }

    /// The ClusterProfiles in every namespace of the home cluster, with the Secrets made for
    /// `consumer`.
    pub fn all_namespaces(consumer: impl Into<String>) -> Self {
        Self {
            scope: JoinedScope::new(None),
            consumer: consumer.into(),
        }
    }

    /// Watches the profiles and Secrets with `client` instead of the manager's.
    #[must_use]
    pub fn client(mut self, client: kube::Client) -> Self {
        self.scope.client = Some(client);
        self
    }

    /// The client set with [`client`](Self::client), else `home`.
    pub(crate) fn resolve_client(&mut self, home: &kube::Client) {
        self.scope.resolve_client(home);
    }
}

/// The ClusterProfiles' resource.
fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile"),
        "clusterprofiles",
    )
}

impl Provider for ClusterProfiles {
    fn name(&self) -> String {
        self.scope.name("cluster-profiles")
    }

    fn permissions(&self) -> Permissions {
        self.scope.permissions(&resource())
    }

    fn run(
        &self,
        clusters: Announcer,
        shutdown: Shutdown,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        let kind = JoinedKind {
            resource: resource(),
            what: "ClusterProfiles",
            ready: healthy,
            secret_selector: format!("{CONSUMER_LABEL}={},{PROFILE_LABEL}", self.consumer),
            secret_member: profile_secret_member,
            key: "Config".to_owned(),
        };
        self.scope
            .run(kind, "ClusterProfile", self.name(), clusters, shutdown)
    }
}

/// Whether a profile is healthy, as [`ClusterProfiles`] documents.
fn healthy(profile: &DynamicObject) -> bool {
    if profile.metadata.deletion_timestamp.is_some() {
        return false;
    }
    profile.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"].as_str() == Some(HEALTHY) && c["status"].as_str() == Some("True")
            })
        })
}

/// The profile a Secret is for.
fn profile_secret_member(secret: &Secret) -> Option<String> {
    let profile = secret.metadata.labels.as_ref()?.get(PROFILE_LABEL)?;
    (!profile.is_empty()).then(|| member_name(secret.metadata.namespace.as_deref(), profile))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(conditions: serde_json::Value) -> DynamicObject {
        let mut object = serde_json::json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "east", "namespace": "fleet"},
        });
        object["status"]["conditions"] = conditions;
        serde_json::from_value(object).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn healthy_only_with_a_true_control_plane_condition() {
        let condition = |status: &str| {
            serde_json::json!([
                {"type": "Joined", "status": "True"},
                {"type": HEALTHY, "status": status},
            ])
        };
        assert!(healthy(&profile(condition("True"))));
        assert!(!healthy(&profile(condition("False"))));
        assert!(!healthy(&profile(condition("Unknown"))));
        assert!(!healthy(&profile(serde_json::json!([]))));
    }
}
