//! What a member cluster costs a fleet: resident memory, live heap and idle CPU per engaged
//! cluster with one watched kind, and the time from a provider announcing a cluster to its
//! first reconcile.
//!
//! Run with `cargo bench -p rudder-runtime --bench fleet -- --bench [--clusters N] [--objects N]
//! [--idle SECONDS]` with `RUDDER_ENVTEST_ASSETS` set. One control plane serves every member:
//! the provider announces it N times (20 by default) under different names, one at a time,
//! each announcement waiting for that cluster's first reconcile, so every member is a client,
//! a cache with one ConfigMap informer over a namespace of `--objects` ConfigMaps (10 by
//! default, 400-byte values) and one controller instance, as it would be for N real clusters
//! (what differs with real ones is the network between). Memory is `VmRSS` from
//! `/proc/self/status` and the counting allocator's live bytes, read with no cluster engaged
//! and again with all N engaged, synced and idle; CPU is the process's CPU clock over
//! `--idle` seconds (30 by default) idle, once with none engaged and once with N, the
//! difference per cluster and minute. The tokio runtime is a current-thread one, as in the other benches.
//! Without `--bench` in its arguments (as under `cargo test --benches`) it returns at once.

#![allow(
    clippy::disallowed_methods,
    reason = "benches may spawn: the bench owns its tasks"
)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::cast_precision_loss
)]

use std::alloc::System;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use rudder::multicluster::{Announcer, Fleet, Provider};
use rudder::prelude::*;

mod common;
use common::{arg, cpu_time, rss_bytes};
use rudder_envtest::poll::until;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::time::Instant;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NAMESPACE: &str = "fleet-bench";

/// A provider the bench drives: it hands its announcer out when the fleet starts it.
#[derive(Clone, Default)]
struct Driven(Arc<Mutex<Option<Announcer>>>);

impl Provider for Driven {
    fn name(&self) -> String {
        "bench".to_owned()
    }

    fn run(
        &self,
        clusters: Announcer,
        shutdown: rudder::manager::Shutdown,
    ) -> BoxFuture<'static, Result<(), rudder::manager::BoxError>> {
        *self.0.lock().unwrap() = Some(clusters);
        Box::pin(async move {
            shutdown.stopped().await;
            Ok(())
        })
    }
}

/// Records the first reconcile of each cluster.
struct First(Arc<Mutex<HashMap<String, Instant>>>);

impl Reconciler for First {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, ctx: Context) -> Result<Action, Self::Error> {
        let cluster = ctx.cluster().unwrap_or_default().to_owned();
        self.0
            .lock()
            .unwrap()
            .entry(cluster)
            .or_insert_with(Instant::now);
        Ok(Action::done())
    }
}

fn live_heap() -> isize {
    let s = GLOBAL.stats();
    // stats_alloc counts a realloc's growth or shrinkage in bytes_allocated or
    // bytes_deallocated already; bytes_reallocated is the same difference again.
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let clusters = arg("--clusters", 20);
    let objects = arg("--objects", 10);
    let idle = Duration::from_secs(arg("--idle", 30) as u64);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(clusters, objects, idle));
}

async fn run(clusters: usize, objects: usize, idle: Duration) {
    let env = rudder_envtest::TestEnv::start().await.unwrap();
    let client = env.client().unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NAMESPACE.into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..objects {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("cm-{i}")),
                ..ObjectMeta::default()
            },
            data: Some([("v".to_owned(), "x".repeat(400))].into()),
            ..ConfigMap::default()
        };
        api.create(&PostParams::default(), &cm).await.unwrap();
    }

    let manager = Arc::new(
        Manager::builder(client.clone())
            .health_probe_address(None)
            .metrics_address(None)
            .build()
            .unwrap(),
    );
    let driven = Driven::default();
    let fleet = Fleet::builder(&manager)
        .provider(driven.clone())
        .cache(|cache| cache.default_namespace(NAMESPACE))
        .build()
        .unwrap();
    let first: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .complete_with({
            let first = Arc::clone(&first);
            move |_| First(Arc::clone(&first))
        })
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    until("the fleet started", Duration::from_secs(60), || {
        driven.0.lock().unwrap().is_some()
    })
    .await;
    let announcer = driven.0.lock().unwrap().clone().unwrap();

    // None engaged: the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_0, heap_0) = (rss_bytes(), live_heap());
    let cpu_start = cpu_time();
    tokio::time::sleep(idle).await;
    let cpu_0 = cpu_time() - cpu_start;

    // Engage them one at a time.
    let mut to_first = Vec::with_capacity(clusters);
    for i in 0..clusters {
        let name = format!("m{i}");
        let announced = Instant::now();
        announcer.engage(name.clone(), env.config().clone());
        until(
            &format!("{name}'s first reconcile"),
            Duration::from_secs(60),
            || first.lock().unwrap().contains_key(&name),
        )
        .await;
        to_first.push(first.lock().unwrap()[&name] - announced);
    }
    until("every cluster synced", Duration::from_secs(60), || {
        (0..clusters).all(|i| fleet.has_synced(&format!("m{i}")))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_n, heap_n) = (rss_bytes(), live_heap());
    let cpu_start = cpu_time();
    tokio::time::sleep(idle).await;
    let cpu_n = cpu_time() - cpu_start;

    to_first.sort();
    let per = |total: f64| total / clusters as f64;
    let minute = 60.0 / idle.as_secs_f64();
    println!(
        "fleet cost, {clusters} clusters engaged (one control plane announced under {clusters} names), \
         one ConfigMap controller, {objects} ConfigMaps each"
    );
    println!("| | value |");
    println!("|---|---:|");
    println!(
        "| RSS per engaged cluster | {:.0} KB |",
        per((rss_n as f64 - rss_0 as f64) / 1024.0)
    );
    println!(
        "| live heap per engaged cluster | {:.0} KB |",
        per((heap_n - heap_0) as f64 / 1024.0)
    );
    println!(
        "| idle CPU per engaged cluster | {:.2} ms per minute |",
        per((cpu_n.as_secs_f64() - cpu_0.as_secs_f64()) * 1000.0 * minute)
    );
    println!(
        "| idle CPU, none engaged / all engaged | {:.1} / {:.1} ms per minute |",
        cpu_0.as_secs_f64() * 1000.0 * minute,
        cpu_n.as_secs_f64() * 1000.0 * minute
    );
    println!(
        "| announced -> first reconcile p50 / p90 / max | {:.0} / {:.0} / {:.0} ms |",
        percentile(&to_first, 0.5).as_secs_f64() * 1000.0,
        percentile(&to_first, 0.9).as_secs_f64() * 1000.0,
        to_first.last().unwrap().as_secs_f64() * 1000.0
    );
    println!(
        "| RSS none / all engaged | {:.1} / {:.1} MB |",
        rss_0 as f64 / 1e6,
        rss_n as f64 / 1e6
    );
    stop.cancel();
    task.await.unwrap().unwrap();
    drop(env);
}
