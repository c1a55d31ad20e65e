//! A controller against controller-runtime's, each in a process of its own on one control
//! plane: the first pass over 10,000 ConfigMaps, the latency from an update to its
//! reconcile's start idle and under a backlog of every object, and the memory after sync.
//!
//! Run by `cargo xtask bench-controller [--objects N] [--runs N]`, which builds
//! controller-runtime's side (`go/cmd/controller-pass`) and runs `cargo bench -p rudder-runtime
//! --bench controller_pass -- --bench --go-binary PATH` with `RUDDER_ENVTEST_ASSETS` set.
//! One control plane, one namespace of `--objects` ConfigMaps (10,000 by default, 400-byte
//! values, created once). Then for 1 and 4 workers, `--runs` times (default 1), each side in
//! turn (which goes first alternates):
//!
//! - a child process starts: Rudder's manager with one controller (`rudder::new_controller`,
//!   a multi-thread tokio runtime, as `#[tokio::main]` gives an operator), or
//!   controller-runtime v0.25.3's manager with one controller (`ctrl.NewControllerManagedBy`,
//!   its default priority queue, GOMAXPROCS 2); both cache the namespace only, and each
//!   reconcile reads its object from the cache and does nothing else;
//! - the child reports the *first pass*: from the start of its `main` to the moment every
//!   object has been reconciled once, the CPU over it, and `VmRSS` then (with its anonymous
//!   part, `RssAnon`, and the live heap: glibc's `mallinfo2` in Rudder's child, `HeapAlloc`
//!   in Go's, which includes garbage not yet collected);
//! - *listing* (while the first pass runs): once the child's cache has synced (it prints
//!   `synced`), the objects listed last, whose keys wait at the back of the initial list's
//!   backlog at low priority, are updated one after another (at most 20) until the child
//!   reports its first pass: the latency of a change behind that backlog;
//! - *idle*: 200 updates, one every 25 ms, each an annotation carrying the time it was sent;
//!   the child times each from that moment to its reconcile's start;
//! - *backlog*: every object updated at once (8 requests in flight), timed the same way:
//!   the latency of an update behind the rest of the backlog;
//! - the child reports the percentiles, its `VmRSS` and its CPU, and exits.
//!
//! Each child also registers an event handler of its own on the controller's informer
//! (Rudder's `Informer::add_handler`, client-go's `AddEventHandler`) that notes when each
//! update's watch event reaches the process; a reconcile of that value records its start
//! minus that moment under `<phase>-own`: the controller's own share of the latency (its
//! handler, queue and worker), with the API server and the watch left out. A reconcile that
//! starts before the probe's handler has run records a negative value.
//!
//! Meanwhile the harness watches the ConfigMaps itself and times each update to its watch
//! event's arrival: the *floor*, what the API server and the watch take before any
//! controller sees the change, measured in the same runs (printed per side).
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

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use rudder::prelude::*;

mod common;
use common::{arg, arg_value, cpu_time, rss_bytes, status_bytes};
/// glibc's `struct mallinfo2` (glibc 2.33 and later).
#[allow(
    dead_code,
    reason = "the layout is glibc's; two of its fields are read"
)]
#[repr(C)]
struct Mallinfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

