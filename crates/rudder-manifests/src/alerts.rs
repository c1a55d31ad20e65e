//! Prometheus alerting and recording rules for what goes wrong in an operator, over the
//! metrics every Rudder manager exposes (controller-runtime's names and labels, and
//! Rudder's own `rudder_cache_*` and `rudder_fleet_*`): reconcile errors, panics and
//! latency, work queues that grow, wait or hold a key too long, leadership that flaps or is
//! missing, webhooks that fail or are slow, certificates that cannot be read, informers that
//! relist or skip malformed objects, fleet members that do not answer.
//!
//! [`rule_groups`] gives the rules; [`render_rule_file`] writes them as a plain Prometheus
//! rule file (YAML, for `rule_files:`), [`prometheus_rule`] as a `PrometheusRule` object for
//! the Prometheus Operator. Every series an expression reads is scoped by the options'
//! [`Selector`], so the rules of one operator see only its own targets.
//!
//! ```
//! use rudder_manifests::alerts::{AlertOptions, Rule, prometheus_rule, render_rule_file, rule_groups};
//! use rudder_manifests::promql::Selector;
//!
//! # fn main() -> Result<(), serde_yaml::Error> {
//! let options = AlertOptions::new("my-operator")
//!     .selector(Selector::new().job("my-operator-metrics").namespace("ops"))
//!     .namespace("ops")
//!     .label("release", "prometheus");
//! let groups = rule_groups(&options);
//! assert!(groups.iter().flat_map(|g| &g.rules).any(|rule| matches!(
//!     rule,
//!     Rule::Alert(alert) if alert.name == "RudderReconcileErrors"
//! )));
//! // For `rule_files:` in prometheus.yml, and for `promtool check rules`.
//! let yaml = render_rule_file(&options)?;
//! assert!(yaml.contains(r#"job="my-operator-metrics""#));
//! // For the Prometheus Operator: metadata.labels must match its `ruleSelector`.
//! let object = prometheus_rule(&options);
//! assert_eq!(object["kind"], "PrometheusRule");
//! assert_eq!(object["metadata"]["labels"]["release"], "prometheus");
//! # Ok(())
//! # }
//! ```
//!
//! # What each alert means
//!
//! Every alert carries a `severity` label (`warning` or `critical`), `summary` and
//! `description` annotations, and a `runbook_url` to its section of the project's
//! `docs/operating.md`, which says what to do. `critical` means users of the cluster are
//! affected now (webhook calls fail, no replica leads, most reconciles fail); `warning`
//! means the operator is degraded and will be if nothing is done.
//!
//! # Recording rules
//!
//! The ratios and quantiles that alerts and dashboards share are recorded once, grouped by
//! `namespace`, `job` and the metric's own key (`controller`, `name`, `webhook`): see
//! [`RECORDED`]. The alerts read the recorded series through the same selector, so two
//! operators' rules in one Prometheus do not see each other's.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::promql::Selector;

/// Where the `runbook_url` of every alert points, followed by `#` and the alert's name in
/// lower case.
pub const RUNBOOK_BASE: &str = "https://github.com/rudder-rs/rudder/blob/main/docs/operating.md";

/// The recording rules' names, as [`rule_groups`] records them.
pub const RECORDED: &[&str] = &[
    RECONCILE_RATE,
    RECONCILE_ERROR_RATIO,
    RECONCILE_P99,
    QUEUE_WAIT_P99,
    WEBHOOK_ERROR_RATIO,
    WEBHOOK_P99,
];

/// Reconciles per second, by controller and result.
pub const RECONCILE_RATE: &str = "controller_result:controller_runtime_reconcile_total:rate5m";
/// The share of reconciles that ended in an error, by controller.
pub const RECONCILE_ERROR_RATIO: &str =
    "controller:controller_runtime_reconcile_errors:ratio_rate5m";
/// The 99th percentile of reconcile time, by controller.
pub const RECONCILE_P99: &str = "controller:controller_runtime_reconcile_time_seconds:p99_5m";
/// The 99th percentile of the time keys wait in the work queue, by queue.
pub const QUEUE_WAIT_P99: &str = "name:workqueue_queue_duration_seconds:p99_5m";
/// The share of webhook requests answered with a 5xx code, by webhook.
pub const WEBHOOK_ERROR_RATIO: &str =
    "webhook:controller_runtime_webhook_requests_errors:ratio_rate5m";
/// The 99th percentile of webhook latency, by webhook.
pub const WEBHOOK_P99: &str = "webhook:controller_runtime_webhook_latency_seconds:p99_5m";

