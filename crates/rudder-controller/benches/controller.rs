//! Rudder's controller against kube-runtime's `Controller`, side by side in one run, on a real
//! API server from rudder-envtest.
//!
//! Run with `cargo bench -p rudder-controller --bench controller` (after
//! `cargo xtask envtest install`). Prints a table:
//!
//! - 5k ConfigMaps already in the cluster, a no-op reconciler: time from starting the
//!   controller until every one was reconciled once.
//! - Latency from a server-side apply of one object to the start of the reconcile that sees
//!   it, p50 and p99: with the queue idle (sequential updates), and while the controller works
//!   through a backlog of the 5k listed objects (2 ms each, one worker on both sides; an
//!   update every 20 ms, each measured to the first reconcile that sees it or a later one).

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

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use kube_runtime::controller::{Action as KubeAction, Config as KubeConfig};
use kube_runtime::watcher;
use rudder_cache::Cache;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::TestEnv;
use rudder_handler::{EnqueueObject, Kind};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

const OBJECTS: usize = 5_000;
const IDLE_UPDATES: usize = 200;
const BACKLOG_UPDATES: usize = 100;
const BACKLOG_WORK: Duration = Duration::from_millis(2);
const PROBE: &str = "probe";

#[derive(Debug, thiserror::Error)]
#[error("never happens")]
struct Never;

/// The `seq` a ConfigMap carries in its data (0 if none).
fn seq_of(cm: &ConfigMap) -> u64 {
    cm.data
        .as_ref()
        .and_then(|d| d.get("seq"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn fill(client: &kube::Client, ns: &str, n: usize) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("cm-{i:05}")),
                        ..ObjectMeta::default()
                    },
                    data: Some([("payload".to_owned(), "x".repeat(600))].into()),
                    ..ConfigMap::default()
                };
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .await;
}

async fn apply_seq(api: &Api<ConfigMap>, seq: u64) {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": PROBE },
        "data": { "seq": seq.to_string() },
    });
    api.patch(
        PROBE,
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&body),
    )
    .await
    .unwrap();
}

/// What the reconcilers report: the probe's seq at each reconcile start, and how many
/// distinct other objects were reconciled.
#[derive(Clone)]
struct Report {
    probe: mpsc::UnboundedSender<(u64, Instant)>,
    seen: Arc<Mutex<HashSet<String>>>,
    all_seen: Arc<Mutex<Option<oneshot::Sender<()>>>>,
    expect: usize,
    backlog_work: Option<Duration>,
}

impl Report {
    fn new(expect: usize, backlog_work: Option<Duration>) -> (Self, Reports) {
        let (probe, probes) = mpsc::unbounded_channel();
        let (all_tx, all_rx) = oneshot::channel();
        let report = Self {
            probe,
            seen: Arc::default(),
            all_seen: Arc::new(Mutex::new(Some(all_tx))),
            expect,
            backlog_work,
        };
        (
            report,
            Reports {
                probes,
                all_seen: all_rx,
            },
        )
    }

    /// Called at the start of every reconcile, with the object as the reconciler sees it.
    async fn reconciled(&self, name: &str, cm: Option<&ConfigMap>) {
        if name == PROBE {
            let seq = cm.map_or(0, seq_of);
            let _ = self.probe.send((seq, Instant::now()));
            return;
        }
        let count = {
            let mut seen = self.seen.lock().unwrap();
            seen.insert(name.to_owned());
            seen.len()
        };
        if count == self.expect
            && let Some(tx) = self.all_seen.lock().unwrap().take()
        {
            let _ = tx.send(());
        }
        if let Some(work) = self.backlog_work {
            tokio::time::sleep(work).await;
        }
    }
}

struct Reports {
    probes: mpsc::UnboundedReceiver<(u64, Instant)>,
    all_seen: oneshot::Receiver<()>,
}

struct RudderReconciler {
    cache: Cache,
    report: Report,
}

