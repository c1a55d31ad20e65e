//! A whole operator's `/metrics` as Prometheus and Kubebuilder's dashboards read it: a
//! manager with the process-wide recorder, leader election on a real Lease, an admission
//! webhook called by the real API server and a controller, scraped over HTTP and checked
//! with `promtool check metrics`. A fleet with the same cluster as its one member adds the
//! fleet's series. Every metric the shipped alerts and dashboards read
//! (`rudder::manifests::alerts`, `rudder::manifests::dashboards`) is checked to be in the
//! scrape. A test binary of its own, so that the recorder it installs
//! is the process's first and the manager builds its parts in its own order.
//!
//! promtool is found on `PATH` or at `RUDDER_PROMTOOL`; without it the lint check is skipped
//! with a notice, unless `RUDDER_REQUIRE_PROMTOOL=1` (as CI sets), which fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;
use rudder::client::layers::host_of;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::manifests::alerts::{AlertOptions, RECORDED, Rule, rule_groups};
use rudder::manifests::dashboards::{dashboards, expressions};
use rudder::manifests::promql::{Selector, metric_names, metric_of};
use rudder::multicluster::{Fleet, StaticClusters};
use rudder::prelude::*;
use rudder::webhook::manifest::ClientConfig;
use rudder_envtest::poll::eventually;
use rudder_envtest::{TestNamespace, WebhookOptions};

mod support;
use rudder_envtest::metrics::{has_label, samples};
use support::{Label, get};

const WAIT: Duration = Duration::from_secs(30);
const LEASE: &str = "scrape-leader";
const CONTROLLER: &str = "scrape-configmaps";

/// Reconciles successfully, doing nothing.
struct Nothing;

impl Reconciler for Nothing {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

fn declare_webhook(manager: &Manager) {
    rudder::new_webhook(manager)
        .for_::<ConfigMap>()
        .defaulter(Label)
        .complete()
        .unwrap();
}

/// The webhook configurations the facade renders for [`declare_webhook`].
fn webhook_options(ns: &TestNamespace) -> WebhookOptions {
    let scratch = Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(None)
        .client_metrics(false)
        .build()
        .unwrap();
    declare_webhook(&scratch);
    let manifests = rudder::webhook_manifests(
        &scratch,
        "rudder-scrape",
        &ClientConfig::service("unused", "unused"),
        &mut Vec::new(),
    );
    WebhookOptions {
        mutating: manifests.mutating.into_iter().collect(),
        validating: manifests.validating.into_iter().collect(),
        conversion_crds: Vec::new(),
    }
}

/// Metrics a rule or panel reads that a healthy manager does not expose until an event
/// labels them, each with how it is known: the crate's name constant, which the code that
/// counts the event uses, and why its series is born at the event.
const EVENT_BORN: &[(&str, &str)] = &[
    (
        rudder::cache::metrics::PANICS_TOTAL,
        "labelled by the function that panicked; the rule counts a new series too",
    ),
    (
        rudder::multicluster::metrics::REQUEST_FAILURES_TOTAL,
        "labelled by the failure's reason",
    ),
    (
        rudder::multicluster::metrics::CONTROLLER_RESTARTS_TOTAL,
        "labelled by the controller that ended with an error",
    ),
    (
        rudder::multicluster::metrics::PROVIDER_ERRORS_TOTAL,
        "labelled by the provider that failed",
    ),
];

/// Every metric the shipped rules and dashboards read (recorded series aside, histograms by
/// their metric's name), each with where it is read.
fn metrics_read() -> Vec<(String, String)> {
    let options = AlertOptions::new("scrape");
    let rules = rule_groups(&options)
        .into_iter()
        .flat_map(|group| group.rules)
        .map(|rule| match rule {
            Rule::Alert(alert) => (format!("alert {}", alert.name), alert.expr),
            Rule::Record { record, expr } => (format!("recording rule {record}"), expr),
        });
    let panels = dashboards("scrape", &Selector::new())
        .into_iter()
        .flat_map(|d| {
            expressions(&d.json)
                .into_iter()
                .map(move |expr| (format!("dashboard {}", d.name), expr))
        });
    let mut read = Vec::new();
    for (place, expr) in rules.chain(panels) {
        for name in metric_names(&expr) {
            if !RECORDED.contains(&name.as_str()) {
                read.push((metric_of(&name).to_owned(), place.clone()));
            }
        }
    }
    read
}

/// The value of `leader_election_master_status{name=LEASE}`, if exported.
fn leader_status(page: &str) -> Option<f64> {
    samples(page, "leader_election_master_status")
        .into_iter()
        .find(|(labels, _)| has_label(labels, "name", LEASE))
        .map(|(_, value)| value)
}

/// promtool, from `RUDDER_PROMTOOL` or `PATH`.
fn promtool() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("RUDDER_PROMTOOL") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join("promtool"))
        .find(|candidate| candidate.is_file())
}

