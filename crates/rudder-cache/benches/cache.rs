//! Rudder's informer against kube-runtime's reflector and store, in one run against a real
//! API server: initial sync of 10k ConfigMaps (time, heap bytes per object), heap peak during
//! a forced relist, and index lookup against a `Store::state()` filter scan.
//!
//! Run with `cargo bench -p rudder-cache --bench cache` (it needs the envtest binaries, as the
//! tests do). Heap is counted by a counting global allocator; the relist peak is sampled
//! every 100 µs by a thread of its own.
//!
//! Resident memory (what operators see) is measured apart: 10,000 more ConfigMaps with one
//! 400-byte value each, synced by each implementation in a process of its own (this bench
//! re-run as a child), the growth of `VmRSS` in `/proc/self/status` from just before the
//! informer starts (client built, one request made) to the synced store, divided by 10,000;
//! beside it Rudder's own estimate of what it holds (`InformerStats::bytes_held`). Set
//! `RUDDER_CACHE_BENCH_RSS_ONLY=1` to measure only that table.

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

#[path = "../tests/common/mod.rs"]
mod common;

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use common::WatchGate;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, WatchParams};
use kube::core::WatchEvent;
use kube_runtime::reflector::{self, ObjectRef};
use kube_runtime::watcher::{self, watcher};
use kube_runtime::{WatchStreamExt, reflector as reflect};
use rudder_cache::{Informer, ListStrategy, strip_managed_fields};
use rudder_envtest::poll::Poll;
use rudder_envtest::{TestEnv, TestNamespace};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const OBJECTS: usize = 10_000;
const SHARDS: usize = 1_000;

/// Set in a child process: which implementation syncs for the RSS figure (see [`rss_child`]).
const RSS_CHILD: &str = "RUDDER_CACHE_BENCH_RSS";
/// The namespace of the RSS ConfigMaps, for the child.
const RSS_NAMESPACE: &str = "RUDDER_CACHE_BENCH_RSS_NAMESPACE";
/// The RSS implementations, as named to the child and in the table.
const RSS_RUNS: [(&str, &str); 4] = [
    (
        "rudder",
        "rudder informer (default: strip managedFields, streaming list)",
    ),
    ("rudder-paginated", "rudder informer, paginated lists"),
    ("kube-runtime", "kube-runtime reflector (no transform)"),
    (
        "kube-runtime-strip",
        "kube-runtime reflector + strip managedFields",
    ),
];

/// Resident set size of this process, in bytes (`VmRSS` in `/proc/self/status`).
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

/// A ConfigMap with one 400-byte value, for the RSS runs.
fn small_config_map(i: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("rss-{i:05}")),
            ..Default::default()
        },
        data: Some([("value".to_owned(), "x".repeat(400))].into()),
        ..Default::default()
    }
}

/// The child's side: sync `OBJECTS` ConfigMaps of the namespace in `RSS_NAMESPACE` with the
/// implementation `which`, then print the RSS growth per object for the parent.
async fn rss_child(which: &str) {
    let namespace = std::env::var(RSS_NAMESPACE).unwrap();
    let config = kube::Config::infer().await.unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    // One request first, so the connection and the client's own buffers are in the baseline.
    api.list(&kube::api::ListParams::default().limit(1))
        .await
        .unwrap();
    let base = rss();
    let synced = match which {
        "rudder" | "rudder-paginated" => {
            let strategy = if which == "rudder" {
                ListStrategy::Streaming
            } else {
                ListStrategy::Paginated
            };
            let informer = Informer::builder(api).list_strategy(strategy).start();
            informer
                .wait_for_sync(Duration::from_secs(300))
                .await
                .unwrap();
            assert_eq!(informer.store().len(), OBJECTS);
            // A server without a watch cache may refuse streaming lists: say what ran.
            eprintln!("{which}: listed with {}", informer.list_strategy().as_str());
            let synced = rss();
            println!(
                "estimate-per-object {}",
                informer.stats().bytes_held as f64 / OBJECTS as f64
            );
            drop(informer);
            synced
        }
        "kube-runtime" | "kube-runtime-strip" => {
            let strip = which == "kube-runtime-strip";
            let (reader, writer) = reflector::store::<ConfigMap>();
            let events = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(move |cm| {
                    if strip {
                        strip_managed_fields(cm);
                    }
                });
            let task = tokio::spawn(reflect(writer, events).for_each(|_| async {}));
            reader.wait_until_ready().await.unwrap();
            assert_eq!(reader.state().len(), OBJECTS);
            let synced = rss();
            task.abort();
            synced
        }
        other => panic!("unknown implementation {other}"),
    };
    println!("rss-per-object {}", (synced - base) as f64 / OBJECTS as f64);
}

