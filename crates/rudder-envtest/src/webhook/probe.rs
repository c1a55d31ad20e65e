//! The probe webhooks, one per installed configuration, and the wait until the API server
//! calls them (and reports every CRD's webhook conversion).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, RuleWithOperations, ValidatingWebhook,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, PostParams};

use super::rewrite::Rewrite;
use super::{InstalledWebhooks, PROBE_LABEL, client};
use crate::crd::is_established;
use crate::env::random_token;
use crate::error::{Error, Result};
use crate::poll::POLL_INTERVAL;

impl InstalledWebhooks {
    /// Waits until the API server enforces every installed configuration and reports every
    /// CRD's webhook conversion. The install already did this; call it again after changing
    /// a configuration behind the install's back, or to check.
    ///
    /// It works whether or not the test's server runs. Each installed configuration carries
    /// one extra webhook of the install's own (named `<token>.probe.envtest.rudder.rs`) that
    /// selects only ConfigMaps labelled [`PROBE_LABEL`]` = <token>`, points at a port that
    /// refuses connections, and fails closed. A dry-run create of such a ConfigMap is
    /// admitted while the API server has not yet seen the configuration, and rejected, with
    /// a message naming the probe webhook, once it has. The API server reads a configuration
    /// as one object, so once its probe webhook is called, so are the test's webhooks in it.
    /// The test's own webhooks never see the probes (they exclude [`PROBE_LABEL`]).
    ///
    /// A CRD counts once the stored CRD is established and says `strategy: Webhook` with
    /// this install's URL. The API server's CRD handler switches to the new converter when
    /// its own informer sees that, which no request can observe without an object to
    /// convert, so a conversion within milliseconds of the install could still use the old
    /// strategy.
    ///
    /// # Errors
    ///
    /// [`Error::WebhookNotEnforced`] after `timeout`, saying what the last check saw;
    /// [`Error::Kube`] if no client can be built.
    pub async fn wait_until_enforced(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let client = client(&self.cleanup.config)?;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &self.probe_namespace);
        for probe in &self.probes {
            let mut state;
            loop {
                state = match configmaps
                    .create(
                        &PostParams {
                            dry_run: true,
                            ..PostParams::default()
                        },
                        &probe.object(),
                    )
                    .await
                {
                    Err(kube::Error::Api(status)) if status.message.contains(&probe.quoted()) => {
                        break;
                    }
                    Ok(_) => format!(
                        "a dry-run create that webhook {} selects was admitted without calling it",
                        probe.webhook
                    ),
                    Err(e) => format!("a dry-run create failed otherwise: {e}"),
                };
                if tokio::time::Instant::now() >= deadline {
                    return Err(Error::WebhookNotEnforced {
                        name: probe.configuration.clone(),
                        timeout,
                        state,
                    });
                }
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        }
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        for (name, url) in &self.crds {
            let mut state;
            loop {
                state = match crds.get_opt(name).await {
                    Ok(Some(crd)) if !is_established(&crd) => "not established".to_owned(),
                    Ok(Some(crd)) => match crd.spec.conversion {
                        Some(c) if c.strategy == "Webhook" => {
                            let got = c.webhook.and_then(|w| w.client_config).and_then(|c| c.url);
                            if got.as_deref() == Some(url.as_str()) {
                                break;
                            }
                            format!("its conversion webhook is {got:?}, not {url}")
                        }
                        other => {
                            format!("its conversion strategy is {:?}", other.map(|c| c.strategy))
                        }
                    },
                    Ok(None) => "not found".to_owned(),
                    Err(e) => format!("could not read it: {e}"),
                };
                if tokio::time::Instant::now() >= deadline {
                    return Err(Error::WebhookNotEnforced {
                        name: format!("CustomResourceDefinition {name}"),
                        timeout,
                        state,
                    });
                }
                tokio::time::sleep(POLL_INTERVAL).await;
            }
        }
        Ok(())
    }
}

/// One probe webhook: which configuration it stands for, its name, and the label value it
/// selects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Probe {
    pub(super) configuration: String,
    pub(super) webhook: String,
    pub(super) token: String,
}

impl Probe {
    pub(super) fn new(configuration: String) -> Result<Self> {
        let token = random_token()?;
        Ok(Self {
            configuration,
            webhook: format!("{token}.probe.envtest.rudder.rs"),
            token,
        })
    }

    /// The webhook's name as the API server quotes it in a failure.
    pub(super) fn quoted(&self) -> String {
        format!("\"{}\"", self.webhook)
    }

    /// The ConfigMap whose dry-run create only this probe's webhook selects.
    pub(super) fn object(&self) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                generate_name: Some("envtest-probe-".to_owned()),
                labels: Some(BTreeMap::from([(
                    PROBE_LABEL.to_owned(),
                    self.token.clone(),
                )])),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    pub(super) fn selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(
                PROBE_LABEL.to_owned(),
                self.token.clone(),
            )])),
            match_expressions: None,
        }
    }

    pub(super) fn rules() -> Vec<RuleWithOperations> {
        vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(vec!["CREATE".to_owned()]),
            resources: Some(vec!["configmaps".to_owned()]),
            scope: Some("Namespaced".to_owned()),
        }]
    }

    pub(super) fn mutating(&self, rewrite: &Rewrite) -> MutatingWebhook {
        MutatingWebhook {
            name: self.webhook.clone(),
            client_config: rewrite.probe_client_config(),
            rules: Some(Self::rules()),
            object_selector: Some(self.selector()),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Exact".to_owned()),
            reinvocation_policy: Some("Never".to_owned()),
            side_effects: "None".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            timeout_seconds: Some(1),
            ..MutatingWebhook::default()
        }
    }

    pub(super) fn validating(&self, rewrite: &Rewrite) -> ValidatingWebhook {
        ValidatingWebhook {
            name: self.webhook.clone(),
            client_config: rewrite.probe_client_config(),
            rules: Some(Self::rules()),
            object_selector: Some(self.selector()),
            failure_policy: Some("Fail".to_owned()),
            match_policy: Some("Exact".to_owned()),
            side_effects: "None".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            timeout_seconds: Some(1),
            ..ValidatingWebhook::default()
        }
    }
}
