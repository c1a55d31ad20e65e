//! Rudder's and client-go's electors on one Lease, each candidate a process of its own:
//! handovers both ways by release and by kill, a Rudder leader frozen with SIGSTOP past its
//! lease, and an old-style (polling only) Rudder candidate among them. Every candidate prints
//! when it starts and stops believing it leads, on the machine's monotonic clock; no two of
//! those intervals may overlap, by any margin.
//!
//! client-go's candidate is `go/cmd/elector` in the repository's Go module, on the client-go
//! that `go/go.mod` pins, built with the machine's Go (see `support/candidates.rs`); without
//! Go the test fails and says so.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "support/candidates.rs"]
mod candidates;

use std::time::Duration;

use candidates::{Candidate, Kind, Line, Target, Timings, assert_no_overlap, mono};
use rudder_envtest::TestEnv;

const NAME: &str = "interop";

/// In the child: one Rudder candidate (see `support/candidates.rs`).
#[tokio::test]
async fn rudder_candidate_child() {
    let Ok(settings) = std::env::var(candidates::CHILD_ENV) else {
        return; // Only meaningful as a child of the test below.
    };
    candidates::rudder_candidate(&settings).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rudder_and_client_go_candidates_never_lead_at_once() {
    let go = tokio::task::spawn_blocking(candidates::go_elector)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("client-go's candidate: {e}"));
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("interop").await.unwrap();
    let target = Target {
        kubeconfig: env.kubeconfig_path().to_owned(),
        namespace: ns.name().to_owned(),
        name: NAME.to_owned(),
        timings: Timings::SHORT,
    };
    let exe = std::env::current_exe().unwrap();
    tokio::task::spawn_blocking(move || scenario(&target, &go, &exe))
        .await
        .unwrap();
}

const WATCHING: Kind = Kind::Rudder { watch: true };
const POLLING: Kind = Kind::Rudder { watch: false };
/// Long enough for any takeover here: a lease (3 s) plus 2.2 retries plus requests.
const TAKEOVER: Duration = Duration::from_secs(8);

