//! [`manifests`]: every object a cluster needs to run an operator, rendered from its manager
//! as configured: CRDs, ServiceAccount, RBAC derived from the code, Deployment, and the
//! webhook Service and configurations when webhooks are registered.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use rudder_manager::rbac::RbacObjects;
use rudder_manager::{GracefulShutdown, Manager};
use rudder_webhook::CertificateSource;
use rudder_webhook::manifest::ClientConfig;

use serde_json::json;

use crate::{WebhookManifests, webhook_manifests};

/// The label every rendered object carries, with the operator's name.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";

/// How much longer than the manager's graceful shutdown the kubelet waits before it kills
/// the container (`terminationGracePeriodSeconds`): time for the process to exit after the
/// manager's stop, and for the last log lines.
pub const TERMINATION_MARGIN_SECONDS: i64 = 10;

/// What [`manifests`] cannot learn from the manager: the operator's name, namespace, image,
/// the binary's arguments, its CRDs.
#[derive(Clone, Debug)]
pub struct DeployOptions {
    name: String,
    namespace: String,
    image: String,
    replicas: i32,
    args: Vec<String>,
    service_account: Option<String>,
    crds: Vec<CustomResourceDefinition>,
    create_namespace: bool,
    webhook_service: Option<String>,
    webhook_cert_secret: Option<String>,
}

impl DeployOptions {
    /// An operator `name` (the name of its Deployment, ServiceAccount, roles and bindings)
    /// running `image` in `namespace`: one replica, no arguments, no CRDs, the Namespace
    /// object included.
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        image: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            image: image.into(),
            replicas: 1,
            args: Vec::new(),
            service_account: None,
            crds: Vec::new(),
            create_namespace: true,
            webhook_service: None,
            webhook_cert_secret: None,
        }
    }

    /// How many replicas (default 1; more need leader election for the controllers).
    #[must_use]
    pub fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    /// The container's arguments: the operator binary's flags that make it configure its
    /// manager as the one rendering (leader election, addresses, namespaces).
    #[must_use]
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// The ServiceAccount's name (default: the operator's name).
    #[must_use]
    pub fn service_account(mut self, name: impl Into<String>) -> Self {
        self.service_account = Some(name.into());
        self
    }

    /// The CRDs to install first (their conversion pointed at the webhook Service when a
    /// conversion webhook is registered for their kind).
    #[must_use]
    pub fn crds(mut self, crds: impl IntoIterator<Item = CustomResourceDefinition>) -> Self {
        self.crds = crds.into_iter().collect();
        self
    }

    /// Whether to render the Namespace object too (default `true`).
    #[must_use]
    pub fn create_namespace(mut self, create: bool) -> Self {
        self.create_namespace = create;
        self
    }

    /// The webhook Service's name (default `<name>-webhook`).
    #[must_use]
    pub fn webhook_service(mut self, name: impl Into<String>) -> Self {
        self.webhook_service = Some(name.into());
        self
    }

    /// The Secret holding the webhook server's certificate, mounted at its certificate
    /// directory when it reads certificates from files (default
    /// `<name>-webhook-server-cert`, as cert-manager would be told to write it).
    #[must_use]
    pub fn webhook_cert_secret(mut self, name: impl Into<String>) -> Self {
        self.webhook_cert_secret = Some(name.into());
        self
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operator's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The ServiceAccount's name.
    pub fn service_account_name(&self) -> &str {
        self.service_account.as_deref().unwrap_or(&self.name)
    }

    /// The webhook Service's name.
    pub fn webhook_service_name(&self) -> String {
        self.webhook_service
            .clone()
            .unwrap_or_else(|| format!("{}-webhook", self.name))
    }
}

/// Everything [`manifests`] renders, each part typed; [`objects`](Self::objects) and
/// [`to_yaml`](Self::to_yaml) give them in the order `kubectl apply` needs.
#[derive(Clone, Debug)]
pub struct Manifests {
    /// The operator's Namespace, unless turned off.
    pub namespace: Option<Namespace>,
    /// The CRDs.
    pub crds: Vec<CustomResourceDefinition>,
    /// The operator's ServiceAccount.
    pub service_account: ServiceAccount,
    /// Its Roles, ClusterRole and bindings, from
    /// [`Manager::permissions`](rudder_manager::Manager::permissions).
    pub rbac: RbacObjects,
    /// The operator's Deployment.
    pub deployment: Deployment,
    /// The Service in front of the webhook server, when webhooks are registered.
    pub webhook_service: Option<Service>,
    /// The webhook configurations, when webhooks are registered.
    pub webhooks: WebhookManifests,
}

