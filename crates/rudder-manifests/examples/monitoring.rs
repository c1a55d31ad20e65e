//! Prints an operator's alerts and writes its dashboards: the rules as a `PrometheusRule`
//! (or, with `--rule-file`, as a plain Prometheus rule file), and with `--dashboards DIR`
//! one Grafana JSON file per dashboard in DIR.
//!
//! ```text
//! cargo run -p rudder-manifests --example monitoring -- \
//!     --name my-operator --job my-operator-metrics --namespace ops [--rule-file] [--dashboards DIR]
//! ```
#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use rudder_manifests::alerts::{AlertOptions, prometheus_rule, render_rule_file};
use rudder_manifests::dashboards::dashboards;
use rudder_manifests::promql::Selector;

const USAGE: &str = "usage: monitoring --name NAME [--job JOB] [--namespace NAMESPACE] \
                     [--rule-file] [--dashboards DIR]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut name = None;
    let mut selector = Selector::new();
    let mut namespace = None;
    let mut rule_file = false;
    let mut dashboard_dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--name" => name = Some(value()?),
            "--job" => selector = selector.job(value()?),
            "--namespace" => {
                let ns = value()?;
                selector = selector.namespace(ns.clone());
                namespace = Some(ns);
            }
            "--rule-file" => rule_file = true,
            "--dashboards" => dashboard_dir = Some(PathBuf::from(value()?)),
            _ => return Err(format!("unknown argument {arg}\n{USAGE}").into()),
        }
    }
    let name = name.ok_or(USAGE)?;
    let mut options = AlertOptions::new(name.clone()).selector(selector.clone());
    if let Some(namespace) = namespace {
        options = options.namespace(namespace);
    }
    if rule_file {
        print!("{}", render_rule_file(&options)?);
    } else {
        print!("{}", serde_yaml::to_string(&prometheus_rule(&options))?);
    }
    if let Some(dir) = dashboard_dir {
        std::fs::create_dir_all(&dir)?;
        for dashboard in dashboards(&name, &selector) {
            let path = dir.join(format!("{}.json", dashboard.name));
            std::fs::write(&path, serde_json::to_string_pretty(&dashboard.json)?)?;
        }
    }
    Ok(())
}
