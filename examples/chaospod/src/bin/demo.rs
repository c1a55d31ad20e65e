//! Run: `cargo xtask demo` (installs the local control plane first if needed), or
//! `cargo run -p chaospod --bin demo -- --help`.
//!
//! A guided run of the ChaosPod controller: starts a local control plane (rudder-envtest) or
//! uses a cluster (`--kubeconfig`), installs the CRD, runs the controller under a manager with
//! leader election, probes and metrics, creates a few ChaosPods, prints what happens for a
//! bounded time (on the local control plane, KWOK's fake nodes run the Pods), then a summary
//! with the manager's own `/metrics` lines, and shuts down.
//! It exits non-zero if the controller did not do its job (every ChaosPod stopped and
//! restarted at least once when the run is long enough).

#![allow(
    clippy::disallowed_methods,
    reason = "examples may spawn: the example owns its tasks"
)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaospod::{ChaosPod, Options};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube_runtime::watcher;
use rudder::BoxError;
use rudder::ErrorChain;
use rudder::lease::leader_election::LeaderElectionConfig;
use rudder::webhook::manifest::ClientConfig;
use rudder_envtest::WebhookOptions;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

const HELP: &str = "\
demo: the ChaosPod controller, end to end, for a bounded time

USAGE: demo [--duration SECONDS] [--kubeconfig PATH]

  --duration SECONDS   how long to watch the controller work (default 30, at least 5)
  --kubeconfig PATH    use this cluster instead of starting a local control plane; the
                       demo installs the ChaosPod CRD there and works in a namespace it
                       creates and deletes
  --help               this text

Without --kubeconfig it starts kube-apiserver and etcd on loopback (rudder-envtest); they
must be installed: `cargo xtask demo` does that first.";

/// The ChaosPods the demo creates: name and period.
const CHAOSPODS: [(&str, u64); 3] = [("alpha", 3), ("beta", 4), ("gamma", 5)];

const IMAGE: &str = "registry.k8s.io/pause:3.9";
/// Fake nodes on the local control plane: KWOK plays their kubelets, so Pods are scheduled
/// and reach `Running` (no container runs).
const NODES: usize = 2;

struct Args {
    duration: Duration,
    kubeconfig: Option<String>,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut parsed = Args {
        duration: Duration::from_secs(30),
        kubeconfig: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--help" | "-h" => {
                println!("{HELP}");
                return Ok(None);
            }
            "--duration" => {
                let v = value(arg)?;
                let secs: u64 = v
                    .trim_end_matches('s')
                    .parse()
                    .map_err(|_| format!("--duration wants whole seconds, not {v:?}"))?;
                if secs < 5 {
                    return Err("--duration must be at least 5 seconds".into());
                }
                parsed.duration = Duration::from_secs(secs);
            }
            "--kubeconfig" => parsed.kubeconfig = Some(value(arg)?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(parsed))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("demo: {message}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("demo: {}", ErrorChain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Prints a progress line with the time since the demo started.
struct Clock(Instant);

impl Clock {
    fn say(&self, line: impl std::fmt::Display) {
        println!("[{:>5.1}s] {line}", self.0.elapsed().as_secs_f64());
    }
}

async fn run(args: Args) -> Result<bool, BoxError> {
    let clock = Clock(Instant::now());
    // The local control plane, unless a cluster was given; it lives until the end.
    let (client, env) = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
            let config = kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?;
            clock.say(format_args!("using the cluster at {}", config.cluster_url));
            (kube::Client::try_from(config)?, None)
        }
        None => {
            clock.say(format_args!(
                "starting a local control plane (rudder-envtest: etcd, kube-apiserver, \
                 kube-scheduler, and KWOK playing {NODES} nodes so Pods run)"
            ));
            let env = rudder_envtest::TestEnv::builder()
                .nodes(NODES)
                .start()
                .await?;
            clock.say(format_args!(
                "control plane up in {:.1}s: kube-apiserver {}; kubectl works with KUBECONFIG={}",
                env.started_in().as_secs_f64(),
                env.version(),
                env.kubeconfig_path().display()
            ));
            (env.client()?, Some(env))
        }
    };

