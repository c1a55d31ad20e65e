//! `cargo xtask bench-informers`: informers at scale, each in a process of its own: Rudder's
//! informer (streaming and paginated lists), kube-runtime's reflector (streaming lists on and
//! off) and client-go's shared informer (WatchListClient on and off), sync time and resident
//! memory (before, peak until synced, steady), and Rudder's informer released by its last
//! user.
//!
//! Builds client-go's side (`go/cmd/informer-rss`, with the module's client-go, that of the
//! control plane's release), finds (or installs) the envtest control plane, then runs
//! rudder-cache's `scale` bench (`crates/rudder-cache/benches/scale.rs`), which creates the
//! ConfigMaps once and runs every implementation in turn, per sitting.
//!
//! With several counts (`--objects 1000,10000,50000,100000`), a sweep instead: the namespace
//! grown from one count to the next, Rudder's informer, kube-runtime's reflector and
//! controller-runtime's cache synced at each, and the sync time and steady RSS drawn in
//! `docs/informer-scaling.svg`.

use crate::util;

const USAGE: &str =
    "usage: cargo xtask bench-informers [--objects N[,N...]] [--runs N] [--settle SECONDS]";

/// Entry point for `cargo xtask bench-informers`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let mut passed = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let positive = |v: &str| v.parse::<u32>().is_ok_and(|n| n > 0);
        let value = rest
            .next()
            .filter(|v| match *arg {
                "--objects" => v.split(',').all(positive),
                _ => positive(v),
            })
            .ok_or_else(|| format!("{arg} needs a positive number\n{USAGE}"))?;
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
            "--objects" | "--runs" | "--settle" => {
                passed.push((*arg).to_owned());
                passed.push((*value).to_owned());
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    crate::go_bench::run(
        "informer-rss",
        "client-go",
        "rudder-cache",
        "scale",
        &passed,
    )
}