/// Runs this bench as a child syncing with `which`; returns its RSS growth per object and,
/// for Rudder's informer, its own estimate of the bytes it holds per object.
fn rss_per_object(env: &TestEnv, namespace: &str, which: &str) -> (f64, Option<f64>) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("--bench")
        .env(RSS_CHILD, which)
        .env(RSS_NAMESPACE, namespace)
        .env("KUBECONFIG", env.kubeconfig_path())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "the {which} child failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let figure = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.parse().ok())
    };
    let rss = figure("rss-per-object ")
        .unwrap_or_else(|| panic!("no figure from the {which} child: {text}"));
    (rss, figure("estimate-per-object "))
}

/// RSS per object of each implementation, each synced in a process of its own, three
/// rounds in turn; prints the range of each and the ratios of the medians.
async fn rss_table(env: &TestEnv) {
    let estimate = rss_figures(env).await;
    if let Some((estimate, rss)) = estimate {
        println!();
        println!(
            "Rudder's own estimate (InformerStats::bytes_held, the objects' JSON): {:.2} KB per \
             object; measured RSS per object / estimate: {:.2}x",
            estimate / 1000.0,
            rss / estimate
        );
    }
}

/// Prints the RSS table; returns Rudder's estimate per object and its median RSS per object.
async fn rss_figures(env: &TestEnv) -> Option<(f64, f64)> {
    let ns = env.namespace("rss").await.unwrap();
    let api = ns.api::<ConfigMap>();
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &small_config_map(i))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(32)
        .for_each(|_| async {})
        .await;
    let sample = api.get("rss-00000").await.unwrap();
    let json = serde_json::to_vec(&sample).unwrap().len();
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); RSS_RUNS.len()];
    let mut estimate = None;
    for _ in 0..3 {
        for (i, (which, _)) in RSS_RUNS.iter().enumerate() {
            let (rss, estimated) = rss_per_object(env, ns.name(), which);
            figures[i].push(rss);
            estimate = estimate.or(estimated);
        }
    }
    println!();
    println!(
        "RSS per object, {OBJECTS} ConfigMaps with one 400-byte value ({json} bytes of JSON each \
         as the server returns them), each implementation synced in its own process, 3 rounds:"
    );
    println!();
    println!("| implementation | RSS per object (3 processes) | median / Rudder's |");
    println!("|---|---:|---:|");
    let medians: Vec<f64> = figures
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    for (i, (_, name)) in RSS_RUNS.iter().enumerate() {
        let v = &figures[i];
        println!(
            "| {name} | {:.2}-{:.2} KB | {:.2}x |",
            v[0] / 1000.0,
            v[v.len() - 1] / 1000.0,
            medians[i] / medians[0]
        );
    }
    estimate.map(|e| (e, medians[0]))
}

/// Bytes currently allocated.
fn live() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// Allocations currently live (each costs malloc a header on top of its bytes).
fn live_blocks() -> isize {
    let s = GLOBAL.stats();
    s.allocations as isize - s.deallocations as isize
}

fn config_map(i: usize) -> ConfigMap {
    let value = |k: usize| {
        format!("{k}-")
            .repeat(40)
            .chars()
            .take(110)
            .collect::<String>()
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("cm-{i:05}")),
            labels: Some([("shard".to_owned(), (i % SHARDS).to_string())].into()),
            ..Default::default()
        },
        data: Some((0..4).map(|k| (format!("key{k}"), value(k))).collect()),
        ..Default::default()
    }
}

struct Row {
    name: &'static str,
    sync: Duration,
    per_object: f64,
    blocks_per_object: f64,
    relist_peak: f64,
    lookup: Option<Duration>,
}

/// Samples the live heap until stopped; returns the highest value seen.
struct PeakSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicIsize>,
    thread: std::thread::JoinHandle<()>,
}

