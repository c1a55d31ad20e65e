//! What a member cluster costs a fleet, beside multicluster-runtime: resident memory, live
//! heap and idle CPU per engaged member with one watched kind, and the time from a kubeconfig
//! Secret's creation to the member's first reconcile.
//!
//! Run with `cargo bench -p rudder-fleet --bench fleet -- --bench [--go-binary PATH]
//! [--clusters N] [--objects N] [--idle SECONDS] [--probe-every SECONDS]` with
//! `RUDDER_ENVTEST_ASSETS` set (`--probe-every` sets Rudder's member probe period, 10 s by
//! default, to see what the probes cost);
//! `--go-binary` is `go/cmd/fleet-multicluster` built (`go build -o PATH ./cmd/fleet-multicluster`
//! in `go/`), and without it only Rudder's side runs. One control plane is the home cluster
//! and every member: it holds a namespace of `--objects` ConfigMaps (10 by default, 400-byte
//! values) and, one at a time, N kubeconfig Secrets (20 by default) naming it, each a
//! member. Each side is a process of its own, in turn, Rudder first:
//!
//! - Rudder: a manager, a fleet with the [`KubeconfigSecrets`] provider (its defaults: the
//!   label `sigs.k8s.io/multicluster-runtime-kubeconfig=true`, the key `kubeconfig`), each
//!   member's cache of the ConfigMaps' namespace only, and one fleet controller whose
//!   reconcile notes the member's first reconcile and does nothing else; a multi-thread
//!   tokio runtime, as `#[tokio::main]` gives an operator;
//! - multicluster-runtime (`--go-binary`): one multicluster manager, its kubeconfig provider
//!   with the same defaults, the members' caches and the reconcile the same, GOMAXPROCS 2.
//!
//! The harness waits for the side's `ready`, reads its memory (`VmRSS`; the live heap: the
//! counting allocator's live bytes in Rudder's, `HeapAlloc` after a collection in Go's) and
//! its CPU clock over `--idle` seconds (30 by default) with no member; then creates the
//! Secrets one at a time, each once the member before it has had its first reconcile,
//! timing each creation to that reconcile (and, as the floor, to the arrival of the Secret's
//! event on a watch the harness keeps itself); then, every member engaged and idle, reads the
//! memory and the idle CPU again. Per member is the difference over N. The Secrets are
//! deleted after the side has exited, before the next one starts.
//!
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
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::pin::pin;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube_runtime::watcher;
use rudder::multicluster::{
    DEFAULT_KUBECONFIG_KEY, DEFAULT_SECRET_LABEL, Fleet, KubeconfigSecrets,
};
use rudder::prelude::*;

// The facade's bench helpers, one module for both crates' benches.
#[path = "../../rudder/benches/common/mod.rs"]
mod common;
use common::{arg, arg_value, cpu_time, rss_bytes};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Set in the environment of the child that is Rudder's side.
const CHILD: &str = "RUDDER_FLEET_CHILD";
const NAMESPACE: &str = "fleet-bench";
const SECRETS: &str = "fleet-members";

fn live_heap() -> isize {
    let s = GLOBAL.stats();
    // stats_alloc counts a realloc's growth or shrinkage in bytes_allocated or
    // bytes_deallocated already; bytes_reallocated is the same difference again.
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(child());
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let clusters = arg("--clusters", 20);
    let objects = arg("--objects", 10);
    let idle = Duration::from_secs(arg("--idle", 30) as u64);
    let go = arg_value("--go-binary");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(harness(go, clusters, objects, idle));
}

// ---- Rudder's side, in a child process -------------------------------------------------

/// Notes each cluster's first reconcile on stdout.
struct First(Arc<Mutex<HashSet<String>>>);

impl Reconciler for First {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, ctx: Context) -> Result<Action, Self::Error> {
        let now = unix_nanos();
        let cluster = ctx.cluster().unwrap_or_default();
        if self.0.lock().unwrap().insert(cluster.to_owned()) {
            println!("first {cluster} {now}");
        }
        Ok(Action::done())
    }
}

