//! Leader election against a real API server: one leader, handover with and without release,
//! a Lease written as client-go writes it, renewal and loss, the status metric.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use metrics_exporter_prometheus::PrometheusBuilder;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_lease::leader_election::{
    ConfigError, Error, LeaderElection, LeaderElectionConfig, Leadership,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);
const NAME: &str = "lock";

fn now() -> MicroTime {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    MicroTime(Timestamp::from_microsecond(i64::try_from(since.as_micros()).unwrap()).unwrap())
}

async fn namespace(test: &str) -> TestNamespace {
    let env = TestEnv::builder().shared().await.unwrap();
    env.namespace(test).await.unwrap()
}

fn config(ns: &TestNamespace, identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig::new(ns.name(), NAME)
        .with_identity(identity)
        .with_lease_duration(LEASE)
        .with_renew_deadline(RENEW)
        .with_retry_period(RETRY)
}

fn elector(ns: &TestNamespace, identity: &str, release: bool) -> LeaderElection {
    LeaderElection::new(
        ns.client(),
        config(ns, identity).with_release_on_cancel(release),
    )
    .unwrap()
}

/// Starts acquiring in a task, so the test can watch while the candidate waits.
fn spawn_acquire(
    election: &LeaderElection,
    cancel: &CancellationToken,
) -> JoinHandle<Result<Leadership, Error>> {
    let election = election.clone();
    let cancel = cancel.clone();
    tokio::spawn(async move { election.acquire(cancel).await })
}

async fn lease(ns: &TestNamespace) -> LeaseSpec {
    ns.api::<Lease>().get(NAME).await.unwrap().spec.unwrap()
}

