//! Memory per replica of a sharded controller: the queue-filter mode (every replica caches
//! every object) against the label mode (each replica caches its shards), and one replica
//! alone, each replica a process of its own so that its resident memory is its own.
//!
//! Run with `cargo bench -p rudder-runtime --bench sharded_memory -- --bench [--objects N]
//! [--rounds N]` with `RUDDER_ENVTEST_ASSETS` set. One control plane and one namespace of
//! ConfigMaps (3,000 by default, each with a 1 KiB value, created once) serve every run. A
//! run starts R replicas (child processes of this binary, R = 1 or 3), each a manager with
//! the same sharded controller for ConfigMaps (a ring of its own per run, 9 shards), waits
//! until the replicas' caches together hold what the mode promises (R x N objects in the
//! queue-filter mode, N in the label mode, each labelled and on its shard's holder) and every
//! replica has reconciled what it owns, then reads each child's `VmRSS` from `/proc` and the
//! objects and JSON bytes its cache holds (reported by the child). The runs: one replica in
//! an empty namespace (the baseline), queue filter x1, queue filter x3, label x3 on its first
//! start (the replicas label every object: each lists them all once, unlabelled) and label
//! x3 restarted (the objects already labelled: the steady state), repeated `--rounds` times
//! (default 1); the table gives the median per replica over replicas and rounds. Without
//! `--bench` in its arguments (as under `cargo test --benches`) it returns at once.

#![allow(
    clippy::disallowed_methods,
    reason = "benches may spawn: the bench owns its tasks"
)]
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;
use rudder::cache::ListOptions;
use rudder::lease::sharding::{ShardMode, ShardingConfig};
use rudder::prelude::*;

mod common;
use common::arg;

const CHILD: &str = "RUDDER_MEMORY_REPLICA";
const SHARDS: usize = 9;

struct Noop(Arc<AtomicUsize>);

impl Reconciler for Noop {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Action::done())
    }
}

/// A replica: `kubeconfig namespace ring identity mode`; prints
/// `cached <objects> <bytes> <reconciles>` every 250 ms until killed.
async fn child(spec: &str) {
    let [kubeconfig, namespace, ring, identity, mode]: [&str; 5] =
        spec.split(' ').collect::<Vec<_>>().try_into().unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let ns = namespace.to_owned();
    let manager = Arc::new(
        Manager::builder(client)
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(ns))
            .build()
            .unwrap(),
    );
    let mode = if mode == "labels" {
        ShardMode::Labels
    } else {
        ShardMode::QueueFilter
    };
    let reconciles = Arc::new(AtomicUsize::new(0));
    rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .named("memory")
        .sharded(
            ShardingConfig::new(namespace, ring)
                .with_identity(identity)
                .with_shards(SHARDS)
                .with_mode(mode)
                .with_lease_duration(Duration::from_secs(3))
                .with_renew_deadline(Duration::from_secs(2))
                .with_retry_period(Duration::from_millis(500)),
        )
        .complete(Noop(Arc::clone(&reconciles)))
        .await
        .unwrap();
    let running = tokio::spawn({
        let manager = Arc::clone(&manager);
        async move {
            manager
                .start(tokio_util::sync::CancellationToken::new())
                .await
        }
    });
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if running.is_finished() {
            panic!("the manager ended: {:?}", running.await);
        }
        let Ok(objects) = manager
            .cache()
            .list::<ConfigMap>(&ListOptions::default())
            .await
        else {
            continue;
        };
        let bytes: usize = objects
            .iter()
            .map(|o| serde_json::to_vec(&**o).unwrap().len())
            .sum();
        println!(
            "cached {} {bytes} {}",
            objects.len(),
            reconciles.load(Ordering::Relaxed)
        );
    }
}

/// A running replica: the child, and its latest report.
struct Replica {
    child: Child,
    latest: std::sync::mpsc::Receiver<(usize, usize, usize)>,
    last: (usize, usize, usize),
    reported: bool,
}

