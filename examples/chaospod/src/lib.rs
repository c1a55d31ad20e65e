//! Run: `cargo xtask demo` (a guided run on a local control plane), or on a cluster
//! `cargo run -p chaospod -- --crd | kubectl apply -f -` then `cargo run -p chaospod`.
//!
//! The ChaosPod example, after controller-runtime's: a `ChaosPod` custom resource holds a Pod
//! template. Its controller runs a Pod from the template, owned by the ChaosPod, deletes it
//! at the time in `spec.nextStop`, lets the next reconcile create a new one, and keeps count
//! in the status. It runs under a [`rudder::manager::Manager`] with leader election, health probes and
//! metrics (see the `chaospod` binary).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! chaospod::install_crd(&client).await?;
//! let manager = rudder::manager::Manager::builder(client).name("chaospod").build()?;
//! chaospod::add_controller(&manager).await?;
//! manager.start_until_signal().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The reconciler is written for stale caches and failed requests: every decision it makes
//! from the cache is either checked by the API server (a create that already happened is a
//! conflict; a status write carries the resourceVersion it was computed from) or harmless to
//! repeat (deleting a Pod that is already gone). Runs and stops are counted by Pod uid, so
//! each is counted once whatever fails in between; a stop is counted before the Pod is
//! deleted, and a Pod counted as stopped is deleted again if that delete was lost.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Patch;
use kube::core::DynamicObject;
use kube::core::ObjectMeta;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use rudder::WebhookManifests;
use rudder::client::{ClientError, is_controlled_by, set_controller_reference};
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manager::rbac::{Permissions, Verb};
use rudder::prelude::*;
use rudder::webhook::admission::{Defaulter, Denial, FieldError, Validator, Warnings};
use rudder::webhook::manifest::ClientConfig;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The controller's name: in logs, metrics (`controller="chaospod"`) and Events.
pub const CONTROLLER: &str = "chaospod";

/// How long a Pod runs when the spec gives no `periodSeconds`.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// Field manager for the CRD install.
const FIELD_MANAGER: &str = "chaospod";

/// The desired state of a [`ChaosPod`].
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.rudder.dev",
    version = "v1",
    kind = "ChaosPod",
    namespaced,
    status = "ChaosPodStatus",
    shortname = "chaos",
    printcolumn = r#"{"name":"Runs","type":"integer","jsonPath":".status.runs"}"#,
    printcolumn = r#"{"name":"Stops","type":"integer","jsonPath":".status.stops"}"#,
    printcolumn = r#"{"name":"Next stop","type":"date","jsonPath":".spec.nextStop"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ChaosPodSpec {
    /// The Pod to run; it gets the ChaosPod's name and namespace.
    #[schemars(schema_with = "any_object")]
    pub template: PodTemplateSpec,
    /// When the running Pod is deleted. The controller sets it when it creates a Pod; set it
    /// yourself to stop the Pod earlier or later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub next_stop: Option<Time>,
    /// How long each Pod runs, in seconds (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub period_seconds: Option<u32>,
}

/// What the controller has done for a [`ChaosPod`].
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChaosPodStatus {
    /// When the current (or last) Pod was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub last_run: Option<Time>,
    /// When the last Pod was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub last_stop: Option<Time>,
    /// The UID of the last Pod counted as a run, so no Pod is counted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_uid: Option<String>,
    /// The UID of the last Pod counted as stopped: it is deleted (again, if a delete was
    /// lost) and never counted twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stopped_uid: Option<String>,
    /// Pods created.
    #[serde(default)]
    pub runs: u32,
    /// Pods stopped.
    #[serde(default)]
    pub stops: u32,
}

/// A Pod template is validated by the API server when the Pod is created; the CRD keeps it as
/// it is.
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn timestamp(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "format": "date-time" })
}

