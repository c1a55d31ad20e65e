//! Grafana dashboards for an operator, one per concern: its controllers (reconciles, work
//! queues, cache, API requests, leadership), its webhooks, and its fleet of member clusters.
//! Every panel queries the metrics a Rudder manager exposes, scoped by a [`Selector`], with
//! the same ratios and quantiles as the [alerts](crate::alerts).
//!
//! ```
//! use rudder_manifests::dashboards::{dashboards, expressions};
//! use rudder_manifests::promql::Selector;
//!
//! let selector = Selector::new().job("my-operator-metrics").namespace("ops");
//! let all = dashboards("my-operator", &selector);
//! let names: Vec<&str> = all.iter().map(|d| d.name).collect();
//! assert_eq!(names, ["controllers", "webhooks", "fleet"]);
//! // Each dashboard is Grafana's JSON model: import it, or put it in a ConfigMap that
//! // Grafana's dashboard sidecar loads.
//! assert_eq!(all[0].json["uid"], "my-operator-controllers");
//! assert!(expressions(&all[0].json).iter().all(|e| e.contains(r#"job="my-operator-metrics""#)));
//! ```
//!
//! The queries use fixed `[5m]` windows rather than Grafana's `$__rate_interval`, so that
//! each is plain PromQL that `promtool` can parse (the tests check every one) and that reads
//! the same as the alert it belongs with. The data source is the dashboard's `datasource`
//! variable.

use serde_json::{Value, json};

use crate::promql::Selector;

/// One dashboard: the concern it shows (`controllers`, `webhooks`, `fleet`, also its file
/// stem) and Grafana's JSON model of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Dashboard {
    /// The concern, also the last part of the dashboard's `uid`.
    pub name: &'static str,
    /// The dashboard, as Grafana imports it.
    pub json: Value,
}

/// The dashboards of the operator `name` (their titles and `uid`s start with it), each
/// query scoped by `selector`.
pub fn dashboards(name: &str, selector: &Selector) -> Vec<Dashboard> {
    let s = selector;
    vec![
        dashboard(name, "controllers", "Controllers", controller_panels(s)),
        dashboard(name, "webhooks", "Webhooks", webhook_panels(s)),
        dashboard(name, "fleet", "Fleet", fleet_panels(s)),
    ]
}

/// Every query expression of a dashboard's panels, in panel order.
pub fn expressions(dashboard: &Value) -> Vec<String> {
    dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
        .filter_map(|target| target["expr"].as_str().map(str::to_owned))
        .collect()
}

