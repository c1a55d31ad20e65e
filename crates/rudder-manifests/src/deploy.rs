//! [`render`]: every object a cluster needs to run an operator, from what its manager serves
//! ([`Served`]) and what only the deployer knows ([`DeployOptions`]): CRDs, ServiceAccount,
//! RBAC derived from the code, Deployment, the metrics Service, a NetworkPolicy admitting
//! only the served ports, and the webhook Service and configurations when webhooks are
//! registered. The facade's `rudder::manifests::manifests` reads a manager into a
//! [`Served`] and calls [`render`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ResourceRequirements, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

use crate::rbac::{RbacObjects, Rules};

/// The label every rendered object carries, with the operator's name.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";

/// How much longer than the manager's graceful shutdown the kubelet waits before it kills
/// the container (`terminationGracePeriodSeconds`): time for the process to exit after the
/// manager's stop, and for the last log lines.
pub const TERMINATION_MARGIN_SECONDS: i64 = 10;

/// The container's default CPU request (what the scheduler reserves; no CPU limit is set, so
/// the operator is never throttled below what the node can spare).
pub const DEFAULT_CPU_REQUEST: &str = "10m";
/// The container's default memory request.
pub const DEFAULT_MEMORY_REQUEST: &str = "64Mi";
/// The container's default memory limit: past it the kubelet restarts the container rather
/// than let a leak take the node's memory. An operator caching many or large objects needs
/// more: set [`DeployOptions::resources`].
pub const DEFAULT_MEMORY_LIMIT: &str = "128Mi";

/// The annotation by which the `checkov` scanner skips one of its checks on an object, with
/// the reason; [`render`] puts it on a ClusterRole whose only grants on webhook
/// configurations are scoped to the operator's own, by name (the check ignores
/// `resourceNames`).
pub const CHECKOV_SKIP_ANNOTATION: &str = "checkov.io/skip1";

/// What the manager serves and how it stops, as [`render`] needs it (the facade reads it
/// from a `Manager`).
#[derive(Clone, Debug, Default)]
pub struct Served {
    /// The probe server's address (`/healthz`, `/readyz`), if it serves probes.
    pub health_address: Option<SocketAddr>,
    /// The metrics server's address, if it serves `/metrics`.
    pub metrics_address: Option<SocketAddr>,
    /// Whether `/metrics` is served over HTTPS, behind authentication and authorization.
    pub secure_metrics: bool,
    /// The webhook server, when webhooks are registered.
    pub webhook: Option<WebhookServing>,
    /// How long the manager's stop may take: `Some(Duration::ZERO)` when it stops at once,
    /// `None` when it waits without a limit.
    pub graceful_shutdown: Option<Duration>,
    /// The RBAC the operator needs (the manager's `permissions`).
    pub rules: Rules,
}

/// The webhook server as [`render`] needs it.
#[derive(Clone, Debug)]
pub struct WebhookServing {
    /// The port it listens on.
    pub port: u16,
    /// The directory it reads its certificate from, when it reads files (the certificate
    /// Secret is mounted there).
    pub certificate_dir: Option<PathBuf>,
}

/// The webhook configurations of an operator, rendered from its registered webhooks.
#[derive(Clone, Debug, Default)]
pub struct WebhookManifests {
    /// The mutating webhooks, if any.
    pub mutating: Option<MutatingWebhookConfiguration>,
    /// The validating webhooks, if any.
    pub validating: Option<ValidatingWebhookConfiguration>,
}

/// What [`render`] cannot learn from the manager: the operator's name, namespace, image,
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
    metrics_service: Option<String>,
    resources: ResourceRequirements,
    network_policy: bool,
}