/// Bytes the allocator has handed out and not had back, every arena's (glibc's
/// `mallinfo2`: `uordblks`, plus `hblkhd` for the chunks it mapped on their own). Read once,
/// it costs the allocations nothing (a counting global allocator's shared atomics slowed
/// the first pass measurably on two threads).
#[allow(
    unsafe_code,
    reason = "glibc's mallinfo2: the live heap without instrumenting every allocation"
)]
fn live_heap() -> u64 {
    unsafe extern "C" {
        fn mallinfo2() -> Mallinfo2;
    }
    // SAFETY: `mallinfo2` takes no argument and returns a struct by value; it reads the
    // allocator's statistics under each arena's lock, as an allocation would.
    let info = unsafe { mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

fn cpu_ms() -> u64 {
    cpu_time().as_millis() as u64
}

const CHILD: &str = "RUDDER_CONTROLLER_PASS_CHILD";
const NAMESPACE: &str = "controller-pass";
const ANNOTATION: &str = "bench.rudder.dev/sent";
const IDLE_UPDATES: usize = 200;
/// At most this many updates while the first pass runs: few enough that both sides get
/// them all (controller-runtime's first pass lasts longer after its sync and would take
/// more, and more work, otherwise).
const LISTING_UPDATES: usize = 20;

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let go =
        arg_value("--go-binary").expect("--go-binary PATH (cargo xtask bench-controller gives it)");
    let objects = arg("--objects", 10_000);
    let runs = arg("--runs", 1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(harness(&go, objects, runs));
}

// ---------------------------------------------------------------------------------------
// The child: Rudder's side.

/// What the child's reconciles saw.
struct Recorder {
    run: String,
    start: std::time::Instant,
    cpu_start: u64,
    objects: usize,
    first: HashSet<String>,
    first_done: bool,
    last_seen: HashMap<String, String>,
    samples: HashMap<String, Vec<Duration>>,
    /// The controller's own share, by phase: reconcile start minus the probe's event, in
    /// nanoseconds (negative when the reconcile started first).
    own: HashMap<String, Vec<i64>>,
    /// By object: its last timed update's value, and when its event and its reconcile's start
    /// were seen, until both are.
    pending: HashMap<String, Pending>,
}

/// One object's last timed update, waiting for its event and its reconcile.
#[derive(Default)]
struct Pending {
    sent: String,
    event: Option<u128>,
    reconciled: Option<u128>,
}

impl Recorder {
    /// The phase of a timed value of this run.
    fn phase_of<'a>(&self, sent: &'a str) -> Option<&'a str> {
        let (tagged, _) = sent.split_once(':')?;
        let (run, phase) = tagged.split_once('.')?;
        (run == self.run).then_some(phase)
    }

    /// Notes one side of an update's pairing (its event, or its reconcile's start) and
    /// records the controller's own share once both are known.
    fn pair(&mut self, key: &str, sent: &str, at: u128, event: bool) {
        let Some(phase) = self.phase_of(sent).map(str::to_owned) else {
            return;
        };
        let pending = self.pending.entry(key.to_owned()).or_default();
        if pending.sent != sent {
            *pending = Pending {
                sent: sent.to_owned(),
                ..Pending::default()
            };
        }
        let side = if event {
            &mut pending.event
        } else {
            &mut pending.reconciled
        };
        if side.is_some() {
            return;
        }
        *side = Some(at);
        if let (Some(event), Some(reconciled)) = (pending.event, pending.reconciled) {
            self.pending.remove(key);
            let own = i64::try_from(reconciled).unwrap() - i64::try_from(event).unwrap();
            self.own
                .entry(format!("{phase}-own"))
                .or_default()
                .push(own);
        }
    }

    /// The probe handler's note of an update's watch event.
    fn event(&mut self, key: &str, sent: &str, now: u128) {
        self.pair(key, sent, now, true);
    }

    fn reconciled(&mut self, key: &str, sent: Option<&str>, now: u128) {
        if !self.first_done {
            self.first.insert(key.to_owned());
            if self.first.len() == self.objects {
                self.first_done = true;
                println!("first-pass-ms {}", self.start.elapsed().as_millis());
                println!("first-pass-cpu-ms {}", cpu_ms() - self.cpu_start);
                println!("rss {}", rss_bytes());
                println!("rss-anon {}", status_bytes("RssAnon"));
                println!("heap {}", live_heap());
            }
        }
        let Some(sent) = sent else { return };
        if self.last_seen.get(key).map(String::as_str) == Some(sent) {
            return;
        }
        self.last_seen.insert(key.to_owned(), sent.to_owned());
        self.pair(key, sent, now, false);
        let Some((tagged, nanos)) = sent.split_once(':') else {
            return;
        };
        let Some((run, phase)) = tagged.split_once('.') else {
            return;
        };
        if run != self.run {
            return;
        }
        let Ok(at) = nanos.parse::<u128>() else {
            return;
        };
        let took = Duration::from_nanos(now.saturating_sub(at) as u64);
        let samples = self.samples.entry(phase.to_owned()).or_default();
        samples.push(took);
        if samples.len().is_multiple_of(100) {
            println!("seen {phase} {}", samples.len());
        }
    }

    fn report(&mut self) {
        let mut phases: Vec<_> = self.samples.keys().cloned().collect();
        phases.sort();
        for phase in phases {
            let s = self.samples.get_mut(&phase).unwrap();
            s.sort();
            let at = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize].as_micros();
            println!(
                "latency {phase} {} {} {} {}",
                s.len(),
                at(0.5),
                at(0.99),
                s.last().unwrap().as_micros()
            );
        }
        let mut phases: Vec<_> = self.own.keys().cloned().collect();
        phases.sort();
        for phase in phases {
            let s = self.own.get_mut(&phase).unwrap();
            s.sort_unstable();
            let at = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize] / 1000;
            println!(
                "latency {phase} {} {} {} {}",
                s.len(),
                at(0.5),
                at(0.99),
                s.last().unwrap() / 1000
            );
        }
        println!("steady-rss {}", rss_bytes());
        println!("cpu-ms {}", cpu_ms() - self.cpu_start);
        println!("done");
    }
}