    chaospod::install_crd(&client).await?;
    clock.say("installed the ChaosPod CRD (chaospods.examples.rudder.dev)");
    let namespace = format!("chaospod-demo-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await?;
    clock.say(format_args!("created namespace {namespace}"));

    let outcome = demo(&clock, &client, &namespace, args.duration, env.as_ref()).await;

    // Clean up whatever happened: on a cluster, the namespace (and everything in it); the
    // local control plane is thrown away whole.
    if args.kubeconfig.is_some() {
        match namespaces
            .delete(&namespace, &DeleteParams::default())
            .await
        {
            Ok(_) => clock.say(format_args!("deleted namespace {namespace}")),
            Err(error) => clock.say(format_args!(
                "could not delete namespace {namespace}: {error}"
            )),
        }
    }
    if let Some(env) = env {
        env.stop()?;
        clock.say("stopped the local control plane");
    }
    outcome
}

async fn demo(
    clock: &Clock,
    client: &kube::Client,
    namespace: &str,
    duration: Duration,
    env: Option<&rudder_envtest::TestEnv>,
) -> Result<bool, BoxError> {
    let loopback = |port| Some(SocketAddr::from(([127, 0, 0, 1], port)));
    // The webhooks, on the local control plane: its API server calls this process on
    // loopback. A cluster's API server could not reach it, so there they are left out.
    let installed = match env {
        Some(env) => {
            let service = ClientConfig::service("chaospod-webhook", "chaospod-system");
            let (_, hooks) = chaospod::manifests(&service)?;
            let installed = env
                .install_webhooks(WebhookOptions {
                    mutating: hooks.mutating.into_iter().collect(),
                    validating: hooks.validating.into_iter().collect(),
                    ..WebhookOptions::default()
                })
                .await?;
            clock.say(format_args!(
                "installed the defaulting and validating webhook configurations (the API \
                 server calls https://{})",
                installed.addr()
            ));
            Some(installed)
        }
        None => {
            clock.say("webhooks: left out (a cluster's API server cannot call this process)");
            None
        }
    };
    let options = Options {
        webhooks: installed.as_ref().map(|installed| {
            rudder::webhook::Options::new()
                .bind_address(installed.addr())
                .cert_dir(installed.cert_dir())
        }),
        webhook_certificates: None,
        secure_metrics: None,
        namespace: Some(namespace.to_owned()),
        health_address: loopback(0),
        metrics_address: loopback(0),
        leader_election: Some(
            LeaderElectionConfig::new(namespace, "chaospod-leader").with_release_on_cancel(true),
        ),
    };
    let manager = Arc::new(chaospod::manager(client.clone(), options).await?);
    let stop = CancellationToken::new();
    let mut running = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    // Stop the manager whatever happens below.
    let _stop_on_exit = stop.clone().drop_guard();

    let health = wait_for("the probe server", || manager.health_address()).await?;
    let metrics = wait_for("the metrics server", || manager.metrics_address()).await?;
    clock.say(format_args!(
        "manager started: probes on http://{health}/readyz, metrics on http://{metrics}/metrics"
    ));
    let election = manager.leader_election().ok_or("no leader election")?;
    wait_for("leadership", || election.is_leader().then_some(())).await?;
    clock.say(format_args!(
        "leader election: this manager ({}) holds Lease {namespace}/chaospod-leader",
        election.identity()
    ));
    wait_for_ready(health).await?;
    clock.say("readyz: ok (caches synced)");

    // Show what happens to Pods and ChaosPods while the controller works.
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let watching = tokio::spawn(narrate(
        Clock(clock.0),
        pods.clone(),
        Api::namespaced(client.clone(), namespace),
        ran.clone(),
    ));
    let chaospods: Api<ChaosPod> = Api::namespaced(client.clone(), namespace);
    for (name, period) in CHAOSPODS {
        let chaos = ChaosPod::new_with_image(name, IMAGE, Duration::from_secs(period));
        let created = chaospods.create(&PostParams::default(), &chaos).await?;
        if installed.is_some() && name == CHAOSPODS[0].0 {
            let next_stop = created.spec.next_stop.as_ref().map(|t| t.0.to_string());
            clock.say(format_args!(
                "webhook defaulted ChaosPod {name}: created without spec.nextStop, stored with \
                 nextStop {}",
                next_stop
                    .as_deref()
                    .unwrap_or("(none: the defaulter did not run!)")
            ));
            if next_stop.is_none() {
                return Err("the defaulting webhook did not set spec.nextStop".into());
            }
        }
    }
    if installed.is_some() {
        let mut empty = ChaosPod::new_with_image("no-containers", IMAGE, Duration::from_secs(5));
        if let Some(spec) = empty.spec.template.spec.as_mut() {
            spec.containers.clear();
        }
        match chaospods.create(&PostParams::default(), &empty).await {
            Err(kube::Error::Api(status)) => clock.say(format_args!(
                "webhook rejected ChaosPod no-containers: {}",
                status.message
            )),
            Ok(_) => {
                return Err("the validating webhook let a ChaosPod without containers in".into());
            }
            Err(other) => return Err(other.into()),
        }
    }
    clock.say(format_args!(
        "created ChaosPods {} (each Pod stopped after 3, 4, 5 s); watching for {} s",
        CHAOSPODS.map(|(n, _)| n).join(", "),
        duration.as_secs()
    ));
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        // The manager stopping on its own before the demo ends is a failure, with its reason.
        ended = &mut running => {
            let reason = match ended {
                Ok(Ok(())) => "it returned".to_owned(),
                Ok(Err(error)) => ErrorChain(&error).to_string(),
                Err(error) => error.to_string(),
            };
            return Err(format!("the manager stopped before the demo ended: {reason}").into());
        }
    }
    watching.abort();

