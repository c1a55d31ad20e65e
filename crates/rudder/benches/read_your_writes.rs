//! What read-your-writes costs when the cache is current: a controller with it off against
//! the same controller with it on, side by side in one run, on a real API server over
//! loopback (no watch-delaying proxy), and the memory a pending write holds.
//!
//! Run with `cargo bench -p rudder-runtime --bench read_your_writes -- --bench [--rounds N]
//! [--updates N]` with `RUDDER_ENVTEST_ASSETS` set. Measured:
//!
//! - **Update to reconcile start.** One primary ConfigMap and the Secret it controls, in a
//!   namespace of their own per side. The reconciler reads the primary through
//!   `Tools::client()` and, when the child does not carry the primary's `seq` yet, merge
//!   patches it there through the same client: one write per update, recorded by the
//!   read-your-writes machinery when it is on (its echo queues the primary once more, and
//!   that reconcile finds the child current and writes nothing). The bench merge patches the
//!   primary's `seq` from outside and times from the patch's return to the start of the
//!   reconcile that reads that `seq`; each update waits for that reconcile, then 20 ms more,
//!   so every update finds the cache current. 200 updates per side per round (after 10 not
//!   measured); the sides alternate off, on, off, on ... for `--rounds` rounds (default 3),
//!   each its own manager and controller (named after the side and the round).
//! - **CPU per reconcile.** The process's user + system time (`CLOCK_PROCESS_CPUTIME_ID`) over each
//!   side's measured updates, divided by the reconciles of that phase, beside its wall
//!   clock. The API server and etcd are other processes: this is the controller's side.
//! - **Memory per pending write.** Without an API server: 100,000 writes of distinct objects
//!   recorded into a `WriteTracker` inside `WriteScope`s of 10,000 keys (the cache holding
//!   none of them, so each is pending), measured with the counting allocator before and
//!   after. The controller's own observer (`OwnWrites`) is not public; a stand-in of the
//!   same shape (the pending objects per key in a `HashMap<Request, Vec<ObjectRef>>`) is
//!   measured beside the tracker alone (a tracker told a no-op observer).
//!
//! The manager runs on a current-thread tokio runtime. The counting allocator (stats_alloc)
//! is the global allocator for the whole run, so both sides of the latency and CPU rows pay
//! its counters alike. Without `--bench` in its
//! arguments (as under `cargo test --benches`) it measures the memory row on 1,000 writes and
//! returns.

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

use std::alloc::System;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use rudder::cache::writes::WriteTracker;
use rudder::cache::writes::{Cached, Written};
use rudder::client::{ClientError, set_controller_reference};
use rudder::prelude::*;
use rudder::writes::{ObjectRef, WriteObserver, WriteScope};

mod common;
use common::{arg, cpu_time};
use rudder_envtest::{TestEnv, TestNamespace};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const PRIMARY: &str = "primary";
const CHILD: &str = "primary-child";
/// Updates before the measured ones, per side: the informers' and the client's first paths.
const WARMUP: usize = 10;
/// The quiet after each update's reconcile, so the next finds the cache current.
const SETTLE: Duration = Duration::from_millis(20);
const PATIENCE: Duration = Duration::from_secs(60);
const PENDING: usize = 100_000;
const KEYS: usize = 10_000;