impl ChaosPod {
    /// A ChaosPod `name` running `image`, stopping its Pod every `period`.
    pub fn new_with_image(name: &str, image: &str, period: Duration) -> Self {
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_owned(), name.to_owned())].into()),
                ..ObjectMeta::default()
            }),
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: "main".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let period_seconds = u32::try_from(period.as_secs().max(1)).unwrap_or(u32::MAX);
        Self::new(
            name,
            ChaosPodSpec {
                template,
                next_stop: None,
                period_seconds: Some(period_seconds),
            },
        )
    }

    fn period(&self) -> Duration {
        self.spec
            .period_seconds
            .map_or(DEFAULT_PERIOD, |s| Duration::from_secs(s.into()))
    }
}

/// The ChaosPod reconciler.
#[derive(Debug)]
pub struct ChaosPodReconciler {
    tools: Tools,
}

impl ChaosPodReconciler {
    /// A reconciler working with `tools` (see [`rudder::ControllerBuilder::complete_with`]).
    pub fn new(tools: Tools) -> Self {
        Self { tools }
    }

    /// Creates the Pod from the template, controlled by the ChaosPod. Its create event
    /// brings the reconcile that counts the run.
    async fn start(&self, chaos: &ChaosPod) -> Result<Action, ClientError> {
        let mut template = chaos.spec.template.clone();
        let mut pod = Pod {
            metadata: template.metadata.take().unwrap_or_default(),
            spec: template.spec,
            status: None,
        };
        pod.metadata.name = Some(chaos.name_any());
        pod.metadata.namespace = chaos.namespace();
        set_controller_reference(chaos, &mut pod)?;
        match self.tools.client().create(&pod).await {
            // A conflict: the cache is behind our own create; its event will bring us back.
            Err(error) if !error.is_conflict() => Err(error),
            _ => Ok(Action::done()),
        }
    }

    /// Counts `pod` as a run, once (by its uid), and sets the ChaosPod's next stop for it;
    /// returns the ChaosPod as written.
    async fn count_run(&self, chaos: &ChaosPod, pod: &Pod) -> Result<ChaosPod, ClientError> {
        let client = self.tools.client();
        let created =
            (pod.metadata.creation_timestamp.clone()).unwrap_or_else(|| Time(Timestamp::now()));
        // Also when it is set already: the answer is the ChaosPod as it is now, whose
        // resourceVersion the status write below is conditional on.
        let next_stop = Time(add(created.0, chaos.period()));
        let patch = Patch::Merge(json!({ "spec": { "nextStop": next_stop } }));
        let chaos = client.patch(chaos, &patch).await?;
        let mut status = chaos.status.clone().unwrap_or_default();
        if status.last_run_uid == pod.uid() {
            // Counted already: the cache had not seen that status yet.
            return Ok(chaos);
        }
        status.runs += 1;
        status.last_run = Some(created);
        status.last_run_uid = pod.uid();
        let chaos = client.patch_status(&chaos, &status).await?;
        let note = format!("started Pod {} (run {})", chaos.name_any(), status.runs);
        self.tools
            .record(&chaos, EventType::Normal, "Started", note)
            .await;
        Ok(chaos)
    }

    /// Counts the stop of `pod`, once (by its uid), then deletes it.
    async fn stop(&self, chaos: &ChaosPod, pod: &Pod) -> Result<(), ClientError> {
        let mut status = chaos.status.clone().unwrap_or_default();
        status.stops += 1;
        status.last_stop = Some(Time(Timestamp::now()));
        status.last_stopped_uid = pod.uid();
        let chaos = self.tools.client().patch_status(chaos, &status).await?;
        let note = format!("stopped Pod {} (stop {})", chaos.name_any(), status.stops);
        self.tools
            .record(&chaos, EventType::Normal, "Stopped", note)
            .await;
        // Gone already, or a newer Pod of that name: nothing of ours to stop.
        self.tools.client().delete(pod).await?;
        Ok(())
    }

