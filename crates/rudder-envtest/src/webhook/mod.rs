//! Installing admission and conversion webhooks that the API server calls on a loopback
//! address: certificates, rewriting the configurations, the probe that shows the API server
//! enforces them, and their removal.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, WebhookClientConfig as CrdClientConfig,
    WebhookConversion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};

use crate::certs::ServingPair;
use crate::crd::{apply_crds, is_established};
use crate::env::{TestEnv, free_ports, random_token};
use crate::error::{Error, Result};
use crate::namespace::TestNamespace;
use crate::poll::POLL_INTERVAL;

/// The label every [`TestNamespace`] carries, with the namespace's name as its value.
/// [`TestNamespace::install_webhooks`] scopes webhooks to the namespace with it.
pub const NAMESPACE_LABEL: &str = "envtest.rudder.rs/namespace";

/// The label of the objects that probe whether the API server enforces an installed
/// configuration. Installed webhooks never see objects carrying it: each gets
/// `objectSelector` requirement `envtest.rudder.rs/probe DoesNotExist`.
pub const PROBE_LABEL: &str = "envtest.rudder.rs/probe";

/// The path the probe webhooks point at (on a port that refuses connections).
const PROBE_PATH: &str = "/rudder-envtest-probe";

/// What a test asks the API server to call: admission webhook configurations and CRDs whose
/// conversion should go to a webhook. Everything is rewritten to call the test's server on
/// loopback; see [`TestNamespace::install_webhooks`].
#[derive(Clone, Debug, Default)]
pub struct WebhookOptions {
    /// Mutating webhook configurations. Each webhook's `clientConfig` keeps only its path
    /// (from `service.path` or `url`; `/` if neither has one).
    pub mutating: Vec<MutatingWebhookConfiguration>,
    /// Validating webhook configurations, rewritten as the mutating ones are.
    pub validating: Vec<ValidatingWebhookConfiguration>,
    /// CRDs to install with webhook conversion at `/convert` (or the path their own
    /// conversion webhook names).
    pub conversion_crds: Vec<CustomResourceDefinition>,
}

/// Webhooks installed in the API server, and what the test's webhook server needs to serve
/// them: the address to bind, a serving certificate and key, and the CA the API server
/// trusts.
///
/// Dropping it (or [`uninstall`](Self::uninstall)) deletes the configurations, turns the
/// CRDs' conversion back to `None` and removes the certificate directory. Drop does this on a
/// thread of its own, so it works in any runtime (or none); it waits at most 10 s.
pub struct InstalledWebhooks {
    addr: SocketAddr,
    serving: ServingPair,
    cert_dir: PathBuf,
    probe_namespace: String,
    probes: Vec<Probe>,
    crds: Vec<(String, String)>,
    cleanup: Cleanup,
    timeout: Duration,
    /// Bound but never listening, so a call to it is refused at once: the probe webhooks
    /// point here. Held so no one else can take the port meanwhile.
    _refusing: tokio::net::TcpSocket,
    removed: bool,
}

impl fmt::Debug for InstalledWebhooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstalledWebhooks")
            .field("addr", &self.addr)
            .field("cert_dir", &self.cert_dir)
            .field("mutating", &self.cleanup.mutating)
            .field("validating", &self.cleanup.validating)
            .field("conversion_crds", &self.cleanup.crds)
            .finish_non_exhaustive()
    }
}

impl InstalledWebhooks {
    /// The address the API server calls (`127.0.0.1:PORT`): bind the webhook server here.
    ///
    /// The port was free when the install picked it, and nothing in this process is handed
    /// it again, but another process could take it before the test's server binds it (as
    /// with Go's envtest); the server's bind then fails with "address in use".
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:PORT` followed by `path`: what the API server calls for `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The serving certificate (PEM), for `127.0.0.1` and `localhost`, signed by
    /// [`ca_pem`](Self::ca_pem).
    pub fn cert_pem(&self) -> &str {
        &self.serving.cert
    }

