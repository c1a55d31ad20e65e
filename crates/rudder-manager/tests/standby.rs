//! Warm standby and the leader gate on a real API server: a replica that does not lead keeps
//! its controllers' caches synced and queues filled but reconciles nothing; a leader whose
//! renewals fail stops reconciling at the renew deadline; a leader frozen (SIGSTOP) past its
//! lease and resumed starts no reconcile and ends with `LeadershipLost`.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{
    Kid, client_from_kubeconfig, config_map, holder, manager_builder, start_shared, until,
    wall_micros, watch_config_maps,
};

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_core::runnable;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_manager::{Error, Manager};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);
const WAIT: Duration = Duration::from_secs(30);
const TIMINGS: (Duration, Duration, Duration) = (LEASE, RENEW, RETRY);

/// (replica, start) of every reconcile.
type Log = Arc<Mutex<Vec<(&'static str, Instant)>>>;

struct Timed {
    who: &'static str,
    log: Log,
    again: Option<Duration>,
}

impl Reconciler for Timed {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        self.log.lock().unwrap().push((self.who, Instant::now()));
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(match self.again {
            Some(after) => Action::requeue_after(after),
            None => Action::done(),
        })
    }
}

struct Replica {
    manager: Arc<Manager>,
    controller: Controller<Timed>,
    leader_runnable_started: Arc<AtomicUsize>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

struct Setup<'a> {
    ns: &'a TestNamespace,
    lease: &'a str,
    warm: bool,
    again: Option<Duration>,
    client: Option<kube::Client>,
}

fn replica(setup: &Setup<'_>, who: &'static str, log: &Log) -> Replica {
    let election =
        fixtures::election(setup.ns.name(), setup.lease, who, TIMINGS).with_release_on_cancel(true);
    let client = setup.client.clone().unwrap_or_else(|| setup.ns.client());
    let manager = manager_builder(client, setup.ns.name())
        .health_probe_address(Some("127.0.0.1:0".parse().unwrap()))
        .leader_election(election)
        .warm_standby(setup.warm)
        .build()
        .unwrap();
    let controller = Controller::builder(
        format!("{}-{who}", setup.lease),
        Timed {
            who,
            log: Arc::clone(log),
            again: setup.again,
        },
    )
    .build()
    .unwrap();
    watch_config_maps(&manager, &controller);
    manager.add_controller(controller.clone());
    // A leader-only runnable that takes no gate: it must start only once this replica leads.
    let leader_runnable_started = Arc::new(AtomicUsize::new(0));
    let started = Arc::clone(&leader_runnable_started);
    manager.add(runnable("leader-only", true, move |shutdown| async move {
        started.fetch_add(1, Ordering::SeqCst);
        shutdown.stopped().await;
        Ok(())
    }));
    let manager = Arc::new(manager);
    let (stop, task) = start_shared(&manager);
    Replica {
        manager,
        controller,
        leader_runnable_started,
        stop,
        task,
    }
}

/// The status code of `GET path` on the replica's probe server.
async fn probe(r: &Replica, path: &str) -> u16 {
    let addr = r.manager.health_address().unwrap();
    rudder_envtest::http::get(addr, path).await.unwrap().status
}

fn leads(r: &Replica) -> bool {
    fixtures::leads(&r.manager)
}

async fn eventually(what: &str, check: impl FnMut() -> bool) {
    until(what, WAIT, Duration::from_millis(10), check).await;
}

/// Creates empty ConfigMaps named `names`, one after the other.
async fn create_config_maps(ns: &TestNamespace, names: impl IntoIterator<Item = String>) {
    fixtures::create_config_maps(&ns.api(), names.into_iter().map(config_map), 1).await;
}

fn reconciles_by(log: &Log, who: &str) -> Vec<Instant> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(w, _)| *w == who)
        .map(|(_, at)| *at)
        .collect()
}