    async fn reconcile_chaos(&self, request: &Request) -> Result<Action, ClientError> {
        let client = self.tools.client();
        let Some(chaos) = client.get::<ChaosPod>(request).await? else {
            return Ok(Action::done());
        };
        if chaos.meta().deletion_timestamp.is_some() {
            // The garbage collector deletes the Pod through its owner reference.
            return Ok(Action::done());
        }
        let Some(pod) = client.get::<Pod>(request).await? else {
            return self.start(&chaos).await;
        };
        if pod.meta().deletion_timestamp.is_some() {
            // Stopping; its delete event brings us back to start the next one.
            return Ok(Action::done());
        }
        if !is_controlled_by(&*chaos, &*pod) {
            tracing::warn!(pod = %pod.name_any(), "a Pod of that name is not ours; leaving it");
            return Ok(Action::done());
        }
        let status = chaos.status.clone().unwrap_or_default();
        if pod.uid() == status.last_stopped_uid {
            // Counted as stopped (or the cache has not seen the delete yet): finish it.
            client.delete(&*pod).await?;
            return Ok(Action::done());
        }
        let chaos = if pod.uid() == status.last_run_uid {
            (*chaos).clone()
        } else {
            self.count_run(&chaos, &pod).await?
        };
        let due = stop_time(&chaos, &pod);
        if due > Timestamp::now() {
            return Ok(Action::requeue_after(until(due)));
        }
        self.stop(&chaos, &pod).await?;
        Ok(Action::done())
    }
}

impl Reconciler for ChaosPodReconciler {
    type Error = ClientError;

    async fn reconcile(&self, request: Request, _ctx: Context) -> Result<Action, ClientError> {
        match self.reconcile_chaos(&request).await {
            // A write computed from a cached ChaosPod older than the server's: the cache is
            // about to catch up; try again then, which is no error.
            Err(error) if error.is_conflict() => Ok(Action::requeue()),
            other => other,
        }
    }
}

/// When `pod` is due to stop: `spec.nextStop`, unless that is from before the Pod was
/// created (the cache has not seen the ChaosPod's new next stop yet); then its creation
/// time plus the period, which is what the controller writes.
fn stop_time(chaos: &ChaosPod, pod: &Pod) -> Timestamp {
    let created = pod.meta().creation_timestamp.as_ref().map(|t| t.0);
    match (chaos.spec.next_stop.as_ref(), created) {
        (Some(stop), Some(created)) if stop.0 > created => stop.0,
        (Some(stop), None) => stop.0,
        (_, Some(created)) => add(created, chaos.period()),
        (None, None) => add(Timestamp::now(), chaos.period()),
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// How long from now until `t` (zero if past), for a requeue.
fn until(t: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO)
}

/// Defaults a new ChaosPod (controller-runtime's seed has this webhook too): a missing or
/// past `spec.nextStop` becomes now plus the period, so every ChaosPod says from its first
/// version when its Pod stops. Updates are left as they are: setting `nextStop` to now (or
/// earlier) on a running ChaosPod is how a user stops its Pod early.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChaosPodDefaulter;

impl Defaulter<ChaosPod> for ChaosPodDefaulter {
    async fn default(
        &self,
        chaos: &mut ChaosPod,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        let now = Timestamp::now();
        let stale = chaos.spec.next_stop.as_ref().is_none_or(|t| t.0 <= now);
        if request.operation == Operation::Create && stale {
            chaos.spec.next_stop = Some(Time(add(now, chaos.period())));
        }
        Ok(Vec::new())
    }
}

/// Refuses ChaosPods the controller cannot run: a template without containers, or with a
/// container without an image (the API server would refuse each Pod, over and over).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChaosPodValidator;

impl ChaosPodValidator {
    fn check(chaos: &ChaosPod) -> Result<Warnings, Denial> {
        let containers = (chaos.spec.template.spec.as_ref()).map_or(&[][..], |s| &s.containers);
        if containers.is_empty() {
            return Err(Denial::invalid([FieldError::required(
                "spec.template.spec.containers",
                "the Pod template needs at least one container",
            )]));
        }
        let missing: Vec<FieldError> = containers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.image.as_deref().is_none_or(str::is_empty))
            .map(|(i, c)| {
                FieldError::required(
                    format!("spec.template.spec.containers[{i}].image"),
                    format!("container {:?} has no image", c.name),
                )
            })
            .collect();
        if missing.is_empty() {
            Ok(Vec::new())
        } else {
            Err(Denial::invalid(missing))
        }
    }
}

