//! [`TestNamespace`]: a fresh namespace per test, so tests sharing one control plane do not
//! see each other's objects.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::env::TestEnv;
use crate::error::{Error, Result};

/// The label every [`TestNamespace`] carries, with the namespace's name as its value.
/// [`TestNamespace::install_webhooks`] scopes webhooks to the namespace with it.
pub const NAMESPACE_LABEL: &str = "envtest.rudder.rs/namespace";

/// A namespace created for one test, with a client made on the test's own runtime.
///
/// It carries the label [`NAMESPACE_LABEL`]` = <its name>`, which
/// [`install_webhooks`](Self::install_webhooks) uses to scope webhooks to it (Kubernetes
/// before 1.21 has no automatic `kubernetes.io/metadata.name` label).
///
/// The namespace is not deleted on drop (that would need a runtime that may already be gone);
/// the control plane's data is thrown away with it. Call [`delete`](Self::delete) to delete it
/// earlier.
#[derive(Clone)]
pub struct TestNamespace {
    name: String,
    client: kube::Client,
    pub(crate) config: kube::Config,
    pub(crate) webhook_timeout: Duration,
    pub(crate) env_dir: PathBuf,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestNamespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client for the control plane (cluster admin), whose default namespace is this one.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// An [`Api`] for a namespaced kind in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Asks the API server to delete the namespace. Its objects go only when a controller
    /// manager runs ([`TestEnvBuilder::controller_manager`](crate::TestEnvBuilder::controller_manager)).
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the request fails.
    pub async fn delete(&self) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.delete(&self.name, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|source| Error::Kube {
                context: format!("delete namespace {}", self.name),
                source,
            })
    }
}

impl TestEnv {
    /// Creates a namespace named after `hint` (typically the test's name) plus a number that
    /// makes it unique, and returns it with a client made on the current runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if the client cannot be built or the namespace not created.
    pub async fn namespace(&self, hint: &str) -> Result<TestNamespace> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = namespace_name(hint, n);
        let client = self.client()?;
        let api: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(NAMESPACE_LABEL.to_owned(), name.clone())])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .map_err(|source| Error::Kube {
                context: format!("create namespace {name}"),
                source,
            })?;
        let mut config = self.config().clone();
        config.default_namespace.clone_from(&name);
        let client = kube::Client::try_from(config.clone()).map_err(|source| Error::Kube {
            context: "build a client".to_owned(),
            source,
        })?;
        Ok(TestNamespace {
            name,
            client,
            config,
            webhook_timeout: self.webhook_timeout(),
            env_dir: self.dir().to_owned(),
        })
    }
}

/// A valid namespace name (an RFC 1123 label, at most 63 characters) from a free-form hint.
fn namespace_name(hint: &str, n: u64) -> String {
    let suffix = format!("-{n}");
    let mut base: String = hint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(63 - suffix.len());
    let base = base.trim_matches('-');
    let base = if base.is_empty() { "test" } else { base };
    format!("{base}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::namespace_name;

    #[test]
    fn namespace_names_are_valid_labels() {
        assert_eq!(namespace_name("creates_a_thing", 3), "creates-a-thing-3");
        assert_eq!(namespace_name("__", 0), "test-0");
        assert_eq!(namespace_name("Mod::Test", 12), "mod--test-12");
        let long = namespace_name(&"x".repeat(200), 123_456);
        assert!(long.len() <= 63);
        assert!(long.ends_with("-123456"));
    }
}