/// With warm standby, the follower's controller syncs and queues while it reconciles
/// nothing; on the leader's release it reconciles what it queued at once. A gateless
/// leader-only runnable starts only on acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_standby_queues_without_reconciling_and_reconciles_on_takeover() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("warm").await.unwrap();
    create_config_maps(&ns, (0..20).map(|i| format!("cm-{i}"))).await;
    let log: Log = Arc::default();
    let setup = Setup {
        ns: &ns,
        lease: "warm",
        warm: true,
        again: None,
        client: None,
    };
    let a = replica(&setup, "a", &log);
    eventually("a to lead", || leads(&a)).await;
    let b = replica(&setup, "b", &log);
    eventually("b's controller to sync while a leads", || {
        b.controller.has_synced()
    })
    .await;
    eventually("b to queue every object", || {
        b.controller.queue().len() >= 20
    })
    .await;
    let queued = b.controller.queue().len();
    // A change while b follows is queued (one more key), not reconciled.
    create_config_maps(&ns, ["late".to_owned()]).await;
    eventually("b to queue the new object", || {
        b.controller.queue().len() == queued + 1
    })
    .await;
    assert!(leads(&a) && !leads(&b));
    assert!(
        reconciles_by(&log, "b").is_empty(),
        "the follower reconciled"
    );
    // A warm follower is ready: its controller's sources have synced.
    assert_eq!(probe(&b, "/readyz").await, 200);
    assert_eq!(b.leader_runnable_started.load(Ordering::SeqCst), 0);
    assert_eq!(a.leader_runnable_started.load(Ordering::SeqCst), 1);

    let released = Instant::now();
    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    eventually("b to reconcile", || !reconciles_by(&log, "b").is_empty()).await;
    let first = reconciles_by(&log, "b")[0];
    println!(
        "warm standby: release -> first reconcile {:?}",
        first - released
    );
    // `released` is when a was told to stop: a still leads until its validity ends, just
    // before the release is written, and a request its workers took before that may start
    // a moment after `released`. What must hold is that the two never reconcile at once:
    // b starts only once it holds the Lease, after a gave it up.
    assert!(
        reconciles_by(&log, "a").iter().all(|at| *at < first),
        "a reconciled after b started"
    );
    eventually("b to reconcile all it queued", || {
        reconciles_by(&log, "b").len() > queued
    })
    .await;
    assert_eq!(b.leader_runnable_started.load(Ordering::SeqCst), 1);
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
}

/// Without warm standby, the follower's controller does not start before it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_warm_standby_controllers_start_on_acquire() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("cold").await.unwrap();
    create_config_maps(&ns, (0..5).map(|i| format!("cm-{i}"))).await;
    let log: Log = Arc::default();
    let setup = Setup {
        ns: &ns,
        lease: "cold",
        warm: false,
        again: None,
        client: None,
    };
    let a = replica(&setup, "a", &log);
    eventually("a to lead", || leads(&a)).await;
    eventually("a to reconcile", || reconciles_by(&log, "a").len() >= 5).await;
    let b = replica(&setup, "b", &log);
    // b runs as a follower for a while: its controller never starts (so b is not ready).
    eventually("b's probe server", || b.manager.health_address().is_some()).await;
    let until = Instant::now() + LEASE;
    while Instant::now() < until {
        assert!(!b.controller.has_synced(), "b's controller started");
        assert!(b.controller.queue().is_empty());
        assert_ne!(probe(&b, "/readyz").await, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reconciles_by(&log, "b").is_empty());
    a.stop.cancel();
    a.task.await.unwrap().unwrap();
    eventually("b to reconcile every object", || {
        reconciles_by(&log, "b").len() >= 5
    })
    .await;
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
}

/// A TCP proxy to the API server that can be cut: every connection closed, new ones
/// refused.
async fn proxy(target: String, cut: CancellationToken) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = cut.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((mut inbound, _)) = accepted else {
                continue;
            };
            let (target, cut) = (target.clone(), cut.clone());
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(&target).await else {
                    return;
                };
                tokio::select! {
                    () = cut.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                }
            });
        }
    });
    addr
}