impl Validator<ChaosPod> for ChaosPodValidator {
    async fn validate_create(
        &self,
        chaos: &ChaosPod,
        _: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        Self::check(chaos)
    }

    async fn validate_update(
        &self,
        _old: &ChaosPod,
        chaos: &ChaosPod,
        _: &AdmissionRequest<DynamicObject>,
    ) -> Result<Warnings, Denial> {
        Self::check(chaos)
    }
}

/// Declares the ChaosPod webhooks (defaulting and validation) on `manager`; they are served
/// when the manager starts.
///
/// # Errors
///
/// As [`rudder::WebhookBuilder::complete`]: declared twice on one manager.
pub fn add_webhooks(manager: &Manager) -> Result<(), rudder::Error> {
    rudder::new_webhook(manager)
        .for_::<ChaosPod>()
        .defaulter(ChaosPodDefaulter)
        .validator(ChaosPodValidator)
        .complete()
}

/// Declares the ChaosPod controller on `manager`: it reconciles ChaosPods and the Pods they
/// own.
///
/// # Errors
///
/// As [`rudder::ControllerBuilder::complete`]: the CRD must be installed first.
pub async fn add_controller(
    manager: &Manager,
) -> Result<Controller<ChaosPodReconciler>, rudder::Error> {
    rudder::new_controller(manager)
        .for_::<ChaosPod>()
        // Its Pods: watched, created (with an owner reference) and deleted; never patched.
        .owns_writes::<Pod>([Verb::Create, Verb::Delete])
        // Beyond what the builder sees: the reconciler patches `spec.nextStop` and the
        // status.
        .permissions(
            Permissions::new()
                .verbs::<ChaosPod>([Verb::Patch])
                .subresource::<ChaosPod>("status", [Verb::Patch]),
        )
        .named(CONTROLLER)
        .complete_with(ChaosPodReconciler::new)
        .await
}

/// How to run the ChaosPod manager.
#[derive(Clone, Debug)]
pub struct Options {
    /// Watch only this namespace (default: all).
    pub namespace: Option<String>,
    /// Where `/healthz` and `/readyz` listen; `None` for no probe server.
    pub health_address: Option<SocketAddr>,
    /// Where `/metrics` listens; `None` for no metrics server.
    pub metrics_address: Option<SocketAddr>,
    /// Leader election, so that of several replicas one reconciles.
    pub leader_election: Option<LeaderElectionConfig>,
    /// The webhook server (defaulting and validation), or `None` for no webhooks.
    pub webhooks: Option<rudder::webhook::Options>,
    /// Serve the webhooks with certificates the operator makes itself, kept in a Secret and
    /// injected into the webhook configurations ([`self_signed_certificates`]), instead of
    /// the certificate source in [`webhooks`](Self::webhooks). Setting it turns the
    /// webhooks on (with the default server options if `webhooks` is `None`).
    pub webhook_certificates: Option<rudder::certs::SelfSignedConfig>,
    /// Serve `/metrics` over HTTPS, only to callers the API server authenticates and
    /// authorizes for `get` on `/metrics` ([`rudder::manager::SecureMetrics`]: from
    /// certificate files, or the self-signed certificates of
    /// [`webhook_certificates`](Self::webhook_certificates)). The operator then needs
    /// [`secure_metrics_rbac`].
    pub secure_metrics: Option<rudder::manager::SecureMetrics>,
}

impl Default for Options {
    /// The manager's default addresses, all namespaces, no leader election, no webhooks.
    fn default() -> Self {
        Self {
            namespace: None,
            health_address: Some(rudder::manager::DEFAULT_HEALTH_ADDRESS),
            metrics_address: Some(rudder::manager::DEFAULT_METRICS_ADDRESS),
            leader_election: None,
            webhooks: None,
            webhook_certificates: None,
            secure_metrics: None,
        }
    }
}