/// The protocol of `go/cmd/fleet-multicluster`: `ready`, `first <cluster> <unix ns>`, and
/// answers to `mem` and `cpu` on stdin; exits when stdin closes.
async fn child() {
    let client = kube::Client::try_default().await.unwrap();
    let manager = Arc::new(
        Manager::builder(client)
            .health_probe_address(None)
            .metrics_address(None)
            .build()
            .unwrap(),
    );
    let mut fleet = Fleet::builder(&manager)
        .kubeconfig_secrets(KubeconfigSecrets::new(SECRETS))
        .cache(|cache| cache.default_namespace(NAMESPACE));
    if let Some(seconds) = arg_value("--probe-every") {
        fleet = fleet.probe_every(Duration::from_secs(seconds.parse().unwrap()));
    }
    let fleet = fleet.build().unwrap();
    let first: Arc<Mutex<HashSet<String>>> = Arc::default();
    fleet
        .new_controller()
        .for_::<ConfigMap>()
        .complete_with(move |_| First(Arc::clone(&first)))
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    println!("ready");
    // The answers are read on a thread of their own, off the runtime; stdin's end stops the
    // manager.
    let (closed, on_close) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            match line.as_str() {
                "mem" => println!("mem {} {}", rss_bytes(), live_heap()),
                "cpu" => println!("cpu {}", cpu_time().as_nanos()),
                _ => {}
            }
        }
        let _ = closed.send(());
    });
    let _ = on_close.await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

// ---- The harness -----------------------------------------------------------------------

/// A side's process: its stdin, and its stdout's lines.
struct Side {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Side {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    /// The next line starting with `prefix` (others are dropped), without the prefix.
    async fn until(&self, prefix: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            match self.lines.try_recv() {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
                Err(mpsc::TryRecvError::Empty) => {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "no `{prefix}` line within {within:?}"
                    );
                    // The harness runs on one thread; the lines arrive on another.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(mpsc::TryRecvError::Disconnected) => panic!("the side exited"),
            }
        }
    }

    async fn ask(&mut self, what: &str) -> Vec<f64> {
        writeln!(self.stdin.as_mut().unwrap(), "{what}").unwrap();
        self.until(&format!("{what} "), Duration::from_secs(30))
            .await
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect()
    }

    /// RSS and live heap, in bytes.
    async fn mem(&mut self) -> (f64, f64) {
        let v = self.ask("mem").await;
        (v[0], v[1])
    }

    /// The CPU the side spends over `idle`, and its CPU clock now.
    async fn idle_cpu(&mut self, idle: Duration) -> (Duration, Duration) {
        let start = self.ask("cpu").await[0];
        tokio::time::sleep(idle).await;
        let end = self.ask("cpu").await[0];
        (
            Duration::from_nanos((end - start) as u64),
            Duration::from_nanos(end as u64),
        )
    }
}

/// What one side measured.
struct Measured {
    rss: (f64, f64),
    heap: (f64, f64),
    cpu: (Duration, Duration),
    to_first: Vec<Duration>,
    /// Each Secret's creation to the harness's own watch event of it: the floor of
    /// `to_first`, the API server and a watch, before either side's work.
    to_event: Vec<Duration>,
    /// The side's CPU clock and wall time from its start to the last reading.
    cpu_total: Duration,
    wall: Duration,
}

