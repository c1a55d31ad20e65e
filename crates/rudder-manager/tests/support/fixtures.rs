//! Fixtures shared by rudder-manager's tests and benches on a real API server: managers
//! confined to a test namespace, ConfigMap controllers and their keys, ring and election
//! settings, ConfigMap creation, polling with a deadline, Lease inspection, replicas in child
//! processes (the calling test binary run again), and the benches' argument and load helpers.
//!
//! Included with `#[path = "support/fixtures.rs"] mod fixtures;` (tests) or
//! `#[path = "../tests/support/fixtures.rs"] mod fixtures;` (benches): each binary uses only
//! part of it.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(dead_code, clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use rudder_controller::{Controller, KeyLister};
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::poll::Poll;
use rudder_handler::{EnqueueObject, Kind};
use rudder_lease::leader_election::LeaderElectionConfig;
use rudder_lease::sharding::{Ring, ShardingConfig};
use rudder_manager::{Error, Manager, ManagerBuilder};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Microseconds since the epoch: one clock for child processes' logs and the test.
pub(crate) fn wall_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

/// A manager builder with no probe or metrics server, its cache confined to `namespace`.
pub(crate) fn manager_builder(client: kube::Client, namespace: &str) -> ManagerBuilder {
    let namespace = namespace.to_owned();
    Manager::builder(client)
        .health_probe_address(None)
        .metrics_address(None)
        .cache(move |c| c.default_namespace(namespace))
}

/// Leader election on the Lease `lease` in `namespace` as `who`, with the given lease
/// duration, renew deadline and retry period.
pub(crate) fn election(
    namespace: &str,
    lease: impl Into<String>,
    who: &str,
    (lease_duration, renew, retry): (Duration, Duration, Duration),
) -> LeaderElectionConfig {
    LeaderElectionConfig::new(namespace, lease)
        .with_identity(who)
        .with_lease_duration(lease_duration)
        .with_renew_deadline(renew)
        .with_retry_period(retry)
}

/// A ring's settings as the sharding tests and bench use them: `shards` shards, leases
/// 3 s, renew deadline 2 s, retry period 0.5 s.
pub(crate) fn sharding(
    namespace: &str,
    ring: impl Into<String>,
    who: impl Into<String>,
    shards: usize,
) -> ShardingConfig {
    ShardingConfig::new(namespace, ring)
        .with_identity(who)
        .with_shards(shards)
        .with_lease_duration(Duration::from_secs(3))
        .with_renew_deadline(Duration::from_secs(2))
        .with_retry_period(Duration::from_millis(500))
}

/// Makes `controller` watch the ConfigMaps in `manager`'s cache, each enqueuing itself.
pub(crate) fn watch_config_maps<R: Reconciler>(manager: &Manager, controller: &Controller<R>) {
    controller
        .watch(
            Kind::<ConfigMap>::from_cache(manager.cache()),
            EnqueueObject,
            vec![],
        )
        .unwrap();
}

/// The keys of every ConfigMap in `manager`'s cache (a sharded controller's key lister).
pub(crate) fn config_map_keys(manager: &Manager) -> KeyLister {
    let cache = manager.cache().clone();
    Arc::new(move || {
        cache
            .scopes::<ConfigMap>()
            .iter()
            .filter_map(|scope| cache.informer::<ConfigMap>(scope).ok())
            .flat_map(|informer| informer.store().list())
            .filter_map(|cm| Request::from_object(&*cm))
            .collect()
    })
}

/// Starts `manager` on a task of its own; cancel the token to stop it.
pub(crate) fn start(manager: Manager) -> (CancellationToken, JoinHandle<Result<(), Error>>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { manager.start(stop).await }
    });
    (stop, task)
}

/// Starts a shared `manager` on a task of its own; cancel the token to stop it.
pub(crate) fn start_shared(
    manager: &Arc<Manager>,
) -> (CancellationToken, JoinHandle<Result<(), Error>>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(manager), stop.clone());
        async move { manager.start(stop).await }
    });
    (stop, task)
}

/// Whether `manager` elects a leader and leads now.
pub(crate) fn leads(manager: &Manager) -> bool {
    manager.leader_election().is_some_and(|e| e.is_leader())
}

