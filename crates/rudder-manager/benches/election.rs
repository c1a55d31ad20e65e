//! Release to new leader holding the Lease, for client-go's elector and Rudder's with and
//! without its Lease watch, in one sitting on a local API server (rudder-envtest), each
//! candidate a process of its own (see `tests/support/candidates.rs`).
//!
//! Run with `cargo xtask bench-election [--rounds N]`, or `cargo bench -p rudder-manager
//! --bench election -- --bench [--rounds N] [--scaled]` after `cargo xtask envtest install`.
//! Timings are client-go's defaults (lease 15 s, renew deadline 10 s, retry period 2 s),
//! or 3 s / 2 s / 0.5 s with `--scaled`. Each round, per elector in turn: a successor starts
//! while the leader holds the Lease, waits a random 0.5 s to 0.5 s + 2.2 retry periods (so a
//! polling successor's next attempt falls at a random point after the release, as in a real
//! rollout), then the leader releases. The time is from the leader's `stopped` line (printed
//! just before its release is written) to the successor's `started` line (its write won),
//! both on `CLOCK_MONOTONIC`. The successor then leads the next round. Without `--bench` in
//! its arguments (as under `cargo test --benches`) it returns at once.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

#[path = "../../rudder-lease/tests/support/candidates.rs"]
mod candidates;
#[path = "../tests/support/fixtures.rs"]
mod fixtures;

use std::time::Duration;

use candidates::{Candidate, Kind, Line, Target, Timings};
use fixtures::load as loadavg;
use rudder_envtest::TestEnv;

const MODES: [(Kind, &str); 3] = [
    (Kind::Go, "client-go"),
    (Kind::Rudder { watch: false }, "rudder-polling"),
    (Kind::Rudder { watch: true }, "rudder-watch"),
];

fn main() {
    let runtime = fixtures::runtime();
    if let Ok(settings) = std::env::var(candidates::CHILD_ENV) {
        runtime.block_on(candidates::rudder_candidate(&settings));
    }
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let timings = if args.iter().any(|a| a == "--scaled") {
        Timings::SHORT
    } else {
        Timings::DEFAULT
    };
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(10, |n| n.parse().expect("--rounds N"));

    let go = candidates::go_elector().unwrap_or_else(|e| panic!("client-go's candidate: {e}"));
    let env = runtime.block_on(TestEnv::start()).unwrap();
    let ns = runtime.block_on(env.namespace("election")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let target = |lease: &str| Target {
        kubeconfig: env.kubeconfig_path().to_owned(),
        namespace: ns.name().to_owned(),
        name: lease.to_owned(),
        timings,
    };
    println!(
        "lease {:?}, renew deadline {:?}, retry period {:?}; {rounds} rounds; load before: {}",
        timings.lease,
        timings.renew,
        timings.retry,
        loadavg()
    );

    let targets: Vec<Target> = MODES.iter().map(|(_, name)| target(name)).collect();
    let spawn = |mode: usize, round: usize| {
        let (kind, name) = MODES[mode];
        Candidate::spawn(
            kind,
            &format!("{name}-{round}"),
            &targets[mode],
            &go,
            &exe,
            &["--bench"],
        )
    };
    let mut leaders: Vec<Candidate> = (0..MODES.len()).map(|m| spawn(m, 0)).collect();
    for leader in &leaders {
        leader
            .wait_started(timings.lease * 3)
            .unwrap_or_else(|| panic!("{} does not lead", leader.name));
    }
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for round in 1..=rounds {
        let mut line = format!("round {round:>2}:");
        for (mode, leader) in leaders.iter_mut().enumerate() {
            let successor = spawn(mode, round);
            successor
                .wait_for(timings.lease, |l| matches!(l, Line::Candidate(_)))
                .expect("the successor runs");
            let spread = timings.retry.mul_f64(2.2);
            std::thread::sleep(Duration::from_millis(500) + spread.mul_f64(random_fraction()));
            leader.release();
            let started = successor
                .wait_started(timings.lease * 3)
                .unwrap_or_else(|| panic!("{} did not take over", successor.name));
            let released = leader
                .lines()
                .iter()
                .find_map(|l| match l {
                    Line::Stopped(t, _) => Some(*t),
                    _ => None,
                })
                .expect("the leader printed its stop");
            let took = (started - released) as f64 / 1e9;
            results[mode].push(took);
            line.push_str(&format!("  {} {:>7.1} ms", MODES[mode].1, took * 1e3));
            let _ = leader.wait_exit(timings.lease);
            *leader = successor;
        }
        println!("{line}  (load {})", loadavg());
    }
    for leader in &mut leaders {
        leader.release();
        let _ = leader.wait_exit(timings.lease);
    }

    println!();
    println!("release -> new leader holding the Lease, {rounds} rounds:");
    println!("| elector | min | median | max |");
    println!("|---|---|---|---|");
    for (mode, (_, name)) in MODES.iter().enumerate() {
        let mut times = results[mode].clone();
        times.sort_by(f64::total_cmp);
        let ms = |v: f64| format!("{:.1} ms", v * 1e3);
        println!(
            "| {name} | {} | {} | {} |",
            ms(times[0]),
            ms(median(&times)),
            ms(times[times.len() - 1])
        );
    }
    println!("load after: {}", loadavg());
    runtime.block_on(async { drop(ns) });
    drop(env);
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])
    }
}

/// A number in [0, 1), from std's randomly seeded hasher.
fn random_fraction() -> f64 {
    use std::hash::BuildHasher;
    let bits =
        std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}