/// A panel to be: its title, unit, and queries with their legends.
struct Panel {
    title: &'static str,
    unit: &'static str,
    targets: Vec<(String, &'static str)>,
}

fn panel(title: &'static str, unit: &'static str, targets: Vec<(String, &'static str)>) -> Panel {
    Panel {
        title,
        unit,
        targets,
    }
}

fn dashboard(operator: &str, name: &'static str, title: &str, panels: Vec<Panel>) -> Dashboard {
    let datasource = json!({ "type": "prometheus", "uid": "${datasource}" });
    let panels: Vec<Value> = panels
        .into_iter()
        .enumerate()
        .map(|(i, panel)| {
            let targets: Vec<Value> = panel
                .targets
                .into_iter()
                .zip('A'..='Z')
                .map(|((expr, legend), ref_id)| {
                    json!({
                        "datasource": datasource,
                        "expr": expr,
                        "legendFormat": legend,
                        "refId": ref_id.to_string(),
                    })
                })
                .collect();
            json!({
                "id": i + 1,
                "type": "timeseries",
                "title": panel.title,
                "datasource": datasource,
                "gridPos": { "h": 8, "w": 12, "x": (i % 2) * 12, "y": (i / 2) * 8 },
                "fieldConfig": { "defaults": { "unit": panel.unit }, "overrides": [] },
                "options": { "legend": { "displayMode": "table", "placement": "bottom" } },
                "targets": targets,
            })
        })
        .collect();
    Dashboard {
        name,
        json: json!({
            "uid": uid(operator, name),
            "title": format!("{operator} / {title}"),
            "tags": ["rudder", operator],
            "editable": true,
            "schemaVersion": 39,
            "time": { "from": "now-6h", "to": "now" },
            "refresh": "30s",
            "templating": { "list": [{
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
            }] },
            "panels": panels,
        }),
    }
}

/// Grafana's `uid` holds at most 40 characters.
fn uid(operator: &str, name: &str) -> String {
    let keep = 40usize.saturating_sub(name.len() + 1);
    let operator: String = operator.chars().take(keep).collect();
    format!("{operator}-{name}")
}

fn by(keys: &str) -> String {
    format!("by (namespace, job, {keys})")
}

fn rate(s: &Selector, metric: &str, extra: &[&str]) -> String {
    format!("rate({}[5m])", s.series(metric, extra))
}

fn sum_rate(s: &Selector, metric: &str, extra: &[&str], keys: &str) -> String {
    format!("sum {} ({})", by(keys), rate(s, metric, extra))
}

fn quantile(s: &Selector, q: &str, histogram: &str, key: &str) -> String {
    format!(
        "histogram_quantile({q}, sum {} ({}))",
        by(&format!("{key}, le")),
        rate(s, &format!("{histogram}_bucket"), &[])
    )
}

fn gauge(s: &Selector, aggregate: &str, metric: &str, keys: &str) -> String {
    format!("{aggregate} {} ({})", by(keys), s.series(metric, &[]))
}

fn controller_panels(s: &Selector) -> Vec<Panel> {
    let reconciles = "controller_runtime_reconcile_total";
    vec![
        panel(
            "Reconciles per second",
            "ops",
            vec![(
                sum_rate(s, reconciles, &[], "controller, result"),
                "{{controller}} {{result}}",
            )],
        ),
        panel(
            "Reconcile error ratio",
            "percentunit",
            vec![(
                format!(
                    "{} / {}",
                    sum_rate(s, reconciles, &[r#"result="error""#], "controller"),
                    sum_rate(s, reconciles, &[], "controller")
                ),
                "{{controller}}",
            )],
        ),
        panel(
            "Reconcile time",
            "s",
            vec![
                (
                    quantile(
                        s,
                        "0.5",
                        "controller_runtime_reconcile_time_seconds",
                        "controller",
                    ),
                    "{{controller}} p50",
                ),
                (
                    quantile(
                        s,
                        "0.99",
                        "controller_runtime_reconcile_time_seconds",
                        "controller",
                    ),
                    "{{controller}} p99",
                ),
            ],
        ),
        panel(
            "Reconcile errors and panics per second",
            "ops",
            vec![
                (
                    sum_rate(
                        s,
                        "controller_runtime_reconcile_errors_total",
                        &[],
                        "controller",
                    ),
                    "{{controller}} errors",
                ),
                (
                    sum_rate(
                        s,
                        "controller_runtime_reconcile_panics_total",
                        &[],
                        "controller",
                    ),
                    "{{controller}} panics",
                ),
            ],
        ),
        panel(
            "Workers",
            "short",
            vec![
                (
                    gauge(s, "sum", "controller_runtime_active_workers", "controller"),
                    "{{controller}} active",
                ),
                (
                    gauge(
                        s,
                        "max",
                        "controller_runtime_max_concurrent_reconciles",
                        "controller",
                    ),
                    "{{controller}} max",
                ),
            ],
        ),
        panel(
            "Work queue depth",
            "short",
            vec![(gauge(s, "sum", "workqueue_depth", "name"), "{{name}}")],
        ),
        panel(
            "Work queue adds and retries per second",
            "ops",
            vec![
                (
                    sum_rate(s, "workqueue_adds_total", &[], "name"),
                    "{{name}} adds",
                ),
                (
                    sum_rate(s, "workqueue_retries_total", &[], "name"),
                    "{{name}} retries",
                ),
            ],
        ),
        panel(
            "Work queue wait and work time (p99)",
            "s",
            vec![
                (
                    quantile(s, "0.99", "workqueue_queue_duration_seconds", "name"),
                    "{{name}} wait",
                ),
                (
                    quantile(s, "0.99", "workqueue_work_duration_seconds", "name"),
                    "{{name}} work",
                ),
            ],
        ),
        panel(
            "Longest-running and unfinished work",
            "s",
            vec![
                (
                    gauge(
                        s,
                        "max",
                        "workqueue_longest_running_processor_seconds",
                        "name",
                    ),
                    "{{name}} longest",
                ),
                (
                    gauge(s, "sum", "workqueue_unfinished_work_seconds", "name"),
                    "{{name}} unfinished",
                ),
            ],
        ),
        panel(
            "Cached objects",
            "short",
            vec![(
                gauge(s, "max", "rudder_cache_objects", "resource"),
                "{{resource}}",
            )],
        ),
        panel(
            "Cache relists, watch errors and malformed objects",
            "short",
            vec![
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("resource"),
                        s.series("rudder_cache_relists_total", &[])
                    ),
                    "{{resource}} relists",
                ),
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("resource"),
                        s.series("rudder_cache_watch_errors_total", &[])
                    ),
                    "{{resource}} watch errors",
                ),
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("resource"),
                        s.series("rudder_cache_malformed_objects_total", &[])
                    ),
                    "{{resource}} malformed",
                ),
            ],
        ),
        panel(
            "API requests per second",
            "reqps",
            vec![(
                sum_rate(s, "rest_client_requests_total", &[], "method, code"),
                "{{method}} {{code}}",
            )],
        ),
        panel(
            "Leader",
            "short",
            vec![(
                gauge(s, "max", "leader_election_master_status", "name, pod"),
                "{{name}} {{pod}}",
            )],
        ),
        panel(
            "Process CPU and memory",
            "short",
            vec![
                (
                    format!(
                        "sum {} ({})",
                        by("pod"),
                        rate(s, "process_cpu_seconds_total", &[])
                    ),
                    "{{pod}} CPU cores",
                ),
                (
                    gauge(s, "max", "process_resident_memory_bytes", "pod"),
                    "{{pod}} resident bytes",
                ),
            ],
        ),
    ]
}

