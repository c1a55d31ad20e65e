//! The built-in providers: a static list, a directory of kubeconfig files, kubeconfig
//! Secrets in a namespace of the home cluster, Cluster API Clusters and ClusterProfiles.

mod cluster_api;
mod cluster_profiles;
mod joined;
mod kubeconfig_dir;
mod kubeconfig_secrets;
mod static_list;

pub use cluster_api::ClusterApiClusters;
pub use cluster_profiles::ClusterProfiles;
pub use kubeconfig_dir::KubeconfigDir;
pub use kubeconfig_secrets::{DEFAULT_KUBECONFIG_KEY, DEFAULT_SECRET_LABEL, KubeconfigSecrets};
pub use static_list::StaticClusters;

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// The client configuration a kubeconfig document gives with its current context.
pub(crate) async fn config_from_yaml(text: &str) -> Result<kube::Config, KubeconfigError> {
    let kubeconfig = Kubeconfig::from_yaml(text)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await
}

/// The client configuration kubeconfig bytes give (a Secret's), or why they give none.
pub(crate) async fn config_from_bytes(bytes: &[u8]) -> Result<kube::Config, String> {
    match std::str::from_utf8(bytes) {
        Ok(text) => config_from_yaml(text).await.map_err(|e| e.to_string()),
        Err(e) => Err(format!("not UTF-8: {e}")),
    }
}

/// The bytes under `key` of `secret`'s data, if it has the key.
pub(crate) fn kubeconfig_bytes(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.clone())
}

/// The keys of `known` that a relist did not list: what went while the watch was down.
pub(crate) fn unlisted<V>(known: &HashMap<String, V>, listed: &HashSet<String>) -> Vec<String> {
    known
        .keys()
        .filter(|key| !listed.contains(*key))
        .cloned()
        .collect()
}

/// A fingerprint of a kubeconfig's bytes, to announce a cluster again only when they change.
pub(crate) fn fingerprint(bytes: &[u8]) -> u64 {
    rudder_core::hash::fnv1a64(bytes)
}