fn scenario(target: &Target, go: &std::path::Path, exe: &std::path::Path) {
    let args = [
        "--exact",
        "rudder_candidate_child",
        "--nocapture",
        "--test-threads=1",
    ];
    let spawn = |kind, name: &str| Candidate::spawn(kind, name, target, go, exe, &args);
    let mut all: Vec<Candidate> = Vec::new();
    let mut report = Vec::new();

    // client-go creates the Lease and leads.
    all.push(spawn(Kind::Go, "go-1"));
    all[0].wait_started(TAKEOVER).expect("go-1 leads");

    // client-go -> Rudder, by release: the watching Rudder candidate takes over at once.
    all.push(spawn(WATCHING, "rudder-1"));
    all[1]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("rudder-1 runs");
    all[0].release();
    let took = handover(&all[0], &all[1], "go-1 released");
    assert_fast_after_go_release(&all[0], took);
    report.push(format!("go-1 release -> rudder-1: {took:.3} s"));

    // Rudder -> client-go, by release (client-go polls: up to 2.2 retry periods).
    all.push(spawn(Kind::Go, "go-2"));
    all[2]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("go-2 runs");
    all[1].release();
    let took = handover(&all[1], &all[2], "rudder-1 released");
    report.push(format!("rudder-1 release -> go-2: {took:.3} s"));
    assert!(all[1].wait_exit(TAKEOVER).is_some_and(|s| s.success()));

    // client-go -> Rudder (polling only, as before the watch), by kill: once the lease expires.
    all.push(spawn(POLLING, "polling-1"));
    all[3]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("polling-1 runs");
    all[2].kill();
    let took = handover(&all[2], &all[3], "go-2 killed");
    report.push(format!("go-2 kill -> polling-1: {took:.3} s"));

    // Rudder -> client-go, by kill.
    all.push(spawn(Kind::Go, "go-3"));
    all[4]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("go-3 runs");
    all[3].kill();
    let took = handover(&all[3], &all[4], "polling-1 killed");
    report.push(format!("polling-1 kill -> go-3: {took:.3} s"));

    // A Rudder leader frozen past its lease: client-go takes over meanwhile; resumed, the
    // frozen leader reports the loss at once, having renewed nothing.
    all.push(spawn(WATCHING, "rudder-2"));
    all[5]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("rudder-2 runs");
    all[4].release();
    handover(&all[4], &all[5], "go-3 released");
    all.push(spawn(Kind::Go, "go-4"));
    all[6]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("go-4 runs");
    // Let it renew twice first.
    let validities = |lines: &[Line]| {
        lines
            .iter()
            .filter(|l| matches!(l, Line::Valid { .. }))
            .count()
    };
    let renewed = |c: &Candidate| validities(&c.lines());
    assert!(
        all[5].wait_until(TAKEOVER, |lines| validities(lines) >= 3),
        "rudder-2 renews"
    );
    all[5].pause();
    let paused = mono();
    let go_started = all[6]
        .wait_started(TAKEOVER)
        .expect("go-4 takes over from the frozen leader");
    let renewals_before_resume = renewed(&all[5]);
    let resumed = all[5].resume();
    let lost = all[5]
        .wait_for(
            TAKEOVER,
            |l| matches!(l, Line::Stopped(_, why) if why == "lost"),
        )
        .expect("the resumed leader reports the loss");
    let Line::Stopped(lost_at, _) = lost else {
        unreachable!()
    };
    assert!(
        lost_at - resumed < 200_000_000,
        "the resumed leader took {} ms to see the loss",
        (lost_at - resumed) / 1_000_000
    );
    assert_eq!(
        renewed(&all[5]),
        renewals_before_resume,
        "the resumed leader renewed nothing"
    );
    assert_eq!(all[5].wait_exit(TAKEOVER).and_then(|s| s.code()), Some(3));
    let valid_until = all[5]
        .lines()
        .iter()
        .filter_map(|l| match l {
            Line::Valid { until, .. } => Some(*until),
            _ => None,
        })
        .max()
        .unwrap();
    report.push(format!(
        "rudder-2 frozen at 0 s: its validity ended at {:.3} s, go-4 leads at {:.3} s, rudder-2 resumed at {:.3} s and saw the loss {:.1} ms later",
        (valid_until - paused) as f64 / 1e9,
        (go_started - paused) as f64 / 1e9,
        (resumed - paused) as f64 / 1e9,
        (lost_at - resumed) as f64 / 1e6
    ));

    // client-go -> Rudder once more, then the end.
    all.push(spawn(WATCHING, "rudder-3"));
    all[7]
        .wait_for(TAKEOVER, |l| matches!(l, Line::Candidate(_)))
        .expect("rudder-3 runs");
    all[6].release();
    let took = handover(&all[6], &all[7], "go-4 released");
    assert_fast_after_go_release(&all[6], took);
    report.push(format!("go-4 release -> rudder-3: {took:.3} s"));
    all[7].release();
    assert!(all[7].wait_exit(TAKEOVER).is_some_and(|s| s.success()));

    let end = mono();
    println!("{}", report.join("\n"));
    assert_no_overlap(&all, end);
}

/// A watching Rudder candidate takes a Lease that client-go released within 200 ms, unless
/// client-go failed to release it: its release reuses the Lease it last read, so when the
/// cancellation interrupts a renewal whose write still reached the server, the release is a
/// conflict and the Lease is left to expire (client-go logs "Failed to release lock").
fn assert_fast_after_go_release(go: &Candidate, took: f64) {
    if took < 0.2 {
        return;
    }
    let log = std::fs::read_to_string(go.log()).unwrap_or_default();
    assert!(
        log.contains("Failed to release lock"),
        "a watching Rudder took {took} s after {} released the Lease; its log:\n{log}",
        go.name
    );
    println!(
        "{} failed to release the Lease (client-go's race); taken over after {took:.3} s",
        go.name
    );
}

/// Waits until `to` leads after `from` stopped (or was killed), and returns the seconds
/// between `from`'s end and `to`'s start.
fn handover(from: &Candidate, to: &Candidate, what: &str) -> f64 {
    let started = to
        .wait_started(TAKEOVER)
        .unwrap_or_else(|| panic!("{} did not take over after {what}", to.name));
    let ended = from.killed.or_else(|| {
        from.lines().iter().find_map(|l| match l {
            Line::Stopped(t, _) => Some(*t),
            _ => None,
        })
    });
    let ended = ended.unwrap_or_else(|| panic!("{} never stopped ({what})", from.name));
    (started - ended) as f64 / 1e9
}