/// A leader that cannot reach the API server stops reconciling when its renew deadline
/// (counted from its last successful renewal) passes, though its queue keeps a key that
/// asks to run every 50 ms, and its manager ends with `LeadershipLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_fail_stops_reconciling_at_the_renew_deadline() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("unreachable").await.unwrap();
    create_config_maps(&ns, ["tick".to_owned()]).await;
    let url = env.config().cluster_url.clone();
    let target = format!("{}:{}", url.host().unwrap(), url.port_u16().unwrap_or(443));
    let cut = CancellationToken::new();
    let through = proxy(target, cut.clone()).await;
    let mut config = env.config().clone();
    config.cluster_url = format!("https://{through}").parse().unwrap();
    // Requests through a cut proxy fail fast; keep the client's own timeouts short anyway.
    config.connect_timeout = Some(Duration::from_millis(500));
    config.read_timeout = Some(Duration::from_secs(1));
    let client = kube::Client::try_from(config).unwrap();
    let log: Log = Arc::default();
    let setup = Setup {
        ns: &ns,
        lease: "unreachable",
        warm: true,
        again: Some(Duration::from_millis(50)),
        client: Some(client),
    };
    let a = replica(&setup, "a", &log);
    eventually("a to lead", || leads(&a)).await;
    eventually("a to reconcile", || reconciles_by(&log, "a").len() >= 5).await;
    let cut_at = Instant::now();
    cut.cancel();
    let Replica { task, .. } = a;
    let ended = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    assert!(matches!(ended, Err(Error::LeadershipLost)), "{ended:?}");
    let last = *reconciles_by(&log, "a").last().unwrap();
    println!(
        "cut at +0; last reconcile started at {:?} after the cut; manager ended {:?} after",
        last.saturating_duration_since(cut_at),
        cut_at.elapsed()
    );
    // The last successful renewal was sent before the cut: nothing starts past its renew
    // deadline (50 ms of slack for one reconcile's scheduling).
    assert!(
        last < cut_at + RENEW + Duration::from_millis(50),
        "reconciled {:?} after the cut",
        last - cut_at
    );
    // And it kept reconciling until close to it: the last successful renewal was sent at
    // most a retry period (and its jitter) before the cut, so the gate did not close early.
    assert!(
        last > cut_at + RENEW - RETRY * 2,
        "stopped {:?} after the cut",
        last.saturating_duration_since(cut_at)
    );
}

const CHILD: &str = "RUDDER_SPLIT_BRAIN_CHILD";

/// Writes one line per reconcile start (wall-clock microseconds) to a file.
struct FileLogged(Mutex<std::fs::File>);

impl Reconciler for FileLogged {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        let line = format!("{}\n", wall_micros());
        let mut file = self.0.lock().unwrap();
        file.write_all(line.as_bytes()).unwrap();
        file.flush().unwrap();
        Ok(Action::done())
    }
}

/// In the child: a replica (`kubeconfig namespace identity log`) with a ConfigMap controller
/// that logs each reconcile start; exits 3 on `LeadershipLost`, 0 on a clean stop, 4 on
/// anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_child() {
    let Ok(spec) = std::env::var(CHILD) else {
        return; // Only meaningful as the child of the test below.
    };
    let [kubeconfig, namespace, who, log]: [&str; 4] =
        spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let client = client_from_kubeconfig(kubeconfig).await;
    let manager = manager_builder(client, namespace)
        .leader_election(fixtures::election(namespace, "split-brain", who, TIMINGS))
        .build()
        .unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let controller = Controller::builder("split-brain", FileLogged(Mutex::new(file)))
        .build()
        .unwrap();
    watch_config_maps(&manager, &controller);
    manager.add_controller(controller.clone());
    // Say when the controller's sources have synced (on a follower: warm standby).
    tokio::spawn(async move {
        while !controller.has_synced() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("synced");
    });
    println!("started");
    let result = manager.start_until_signal().await;
    println!("ended: {result:?}");
    std::process::exit(match result {
        Ok(()) => 0,
        Err(Error::LeadershipLost) => 3,
        Err(_) => 4,
    });
}

