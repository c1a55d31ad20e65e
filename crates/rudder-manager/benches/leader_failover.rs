//! Leader failover time on a real API server from rudder-envtest: from the moment the leader
//! stops to the moment the other candidate holds the Lease, with and without release on
//! cancel.
//!
//! Run with `cargo bench -p rudder-manager --bench leader_failover` (after
//! `cargo xtask envtest install`); it uses the default numbers (lease 15 s, renew deadline
//! 10 s, retry period 2 s) unless `--scaled` is given (3 s, 2 s, 0.5 s), and `--rounds N`
//! (default 3) handovers of each kind. Without `--bench` in its arguments (as under
//! `cargo test --benches`) it returns at once.

#![allow(
    clippy::disallowed_methods,
    reason = "benches may spawn: the bench owns its tasks"
)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

use std::time::Duration;

use rudder_envtest::TestEnv;
use rudder_lease::leader_election::{LeaderElection, LeaderElectionConfig};
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

struct Numbers {
    lease: Duration,
    renew: Duration,
    retry: Duration,
}

#[derive(Clone, Copy)]
enum Stop {
    /// Cancel with release on cancel: the holder is cleared.
    Release,
    /// Cancel without release: the Lease is left to expire.
    NoRelease,
    /// Drop the leadership mid-flight, as a killed process would.
    Kill,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let numbers = if args.iter().any(|a| a == "--scaled") {
        Numbers {
            lease: Duration::from_secs(3),
            renew: Duration::from_secs(2),
            retry: Duration::from_millis(500),
        }
    } else {
        Numbers {
            lease: Duration::from_secs(15),
            renew: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    };
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3usize);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(&numbers, rounds));
}

async fn run(numbers: &Numbers, rounds: usize) {
    let env = TestEnv::builder().start().await.unwrap();
    println!(
        "leader failover, lease {:?}, renew deadline {:?}, retry period {:?}, {rounds} rounds",
        numbers.lease, numbers.renew, numbers.retry
    );
    println!("| leader stopped by | min | median | max |");
    println!("|---|---|---|---|");
    for (label, stop) in [
        ("cancel, release on cancel", Stop::Release),
        ("cancel, no release", Stop::NoRelease),
        ("kill (task aborted)", Stop::Kill),
    ] {
        let mut times = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let ns = env.namespace(&format!("failover-{round}")).await.unwrap();
            times.push(failover(&ns, numbers, stop).await);
        }
        times.sort();
        println!(
            "| {label} | {:.2} s | {:.2} s | {:.2} s |",
            times[0].as_secs_f64(),
            times[times.len() / 2].as_secs_f64(),
            times[times.len() - 1].as_secs_f64()
        );
    }
    env.stop().unwrap();
}

async fn failover(ns: &rudder_envtest::TestNamespace, numbers: &Numbers, stop: Stop) -> Duration {
    let candidate = |identity: &str| {
        let config = LeaderElectionConfig::new(ns.name(), "failover")
            .with_identity(identity)
            .with_lease_duration(numbers.lease)
            .with_renew_deadline(numbers.renew)
            .with_retry_period(numbers.retry)
            .with_release_on_cancel(matches!(stop, Stop::Release));
        LeaderElection::new(ns.client(), config).unwrap()
    };
    let (a, b) = (candidate("a"), candidate("b"));
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let leadership_a = a.acquire(stop_a.clone()).await.unwrap();
    let b_acquiring = {
        let b = b.clone();
        let stop_b = stop_b.clone();
        tokio::spawn(async move { b.acquire(stop_b).await })
    };
    // Let the leader renew for a while, so the stop falls at an arbitrary point between
    // renewals and the follower has seen several of them.
    sleep(numbers.lease + numbers.retry.mul_f64(0.37)).await;
    assert!(a.is_leader() && !b.is_leader());

    let stopped = Instant::now();
    match stop {
        Stop::Kill => drop(leadership_a),
        Stop::Release | Stop::NoRelease => {
            stop_a.cancel();
            leadership_a.finished().await.unwrap();
        }
    }
    let leadership_b = b_acquiring.await.unwrap().unwrap();
    let took = stopped.elapsed();
    stop_b.cancel();
    leadership_b.finished().await.unwrap();
    took
}