/// A manager named `chaospod` with `options`, and the ChaosPod controller on it; start it
/// with [`Manager::start`] or [`Manager::start_until_signal`].
///
/// # Errors
///
/// [`SetupError`]: the manager's settings were refused, or the controller could not be
/// declared (the CRD is not installed).
pub async fn manager(client: kube::Client, options: Options) -> Result<Manager, SetupError> {
    build_manager(client, options, false).await
}

/// Every object needed to deploy the operator configured with `options` (see
/// [`rudder::manifests::manifests`]): the CRD, ServiceAccount, RBAC derived from the code
/// (controller, leader election, self-signed certificates, secure metrics), Deployment,
/// and with webhooks their Service and configurations. No cluster is contacted.
///
/// # Errors
///
/// As [`manager`].
pub async fn deploy_manifests(
    options: Options,
    deploy: rudder::manifests::DeployOptions,
) -> Result<rudder::manifests::Manifests, SetupError> {
    let client = rudder::manifests::offline_client().map_err(|_| SetupError::Offline)?;
    let manager = build_manager(client, options, true).await?;
    rudder::manifests::manifests(&manager, &deploy.crds([ChaosPod::crd()]))
        .map_err(|_| SetupError::Offline)
}

async fn build_manager(
    client: kube::Client,
    options: Options,
    render_only: bool,
) -> Result<Manager, SetupError> {
    let mut builder = Manager::builder(client)
        .render_only(render_only)
        .name(CONTROLLER)
        .health_probe_address(options.health_address)
        .metrics_address(options.metrics_address);
    if let Some(namespace) = options.namespace {
        builder = builder.cache(move |cache| cache.default_namespace(namespace));
    }
    if let Some(election) = options.leader_election {
        builder = builder.leader_election(election);
    }
    let webhooks = options.webhooks.is_some() || options.webhook_certificates.is_some();
    if let Some(webhook) = options.webhooks {
        builder = builder.webhook_options(webhook);
    }
    if let Some(certificates) = options.webhook_certificates {
        builder = builder.self_signed_webhook_certificates(certificates);
    }
    if let Some(secure) = options.secure_metrics {
        builder = builder.secure_metrics(secure);
    }
    let manager = builder.build()?;
    if webhooks {
        add_webhooks(&manager)?;
    }
    add_controller(&manager).await?;
    Ok(manager)
}

/// Why the manager could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The manager refused its settings.
    #[error("cannot build the manager")]
    Manager(#[from] rudder::manager::BuildError),
    /// The controller or the webhooks could not be declared.
    #[error("cannot declare the ChaosPod controller or webhooks")]
    Controller(#[from] rudder::Error),
    /// The offline client that records webhook registrations could not be made.
    #[error("cannot make an offline client to render manifests")]
    Offline,
}

/// The ChaosPod CRD as YAML, for `kubectl apply -f -`.
///
/// # Errors
///
/// If it cannot be serialised (it always can).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&ChaosPod::crd())
}

/// The ChaosPod CRD and the webhook configurations for its webhooks, reached through
/// `client` (the operator's Service, or a URL), rendered from what [`add_webhooks`]
/// registers.
///
/// # Errors
///
/// If a manager cannot be made to record the registrations (no cluster is contacted).
pub fn manifests(
    client: &ClientConfig,
) -> Result<(CustomResourceDefinition, WebhookManifests), SetupError> {
    // Only to record the registrations: this client never makes a request.
    let offline = rudder::manifests::offline_client().map_err(|_| SetupError::Offline)?;
    let manager = Manager::builder(offline)
        .health_probe_address(None)
        .metrics_address(None)
        .build()?;
    add_webhooks(&manager)?;
    let mut crds = [ChaosPod::crd()];
    let webhooks = rudder::webhook_manifests(&manager, CONTROLLER, client, &mut crds);
    let [crd] = crds;
    Ok((crd, webhooks))
}