async fn holder(ns: &TestNamespace) -> Option<String> {
    ns.api::<Lease>()
        .get_opt(NAME)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Checks for `window` that `leader` leads, `waiting` does not, and the Lease names `leader`.
async fn assert_sole_leader(
    ns: &TestNamespace,
    leader: &LeaderElection,
    waiting: &LeaderElection,
    window: Duration,
) {
    let end = Instant::now() + window;
    while Instant::now() < end {
        assert!(leader.is_leader());
        assert!(!waiting.is_leader());
        assert_eq!(holder(ns).await.as_deref(), Some(leader.identity()));
        sleep(Duration::from_millis(100)).await;
    }
}

/// Leads with `a`, starts `b` waiting, stops `a` (cancel, or drop when `kill`), and returns
/// how long `b` took to acquire after that.
async fn handover(ns: &TestNamespace, release: bool, kill: bool) -> Duration {
    let a = elector(ns, "a", release);
    let b = elector(ns, "b", release);
    let stop_a = CancellationToken::new();
    let stop_b = CancellationToken::new();
    let leadership_a = timeout(LEASE * 2, a.acquire(stop_a.clone()))
        .await
        .unwrap()
        .unwrap();
    let b_acquiring = spawn_acquire(&b, &stop_b);
    assert_sole_leader(ns, &a, &b, LEASE + RETRY).await;

    let stopped = Instant::now();
    if kill {
        drop(leadership_a);
    } else {
        stop_a.cancel();
        leadership_a.finished().await.unwrap();
    }
    assert!(!a.is_leader());
    let leadership_b = timeout(LEASE * 3, b_acquiring)
        .await
        .expect("b acquires")
        .unwrap()
        .unwrap();
    let took = stopped.elapsed();
    assert!(b.is_leader());
    assert_eq!(holder(ns).await.as_deref(), Some("b"));
    assert_eq!(lease(ns).await.lease_transitions, Some(1));
    stop_b.cancel();
    leadership_b.finished().await.unwrap();
    took
}

#[tokio::test]
async fn two_candidates_one_lease_exactly_one_leads() {
    let ns = namespace("two_candidates_one_lease_exactly_one_leads").await;
    let a = elector(&ns, "a", false);
    let b = elector(&ns, "b", false);
    let cancel = CancellationToken::new();
    let mut a_acquiring = spawn_acquire(&a, &cancel);
    let mut b_acquiring = spawn_acquire(&b, &cancel);

    let (leader, waiting, leadership, still_acquiring) = tokio::select! {
        r = &mut a_acquiring => (&a, &b, r.unwrap().unwrap(), b_acquiring),
        r = &mut b_acquiring => (&b, &a, r.unwrap().unwrap(), a_acquiring),
    };
    // Longer than a lease: the waiting one does not take over a renewed Lease.
    assert_sole_leader(&ns, leader, waiting, LEASE * 2).await;
    assert!(!leadership.is_lost());
    let spec = lease(&ns).await;
    assert_eq!(spec.lease_duration_seconds, Some(3));
    assert_eq!(spec.lease_transitions, Some(0));

    cancel.cancel();
    assert!(matches!(
        still_acquiring.await.unwrap(),
        Err(Error::Cancelled { .. })
    ));
    leadership.finished().await.unwrap();
    assert!(!leader.is_leader());
}

#[tokio::test]
async fn release_on_cancel_hands_over_within_a_retry_period() {
    let ns = namespace("release_on_cancel_hands_over_within_a_retry_period").await;
    let took = handover(&ns, true, false).await;
    // The successor waits at most 2.2 retry periods between attempts.
    assert!(took < LEASE, "handover took {took:?}");
    assert!(
        took < RETRY.mul_f64(2.2) + Duration::from_secs(1),
        "handover took {took:?}"
    );
}

/// client-go's default timings (15 s / 10 s / 2 s), with release on cancel.
fn default_timings(ns: &TestNamespace, identity: &str) -> LeaderElection {
    let config = LeaderElectionConfig::new(ns.name(), NAME)
        .with_identity(identity)
        .with_release_on_cancel(true);
    LeaderElection::new(ns.client(), config).unwrap()
}

/// The watch's goal: with client-go's default timings, the successor holds the Lease within
/// 200 ms of the release, every round; polling alone would wait for its next retry, 1.7 s to
/// 4.1 s after the release here.
#[tokio::test]
async fn a_released_lease_is_taken_over_within_200ms_by_a_watching_candidate() {
    let ns = namespace("a_released_lease_is_taken_over_within_200ms").await;
    let mut took = Vec::new();
    let mut leader = default_timings(&ns, "round-0");
    let mut stop = CancellationToken::new();
    let mut leadership = timeout(Duration::from_secs(5), leader.acquire(stop.clone()))
        .await
        .unwrap()
        .unwrap();
    for round in 1..=5 {
        let successor = default_timings(&ns, &format!("round-{round}"));
        let stop_successor = CancellationToken::new();
        let acquiring = spawn_acquire(&successor, &stop_successor);
        // The successor's first attempt finds the Lease held; its next poll is 2 s to 4.4 s
        // away, so only the watch can explain a takeover within 200 ms.
        assert_sole_leader(&ns, &leader, &successor, Duration::from_millis(300)).await;

        let released = Instant::now();
        stop.cancel();
        let held = timeout(Duration::from_secs(5), acquiring)
            .await
            .expect("the successor acquires")
            .unwrap()
            .unwrap();
        took.push(released.elapsed());
        leadership.finished().await.unwrap();
        assert!(!leader.is_leader());
        assert_eq!(holder(&ns).await.as_deref(), Some(successor.identity()));
        assert_eq!(lease(&ns).await.lease_transitions, Some(round));
        (leader, stop, leadership) = (successor, stop_successor, held);
    }
    stop.cancel();
    leadership.finished().await.unwrap();
    assert!(
        took.iter().all(|t| *t < Duration::from_millis(200)),
        "takeovers took {took:?}"
    );
}

/// A deleted Lease is tried at once too; the old leader, whose next renewal finds the
/// successor holding the Lease, loses leadership then.
#[tokio::test]
async fn a_deleted_lease_is_taken_over_at_once_by_a_watching_candidate() {
    let ns = namespace("a_deleted_lease_is_taken_over_at_once").await;
    let a = default_timings(&ns, "a");
    let b = default_timings(&ns, "b");
    let stop_a = CancellationToken::new();
    let stop_b = CancellationToken::new();
    let leadership_a = timeout(Duration::from_secs(5), a.acquire(stop_a.clone()))
        .await
        .unwrap()
        .unwrap();
    let acquiring = spawn_acquire(&b, &stop_b);
    assert_sole_leader(&ns, &a, &b, Duration::from_millis(300)).await;

    let deleted = Instant::now();
    ns.api::<Lease>()
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    let leadership_b = timeout(Duration::from_secs(5), acquiring)
        .await
        .expect("b acquires")
        .unwrap()
        .unwrap();
    let took = deleted.elapsed();
    assert!(took < Duration::from_millis(200), "took {took:?}");
    assert_eq!(holder(&ns).await.as_deref(), Some("b"));
    // a renews every 2 s; its renewal finds b holding the Lease and it stops at once.
    timeout(Duration::from_secs(5), leadership_a.lost())
        .await
        .expect("a sees the loss at its next renewal");
    assert!(!a.is_leader());
    assert_eq!(*a.validity().borrow(), None);
    assert!(b.is_leader());
    stop_b.cancel();
    leadership_b.finished().await.unwrap();
}

#[tokio::test]
async fn a_killed_leader_is_replaced_once_its_lease_expires() {
    let ns = namespace("a_killed_leader_is_replaced_once_its_lease_expires").await;
    assert_taken_over_at_expiry(handover(&ns, false, true).await);
}

#[tokio::test]
async fn a_leader_stopped_without_release_is_replaced_once_its_lease_expires() {
    let ns = namespace("a_leader_stopped_without_release_is_replaced_once_its_lease_expires").await;
    assert_taken_over_at_expiry(handover(&ns, false, false).await);
}

/// A Lease left to expire is taken over a lease duration after its last renewal, which was
/// at most a retry period (plus a request) before the old leader went; and within the
/// retries (jittered) that follow.
fn assert_taken_over_at_expiry(took: Duration) {
    assert!(
        took >= LEASE - RETRY - Duration::from_millis(300),
        "handover took {took:?}"
    );
    assert!(
        took < LEASE + RETRY.mul_f64(4.4) + Duration::from_secs(1),
        "handover took {took:?}"
    );
}

#[tokio::test]
async fn a_lease_written_by_client_go_is_taken_over_once_it_expires() {
    let ns = namespace("a_lease_written_by_client_go_is_taken_over_once_it_expires").await;
    let go_time = now();
    let go_lease = Lease {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("go-leader".into()),
            lease_duration_seconds: Some(3),
            acquire_time: Some(go_time.clone()),
            renew_time: Some(go_time.clone()),
            lease_transitions: Some(4),
            ..LeaseSpec::default()
        }),
    };
    ns.api::<Lease>()
        .create(&PostParams::default(), &go_lease)
        .await
        .unwrap();
    let written = Instant::now();

    let rudder = elector(&ns, "rudder", false);
    let cancel = CancellationToken::new();
    let leadership = timeout(LEASE * 3, rudder.acquire(cancel.clone()))
        .await
        .unwrap()
        .unwrap();
    let took = written.elapsed();
    assert!(took >= LEASE, "took over after {took:?}");

    let spec = lease(&ns).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("rudder"));
    assert_eq!(spec.lease_transitions, Some(5));
    assert_eq!(spec.lease_duration_seconds, Some(3));
    let acquired = spec.acquire_time.unwrap();
    assert!(
        acquired > go_time,
        "acquireTime {acquired:?} not after {go_time:?}"
    );
    assert!(spec.renew_time.unwrap() >= acquired);

    cancel.cancel();
    leadership.finished().await.unwrap();
}