/// An empty ConfigMap named `name`.
pub(crate) fn config_map(name: impl Into<String>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// Creates `config_maps` in `api`, `concurrency` at a time (1: one after the other, in
/// order).
pub(crate) async fn create_config_maps(
    api: &Api<ConfigMap>,
    config_maps: impl IntoIterator<Item = ConfigMap>,
    concurrency: usize,
) {
    futures::stream::iter(config_maps)
        .map(|cm| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<()>()
        .await;
}

/// Changes the ConfigMap `name` every 100 ms (a counter in its data) until `stop` is
/// cancelled, so that whoever leads keeps reconciling; failed patches are ignored.
pub(crate) async fn churn(api: &Api<ConfigMap>, name: &str, stop: &CancellationToken) {
    let mut i = 0u64;
    while !stop.is_cancelled() {
        i += 1;
        let data = serde_json::json!({ "data": { "i": i.to_string() } });
        let _ = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&data))
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Makes `controller` watch the ConfigMaps in `manager`'s cache and take only the keys of
/// the shards `ring` holds.
pub(crate) fn shard_config_maps<R: Reconciler>(
    manager: &Manager,
    controller: &Controller<R>,
    ring: &Ring,
) {
    watch_config_maps(manager, controller);
    controller
        .set_shard_gate(ring.gate(), config_map_keys(manager))
        .unwrap();
}

/// Polls `check` every `every` until it holds; fails the test after `wait`.
pub(crate) async fn until(
    what: &str,
    wait: Duration,
    every: Duration,
    check: impl FnMut() -> bool,
) {
    Poll::new(what, wait).every(every).until(check).await;
}

/// The holder of the Lease `name` in `leases`' namespace (`None` if there is no such Lease
/// or it names no holder).
pub(crate) async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// A client from the kubeconfig file at `path` (in a child process).
pub(crate) async fn client_from_kubeconfig(path: &str) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A child process, killed when dropped (a failed assertion must not leave it running),
/// with its output lines.
pub(crate) struct Kid(pub(crate) Child, Receiver<String>);

impl Kid {
    /// Runs the test `test` of this test binary in a child process, with `spec` in the
    /// environment variable `var`; its output is echoed, each line prefixed with `[label]`.
    pub(crate) fn spawn(test: &str, var: &str, spec: String, label: &str) -> Kid {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(var, spec)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Keep reading its output (so it never blocks on a full pipe), echoing it.
        let stdout = child.stdout.take().unwrap();
        let label = label.to_owned();
        let (lines, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("[{label}] {line}");
                let _ = lines.send(line);
            }
        });
        Kid(child, received)
    }

    /// Waits (at most `wait`) for the child to print a line containing `word`.
    pub(crate) fn wait_for(&self, word: &str, wait: Duration) {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.1.recv_timeout(left) {
                Ok(line) if line.contains(word) => return,
                Ok(_) => {}
                Err(_) => panic!("the child never printed {word}"),
            }
        }
    }

    /// Sends `signal` (`kill`'s form: `-STOP`, `-CONT`, `-TERM`) to the child. For `-STOP`,
    /// returns once every thread of the child is stopped (state `T` in
    /// `/proc/PID/task/*/stat`): `kill` returns when the signal is queued, and on a loaded
    /// machine a thread can run on for a moment after, so a time taken when `kill` returns is
    /// not yet "frozen".
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        if signal == "-STOP" {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !self.all_threads_stopped() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the child's threads did not stop within 10 s of SIGSTOP"
                );
                std::thread::yield_now();
            }
        }
    }

    /// Whether every thread of the child is in state `T` (stopped by a signal).
    fn all_threads_stopped(&self) -> bool {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.0.id())) else {
            return false;
        };
        tasks.flatten().all(|task| {
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                // The state follows the command name, which is in parentheses.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    == Some("T")
            })
        })
    }

    /// Polls (every 20 ms, at most `wait`) until the child exits; its exit code.
    pub(crate) async fn exit_code(&mut self, wait: Duration, what: &str) -> Option<i32> {
        Poll::new(what, wait)
            .every(Duration::from_millis(20))
            .eventually(async || self.0.try_wait().unwrap().map(|status| status.code()))
            .await
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A bench's arguments, if it is to run: with `--bench` among them (`cargo bench`), not
/// without (`cargo test --benches`).
pub(crate) fn bench_args() -> Option<Vec<String>> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench").then_some(args)
}

/// A multi-threaded runtime with 2 workers, I/O and time enabled.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The 1, 5 and 15 minute load averages (`?` if unreadable).
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".to_owned(),
        |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// The number after `name` in a bench's arguments, or `default`.
pub(crate) fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
