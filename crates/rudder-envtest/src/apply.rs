//! Server-side apply of manifests given as JSON objects, for real or as a dry run: what
//! `kubectl apply --server-side [--dry-run=server] -f` does with a rendered manifest.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;

use crate::env::TestEnv;
use crate::error::{Error, Result};

/// The field manager of every server-side apply rudder-envtest makes: [`TestEnv::apply`](crate::TestEnv::apply), the CRDs it installs and the webhook configurations.
pub const APPLY_FIELD_MANAGER: &str = "rudder-envtest";

impl TestEnv {
    /// Server-side applies every object in order, each resolved by discovery from its
    /// `apiVersion` and `kind` (so a CRD applied earlier in the list must be served before
    /// an object of its kind; a namespaced object without a namespace goes to the client's
    /// default namespace). With `dry_run`, the API server validates, defaults and
    /// admits each object (webhooks and RBAC included) without storing it.
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] naming the first object the API server refused (or whose kind it
    /// does not serve), with its answer.
    pub async fn apply(&self, objects: &[serde_json::Value], dry_run: bool) -> Result<()> {
        let client = self.client()?;
        for object in objects {
            let name = describe(object);
            let object: DynamicObject =
                serde_json::from_value(object.clone()).map_err(|source| Error::Kube {
                    context: format!("read {name}"),
                    source: kube::Error::SerdeError(source),
                })?;
            let types = object.types.clone().unwrap_or_default();
            let (group, version) = match types.api_version.split_once('/') {
                Some((group, version)) => (group, version),
                None => ("", types.api_version.as_str()),
            };
            let gvk = GroupVersionKind::gvk(group, version, &types.kind);
            let (resource, capabilities) =
                pinned_kind(&client, &gvk)
                    .await
                    .map_err(|source| Error::Kube {
                        context: format!("discover the kind of {name}"),
                        source,
                    })?;
            let api: Api<DynamicObject> = match (
                capabilities.scope == kube::discovery::Scope::Namespaced,
                object.metadata.namespace.as_deref(),
            ) {
                (true, Some(namespace)) => {
                    Api::namespaced_with(client.clone(), namespace, &resource)
                }
                (true, None) => Api::default_namespaced_with(client.clone(), &resource),
                (false, _) => Api::all_with(client.clone(), &resource),
            };
            let mut params = PatchParams::apply(APPLY_FIELD_MANAGER).force();
            if dry_run {
                params = params.dry_run();
            }
            let object_name = object.metadata.name.clone().unwrap_or_default();
            api.patch(&object_name, &params, &Patch::Apply(&object))
                .await
                .map_err(|source| Error::Kube {
                    context: format!("apply {name}{}", if dry_run { " (dry run)" } else { "" }),
                    source,
                })?;
        }
        Ok(())
    }
}

/// `Kind namespace/name` of a JSON object, for errors.
fn describe(object: &serde_json::Value) -> String {
    let field = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .unwrap_or("")
    };
    let namespace = field("/metadata/namespace");
    format!(
        "{} {}{}{}",
        field("/kind"),
        namespace,
        if namespace.is_empty() { "" } else { "/" },
        field("/metadata/name")
    )
}
