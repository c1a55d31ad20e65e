//! What registered webhooks need in the cluster: the `MutatingWebhookConfiguration` and
//! `ValidatingWebhookConfiguration` that send the API server's calls to them, and a CRD's
//! conversion stanza, rendered from [`Registration`]s so nothing is written by hand twice.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use kube::core::{ObjectMeta, Resource};

use crate::paths::{CONVERT_PATH, mutate_path, validate_path};

/// What kind of webhook a [`Registration`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookKind {
    /// A defaulting (mutating) admission webhook.
    Mutating,
    /// A validating admission webhook.
    Validating,
    /// A conversion webhook for a custom resource's versions.
    Conversion,
}

/// One registered webhook, as the cluster must know it: which resource, which operations,
/// which path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// Mutating, validating or conversion.
    pub kind: WebhookKind,
    /// The resource's API group (`""` for the core group).
    pub group: String,
    /// The resource's version.
    pub version: String,
    /// The resource's kind (`Pod`).
    pub resource_kind: String,
    /// The resource's plural (`pods`), what admission rules name.
    pub plural: String,
    /// The path the webhook is served at.
    pub path: String,
    /// The operations the API server sends (`CREATE`, `UPDATE`, `DELETE`); empty for a
    /// conversion.
    pub operations: Vec<String>,
}

impl Registration {
    /// A defaulting webhook for `K` at controller-runtime's path, called on create and
    /// update.
    pub fn mutating<K: Resource<DynamicType = ()>>() -> Self {
        Self::of::<K>(
            WebhookKind::Mutating,
            mutate_path::<K>(),
            &["CREATE", "UPDATE"],
        )
    }

    /// A validating webhook for `K` at controller-runtime's path, called on create and
    /// update, and on delete if `deletes`.
    pub fn validating<K: Resource<DynamicType = ()>>(deletes: bool) -> Self {
        let operations: &[&str] = if deletes {
            &["CREATE", "UPDATE", "DELETE"]
        } else {
            &["CREATE", "UPDATE"]
        };
        Self::of::<K>(WebhookKind::Validating, validate_path::<K>(), operations)
    }

    /// The conversion webhook for `K`'s kind, at [`CONVERT_PATH`].
    pub fn conversion<K: Resource<DynamicType = ()>>() -> Self {
        Self::of::<K>(WebhookKind::Conversion, CONVERT_PATH.to_owned(), &[])
    }

    fn of<K: Resource<DynamicType = ()>>(kind: WebhookKind, path: String, ops: &[&str]) -> Self {
        Self {
            kind,
            group: K::group(&()).into_owned(),
            version: K::version(&()).into_owned(),
            resource_kind: K::kind(&()).into_owned(),
            plural: K::plural(&()).into_owned(),
            path,
            operations: ops.iter().map(|op| (*op).to_owned()).collect(),
        }
    }

    /// The webhook's name in a configuration: a DNS name of at least three labels, as the
    /// API server requires, made of the kind and group (`mchaospod.examples.rudder.dev`,
    /// `vpod.core.rudder.dev`).
    pub fn webhook_name(&self) -> String {
        let prefix = match self.kind {
            WebhookKind::Mutating => "m",
            WebhookKind::Validating => "v",
            WebhookKind::Conversion => "c",
        };
        let kind = self.resource_kind.to_lowercase();
        let name = if self.group.is_empty() {
            format!("{prefix}{kind}.core")
        } else {
            format!("{prefix}{kind}.{}", self.group)
        };
        if name.split('.').count() >= 3 {
            name
        } else {
            format!("{name}.rudder.dev")
        }
    }
}

/// Where the API server reaches the webhook server: a Service in the cluster (the operator's
/// own), or a URL (a server outside the cluster, such as a test's on loopback).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A Service: `name.namespace.svc:port`, the webhook's path appended.
    Service {
        /// The Service's name.
        name: String,
        /// Its namespace.
        namespace: String,
        /// Its port (the API server's default is 443).
        port: Option<i32>,
    },
    /// A URL; the webhook's path is appended to it (`https://127.0.0.1:9443`).
    Url(String),
}