struct Probe {
    tools: Tools,
    recorder: Arc<Mutex<Recorder>>,
}

impl Reconciler for Probe {
    type Error = rudder::client::ClientError;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let now = unix_nanos();
        let Some(cm) = self.tools.get::<ConfigMap>(&request).await? else {
            return Ok(Action::done());
        };
        let sent = cm
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION))
            .map(String::as_str);
        self.recorder
            .lock()
            .unwrap()
            .reconciled(request.name(), sent, now);
        Ok(Action::done())
    }
}

fn child() {
    let start = std::time::Instant::now();
    let cpu_start = cpu_ms();
    let kubeconfig = arg_value("-kubeconfig").unwrap();
    let namespace = arg_value("-namespace").unwrap();
    let objects = arg("-objects", 0);
    let workers = arg("-workers", 1);
    let run = arg_value("-run").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let manager = Arc::new(
            Manager::builder(client)
                .health_probe_address(None)
                .metrics_address(None)
                .cache({
                    let namespace = namespace.clone();
                    move |c| c.default_namespace(namespace)
                })
                .build()
                .unwrap(),
        );
        let recorder = Arc::new(Mutex::new(Recorder {
            run,
            start,
            cpu_start,
            objects,
            first: HashSet::new(),
            first_done: false,
            last_seen: HashMap::new(),
            samples: HashMap::new(),
            own: HashMap::new(),
            pending: HashMap::new(),
        }));
        // "synced" once the cache holds the list: the harness then updates objects while
        // the first pass works through it.
        let informer = manager
            .cache()
            .informer::<ConfigMap>(&rudder::cache::Scope::namespace(namespace.as_str()))
            .unwrap();
        let synced = informer.clone();
        tokio::spawn(async move {
            if synced.wait_for_sync(Duration::from_secs(600)).await.is_ok() {
                println!("synced");
            }
        });
        // The probe: a handler of its own on the informer the controller's watch shares.
        informer.add_handler({
            let recorder = Arc::clone(&recorder);
            move |event| {
                let now = unix_nanos();
                if let rudder::Event::Update { new, .. } = &event
                    && let Some(sent) = new
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANNOTATION))
                {
                    let name = new.metadata.name.as_deref().unwrap_or_default();
                    recorder.lock().unwrap().event(name, sent, now);
                }
                async {}
            }
        });
        rudder::new_controller(&manager)
            .for_::<ConfigMap>()
            .with_options(ControllerOptions::new().workers(workers))
            .complete_with({
                let recorder = Arc::clone(&recorder);
                move |tools| Probe { tools, recorder }
            })
            .await
            .unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        std::thread::spawn({
            let stop = stop.clone();
            move || {
                for line in std::io::stdin().lines() {
                    if line.as_deref().is_ok_and(|l| l == "report") {
                        recorder.lock().unwrap().report();
                        break;
                    }
                }
                stop.cancel();
            }
        });
        manager.start(stop).await.unwrap();
    });
}

// ---------------------------------------------------------------------------------------
// The harness.

/// A child process and the lines it prints.
struct Side {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// Lines read ahead by [`Side::has_printed`], not yet consumed.
    pending: std::collections::VecDeque<String>,
}