/// [`manifests`] as multi-document YAML, for `kubectl apply -f -`.
///
/// # Errors
///
/// As [`manifests`], or if they cannot be serialised (they always can).
pub fn manifests_yaml(
    client: &ClientConfig,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let (crd, webhooks) = manifests(client)?;
    let mut yaml = serde_yaml::to_string(&crd)?;
    if let Some(mutating) = webhooks.mutating {
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml::to_string(&mutating)?);
    }
    if let Some(validating) = webhooks.validating {
        yaml.push_str("---\n");
        yaml.push_str(&serde_yaml::to_string(&validating)?);
    }
    Ok(yaml)
}

/// Self-signed certificates for the ChaosPod webhooks: a CA and a serving certificate for
/// Service `service` in `namespace`, kept in Secret `secret` there (created by the first
/// replica that starts, renewed before they expire), with the CA injected into the webhook
/// configurations [`manifests`] renders. The operator needs [`self_signed_rbac`] for it.
///
/// # Errors
///
/// As [`manifests`] (which names the configurations).
pub fn self_signed_certificates(
    secret: &str,
    service: &str,
    namespace: &str,
) -> Result<rudder::certs::SelfSignedConfig, SetupError> {
    let (_, webhooks) = manifests(&ClientConfig::service(service, namespace))?;
    let mut targets = rudder::certs::InjectTargets::new();
    if let Some(name) = webhooks.mutating.and_then(|m| m.metadata.name) {
        targets = targets.mutating(name);
    }
    if let Some(name) = webhooks.validating.and_then(|v| v.metadata.name) {
        targets = targets.validating(name);
    }
    Ok(rudder::certs::SelfSignedConfig::new(secret, namespace, service).inject(targets))
}

/// What the operator's ServiceAccount `service_account` in `namespace` needs for
/// [`self_signed_certificates`] kept in Secret `secret`: a Role for the Secret in `namespace`
/// (`create` on Secrets, which cannot be scoped by name; `get`, `list`, `watch`, `update` on
/// `secret` only) and a ClusterRole for CA injection (`get`, `list`, `watch`, `update` on the
/// ChaosPod webhook configurations only, by name), each with its binding. The same rules
/// as the manager derives for `--deploy`.
pub fn self_signed_rbac(namespace: &str, service_account: &str, secret: &str) -> SelfSignedRbac {
    let name = format!("{CONTROLLER}-webhook-certificates");
    let verbs = |verbs: &[&str]| verbs.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>();
    let rule = |group: &str, resources: &[&str], names: &[&str], v: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(verbs(resources)),
        resource_names: (!names.is_empty()).then(|| verbs(names)),
        verbs: verbs(v),
        ..PolicyRule::default()
    };
    let subject = Subject {
        kind: "ServiceAccount".to_owned(),
        name: service_account.to_owned(),
        namespace: Some(namespace.to_owned()),
        ..Subject::default()
    };
    let meta = |namespaced: bool| ObjectMeta {
        name: Some(name.clone()),
        namespace: namespaced.then(|| namespace.to_owned()),
        ..ObjectMeta::default()
    };
    // What the injector does to each target: read, watch (selected by name), replace.
    let injected = ["get", "list", "watch", "update"];
    SelfSignedRbac {
        role: Role {
            metadata: meta(true),
            rules: Some(vec![
                rule("", &["secrets"], &[], &["create"]),
                rule("", &["secrets"], &[secret], &injected),
            ]),
        },
        role_binding: RoleBinding {
            metadata: meta(true),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "Role".to_owned(),
                name: name.clone(),
            },
            subjects: Some(vec![subject.clone()]),
        },
        cluster_role: ClusterRole {
            metadata: meta(false),
            // Both configurations are named after the operator ([`manifests`]); no CRD is
            // injected into, as ChaosPod has no conversion webhook.
            rules: Some(vec![rule(
                "admissionregistration.k8s.io",
                &[
                    "mutatingwebhookconfigurations",
                    "validatingwebhookconfigurations",
                ],
                &[CONTROLLER],
                &injected,
            )]),
            ..ClusterRole::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: meta(false),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "ClusterRole".to_owned(),
                name: name.clone(),
            },
            subjects: Some(vec![subject]),
        },
    }
}

