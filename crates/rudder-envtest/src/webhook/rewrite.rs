//! How an install rewrites what the test gave it: client configurations to the loopback
//! server, selectors scoped to the namespace and away from the probes, names, conversion.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, WebhookClientConfig as CrdClientConfig,
    WebhookConversion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::ObjectMeta;

use super::probe::{PROBE_LABEL, PROBE_PATH, Probe};
use crate::error::{Error, Result};
use crate::namespace::NAMESPACE_LABEL;

/// How an install rewrites what the test gave it.
pub(super) struct Rewrite {
    /// `https://127.0.0.1:PORT`, the test server's base URL.
    pub(super) base: String,
    /// `https://127.0.0.1:PORT` of the refusing port.
    pub(super) probe_base: String,
    pub(super) ca_bundle: ByteString,
    pub(super) namespace: Option<String>,
}

impl Rewrite {
    fn client_config(&self, given: &WebhookClientConfig) -> WebhookClientConfig {
        let path = given
            .service
            .as_ref()
            .and_then(|s| s.path.clone())
            .or_else(|| given.url.as_deref().map(url_path))
            .unwrap_or_else(|| "/".to_owned());
        WebhookClientConfig {
            url: Some(format!("{}{path}", self.base)),
            ca_bundle: Some(self.ca_bundle.clone()),
            service: None,
        }
    }

    fn probe_client_config(&self) -> WebhookClientConfig {
        WebhookClientConfig {
            url: Some(format!("{}{PROBE_PATH}", self.probe_base)),
            ca_bundle: Some(self.ca_bundle.clone()),
            service: None,
        }
    }

    /// The configuration's name in the cluster.
    pub(super) fn name(&self, kind: &str, meta: &ObjectMeta) -> Result<String> {
        let name = meta
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::InvalidWebhook {
                what: format!("a {kind}"),
                reason: "it has no metadata.name".to_owned(),
            })?;
        Ok(match &self.namespace {
            None => name.to_owned(),
            Some(ns) => {
                // Object names are DNS subdomains of at most 253 characters.
                let keep = 253usize.saturating_sub(ns.len() + 1);
                let base: String = name.chars().take(keep).collect();
                format!("{}-{ns}", base.trim_end_matches(['-', '.']))
            }
        })
    }

    fn scope(
        &self,
        namespace_selector: &mut Option<LabelSelector>,
        object_selector: &mut Option<LabelSelector>,
    ) {
        and_requirement(
            object_selector,
            LabelSelectorRequirement {
                key: PROBE_LABEL.to_owned(),
                operator: "DoesNotExist".to_owned(),
                values: None,
            },
        );
        if let Some(ns) = &self.namespace {
            and_requirement(
                namespace_selector,
                LabelSelectorRequirement {
                    key: NAMESPACE_LABEL.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec![ns.clone()]),
                },
            );
        }
    }

    pub(super) fn mutating(
        &self,
        mut cfg: MutatingWebhookConfiguration,
        name: &str,
        probe: &Probe,
    ) -> MutatingWebhookConfiguration {
        for hook in cfg.webhooks.iter_mut().flatten() {
            hook.client_config = self.client_config(&hook.client_config);
            fill_defaults(&mut hook.side_effects, &mut hook.admission_review_versions);
            self.scope(&mut hook.namespace_selector, &mut hook.object_selector);
        }
        cfg.webhooks
            .get_or_insert_with(Vec::new)
            .push(probe.mutating(self.probe_client_config()));
        cfg.metadata.name = Some(name.to_owned());
        clear_server_fields(&mut cfg.metadata);
        cfg
    }

    pub(super) fn validating(
        &self,
        mut cfg: ValidatingWebhookConfiguration,
        name: &str,
        probe: &Probe,
    ) -> ValidatingWebhookConfiguration {
        for hook in cfg.webhooks.iter_mut().flatten() {
            hook.client_config = self.client_config(&hook.client_config);
            fill_defaults(&mut hook.side_effects, &mut hook.admission_review_versions);
            self.scope(&mut hook.namespace_selector, &mut hook.object_selector);
        }
        cfg.webhooks
            .get_or_insert_with(Vec::new)
            .push(probe.validating(self.probe_client_config()));
        cfg.metadata.name = Some(name.to_owned());
        clear_server_fields(&mut cfg.metadata);
        cfg
    }

    /// Points a CRD's conversion at the test's server; returns the URL.
    pub(super) fn conversion(&self, crd: &mut CustomResourceDefinition) -> String {
        let given = crd.spec.conversion.take();
        let given_webhook = given.and_then(|c| c.webhook);
        let path = given_webhook
            .as_ref()
            .and_then(|w| w.client_config.as_ref())
            .and_then(|c| {
                c.service
                    .as_ref()
                    .and_then(|s| s.path.clone())
                    .or_else(|| c.url.as_deref().map(url_path))
            })
            .unwrap_or_else(|| "/convert".to_owned());
        let versions = given_webhook
            .map(|w| w.conversion_review_versions)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec!["v1".to_owned()]);
        let url = format!("{}{path}", self.base);
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "Webhook".to_owned(),
            webhook: Some(WebhookConversion {
                client_config: Some(CrdClientConfig {
                    url: Some(url.clone()),
                    ca_bundle: Some(self.ca_bundle.clone()),
                    service: None,
                }),
                conversion_review_versions: versions,
            }),
        });
        url
    }
}

