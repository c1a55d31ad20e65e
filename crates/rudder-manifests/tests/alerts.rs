//! The rules and dashboards as Prometheus reads them: `promtool check rules` on the rendered
//! rule file and on one recording rule per dashboard query (promtool's PromQL parser), and
//! `promtool test rules` with a case per alert, on input series named and labelled as a
//! manager exposes them (plus the target labels a scrape adds). Each case also feeds the
//! same series under another job, which must not fire: the selector scopes every rule.
//!
//! promtool is found on `PATH` or at `RUDDER_PROMTOOL`; without it the promtool checks are
//! skipped with a notice, unless `RUDDER_REQUIRE_PROMTOOL=1` (as CI sets), which fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rudder_manifests::alerts::{
    AlertOptions, RECONCILE_ERROR_RATIO, RECORDED, Rule, WEBHOOK_ERROR_RATIO, prometheus_rule,
    render_rule_file, rule_file, rule_groups,
};
use rudder_manifests::dashboards::{dashboards, expressions};
use rudder_manifests::promql::{Selector, metric_names};
use serde_json::{Map, Value, json};

const JOB: &str = "op-metrics";
const NAMESPACE: &str = "ops";
const POD: &str = "op-7d9f-x2x1";
const CONTROLLER: &str = "configmaps";
const WEBHOOK: &str = "/mutate--v1-configmap";

fn selector() -> Selector {
    Selector::new().job(JOB).namespace(NAMESPACE)
}

fn options() -> AlertOptions {
    AlertOptions::new("op")
        .selector(selector())
        .namespace(NAMESPACE)
}