impl Reconciler for RudderReconciler {
    type Error = Never;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Never> {
        let cm = self
            .cache
            .get::<ConfigMap>(request.namespace(), request.name())
            .await
            .ok()
            .flatten();
        self.report.reconciled(request.name(), cm.as_deref()).await;
        Ok(Action::done())
    }
}

/// A running controller of either kind, stopped by `stop`.
struct Running {
    stop: Box<dyn FnOnce() + Send>,
    done: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        (self.stop)();
        self.done.await.unwrap();
    }
}

async fn start_rudder(client: &kube::Client, ns: &str, name: &str, report: Report) -> Running {
    let token = CancellationToken::new();
    let cache = Cache::builder(client.clone())
        .default_namespace(ns)
        .build(&token);
    let reconciler = RudderReconciler {
        cache: cache.clone(),
        report,
    };
    let c = Controller::builder(name, reconciler).build().unwrap();
    c.watch(Kind::<ConfigMap>::from_cache(&cache), EnqueueObject, vec![])
        .unwrap();
    let run_token = token.clone();
    let done = tokio::spawn(async move {
        c.run(run_token).await.unwrap();
        cache.stop().await;
    });
    Running {
        stop: Box::new(move || token.cancel()),
        done,
    }
}

async fn start_kube(client: &kube::Client, ns: &str, concurrency: u16, report: Report) -> Running {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let controller = kube_runtime::Controller::new(api, watcher::Config::default())
        .with_config(KubeConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(async move {
            let _ = stop_rx.await;
        });
    let done = tokio::spawn(async move {
        controller
            .run(
                |cm: Arc<ConfigMap>, report: Arc<Report>| async move {
                    let name = cm.metadata.name.clone().unwrap_or_default();
                    report.reconciled(&name, Some(&cm)).await;
                    Ok::<_, Never>(KubeAction::await_change())
                },
                |_, _: &Never, _| KubeAction::await_change(),
                Arc::new(report),
            )
            .for_each(|_| async {})
            .await;
    });
    Running {
        stop: Box::new(move || {
            let _ = stop_tx.send(());
        }),
        done,
    }
}

/// Time from start until every one of `OBJECTS` was reconciled once.
async fn first_pass(start: impl Future<Output = (Running, Reports)>) -> Duration {
    let begun = Instant::now();
    let (running, reports) = start.await;
    reports.all_seen.await.unwrap();
    let took = begun.elapsed();
    running.stop().await;
    took
}

/// Issues `n` updates `every` apart (or each after the last was seen, if `every` is None) and
/// returns each one's latency to the first reconcile that saw it or a later one.
async fn latencies(
    api: &Api<ConfigMap>,
    probes: &mut mpsc::UnboundedReceiver<(u64, Instant)>,
    base: u64,
    n: usize,
    every: Option<Duration>,
) -> Vec<Duration> {
    let mut issued = Vec::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    let mut seen_up_to = base;
    let mut next_seen =
        |seen: (u64, Instant), issued: &[(u64, Instant)], out: &mut Vec<Duration>| {
            let (seq, at) = seen;
            for (_, t) in issued.iter().filter(|(s, _)| *s > seen_up_to && *s <= seq) {
                out.push(at - *t);
            }
            seen_up_to = seen_up_to.max(seq);
        };
    for i in 1..=n as u64 {
        let seq = base + i;
        issued.push((seq, Instant::now()));
        apply_seq(api, seq).await;
        match every {
            None => loop {
                let seen = tokio::time::timeout(Duration::from_secs(60), probes.recv())
                    .await
                    .unwrap()
                    .unwrap();
                next_seen(seen, &issued, &mut out);
                if seen.0 >= seq {
                    break;
                }
            },
            Some(every) => {
                let deadline = tokio::time::Instant::now() + every;
                while let Ok(Some(seen)) = tokio::time::timeout_at(deadline, probes.recv()).await {
                    next_seen(seen, &issued, &mut out);
                }
            }
        }
    }
    let last = base + n as u64;
    while out.len() < n {
        let seen = tokio::time::timeout(Duration::from_secs(120), probes.recv())
            .await
            .unwrap()
            .unwrap();
        next_seen(seen, &issued, &mut out);
        if seen.0 >= last {
            break;
        }
    }
    out
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(v[v.len() / 2]),
        ms(v[(v.len() * 99 / 100).min(v.len() - 1)]),
    )
}