    /// The serving certificate's private key (PEM, PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.serving.key
    }

    /// The CA the configurations' `caBundle` holds (PEM); a test's own client can trust it.
    pub fn ca_pem(&self) -> &str {
        &self.serving.ca_cert
    }

    /// A directory holding `tls.crt`, `tls.key` (the serving pair) and `ca.crt`, for servers
    /// that read a certificate directory. It is inside the control plane's directory and
    /// goes with this value.
    pub fn cert_dir(&self) -> &Path {
        &self.cert_dir
    }

    /// A new serving certificate and key (PEM, for `127.0.0.1` and `localhost`) signed by the
    /// same CA as [`cert_pem`](Self::cert_pem), which the API server trusts: what a test of
    /// certificate rotation swaps in while the API server keeps calling.
    ///
    /// # Errors
    ///
    /// [`Error::WebhookCertificates`] if the certificate cannot be made.
    pub fn issue_serving_pair(&self) -> Result<(String, String)> {
        self.serving
            .reissue("rudder-envtest-webhook")
            .map_err(Error::WebhookCertificates)
    }

    /// The names of the installed mutating webhook configurations (with the namespace
    /// appended when installed for a [`TestNamespace`]).
    pub fn mutating_configurations(&self) -> &[String] {
        &self.cleanup.mutating
    }

    /// The names of the installed validating webhook configurations.
    pub fn validating_configurations(&self) -> &[String] {
        &self.cleanup.validating
    }

    /// The names of the CRDs whose conversion calls the webhook server.
    pub fn conversion_crds(&self) -> &[String] {
        &self.cleanup.crds
    }

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

    /// Deletes the configurations, turns the CRDs' conversion back to `None` and removes the
    /// certificate directory, reporting the first failure (dropping does the same and only
    /// logs failures).
    ///
    /// # Errors
    ///
    /// [`Error::Kube`] if a request fails (a configuration already gone is not a failure);
    /// [`Error::Io`] if the directory cannot be removed.
    pub async fn uninstall(mut self) -> Result<()> {
        self.removed = true;
        let deleted = self.cleanup.run().await;
        let removed = remove_dir(&self.cert_dir);
        deleted.and(removed)
    }
}

impl Drop for InstalledWebhooks {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let cleanup = self.cleanup.clone();
        // The caller's runtime may be single-threaded, shutting down or absent: a runtime of
        // our own on a thread of our own works in every case.
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("could not start a runtime: {e}"))?;
            runtime.block_on(async {
                match tokio::time::timeout(Duration::from_secs(10), cleanup.run()).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err("took over 10 s".to_owned()),
                }
            })
        })
        .join();
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not remove the installed webhooks"),
            Err(_) => tracing::warn!("removing the installed webhooks panicked"),
        }
        if let Err(e) = remove_dir(&self.cert_dir) {
            tracing::warn!(error = %e, "could not remove the webhook certificates");
        }
    }
}

impl TestNamespace {
    /// Installs webhooks that only this namespace's objects reach, and returns once the API
    /// server calls them (see [`InstalledWebhooks::wait_until_enforced`]), with what the
    /// test's server needs. Tests sharing a control plane do not see each other's webhooks.
    ///
    /// Besides what [`TestEnv::install_webhooks`] does, for each admission webhook:
    ///
    /// - its `namespaceSelector` gains the requirement [`NAMESPACE_LABEL`]` In [<this
    ///   namespace>]`, ANDed with what it had, so objects elsewhere never reach it. A
    ///   namespaceSelector does not apply to cluster-scoped objects other than namespaces:
    ///   a webhook on those needs an `objectSelector` of the test's own;
    /// - each configuration's name gets `-<namespace>` appended, so tests can install the
    ///   same configuration side by side.
    ///
    /// CRD conversion is cluster-wide by nature: a CRD should be installed with conversion by
    /// one test at a time (or use a CRD per test).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidWebhook`] for a configuration or CRD without a name;
    /// [`Error::Kube`] if the API server rejects one; [`Error::WebhookNotEnforced`] if not
    /// enforced within the builder's `webhook_timeout` (30 s by default). What was installed
    /// before the failure is removed again.
    pub async fn install_webhooks(&self, options: WebhookOptions) -> Result<InstalledWebhooks> {
        install(
            &self.config,
            Some(self.name()),
            &self.env_dir,
            options,
            self.webhook_timeout,
        )
        .await
    }
}

