//! `cargo xtask bench-controller`: Rudder's controller against controller-runtime's, each in
//! a process of its own on one control plane: the first pass over the namespace's
//! ConfigMaps, update-to-reconcile latency idle and under a backlog of every object, RSS and
//! CPU, with 1 and 4 workers.
//!
//! Builds controller-runtime's side (`go/cmd/controller-pass`, controller-runtime of the
//! module's go.mod), finds (or installs) the envtest control plane, then runs the facade's
//! `controller_pass` bench (`crates/rudder/benches/controller_pass.rs`), which creates the
//! ConfigMaps once and runs both sides in turn.

const USAGE: &str = "usage: cargo xtask bench-controller [--objects N] [--runs N]";

/// Entry point for `cargo xtask bench-controller`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let mut passed = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let value = rest
            .next()
            .filter(|v| v.parse::<u32>().is_ok_and(|n| n > 0))
            .ok_or_else(|| format!("{arg} needs a positive number\n{USAGE}"))?;
        match *arg {
            "--objects" | "--runs" => {
                passed.push((*arg).to_owned());
                passed.push((*value).to_owned());
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    crate::go_bench::run(
        "controller-pass",
        "controller-runtime",
        "rudder-runtime",
        "controller_pass",
        &passed,
    )
}
