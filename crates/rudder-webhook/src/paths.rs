//! Webhook paths by controller-runtime's conventions, so manifests written for Go
//! operators fit.

use kube::core::Resource;

/// The one path conversions are served at.
pub const CONVERT_PATH: &str = "/convert";

/// `/mutate-<group with dots as dashes>-<version>-<kind lowercased>`, as controller-runtime
/// names a defaulting webhook's path. The core group is empty, so a Pod's is
/// `/mutate--v1-pod`.
pub fn mutate_path<K: Resource<DynamicType = ()>>() -> String {
    path_for("mutate", &K::group(&()), &K::version(&()), &K::kind(&()))
}

/// `/validate-<group with dots as dashes>-<version>-<kind lowercased>`, as
/// controller-runtime names a validating webhook's path (`/validate--v1-pod` for a Pod).
pub fn validate_path<K: Resource<DynamicType = ()>>() -> String {
    path_for("validate", &K::group(&()), &K::version(&()), &K::kind(&()))
}

/// `/<prefix>-<group with dots as dashes>-<version>-<kind lowercased>`, for kinds known
/// only at run time.
pub fn path_for(prefix: &str, group: &str, version: &str, kind: &str) -> String {
    format!(
        "/{prefix}-{}-{version}-{}",
        group.replace('.', "-"),
        kind.to_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn paths_follow_controller_runtime() {
        assert_eq!(mutate_path::<Pod>(), "/mutate--v1-pod");
        assert_eq!(
            validate_path::<Deployment>(),
            "/validate-apps-v1-deployment"
        );
        assert_eq!(
            path_for("mutate", "chaos.example.com", "v1alpha1", "ChaosPod"),
            "/mutate-chaos-example-com-v1alpha1-chaospod"
        );
    }
}