impl DeployOptions {
    /// An operator `name` (the name of its Deployment, ServiceAccount, roles and bindings)
    /// running `image` in `namespace`: one replica, no arguments, no CRDs, the Namespace
    /// object included, the default resources ([`DEFAULT_CPU_REQUEST`],
    /// [`DEFAULT_MEMORY_REQUEST`], [`DEFAULT_MEMORY_LIMIT`]) and a NetworkPolicy.
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
            metrics_service: None,
            resources: default_resources(),
            network_policy: true,
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

    /// The metrics Service's name (default `<name>-metrics`), rendered when the manager
    /// serves `/metrics`. With secure metrics from self-signed certificates, the certificate
    /// must name it (`SelfSignedConfig::extra_names`).
    #[must_use]
    pub fn metrics_service(mut self, name: impl Into<String>) -> Self {
        self.metrics_service = Some(name.into());
        self
    }

    /// The container's resource requests and limits, in place of the defaults
    /// ([`DEFAULT_CPU_REQUEST`], [`DEFAULT_MEMORY_REQUEST`], [`DEFAULT_MEMORY_LIMIT`]).
    #[must_use]
    pub fn resources(mut self, resources: ResourceRequirements) -> Self {
        self.resources = resources;
        self
    }

    /// Whether to render a NetworkPolicy admitting traffic to the operator's Pods only on
    /// its webhook and metrics ports (default `true`). Probes need no port of it: the
    /// kubelet's traffic to its node's Pods is always allowed. Egress is not restricted (the
    /// operator talks to the API server).
    #[must_use]
    pub fn network_policy(mut self, render: bool) -> Self {
        self.network_policy = render;
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

    /// The CRDs to install first, as given to [`crds`](Self::crds).
    pub fn custom_resources(&self) -> &[CustomResourceDefinition] {
        &self.crds
    }

    /// The metrics Service's name.
    pub fn metrics_service_name(&self) -> String {
        self.metrics_service
            .clone()
            .unwrap_or_else(|| format!("{}-metrics", self.name))
    }
}

/// Everything [`render`] renders, each part typed; [`objects`](Self::objects) and
/// [`to_yaml`](Self::to_yaml) give them in the order `kubectl apply` needs.
#[derive(Clone, Debug)]
pub struct Manifests {
    /// The operator's Namespace, unless turned off.
    pub namespace: Option<Namespace>,
    /// The CRDs.
    pub crds: Vec<CustomResourceDefinition>,
    /// The operator's ServiceAccount.
    pub service_account: ServiceAccount,
    /// Its Roles, ClusterRole and bindings, from [`Served::rules`].
    pub rbac: RbacObjects,
    /// The operator's Deployment.
    pub deployment: Deployment,
    /// The Service in front of the webhook server, when webhooks are registered.
    pub webhook_service: Option<Service>,
    /// The Service in front of the metrics server, when the manager serves `/metrics`.
    pub metrics_service: Option<Service>,
    /// The NetworkPolicy admitting only the webhook and metrics ports, unless turned off.
    pub network_policy: Option<NetworkPolicy>,
    /// The webhook configurations, when webhooks are registered.
    pub webhooks: WebhookManifests,
}

impl Manifests {
    /// Every object as JSON, in apply order: Namespace, CRDs, ServiceAccount, ClusterRole,
    /// Roles, bindings, Services, NetworkPolicy, Deployment, webhook configurations.
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
        if let Some(service) = &self.metrics_service {
            push(serde_json::to_value(service));
        }
        if let Some(policy) = &self.network_policy {
            push(serde_json::to_value(policy));
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

/// Renders every object needed to run an operator serving what `served` says: the RBAC
/// from [`Served::rules`] (what the controllers watch, own and declare, leader election,
/// secure metrics, self-signed certificates) bound to the operator's ServiceAccount, never
/// a wildcard; the Deployment with the probe port wired to `livenessProbe` (`/healthz`)
/// and `readinessProbe` (`/readyz`), its metrics and webhook ports, and a
/// `terminationGracePeriodSeconds` [`TERMINATION_MARGIN_SECONDS`] longer than the
/// manager's graceful shutdown, and resource requests and a memory limit
/// ([`DeployOptions::resources`]); the metrics Service when the manager serves `/metrics`;
/// a NetworkPolicy admitting only the webhook and metrics ports
/// ([`DeployOptions::network_policy`]); the webhook Service when webhooks are registered.
/// `crds` (the options' CRDs, their conversion pointed at the webhook where one is
/// registered) and `webhooks` are passed through.
///
/// # Errors
///
/// If an object built as JSON does not fit its type (it always does).
pub fn render(
    served: &Served,
    options: &DeployOptions,
    crds: Vec<CustomResourceDefinition>,
    webhooks: WebhookManifests,
) -> Result<Manifests, serde_json::Error> {
    let meta = Meta::new(options);
    let ports = Ports::of(served, options);
    let service_account = options.service_account_name().to_owned();
    let deployment = deployment(served, options, &meta, &ports)?;
    let webhook_service = match &served.webhook {
        Some(_) => Some(meta.service(
            &options.webhook_service_name(),
            &json!({
                "name": "webhook",
                "port": 443,
                "targetPort": "webhook-server",
                "protocol": "TCP",
            }),
        )?),
        None => None,
    };
    // The port's name says the scheme, which scrape configurations select on.
    let metrics_service = match served.metrics_address {
        Some(addr) => Some(meta.service(
            &options.metrics_service_name(),
            &json!({
                "name": if served.secure_metrics { "https" } else { "http" },
                "port": addr.port(),
                "targetPort": "metrics",
                "protocol": "TCP",
            }),
        )?),
        None => None,
    };
    let network_policy = if options.network_policy {
        Some(network_policy(options, &meta, &ports.admitted)?)
    } else {
        None
    };
    let namespace = if options.create_namespace {
        Some(serde_json::from_value::<Namespace>(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": options.namespace, "labels": meta.labels },
        }))?)
    } else {
        None
    };
    let service_account_object: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta.of(&service_account),
    }))?;
    let mut rbac = served
        .rules
        .render(&options.name, &service_account, &options.namespace);
    if let Some(role) = &mut rbac.cluster_role {
        annotate_scoped_webhook_grants(role);
    }
    Ok(Manifests {
        namespace,
        crds,
        service_account: service_account_object,
        rbac,
        deployment,
        webhook_service,
        metrics_service,
        network_policy,
        webhooks,
    })
}