/// promtool, from `RUDDER_PROMTOOL` or `PATH`; `None` (with a notice) when it is missing
/// and not required.
fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("RUDDER_PROMTOOL")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|dir| dir.join("promtool"))
                .find(|candidate| candidate.is_file())
        });
    if found.is_none() {
        if std::env::var("RUDDER_REQUIRE_PROMTOOL").as_deref() == Ok("1") {
            panic!(
                "RUDDER_REQUIRE_PROMTOOL=1 but promtool is neither on PATH nor at \
                 RUDDER_PROMTOOL (Debian: apt-get install --no-install-recommends prometheus)"
            );
        }
        eprintln!("NOTICE: promtool not found (PATH or RUDDER_PROMTOOL): promtool checks skipped");
    }
    found
}

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rudder-alerts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(promtool: &Path, dir: &Path, args: &[&str]) {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    assert!(
        output.status.success(),
        "promtool {args:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A series as scraped from the operator's pod: the metric's own labels, then the target's.
fn series(name: &str, labels: &[(&str, &str)], job: &str) -> String {
    let labels: Vec<String> = labels
        .iter()
        .chain(&[
            ("job", job),
            ("namespace", NAMESPACE),
            ("pod", POD),
            ("instance", "10.0.0.7:8443"),
        ])
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// One input series: the metric, its own labels, its values in promtool's notation.
type Input = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    &'static str,
);

/// One alert's case: its input (metric, its labels, values in promtool's notation), when to
/// evaluate, and the labels the alert fires with beside `alertname`, `severity`, `namespace`
/// and `job`.
struct Case {
    alert: &'static str,
    input: Vec<Input>,
    eval: &'static str,
    labels: Vec<(&'static str, &'static str)>,
}

fn case(
    alert: &'static str,
    input: Vec<Input>,
    eval: &'static str,
    labels: Vec<(&'static str, &'static str)>,
) -> Case {
    Case {
        alert,
        input,
        eval,
        labels,
    }
}

/// A histogram's buckets with the given counts' series (others at zero).
fn buckets(
    name: &'static str,
    key: (&'static str, &'static str),
    filled: &'static [&'static str],
) -> Vec<Input> {
    ["1", "2.5", "5", "10", "15", "100", "+Inf"]
        .into_iter()
        .map(|le| {
            let values = if filled.contains(&le) {
                "0+1x40"
            } else {
                "0x40"
            };
            (name, vec![key, ("le", le)], values)
        })
        .collect()
}

fn cases() -> Vec<Case> {
    let controller = ("controller", CONTROLLER);
    let queue = vec![("name", CONTROLLER), ("controller", CONTROLLER)];
    let webhook = ("webhook", WEBHOOK);
    let lease = ("name", "op-leader");
    let resource = ("resource", "configmaps");
    let cluster = ("cluster", "east");
    let mut slow_queue = Vec::new();
    for le in ["1", "10", "100", "1000", "+Inf"] {
        let mut labels = queue.clone();
        labels.push(("le", le));
        let values = if ["100", "1000", "+Inf"].contains(&le) {
            "0+1x40"
        } else {
            "0x40"
        };
        slow_queue.push(("workqueue_queue_duration_seconds_bucket", labels, values));
    }
    vec![
        case(
            "RudderReconcileErrors",
            vec![(
                "controller_runtime_reconcile_errors_total",
                vec![controller],
                "0+1x40",
            )],
            "30m",
            vec![controller],
        ),
        case(
            "RudderReconcileErrorRatioHigh",
            vec![
                (
                    "controller_runtime_reconcile_total",
                    vec![controller, ("result", "error")],
                    "0+1x40",
                ),
                (
                    "controller_runtime_reconcile_total",
                    vec![controller, ("result", "success")],
                    "0+1x40",
                ),
                (
                    "controller_runtime_reconcile_total",
                    vec![controller, ("result", "requeue")],
                    "0x40",
                ),
            ],
            "30m",
            vec![controller],
        ),
        case(
            "RudderReconcilePanics",
            vec![(
                "controller_runtime_reconcile_panics_total",
                vec![controller],
                "0x5 1x10",
            )],
            "8m",
            vec![controller],
        ),
        case(
            "RudderReconcileSlow",
            buckets(
                "controller_runtime_reconcile_time_seconds_bucket",
                controller,
                &["15", "100", "+Inf"],
            ),
            "30m",
            vec![controller],
        ),
        case(
            "RudderWorkQueueDepthHigh",
            vec![("workqueue_depth", queue.clone(), "150x30")],
            "20m",
            vec![("name", CONTROLLER)],
        ),
        case(
            "RudderWorkQueueWaitHigh",
            slow_queue,
            "30m",
            vec![("name", CONTROLLER)],
        ),
        case(
            "RudderWorkerStuck",
            vec![(
                "workqueue_longest_running_processor_seconds",
                queue.clone(),
                "700+60x20",
            )],
            "10m",
            vec![("name", CONTROLLER)],
        ),
        case(
            "RudderWorkersSaturated",
            vec![
                (
                    "controller_runtime_active_workers",
                    vec![controller],
                    "2x30",
                ),
                (
                    "controller_runtime_max_concurrent_reconciles",
                    vec![controller],
                    "2x30",
                ),
                ("workqueue_depth", queue.clone(), "5x30"),
            ],
            "20m",
            vec![controller],
        ),
        case(
            "RudderLeaderChanges",
            vec![(
                "leader_election_master_status",
                vec![lease],
                "1 0 1 0 1 0 1 0 1 0 1 1 1",
            )],
            "12m",
            vec![lease],
        ),
        case(
            "RudderNoLeader",
            vec![("leader_election_master_status", vec![lease], "0x20")],
            "10m",
            vec![lease],
        ),
        case(
            "RudderWebhookErrors",
            vec![
                (
                    "controller_runtime_webhook_requests_total",
                    vec![webhook, ("code", "500")],
                    "0+1x30",
                ),
                (
                    "controller_runtime_webhook_requests_total",
                    vec![webhook, ("code", "200")],
                    "0+1x30",
                ),
            ],
            "20m",
            vec![webhook],
        ),
        case(
            "RudderWebhookSlow",
            buckets(
                "controller_runtime_webhook_latency_seconds_bucket",
                webhook,
                &["5", "10", "15", "100", "+Inf"],
            ),
            "20m",
            vec![webhook],
        ),
        case(
            "RudderWebhookPanics",
            vec![(
                "controller_runtime_webhook_panics_total",
                vec![],
                "0x5 1x10",
            )],
            "8m",
            vec![("pod", POD)],
        ),
        case(
            "RudderCertificateReadErrors",
            vec![(
                "certwatcher_read_certificate_errors_total",
                vec![],
                "0x5 1x10",
            )],
            "8m",
            vec![("pod", POD)],
        ),
        case(
            "RudderCacheRelists",
            vec![("rudder_cache_relists_total", vec![resource], "0+1x30")],
            "10m",
            vec![resource],
        ),
        case(
            "RudderCacheWatchErrors",
            vec![("rudder_cache_watch_errors_total", vec![resource], "0+1x30")],
            "20m",
            vec![resource],
        ),
        case(
            "RudderCacheMalformedObjects",
            vec![(
                "rudder_cache_malformed_objects_total",
                vec![resource],
                "0x5 1x10",
            )],
            "8m",
            vec![resource],
        ),
        // Born at its first panic, as the real series is: the alert sees it new.
        case(
            "RudderCachePanics",
            vec![(
                "rudder_cache_panics_total",
                vec![resource, ("function", "handler")],
                "_x5 1x10",
            )],
            "8m",
            vec![resource, ("function", "handler")],
        ),
        // A `code="403"` series is born at the first refusal, beside the 200s.
        case(
            "RudderRequestsForbidden",
            vec![
                (
                    "rest_client_requests_total",
                    vec![
                        ("code", "200"),
                        ("method", "GET"),
                        ("host", "10.96.0.1:443"),
                    ],
                    "0+5x20",
                ),
                (
                    "rest_client_requests_total",
                    vec![
                        ("code", "403"),
                        ("method", "PATCH"),
                        ("host", "10.96.0.1:443"),
                    ],
                    "_x5 1x10",
                ),
            ],
            "8m",
            vec![("method", "PATCH")],
        ),
        case(
            "RudderFleetClusterUnhealthy",
            vec![("rudder_fleet_cluster_healthy", vec![cluster], "1x3 0x20")],
            "12m",
            vec![cluster],
        ),
        case(
            "RudderFleetClusterNotSynced",
            vec![
                ("rudder_fleet_cluster_synced", vec![cluster], "0x30"),
                ("rudder_fleet_cluster_engaged", vec![cluster], "1x30"),
            ],
            "20m",
            vec![cluster],
        ),
    ]
}

/// `text` with each `{{ $labels.x }}` replaced by the label's value, as Prometheus expands
/// the annotations the rules hold.
fn expand(text: &str, labels: &Map<String, Value>) -> String {
    let mut out = text.to_owned();
    for (key, value) in labels {
        out = out.replace(
            &format!("{{{{ $labels.{key} }}}}"),
            value.as_str().unwrap_or_default(),
        );
    }
    assert!(
        !out.contains("{{"),
        "an annotation reads a label the alert lacks: {out}"
    );
    out
}

fn alerts_by_name() -> Vec<rudder_manifests::alerts::Alert> {
    rule_groups(&options())
        .into_iter()
        .flat_map(|group| group.rules)
        .filter_map(|rule| match rule {
            Rule::Alert(alert) => Some(alert),
            Rule::Record { .. } => None,
        })
        .collect()
}

/// The unit test file: one test group per case, with the other job's copy of its input.
fn unit_tests() -> Value {
    let alerts = alerts_by_name();
    let tests: Vec<Value> = cases()
        .into_iter()
        .map(|case| {
            let alert = alerts
                .iter()
                .find(|alert| alert.name == case.alert)
                .unwrap_or_else(|| panic!("no alert {}", case.alert));
            let mut input = Vec::new();
            for job in [JOB, "other-operator"] {
                for (name, labels, values) in &case.input {
                    input.push(json!({ "series": series(name, labels, job), "values": values }));
                }
            }
            let mut labels = Map::new();
            labels.insert("alertname".into(), json!(case.alert));
            labels.insert("severity".into(), json!(alert.severity.as_str()));
            labels.insert("namespace".into(), json!(NAMESPACE));
            labels.insert("job".into(), json!(JOB));
            for (k, v) in &case.labels {
                labels.insert((*k).into(), json!(v));
            }
            let annotations = json!({
                "summary": expand(&alert.summary, &labels),
                "description": expand(&alert.description, &labels),
                "runbook_url": alert.runbook_url(),
            });
            labels.remove("alertname");
            json!({
                "name": case.alert,
                "interval": "1m",
                "input_series": input,
                "alert_rule_test": [{
                    "eval_time": case.eval,
                    "alertname": case.alert,
                    "exp_alerts": [{ "exp_labels": labels, "exp_annotations": annotations }],
                }],
            })
        })
        .collect();
    json!({
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": tests,
    })
}

/// The recorded ratios, at values the input makes exact.
fn recorded_ratios() -> Value {
    let labels = |key: &str, value: &str, record: &str| {
        format!(r#"{record}{{job="{JOB}",namespace="{NAMESPACE}",{key}="{value}"}}"#)
    };
    let input: Vec<Value> = [
        (
            "controller_runtime_reconcile_total",
            vec![("controller", CONTROLLER), ("result", "error")],
            "0+1x20",
        ),
        (
            "controller_runtime_reconcile_total",
            vec![("controller", CONTROLLER), ("result", "success")],
            "0+3x20",
        ),
        (
            "controller_runtime_webhook_requests_total",
            vec![("webhook", WEBHOOK), ("code", "500")],
            "0+1x20",
        ),
        (
            "controller_runtime_webhook_requests_total",
            vec![("webhook", WEBHOOK), ("code", "200")],
            "0+1x20",
        ),
    ]
    .iter()
    .map(|(name, l, values)| json!({ "series": series(name, l, JOB), "values": values }))
    .collect();
    json!({
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "name": "recorded ratios",
            "interval": "1m",
            "input_series": input,
            "promql_expr_test": [
                {
                    "expr": RECONCILE_ERROR_RATIO,
                    "eval_time": "10m",
                    "exp_samples": [{
                        "labels": labels("controller", CONTROLLER, RECONCILE_ERROR_RATIO),
                        "value": 0.25,
                    }],
                },
                {
                    "expr": WEBHOOK_ERROR_RATIO,
                    "eval_time": "10m",
                    "exp_samples": [{
                        "labels": labels("webhook", WEBHOOK, WEBHOOK_ERROR_RATIO),
                        "value": 0.5,
                    }],
                },
            ],
        }],
    })
}