impl Manifests {
    /// Every object as JSON, in apply order: Namespace, CRDs, ServiceAccount, ClusterRole,
    /// Roles, bindings, Service, Deployment, webhook configurations.
    pub fn objects(&self) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        let mut push = |value: Result<serde_json::Value, serde_json::Error>| {
            // Serialising these types cannot fail: they hold no maps with non-string keys.
            if let Ok(value) = value {
                out.push(value);
            }
        };
        if let Some(ns) = &self.namespace {
            push(serde_json::to_value(ns));
        }
        for crd in &self.crds {
            push(serde_json::to_value(crd));
        }
        push(serde_json::to_value(&self.service_account));
        if let Some(role) = &self.rbac.cluster_role {
            push(serde_json::to_value(role));
        }
        for role in &self.rbac.roles {
            push(serde_json::to_value(role));
        }
        if let Some(binding) = &self.rbac.cluster_role_binding {
            push(serde_json::to_value(binding));
        }
        for binding in &self.rbac.role_bindings {
            push(serde_json::to_value(binding));
        }
        if let Some(service) = &self.webhook_service {
            push(serde_json::to_value(service));
        }
        push(serde_json::to_value(&self.deployment));
        if let Some(mutating) = &self.webhooks.mutating {
            push(serde_json::to_value(mutating));
        }
        if let Some(validating) = &self.webhooks.validating {
            push(serde_json::to_value(validating));
        }
        out
    }

    /// [`objects`](Self::objects) as multi-document YAML (each document preceded by `---`),
    /// for `kubectl apply -f -`.
    ///
    /// # Errors
    ///
    /// If an object cannot be written as YAML (they always can).
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let mut yaml = String::new();
        for object in self.objects() {
            yaml.push_str("---\n");
            yaml.push_str(&serde_yaml::to_string(&object)?);
        }
        Ok(yaml)
    }
}