/// The metadata every rendered object shares: the operator's namespace and name label.
struct Meta {
    namespace: String,
    labels: BTreeMap<String, String>,
}

impl Meta {
    fn new(options: &DeployOptions) -> Self {
        Self {
            namespace: options.namespace.clone(),
            labels: [(NAME_LABEL.to_owned(), options.name.clone())].into(),
        }
    }

    /// The metadata of the object `name`.
    fn of(&self, name: &str) -> serde_json::Value {
        json!({ "name": name, "namespace": self.namespace, "labels": self.labels })
    }

    /// A Service `name` in front of the operator's Pods, with one port.
    fn service(&self, name: &str, port: &serde_json::Value) -> Result<Service, serde_json::Error> {
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.of(name),
            "spec": { "selector": self.labels, "ports": [port] },
        }))
    }
}

/// The container's ports, the ones other Pods and the API server reach (for the
/// NetworkPolicy), and the webhook certificate's volume and mount.
struct Ports {
    ports: Vec<serde_json::Value>,
    admitted: Vec<serde_json::Value>,
    volumes: Vec<serde_json::Value>,
    mounts: Vec<serde_json::Value>,
}

impl Ports {
    fn of(served: &Served, options: &DeployOptions) -> Self {
        let mut this = Self {
            ports: Vec::new(),
            admitted: Vec::new(),
            volumes: Vec::new(),
            mounts: Vec::new(),
        };
        if let Some(addr) = served.health_address {
            this.port("healthz", addr.port(), false);
        }
        if let Some(addr) = served.metrics_address {
            this.port("metrics", addr.port(), true);
        }
        if let Some(webhook) = &served.webhook {
            this.port("webhook-server", webhook.port, true);
            if let Some(dir) = &webhook.certificate_dir {
                let secret = options
                    .webhook_cert_secret
                    .clone()
                    .unwrap_or_else(|| format!("{}-webhook-server-cert", options.name));
                this.volumes
                    .push(json!({ "name": "webhook-cert", "secret": { "secretName": secret } }));
                this.mounts.push(json!({
                    "name": "webhook-cert",
                    "mountPath": dir.display().to_string(),
                    "readOnly": true,
                }));
            }
        }
        this
    }