/// What the rules are rendered for: the operator's name (the rule groups' and the
/// `PrometheusRule`'s), the [`Selector`] that scopes every series, and where the
/// `PrometheusRule` goes.
#[derive(Clone, Debug)]
pub struct AlertOptions {
    name: String,
    selector: Selector,
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
}

impl AlertOptions {
    /// Rules for the operator `name`, over every target's series (no selector), in a
    /// `PrometheusRule` without a namespace or labels.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            selector: Selector::new(),
            namespace: None,
            labels: BTreeMap::new(),
        }
    }

    /// Scopes every series the rules read (usually to the operator's scrape job and
    /// namespace).
    pub fn selector(mut self, selector: Selector) -> Self {
        self.selector = selector;
        self
    }

    /// The namespace of the `PrometheusRule` object.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// A label of the `PrometheusRule` object (the Prometheus Operator picks up the rules
    /// whose labels match its `ruleSelector`, often `release: <its release>`).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }
}

/// A group of rules, evaluated together.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleGroup {
    /// The group's name, unique in a rule file.
    pub name: String,
    /// Its rules, in evaluation order.
    pub rules: Vec<Rule>,
}

/// A recording rule or an alerting rule.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// A recording rule: `expr` stored as the series `record`.
    Record {
        /// The recorded series' name.
        record: String,
        /// Its expression.
        expr: String,
    },
    /// An alerting rule.
    Alert(Alert),
}

/// An alerting rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// The alert's name (`alertname`).
    pub name: String,
    /// The condition: the alert fires for each series it returns.
    pub expr: String,
    /// How long the condition must hold before the alert fires (`for:`).
    pub for_: String,
    /// Its `severity` label.
    pub severity: Severity,
    /// Its `summary` annotation (may use `{{ $labels.x }}`).
    pub summary: String,
    /// Its `description` annotation: what it means, what is affected.
    pub description: String,
}

impl Alert {
    /// Its `runbook_url` annotation: [`RUNBOOK_BASE`] and the alert's section.
    pub fn runbook_url(&self) -> String {
        format!("{RUNBOOK_BASE}#{}", self.name.to_lowercase())
    }
}

/// How urgent an alert is: its `severity` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Degraded; act within working hours.
    Warning,
    /// Users of the cluster are affected now.
    Critical,
}

impl Severity {
    /// The label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

impl Rule {
    /// The rule as a rule file holds it.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Record { record, expr } => json!({ "record": record, "expr": expr }),
            Self::Alert(alert) => json!({
                "alert": alert.name,
                "expr": alert.expr,
                "for": alert.for_,
                "labels": { "severity": alert.severity.as_str() },
                "annotations": {
                    "summary": alert.summary,
                    "description": alert.description,
                    "runbook_url": alert.runbook_url(),
                },
            }),
        }
    }
}

/// The rules for `options`: a group of recording rules ([`RECORDED`]), then one of alerts.
pub fn rule_groups(options: &AlertOptions) -> Vec<RuleGroup> {
    let s = &options.selector;
    vec![
        RuleGroup {
            name: format!("{}.rules", options.name),
            rules: recording_rules(s),
        },
        RuleGroup {
            name: format!("{}.alerts", options.name),
            rules: [
                controller_alerts(s),
                queue_alerts(s),
                leader_alerts(s),
                webhook_alerts(s),
                cache_alerts(s),
                fleet_alerts(s),
            ]
            .into_iter()
            .flatten()
            .map(Rule::Alert)
            .collect(),
        },
    ]
}

/// The rule file's content, `{"groups": [...]}`, as JSON.
pub fn rule_file(options: &AlertOptions) -> Value {
    json!({ "groups": groups_json(options) })
}

/// The rule file as YAML, for `rule_files:` in `prometheus.yml` and `promtool check rules`.
///
/// # Errors
///
/// Only if YAML serialization fails, which these values do not make it do.
pub fn render_rule_file(options: &AlertOptions) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&rule_file(options))
}

/// The rules as a `PrometheusRule` (`monitoring.coreos.com/v1`) named after the operator,
/// in the options' namespace and with their labels.
pub fn prometheus_rule(options: &AlertOptions) -> Value {
    let mut metadata = json!({ "name": options.name, "labels": options.labels });
    if let Some(namespace) = &options.namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": { "groups": groups_json(options) },
    })
}