impl TestEnv {
    /// Installs webhooks for the whole cluster, and returns once the API server calls them
    /// (see [`InstalledWebhooks::wait_until_enforced`]), with what the test's server needs.
    /// On a control plane shared between tests, prefer
    /// [`TestNamespace::install_webhooks`], which keeps each test's webhooks to itself.
    ///
    /// It generates a CA and a serving certificate for `127.0.0.1` and `localhost`, picks a
    /// free loopback port, and rewrites:
    ///
    /// - each webhook's `clientConfig` to `url: https://127.0.0.1:PORT<path>` (the path of
    ///   its `service` or `url`, `/` if none) with the CA as `caBundle`; an empty
    ///   `sideEffects` becomes `None` and empty `admissionReviewVersions` become `[v1]`; its
    ///   `objectSelector` gains `envtest.rudder.rs/probe DoesNotExist` (see
    ///   [`PROBE_LABEL`]);
    /// - each configuration gains one probe webhook of the install's own;
    /// - each conversion CRD's `spec.conversion` to `strategy: Webhook` at
    ///   `https://127.0.0.1:PORT/convert` (or its own webhook's path) with the CA, and
    ///   `conversionReviewVersions: [v1]` unless it names some.
    ///
    /// Then it server-side applies them (field manager `rudder-envtest`, forced).
    ///
    /// # Errors
    ///
    /// As [`TestNamespace::install_webhooks`].
    pub async fn install_webhooks(&self, options: WebhookOptions) -> Result<InstalledWebhooks> {
        install(
            self.config(),
            None,
            self.dir(),
            options,
            self.webhook_timeout(),
        )
        .await
    }
}

/// The removal half of an install: which objects to delete or revert, and how to reach the
/// API server from any runtime.
#[derive(Clone)]
struct Cleanup {
    config: kube::Config,
    mutating: Vec<String>,
    validating: Vec<String>,
    crds: Vec<String>,
}