    fn port(&mut self, name: &str, number: u16, admit: bool) {
        self.ports
            .push(json!({ "name": name, "containerPort": number, "protocol": "TCP" }));
        if admit {
            self.admitted
                .push(json!({ "port": name, "protocol": "TCP" }));
        }
    }
}

/// The operator's Deployment: one container with its ports, probes, resources and a
/// locked-down security context, in a Pod running as a numeric non-root user.
fn deployment(
    served: &Served,
    options: &DeployOptions,
    meta: &Meta,
    ports: &Ports,
) -> Result<Deployment, serde_json::Error> {
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
        "ports": ports.ports,
        "resources": options.resources,
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": { "drop": ["ALL"] },
        },
    });
    if !options.args.is_empty() {
        container["args"] = json!(options.args);
    }
    if served.health_address.is_some() {
        container["livenessProbe"] = probe("/healthz", 15);
        container["readinessProbe"] = probe("/readyz", 5);
    }
    if !ports.mounts.is_empty() {
        container["volumeMounts"] = json!(ports.mounts);
    }
    let mut pod = json!({
        "serviceAccountName": options.service_account_name(),
        "securityContext": {
            "runAsNonRoot": true,
            // A numeric user, so the kubelet can check runAsNonRoot for images whose user
            // is a name.
            "runAsUser": 65532,
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [container],
    });
    if let Some(grace) = termination_grace(served.graceful_shutdown) {
        pod["terminationGracePeriodSeconds"] = json!(grace);
    }
    if !ports.volumes.is_empty() {
        pod["volumes"] = json!(ports.volumes);
    }
    // Built as JSON: these types' fields differ between the Kubernetes versions k8s-openapi
    // can be built for (a Deployment's spec is optional in some, required in others).
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta.of(&options.name),
        "spec": {
            "replicas": options.replicas,
            "selector": { "matchLabels": meta.labels },
            "template": { "metadata": { "labels": meta.labels }, "spec": pod },
        },
    }))
}

/// A NetworkPolicy admitting traffic to the operator's Pods on the `admitted` ports only.
fn network_policy(
    options: &DeployOptions,
    meta: &Meta,
    admitted: &[serde_json::Value],
) -> Result<NetworkPolicy, serde_json::Error> {
    // One ingress rule from anywhere, on the admitted ports only: the webhook's caller is
    // the API server and the scraper is Prometheus, whose addresses are the cluster's.
    // With neither port, no ingress is admitted at all.
    let ingress = if admitted.is_empty() {
        json!([])
    } else {
        json!([{ "ports": admitted }])
    };
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.of(&options.name),
        "spec": {
            "podSelector": { "matchLabels": meta.labels },
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }))
}

/// The resources [`DeployOptions::new`] gives the container.
fn default_resources() -> ResourceRequirements {
    let quantities = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect::<BTreeMap<_, _>>()
    };
    ResourceRequirements {
        requests: Some(quantities(&[
            ("cpu", DEFAULT_CPU_REQUEST),
            ("memory", DEFAULT_MEMORY_REQUEST),
        ])),
        limits: Some(quantities(&[("memory", DEFAULT_MEMORY_LIMIT)])),
        ..ResourceRequirements::default()
    }
}

