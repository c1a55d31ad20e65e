//! A sharded controller's reconcile whose shard holding passes while it runs is cancelled
//! (another replica may start the key from then on); one whose holding is renewed, or whose
//! shard is handed off cleanly (closed, then drained), runs to its end. On paused time.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use rudder_controller::{Controller, KeyAffinity, Options, ShardGate};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_handler::{EnqueueObject, EventSender, channel};
use support::{send, spawn_run};
use tokio::sync::watch;
use tokio::time::Instant;

/// `("start" | "end", key)` of every reconcile, in order.
type Log = Arc<Mutex<Vec<(&'static str, String)>>>;

/// Takes `work` (waiting, as on I/O), logging its start and its end.
struct Slow {
    log: Log,
    work: Duration,
}

impl Reconciler for Slow {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let key = request.name().to_owned();
        self.log.lock().unwrap().push(("start", key.clone()));
        tokio::time::sleep(self.work).await;
        self.log.lock().unwrap().push(("end", key));
        Ok(Action::done())
    }
}

struct Setup {
    controller: Controller<Slow>,
    events: EventSender<ConfigMap>,
    gate: ShardGate,
    validity: watch::Sender<Option<Instant>>,
    log: Log,
}

/// A controller with one worker behind a one-shard gate, the shard open until `until`.
fn setup(name: &str, work: Duration, until: Instant) -> Setup {
    let log: Log = Arc::default();
    let controller = Controller::builder(
        name,
        Slow {
            log: Arc::clone(&log),
            work,
        },
    )
    .options(Options::new().workers(1))
    .build()
    .unwrap();
    let (events, source) = channel::<ConfigMap>(16);
    controller.watch(source, EnqueueObject, vec![]).unwrap();
    let gate = ShardGate::new(1, 0, KeyAffinity::Name);
    controller
        .set_shard_gate(gate.clone(), Arc::new(Vec::new))
        .unwrap();
    let (validity, receiver) = watch::channel(Some(until));
    gate.open(0, receiver);
    Setup {
        controller,
        events,
        gate,
        validity,
        log,
    }
}

fn entries(log: &Log) -> Vec<(&'static str, String)> {
    log.lock().unwrap().clone()
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_is_cancelled_when_its_shard_holding_passes() {
    let s = setup(
        "cancel-lapse",
        Duration::from_secs(10),
        Instant::now() + Duration::from_secs(3),
    );
    let (stop, task) = spawn_run(&s.controller);
    send(&s.events, "a").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(entries(&s.log), [("start", "a".to_owned())]);
    assert_eq!(s.gate.in_flight(0), 1);
    // Not renewed: at 3 s the holding passes, and the reconcile goes with it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.gate.in_flight(0),
        0,
        "the reconcile still holds its permit"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(entries(&s.log), [("start", "a".to_owned())], "it ran on");
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn after_a_freeze_the_lost_holding_wins_over_a_reconcile_that_could_finish() {
    let s = setup(
        "cancel-freeze",
        Duration::from_secs(2),
        Instant::now() + Duration::from_secs(1),
    );
    let (stop, task) = spawn_run(&s.controller);
    send(&s.events, "a").await;
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(entries(&s.log), [("start", "a".to_owned())]);
    // A freeze: the clock jumps past both the holding (1 s) and the reconcile's wait (2 s).
    tokio::time::advance(Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        entries(&s.log),
        [("start", "a".to_owned())],
        "it finished after the freeze"
    );
    assert_eq!(s.gate.in_flight(0), 0);
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_renewed_holding_or_a_clean_hand_off_lets_the_reconcile_finish() {
    let s = setup(
        "cancel-renewed",
        Duration::from_secs(10),
        Instant::now() + Duration::from_secs(3),
    );
    let (stop, task) = spawn_run(&s.controller);
    send(&s.events, "a").await;
    // Renewed every second, 3 s ahead: the reconcile runs its 10 s.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        s.validity
            .send_replace(Some(Instant::now() + Duration::from_secs(3)));
    }
    assert_eq!(
        entries(&s.log),
        [("start", "a".to_owned()), ("end", "a".to_owned())]
    );
    // A clean hand-off: closed while a reconcile runs, which then runs to its end and is
    // waited for.
    send(&s.events, "b").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.gate.close(0);
    let drained = tokio::spawn({
        let gate = s.gate.clone();
        async move {
            gate.drained(0).await;
            Instant::now()
        }
    });
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        s.validity
            .send_replace(Some(Instant::now() + Duration::from_secs(3)));
    }
    let drained_at = drained.await.unwrap();
    let log = entries(&s.log);
    assert_eq!(
        log[2..],
        [("start", "b".to_owned()), ("end", "b".to_owned())]
    );
    assert!(drained_at >= Instant::now() - Duration::from_secs(4));
    stop.cancel();
    task.await.unwrap();
}