impl Cleanup {
    async fn run(&self) -> Result<()> {
        let client = client(&self.config)?;
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let crds: Api<CustomResourceDefinition> = Api::all(client);
        let mut first_error = None;
        let mut note = |context: String, result: kube::Result<()>| match result {
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                first_error.get_or_insert(Error::Kube { context, source });
            }
            Ok(()) => {}
        };
        for name in &self.mutating {
            let result = mutating.delete(name, &DeleteParams::default()).await;
            note(
                format!("delete MutatingWebhookConfiguration {name}"),
                result.map(|_| ()),
            );
        }
        for name in &self.validating {
            let result = validating.delete(name, &DeleteParams::default()).await;
            note(
                format!("delete ValidatingWebhookConfiguration {name}"),
                result.map(|_| ()),
            );
        }
        let none = serde_json::json!({
            "spec": { "conversion": { "strategy": "None", "webhook": null } }
        });
        for name in &self.crds {
            let result = crds
                .patch(name, &PatchParams::default(), &Patch::Merge(&none))
                .await;
            note(
                format!("turn off webhook conversion of CustomResourceDefinition {name}"),
                result.map(|_| ()),
            );
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// One probe webhook: which configuration it stands for, its name, and the label value it
/// selects.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Probe {
    configuration: String,
    webhook: String,
    token: String,
}

impl Probe {
    fn new(configuration: String) -> Result<Self> {
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
    fn object(&self) -> ConfigMap {
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

    fn mutating(&self, rewrite: &Rewrite) -> MutatingWebhook {
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

    fn validating(&self, rewrite: &Rewrite) -> ValidatingWebhook {
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

/// How an install rewrites what the test gave it.
struct Rewrite {
    /// `https://127.0.0.1:PORT`, the test server's base URL.
    base: String,
    /// `https://127.0.0.1:PORT` of the refusing port.
    probe_base: String,
    ca_bundle: ByteString,
    namespace: Option<String>,
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
    fn name(&self, kind: &str, meta: &ObjectMeta) -> Result<String> {
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

    fn mutating(
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
            .push(probe.mutating(self));
        cfg.metadata.name = Some(name.to_owned());
        clear_server_fields(&mut cfg.metadata);
        cfg
    }

    fn validating(
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
            .push(probe.validating(self));
        cfg.metadata.name = Some(name.to_owned());
        clear_server_fields(&mut cfg.metadata);
        cfg
    }

    /// Points a CRD's conversion at the test's server; returns the URL.
    fn conversion(&self, crd: &mut CustomResourceDefinition) -> String {
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

async fn install(
    config: &kube::Config,
    namespace: Option<&str>,
    env_dir: &Path,
    options: WebhookOptions,
    timeout: Duration,
) -> Result<InstalledWebhooks> {
    let serving = ServingPair::generate("rudder-envtest-webhook-ca", "rudder-envtest-webhook")
        .map_err(Error::WebhookCertificates)?;
    let [port] = free_ports()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let refusing = refusing_socket()?;
    let probe_port = refusing
        .local_addr()
        .map_err(|source| Error::Io {
            action: "read the address of a socket bound on",
            path: PathBuf::from("127.0.0.1"),
            source,
        })?
        .port();
    let cert_dir = cert_dir(env_dir)?;
    let rewrite = Rewrite {
        base: format!("https://{addr}"),
        probe_base: format!("https://127.0.0.1:{probe_port}"),
        ca_bundle: ByteString(serving.ca_cert.clone().into_bytes()),
        namespace: namespace.map(str::to_owned),
    };
    // From here on, dropping `installed` on an error removes what was installed so far.
    let mut installed = InstalledWebhooks {
        addr,
        serving,
        cert_dir,
        probe_namespace: namespace.unwrap_or("default").to_owned(),
        probes: Vec::new(),
        crds: Vec::new(),
        cleanup: Cleanup {
            config: config.clone(),
            mutating: Vec::new(),
            validating: Vec::new(),
            crds: Vec::new(),
        },
        timeout,
        _refusing: refusing,
        removed: false,
    };
    for (file, text) in [
        ("tls.crt", &installed.serving.cert),
        ("tls.key", &installed.serving.key),
        ("ca.crt", &installed.serving.ca_cert),
    ] {
        let path = installed.cert_dir.join(file);
        fs::write(&path, text).map_err(|source| Error::Io {
            action: "write",
            path,
            source,
        })?;
    }

    let client = client(config)?;
    let params = PatchParams::apply(crate::APPLY_FIELD_MANAGER).force();
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    for cfg in options.mutating {
        let name = rewrite.name("MutatingWebhookConfiguration", &cfg.metadata)?;
        let probe = Probe::new(format!("MutatingWebhookConfiguration {name}"))?;
        let cfg = rewrite.mutating(cfg, &name, &probe);
        installed.cleanup.mutating.push(name.clone());
        mutating_api
            .patch(&name, &params, &Patch::Apply(&cfg))
            .await
            .map_err(|source| Error::Kube {
                context: format!("apply MutatingWebhookConfiguration {name}"),
                source,
            })?;
        installed.probes.push(probe);
    }
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for cfg in options.validating {
        let name = rewrite.name("ValidatingWebhookConfiguration", &cfg.metadata)?;
        let probe = Probe::new(format!("ValidatingWebhookConfiguration {name}"))?;
        let cfg = rewrite.validating(cfg, &name, &probe);
        installed.cleanup.validating.push(name.clone());
        validating_api
            .patch(&name, &params, &Patch::Apply(&cfg))
            .await
            .map_err(|source| Error::Kube {
                context: format!("apply ValidatingWebhookConfiguration {name}"),
                source,
            })?;
        installed.probes.push(probe);
    }
    let mut crds = Vec::new();
    for mut crd in options.conversion_crds {
        let name = crd
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::InvalidWebhook {
                what: "a CustomResourceDefinition".to_owned(),
                reason: "it has no metadata.name".to_owned(),
            })?;
        let url = rewrite.conversion(&mut crd);
        installed.cleanup.crds.push(name.clone());
        installed.crds.push((name, url));
        crds.push(crd);
    }
    if !crds.is_empty() {
        apply_crds(&client, crds, timeout).await?;
    }
    installed.wait_until_enforced(installed.timeout).await?;
    tracing::debug!(
        addr = %installed.addr,
        configurations = installed.probes.len(),
        crds = installed.crds.len(),
        "webhooks installed and enforced"
    );
    Ok(installed)
}

fn client(config: &kube::Config) -> Result<kube::Client> {
    kube::Client::try_from(config.clone()).map_err(|source| Error::Kube {
        context: "build a client".to_owned(),
        source,
    })
}

/// A loopback socket bound to a port of the kernel's choosing but not listening: connecting
/// to it is refused at once, and no one else can bind the port while it is held.
fn refusing_socket() -> Result<tokio::net::TcpSocket> {
    let io = |source| Error::Io {
        action: "bind a socket on",
        path: PathBuf::from("127.0.0.1"),
        source,
    };
    let socket = tokio::net::TcpSocket::new_v4().map_err(io)?;
    socket
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .map_err(io)?;
    Ok(socket)
}

/// A fresh directory for one install's certificates, inside the control plane's directory so
/// that its watchdog removes it too.
fn cert_dir(env_dir: &Path) -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = env_dir
        .join("webhooks")
        .join(COUNTER.fetch_add(1, Ordering::Relaxed).to_string());
    fs::create_dir_all(&dir).map_err(|source| Error::Io {
        action: "create",
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

fn remove_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            action: "remove",
            path: dir.to_owned(),
            source: e,
        }),
        _ => Ok(()),
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