/// The path of a webhook URL (`/` when it has none or does not parse).
fn url_path(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .map(|uri| uri.path().to_owned())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".to_owned())
}

/// Adds `requirement` to a selector (requirements are ANDed); no selector becomes one with
/// only the requirement.
fn and_requirement(selector: &mut Option<LabelSelector>, requirement: LabelSelectorRequirement) {
    selector
        .get_or_insert_with(LabelSelector::default)
        .match_expressions
        .get_or_insert_with(Vec::new)
        .push(requirement);
}

/// Fields v1 requires that a test rarely cares about.
fn fill_defaults(side_effects: &mut String, review_versions: &mut Vec<String>) {
    if side_effects.is_empty() {
        "None".clone_into(side_effects);
    }
    if review_versions.is_empty() {
        review_versions.push("v1".to_owned());
    }
}

/// Fields the server owns would make the apply fail or fight with the server.
fn clear_server_fields(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.resource_version = None;
    meta.uid = None;
    meta.creation_timestamp = None;
    meta.generation = None;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::ServiceReference;
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
    use std::collections::BTreeMap;

    fn rewrite(namespace: Option<&str>) -> Rewrite {
        Rewrite {
            base: "https://127.0.0.1:4443".to_owned(),
            probe_base: "https://127.0.0.1:5555".to_owned(),
            ca_bundle: ByteString(b"CA".to_vec()),
            namespace: namespace.map(str::to_owned),
        }
    }

    fn hook(client_config: WebhookClientConfig) -> ValidatingWebhook {
        ValidatingWebhook {
            name: "check.example.com".to_owned(),
            client_config,
            ..ValidatingWebhook::default()
        }
    }

    fn config(hooks: Vec<ValidatingWebhook>) -> ValidatingWebhookConfiguration {
        ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some("checks".to_owned()),
                resource_version: Some("12".to_owned()),
                ..ObjectMeta::default()
            },
            webhooks: Some(hooks),
        }
    }

    #[test]
    fn client_configs_keep_only_their_path() {
        let r = rewrite(None);
        let service = WebhookClientConfig {
            service: Some(ServiceReference {
                name: "svc".to_owned(),
                namespace: "system".to_owned(),
                path: Some("/validate-v1-configmap".to_owned()),
                port: Some(443),
            }),
            ..WebhookClientConfig::default()
        };
        let url = WebhookClientConfig {
            url: Some("https://webhook.example.com:9443/mutate?x".to_owned()),
            ..WebhookClientConfig::default()
        };
        let bare_url = WebhookClientConfig {
            url: Some("https://webhook.example.com".to_owned()),
            ..WebhookClientConfig::default()
        };
        let expect = |path: &str| WebhookClientConfig {
            url: Some(format!("https://127.0.0.1:4443{path}")),
            ca_bundle: Some(ByteString(b"CA".to_vec())),
            service: None,
        };
        assert_eq!(r.client_config(&service), expect("/validate-v1-configmap"));
        assert_eq!(r.client_config(&url), expect("/mutate"));
        assert_eq!(r.client_config(&bare_url), expect("/"));
        assert_eq!(
            r.client_config(&WebhookClientConfig::default()),
            expect("/")
        );
    }

    #[test]
    fn a_cluster_wide_install_keeps_names_and_hides_probes_from_the_test_webhooks() {
        let r = rewrite(None);
        let probe = Probe::new("ValidatingWebhookConfiguration checks".to_owned()).unwrap();
        let out = r.validating(
            config(vec![hook(WebhookClientConfig::default())]),
            "checks",
            &probe,
        );
        assert_eq!(out.metadata.name.as_deref(), Some("checks"));
        assert_eq!(out.metadata.resource_version, None);
        let hooks = out.webhooks.unwrap();
        assert_eq!(hooks.len(), 2);
        let own = &hooks[0];
        assert_eq!(own.side_effects, "None");
        assert_eq!(own.admission_review_versions, ["v1"]);
        assert_eq!(own.namespace_selector, None);
        let exprs = own
            .object_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap();
        assert_eq!(exprs.len(), 1);
        assert_eq!(exprs[0].key, PROBE_LABEL);
        assert_eq!(exprs[0].operator, "DoesNotExist");

        let p = &hooks[1];
        assert_eq!(p.name, probe.webhook);
        assert_eq!(p.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(
            p.client_config.url.as_deref(),
            Some("https://127.0.0.1:5555/rudder-envtest-probe")
        );
        let labels = p.object_selector.as_ref().unwrap().match_labels.as_ref();
        assert_eq!(labels.unwrap()[PROBE_LABEL], probe.token);
        assert_eq!(
            probe.object().metadata.labels.unwrap()[PROBE_LABEL],
            probe.token
        );
    }

    #[test]
    fn a_namespaced_install_ands_the_namespace_into_existing_selectors() {
        let r = rewrite(Some("my-test-3"));
        let mut given = hook(WebhookClientConfig::default());
        given.side_effects = "NoneOnDryRun".to_owned();
        given.namespace_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("team".to_owned(), "a".to_owned())])),
            match_expressions: None,
        });
        let name = r
            .name("ValidatingWebhookConfiguration", &config(vec![]).metadata)
            .unwrap();
        assert_eq!(name, "checks-my-test-3");
        let probe = Probe::new(format!("ValidatingWebhookConfiguration {name}")).unwrap();
        let out = r.validating(config(vec![given]), &name, &probe);
        assert_eq!(out.metadata.name.as_deref(), Some("checks-my-test-3"));
        let own = &out.webhooks.as_ref().unwrap()[0];
        assert_eq!(own.side_effects, "NoneOnDryRun");
        let ns = own.namespace_selector.as_ref().unwrap();
        assert_eq!(ns.match_labels.as_ref().unwrap()["team"], "a");
        let exprs = ns.match_expressions.as_ref().unwrap();
        assert_eq!(exprs[0].key, NAMESPACE_LABEL);
        assert_eq!(exprs[0].operator, "In");
        assert_eq!(
            exprs[0].values.as_deref(),
            Some(&["my-test-3".to_owned()][..])
        );
    }

    #[test]
    fn namespaced_names_stay_within_253_characters() {
        let r = rewrite(Some(&"n".repeat(63)));
        let meta = ObjectMeta {
            name: Some("c".repeat(253)),
            ..ObjectMeta::default()
        };
        let name = r.name("MutatingWebhookConfiguration", &meta).unwrap();
        assert_eq!(name.len(), 253);
        assert!(name.ends_with(&"n".repeat(63)));
    }

    #[test]
    fn a_configuration_without_a_name_is_an_error() {
        let err = rewrite(None)
            .name("MutatingWebhookConfiguration", &ObjectMeta::default())
            .unwrap_err();
        assert!(matches!(err, Error::InvalidWebhook { .. }), "{err}");
    }

    #[test]
    fn conversion_goes_to_slash_convert_with_v1_reviews() {
        let mut crd = CustomResourceDefinition::default();
        let url = rewrite(None).conversion(&mut crd);
        assert_eq!(url, "https://127.0.0.1:4443/convert");
        let conversion = crd.spec.conversion.unwrap();
        assert_eq!(conversion.strategy, "Webhook");
        let webhook = conversion.webhook.unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1"]);
        let cc = webhook.client_config.unwrap();
        assert_eq!(cc.url.as_deref(), Some("https://127.0.0.1:4443/convert"));
        assert_eq!(cc.ca_bundle, Some(ByteString(b"CA".to_vec())));
    }

    #[test]
    fn url_paths() {
        assert_eq!(url_path("https://a:1/x/y"), "/x/y");
        assert_eq!(url_path("https://a"), "/");
        assert_eq!(url_path("not a url"), "/");
    }
}