fn groups_json(options: &AlertOptions) -> Vec<Value> {
    rule_groups(options)
        .iter()
        .map(|group| {
            json!({
                "name": group.name,
                "rules": group.rules.iter().map(Rule::to_json).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// `by (namespace, job, <keys>)`.
fn by(keys: &str) -> String {
    format!("by (namespace, job, {keys})")
}

fn rate(s: &Selector, metric: &str, extra: &[&str], window: &str) -> String {
    format!("rate({}[{window}])", s.series(metric, extra))
}

fn p99(s: &Selector, histogram: &str, key: &str) -> String {
    format!(
        "histogram_quantile(0.99, sum {} ({}))",
        by(&format!("{key}, le")),
        rate(s, &format!("{histogram}_bucket"), &[], "5m")
    )
}

fn recording_rules(s: &Selector) -> Vec<Rule> {
    let record = |record: &str, expr: String| Rule::Record {
        record: record.to_owned(),
        expr,
    };
    let reconciles = "controller_runtime_reconcile_total";
    let requests = "controller_runtime_webhook_requests_total";
    vec![
        record(
            RECONCILE_RATE,
            format!(
                "sum {} ({})",
                by("controller, result"),
                rate(s, reconciles, &[], "5m")
            ),
        ),
        record(
            RECONCILE_ERROR_RATIO,
            format!(
                "sum {by} ({}) / sum {by} ({})",
                rate(s, reconciles, &[r#"result="error""#], "5m"),
                rate(s, reconciles, &[], "5m"),
                by = by("controller"),
            ),
        ),
        record(
            RECONCILE_P99,
            p99(s, "controller_runtime_reconcile_time_seconds", "controller"),
        ),
        record(
            QUEUE_WAIT_P99,
            p99(s, "workqueue_queue_duration_seconds", "name"),
        ),
        record(
            WEBHOOK_ERROR_RATIO,
            format!(
                "sum {by} ({}) / sum {by} ({})",
                rate(s, requests, &[r#"code=~"5..""#], "5m"),
                rate(s, requests, &[], "5m"),
                by = by("webhook"),
            ),
        ),
        record(
            WEBHOOK_P99,
            p99(s, "controller_runtime_webhook_latency_seconds", "webhook"),
        ),
    ]
}

fn alert(
    name: &str,
    expr: String,
    for_: &str,
    severity: Severity,
    summary: &str,
    description: &str,
) -> Alert {
    Alert {
        name: name.to_owned(),
        expr,
        for_: for_.to_owned(),
        severity,
        summary: summary.to_owned(),
        description: description.to_owned(),
    }
}

/// `sum by (namespace, job, <keys>) (increase(<metric>[<window>])) > <above>`.
fn increased(s: &Selector, metric: &str, keys: &str, window: &str, above: u32) -> String {
    format!(
        "sum {} (increase({}[{window}])) > {above}",
        by(keys),
        s.series(metric, &[])
    )
}

/// Like [`increased`] with `above` 0, for a counter whose series is born at its first
/// event (a label value seen only then, such as a `code` or a `function`): `increase` needs
/// two samples, so a series new in the window that holds a count fires too.
fn new_or_increased(s: &Selector, metric: &str, extra: &[&str], keys: &str) -> String {
    let series = s.series(metric, extra);
    format!(
        "sum {by} (increase({series}[10m])) > 0 or sum {by} ({series} unless {series} offset 10m) > 0",
        by = by(keys),
    )
}

fn controller_alerts(s: &Selector) -> Vec<Alert> {
    vec![
        alert(
            "RudderReconcileErrors",
            format!(
                "sum {} ({}) > 0",
                by("controller"),
                rate(s, "controller_runtime_reconcile_errors_total", &[], "5m")
            ),
            "15m",
            Severity::Warning,
            "Controller {{ $labels.controller }} keeps failing reconciles",
            "Reconciles of {{ $labels.controller }} in {{ $labels.namespace }} have returned \
             errors for 15 minutes; the failing keys are retried with backoff and their \
             objects are not converging.",
        ),
        alert(
            "RudderReconcileErrorRatioHigh",
            format!("{} > 0.25", s.series(RECONCILE_ERROR_RATIO, &[])),
            "15m",
            Severity::Critical,
            "More than a quarter of {{ $labels.controller }}'s reconciles fail",
            "Over 25% of the reconciles of {{ $labels.controller }} in \
             {{ $labels.namespace }} have ended in an error for 15 minutes: the controller \
             is mostly not doing its job.",
        ),
        alert(
            "RudderReconcilePanics",
            increased(
                s,
                "controller_runtime_reconcile_panics_total",
                "controller",
                "10m",
                0,
            ),
            "1m",
            Severity::Warning,
            "Reconciler of {{ $labels.controller }} panicked",
            "A reconcile of {{ $labels.controller }} in {{ $labels.namespace }} panicked; \
             the panic was caught and the key requeued, but the reconciler has a bug.",
        ),
        alert(
            "RudderReconcileSlow",
            format!("{} > 10", s.series(RECONCILE_P99, &[])),
            "15m",
            Severity::Warning,
            "Reconciles of {{ $labels.controller }} are slow",
            "The 99th percentile of reconcile time of {{ $labels.controller }} in \
             {{ $labels.namespace }} has been over 10 seconds for 15 minutes; keys wait \
             for workers while reconciles block.",
        ),
    ]
}

fn queue_alerts(s: &Selector) -> Vec<Alert> {
    vec![
        alert(
            "RudderWorkQueueDepthHigh",
            format!(
                "sum {} ({}) > 100",
                by("name"),
                s.series("workqueue_depth", &[])
            ),
            "15m",
            Severity::Warning,
            "Work queue {{ $labels.name }} is backing up",
            "More than 100 keys of {{ $labels.name }} in {{ $labels.namespace }} have been \
             waiting for a worker for 15 minutes: the controller does not keep up with its \
             events.",
        ),
        alert(
            "RudderWorkQueueWaitHigh",
            format!("{} > 60", s.series(QUEUE_WAIT_P99, &[])),
            "15m",
            Severity::Warning,
            "Keys of {{ $labels.name }} wait over a minute for a worker",
            "The 99th percentile of the time keys of {{ $labels.name }} in \
             {{ $labels.namespace }} wait in the queue has been over 60 seconds for 15 \
             minutes: changes reach the reconciler late.",
        ),
        alert(
            "RudderWorkerStuck",
            format!(
                "max {} ({}) > 600",
                by("name"),
                s.series("workqueue_longest_running_processor_seconds", &[])
            ),
            "5m",
            Severity::Warning,
            "A worker of {{ $labels.name }} has held one key for over 10 minutes",
            "A reconcile of {{ $labels.name }} in {{ $labels.namespace }} has been running \
             for over 10 minutes: it is stuck on a call without a timeout or in a loop, and \
             its worker serves no other key.",
        ),
        alert(
            "RudderWorkersSaturated",
            format!(
                "max {by} ({}) >= max {by} ({}) and max {by} ({}) > 0",
                s.series("controller_runtime_active_workers", &[]),
                s.series("controller_runtime_max_concurrent_reconciles", &[]),
                s.series("workqueue_depth", &[]),
                by = by("controller"),
            ),
            "15m",
            Severity::Warning,
            "Every worker of {{ $labels.controller }} is busy while keys wait",
            "All workers of {{ $labels.controller }} in {{ $labels.namespace }} have been \
             busy with keys waiting for 15 minutes: raise its concurrency or make its \
             reconciles faster.",
        ),
    ]
}

fn leader_alerts(s: &Selector) -> Vec<Alert> {
    vec![
        alert(
            "RudderLeaderChanges",
            format!(
                "sum {} (changes({}[1h])) > 3",
                by("name"),
                s.series("leader_election_master_status", &[])
            ),
            "1m",
            Severity::Warning,
            "Leadership of {{ $labels.name }} changes often",
            "The leadership of the Lease {{ $labels.name }} in {{ $labels.namespace }} has \
             flipped more than 3 times in the last hour: replicas lose their renewals (API \
             server latency, CPU throttling, restarts) and work pauses at each change.",
        ),
        alert(
            "RudderNoLeader",
            format!(
                "max {} ({}) < 1",
                by("name"),
                s.series("leader_election_master_status", &[])
            ),
            "5m",
            Severity::Critical,
            "No replica leads {{ $labels.name }}",
            "No running replica of {{ $labels.job }} in {{ $labels.namespace }} has led the \
             Lease {{ $labels.name }} for 5 minutes: no controller runs.",
        ),
    ]
}

fn webhook_alerts(s: &Selector) -> Vec<Alert> {
    vec![
        alert(
            "RudderWebhookErrors",
            format!("{} > 0.05", s.series(WEBHOOK_ERROR_RATIO, &[])),
            "10m",
            Severity::Critical,
            "Webhook {{ $labels.webhook }} answers with server errors",
            "More than 5% of the requests to {{ $labels.webhook }} in \
             {{ $labels.namespace }} have been answered with a 5xx code for 10 minutes; with \
             failurePolicy Fail, the API server rejects the writes it guards.",
        ),
        alert(
            "RudderWebhookSlow",
            format!("{} > 2.5", s.series(WEBHOOK_P99, &[])),
            "10m",
            Severity::Warning,
            "Webhook {{ $labels.webhook }} is slow",
            "The 99th percentile of the latency of {{ $labels.webhook }} in \
             {{ $labels.namespace }} has been over 2.5 seconds for 10 minutes; every write it \
             guards waits that long, and calls past the webhook's timeout fail.",
        ),
        alert(
            "RudderWebhookPanics",
            increased(
                s,
                "controller_runtime_webhook_panics_total",
                "pod",
                "10m",
                0,
            ),
            "1m",
            Severity::Warning,
            "A webhook handler of {{ $labels.job }} panicked",
            "A webhook handler in {{ $labels.pod }} ({{ $labels.namespace }}) panicked; the \
             request was answered with an error and the handler has a bug.",
        ),
        alert(
            "RudderCertificateReadErrors",
            increased(
                s,
                "certwatcher_read_certificate_errors_total",
                "pod",
                "10m",
                0,
            ),
            "1m",
            Severity::Warning,
            "{{ $labels.pod }} cannot read its serving certificate",
            "The webhook server in {{ $labels.pod }} ({{ $labels.namespace }}) failed to \
             read its certificate files; it keeps serving the last certificate it read, \
             which fails every call once it expires.",
        ),
    ]
}

fn cache_alerts(s: &Selector) -> Vec<Alert> {
    vec![
        alert(
            "RudderCacheRelists",
            increased(s, "rudder_cache_relists_total", "resource", "30m", 3),
            "1m",
            Severity::Warning,
            "The informer of {{ $labels.resource }} keeps relisting",
            "The informer of {{ $labels.resource }} in {{ $labels.job }} \
             ({{ $labels.namespace }}) listed again more than 3 times in 30 minutes: its \
             watches end without resuming, and each relist loads the API server.",
        ),
        alert(
            "RudderCacheWatchErrors",
            format!(
                "sum {} ({}) > 0",
                by("resource"),
                rate(s, "rudder_cache_watch_errors_total", &[], "5m")
            ),
            "15m",
            Severity::Warning,
            "Watches of {{ $labels.resource }} keep failing",
            "Lists and watches of {{ $labels.resource }} by {{ $labels.job }} in \
             {{ $labels.namespace }} have failed for 15 minutes; the cache serves \
             increasingly stale objects.",
        ),
        alert(
            "RudderCacheMalformedObjects",
            increased(
                s,
                "rudder_cache_malformed_objects_total",
                "resource",
                "10m",
                0,
            ),
            "1m",
            Severity::Warning,
            "Objects of {{ $labels.resource }} do not decode",
            "The informer of {{ $labels.resource }} in {{ $labels.job }} \
             ({{ $labels.namespace }}) skipped objects that did not decode into the \
             operator's type: their controllers do not see them.",
        ),
        alert(
            "RudderCachePanics",
            new_or_increased(s, "rudder_cache_panics_total", &[], "resource, function"),
            "1m",
            Severity::Warning,
            "A {{ $labels.function }} of {{ $labels.resource }} panicked",
            "A {{ $labels.function }} run by the informer of {{ $labels.resource }} in \
             {{ $labels.job }} ({{ $labels.namespace }}) panicked; the object was skipped.",
        ),
        alert(
            "RudderRequestsForbidden",
            new_or_increased(
                s,
                "rest_client_requests_total",
                &[r#"code="403""#],
                "method",
            ),
            "1m",
            Severity::Warning,
            "{{ $labels.job }} is refused {{ $labels.method }} requests",
            "The API server answered {{ $labels.method }} requests of {{ $labels.job }} in \
             {{ $labels.namespace }} with 403 Forbidden: its RBAC lacks a permission its \
             code uses.",
        ),
    ]
}

fn fleet_alerts(s: &Selector) -> Vec<Alert> {
    vec![
        alert(
            "RudderFleetClusterUnhealthy",
            format!(
                "max {} ({}) == 0",
                by("cluster"),
                s.series("rudder_fleet_cluster_healthy", &[])
            ),
            "5m",
            Severity::Warning,
            "Member cluster {{ $labels.cluster }} does not answer",
            "Requests of {{ $labels.job }} to the member cluster {{ $labels.cluster }} have \
             failed for 5 minutes (unreachable, unauthorized, forbidden or server errors); \
             its objects are not reconciled.",
        ),
        alert(
            "RudderFleetClusterNotSynced",
            format!(
                "max {by} ({}) == 0 and max {by} ({}) == 1",
                s.series("rudder_fleet_cluster_synced", &[]),
                s.series("rudder_fleet_cluster_engaged", &[]),
                by = by("cluster"),
            ),
            "15m",
            Severity::Warning,
            "Member cluster {{ $labels.cluster }} is engaged but not synced",
            "{{ $labels.job }} engaged the member cluster {{ $labels.cluster }} 15 minutes \
             ago or more and its controllers' caches have not synced; none of them runs.",
        ),
    ]
}
