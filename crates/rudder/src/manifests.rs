//! [`manifests`]: every object a cluster needs to run an operator, rendered from its manager
//! as configured: CRDs, ServiceAccount, RBAC derived from the code, Deployment, the metrics
//! Service, a NetworkPolicy admitting only the served ports, and the webhook Service and
//! configurations when webhooks are registered.
//!
//! The rendering is `rudder-manifests`' ([`rudder_manifests::deploy`]); this module reads
//! what it needs from a [`Manager`] and hands it over.

use std::time::Duration;

use rudder_manager::{GracefulShutdown, Manager};
use rudder_manifests::deploy::{Served, WebhookServing, render};
use rudder_webhook::CertificateSource;
use rudder_webhook::manifest::ClientConfig;

/// Prometheus rules for what goes wrong in an operator, over the metrics every manager
/// exposes (see [`rudder_manifests::alerts`]).
pub use rudder_manifests::alerts;
/// Grafana dashboards over the same metrics (see [`rudder_manifests::dashboards`]).
pub use rudder_manifests::dashboards;
pub use rudder_manifests::deploy::{
    CHECKOV_SKIP_ANNOTATION, DEFAULT_CPU_REQUEST, DEFAULT_MEMORY_LIMIT, DEFAULT_MEMORY_REQUEST,
    DeployOptions, Manifests, NAME_LABEL, TERMINATION_MARGIN_SECONDS,
};
/// The selector that scopes the rules and dashboards to one operator's series.
pub use rudder_manifests::promql;

use crate::{WebhookManifests, webhook_manifests};

/// Renders every object needed to run `manager` as an operator, from what was declared on
/// it: the RBAC from [`Manager::permissions`] (what the controllers watch, own and declare,
/// leader election, secure metrics, self-signed certificates) bound to the operator's
/// ServiceAccount, never a wildcard; the Deployment with the manager's probe port wired to
/// `livenessProbe` (`/healthz`) and `readinessProbe` (`/readyz`), its metrics and webhook
/// ports, and a `terminationGracePeriodSeconds` [`TERMINATION_MARGIN_SECONDS`] longer than
/// the manager's graceful shutdown, and resource requests and a memory limit
/// ([`DeployOptions::resources`]); the metrics Service when the manager serves `/metrics`;
/// a NetworkPolicy admitting only the webhook and metrics ports
/// ([`DeployOptions::network_policy`]); the webhook Service and configurations when
/// webhooks are registered.
///
/// Nothing is sent to the API server: build the manager as the binary would, with
/// [`ManagerBuilder::render_only`](rudder_manager::ManagerBuilder::render_only) so that
/// controllers can be declared without a cluster (see [`offline_client`]).
///
/// # Errors
///
/// If an object built as JSON does not fit its type (it always does).
pub fn manifests(
    manager: &Manager,
    options: &DeployOptions,
) -> Result<Manifests, serde_json::Error> {
    let server = manager.webhook_server();
    let webhook = (!server.is_empty()).then(|| WebhookServing {
        port: server.options().address().port(),
        certificate_dir: match server.options().certificate_source() {
            CertificateSource::Files { dir, .. } => Some(dir.clone()),
            _ => None,
        },
    });
    let mut crds = options.custom_resources().to_vec();
    let webhooks = if webhook.is_some() {
        let client = ClientConfig::service(options.webhook_service_name(), options.namespace());
        webhook_manifests(manager, options.name(), &client, &mut crds)
    } else {
        WebhookManifests::default()
    };
    let served = Served {
        health_address: manager.configured_health_address(),
        metrics_address: manager.configured_metrics_address(),
        secure_metrics: manager.has_secure_metrics(),
        webhook,
        graceful_shutdown: match manager.graceful_shutdown() {
            GracefulShutdown::After(timeout) => Some(timeout),
            GracefulShutdown::Immediately => Some(Duration::ZERO),
            GracefulShutdown::Forever => None,
        },
        rules: manager.permissions(),
    };
    render(&served, options, crds, webhooks)
}

/// A client that never reaches a server, for a manager built only to render manifests
/// ([`ManagerBuilder::render_only`](rudder_manager::ManagerBuilder::render_only)).
///
/// # Errors
///
/// If the client cannot be built (it always can).
pub fn offline_client() -> Result<kube::Client, kube::Error> {
    // A discard port on loopback: nothing is sent there by a render-only manager.
    let url = "http://127.0.0.1:9"
        .parse()
        .map_err(|e: http::uri::InvalidUri| kube::Error::Service(Box::new(e)))?;
    kube::Client::try_from(kube::Config::new(url))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    use super::*;

    fn manager(metrics: bool) -> Manager {
        let address = metrics.then_some(rudder_manager::DEFAULT_METRICS_ADDRESS);
        Manager::builder(offline_client().unwrap())
            .render_only(true)
            .health_probe_address(Some(rudder_manager::DEFAULT_HEALTH_ADDRESS))
            .metrics_address(address)
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn resources_and_the_network_policy_follow_the_options() {
        let options = DeployOptions::new("op", "op-system", "example/op:1");
        let rendered = manifests(&manager(true), &options).unwrap();
        let container = serde_json::to_value(&rendered.deployment).unwrap()["spec"]["template"]
            ["spec"]["containers"][0]
            .clone();
        assert_eq!(
            container["resources"],
            json!({
                "requests": { "cpu": DEFAULT_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST },
                "limits": { "memory": DEFAULT_MEMORY_LIMIT },
            })
        );
        let service = rendered.metrics_service.unwrap();
        assert_eq!(service.metadata.name.as_deref(), Some("op-metrics"));
        let policy = serde_json::to_value(rendered.network_policy.unwrap()).unwrap();
        assert_eq!(
            policy["spec"]["ingress"],
            json!([{ "ports": [{ "port": "metrics", "protocol": "TCP" }] }])
        );
        // No webhook, so no ClusterRole grant for checkov to be told about.
        assert!(rendered.rbac.cluster_role.is_none());

        let limits: BTreeMap<String, Quantity> =
            [("memory".to_owned(), Quantity("1Gi".to_owned()))].into();
        let custom = options
            .clone()
            .resources(ResourceRequirements {
                limits: Some(limits),
                ..ResourceRequirements::default()
            })
            .network_policy(false);
        let rendered = manifests(&manager(true), &custom).unwrap();
        let deployment = serde_json::to_value(&rendered.deployment).unwrap();
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["resources"],
            json!({ "limits": { "memory": "1Gi" } })
        );
        assert!(rendered.network_policy.is_none());
        let kinds: Vec<serde_json::Value> = rendered
            .objects()
            .iter()
            .map(|o| o["kind"].clone())
            .collect();
        assert!(!kinds.contains(&json!("NetworkPolicy")), "{kinds:?}");

        // Without a metrics server: no metrics Service, and a policy admitting nothing.
        let rendered = manifests(&manager(false), &options).unwrap();
        assert!(rendered.metrics_service.is_none());
        let policy = serde_json::to_value(rendered.network_policy.unwrap()).unwrap();
        assert_eq!(policy["spec"]["ingress"], json!([]));
    }
}