/// How the configurations are rendered: where the server is, the CA that signed its
/// certificate (when known; a certificate manager can inject it later), and the policy.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Where the server is.
    pub endpoint: Endpoint,
    /// The PEM CA bundle the API server verifies the server's certificate with.
    pub ca_bundle: Option<Vec<u8>>,
    /// `Fail` (the default: an unreachable webhook rejects the request, so nothing escapes
    /// validation) or `Ignore`.
    pub failure_policy: String,
    /// Seconds the API server waits for an answer (default 10, the API's own default).
    pub timeout_seconds: i32,
}

impl ClientConfig {
    /// A configuration for the Service `name` in `namespace` on port 443, failing closed.
    pub fn service(name: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self::new(Endpoint::Service {
            name: name.into(),
            namespace: namespace.into(),
            port: None,
        })
    }

    /// A configuration for a server at `url` (its paths are appended), failing closed.
    pub fn url(url: impl Into<String>) -> Self {
        Self::new(Endpoint::Url(url.into()))
    }

    fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            ca_bundle: None,
            failure_policy: "Fail".to_owned(),
            timeout_seconds: 10,
        }
    }

    /// The CA bundle (PEM) the API server should trust for the server's certificate.
    pub fn ca_bundle(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_bundle = Some(pem.into());
        self
    }

    /// The Service's port (default 443).
    pub fn port(mut self, port: i32) -> Self {
        if let Endpoint::Service { port: p, .. } = &mut self.endpoint {
            *p = Some(port);
        }
        self
    }

    /// `Ignore` instead of `Fail` when the webhook cannot be reached.
    pub fn ignore_failures(mut self) -> Self {
        self.failure_policy = "Ignore".to_owned();
        self
    }

    fn for_path(&self, path: &str) -> WebhookClientConfig {
        let ca_bundle = self.ca_bundle.clone().map(ByteString);
        match &self.endpoint {
            Endpoint::Service {
                name,
                namespace,
                port,
            } => WebhookClientConfig {
                service: Some(ServiceReference {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    path: Some(path.to_owned()),
                    port: *port,
                }),
                ca_bundle,
                url: None,
            },
            Endpoint::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle,
                service: None,
            },
        }
    }
}

fn rule(registration: &Registration) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![registration.group.clone()]),
        api_versions: Some(vec![registration.version.clone()]),
        resources: Some(vec![registration.plural.clone()]),
        operations: Some(registration.operations.clone()),
        scope: None,
    }
}

/// Renders one configuration type: the two admission kinds share every field they set, but
/// are distinct types in the API.
macro_rules! configuration {
    ($fn:ident, $config:ident, $webhook:ident, $kind:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $fn(
            name: &str,
            registrations: &[Registration],
            client: &ClientConfig,
        ) -> Option<$config> {
            let webhooks: Vec<$webhook> = registrations
                .iter()
                .filter(|r| r.kind == $kind)
                .map(|r| $webhook {
                    name: r.webhook_name(),
                    admission_review_versions: vec!["v1".to_owned()],
                    client_config: client.for_path(&r.path),
                    failure_policy: Some(client.failure_policy.clone()),
                    side_effects: "None".to_owned(),
                    timeout_seconds: Some(client.timeout_seconds),
                    rules: Some(vec![rule(r)]),
                    ..$webhook::default()
                })
                .collect();
            (!webhooks.is_empty()).then(|| $config {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                webhooks: Some(webhooks),
            })
        }
    };
}

configuration!(
    mutating_configuration,
    MutatingWebhookConfiguration,
    MutatingWebhook,
    WebhookKind::Mutating,
    "The `MutatingWebhookConfiguration` named `name` for the mutating registrations, or `None` if there are none."
);