/// The `seq` the primary carries (0 if none).
fn seq_of(cm: &ConfigMap) -> u64 {
    cm.data
        .as_ref()
        .and_then(|d| d.get("seq"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The `seq` the child was last written with (0 if none).
fn child_seq(secret: &Secret) -> u64 {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("seq"))
        .and_then(|b| std::str::from_utf8(&b.0).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Copies the primary's `seq` into its child; reports each reconcile's start and the `seq`
/// it read.
struct Mirror {
    tools: Tools,
    seen: mpsc::UnboundedSender<(u64, Instant)>,
    reconciles: AtomicUsize,
    writes: AtomicUsize,
    /// Each read of the child right after writing it: how long it took, and whether it
    /// showed the version written.
    reads_after_write: Mutex<Vec<(Duration, bool)>>,
}

impl Reconciler for Mirror {
    type Error = ClientError;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, ClientError> {
        let started = Instant::now();
        if request.name() != PRIMARY {
            return Ok(Action::done());
        }
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        let client = self.tools.client();
        let Some(primary) = client.get::<ConfigMap>(&request).await? else {
            return Ok(Action::done());
        };
        let seq = seq_of(&primary);
        let _ = self.seen.send((seq, started));
        let child_key = Request::namespaced(request.namespace().unwrap_or_default(), CHILD);
        let Some(child) = client.get::<Secret>(&child_key).await? else {
            return Ok(Action::done());
        };
        if child_seq(&child) != seq {
            let patch = serde_json::json!({ "stringData": { "seq": seq.to_string() } });
            client.patch(&*child, &Patch::Merge(&patch)).await?;
            self.writes.fetch_add(1, Ordering::Relaxed);
            // What an overlay would answer at once: the child as just written. Off, the
            // cache answers at once too, maybe stale; on, it waits for the write.
            let asked = Instant::now();
            let again = client.get::<Secret>(&child_key).await?;
            let fresh = again.is_some_and(|c| child_seq(&c) == seq);
            self.reads_after_write
                .lock()
                .unwrap()
                .push((asked.elapsed(), fresh));
        }
        Ok(Action::done())
    }
}

/// One side's measured phase.
struct Phase {
    /// From just before each update was sent.
    latencies: Vec<Duration>,
    /// From each update's return (zero when the reconcile started before it returned).
    after_return: Vec<Duration>,
    cpu: Duration,
    wall: Duration,
    reconciles: usize,
    writes: usize,
    timeouts: u64,
    reads_after_write: Vec<(Duration, bool)>,
}

/// Waits for a reconcile that read `seq` or later; returns when it started.
async fn seen(rx: &mut mpsc::UnboundedReceiver<(u64, Instant)>, seq: u64) -> Instant {
    loop {
        let (read, at) = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("a reconcile of the update")
            .expect("the reconciler is running");
        if read >= seq {
            return at;
        }
    }
}

/// The quiet after an update: its child's echo reconciled, nothing left in flight.
async fn settle(rx: &mut mpsc::UnboundedReceiver<(u64, Instant)>) {
    tokio::time::sleep(SETTLE).await;
    while rx.try_recv().is_ok() {}
}

async fn update(api: &Api<ConfigMap>, seq: u64) {
    let patch = serde_json::json!({ "data": { "seq": seq.to_string() } });
    api.patch(PRIMARY, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The primary and its child, both at seq 0.
async fn objects(ns: &TestNamespace) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(PRIMARY.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("seq".to_owned(), "0".to_owned())].into()),
        ..ConfigMap::default()
    };
    let primary = ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let mut child = Secret {
        metadata: ObjectMeta {
            name: Some(CHILD.to_owned()),
            ..ObjectMeta::default()
        },
        string_data: Some([("seq".to_owned(), "0".to_owned())].into()),
        ..Secret::default()
    };
    set_controller_reference(&primary, &mut child).unwrap();
    ns.api::<Secret>()
        .create(&PostParams::default(), &child)
        .await
        .unwrap();
}

/// One side of one round: its own namespace, manager and controller.
async fn side(env: &TestEnv, read_your_writes: bool, round: usize, updates: usize) -> Phase {
    let label = if read_your_writes { "on" } else { "off" };
    let ns = env.namespace(&format!("ryw-{label}")).await.unwrap();
    objects(&ns).await;
    let namespace = ns.name().to_owned();
    let manager = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(None)
            .cache(move |c| c.default_namespace(namespace))
            .build()
            .unwrap(),
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let controller = rudder::new_controller(&manager)
        .for_::<ConfigMap>()
        .owns::<Secret>()
        .named(format!("ryw-{label}-{round}"))
        .with_options(ControllerOptions::new().read_your_writes(read_your_writes))
        .complete_with(|tools| Mirror {
            tools,
            seen: tx,
            reconciles: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            reads_after_write: Mutex::new(Vec::new()),
        })
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let api: Api<ConfigMap> = ns.api();
    seen(&mut rx, 0).await;
    settle(&mut rx).await;
    let mut seq = 0;
    for _ in 0..WARMUP {
        seq += 1;
        update(&api, seq).await;
        seen(&mut rx, seq).await;
        settle(&mut rx).await;
    }
    let mirror = controller.reconciler();
    let (reconciles, writes) = (
        mirror.reconciles.load(Ordering::Relaxed),
        mirror.writes.load(Ordering::Relaxed),
    );
    let reads_before = mirror.reads_after_write.lock().unwrap().len();
    let (cpu, begun) = (cpu_time(), Instant::now());
    let mut latencies = Vec::with_capacity(updates);
    let mut after_return = Vec::with_capacity(updates);
    for _ in 0..updates {
        seq += 1;
        let sent = Instant::now();
        update(&api, seq).await;
        let returned = Instant::now();
        let started = seen(&mut rx, seq).await;
        latencies.push(started.saturating_duration_since(sent));
        after_return.push(started.saturating_duration_since(returned));
        settle(&mut rx).await;
    }
    let phase = Phase {
        latencies,
        after_return,
        cpu: cpu_time() - cpu,
        wall: begun.elapsed(),
        reconciles: mirror.reconciles.load(Ordering::Relaxed) - reconciles,
        writes: mirror.writes.load(Ordering::Relaxed) - writes,
        timeouts: controller.write_wait_timeouts(),
        reads_after_write: mirror.reads_after_write.lock().unwrap()[reads_before..].to_vec(),
    };
    stop.cancel();
    task.await.unwrap().unwrap();
    ns.delete().await.unwrap();
    phase
}

/// Remembers, per key, the objects written and not reached: the shape of the controller's
/// own observer, which is not public.
#[derive(Default)]
struct PendingPerKey(Mutex<HashMap<Request, Vec<ObjectRef>>>);

impl WriteObserver for PendingPerKey {
    fn written(&self, key: &Request, object: &ObjectRef) {
        let mut keys = self.0.lock().unwrap();
        let objects = keys.entry(key.clone()).or_default();
        if !objects.contains(object) {
            objects.push(object.clone());
        }
    }

    fn reached(&self, key: &Request, object: &ObjectRef) {
        let mut keys = self.0.lock().unwrap();
        if let Some(objects) = keys.get_mut(key) {
            objects.retain(|o| o != object);
            if objects.is_empty() {
                keys.remove(key);
            }
        }
    }
}

/// Told nothing worth keeping: the tracker alone.
struct Ignore;

impl WriteObserver for Ignore {
    fn written(&self, _: &Request, _: &ObjectRef) {}
    fn reached(&self, _: &Request, _: &ObjectRef) {}
}

/// Bytes currently allocated.
fn live() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// Live bytes that recording `writes` pending writes over `keys` keys leaves behind, with
/// `observer` told; the scopes themselves (one per key, as the reconciles hold them) are
/// made before the count starts.
fn pending_bytes(observer: Arc<dyn WriteObserver>, writes: usize, keys: usize) -> isize {
    let scopes: Vec<WriteScope> = (0..keys)
        .map(|k| {
            let key = Request::namespaced("bench", &format!("key-{k:05}"));
            WriteScope::new(Arc::clone(&observer), key, Duration::from_secs(10))
        })
        .collect();
    drop(observer);
    let base = live();
    let tracker = WriteTracker::new();
    tracker.set_comparable(true);
    for i in 0..writes {
        let object = ObjectRef::new("", "configmaps", Some("bench"), format!("object-{i:06}"));
        let written = Written::Version {
            resource_version: (1_000_000 + i).to_string(),
            uid: Some(format!("00000000-0000-0000-0000-{i:012}")),
        };
        let pending = tracker.record(object, written, &scopes[i % keys], || Cached::Absent);
        assert!(pending);
    }
    assert_eq!(tracker.pending(), writes);
    let held = live() - base;
    drop(tracker);
    drop(scopes);
    held
}

/// Bytes per pending write: (tracker alone, the per-key observer).
fn memory(writes: usize, keys: usize) -> (f64, f64) {
    let tracker = pending_bytes(Arc::new(Ignore), writes, keys);
    let both = pending_bytes(Arc::new(PendingPerKey::default()), writes, keys);
    let per = |bytes: isize| bytes as f64 / writes as f64;
    (per(tracker), per(both - tracker))
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e3
}

/// (p50, p99, mean) in ms.
fn summary(mut latencies: Vec<Duration>) -> (f64, f64, f64) {
    latencies.sort();
    let mean = latencies.iter().sum::<Duration>().as_secs_f64() * 1e3 / latencies.len() as f64;
    (percentile(&latencies, 50), percentile(&latencies, 99), mean)
}

/// One side over every round: its latencies, CPU, wall clock and counts added up.
#[derive(Default)]
struct Totals {
    latencies: Vec<Duration>,
    after_return: Vec<Duration>,
    cpu: Duration,
    wall: Duration,
    reconciles: usize,
    writes: usize,
    timeouts: u64,
    reads_after_write: Vec<(Duration, bool)>,
}

impl Totals {
    fn add(&mut self, phase: Phase) {
        self.latencies.extend(phase.latencies);
        self.after_return.extend(phase.after_return);
        self.cpu += phase.cpu;
        self.wall += phase.wall;
        self.reconciles += phase.reconciles;
        self.writes += phase.writes;
        self.timeouts += phase.timeouts;
        self.reads_after_write.extend(phase.reads_after_write);
    }

    fn cpu_per_reconcile_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.reconciles.max(1) as f64
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --benches`: the memory row on a small scale, no API server.
        let (tracker, observer) = memory(1_000, 100);
        assert!(tracker > 0.0 && observer > 0.0);
        return;
    }
    let rounds = arg("--rounds", 3);
    let updates = arg("--updates", 200);
    // First, while nothing else in the process allocates.
    let (tracker_bytes, observer_bytes) = memory(PENDING, KEYS);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let env = TestEnv::builder().start().await.unwrap();
        let mut off = Totals::default();
        let mut on = Totals::default();
        for round in 0..rounds {
            for read_your_writes in [false, true] {
                let phase = side(&env, read_your_writes, round, updates).await;
                let (p50, p99, mean) = summary(phase.latencies.clone());
                eprintln!(
                    "round {round}, read-your-writes {}: p50 {p50:.2} ms, p99 {p99:.2} ms, \
                     mean {mean:.2} ms; {} reconciles, {} writes, CPU {:.0} ms over {:.2} s, \
                     {} write-wait timeouts",
                    if read_your_writes { "on" } else { "off" },
                    phase.reconciles,
                    phase.writes,
                    phase.cpu.as_secs_f64() * 1e3,
                    phase.wall.as_secs_f64(),
                    phase.timeouts,
                );
                if read_your_writes {
                    on.add(phase);
                } else {
                    off.add(phase);
                }
            }
        }
        env.stop().unwrap();
        print_table(&off, &on, updates, rounds);
        println!(
            "pending write: {tracker_bytes:.0} bytes (tracker), {observer_bytes:.0} bytes \
             (observer: a stand-in of the controller's shape); {PENDING} writes over {KEYS} keys"
        );
    });
}

fn print_table(off: &Totals, on: &Totals, updates: usize, rounds: usize) {
    let count = |t: &Totals| t.after_return.iter().filter(|d| d.is_zero()).count();
    let (a, b) = (
        summary(off.latencies.clone()),
        summary(on.latencies.clone()),
    );
    let (ra, rb) = (
        summary(off.after_return.clone()),
        summary(on.after_return.clone()),
    );
    println!(
        "\n{updates} updates per side per round, {rounds} round(s), off and on alternating; \
         a current cache (loopback, no proxy); latency from the update's send"
    );
    println!(
        "| read-your-writes | p50 update->reconcile (ms) | p99 (ms) | mean (ms) | CPU us/reconcile | reconciles | CPU (ms) | wall (s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, (p50, p99, mean), t) in [("off", a, off), ("on", b, on)] {
        println!(
            "| {name} | {p50:.2} | {p99:.2} | {mean:.2} | {:.0} | {} | {:.0} | {:.2} |",
            t.cpu_per_reconcile_us(),
            t.reconciles,
            t.cpu.as_secs_f64() * 1e3,
            t.wall.as_secs_f64()
        );
    }
    println!(
        "| on/off | {:.2}x | {:.2}x | {:.2}x | {:.2}x | | {:.2}x | {:.2}x |",
        b.0 / a.0,
        b.1 / a.1,
        b.2 / a.2,
        on.cpu_per_reconcile_us() / off.cpu_per_reconcile_us(),
        on.cpu.as_secs_f64() / off.cpu.as_secs_f64(),
        on.wall.as_secs_f64() / off.wall.as_secs_f64()
    );
    println!(
        "\nfrom the update's return instead (0 when the reconcile started first): \
         off p50 {:.2} / p99 {:.2} / mean {:.2} ms, started first {} of {}; \
         on p50 {:.2} / p99 {:.2} / mean {:.2} ms, started first {} of {}",
        ra.0,
        ra.1,
        ra.2,
        count(off),
        off.after_return.len(),
        rb.0,
        rb.1,
        rb.2,
        count(on),
        on.after_return.len()
    );
    println!(
        "writes: off {}, on {}; write-wait timeouts: off {}, on {}",
        off.writes, on.writes, off.timeouts, on.timeouts
    );
    // Overlay or wait: a read of the child right after the reconcile wrote it.
    for (name, t) in [("off", off), ("on", on)] {
        let fresh = t.reads_after_write.iter().filter(|(_, f)| *f).count();
        let (p50, p99, mean) = summary(t.reads_after_write.iter().map(|(d, _)| *d).collect());
        println!(
            "read right after the write, {name}: {fresh} of {} showed the version written; \
             the read took p50 {p50:.3} / p99 {p99:.3} / mean {mean:.3} ms \
             (an overlay: every read fresh at once, for a copy of each object written until its echo)",
            t.reads_after_write.len()
        );
    }
}
