//! `cargo xtask bench-election`: from a leader's release to the new leader holding the Lease,
//! for client-go's elector and Rudder's with and without its Lease watch, in one sitting.
//!
//! Finds (or installs) the envtest control plane, then runs rudder-manager's `election` bench
//! (`crates/rudder-manager/benches/election.rs`): each candidate a process of its own,
//! client-go's built from `go/cmd/elector` with the machine's Go on the client-go that
//! `go/go.mod` pins (see `crates/rudder-lease/tests/support/candidates.rs`); client-go's default timings
//! (15 s / 10 s / 2 s) unless `--scaled` (3 s / 2 s / 0.5 s); one line per round with the load
//! average, then min / median / max per elector.

use crate::{envtest, util};

const USAGE: &str = "usage: cargo xtask bench-election [--rounds N] [--scaled]";

/// Entry point for `cargo xtask bench-election`.
pub(crate) fn run(args: &[&str]) -> Result<(), String> {
    let mut rounds = "10".to_owned();
    let mut scaled = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match *arg {
            "--rounds" => {
                rounds = rest
                    .next()
                    .filter(|v| v.parse::<u32>().is_ok_and(|n| n > 0))
                    .ok_or_else(|| format!("--rounds needs a positive number\n{USAGE}"))?
                    .to_string();
            }
            "--scaled" => scaled = true,
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let assets = envtest::install(false)?;
    let mut bench_args = vec!["--bench", "--rounds", rounds.as_str()];
    if scaled {
        bench_args.push("--scaled");
    }
    util::step("election bench", || {
        util::run(
            util::cargo()
                .args(["bench", "-p", "rudder-manager", "--bench", "election", "--"])
                .args(&bench_args)
                .env("RUDDER_ENVTEST_ASSETS", &assets),
        )
    })
}