impl Side {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
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
            pending: std::collections::VecDeque::new(),
        }
    }

    /// Lines until one starts with `prefix` (returned); the others go to `seen`.
    fn until(&mut self, prefix: &str, within: Duration, seen: &mut Vec<String>) -> String {
        self.until_any(&[prefix], within, seen)
    }

    /// Lines until one starts with one of `prefixes` (returned); the others go to `seen`.
    fn until_any(&mut self, prefixes: &[&str], within: Duration, seen: &mut Vec<String>) -> String {
        let prefix = prefixes.join("` or `");
        let deadline = std::time::Instant::now() + within;
        loop {
            let line = match self.pending.pop_front() {
                Some(line) => line,
                None => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    self.lines
                        .recv_timeout(left)
                        .unwrap_or_else(|_| panic!("no `{prefix}` line within {within:?}"))
                }
            };
            if prefixes.iter().any(|p| line.starts_with(p)) {
                return line;
            }
            seen.push(line);
        }
    }

    /// Whether a line starting with `prefix` has arrived (without waiting; the lines read
    /// stay for [`Side::until`]).
    fn has_printed(&mut self, prefix: &str) -> bool {
        while let Ok(line) = self.lines.try_recv() {
            self.pending.push_back(line);
        }
        self.pending.iter().any(|l| l.starts_with(prefix))
    }
}

/// What one side reported in one run.
#[derive(Default, Clone)]
struct Result_ {
    first_pass_ms: f64,
    first_pass_cpu_ms: f64,
    rss: f64,
    /// The anonymous part of `rss` (the heap, stacks; the rest is the binary's pages).
    rss_anon: f64,
    /// The live heap then: bytes allocated and not freed (Rust, glibc's `mallinfo2`), the
    /// heap's objects (Go's `HeapAlloc`, which counts garbage not yet swept).
    heap: f64,
    steady_rss: f64,
    cpu_ms: f64,
    /// phase -> (n, p50 µs, p99 µs, max µs)
    latency: HashMap<String, (f64, f64, f64, f64)>,
    /// phase -> (p50 µs, p99 µs) of the harness's own watch.
    floor: HashMap<String, (f64, f64)>,
    /// Updates per second the backlog phase sent.
    backlog_rate: f64,
}

/// Times each update of `run` from its annotation to its arrival on a watch of the
/// harness's own, per phase, until `stop`.
fn watch_floor(
    api: Api<ConfigMap>,
    run: String,
    stop: tokio_util::sync::CancellationToken,
    listed: tokio::sync::oneshot::Sender<()>,
) -> tokio::task::JoinHandle<HashMap<String, Vec<Duration>>> {
    tokio::spawn(async move {
        let mut samples: HashMap<String, Vec<Duration>> = HashMap::new();
        let mut last: HashMap<String, String> = HashMap::new();
        let mut listed = Some(listed);
        let events = kube_runtime::watcher(api, kube_runtime::watcher::Config::default());
        let mut events = std::pin::pin!(events);
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = stop.cancelled() => return samples,
            };
            let now = unix_nanos();
            if let Some(Ok(kube_runtime::watcher::Event::InitDone)) = event
                && let Some(listed) = listed.take()
            {
                let _ = listed.send(());
            }
            let Some(Ok(kube_runtime::watcher::Event::Apply(cm))) = event else {
                continue;
            };
            let Some(sent) = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION))
            else {
                continue;
            };
            let name = cm.metadata.name.clone().unwrap_or_default();
            if last.get(&name) == Some(sent) {
                continue;
            }
            last.insert(name, sent.clone());
            let Some((tagged, nanos)) = sent.split_once(':') else {
                continue;
            };
            let Some((of, phase)) = tagged.split_once('.') else {
                continue;
            };
            if of != run {
                continue;
            }
            if let Ok(at) = nanos.parse::<u128>() {
                samples
                    .entry(phase.to_owned())
                    .or_default()
                    .push(Duration::from_nanos(now.saturating_sub(at) as u64));
            }
        }
    })
}