configuration!(
    validating_configuration,
    ValidatingWebhookConfiguration,
    ValidatingWebhook,
    WebhookKind::Validating,
    "The `ValidatingWebhookConfiguration` named `name` for the validating registrations, or `None` if there are none."
);

/// Sets `crd`'s conversion to the webhook at [`CONVERT_PATH`] (strategy `Webhook`, review
/// version v1), if a conversion is registered for its group and kind; returns whether it
/// did.
pub fn set_crd_conversion(
    crd: &mut apiextensions::CustomResourceDefinition,
    registrations: &[Registration],
    client: &ClientConfig,
) -> bool {
    let converts = registrations.iter().any(|r| {
        r.kind == WebhookKind::Conversion
            && r.group == crd.spec.group
            && r.resource_kind == crd.spec.names.kind
    });
    if !converts {
        return false;
    }
    let config = client.for_path(CONVERT_PATH);
    crd.spec.conversion = Some(apiextensions::CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(apiextensions::WebhookConversion {
            conversion_review_versions: vec!["v1".to_owned()],
            client_config: Some(apiextensions::WebhookClientConfig {
                ca_bundle: config.ca_bundle,
                url: config.url,
                service: config.service.map(|s| apiextensions::ServiceReference {
                    name: s.name,
                    namespace: s.namespace,
                    path: s.path,
                    port: s.port,
                }),
            }),
        }),
    });
    true
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn names_have_three_labels_and_paths_follow_controller_runtime() {
        let pod = Registration::validating::<Pod>(false);
        assert_eq!(pod.webhook_name(), "vpod.core.rudder.dev");
        assert_eq!(pod.path, "/validate--v1-pod");
        let deployment = Registration::mutating::<Deployment>();
        assert_eq!(deployment.webhook_name(), "mdeployment.apps.rudder.dev");
        assert_eq!(deployment.plural, "deployments");
    }

    #[test]
    fn configurations_point_at_the_service_or_url_with_the_rules() {
        let registrations = [
            Registration::mutating::<Pod>(),
            Registration::validating::<Pod>(true),
            Registration::validating::<Deployment>(false),
        ];
        let service = ClientConfig::service("op-webhook", "op-system")
            .port(9443)
            .ca_bundle(b"PEM".to_vec());
        let mutating = mutating_configuration("op", &registrations, &service).unwrap();
        let webhooks = mutating.webhooks.unwrap();
        assert_eq!(webhooks.len(), 1);
        let svc = webhooks[0].client_config.service.as_ref().unwrap();
        assert_eq!(
            (
                svc.name.as_str(),
                svc.namespace.as_str(),
                svc.path.as_deref(),
                svc.port
            ),
            (
                "op-webhook",
                "op-system",
                Some("/mutate--v1-pod"),
                Some(9443)
            )
        );
        assert_eq!(webhooks[0].failure_policy.as_deref(), Some("Fail"));
        assert_eq!(webhooks[0].side_effects, "None");

        let url = ClientConfig::url("https://127.0.0.1:9443/");
        let validating = validating_configuration("op", &registrations, &url).unwrap();
        let webhooks = validating.webhooks.unwrap();
        assert_eq!(webhooks.len(), 2);
        assert_eq!(
            webhooks[0].client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/validate--v1-pod")
        );
        let ops = webhooks[0].rules.as_ref().unwrap()[0].operations.clone();
        assert_eq!(ops.unwrap(), ["CREATE", "UPDATE", "DELETE"]);
        let rule = &webhooks[1].rules.as_ref().unwrap()[0];
        assert_eq!(rule.api_groups.as_deref(), Some(&["apps".to_owned()][..]));
        assert_eq!(
            rule.resources.as_deref(),
            Some(&["deployments".to_owned()][..])
        );

        assert!(mutating_configuration("op", &[], &url).is_none());
    }
}
