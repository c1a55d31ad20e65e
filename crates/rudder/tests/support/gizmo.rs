//! Gizmo, a custom kind in two versions for the conversion tests: `spec.size` in v1 is
//! `spec.length` in v2, the hub and storage version; a negative size does not convert.

use kube::CustomResourceExt;
use rudder::webhook::{ConversionError, Convertible};

/// Version v1.
pub(crate) mod v1 {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A gizmo's size, in version v1.
    #[derive(kube::CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "convert.rudder.dev",
        version = "v1",
        kind = "Gizmo",
        namespaced
    )]
    pub(crate) struct GizmoSpec {
        pub(crate) size: i64,
    }
}

/// Version v2, the hub.
pub(crate) mod v2 {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// The same, renamed `length` in v2 (the hub and storage version).
    #[derive(kube::CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
    #[kube(
        group = "convert.rudder.dev",
        version = "v2",
        kind = "Gizmo",
        namespaced
    )]
    pub(crate) struct GizmoSpec {
        pub(crate) length: i64,
    }
}

impl Convertible<v2::Gizmo> for v1::Gizmo {
    fn to_hub(self) -> Result<v2::Gizmo, ConversionError> {
        if self.spec.size < 0 {
            return Err(ConversionError::new("a gizmo cannot have a negative size"));
        }
        Ok(v2::Gizmo {
            metadata: self.metadata,
            spec: v2::GizmoSpec {
                length: self.spec.size,
            },
        })
    }

    fn from_hub(hub: v2::Gizmo) -> Result<Self, ConversionError> {
        Ok(v1::Gizmo {
            metadata: hub.metadata,
            spec: v1::GizmoSpec {
                size: hub.spec.length,
            },
        })
    }
}

/// The Gizmo CRD, both versions, v2 stored.
pub(crate) fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    kube::core::crd::merge_crds(vec![v1::Gizmo::crd(), v2::Gizmo::crd()], "v2").unwrap()
}