/// `promtool check metrics` on `page`: its complaints (empty when it has none).
fn promtool_lints(promtool: &PathBuf, page: &str) -> String {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(page.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        said.trim().to_owned()
    } else {
        format!("promtool failed ({}): {said}", output.status)
    }
}

#[tokio::test]
async fn a_managers_metrics_pass_promtool_and_have_every_dashboard_series() {
    let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("scrape").await.unwrap();
    let installed = ns.install_webhooks(webhook_options(&ns)).await.unwrap();
    let namespace = ns.name().to_owned();
    let host = host_of(&env.config().cluster_url);
    let loopback = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    // The builder makes the elector before it installs the recorder, and the controller
    // and webhook are declared after: the order that lost metrics when handles were made
    // at construction.
    let manager = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(loopback)
            .metrics_address(loopback)
            .api_host(host.clone())
            .cache(move |c| c.default_namespace(namespace))
            .leader_election(
                LeaderElectionConfig::new(ns.name(), LEASE)
                    .with_identity("scraped")
                    .with_lease_duration(Duration::from_secs(4))
                    .with_renew_deadline(Duration::from_secs(3))
                    .with_retry_period(Duration::from_millis(300)),
            )
            .webhook_options(
                rudder::webhook::Options::new()
                    .bind_address(installed.addr())
                    .cert_dir(installed.cert_dir()),
            )
            .build()
            .unwrap(),
    );
    declare_webhook(&manager);
    // The test's own cluster as the fleet's one member: the fleet's series, labelled
    // `cluster="self"`.
    let fleet_namespace = ns.name().to_owned();
    let fleet = Fleet::builder(&manager)
        .provider(StaticClusters::new().with("self", env.config().clone()))
        .cache(move |c| c.default_namespace(fleet_namespace.clone()))
        .probe_every(Duration::from_millis(300))
        .build()
        .unwrap();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .named("fleet-configmaps")
        .complete_with(|_| Nothing)
        .unwrap();
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .named(CONTROLLER)
        .complete(Nothing)
        .await
        .unwrap();
    let (stop, running) = support::start(&manager);
    let addr = eventually("the metrics server", WAIT, async || {
        manager.metrics_address()
    })
    .await;
    // The metrics server starts before the webhook server, and the webhook fails closed.
    eventually("the webhook server", WAIT, async || {
        manager.webhook_address().await
    })
    .await;

    // A create goes through the webhook, then is reconciled by the leader.
    let created = Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("scraped".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        created.labels().get("defaulted").map(String::as_str),
        Some("yes")
    );
    let page = eventually("a reconcile while leading", WAIT, async || {
        let (status, page) = get(addr, "/metrics").await;
        let reconciled = samples(&page, "controller_runtime_reconcile_total")
            .iter()
            .any(|(labels, value)| {
                has_label(labels, "controller", CONTROLLER)
                    && has_label(labels, "result", "success")
                    && *value >= 1.0
            });
        let member_synced = samples(&page, rudder::multicluster::metrics::CLUSTER_SYNCED)
            .iter()
            .any(|(labels, value)| has_label(labels, "cluster", "self") && *value == 1.0);
        (status == 200 && reconciled && member_synced && leader_status(&page) == Some(1.0))
            .then_some(page)
    })
    .await;

    // Every series Kubebuilder's dashboards query, with the labels they group by.
    let controller = [("controller", CONTROLLER)];
    let queue = [("name", CONTROLLER), ("controller", CONTROLLER)];
    let webhook = [("webhook", "")];
    let expected: Vec<(&str, &[(&str, &str)])> = vec![
        ("controller_runtime_reconcile_total", &controller),
        ("controller_runtime_reconcile_errors_total", &controller),
        (
            "controller_runtime_reconcile_time_seconds_bucket",
            &controller,
        ),
        ("controller_runtime_max_concurrent_reconciles", &controller),
        ("controller_runtime_active_workers", &controller),
        // Read-your-writes' series, from the controller's start (at zero).
        ("rudder_controller_writes_pending", &controller),
        ("rudder_controller_write_wait_timeouts_total", &controller),
        ("rudder_controller_write_wait_seconds_bucket", &controller),
        ("workqueue_depth", &queue),
        ("workqueue_adds_total", &queue),
        ("workqueue_queue_duration_seconds_bucket", &queue),
        ("workqueue_work_duration_seconds_bucket", &queue),
        ("workqueue_unfinished_work_seconds", &queue),
        ("workqueue_longest_running_processor_seconds", &queue),
        ("workqueue_retries_total", &queue),
        // The cache's own, on in every manager (rudder-manager turns on rudder-cache's
        // `metrics`): this test runs with the default features, as an operator is built.
        ("rudder_cache_objects", &[("resource", "")]),
        (
            "rest_client_requests_total",
            &[("code", "200"), ("method", "GET"), ("host", "")],
        ),
        (
            "controller_runtime_webhook_requests_total",
            &[("webhook", ""), ("code", "200")],
        ),
        (
            "controller_runtime_webhook_latency_seconds_bucket",
            &webhook,
        ),
        ("leader_election_master_status", &[("name", LEASE)]),
        ("process_cpu_seconds_total", &[]),
        ("process_resident_memory_bytes", &[]),
        ("process_open_fds", &[]),
    ];
    for (name, labels) in &expected {
        let found = samples(&page, name).into_iter().any(|(text, _)| {
            labels.iter().all(|(label, value)| {
                if value.is_empty() {
                    text.contains(&format!("{label}=\""))
                } else {
                    has_label(text, label, value)
                }
            })
        });
        assert!(found, "no {name} with labels {labels:?} in:\n{page}");
    }
    assert!(
        samples(&page, "rest_client_requests_total")
            .iter()
            .all(|(labels, _)| has_label(labels, "host", &host)),
        "every API request is labelled with the API server's host {host}:\n{page}"
    );
    let summaries: Vec<&str> = page
        .lines()
        .filter(|line| line.starts_with("# TYPE ") && line.ends_with(" summary"))
        .collect();
    assert!(
        summaries.is_empty(),
        "histograms exported as summaries: {summaries:?}"
    );

    // Every metric the shipped alerts and dashboards read is in the scrape (a `# TYPE` line
    // names a histogram by its metric), or is born at an event and named in EVENT_BORN.
    let exposed = |name: &str| {
        let type_line = format!("# TYPE {name} ");
        page.lines().any(|line| line.starts_with(&type_line))
    };
    for (name, why) in EVENT_BORN {
        assert!(
            !exposed(name),
            "{name} is in the scrape now ({why}): check it like the others"
        );
    }
    let missing: Vec<String> = metrics_read()
        .into_iter()
        .filter(|(name, _)| !exposed(name) && !EVENT_BORN.iter().any(|(born, _)| born == name))
        .map(|(name, place)| format!("{name} (read by {place})"))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the scrape: {missing:#?}\n{page}"
    );

    match promtool() {
        Some(promtool) => {
            let lints = promtool_lints(&promtool, &page);
            assert!(lints.is_empty(), "promtool check metrics: {lints}\n{page}");
        }
        None if std::env::var("RUDDER_REQUIRE_PROMTOOL").as_deref() == Ok("1") => panic!(
            "RUDDER_REQUIRE_PROMTOOL=1 but promtool is neither on PATH nor at RUDDER_PROMTOOL \
             (Debian: apt-get install --no-install-recommends prometheus)"
        ),
        None => eprintln!(
            "NOTICE: promtool not found (PATH or RUDDER_PROMTOOL): `promtool check metrics` \
             skipped; every other check ran"
        ),
    }

    // Taking the Lease away: the next renewal finds another holder, leadership is lost, the
    // manager stops with LeadershipLost, and the gauge says 0.
    let leases: Api<Lease> = Api::namespaced(ns.client(), ns.name());
    eventually("the Lease taken by another holder", WAIT, async || {
        let mut lease = leases.get(LEASE).await.ok()?;
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = Some("someone-else".into());
        spec.lease_duration_seconds = Some(3600);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        leases
            .replace(LEASE, &PostParams::default(), &lease)
            .await
            .ok()
            .map(drop)
    })
    .await;
    let ended = tokio::time::timeout(WAIT, running)
        .await
        .expect("the manager stops once it has lost its Lease")
        .unwrap();
    assert!(
        matches!(ended, Err(rudder::manager::Error::LeadershipLost)),
        "{ended:?}"
    );
    // The metrics server stopped with the manager; the registry it served is the process's.
    let after = rudder::manager::metrics::prometheus().unwrap().render();
    assert_eq!(leader_status(&after), Some(0.0), "{after}");
    stop.cancel();
}