    // The summary: what the ChaosPods say, and what the manager's metrics say.
    println!("\n== after {} s ==", duration.as_secs());
    println!(
        "{:<8} {:>5} {:>6}  {:<9} pod now",
        "chaospod", "runs", "stops", "seen Running"
    );
    let mut ok = true;
    for (name, period) in CHAOSPODS {
        let chaos = chaospods.get(name).await?;
        let status = chaos.status.unwrap_or_default();
        let pod = pods.get_opt(name).await?.map_or("none".to_owned(), |p| {
            format!(
                "{} ({})",
                p.uid().unwrap_or_default(),
                p.status
                    .and_then(|s| s.phase)
                    .unwrap_or_else(|| "no phase".to_owned())
            )
        });
        let seen_running = ran.lock().is_ok_and(|r| r.contains(name));
        println!(
            "{name:<8} {:>5} {:>6}  {:<12} {pod}",
            status.runs,
            status.stops,
            if seen_running { "yes" } else { "no" }
        );
        // On the local control plane KWOK runs every Pod: one never seen Running means the
        // scheduler or the fake nodes did not do their part.
        if env.is_some() && !seen_running {
            println!("  ^ expected its Pod to reach Running on a fake node");
            ok = false;
        }
        // Long enough for a Pod's stop and the next start: each must have happened.
        if duration.as_secs() > period + 2 && (status.stops == 0 || status.runs < 2) {
            println!(
                "  ^ expected at least one stop and a restart in {} s",
                duration.as_secs()
            );
            ok = false;
        }
        // Each Pod counted once as a run and once as a stop: all but the running one (or,
        // caught between a stop and the next start, all of them) were stopped.
        if status.runs != status.stops && status.runs != status.stops + 1 {
            println!("  ^ runs and stops disagree: a Pod was counted twice or not at all");
            ok = false;
        }
    }
    let text = http_get(metrics, "/metrics").await?;
    println!("\nfrom http://{metrics}/metrics:");
    let mut reconciles = 0.0;
    let mut errors = None;
    for line in text.lines().filter(|l| {
        l.contains(&format!("controller=\"{}\"", chaospod::CONTROLLER))
            && (l.starts_with("controller_runtime_reconcile_total")
                || l.starts_with("controller_runtime_reconcile_errors_total")
                || l.starts_with("controller_runtime_active_workers"))
    }) {
        println!("  {line}");
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        if line.starts_with("controller_runtime_reconcile_total") {
            reconciles += value;
        } else if line.starts_with("controller_runtime_reconcile_errors_total") {
            errors = Some(value);
        }
    }
    println!(
        "reconciles: {reconciles}, errors: {}",
        errors.map_or("none".into(), |e| e.to_string())
    );
    if reconciles == 0.0 {
        println!("  ^ expected reconciles in the metrics");
        ok = false;
    }

    let started = Instant::now();
    stop.cancel();
    running.await??;
    clock.say(format_args!(
        "manager stopped cleanly in {:.2}s (workers drained, Lease released)",
        started.elapsed().as_secs_f64()
    ));
    Ok(ok)
}