/// The webhook configuration resources whose control `checkov`'s `CKV_K8S_155` flags.
const WEBHOOK_CONFIGURATIONS: [&str; 2] = [
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
];

/// Marks `role` for `checkov` to skip `CKV_K8S_155` when it grants writes on webhook
/// configurations only by name: the check flags any such grant, `resourceNames` or not,
/// while injecting a CA (cert-manager's CA injector does the same) needs `update` on the
/// operator's own configurations and nothing more. A grant on every configuration keeps
/// the finding.
fn annotate_scoped_webhook_grants(role: &mut ClusterRole) {
    let rules = role.rules.as_deref().unwrap_or_default();
    let on_webhooks: Vec<_> = rules
        .iter()
        .filter(|rule| {
            rule.api_groups
                .iter()
                .flatten()
                .any(|g| g == "admissionregistration.k8s.io")
                && rule
                    .resources
                    .iter()
                    .flatten()
                    .any(|r| WEBHOOK_CONFIGURATIONS.contains(&r.as_str()))
        })
        .collect();
    let all_named = on_webhooks
        .iter()
        .all(|rule| rule.resource_names.as_ref().is_some_and(|n| !n.is_empty()));
    if on_webhooks.is_empty() || !all_named {
        return;
    }
    role.metadata.annotations.get_or_insert_default().insert(
        CHECKOV_SKIP_ANNOTATION.to_owned(),
        "CKV_K8S_155=update on the operator's own webhook configurations only \
         (resourceNames), to inject its CA bundle"
            .to_owned(),
    );
}

/// The kubelet's wait before killing the container: the graceful shutdown (rounded up to a
/// second) plus [`TERMINATION_MARGIN_SECONDS`]; with no limit on the shutdown, none is set
/// (no finite period is longer than forever; Kubernetes' default of 30 s applies).
fn termination_grace(shutdown: Option<Duration>) -> Option<i64> {
    let timeout = shutdown?;
    let seconds = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX / 2);
    let rounded_up = seconds + i64::from(timeout.subsec_nanos() > 0);
    Some(rounded_up.saturating_add(TERMINATION_MARGIN_SECONDS))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_a_cluster_role_scoped_by_name_on_webhook_configurations_is_annotated() {
        let rule = |resource: &str, names: Option<&[&str]>| {
            serde_json::from_value::<k8s_openapi::api::rbac::v1::PolicyRule>(json!({
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": [resource],
                "resourceNames": names,
                "verbs": ["get", "update"],
            }))
            .unwrap()
        };
        let role = |rules| ClusterRole {
            rules: Some(rules),
            ..ClusterRole::default()
        };
        let annotated = |mut role: ClusterRole| {
            annotate_scoped_webhook_grants(&mut role);
            role.metadata
                .annotations
                .and_then(|a| a.get(CHECKOV_SKIP_ANNOTATION).cloned())
        };
        let scoped = annotated(role(vec![
            rule("mutatingwebhookconfigurations", Some(&["op"])),
            rule("validatingwebhookconfigurations", Some(&["op"])),
        ]));
        assert!(scoped.unwrap().starts_with("CKV_K8S_155="));
        let one_open = role(vec![
            rule("mutatingwebhookconfigurations", Some(&["op"])),
            rule("validatingwebhookconfigurations", None),
        ]);
        assert_eq!(annotated(one_open), None);
        assert_eq!(annotated(role(vec![rule("pods", None)])), None);
        assert_eq!(annotated(role(Vec::new())), None);
    }

    #[test]
    fn the_grace_period_is_longer_than_the_shutdown() {
        assert_eq!(termination_grace(Some(Duration::from_secs(30))), Some(40));
        assert_eq!(
            termination_grace(Some(Duration::from_millis(1500))),
            Some(12)
        );
        assert_eq!(termination_grace(Some(Duration::ZERO)), Some(10));
        assert_eq!(termination_grace(None), None);
    }
}
