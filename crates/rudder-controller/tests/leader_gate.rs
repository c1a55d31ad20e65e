//! Workers behind a [`LeaderGate`]: nothing is reconciled while it is closed, what was queued
//! meanwhile is reconciled when it opens, and no reconcile starts once it has closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use rudder_controller::{Controller, Options, RunError};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::LeaderGate;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_handler::{EnqueueObject, EventSender, channel};
use support::{send, spawn_run};
use tokio::sync::watch;
use tokio::time::Instant;

/// Records when each reconcile started; asks to run again after `again` if set.
struct Timed {
    starts: Arc<Mutex<Vec<(Request, Instant)>>>,
    again: Option<Duration>,
}

impl Reconciler for Timed {
    type Error = std::convert::Infallible;

    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        self.starts.lock().unwrap().push((request, Instant::now()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(match self.again {
            Some(after) => Action::requeue_after(after),
            None => Action::done(),
        })
    }
}

type Starts = Arc<Mutex<Vec<(Request, Instant)>>>;

fn gated(
    name: &str,
    again: Option<Duration>,
    workers: usize,
) -> (
    Controller<Timed>,
    EventSender<ConfigMap>,
    Starts,
    watch::Sender<Option<Instant>>,
) {
    let starts: Starts = Arc::default();
    let controller = Controller::builder(
        name,
        Timed {
            starts: Arc::clone(&starts),
            again,
        },
    )
    .options(Options::new().workers(workers))
    .build()
    .unwrap();
    let (events, source) = channel::<ConfigMap>(64);
    controller.watch(source, EnqueueObject, vec![]).unwrap();
    let (validity, receiver) = watch::channel(None);
    controller
        .set_leader_gate(LeaderGate::new(receiver))
        .unwrap();
    (controller, events, starts, validity)
}

#[tokio::test(start_paused = true)]
async fn a_closed_gate_queues_and_an_opened_one_reconciles_what_was_queued() {
    let (controller, events, starts, validity) = gated("gate-queue", None, 2);
    let (stop, task) = spawn_run(&controller);
    for name in ["a", "b", "c", "a", "b"] {
        send(&events, name).await;
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(starts.lock().unwrap().is_empty(), "reconciled while closed");
    assert!(
        controller.has_synced(),
        "sources sync while the gate is closed"
    );
    // Duplicates merged: one entry per key.
    assert_eq!(controller.queue().len(), 3);

    let opened = Instant::now();
    validity.send_replace(Some(opened + Duration::from_secs(15)));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let starts = starts.lock().unwrap().clone();
    let mut names: Vec<_> = starts.iter().map(|(r, _)| r.name().to_owned()).collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    // At once: no wait for the next event or a poll period.
    assert!(
        starts
            .iter()
            .all(|(_, at)| *at < opened + Duration::from_millis(50))
    );
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_reconcile_starts_once_the_validity_has_passed() {
    // A key that asks to run again every 100 ms, with a validity renewed twice, then not.
    let (controller, events, starts, validity) =
        gated("gate-expiry", Some(Duration::from_millis(100)), 1);
    let start = Instant::now();
    validity.send_replace(Some(start + Duration::from_secs(3)));
    let (stop, task) = spawn_run(&controller);
    send(&events, "a").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    validity.send_replace(Some(start + Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_secs(8)).await;
    let until = start + Duration::from_secs(5);
    {
        let starts = starts.lock().unwrap();
        assert!(starts.len() > 40, "{} reconciles", starts.len());
        assert!(
            starts.iter().all(|(_, at)| *at < until),
            "a reconcile started after the validity passed"
        );
        let last = starts.iter().map(|(_, at)| *at).max().unwrap();
        assert!(
            until - last <= Duration::from_millis(110),
            "stopped early: {:?}",
            until - last
        );
    }
    // The key stays queued and is reconciled when the gate opens again.
    let count = starts.lock().unwrap().len();
    let reopened = Instant::now();
    validity.send_replace(Some(reopened + Duration::from_secs(3)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        starts.lock().unwrap()[count..]
            .iter()
            .any(|(_, at)| *at >= reopened)
    );
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn none_closes_the_gate_before_the_validity_passes() {
    let (controller, events, starts, validity) =
        gated("gate-none", Some(Duration::from_millis(100)), 1);
    validity.send_replace(Some(Instant::now() + Duration::from_secs(60)));
    let (stop, task) = spawn_run(&controller);
    send(&events, "a").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let closed = Instant::now();
    validity.send_replace(None);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let starts = starts.lock().unwrap().clone();
    assert!(!starts.is_empty());
    assert!(starts.iter().all(|(_, at)| *at < closed));
    stop.cancel();
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_controller_waiting_on_its_gate_stops_at_once() {
    let (controller, events, _starts, _validity) = gated("gate-stop", None, 3);
    let (stop, task) = spawn_run(&controller);
    send(&events, "a").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopping = Instant::now();
    stop.cancel();
    task.await.unwrap();
    assert_eq!(stopping.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_gate_cannot_change_once_running() {
    let (controller, _events, _starts, _validity) = gated("gate-started", None, 1);
    let (stop, task) = spawn_run(&controller);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let again = controller.set_leader_gate(LeaderGate::always_open());
    assert!(
        matches!(again, Err(RunError::AlreadyStarted(_))),
        "{again:?}"
    );
    stop.cancel();
    task.await.unwrap();
}