/// What the operator's ServiceAccount `service_account` in `namespace` needs for
/// [`Options::secure_metrics`]: a ClusterRole allowing `create` on TokenReviews and
/// SubjectAccessReviews (to authenticate and authorize each scraper), with its binding.
/// The scraper itself needs `get` on the non-resource URL `/metrics`.
pub fn secure_metrics_rbac(namespace: &str, service_account: &str) -> SecureMetricsRbac {
    let name = format!("{CONTROLLER}-metrics-auth");
    let rule = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: vec!["create".to_owned()],
        ..PolicyRule::default()
    };
    let metadata = ObjectMeta {
        name: Some(name.clone()),
        ..ObjectMeta::default()
    };
    SecureMetricsRbac {
        cluster_role: ClusterRole {
            metadata: metadata.clone(),
            rules: Some(vec![
                rule("authentication.k8s.io", "tokenreviews"),
                rule("authorization.k8s.io", "subjectaccessreviews"),
            ]),
            ..ClusterRole::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata,
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "ClusterRole".to_owned(),
                name,
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: service_account.to_owned(),
                namespace: Some(namespace.to_owned()),
                ..Subject::default()
            }]),
        },
    }
}

/// The RBAC objects of [`secure_metrics_rbac`].
#[derive(Clone, Debug)]
pub struct SecureMetricsRbac {
    /// `create` on TokenReviews and SubjectAccessReviews.
    pub cluster_role: ClusterRole,
    /// Binds [`cluster_role`](Self::cluster_role) to the operator's ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
}

impl SecureMetricsRbac {
    /// The two objects as multi-document YAML (each preceded by `---`).
    ///
    /// # Errors
    ///
    /// If they cannot be serialised (they always can).
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        Ok(format!(
            "---\n{}---\n{}",
            serde_yaml::to_string(&self.cluster_role)?,
            serde_yaml::to_string(&self.cluster_role_binding)?
        ))
    }
}

/// The RBAC objects of [`self_signed_rbac`].
#[derive(Clone, Debug)]
pub struct SelfSignedRbac {
    /// Secrets in the operator's namespace.
    pub role: Role,
    /// Binds [`role`](Self::role) to the operator's ServiceAccount.
    pub role_binding: RoleBinding,
    /// The webhook configurations, for CA injection.
    pub cluster_role: ClusterRole,
    /// Binds [`cluster_role`](Self::cluster_role) to the operator's ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
}

impl SelfSignedRbac {
    /// The four objects as multi-document YAML (each preceded by `---`), for
    /// `kubectl apply -f -`.
    ///
    /// # Errors
    ///
    /// If they cannot be serialised (they always can).
    pub fn to_yaml(&self) -> Result<String, serde_yaml::Error> {
        let mut yaml = String::new();
        for doc in [
            serde_yaml::to_string(&self.role)?,
            serde_yaml::to_string(&self.role_binding)?,
            serde_yaml::to_string(&self.cluster_role)?,
            serde_yaml::to_string(&self.cluster_role_binding)?,
        ] {
            yaml.push_str("---\n");
            yaml.push_str(&doc);
        }
        Ok(yaml)
    }
}

/// Installs (server-side applies) the ChaosPod CRD and waits until the API server serves it.
///
/// # Errors
///
/// As [`rudder::client::apply_crd`].
pub async fn install_crd(client: &kube::Client) -> Result<(), ClientError> {
    rudder::client::apply_crd(
        client,
        &ChaosPod::crd(),
        FIELD_MANAGER,
        Duration::from_secs(30),
    )
    .await
}