impl PeakSampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicIsize::new(live()));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(live(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        Self { stop, peak, thread }
    }

    fn finish(self) -> isize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.peak.load(Ordering::Relaxed).max(live())
    }
}

/// Holds the implementation's watch at the gate, deletes `victim`, and writes until etcd
/// has compacted past everything the watch has seen, so that opening the gate forces a
/// relist. Returns with the gate still closed.
async fn prepare_relist(
    gate: &WatchGate,
    ns: &TestNamespace,
    admin: &Api<ConfigMap>,
    victim: &str,
) {
    gate.close();
    let deadline = Instant::now() + Duration::from_secs(30);
    while gate.waiting() == 0 {
        assert!(Instant::now() < deadline, "watch did not reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let api = ns.api::<ConfigMap>();
    api.delete(victim, &DeleteParams::default()).await.unwrap();
    let marker = admin
        .create(&PostParams::default(), &config_map(OBJECTS + 1))
        .await
        .unwrap();
    let rv = marker.metadata.resource_version.unwrap();
    admin
        .delete(&marker.metadata.name.unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    let mut bump = OBJECTS + 2;
    loop {
        let mut s = admin
            .watch(&WatchParams::default().timeout(1), &rv)
            .await
            .unwrap()
            .boxed();
        if matches!(s.next().await, Some(Ok(WatchEvent::Error(ref e))) if e.code == 410) {
            break;
        }
        assert!(Instant::now() < deadline, "etcd did not compact");
        let b = admin
            .create(&PostParams::default(), &config_map(bump))
            .await
            .unwrap();
        admin
            .delete(&b.metadata.name.unwrap(), &DeleteParams::default())
            .await
            .unwrap();
        bump += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Polls `cond` every 5 ms until it holds; fails the run after 120 s.
async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    Poll::new(what, Duration::from_secs(120))
        .every(Duration::from_millis(5))
        .until(cond)
        .await;
}

async fn rudder(
    name: &'static str,
    env: &TestEnv,
    ns: &TestNamespace,
    admin: &Api<ConfigMap>,
    keep_managed_fields: bool,
    victim: &str,
) -> Row {
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    let base = live();
    let base_blocks = live_blocks();
    let start = Instant::now();
    let mut builder = Informer::builder(api).timeout(2);
    if keep_managed_fields {
        builder = builder.transform_opt(None);
    }
    let informer = builder.start();
    informer
        .wait_for_sync(Duration::from_secs(300))
        .await
        .unwrap();
    let sync = start.elapsed();
    assert_eq!(informer.store().len(), OBJECTS);
    let steady = live() - base;
    let blocks = live_blocks() - base_blocks;

    let mut lookup = None;
    if !keep_managed_fields {
        let store = informer.store();
        store
            .add_index("shard", |cm: &ConfigMap| {
                cm.metadata
                    .labels
                    .iter()
                    .flatten()
                    .filter(|(k, _)| *k == "shard")
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap();
        let values: Vec<String> = (0..SHARDS).map(|s| s.to_string()).collect();
        let t = Instant::now();
        let mut found = 0;
        for v in &values {
            found += store.by_index("shard", v).unwrap().len();
        }
        lookup = Some(t.elapsed() / SHARDS as u32);
        assert_eq!(found, OBJECTS);
    }

    prepare_relist(&gate, ns, admin, victim).await;
    let before = live();
    let sampler = PeakSampler::start();
    gate.open();
    let store = informer.store().clone();
    let key = rudder_cache::ObjectKey::namespaced(ns.name(), victim);
    wait_until("the deleted key gone after a relist", || {
        store.get(&key).is_none() && informer.stats().relists >= 1
    })
    .await;
    let peak = sampler.finish() - base;
    // The index (if any) is part of what a relist must keep, so the ratio is to the heap
    // just before the relist.
    let relist_peak = peak as f64 / (before - base) as f64;
    informer.stop().await;
    Row {
        name,
        sync,
        per_object: steady as f64 / OBJECTS as f64,
        blocks_per_object: blocks as f64 / OBJECTS as f64,
        relist_peak,
        lookup,
    }
}

async fn kube_runtime(
    name: &'static str,
    env: &TestEnv,
    ns: &TestNamespace,
    admin: &Api<ConfigMap>,
    strip: bool,
    victim: &str,
) -> Row {
    let gate = WatchGate::default();
    let api: Api<ConfigMap> = Api::namespaced(gate.client(env.config()), ns.name());
    let base = live();
    let base_blocks = live_blocks();
    let start = Instant::now();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let events = watcher(api, watcher::Config::default().timeout(2))
        .default_backoff()
        .modify(move |cm| {
            if strip {
                strip_managed_fields(cm);
            }
        });
    let task = tokio::spawn(reflect(writer, events).for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    let sync = start.elapsed();
    assert_eq!(reader.state().len(), OBJECTS);
    let steady = live() - base;
    let blocks = live_blocks() - base_blocks;

    let mut lookup = None;
    if strip {
        let values: Vec<String> = (0..100).map(|s| s.to_string()).collect();
        let t = Instant::now();
        let mut found = 0;
        for v in &values {
            found += reader
                .state()
                .into_iter()
                .filter(|cm| cm.metadata.labels.as_ref().and_then(|l| l.get("shard")) == Some(v))
                .count();
        }
        lookup = Some(t.elapsed() / values.len() as u32);
        assert_eq!(found, OBJECTS / SHARDS * values.len());
    }

    prepare_relist(&gate, ns, admin, victim).await;
    let before = live();
    let sampler = PeakSampler::start();
    gate.open();
    let key = ObjectRef::<ConfigMap>::new(victim).within(ns.name());
    wait_until("the deleted key gone from the reader", || {
        reader.get(&key).is_none()
    })
    .await;
    let peak = sampler.finish() - base;
    let relist_peak = peak as f64 / (before - base) as f64;
    task.abort();
    let _ = task.await;
    Row {
        name,
        sync,
        per_object: steady as f64 / OBJECTS as f64,
        blocks_per_object: blocks as f64 / OBJECTS as f64,
        relist_peak,
        lookup,
    }
}

/// Time to a synced store, Rudder's informer (default transform); `lenient` decodes each
/// object on its own (`skip_malformed`, as the `Cache`'s typed informers do).
async fn sync_rudder(env: &TestEnv, ns: &TestNamespace, lenient: bool) -> Duration {
    let api: Api<ConfigMap> = Api::namespaced(env.client().unwrap(), ns.name());
    let start = Instant::now();
    let builder = Informer::builder(api);
    let informer = if lenient {
        builder.skip_malformed().start()
    } else {
        builder.start()
    };
    informer
        .wait_for_sync(Duration::from_secs(300))
        .await
        .unwrap();
    let took = start.elapsed();
    informer.stop().await;
    took
}

/// Time to a synced store, kube-runtime's reflector with the same transform.
async fn sync_kube_runtime(env: &TestEnv, ns: &TestNamespace) -> Duration {
    let api: Api<ConfigMap> = Api::namespaced(env.client().unwrap(), ns.name());
    let start = Instant::now();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(strip_managed_fields);
    let task = tokio::spawn(reflect(writer, events).for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    let took = start.elapsed();
    task.abort();
    let _ = task.await;
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn run() {
    let env = TestEnv::builder()
        .apiserver_arg("--watch-cache=false")
        .apiserver_arg("--etcd-compaction-interval=1s")
        .start()
        .await
        .unwrap();
    let ns = env.namespace("bench").await.unwrap();
    let api = ns.api::<ConfigMap>();
    let admin: Api<ConfigMap> = Api::namespaced(env.client().unwrap(), "default");
    let created = Instant::now();
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &config_map(i))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(32)
        .for_each(|_| async {})
        .await;
    let sample = api.get("cm-00000").await.unwrap();
    let json = serde_json::to_vec(&sample).unwrap().len();
    let mut stripped = sample.clone();
    strip_managed_fields(&mut stripped);
    let json_stripped = serde_json::to_vec(&stripped).unwrap().len();
    println!(
        "{OBJECTS} ConfigMaps created in {:.1?}; JSON per object: {json} bytes, {json_stripped} without managedFields",
        created.elapsed()
    );

    let mut rows = Vec::new();
    // Each run deletes one object during its relist, then puts it back for the next run.
    let runs: [(&str, bool, bool); 4] = [
        ("rudder informer (default: strip managedFields)", true, true),
        ("kube-runtime reflector + strip managedFields", false, true),
        ("kube-runtime reflector (no transform)", false, false),
        ("rudder informer, managedFields kept", true, false),
    ];
    for (i, (name, is_rudder, strip)) in runs.into_iter().enumerate() {
        let victim = format!("cm-{:05}", i + 1);
        let row = if is_rudder {
            rudder(name, &env, &ns, &admin, !strip, &victim).await
        } else {
            kube_runtime(name, &env, &ns, &admin, strip, &victim).await
        };
        api.create(&PostParams::default(), &config_map(i + 1))
            .await
            .unwrap();
        rows.push(row);
    }

    println!();
    println!(
        "| implementation | initial sync | heap per object | allocations per object | relist peak / steady | lookup of 10 objects by label |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        let lookup = r
            .lookup
            .map_or_else(|| "-".to_owned(), |d| format!("{d:.2?}"));
        println!(
            "| {} | {:.2?} | {:.0} B | {:.1} | {:.2}x | {} |",
            r.name, r.sync, r.per_object, r.blocks_per_object, r.relist_peak, lookup
        );
    }
    // Single syncs are noisy; alternate the two, 15 rounds, and compare minimums and medians.
    // The lenient informer (the Cache's default for typed objects) takes turns too.
    let (mut ours, mut lenient, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..15 {
        if round % 2 == 0 {
            ours.push(sync_rudder(&env, &ns, false).await);
            lenient.push(sync_rudder(&env, &ns, true).await);
            theirs.push(sync_kube_runtime(&env, &ns).await);
        } else {
            theirs.push(sync_kube_runtime(&env, &ns).await);
            lenient.push(sync_rudder(&env, &ns, true).await);
            ours.push(sync_rudder(&env, &ns, false).await);
        }
    }
    let (our_min, their_min) = (*ours.iter().min().unwrap(), *theirs.iter().min().unwrap());
    let lenient_min = *lenient.iter().min().unwrap();
    let (ours, lenient, theirs) = (median(ours), median(lenient), median(theirs));
    println!();
    println!(
        "initial sync, 15 alternating runs each, same transform: rudder min {our_min:.2?} median {ours:.2?}, \
         rudder skip_malformed min {lenient_min:.2?} median {lenient:.2?}, \
         kube-runtime min {their_min:.2?} median {theirs:.2?}"
    );
    println!(
        "skip_malformed / kube-runtime: sync time {:.2}x (min), {:.2}x (median); skip_malformed / strict: {:.2}x (min), {:.2}x (median)",
        lenient_min.as_secs_f64() / their_min.as_secs_f64(),
        lenient.as_secs_f64() / theirs.as_secs_f64(),
        lenient_min.as_secs_f64() / our_min.as_secs_f64(),
        lenient.as_secs_f64() / ours.as_secs_f64(),
    );
    let sync_ratio = ours.as_secs_f64() / theirs.as_secs_f64();
    let sync_min_ratio = our_min.as_secs_f64() / their_min.as_secs_f64();
    let mem_ratio = rows[0].per_object / rows[1].per_object;
    let lookup_ratio =
        rows[1].lookup.unwrap().as_secs_f64() / rows[0].lookup.unwrap().as_secs_f64();
    println!();
    println!(
        "rudder / kube-runtime, same transform: sync time {sync_min_ratio:.2}x (min), {sync_ratio:.2}x (median), heap per object {mem_ratio:.2}x"
    );
    println!("index lookup is {lookup_ratio:.0}x faster than the state() scan");
    rss_table(&env).await;
    env.stop().unwrap();
}

/// Set to run only the RSS table (each implementation in a process of its own).
const RSS_ONLY: &str = "RUDDER_CACHE_BENCH_RSS_ONLY";

async fn rss_only() {
    let env = TestEnv::start().await.unwrap();
    rss_table(&env).await;
    env.stop().unwrap();
}

fn main() {
    // `cargo test` runs bench targets without `--bench`; only `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var(RSS_CHILD) {
        Ok(which) => rt.block_on(rss_child(&which)),
        Err(_) if std::env::var_os(RSS_ONLY).is_some() => rt.block_on(rss_only()),
        Err(_) => rt.block_on(run()),
    }
}