fn spawn_child(env: &TestEnv, ns: &TestNamespace, who: &str, log: &std::path::Path) -> Kid {
    let spec = format!(
        "{}|{}|{who}|{}",
        env.kubeconfig_path().display(),
        ns.name(),
        log.display()
    );
    Kid::spawn("split_brain_child", CHILD, spec, who)
}

fn read_log(path: &std::path::Path) -> Vec<u128> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// The scenario: two replicas (lease 3 s, renew 2 s, retry 0.5 s) on a churning
/// object, the leader frozen with SIGSTOP for 10 s while the other takes over, then
/// resumed: it starts no reconcile after resuming, and its manager ends with
/// `LeadershipLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_resumed_after_its_lease_reconciles_nothing_and_ends() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("split-brain").await.unwrap();
    let dir = std::env::temp_dir().join(format!("rudder-split-brain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
    let leases: Api<Lease> = ns.api();

    // Churn: an object changing every 100 ms, so whoever leads keeps reconciling.
    create_config_maps(&ns, ["churn".to_owned()]).await;
    let churning = CancellationToken::new();
    let churner = tokio::spawn({
        let (api, stop) = (ns.api::<ConfigMap>(), churning.clone());
        async move { fixtures::churn(&api, "churn", &stop).await }
    });

    let mut a = spawn_child(env, &ns, "a", &log_a);
    let deadline = Instant::now() + WAIT;
    while !(holder(&leases, "split-brain").await.as_deref() == Some("a")
        && read_log(&log_a).len() >= 3)
    {
        assert!(Instant::now() < deadline, "a never led and reconciled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut b = spawn_child(env, &ns, "b", &log_b);
    // b comes up as a warm follower: its controller syncs while a leads.
    tokio::task::block_in_place(|| b.wait_for("synced", WAIT));
    assert_eq!(holder(&leases, "split-brain").await.as_deref(), Some("a"));
    assert!(read_log(&log_b).is_empty(), "the follower reconciled");

    a.signal("-STOP");
    let stopped = wall_micros();
    let frozen = Instant::now();
    let deadline = frozen + Duration::from_secs(10);
    while holder(&leases, "split-brain").await.as_deref() != Some("b") {
        assert!(Instant::now() < deadline, "b did not take over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took_over = frozen.elapsed();
    // The freeze itself is the scenario: 10 s, then resume.
    tokio::time::sleep_until(frozen + Duration::from_secs(10)).await;
    let resumed = wall_micros();
    a.signal("-CONT");

    let code = a.exit_code(WAIT, "a did not exit after resuming").await;
    let ended = Instant::now();
    let a_log = read_log(&log_a);
    let after_stop = a_log.iter().filter(|&&t| t >= stopped).count();
    let after_resume = a_log.iter().filter(|&&t| t >= resumed).count();
    // b keeps leading and reconciling.
    let b_before = read_log(&log_b).len();
    let deadline = Instant::now() + WAIT;
    while read_log(&log_b).len() <= b_before {
        assert!(Instant::now() < deadline, "b stopped reconciling");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "b held the Lease {took_over:?} after the freeze; a exited {:?} after resuming with \
         code {code:?}; a reconciled {} times before the freeze, {after_stop} after it \
         ({after_resume} after resuming); b {} times",
        ended - frozen - Duration::from_secs(10),
        a_log.len() - after_stop,
        read_log(&log_b).len(),
    );
    assert_eq!(after_resume, 0, "the resumed leader reconciled");
    assert_eq!(after_stop, 0, "the frozen leader reconciled");
    assert_eq!(code, Some(3), "a did not end with LeadershipLost");
    assert_eq!(holder(&leases, "split-brain").await.as_deref(), Some("b"));

    churning.cancel();
    churner.await.unwrap();
    b.signal("-TERM");
    b.exit_code(WAIT, "b did not stop").await;
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