/// Waits until `leadership` is lost, which must happen within a renewal round after `since`:
/// the first round starts within a retry period (plus a request) and gives up after the
/// renew deadline.
async fn assert_lost_within_renew_deadline(
    a: &LeaderElection,
    leadership: Leadership,
    since: Instant,
) {
    let lost = timeout(RENEW + RETRY * 4, leadership.lost())
        .await
        .expect("leadership lost");
    let took = since.elapsed();
    assert!(
        took <= RENEW + RETRY + Duration::from_secs(1),
        "lost after {took:?}"
    );
    assert_eq!(lost.identity, a.identity());
    assert!(leadership.is_lost());
    assert!(!a.is_leader());
    assert_eq!(leadership.finished().await, Err(lost));
}

/// A TCP proxy to the API server that can turn into a black hole: connections open, nothing
/// answered, as when the API server is unreachable.
struct Proxy {
    addr: std::net::SocketAddr,
    cut: CancellationToken,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = CancellationToken::new();
        let task = tokio::spawn({
            let cut = cut.clone();
            async move {
                let mut held = Vec::new();
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        return;
                    };
                    if cut.is_cancelled() {
                        held.push(inbound);
                        continue;
                    }
                    let (upstream, cut) = (upstream.clone(), cut.clone());
                    tokio::spawn(async move {
                        let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await
                        else {
                            return;
                        };
                        // Cutting drops both sides of every forwarded connection.
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            () = cut.cancelled() => {}
                        }
                    });
                }
            }
        });
        Self { addr, cut, task }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// With the API server unreachable, leadership is lost exactly at the renew deadline