async fn harness(go: Option<String>, clusters: usize, objects: usize, idle: Duration) {
    let env = rudder_envtest::TestEnv::start().await.unwrap();
    let client = env.client().unwrap();
    for name in [NAMESPACE, SECRETS] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.into()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                },
            )
            .await
            .unwrap();
    }
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
    let kubeconfig = env.kubeconfig_path().display().to_string();
    let member = std::fs::read(env.kubeconfig_path()).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), SECRETS);
    println!(
        "fleet cost, {clusters} members (one control plane named by {clusters} kubeconfig Secrets), \
         one ConfigMap controller, {objects} ConfigMaps each, --idle {}s, kube-apiserver {}; load {}",
        idle.as_secs(),
        env.version(),
        report_load()
    );

    let mut sides: Vec<(&str, Measured)> = Vec::new();
    let mut rudder = Command::new(std::env::current_exe().unwrap());
    rudder.env(CHILD, "1");
    if let Some(seconds) = arg_value("--probe-every") {
        println!("Rudder's members probed every {seconds} s");
        rudder.args(["--probe-every", &seconds]);
    }
    let mut commands = vec![("Rudder", rudder)];
    if let Some(go) = go {
        let mut mcr = Command::new(go);
        mcr.env("GOMAXPROCS", "2")
            .args(["-kubeconfig", &kubeconfig, "-secrets", SECRETS])
            .args(["-namespace", NAMESPACE]);
        commands.push(("multicluster-runtime", mcr));
    }
    for (name, mut command) in commands {
        command.env("KUBECONFIG", &kubeconfig);
        let measured = one(command, &secrets, &member, clusters, idle).await;
        println!("{name} measured; load {}", report_load());
        sides.push((name, measured));
        // The next side starts with no member.
        for i in 0..clusters {
            secrets
                .delete(&format!("m{i}"), &DeleteParams::default())
                .await
                .unwrap();
        }
    }
    print_table(&sides, clusters, idle);
    drop(env);
}

fn report_load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_owned()
}

async fn one(
    command: Command,
    secrets: &Api<Secret>,
    kubeconfig: &[u8],
    clusters: usize,
    idle: Duration,
) -> Measured {
    let started = std::time::Instant::now();
    let mut side = Side::spawn(command);
    side.until("ready", Duration::from_secs(120)).await;

    // No member: the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_0, heap_0) = side.mem().await;
    let (cpu_0, _) = side.idle_cpu(idle).await;

    // The floor: the harness's own watch of the Secrets, listed before the first is created.
    let arrived: Arc<Mutex<HashMap<String, u128>>> = Arc::default();
    let (listed, on_listed) = tokio::sync::oneshot::channel();
    let floor = tokio::spawn({
        let (arrived, api) = (Arc::clone(&arrived), secrets.clone());
        async move {
            let mut listed = Some(listed);
            let mut events = pin!(watcher(api, watcher::Config::default()));
            while let Some(Ok(event)) = events.next().await {
                let now = unix_nanos();
                match event {
                    watcher::Event::InitDone => {
                        if let Some(listed) = listed.take() {
                            let _ = listed.send(());
                        }
                    }
                    watcher::Event::Apply(secret) => {
                        let name = secret.metadata.name.unwrap_or_default();
                        arrived.lock().unwrap().entry(name).or_insert(now);
                    }
                    _ => {}
                }
            }
        }
    });
    on_listed.await.unwrap();

    // The members, one at a time.
    let (label, value) = DEFAULT_SECRET_LABEL.split_once('=').unwrap();
    let mut to_first = Vec::with_capacity(clusters);
    let mut announcements = Vec::with_capacity(clusters);
    for i in 0..clusters {
        let name = format!("m{i}");
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(label.to_owned(), value.to_owned())].into()),
                ..ObjectMeta::default()
            },
            data: Some(
                [(
                    DEFAULT_KUBECONFIG_KEY.to_owned(),
                    ByteString(kubeconfig.to_vec()),
                )]
                .into(),
            ),
            ..Secret::default()
        };
        let announced = unix_nanos();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let first = side
            .until(&format!("first {name} "), Duration::from_secs(60))
            .await;
        let at: u128 = first.parse().unwrap();
        to_first.push(Duration::from_nanos((at.saturating_sub(announced)) as u64));
        announcements.push((name, announced));
    }
    floor.abort();
    let arrived = arrived.lock().unwrap().clone();
    let mut to_event: Vec<Duration> = announcements
        .iter()
        .filter_map(|(name, at)| Some(Duration::from_nanos((arrived.get(name)? - at) as u64)))
        .collect();
    to_event.sort();

    // Every member engaged, idle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_n, heap_n) = side.mem().await;
    let (cpu_n, cpu_total) = side.idle_cpu(idle).await;
    let wall = started.elapsed();
    drop(side.stdin.take());
    side.child.wait().unwrap();
    to_first.sort();
    Measured {
        rss: (rss_0, rss_n),
        heap: (heap_0, heap_n),
        cpu: (cpu_0, cpu_n),
        to_first,
        to_event,
        cpu_total,
        wall,
    }
}