fn main() {
    // `cargo test` runs bench targets without `--bench`: only benchmark when asked to.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let env = TestEnv::builder().start().await.unwrap();
        let client = env.client().unwrap();
        println!("filling the cluster with {OBJECTS} ConfigMaps ...");
        create_namespace(&client, "bulk").await;
        fill(&client, "bulk", OBJECTS).await;

        let rudder_pass = first_pass(async {
            let (report, reports) = Report::new(OBJECTS, None);
            (start_rudder(&client, "bulk", "first-pass", report).await, reports)
        })
        .await;
        let kube_pass = first_pass(async {
            let (report, reports) = Report::new(OBJECTS, None);
            (start_kube(&client, "bulk", 0, report).await, reports)
        })
        .await;

        // Idle: one probe object alone in its namespace.
        create_namespace(&client, "idle").await;
        let idle: Api<ConfigMap> = Api::namespaced(client.clone(), "idle");
        apply_seq(&idle, 1).await;
        let mut idle_rows = Vec::new();
        for (side, base) in [("rudder", 1_000u64), ("kube-runtime", 2_000)] {
            let (report, mut reports) = Report::new(usize::MAX, None);
            let running = match side {
                "rudder" => start_rudder(&client, "idle", "idle", report).await,
                _ => start_kube(&client, "idle", 1, report).await,
            };
            // The initial list's reconcile of the probe, then the measured updates.
            reports.probes.recv().await.unwrap();
            let l = latencies(&idle, &mut reports.probes, base, IDLE_UPDATES, None).await;
            idle_rows.push(percentiles(l));
            running.stop().await;
        }

        // Backlog: the probe among the 5k, each listed object costing 2 ms, one worker.
        let bulk: Api<ConfigMap> = Api::namespaced(client.clone(), "bulk");
        apply_seq(&bulk, 1).await;
        let mut backlog_rows = Vec::new();
        for (side, base) in [("rudder", 10_000u64), ("kube-runtime", 20_000)] {
            let (report, mut reports) = Report::new(usize::MAX, Some(BACKLOG_WORK));
            let running = match side {
                "rudder" => start_rudder(&client, "bulk", "backlog", report).await,
                _ => start_kube(&client, "bulk", 1, report).await,
            };
            let l = latencies(
                &bulk,
                &mut reports.probes,
                base,
                BACKLOG_UPDATES,
                Some(Duration::from_millis(20)),
            )
            .await;
            backlog_rows.push(percentiles(l));
            running.stop().await;
        }

        println!();
        println!("| row | Rudder | kube-runtime | kube-runtime / Rudder |");
        println!("|---|---:|---:|---:|");
        println!(
            "| {OBJECTS} ConfigMaps, no-op reconciler: all reconciled once (s) | {:.2} | {:.2} | {:.2}x |",
            rudder_pass.as_secs_f64(),
            kube_pass.as_secs_f64(),
            kube_pass.as_secs_f64() / rudder_pass.as_secs_f64()
        );
        for (label, rows) in [("idle queue", &idle_rows), ("5k backlog", &backlog_rows)] {
            let (r, k) = (rows[0], rows[1]);
            println!(
                "| update to reconcile, {label}, p50 (ms) | {:.1} | {:.1} | {:.2}x |",
                r.0,
                k.0,
                k.0 / r.0
            );
            println!(
                "| update to reconcile, {label}, p99 (ms) | {:.1} | {:.1} | {:.2}x |",
                r.1,
                k.1,
                k.1 / r.1
            );
        }
        env.stop().unwrap();
    });
}
