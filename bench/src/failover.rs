//! `cargo xtask bench-failover`: from the old leader's release to the new leader's first
//! reconcile, with thousands of objects in the controller's cache, warm standby off and on.
//!
//! Finds (or installs) the envtest control plane, then runs rudder-manager's
//! `failover_reconcile` bench (`crates/rudder-manager/benches/failover_reconcile.rs`), which
//! starts one control plane, creates the objects once, and alternates rounds of the two
//! modes; it prints one line per round (with the load average) and min / median / max per
//! mode.

use crate::{envtest, util};

const USAGE: &str = "usage: cargo xtask bench-failover [--rounds N] [--objects N]";

/// Entry point for `cargo xtask bench-failover`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let mut rounds = "5".to_owned();
    let mut objects = "5000".to_owned();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let value = rest
            .next()
            .filter(|v| v.parse::<u32>().is_ok_and(|n| n > 0))
            .ok_or_else(|| format!("{arg} needs a positive number\n{USAGE}"))?;
        match *arg {
            "--rounds" => rounds = (*value).to_owned(),
            "--objects" => objects = (*value).to_owned(),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let assets = envtest::install(false)?;
    util::step("failover bench", || {
        util::run(
            util::cargo()
                .args([
                    "bench",
                    "-p",
                    "rudder-manager",
                    "--bench",
                    "failover_reconcile",
                    "--",
                    "--bench",
                    "--rounds",
                    &rounds,
                    "--objects",
                    &objects,
                ])
                .env("RUDDER_ENVTEST_ASSETS", &assets),
        )
    })
}
