//! Throughput of a sharded controller: 1 replica against 3, with a reconciler that waits
//! 10 ms on I/O (a sleep) and one worker per replica.
//!
//! Run with `cargo bench -p rudder-manager --bench sharding_throughput -- --bench
//! [--rounds N] [--objects N]` with `RUDDER_ENVTEST_ASSETS` set. One control plane and one
//! namespace of ConfigMaps (3,000 by default, created once) serve every round. Each round
//! starts R managers in this process (R = 1 or 3, alternating), each with the same sharded
//! controller (a ring of its own per round, 32 shards, leases 3 s / 2 s / 0.5 s), waits until
//! every replica holds the shards its view gives it and the start-up reconciles (which do
//! not wait) are done, then adds every key to every replica's queue at once (what a watch
//! event does: each replica receives every event and drops the keys it does not own) and
//! times until every key has been reconciled once. Without `--bench` in its arguments (as
//! under `cargo test --benches`) it returns at once.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout
)]

#[path = "../tests/support/fixtures.rs"]
mod fixtures;

use fixtures::{arg, config_map, load, manager_builder, shard_config_maps, sharding, start};

use std::collections::HashSet;
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
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_lease::sharding::{Ring, RingStatus};
use rudder_manager::Error;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(300);

/// Waits 10 ms per key while timing; returns at once otherwise (the start-up pass).
struct Io {
    timing: Arc<AtomicBool>,
    done: Arc<Mutex<HashSet<String>>>,
}

impl Reconciler for Io {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        if self.timing.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            self.done.lock().unwrap().insert(request.name().to_owned());
        }
        Ok(Action::done())
    }
}

struct Replica {
    controller: Controller<Io>,
    status: watch::Receiver<RingStatus>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

fn replica(
    ns: &TestNamespace,
    round: usize,
    who: usize,
    timing: &Arc<AtomicBool>,
    done: &Arc<Mutex<HashSet<String>>>,
) -> Replica {
    let manager = manager_builder(ns.client(), ns.name()).build().unwrap();
    let config = sharding(ns.name(), format!("bench-{round}"), format!("r{who}"), 32);
    let ring = Ring::new(ns.client(), config).unwrap();
    let controller = Controller::builder(
        format!("bench-{round}-{who}"),
        Io {
            timing: Arc::clone(timing),
            done: Arc::clone(done),
        },
    )
    .build()
    .unwrap();
    shard_config_maps(&manager, &controller, &ring);
    let status = ring.status();
    manager.add(ring);
    manager.add_controller(controller.clone());
    let (stop, task) = start(manager);
    Replica {
        controller,
        status,
        stop,
        task,
    }
}

async fn until(what: &str, check: impl FnMut() -> bool) {
    fixtures::until(what, WAIT, Duration::from_millis(5), check).await;
}

/// One round with `replicas` replicas: seconds from the adds to the last key reconciled.
async fn round(ns: &TestNamespace, n: usize, replicas: usize, names: &[String]) -> f64 {
    let timing = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(HashSet::new()));
    let rs: Vec<Replica> = (0..replicas)
        .map(|who| replica(ns, n, who, &timing, &done))
        .collect();
    until("the ring to settle", || {
        rs.iter().all(|r| {
            let s = r.status.borrow();
            s.settled && s.members.len() == replicas
        })
    })
    .await;
    // The start-up pass (each replica's keys, reconciled without waiting) is over when
    // every queue is empty and nothing runs.
    until("the start-up reconciles", || {
        rs.iter()
            .all(|r| r.controller.has_synced() && r.controller.queue().is_empty())
    })
    .await;
    tokio::task::yield_now().await;
    timing.store(true, Ordering::SeqCst);
    let start = Instant::now();
    for r in &rs {
        for name in names {
            r.controller
                .queue()
                .add(Request::namespaced(ns.name(), name));
        }
    }
    until("every key reconciled", || {
        done.lock().unwrap().len() == names.len()
    })
    .await;
    let took = start.elapsed().as_secs_f64();
    for r in rs {
        r.stop.cancel();
        r.task.await.unwrap().unwrap();
    }
    took
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let Some(args) = fixtures::bench_args() else {
        return;
    };
    let rounds = arg(&args, "--rounds", 3).max(1);
    let objects = arg(&args, "--objects", 3000);
    let runtime = fixtures::runtime();
    runtime.block_on(async move {
        let env = TestEnv::start().await.unwrap();
        let ns = env.namespace("sharding-bench").await.unwrap();
        let api: Api<ConfigMap> = ns.api();
        let names: Vec<String> = (0..objects).map(|i| format!("cm-{i:05}")).collect();
        fixtures::create_config_maps(&api, names.iter().map(config_map), 32).await;
        println!(
            "{objects} ConfigMaps; reconciler waits 10 ms, 1 worker per replica; load {}",
            load()
        );
        println!("round  replicas  seconds  keys/s  load");
        let mut results: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for n in 0..rounds * 2 {
            // Alternate, so that both see the same drift in load.
            let replicas = if n % 2 == 0 { 1 } else { 3 };
            let took = round(&ns, n, replicas, &names).await;
            println!(
                "{:>5}  {replicas:>8}  {took:>7.2}  {:>6.0}  {}",
                n / 2 + 1,
                objects as f64 / took,
                load()
            );
            results[usize::from(replicas == 3)].push(took);
        }
        let one = median(results[0].clone());
        let three = median(results[1].clone());
        println!(
            "median: 1 replica {one:.2} s, 3 replicas {three:.2} s: {:.2}x",
            one / three
        );
        drop(ns);
        env.stop().unwrap();
    });
}