/// Prints Pod starts and stops and ChaosPod status changes as they are seen.
///
/// Names of Pods seen `Running` are added to `ran`.
async fn narrate(
    clock: Clock,
    pods: Api<Pod>,
    chaospods: Api<ChaosPod>,
    ran: Arc<Mutex<HashSet<String>>>,
) {
    let pod_events = watcher(pods, watcher::Config::default()).map(Seen::Pod);
    let chaos_events = watcher(chaospods, watcher::Config::default()).map(Seen::Chaos);
    let mut events = std::pin::pin!(futures::stream::select(pod_events, chaos_events));
    let mut pods_seen: HashMap<String, String> = HashMap::new();
    // The uid of each Pod last said to run, so each run is told once.
    let mut running: HashMap<String, String> = HashMap::new();
    let mut counts: HashMap<String, (u32, u32)> = HashMap::new();
    while let Some(event) = events.next().await {
        match event {
            Seen::Pod(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                let uid = pod.uid().unwrap_or_default();
                if pods_seen.insert(pod.name_any(), uid.clone()).as_ref() != Some(&uid) {
                    clock.say(format_args!(
                        "pod {:<6} created  (uid {})",
                        pod.name_any(),
                        short(&uid)
                    ));
                }
                let status = pod.status.as_ref();
                if status.and_then(|s| s.phase.as_deref()) == Some("Running")
                    && running.insert(pod.name_any(), uid.clone()).as_ref() != Some(&uid)
                {
                    clock.say(format_args!(
                        "pod {:<6} Running  on {} (ip {})",
                        pod.name_any(),
                        pod.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_deref())
                            .unwrap_or("?"),
                        status.and_then(|s| s.pod_ip.as_deref()).unwrap_or("?")
                    ));
                    if let Ok(mut ran) = ran.lock() {
                        ran.insert(pod.name_any());
                    }
                }
            }
            Seen::Pod(Ok(watcher::Event::Delete(pod))) => {
                pods_seen.remove(&pod.name_any());
                let uid = pod.uid().unwrap_or_default();
                clock.say(format_args!(
                    "pod {:<6} deleted  (uid {})",
                    pod.name_any(),
                    short(&uid)
                ));
            }
            Seen::Chaos(Ok(watcher::Event::Apply(chaos) | watcher::Event::InitApply(chaos))) => {
                let Some(status) = chaos.status.as_ref() else {
                    continue;
                };
                let now = (status.runs, status.stops);
                if counts.insert(chaos.name_any(), now) != Some(now) {
                    let next = chaos.spec.next_stop.as_ref().map_or(String::new(), |t| {
                        format!(", next stop {}", t.0.strftime("%H:%M:%S"))
                    });
                    clock.say(format_args!(
                        "status {:<6} runs {}, stops {}{next}",
                        chaos.name_any(),
                        status.runs,
                        status.stops
                    ));
                }
            }
            Seen::Pod(Err(error)) | Seen::Chaos(Err(error)) => {
                clock.say(format_args!("(watch error, retrying: {error})"));
            }
            _ => {}
        }
    }
}

enum Seen {
    Pod(Result<watcher::Event<Pod>, watcher::Error>),
    Chaos(Result<watcher::Event<ChaosPod>, watcher::Error>),
}

fn short(uid: &str) -> &str {
    uid.get(..8).unwrap_or(uid)
}

/// Polls `check` every 50 ms until it gives a value, for at most 30 s.
async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> Result<T, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `/readyz` until it answers 200, for at most 30 s.
async fn wait_for_ready(health: SocketAddr) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = http_status(health, "/readyz").await.ok() == Some(200);
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err("the manager did not become ready in 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A minimal HTTP/1.0 GET on loopback: (status code, body).
async fn http(addr: SocketAddr, path: &str) -> Result<(u16, String), BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("malformed HTTP status line")?;
    Ok((code, body.to_owned()))
}

async fn http_status(addr: SocketAddr, path: &str) -> Result<u16, BoxError> {
    Ok(http(addr, path).await?.0)
}

async fn http_get(addr: SocketAddr, path: &str) -> Result<String, BoxError> {
    match http(addr, path).await? {
        (200, body) => Ok(body),
        (code, _) => Err(format!("GET {path} answered {code}").into()),
    }
}
