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

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// The client configuration a kubeconfig document gives with its current context.
pub(crate) async fn config_from_yaml(text: &str) -> Result<kube::Config, KubeconfigError> {
    let kubeconfig = Kubeconfig::from_yaml(text)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await
}

/// A fingerprint of a kubeconfig's bytes, to announce a cluster again only when they change.
pub(crate) fn fingerprint(bytes: &[u8]) -> u64 {
    rudder_controller::fnv1a64(bytes)
}