fn value(line: &str) -> f64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn touch(api: &Api<ConfigMap>, name: &str, run: &str, phase: &str) {
    let sent = format!("{run}.{phase}:{}", unix_nanos());
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: sent}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[allow(clippy::too_many_arguments)]
async fn one(
    side: &str,
    go: &str,
    kubeconfig: &str,
    api: &Api<ConfigMap>,
    objects: usize,
    workers: usize,
    run: &str,
) -> Result_ {
    let mut command = if side == "Rudder" {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.env(CHILD, "1");
        c
    } else {
        let mut c = Command::new(go);
        c.env("GOMAXPROCS", "2");
        c
    };
    command.args([
        "-kubeconfig",
        kubeconfig,
        "-namespace",
        NAMESPACE,
        "-objects",
        &objects.to_string(),
        "-workers",
        &workers.to_string(),
        "-run",
        run,
    ]);
    let stop_floor = tokio_util::sync::CancellationToken::new();
    let (listed, floor_listed) = tokio::sync::oneshot::channel();
    let floor = watch_floor(api.clone(), run.to_owned(), stop_floor.clone(), listed);
    // The floor's watch lists first: no update is timed before it watches.
    tokio::time::timeout(Duration::from_secs(120), floor_listed)
        .await
        .expect("the floor's watch listed the namespace within 2 minutes")
        .expect("the floor's watch ended before it had listed");

    let mut child = Side::spawn(command);
    let mut result = Result_::default();
    let mut seen = Vec::new();
    let wait = Duration::from_secs(600);
    // While the first pass runs: once the child's cache has synced, the objects listed last
    // (queued last, at low priority) are updated one after another until the first pass
    // ends: the latency of a change behind the initial list's backlog.
    let synced = child.until_any(&["synced", "first-pass-ms"], wait, &mut seen);
    if synced.starts_with("first-pass-ms") {
        child.pending.push_front(synced); // no time to update anything
    }
    for i in 0..LISTING_UPDATES.min(objects) {
        if child.has_printed("first-pass-ms") {
            break;
        }
        touch(api, &format!("cm-{}", objects - 1 - i), run, "listing").await;
    }
    result.first_pass_ms = value(&child.until("first-pass-ms", wait, &mut seen));
    result.first_pass_cpu_ms = value(&child.until("first-pass-cpu-ms", wait, &mut seen));
    result.rss = value(&child.until("rss", wait, &mut seen));
    result.rss_anon = value(&child.until("rss-anon", wait, &mut seen));
    result.heap = value(&child.until("heap", wait, &mut seen));

    // Idle: one update at a time, paced (the shape of the load, not a wait for a condition).
    let step = objects / IDLE_UPDATES;
    for i in 0..IDLE_UPDATES {
        touch(api, &format!("cm-{}", i * step), run, "idle").await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    child.until(&format!("seen idle {IDLE_UPDATES}"), wait, &mut seen);

    // Backlog: every object at once.
    let sending = std::time::Instant::now();
    futures::stream::iter(0..objects)
        .map(|i| async move { touch(api, &format!("cm-{i}"), run, "backlog").await })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    result.backlog_rate = objects as f64 / sending.elapsed().as_secs_f64();
    let last = objects / 100 * 100;
    child.until(&format!("seen backlog {last}"), wait, &mut seen);

    writeln!(child.stdin, "report").unwrap();
    loop {
        let line = child.until("", wait, &mut seen);
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["latency", phase, n, p50, p99, max] => {
                result.latency.insert(
                    (*phase).to_owned(),
                    (
                        n.parse().unwrap(),
                        p50.parse().unwrap(),
                        p99.parse().unwrap(),
                        max.parse().unwrap(),
                    ),
                );
            }
            ["steady-rss", v] => result.steady_rss = v.parse().unwrap(),
            ["cpu-ms", v] => result.cpu_ms = v.parse().unwrap(),
            ["done"] => break,
            _ => {}
        }
    }
    child.child.wait().unwrap();
    stop_floor.cancel();
    for (phase, mut s) in floor.await.unwrap() {
        s.sort();
        let at = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize].as_micros() as f64;
        result.floor.insert(phase, (at(0.5), at(0.99)));
    }
    result
}

