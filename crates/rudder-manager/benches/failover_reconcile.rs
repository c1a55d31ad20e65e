//! From the old leader's release to the new leader's first reconcile, with thousands of
//! objects of the controller's type in the cache, with warm standby off (the controller
//! starts, lists and syncs only once the replica leads) and on (it synced while following).
//!
//! Run with `cargo xtask bench-failover [--rounds N] [--objects N]` (or `cargo bench -p
//! rudder-manager --bench failover_reconcile -- --bench`, with `RUDDER_ENVTEST_ASSETS` set).
//! One control plane and one namespace of ConfigMaps (5,000 by default, created once) serve
//! every round; each round runs two managers in this process (lease 15 s, renew 10 s, retry
//! 2 s, release on cancel), lets the first lead, starts the second, then stops the first
//! and times three instants: the release (the old leader's validity ends, just before its
//! release is sent), the new leader holding the Lease (its validity starts), and its first
//! reconcile. Modes alternate round by round. Without `--bench` in its arguments (as under
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

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

use fixtures::{arg, config_map, load, manager_builder, start_shared, watch_config_maps};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_core::runnable;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_manager::{Error, Manager};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(120);

/// Records the first reconcile's start.
struct First(Arc<Mutex<Option<Instant>>>);

impl Reconciler for First {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        self.0.lock().unwrap().get_or_insert_with(Instant::now);
        Ok(Action::done())
    }
}

struct Replica {
    manager: Arc<Manager>,
    controller: Controller<First>,
    first: Arc<Mutex<Option<Instant>>>,
    electing: Arc<AtomicBool>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

fn replica(ns: &TestNamespace, round: usize, who: &str, warm: bool) -> Replica {
    let election = fixtures::election(
        ns.name(),
        format!("failover-{round}"),
        who,
        (LEASE, RENEW, RETRY),
    )
    .with_release_on_cancel(true);
    let manager = manager_builder(ns.client(), ns.name())
        .leader_election(election)
        .warm_standby(warm)
        .build()
        .unwrap();
    let first = Arc::new(Mutex::new(None));
    let controller =
        Controller::builder(format!("failover-{round}-{who}"), First(Arc::clone(&first)))
            .build()
            .unwrap();
    watch_config_maps(&manager, &controller);
    manager.add_controller(controller.clone());
    // Plain runnables start right before the election: this one says it has begun.
    let electing = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&electing);
    manager.add(runnable("electing", false, move |shutdown| async move {
        flag.store(true, Ordering::SeqCst);
        shutdown.stopped().await;
        Ok(())
    }));
    let manager = Arc::new(manager);
    let (stop, task) = start_shared(&manager);
    Replica {
        manager,
        controller,
        first,
        electing,
        stop,
        task,
    }
}

async fn until(what: &str, check: impl FnMut() -> bool) {
    fixtures::until(what, WAIT, Duration::from_millis(5), check).await;
}

struct Round {
    held: Duration,
    first: Duration,
}

async fn round(ns: &TestNamespace, n: usize, warm: bool, objects: usize) -> Round {
    let a = replica(ns, n, "a", warm);
    let election_a = a.manager.leader_election().unwrap().clone();
    until("a to lead", || election_a.is_leader()).await;
    until("a to reconcile", || a.first.lock().unwrap().is_some()).await;
    let b = replica(ns, n, "b", warm);
    until("b to start electing", || b.electing.load(Ordering::SeqCst)).await;
    if warm {
        until("b to queue every object", || {
            b.controller.has_synced() && b.controller.queue().len() >= objects
        })
        .await;
    }
    assert!(b.first.lock().unwrap().is_none(), "the follower reconciled");
    let mut validity_a = election_a.validity();
    let mut validity_b = b.manager.leader_election().unwrap().validity();
    let released = tokio::spawn(async move {
        validity_a.wait_for(Option::is_none).await.unwrap();
        Instant::now()
    });
    let held = tokio::spawn(async move {
        validity_b.wait_for(Option::is_some).await.unwrap();
        Instant::now()
    });
    a.stop.cancel();
    let released = released.await.unwrap();
    a.task.await.unwrap().unwrap();
    let held = tokio::time::timeout(WAIT, held).await.unwrap().unwrap();
    until("b to reconcile", || b.first.lock().unwrap().is_some()).await;
    let first = b.first.lock().unwrap().unwrap();
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
    Round {
        held: held.saturating_duration_since(released),
        first: first.saturating_duration_since(released),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn summary(label: &str, mut values: Vec<Duration>) -> String {
    values.sort();
    let median = values[values.len() / 2];
    format!(
        "{label}: min {} / median {} / max {} ms",
        ms(values[0]),
        ms(median),
        ms(values[values.len() - 1])
    )
}

fn main() {
    let Some(args) = fixtures::bench_args() else {
        return;
    };
    let rounds = arg(&args, "--rounds", 5).max(1);
    let objects = arg(&args, "--objects", 5000);
    let runtime = fixtures::runtime();
    runtime.block_on(async move {
        let env = TestEnv::start().await.unwrap();
        let ns = env.namespace("failover").await.unwrap();
        let api: Api<ConfigMap> = ns.api();
        let created = Instant::now();
        let config_maps = (0..objects).map(|i| ConfigMap {
            data: Some([("value".to_owned(), "x".repeat(64))].into()),
            ..config_map(format!("cm-{i:05}"))
        });
        fixtures::create_config_maps(&api, config_maps, 32).await;
        println!(
            "{objects} ConfigMaps created in {:.1} s; lease {LEASE:?}, renew {RENEW:?}, retry \
             {RETRY:?}, release on cancel; load {}",
            created.elapsed().as_secs_f64(),
            load()
        );
        println!("round  warm standby  release->held (ms)  release->first reconcile (ms)  load");
        let mut results: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        for n in 0..rounds * 2 {
            // Alternate, so that both modes see the same drift in load.
            let warm = n % 2 == 1;
            let r = round(&ns, n, warm, objects).await;
            println!(
                "{:>5}  {:>12}  {:>18}  {:>29}  {}",
                n / 2 + 1,
                if warm { "on" } else { "off" },
                ms(r.held),
                ms(r.first),
                load()
            );
            results[usize::from(warm)].push(r);
        }
        for (warm, label) in [(false, "off"), (true, "on")] {
            let rs = &results[usize::from(warm)];
            println!(
                "warm standby {label}: {}; {}",
                summary("release->held", rs.iter().map(|r| r.held).collect()),
                summary(
                    "release->first reconcile",
                    rs.iter().map(|r| r.first).collect()
                )
            );
        }
        drop(ns);
        env.stop().unwrap();
    });
}