fn webhook_panels(s: &Selector) -> Vec<Panel> {
    let requests = "controller_runtime_webhook_requests_total";
    vec![
        panel(
            "Requests per second",
            "reqps",
            vec![(
                sum_rate(s, requests, &[], "webhook, code"),
                "{{webhook}} {{code}}",
            )],
        ),
        panel(
            "Server error ratio",
            "percentunit",
            vec![(
                format!(
                    "{} / {}",
                    sum_rate(s, requests, &[r#"code=~"5..""#], "webhook"),
                    sum_rate(s, requests, &[], "webhook")
                ),
                "{{webhook}}",
            )],
        ),
        panel(
            "Latency",
            "s",
            vec![
                (
                    quantile(
                        s,
                        "0.5",
                        "controller_runtime_webhook_latency_seconds",
                        "webhook",
                    ),
                    "{{webhook}} p50",
                ),
                (
                    quantile(
                        s,
                        "0.99",
                        "controller_runtime_webhook_latency_seconds",
                        "webhook",
                    ),
                    "{{webhook}} p99",
                ),
            ],
        ),
        panel(
            "Requests in flight",
            "short",
            vec![(
                gauge(
                    s,
                    "sum",
                    "controller_runtime_webhook_requests_in_flight",
                    "webhook",
                ),
                "{{webhook}}",
            )],
        ),
        panel(
            "Panics and certificate reads",
            "short",
            vec![
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("pod"),
                        s.series("controller_runtime_webhook_panics_total", &[])
                    ),
                    "{{pod}} panics",
                ),
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("pod"),
                        s.series("certwatcher_read_certificate_total", &[])
                    ),
                    "{{pod}} certificate reads",
                ),
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("pod"),
                        s.series("certwatcher_read_certificate_errors_total", &[])
                    ),
                    "{{pod}} certificate read errors",
                ),
            ],
        ),
    ]
}

fn fleet_panels(s: &Selector) -> Vec<Panel> {
    vec![
        panel(
            "Clusters engaged",
            "short",
            vec![(
                gauge(s, "max", "rudder_fleet_clusters_engaged", "pod"),
                "{{pod}}",
            )],
        ),
        panel(
            "Cluster health",
            "short",
            vec![
                (
                    gauge(s, "max", "rudder_fleet_cluster_healthy", "cluster"),
                    "{{cluster}} healthy",
                ),
                (
                    gauge(s, "max", "rudder_fleet_cluster_synced", "cluster"),
                    "{{cluster}} synced",
                ),
            ],
        ),
        panel(
            "Request failures per second",
            "ops",
            vec![(
                sum_rate(
                    s,
                    "rudder_fleet_cluster_request_failures_total",
                    &[],
                    "cluster, reason",
                ),
                "{{cluster}} {{reason}}",
            )],
        ),
        panel(
            "Controller restarts and provider errors",
            "short",
            vec![
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("cluster, controller"),
                        s.series("rudder_fleet_controller_restarts_total", &[])
                    ),
                    "{{cluster}} {{controller}}",
                ),
                (
                    format!(
                        "sum {} (increase({}[5m]))",
                        by("provider"),
                        s.series("rudder_fleet_provider_errors_total", &[])
                    ),
                    "provider {{provider}}",
                ),
            ],
        ),
        panel(
            "Time to engage",
            "s",
            vec![(
                gauge(s, "max", "rudder_fleet_cluster_engage_seconds", "cluster"),
                "{{cluster}}",
            )],
        ),
    ]
}