/// counted from when the last successful renewal was sent.
#[tokio::test]
async fn an_unreachable_api_server_is_a_loss_at_the_renew_deadline_of_the_last_renewal() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("an_unreachable_api_server").await.unwrap();
    let mut client_config = env.config().clone();
    let upstream = client_config.cluster_url.authority().unwrap().to_string();
    let proxy = Proxy::start(upstream).await;
    client_config.cluster_url = format!("https://{}", proxy.addr).parse().unwrap();
    let a = LeaderElection::new(
        kube::Client::try_from(client_config).unwrap(),
        config(&ns, "a"),
    )
    .unwrap();
    let leadership = a.acquire(CancellationToken::new()).await.unwrap();
    // Follow the validity: its last value before the loss gives the last successful send.
    let mut validity = a.validity();
    let last = std::sync::Arc::new(std::sync::Mutex::new(*validity.borrow()));
    let follower = tokio::spawn({
        let last = std::sync::Arc::clone(&last);
        async move {
            while validity.changed().await.is_ok() {
                if let Some(until) = *validity.borrow_and_update() {
                    *last.lock().unwrap() = Some(until);
                }
            }
        }
    });
    // Two renewals through the proxy, then it goes silent.
    let mut renewals = a.validity();
    renewals.changed().await.unwrap();
    renewals.changed().await.unwrap();
    proxy.cut.cancel();

    let lost = timeout(RENEW * 2, leadership.lost()).await.expect("lost");
    let at = Instant::now();
    let sent = last.lock().unwrap().expect("renewed") - LEASE;
    assert_eq!(lost.identity, "a");
    assert!(
        at >= sent + RENEW,
        "lost {:?} before the deadline",
        sent + RENEW - at
    );
    assert!(
        at <= sent + RENEW + Duration::from_millis(100),
        "lost {:?} after the deadline",
        at - (sent + RENEW)
    );
    assert!(!a.is_leader());
    assert_eq!(*a.validity().borrow(), None);
    follower.abort();
}

#[tokio::test]
async fn renewals_keep_leadership_and_an_overwritten_lease_is_lost_within_the_renew_deadline() {
    let ns = namespace("renewals_keep_leadership_and_an_overwritten_lease_is_lost").await;
    let a = elector(&ns, "a", false);
    let b = elector(&ns, "b", false);
    let cancel = CancellationToken::new();
    let stop_b = CancellationToken::new();
    let leadership = a.acquire(cancel.clone()).await.unwrap();
    let acquired = lease(&ns).await;
    let b_acquiring = spawn_acquire(&b, &stop_b);

    // Three lease durations: without renewals b would have taken over.
    assert_sole_leader(&ns, &a, &b, LEASE * 3).await;
    let renewed = lease(&ns).await;
    assert!(renewed.renew_time > acquired.renew_time);
    assert_eq!(renewed.acquire_time, acquired.acquire_time);
    assert_eq!(renewed.lease_transitions, Some(0));
    stop_b.cancel();
    assert!(b_acquiring.await.unwrap().is_err());

    // A competing holder overwrites the Lease (a merge patch carries no resourceVersion, so
    // it cannot conflict with a renewal); the leader's renewals now fail.
    let patch = serde_json::json!({
        "spec": { "holderIdentity": "intruder", "leaseDurationSeconds": 3, "renewTime": now() }
    });
    ns.api::<Lease>()
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_lost_within_renew_deadline(&a, leadership, Instant::now()).await;
    assert_eq!(holder(&ns).await.as_deref(), Some("intruder"));
    cancel.cancel();
}