/// Renders every object needed to run `manager` as an operator, from what was declared on
/// it: the RBAC from [`Manager::permissions`](rudder_manager::Manager::permissions) (what
/// the controllers watch, own and declare, leader election, secure metrics, self-signed
/// certificates) bound to the operator's ServiceAccount, never a wildcard; the Deployment
/// with the manager's probe port wired to `livenessProbe` (`/healthz`) and `readinessProbe`
/// (`/readyz`), its metrics and webhook ports, and a `terminationGracePeriodSeconds`
/// [`TERMINATION_MARGIN_SECONDS`] longer than the manager's graceful shutdown; the webhook
/// Service and configurations when webhooks are registered.
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
    let labels: BTreeMap<String, String> = [(NAME_LABEL.to_owned(), options.name.clone())].into();
    let meta =
        |name: &str| json!({ "name": name, "namespace": options.namespace, "labels": labels });
    let service_account = options.service_account_name().to_owned();
    let has_webhooks = !manager.webhook_server().is_empty();
    let webhook_service = options.webhook_service_name();
    let mut crds = options.crds.clone();
    let webhooks = if has_webhooks {
        let client = ClientConfig::service(&webhook_service, &options.namespace);
        webhook_manifests(manager, &options.name, &client, &mut crds)
    } else {
        WebhookManifests::default()
    };

    let mut ports = Vec::new();
    let mut port = |name: &str, number: u16| {
        ports.push(json!({ "name": name, "containerPort": number, "protocol": "TCP" }));
    };
    let health = manager.configured_health_address();
    if let Some(addr) = health {
        port("healthz", addr.port());
    }
    if let Some(addr) = manager.configured_metrics_address() {
        port("metrics", addr.port());
    }
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if has_webhooks {
        let webhook_options = manager.webhook_server().options();
        port("webhook-server", webhook_options.address().port());
        if let CertificateSource::Files { dir, .. } = webhook_options.certificate_source() {
            let secret = options
                .webhook_cert_secret
                .clone()
                .unwrap_or_else(|| format!("{}-webhook-server-cert", options.name));
            volumes.push(json!({ "name": "webhook-cert", "secret": { "secretName": secret } }));
            mounts.push(json!({
                "name": "webhook-cert",
                "mountPath": dir.display().to_string(),
                "readOnly": true,
            }));
        }
    }
    let probe = |path: &str, delay: u32| {
        json!({
            "httpGet": { "path": path, "port": "healthz" },
            "initialDelaySeconds": delay,
            "periodSeconds": 10,
        })
    };
    let mut container = json!({
        "name": "manager",
        "image": options.image,
        "env": [{
            "name": "POD_NAMESPACE",
            "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } },
        }],
        "ports": ports,
        "resources": { "requests": { "cpu": "10m", "memory": "64Mi" } },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": { "drop": ["ALL"] },
        },
    });
    if !options.args.is_empty() {
        container["args"] = json!(options.args);
    }
    if health.is_some() {
        container["livenessProbe"] = probe("/healthz", 15);
        container["readinessProbe"] = probe("/readyz", 5);
    }
    if !mounts.is_empty() {
        container["volumeMounts"] = json!(mounts);
    }
    let mut pod = json!({
        "serviceAccountName": service_account,
        "securityContext": {
            "runAsNonRoot": true,
            // A numeric user, so the kubelet can check runAsNonRoot for images whose user
            // is a name.
            "runAsUser": 65532,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [container],
    });
    if let Some(grace) = termination_grace(manager.graceful_shutdown()) {
        pod["terminationGracePeriodSeconds"] = json!(grace);
    }
    if !volumes.is_empty() {
        pod["volumes"] = json!(volumes);
    }
    // Built as JSON: these types' fields differ between the Kubernetes versions k8s-openapi
    // can be built for (a Deployment's spec is optional in some, required in others).
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(&options.name),
        "spec": {
            "replicas": options.replicas,
            "selector": { "matchLabels": labels },
            "template": { "metadata": { "labels": labels }, "spec": pod },
        },
    }))?;
    let webhook_service = if has_webhooks {
        Some(serde_json::from_value::<Service>(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(&webhook_service),
            "spec": {
                "selector": labels,
                "ports": [{
                    "name": "webhook",
                    "port": 443,
                    "targetPort": "webhook-server",
                    "protocol": "TCP",
                }],
            },
        }))?)
    } else {
        None
    };
    let namespace = if options.create_namespace {
        Some(serde_json::from_value::<Namespace>(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": options.namespace, "labels": labels },
        }))?)
    } else {
        None
    };
    let service_account_object: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(&service_account),
    }))?;
    Ok(Manifests {
        namespace,
        crds,
        service_account: service_account_object,
        rbac: manager
            .permissions()
            .render(&options.name, &service_account, &options.namespace),
        deployment,
        webhook_service,
        webhooks,
    })
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

/// The kubelet's wait before killing the container: the graceful shutdown plus
/// [`TERMINATION_MARGIN_SECONDS`]; with [`GracefulShutdown::Forever`], none is set (no finite
/// period is longer than forever; Kubernetes' default of 30 s applies).
fn termination_grace(shutdown: GracefulShutdown) -> Option<i64> {
    match shutdown {
        GracefulShutdown::After(timeout) => {
            let seconds = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX / 2);
            let rounded_up = seconds + i64::from(timeout.subsec_nanos() > 0);
            Some(rounded_up.saturating_add(TERMINATION_MARGIN_SECONDS))
        }
        GracefulShutdown::Immediately => Some(TERMINATION_MARGIN_SECONDS),
        GracefulShutdown::Forever => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_grace_period_is_longer_than_the_shutdown() {
        assert_eq!(
            termination_grace(GracefulShutdown::After(Duration::from_secs(30))),
            Some(40)
        );
        assert_eq!(
            termination_grace(GracefulShutdown::After(Duration::from_millis(1500))),
            Some(12)
        );
        assert_eq!(termination_grace(GracefulShutdown::Immediately), Some(10));
        assert_eq!(termination_grace(GracefulShutdown::Forever), None);
    }
}
