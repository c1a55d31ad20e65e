//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Each task lives in its own module. Run `cargo xtask help` for the list.

// A command-line tool reports to its terminal; printing is its job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod bench_election;
mod bench_failover;
mod bench_webhook;
mod checkov;
mod ci;
mod demo;
mod envtest;
mod go;
mod new_operator;
mod scaffold;
// Not yet a command: `cargo xtask tidy` is to declare it as its `cycles` module.
#[allow(dead_code)]
#[path = "tidy/cycles.rs"]
mod tidy_cycles;
mod util;
mod versions;

use std::process::ExitCode;

const HELP: &str = "\
cargo xtask <task>

Tasks:
  demo [--duration S] [--kubeconfig PATH]
                          the ChaosPod controller for S seconds (default 30) on a local
                          control plane (installed first if needed) or on a cluster
  checkov                 both examples' rendered manifests through the checkov scanner
                          (installed into ~/.cache/rudder/checkov-venv if missing); fails
                          on any finding but the accepted ones (docs/deploying-an-operator.md)
  ci                      run everything CI runs: envtest install (Kubernetes 1.37.2 and
                          1.33.13), fmt check, clippy, docs, checkov, the Go module's
                          checks, tests on both releases (a freshly scaffolded
                          controller's included), a short demo (the README's test command)
  new-controller NAME [--kind KIND] [--group GROUP]
                          scaffold a controller crate in examples/NAME: a custom resource,
                          a reconciler, an operator binary and an envtest test
  new-operator PATH [--kind KIND] [--group GROUP]
                          a standalone workspace at PATH for an operator of your own (its
                          crate, its xtask: test, manifests, run; a README; an envtest
                          test), depending on this Rudder checkout by path
  bench-workqueue [--runs N]
                          Rudder's work queue against client-go's, controller-runtime's
                          priority queue (go/workqueue, with the machine's Go) and
                          kube-runtime's, N times
  bench-webhook [--runs N] [--duration S] [--connections C] | --callgrind
                          the webhook server against Go's net/http and controller-runtime's
                          (go/cmd/webhook-*) under wrk, side by side;
                          --callgrind: Rudder's instructions per request under callgrind
  bench-failover [--rounds N] [--objects N]
                          the old leader's release to the new leader's first reconcile
                          with N objects (default 5000) in the cache, warm standby off
                          and on, N rounds each (default 5), on a local control plane
  bench-election [--rounds N] [--scaled]
                          a leader's release to the new leader holding the Lease:
                          client-go's elector, Rudder's polling only and with its watch,
                          N rounds (default 10) at 15 s / 10 s / 2 s (--scaled: 3/2/0.5 s)
  envtest install [--version X.Y.Z]
                          build (Go modules) and cache the control plane rudder-envtest
                          runs: Kubernetes 1.37.2 by default, etcd, KWOK (idempotent)
      --print-path        only print the directory holding the binaries
  help                    this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["bench-workqueue", rest @ ..] => bench::run(rest),
        ["bench-webhook", rest @ ..] => bench_webhook::run(rest),
        ["bench-election", rest @ ..] => bench_election::run(rest),
        ["bench-failover", rest @ ..] => bench_failover::run(rest),
        ["checkov", rest @ ..] => checkov::run(rest),
        ["ci", rest @ ..] => ci::run(rest),
        ["demo", rest @ ..] => demo::run(rest),
        ["new-controller", rest @ ..] => scaffold::run(rest),
        ["new-operator", rest @ ..] => new_operator::run(rest),
        ["envtest", rest @ ..] => envtest::run(rest),
        [] | ["help" | "--help" | "-h"] => {
            print!("{HELP}");
            Ok(())
        }
        other => Err(format!("unknown task `{}`\n\n{HELP}", other.join(" "))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