#[tokio::test]
async fn a_lease_deleted_and_recreated_by_another_holder_is_lost_within_the_renew_deadline() {
    let ns = namespace("a_lease_deleted_and_recreated_by_another_holder_is_lost").await;
    let a = elector(&ns, "a", false);
    let cancel = CancellationToken::new();
    let leadership = a.acquire(cancel.clone()).await.unwrap();

    let api: Api<Lease> = ns.api();
    let intruder = Lease {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("intruder".into()),
            lease_duration_seconds: Some(3),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            ..LeaseSpec::default()
        }),
    };
    // The leader may re-create the Lease between the delete and the create; try again then.
    let mut attempts = 0;
    loop {
        api.delete(NAME, &DeleteParams::default()).await.unwrap();
        match api.create(&PostParams::default(), &intruder).await {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 10 => attempts += 1,
            Err(error) => panic!("create the intruder's lease: {error}"),
        }
    }
    assert_lost_within_renew_deadline(&a, leadership, Instant::now()).await;
    assert_eq!(holder(&ns).await.as_deref(), Some("intruder"));
    cancel.cancel();
}

#[tokio::test]
async fn a_deleted_lease_is_recreated_by_the_leader() {
    let ns = namespace("a_deleted_lease_is_recreated_by_the_leader").await;
    let a = elector(&ns, "a", false);
    let cancel = CancellationToken::new();
    let leadership = a.acquire(cancel.clone()).await.unwrap();
    let api: Api<Lease> = ns.api();
    let uid = api.get(NAME).await.unwrap().metadata.uid;
    api.delete(NAME, &DeleteParams::default()).await.unwrap();

    let deadline = Instant::now() + RENEW;
    loop {
        if let Some(lease) = api.get_opt(NAME).await.unwrap()
            && lease.metadata.uid != uid
        {
            let spec = lease.spec.unwrap();
            assert_eq!(spec.holder_identity.as_deref(), Some("a"));
            break;
        }
        assert!(Instant::now() < deadline, "the lease was not re-created");
        sleep(Duration::from_millis(100)).await;
    }
    assert!(a.is_leader());
    assert!(!leadership.is_lost());
    cancel.cancel();
    leadership.finished().await.unwrap();
}

/// The gauge follows leadership through the recorder current when leadership changes, so an
/// elector made before the recorder (as a manager's is) still reports to it.
#[tokio::test]
async fn the_status_metric_is_one_while_leading_even_for_an_elector_made_before_its_recorder() {
    let ns = namespace("the_status_metric_is_one_while_leading").await;
    let a = elector(&ns, "a", true);
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let status = |value: u8| format!("leader_election_master_status{{name=\"{NAME}\"}} {value}");

    let cancel = CancellationToken::new();
    let leadership = a.acquire(cancel.clone()).await.unwrap();
    assert!(handle.render().contains(&status(1)), "{}", handle.render());
    cancel.cancel();
    leadership.finished().await.unwrap();
    assert!(handle.render().contains(&status(0)), "{}", handle.render());
    assert_eq!(holder(&ns).await.as_deref(), Some(""));
}

#[test]
fn invalid_settings_are_rejected_with_a_clear_error() {
    let base = || LeaderElectionConfig::new("ns", NAME);
    assert!(base().validate().is_ok());
    assert_eq!(
        LeaderElectionConfig::new("ns", "").validate(),
        Err(ConfigError::EmptyLeaseName)
    );
    assert_eq!(
        LeaderElectionConfig::new("", NAME).validate(),
        Err(ConfigError::EmptyLeaseNamespace)
    );
    assert_eq!(
        base().with_identity("").validate(),
        Err(ConfigError::EmptyIdentity)
    );
    assert!(matches!(
        base()
            .with_lease_duration(Duration::from_millis(500))
            .validate(),
        Err(ConfigError::LeaseDurationTooShort(_))
    ));
    assert_eq!(
        base().with_retry_period(Duration::ZERO).validate(),
        Err(ConfigError::ZeroRetryPeriod)
    );
    let error = base()
        .with_renew_deadline(Duration::from_secs(15))
        .validate()
        .unwrap_err();
    assert!(matches!(
        error,
        ConfigError::LeaseNotLongerThanRenewDeadline { .. }
    ));
    assert_eq!(
        error.to_string(),
        "lease duration 15s must be greater than renew deadline 15s"
    );
    // 10 s is not more than 1.2 times 9 s.
    let error = base()
        .with_retry_period(Duration::from_secs(9))
        .validate()
        .unwrap_err();
    assert!(matches!(error, ConfigError::RenewDeadlineTooShort { .. }));
    assert!(
        base()
            .with_retry_period(Duration::from_secs(8))
            .validate()
            .is_ok()
    );
}