async fn harness(go: &str, objects: usize, runs: usize) {
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
    futures::stream::iter(0..objects)
        .map(|i| {
            let api = api.clone();
            async move {
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
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let kubeconfig = env.kubeconfig_path().display().to_string();
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .next()
            .unwrap_or("?")
            .to_owned()
    };
    println!(
        "controller first pass and latency, {objects} ConfigMaps, kube-apiserver {}",
        env.version()
    );
    let mut id = 0;
    for workers in [1, 4] {
        for round in 0..runs {
            let order: [&str; 2] = if (round + workers) % 2 == 0 {
                ["Rudder", "controller-runtime"]
            } else {
                ["controller-runtime", "Rudder"]
            };
            let mut results = HashMap::new();
            let before = load();
            for side in order {
                id += 1;
                let run = format!("r{id}");
                let result = one(side, go, &kubeconfig, &api, objects, workers, &run).await;
                results.insert(side, result);
            }
            print_run(workers, round + 1, &order, &before, &load(), &results);
        }
    }
    drop(env);
}

fn print_run(
    workers: usize,
    round: usize,
    order: &[&str; 2],
    before: &str,
    after: &str,
    results: &HashMap<&str, Result_>,
) {
    let (r, g) = (&results["Rudder"], &results["controller-runtime"]);
    let lat = |x: &Result_, phase: &str, i: usize| -> f64 {
        x.latency.get(phase).map_or(f64::NAN, |l| match i {
            1 => l.1,
            2 => l.2,
            _ => l.3,
        }) / 1000.0
    };
    println!();
    println!(
        "workers {workers}, run {round} (order {}, then {}; load {before} -> {after})",
        order[0], order[1]
    );
    println!("| | Rudder | controller-runtime | Rudder / controller-runtime |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, a: f64, b: f64, unit: &str| {
        println!("| {name} | {a:.2} {unit} | {b:.2} {unit} | {:.2}x |", a / b);
    };
    let floor = |x: &Result_, phase: &str, p99: bool| -> f64 {
        x.floor
            .get(phase)
            .map_or(f64::NAN, |f| if p99 { f.1 } else { f.0 })
            / 1000.0
    };
    row(
        "first pass",
        r.first_pass_ms / 1000.0,
        g.first_pass_ms / 1000.0,
        "s",
    );
    row(
        "first pass CPU",
        r.first_pass_cpu_ms / 1000.0,
        g.first_pass_cpu_ms / 1000.0,
        "s",
    );
    row("RSS after the first pass", r.rss / 1e6, g.rss / 1e6, "MB");
    row(
        "  of which anonymous (heap, stacks)",
        r.rss_anon / 1e6,
        g.rss_anon / 1e6,
        "MB",
    );
    row("live heap then", r.heap / 1e6, g.heap / 1e6, "MB");
    row(
        "RSS at the end",
        r.steady_rss / 1e6,
        g.steady_rss / 1e6,
        "MB",
    );
    let timed = |x: &Result_| x.latency.get("listing").map_or(0.0, |l| l.0);
    println!(
        "| listing: updates timed while the first pass runs | {} | {} | - |",
        timed(r),
        timed(g)
    );
    for phase in ["listing", "idle", "backlog"] {
        if phase == "backlog" {
            row(
                "backlog: updates sent per second",
                r.backlog_rate,
                g.backlog_rate,
                "/s",
            );
        }
        for (p, i, p99) in [("p50", 1, false), ("p99", 2, true)] {
            row(
                &format!("{phase}: update -> the harness's watch event {p} (floor)"),
                floor(r, phase, p99),
                floor(g, phase, p99),
                "ms",
            );
            row(
                &format!("{phase}: update -> reconcile start {p}"),
                lat(r, phase, i),
                lat(g, phase, i),
                "ms",
            );
            let (a, b) = (
                lat(r, &format!("{phase}-own"), i) * 1000.0,
                lat(g, &format!("{phase}-own"), i) * 1000.0,
            );
            // A negative figure (the reconcile started before the probe's handler ran) has
            // no meaningful ratio.
            let ratio = if a > 0.0 && b > 0.0 {
                format!("{:.2}x", a / b)
            } else {
                "-".to_owned()
            };
            println!(
                "| {phase}: watch event in the process -> reconcile start {p} (own share) \
                 | {a:.0} µs | {b:.0} µs | {ratio} |"
            );
        }
    }
    row("CPU, whole run", r.cpu_ms / 1000.0, g.cpu_ms / 1000.0, "s");
}
