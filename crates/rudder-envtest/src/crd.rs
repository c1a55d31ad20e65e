//! Installing CustomResourceDefinitions and waiting until they are established and served.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize;

use crate::env::TestEnv;
use crate::error::{Error, Result};

/// Parses every CustomResourceDefinition in a YAML string (documents separated by `---`;
/// empty documents are skipped).
///
/// # Errors
///
/// [`Error::CrdYaml`] if a document is not a CustomResourceDefinition.
pub fn crds_from_yaml(yaml: &str) -> Result<Vec<CustomResourceDefinition>> {
    parse_documents(yaml, "a string")
}

/// Reads and parses every CustomResourceDefinition in a YAML file.
///
/// # Errors
///
/// [`Error::Io`] if the file cannot be read, [`Error::CrdYaml`] if it does not parse.
pub fn crds_from_file(path: impl AsRef<Path>) -> Result<Vec<CustomResourceDefinition>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        action: "read",
        path: path.to_owned(),
        source,
    })?;
    parse_documents(&text, &path.display().to_string())
}

fn parse_documents(yaml: &str, origin: &str) -> Result<Vec<CustomResourceDefinition>> {
    let mut crds = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(doc).map_err(|source| Error::CrdYaml {
            origin: origin.to_owned(),
            source,
        })?;
        if value.is_null() {
            continue;
        }
        let crd = serde_yaml::from_value(value).map_err(|source| Error::CrdYaml {
            origin: origin.to_owned(),
            source,
        })?;
        crds.push(crd);
    }
    Ok(crds)
}

impl TestEnv {
    /// Installs CRDs (server-side apply, so installing the same CRD again is harmless) and
    /// waits until each is established and its served versions appear in discovery, so a
    /// client can use them at once.
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the API server rejects a CRD; [`Error::CrdNotReady`] if one is not
    /// served within the builder's `crd_timeout` (30 s by default).
    pub async fn install_crds(
        &self,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Result<()> {
        apply_crds(&self.client()?, crds, self.crd_timeout()).await
    }

    /// Parses CRDs from YAML (see [`crds_from_yaml`]) and installs them as
    /// [`install_crds`](Self::install_crds) does.
    ///
    /// # Errors
    ///
    /// As [`crds_from_yaml`] and [`install_crds`](Self::install_crds).
    pub async fn install_crd_yaml(&self, yaml: &str) -> Result<()> {
        self.install_crds(crds_from_yaml(yaml)?).await
    }

    /// Reads CRDs from a YAML file (see [`crds_from_file`]) and installs them.
    ///
    /// # Errors
    ///
    /// As [`crds_from_file`] and [`install_crds`](Self::install_crds).
    pub async fn install_crd_file(&self, path: impl AsRef<Path>) -> Result<()> {
        self.install_crds(crds_from_file(path)?).await
    }
}

/// Applies CRDs and waits until each is established and served, as
/// [`TestEnv::install_crds`] documents.
pub(crate) async fn apply_crds(
    client: &kube::Client,
    crds: impl IntoIterator<Item = CustomResourceDefinition>,
    timeout: Duration,
) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(crate::APPLY_FIELD_MANAGER).force();
    let mut installed = Vec::new();
    for mut crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        // Fields the server owns would make the apply fail or fight with the server.
        crd.metadata.managed_fields = None;
        crd.metadata.resource_version = None;
        crd.status = None;
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .map_err(|source| Error::Kube {
                context: format!("apply CustomResourceDefinition {name}"),
                source,
            })?;
        installed.push(crd);
    }
    for crd in &installed {
        wait_until_served(&api, client, crd, timeout).await?;
    }
    Ok(())
}

async fn wait_until_served(
    api: &Api<CustomResourceDefinition>,
    client: &kube::Client,
    crd: &CustomResourceDefinition,
    timeout: Duration,
) -> Result<()> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let group = &crd.spec.group;
    let plural = &crd.spec.names.plural;
    let versions: Vec<&str> = crd
        .spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.as_str())
        .collect();
    let deadline = Instant::now() + timeout;
    let mut state;
    loop {
        state = match api.get_opt(&name).await {
            Ok(Some(current)) if is_established(&current) => {
                let mut missing = Vec::new();
                for version in &versions {
                    let served = client
                        .list_api_group_resources(&format!("{group}/{version}"))
                        .await
                        .is_ok_and(|list| list.resources.iter().any(|r| &r.name == plural));
                    if !served {
                        missing.push(format!("{plural}.{group}/{version}"));
                    }
                }
                if missing.is_empty() {
                    return Ok(());
                }
                format!("established, but discovery lacks {}", missing.join(", "))
            }
            Ok(Some(_)) => "not established yet".to_owned(),
            Ok(None) => "not found".to_owned(),
            Err(e) => format!("could not read it: {e}"),
        };
        if Instant::now() > deadline {
            return Err(Error::CrdNotReady {
                name,
                timeout,
                state,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conds| {
            conds
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TWO: &str = "
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  names: {kind: Gadget, plural: gadgets}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object}
";

    #[test]
    fn parses_multi_document_yaml_and_skips_empty_documents() {
        let crds = crds_from_yaml(TWO).unwrap();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(names, ["widgets.example.com", "gadgets.example.com"]);
    }

    #[test]
    fn a_document_that_is_no_crd_is_an_error() {
        let err = crds_from_yaml("kind: ConfigMap\nmetadata: {name: x}\n").unwrap_err();
        assert!(matches!(err, Error::CrdYaml { .. }), "{err}");
    }
}
