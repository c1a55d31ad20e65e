//! The probe webhooks, one per installed configuration, and the wait until the API server
//! calls them (and reports every CRD's webhook conversion).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, RuleWithOperations, ValidatingWebhook, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use crate::crd::is_established;
use crate::env::random_token;
use crate::error::{Error, Result};
use crate::poll::POLL_INTERVAL;

/// The label of the objects that probe whether the API server enforces an installed
/// configuration. Installed webhooks never see objects carrying it: each gets
/// `objectSelector` requirement `envtest.rudder.rs/probe DoesNotExist`.
pub const PROBE_LABEL: &str = "envtest.rudder.rs/probe";

/// The path the probe webhooks point at (on a port that refuses connections).
pub(super) const PROBE_PATH: &str = "/rudder-envtest-probe";

/// Waits until every probe in `probes` is called (its dry-run create in `probe_namespace`
/// rejected naming it) and every CRD in `crds` (name, URL) is established with webhook
/// conversion at its URL; see `InstalledWebhooks::wait_until_enforced`.
pub(super) async fn wait_until_enforced(
    client: kube::Client,
    probe_namespace: &str,
    probes: &[Probe],
    crds: &[(String, String)],
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), probe_namespace);
    for probe in probes {
        wait_for_probe(&configmaps, probe, deadline, timeout).await?;
    }
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for (name, url) in crds {
        wait_for_conversion(&api, name, url, deadline, timeout).await?;
    }
    Ok(())
}

/// Waits until a dry-run create of `probe`'s object is rejected naming the probe.
async fn wait_for_probe(
    configmaps: &Api<ConfigMap>,
    probe: &Probe,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    loop {
        let state = match configmaps
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
                return Ok(());
            }
            Ok(_) => format!(
                "a dry-run create that webhook {} selects was admitted without calling it",
                probe.webhook
            ),
            Err(e) => format!("a dry-run create failed otherwise: {e}"),
        };
        if Instant::now() >= deadline {
            return Err(Error::WebhookNotEnforced {
                name: probe.configuration.clone(),
                timeout,
                state,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Waits until CRD `name` is established with webhook conversion at `url`.
async fn wait_for_conversion(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    url: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    loop {
        let state = match crds.get_opt(name).await {
            Ok(Some(crd)) if !is_established(&crd) => "not established".to_owned(),
            Ok(Some(crd)) => match crd.spec.conversion {
                Some(c) if c.strategy == "Webhook" => {
                    let got = c.webhook.and_then(|w| w.client_config).and_then(|c| c.url);
                    if got.as_deref() == Some(url) {
                        return Ok(());
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
        if Instant::now() >= deadline {
            return Err(Error::WebhookNotEnforced {
                name: format!("CustomResourceDefinition {name}"),
                timeout,
                state,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
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
    fn quoted(&self) -> String {
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

    fn selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(
                PROBE_LABEL.to_owned(),
                self.token.clone(),
            )])),
            match_expressions: None,
        }
    }

    fn rules() -> Vec<RuleWithOperations> {
        vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".to_owned()]),
            operations: Some(vec!["CREATE".to_owned()]),
            resources: Some(vec!["configmaps".to_owned()]),
            scope: Some("Namespaced".to_owned()),
        }]
    }

    pub(super) fn mutating(&self, client_config: WebhookClientConfig) -> MutatingWebhook {
        MutatingWebhook {
            name: self.webhook.clone(),
            client_config,
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

    pub(super) fn validating(&self, client_config: WebhookClientConfig) -> ValidatingWebhook {
        ValidatingWebhook {
            name: self.webhook.clone(),
            client_config,
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
