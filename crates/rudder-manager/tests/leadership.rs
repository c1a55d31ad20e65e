//! Two managers on one lease: only the leader runs its controller, and hand-overs happen as
//! configured.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{config_map, holder, manager_builder, start_shared, watch_config_maps};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_manager::{Error, Manager};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);

/// (manager, start, end) of every reconcile, across both managers.
type Log = Arc<Mutex<Vec<(&'static str, Instant, Instant)>>>;

struct Timed {
    who: &'static str,
    log: Log,
}

impl Reconciler for Timed {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        let start = Instant::now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.log
            .lock()
            .unwrap()
            .push((self.who, start, Instant::now()));
        Ok(Action::done())
    }
}

struct Replica {
    manager: Arc<Manager>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
}

fn replica(
    ns: &TestNamespace,
    lease: &str,
    who: &'static str,
    release: bool,
    log: &Log,
) -> Replica {
    let election = fixtures::election(ns.name(), lease, who, (LEASE, RENEW, RETRY))
        .with_release_on_cancel(release);
    let manager = manager_builder(ns.client(), ns.name())
        .leader_election(election)
        .build()
        .unwrap();
    let controller = Controller::builder(
        format!("{lease}-{who}"),
        Timed {
            who,
            log: Arc::clone(log),
        },
    )
    .build()
    .unwrap();
    watch_config_maps(&manager, &controller);
    manager.add_controller(controller);
    let manager = Arc::new(manager);
    let (stop, task) = start_shared(&manager);
    Replica {
        manager,
        stop,
        task,
    }
}

fn leads(r: &Replica) -> bool {
    fixtures::leads(&r.manager)
}

/// Keeps changing a ConfigMap so that whoever leads keeps reconciling.
fn churn(ns: &TestNamespace, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let api: Api<ConfigMap> = Api::namespaced(ns.client(), ns.name());
    tokio::spawn(async move {
        api.create(&PostParams::default(), &config_map("churn"))
            .await
            .unwrap();
        fixtures::churn(&api, "churn", &stop).await;
    })
}

/// Waits (at most 30 s) until exactly one replica leads; returns its index.
async fn one_leader(replicas: &[&Replica]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leading: Vec<_> = (0..replicas.len())
            .filter(|&i| leads(replicas[i]))
            .collect();
        assert!(leading.len() <= 1, "two leaders at once");
        if let [i] = leading[..] {
            return i;
        }
        assert!(Instant::now() < deadline, "nobody became leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first reconcile by `who` that started after `after`, waiting at most 30 s.
async fn first_reconcile_after(log: &Log, who: &str, after: Instant) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let first = log
            .lock()
            .unwrap()
            .iter()
            .filter(|(w, start, _)| *w == who && *start >= after)
            .map(|(_, start, _)| *start)
            .min();
        if let Some(first) = first {
            return first;
        }
        assert!(Instant::now() < deadline, "{who} never reconciled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every reconcile by one replica ends before any by the other starts.
fn never_both(log: &Log, first: &str, second: &str) {
    let log = log.lock().unwrap();
    let last_first = log.iter().filter(|(w, ..)| *w == first).map(|e| e.2).max();
    let first_second = log.iter().filter(|(w, ..)| *w == second).map(|e| e.1).min();
    if let (Some(end), Some(start)) = (last_first, first_second) {
        assert!(end <= start, "{second} reconciled while {first} still did");
    }
}

async fn handover(release: bool, kill: bool) -> Duration {
    let env = TestEnv::builder().shared().await.unwrap();
    let name = match (release, kill) {
        (true, _) => "release",
        (false, false) => "expire",
        (false, true) => "killed",
    };
    let ns = env.namespace(name).await.unwrap();
    let log: Log = Arc::default();
    let a = replica(&ns, name, "a", release, &log);
    // Let `a` lead before `b` starts, so the roles are known.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !leads(&a) {
        assert!(Instant::now() < deadline, "a never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = replica(&ns, name, "b", release, &log);
    let churning = CancellationToken::new();
    let churner = churn(&ns, churning.clone());
    assert_eq!(one_leader(&[&a, &b]).await, 0);
    first_reconcile_after(&log, "a", Instant::now()).await;
    // b runs but does not lead: it must not reconcile.
    tokio::time::sleep(LEASE).await;
    assert!(
        log.lock().unwrap().iter().all(|(w, ..)| *w == "a"),
        "the follower reconciled"
    );

    let stopped = Instant::now();
    if kill {
        a.task.abort();
        let _ = a.task.await;
    } else {
        a.stop.cancel();
        a.task.await.unwrap().unwrap();
    }
    let took = first_reconcile_after(&log, "b", stopped).await - stopped;
    never_both(&log, "a", "b");
    churning.cancel();
    churner.await.unwrap();
    b.stop.cancel();
    b.task.await.unwrap().unwrap();
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_on_cancel_hands_over_within_a_retry_period() {
    let took = handover(true, false).await;
    println!("hand-over with release: {took:?}");
    // One retry period (plus jitter up to 1.2x) and the follower's cache sync and first
    // reconcile; well under the lease.
    assert!(took < RETRY * 3 + Duration::from_secs(1), "{took:?}");
    assert!(took < LEASE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_release_the_follower_waits_out_the_lease() {
    let took = handover(false, false).await;
    println!("hand-over without release: {took:?}");
    assert!(took >= LEASE - RETRY, "{took:?}");
    assert!(
        took < LEASE + RETRY * 3 + Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_after_the_lease_expires() {
    let took = handover(false, true).await;
    println!("hand-over after a kill: {took:?}");
    assert!(took >= LEASE - RETRY, "{took:?}");
    assert!(
        took < LEASE + RETRY * 3 + Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_the_controller_and_ends_the_manager() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("lost").await.unwrap();
    let log: Log = Arc::default();
    let a = replica(&ns, "lost", "a", false, &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !leads(&a) {
        assert!(Instant::now() < deadline, "a never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Someone else takes the Lease over, as a Go replica with a newer record would.
    let leases: Api<Lease> = Api::namespaced(ns.client(), ns.name());
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let patch = serde_json::json!({
        "spec": {
            "holderIdentity": "intruder",
            "leaseDurationSeconds": 60,
            "acquireTime": now,
            "renewTime": now,
        }
    });
    leases
        .patch("lost", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let overwritten = Instant::now();
    let Replica { manager, task, .. } = a;
    let ended = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ended, Err(Error::LeadershipLost)), "{ended:?}");
    let took = overwritten.elapsed();
    assert!(
        took < RENEW + RETRY * 3 + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(!manager.leader_election().unwrap().is_leader());
    assert_eq!(
        holder(&leases, "lost").await.as_deref(),
        Some("intruder"),
        "the loser did not write it back"
    );
}
