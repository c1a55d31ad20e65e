//! `cargo xtask bench-informers`: informers at scale, each in a process of its own, on
//! ConfigMaps (`--kind configmaps`, 100,000 by default) or Pods shaped like real ones (`--kind
//! pods`, 50,000 by default). By default issue 39's four side by side: Rudder's informer
//! asking for protobuf (its default) and for JSON, controller-runtime's cache and
//! kube-runtime's reflector (each with its defaults); `--full` adds Rudder's paginated lists,
//! kube-runtime's streaming lists, client-go's shared informer (WatchListClient on and off,
//! managedFields dropped, JSON) and Rudder's informer released by its last user. Each row:
//! sync wall time, CPU to sync (and per object), resident memory (before, peak until synced,
//! steady), the bytes the child read and the API server's CPU over the sync; then Rudder's
//! ratios to controller-runtime beside the goals.
//!
//! Builds client-go's side (`go/cmd/informer-rss`, with the module's client-go, that of the
//! control plane's release, and controller-runtime), finds (or installs) the envtest control
//! plane, then runs rudder-cache's `scale` bench (`crates/rudder-cache/benches/scale.rs`),
//! which creates the objects once and runs every implementation in turn, per sitting.
//!
//! With several counts (`--objects 1000,10000,50000,100000`), a sweep instead: the namespace
//! grown from one count to the next, Rudder's informer, kube-runtime's reflector and
//! controller-runtime's cache synced at each, and the sync time and steady RSS drawn in
//! `docs/informer-scaling.svg`. `--callgrind` counts the instructions (valgrind's callgrind)
//! Rudder's child spends per object synced, asking for protobuf and for JSON.

use crate::util;

const USAGE: &str = "usage: cargo xtask bench-informers [--kind configmaps|pods] \
     [--objects N[,N...]] [--runs N] [--settle SECONDS] [--full] [--callgrind]";

/// Entry point for `cargo xtask bench-informers`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let mut passed = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if matches!(*arg, "--full" | "--callgrind") {
            passed.push((*arg).to_owned());
            continue;
        }
        let positive = |v: &str| v.parse::<u32>().is_ok_and(|n| n > 0);
        let value = rest
            .next()
            .filter(|v| match *arg {
                "--objects" => v.split(',').all(positive),
                "--kind" => matches!(**v, "configmaps" | "pods"),
                _ => positive(v),
            })
            .ok_or_else(|| match *arg {
                "--kind" => format!("--kind needs configmaps or pods\n{USAGE}"),
                _ => format!("{arg} needs a positive number\n{USAGE}"),
            })?;
        match *arg {
            "--objects" if value.contains(',') => {
                passed.push((*arg).to_owned());
                passed.push((*value).to_owned());
                passed.push("--plot".to_owned());
                passed.push(
                    util::workspace_root()
                        .join("docs")
                        .join("informer-scaling.svg")
                        .display()
                        .to_string(),
                );
            }
            "--objects" | "--runs" | "--settle" | "--kind" => {
                passed.push((*arg).to_owned());
                passed.push((*value).to_owned());
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    crate::go_bench::run(
        "informer-rss",
        "client-go and controller-runtime",
        "rudder-cache",
        "scale",
        &passed,
    )
}