impl Replica {
    fn spawn(spec: String) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, spec)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, latest) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let fields: Vec<usize> = line
                    .strip_prefix("cached ")
                    .into_iter()
                    .flat_map(|rest| rest.split(' '))
                    .filter_map(|v| v.parse().ok())
                    .collect();
                if let [objects, bytes, reconciles] = fields[..] {
                    let _ = tx.send((objects, bytes, reconciles));
                }
            }
        });
        Self {
            child,
            latest,
            last: (0, 0, 0),
            reported: false,
        }
    }

    fn poll(&mut self) -> (usize, usize, usize) {
        while let Ok(report) = self.latest.try_recv() {
            self.last = report;
            self.reported = true;
        }
        self.last
    }

    /// Resident memory, from `/proc/<pid>/status`.
    fn rss_bytes(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kib * 1024
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one replica held: objects and JSON bytes in its cache, and its resident memory.
type Measured = (usize, usize, usize);

/// One run: per replica (objects, bytes, rss). `objects` is how many the namespace holds.
async fn run(
    kubeconfig: &str,
    namespace: &str,
    ring: &str,
    mode: &str,
    replicas: usize,
    objects: usize,
) -> Vec<(usize, usize, usize)> {
    let mut running: Vec<Replica> = (0..replicas)
        .map(|i| Replica::spawn(format!("{kubeconfig} {namespace} {ring} r{i} {mode}")))
        .collect();
    let want = if mode == "labels" {
        objects
    } else {
        objects * replicas
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let mut stable = 0;
    loop {
        let reports: Vec<_> = running.iter_mut().map(Replica::poll).collect();
        let cached: usize = reports.iter().map(|r| r.0).sum();
        let reconciled: usize = reports.iter().map(|r| r.2).sum();
        // Settled: the caches hold what the mode promises, and every key was reconciled.
        let reported = running.iter().all(|r| r.reported);
        stable = if reported && cached == want && reconciled >= objects {
            stable + 1
        } else {
            0
        };
        if stable >= 8 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{mode} x{replicas}: not settled: {reports:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    running
        .iter_mut()
        .map(|r| {
            let (objects, bytes, _) = r.poll();
            (objects, bytes, r.rss_bytes())
        })
        .collect()
}

fn median(mut values: Vec<usize>) -> usize {
    values.sort_unstable();
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Ok(spec) = std::env::var(CHILD) {
        runtime.block_on(child(&spec));
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let objects = arg("--objects", 3000);
    let rounds = arg("--rounds", 1);
    runtime.block_on(async {
        let env = rudder_envtest::TestEnv::builder().shared().await.unwrap();
        let ns = env.namespace("memory").await.unwrap();
        let api: Api<ConfigMap> = ns.api();
        futures::stream::iter(0..objects)
            .for_each_concurrent(16, |i| {
                let api = api.clone();
                async move {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(format!("cm-{i}")),
                            ..ObjectMeta::default()
                        },
                        data: Some([("payload".to_owned(), "x".repeat(1024))].into()),
                        ..ConfigMap::default()
                    };
                    api.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
            .await;
        let kubeconfig = env.kubeconfig_path().display().to_string();
        let empty = env.namespace("memory-empty").await.unwrap();
        // (what, replicas) -> per replica (objects, bytes, rss), over rounds.
        let mut results: Vec<(&str, usize, Vec<Measured>)> = Vec::new();
        for round in 0..rounds {
            // The label runs: the first start of a round labels the objects (a fresh ring
            // label each round), its restart finds them labelled (the steady state).
            for (what, mode, replicas, namespace, count, ring) in [
                ("no objects", "filter", 1, empty.name(), 0, format!("mem-empty-{round}")),
                ("queue filter", "filter", 1, ns.name(), objects, format!("mem-f1-{round}")),
                ("queue filter", "filter", 3, ns.name(), objects, format!("mem-f3-{round}")),
                ("label selector, first start", "labels", 3, ns.name(), objects, format!("mem-l3-{round}")),
                ("label selector, restart", "labels", 3, ns.name(), objects, format!("mem-l3-{round}")),
            ] {
                let per = run(&kubeconfig, namespace, &ring, mode, replicas, count).await;
                eprintln!("round {round}: {what} x{replicas}: (objects, bytes, rss) {per:?}");
                match results
                    .iter_mut()
                    .find(|(w, r, _)| *w == what && *r == replicas)
                {
                    Some((_, _, all)) => all.extend(per),
                    None => results.push((what, replicas, per)),
                }
            }
        }
        println!(
            "\n{objects} ConfigMaps of ~1.3 KB, {SHARDS} shards, {rounds} round(s); median per replica"
        );
        println!("| mode | replicas | objects cached | cache bytes (JSON) | RSS MiB |");
        println!("|---|---:|---:|---:|---:|");
        let mut rss = Vec::new();
        for (what, replicas, per) in &results {
            let objects = median(per.iter().map(|p| p.0).collect());
            let bytes = median(per.iter().map(|p| p.1).collect());
            let resident = median(per.iter().map(|p| p.2).collect());
            rss.push(resident);
            println!(
                "| {what} | {replicas} | {objects} | {bytes} | {:.1} |",
                resident as f64 / (1024.0 * 1024.0)
            );
        }
        if let [base, _, filter, _, labels] = rss[..] {
            println!(
                "\nRSS per replica, label mode (restart) / queue-filter mode, 3 replicas: {:.2}; \
                 above a replica with no objects: {:.2}",
                labels as f64 / filter as f64,
                labels.saturating_sub(base) as f64 / filter.saturating_sub(base).max(1) as f64
            );
        }
    });
}
