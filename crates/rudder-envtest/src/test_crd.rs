//! [`TestCrd`]: the CustomResourceDefinition a test needs for a custom kind of its own,
//! without writing its YAML: named kind and versions, any fields accepted.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceSubresourceStatus, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use kube::api::ObjectMeta;

/// A CRD for a test's own kind: `plural.group`, namespaced, served in every version given
/// (the first stored), whose `spec` and `status` take any fields.
///
/// Install it with [`TestEnv::install_crds`](crate::TestEnv::install_crds), which returns
/// once it is served. A test that pins a schema's validation writes that schema itself.
///
/// ```no_run
/// use rudder_envtest::{TestCrd, TestEnv};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let env = TestEnv::builder().shared().await?;
/// env.install_crds([TestCrd::new("example.com", "Widget", "widgets")
///     .status_subresource()
///     .build()])
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use = "a TestCrd is only a description until it is built"]
pub struct TestCrd {
    group: String,
    kind: String,
    plural: String,
    versions: Vec<String>,
    cluster_scoped: bool,
    status_subresource: bool,
}

impl TestCrd {
    /// The kind `kind` (resource `plural`) in `group`, namespaced, in version `v1` only.
    pub fn new(group: &str, kind: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            versions: vec!["v1".to_owned()],
            cluster_scoped: false,
            status_subresource: false,
        }
    }

    /// Served in these versions instead of `v1`; the first is the storage version.
    pub fn versions<S: Into<String>>(mut self, versions: impl IntoIterator<Item = S>) -> Self {
        self.versions = versions.into_iter().map(Into::into).collect();
        self
    }

    /// Cluster-scoped instead of namespaced.
    pub fn cluster_scoped(mut self) -> Self {
        self.cluster_scoped = true;
        self
    }

    /// With a `status` subresource: writes to the object leave its status alone, and
    /// `/status` writes only the status (so a status change does not bump the generation).
    pub fn status_subresource(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// The CustomResourceDefinition.
    pub fn build(self) -> CustomResourceDefinition {
        let any_fields = || JSONSchemaProps {
            type_: Some("object".to_owned()),
            x_kubernetes_preserve_unknown_fields: Some(true),
            ..JSONSchemaProps::default()
        };
        let schema = JSONSchemaProps {
            type_: Some("object".to_owned()),
            properties: Some(
                [
                    ("spec".to_owned(), any_fields()),
                    ("status".to_owned(), any_fields()),
                ]
                .into(),
            ),
            ..JSONSchemaProps::default()
        };
        let versions = self
            .versions
            .iter()
            .enumerate()
            .map(|(i, name)| CustomResourceDefinitionVersion {
                name: name.clone(),
                served: true,
                storage: i == 0,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema.clone()),
                }),
                subresources: self.status_subresource.then(|| CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                    ..CustomResourceSubresources::default()
                }),
                ..CustomResourceDefinitionVersion::default()
            })
            .collect();
        CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some(format!("{}.{}", self.plural, self.group)),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: self.group,
                names: CustomResourceDefinitionNames {
                    singular: Some(self.kind.to_lowercase()),
                    kind: self.kind,
                    plural: self.plural,
                    ..CustomResourceDefinitionNames::default()
                },
                scope: if self.cluster_scoped {
                    "Cluster"
                } else {
                    "Namespaced"
                }
                .to_owned(),
                versions,
                ..CustomResourceDefinitionSpec::default()
            },
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::TestCrd;

    #[test]
    fn names_versions_scope_and_subresource() {
        let crd = TestCrd::new("example.com", "Gizmo", "gizmos")
            .versions(["v2", "v1"])
            .status_subresource()
            .build();
        assert_eq!(crd.metadata.name.as_deref(), Some("gizmos.example.com"));
        assert_eq!(crd.spec.names.singular.as_deref(), Some("gizmo"));
        assert_eq!(crd.spec.scope, "Namespaced");
        let versions: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| {
                (
                    v.name.as_str(),
                    v.served,
                    v.storage,
                    v.subresources.is_some(),
                )
            })
            .collect();
        assert_eq!(
            versions,
            [("v2", true, true, true), ("v1", true, false, true)]
        );
        let cluster = TestCrd::new("example.com", "Gadget", "gadgets")
            .cluster_scoped()
            .build();
        assert_eq!(cluster.spec.scope, "Cluster");
        assert!(cluster.spec.versions[0].subresources.is_none());
    }
}