fn print_table(sides: &[(&str, Measured)], clusters: usize, idle: Duration) {
    let minute = 60.0 / idle.as_secs_f64();
    let ms_per_minute = |d: Duration| d.as_secs_f64() * 1000.0 * minute;
    type Row = (&'static str, &'static str, fn(&Measured, usize, f64) -> f64);
    let rows: [Row; 6] = [
        ("RSS per engaged member", "KB", |m, n, _| {
            (m.rss.1 - m.rss.0) / n as f64 / 1024.0
        }),
        ("live heap per engaged member", "KB", |m, n, _| {
            (m.heap.1 - m.heap.0) / n as f64 / 1024.0
        }),
        ("idle CPU per engaged member", "ms/min", |m, n, minute| {
            (m.cpu.1.as_secs_f64() - m.cpu.0.as_secs_f64()) * 1000.0 * minute / n as f64
        }),
        ("Secret created -> first reconcile, p50", "ms", |m, _, _| {
            percentile(&m.to_first, 0.5).as_secs_f64() * 1000.0
        }),
        ("Secret created -> first reconcile, p90", "ms", |m, _, _| {
            percentile(&m.to_first, 0.9).as_secs_f64() * 1000.0
        }),
        ("Secret created -> first reconcile, max", "ms", |m, _, _| {
            m.to_first.last().unwrap().as_secs_f64() * 1000.0
        }),
    ];
    let names: Vec<&str> = sides.iter().map(|(n, _)| *n).collect();
    let ratio = sides.len() == 2;
    print!("\n| {clusters} members |");
    for n in &names {
        print!(" {n} |");
    }
    println!("{}", if ratio { " Rudder / mcr |" } else { "" });
    println!(
        "|---|{}{}",
        "---:|".repeat(names.len()),
        if ratio { "---:|" } else { "" }
    );
    for (label, unit, f) in rows {
        let values: Vec<f64> = sides.iter().map(|(_, m)| f(m, clusters, minute)).collect();
        print!("| {label} |");
        for v in &values {
            print!(" {v:.1} {unit} |");
        }
        if ratio {
            // A ratio to (about) nothing says nothing.
            if values[1].abs() < 0.05 {
                print!(" - |");
            } else {
                print!(" {:.2}x |", values[0] / values[1]);
            }
        }
        println!();
    }
    let text_row = |label: &str, f: &dyn Fn(&Measured) -> String| {
        print!("| {label} |");
        for (_, m) in sides {
            print!(" {} |", f(m));
        }
        println!("{}", if ratio { " |" } else { "" });
    };
    text_row(
        "floor: Secret created -> the harness's watch event, p50 / max",
        &|m| {
            if m.to_event.is_empty() {
                return "-".to_owned();
            }
            format!(
                "{:.1} / {:.1} ms",
                percentile(&m.to_event, 0.5).as_secs_f64() * 1000.0,
                m.to_event.last().unwrap().as_secs_f64() * 1000.0
            )
        },
    );
    text_row("RSS, none / all engaged", &|m| {
        format!("{:.1} / {:.1} MB", m.rss.0 / 1e6, m.rss.1 / 1e6)
    });
    text_row("live heap, none / all engaged", &|m| {
        format!("{:.1} / {:.1} MB", m.heap.0 / 1e6, m.heap.1 / 1e6)
    });
    text_row("idle CPU, none / all engaged", &|m| {
        format!(
            "{:.1} / {:.1} ms/min",
            ms_per_minute(m.cpu.0),
            ms_per_minute(m.cpu.1)
        )
    });
    text_row("CPU / wall, the side's whole run", &|m| {
        format!(
            "{:.2} s / {:.1} s",
            m.cpu_total.as_secs_f64(),
            m.wall.as_secs_f64()
        )
    });
}