#[test]
fn every_alert_has_a_case_and_a_runbook_section_name() {
    let alerts: BTreeSet<String> = alerts_by_name().into_iter().map(|a| a.name).collect();
    let cased: BTreeSet<String> = cases().iter().map(|c| c.alert.to_owned()).collect();
    assert_eq!(alerts, cased);
    for alert in alerts_by_name() {
        assert!(!alert.for_.is_empty(), "{} has no `for:`", alert.name);
        assert!(alert.runbook_url().ends_with(&alert.name.to_lowercase()));
    }
}

#[test]
fn every_series_is_scoped_by_the_selector() {
    let options = options();
    let exprs: Vec<String> = rule_groups(&options)
        .into_iter()
        .flat_map(|group| group.rules)
        .map(|rule| match rule {
            Rule::Alert(alert) => alert.expr,
            Rule::Record { expr, .. } => expr,
        })
        .chain(
            dashboards("op", &selector())
                .iter()
                .flat_map(|d| expressions(&d.json)),
        )
        .collect();
    let scoped = format!(r#"{{job="{JOB}",namespace="{NAMESPACE}""#);
    for expr in &exprs {
        for name in metric_names(expr) {
            let selected = expr.matches(&format!("{name}{scoped}")).count();
            let all = expr.matches(name.as_str()).count();
            assert_eq!(selected, all, "{name} read unscoped in {expr}");
        }
    }
}

#[test]
fn the_prometheus_rule_holds_the_rule_files_groups() {
    let object = prometheus_rule(&options());
    assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(object["metadata"]["namespace"], NAMESPACE);
    assert_eq!(object["spec"]["groups"], rule_file(&options())["groups"]);
    let groups = rule_groups(&options());
    let recorded: BTreeSet<&str> = groups
        .iter()
        .flat_map(|group| &group.rules)
        .filter_map(|rule| match rule {
            Rule::Record { record, .. } => Some(record.as_str()),
            Rule::Alert(_) => None,
        })
        .collect();
    assert_eq!(recorded, RECORDED.iter().copied().collect());
}

#[test]
fn rules_pass_promtool_check_and_every_alert_fires_on_its_case() {
    let Some(promtool) = promtool() else { return };
    let dir = scratch("rules");
    std::fs::write(dir.join("rules.yml"), render_rule_file(&options()).unwrap()).unwrap();
    run(&promtool, &dir, &["check", "rules", "rules.yml"]);
    std::fs::write(
        dir.join("alerts.test.yml"),
        serde_yaml::to_string(&unit_tests()).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("recorded.test.yml"),
        serde_yaml::to_string(&recorded_ratios()).unwrap(),
    )
    .unwrap();
    run(
        &promtool,
        &dir,
        &["test", "rules", "alerts.test.yml", "recorded.test.yml"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_dashboard_query_parses_in_promtool() {
    let all = dashboards("op", &selector());
    let rules: Vec<Value> = all
        .iter()
        .flat_map(|d| {
            expressions(&d.json)
                .into_iter()
                .enumerate()
                .map(move |(i, expr)| json!({ "record": format!("dashboard:{}:{i}", d.name), "expr": expr }))
        })
        .collect();
    assert!(rules.len() > 20, "{rules:?}");
    let Some(promtool) = promtool() else { return };
    let dir = scratch("dashboards");
    let file = json!({ "groups": [{ "name": "dashboards", "rules": rules }] });
    std::fs::write(
        dir.join("dashboards.yml"),
        serde_yaml::to_string(&file).unwrap(),
    )
    .unwrap();
    run(&promtool, &dir, &["check", "rules", "dashboards.yml"]);
    let _ = std::fs::remove_dir_all(&dir);
}
