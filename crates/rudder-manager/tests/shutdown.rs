//! One deadline per stop: the manager hands its graceful-shutdown deadline down to its
//! controllers, which cancel their reconciles' contexts in time; what is left at the deadline
//! is named. On paused time, with no API server (nothing here makes a request: no informer,
//! no servers, no leader election), so every duration is exact.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ObjectMeta;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Event;
use rudder_core::Reconciler;
use rudder_core::runnable;
use rudder_handler::{EnqueueObject, EventSender, channel};
use rudder_manager::{Error, GracefulShutdown, Manager};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A client for an address nothing listens on: these tests must not reach an API server.
fn offline_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn manager(shutdown: GracefulShutdown) -> Manager {
    Manager::builder(offline_client())
        .health_probe_address(None)
        .metrics_address(None)
        .graceful_shutdown(shutdown)
        .build()
        .unwrap()
}

/// Waits on its context (when `honours_cancel`) or forever; says when it started and whether
/// its context was cancelled.
struct Waiter {
    started: Arc<Notify>,
    cancelled: Arc<AtomicBool>,
    honours_cancel: bool,
}

impl Reconciler for Waiter {
    type Error = std::convert::Infallible;
    async fn reconcile(
        &self,
        _: rudder_core::Request,
        ctx: Context,
    ) -> Result<Action, Self::Error> {
        self.started.notify_one();
        if self.honours_cancel {
            ctx.cancelled().await;
            self.cancelled.store(true, Ordering::SeqCst);
        } else {
            std::future::pending::<()>().await;
        }
        Ok(Action::done())
    }
}

struct Setup {
    manager: Arc<Manager>,
    started: Arc<Notify>,
    cancelled: Arc<AtomicBool>,
    events: EventSender<ConfigMap>,
}

fn setup(name: &str, shutdown: GracefulShutdown, honours_cancel: bool) -> Setup {
    let manager = Arc::new(manager(shutdown));
    let started = Arc::new(Notify::new());
    let cancelled = Arc::new(AtomicBool::new(false));
    let reconciler = Waiter {
        started: Arc::clone(&started),
        cancelled: Arc::clone(&cancelled),
        honours_cancel,
    };
    let controller = Controller::builder(name, reconciler).build().unwrap();
    let (events, source) = channel::<ConfigMap>(8);
    controller.watch(source, EnqueueObject, vec![]).unwrap();
    manager.add_controller(controller);
    Setup {
        manager,
        started,
        cancelled,
        events,
    }
}

/// Starts the manager and gets one reconcile running; cancel the token to stop it.
async fn start_reconciling(
    setup: &Setup,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), Error>>,
) {
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (manager, stop) = (Arc::clone(&setup.manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let object = Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("busy".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    setup.events.send(Event::Generic { object }).await.unwrap();
    setup.started.notified().await;
    (stop, running)
}

/// Starts the manager, gets one reconcile running, stops the manager, and returns what
/// `start` returned and how long the stop took.
async fn stop_during_a_reconcile(setup: &Setup) -> (Result<(), Error>, Duration) {
    let (stop, running) = start_reconciling(setup).await;
    let stopped_at = Instant::now();
    stop.cancel();
    let result = running.await.unwrap();
    (result, stopped_at.elapsed())
}

#[tokio::test(start_paused = true)]
async fn the_managers_deadline_cancels_contexts_in_time_and_start_returns_ok() {
    for (name, timeout) in [
        ("deadline-5s", Duration::from_secs(5)),
        // The defaults of both layers used to be 30 s each, racing.
        ("deadline-30s", rudder_manager::DEFAULT_GRACEFUL_SHUTDOWN),
    ] {
        let setup = setup(name, GracefulShutdown::After(timeout), true);
        let (result, took) = stop_during_a_reconcile(&setup).await;
        result.unwrap();
        assert!(
            setup.cancelled.load(Ordering::SeqCst),
            "{name}: the context was cancelled"
        );
        assert!(
            took < timeout,
            "{name}: stopped in {took:?}, within {timeout:?}"
        );
        // A quarter of the time left, at most 5 s, is kept for the reconcile to return.
        let margin = (timeout / 4).min(Duration::from_secs(5));
        assert_eq!(
            took,
            timeout - margin,
            "{name}: cancelled at the documented point"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_that_ignores_its_context_is_named_at_the_deadline() {
    let timeout = Duration::from_secs(5);
    let setup = setup("stubborn", GracefulShutdown::After(timeout), false);
    let (result, took) = stop_during_a_reconcile(&setup).await;
    match result {
        Err(Error::ShutdownTimeout { timeout: t, left }) => {
            assert_eq!(t, timeout);
            assert_eq!(left, vec!["controller stubborn".to_owned()]);
        }
        other => panic!("expected ShutdownTimeout, got {other:?}"),
    }
    assert_eq!(took, timeout, "aborted at the deadline, not later");
    let err = Error::ShutdownTimeout {
        timeout,
        left: vec!["controller stubborn".into()],
    };
    assert_eq!(
        err.to_string(),
        "runnables did not stop within 5s: controller stubborn"
    );
}

#[tokio::test(start_paused = true)]
async fn stopping_immediately_is_what_was_asked_for_not_an_error() {
    let setup = setup("immediate", GracefulShutdown::Immediately, false);
    let (result, took) = stop_during_a_reconcile(&setup).await;
    result.unwrap();
    assert_eq!(took, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn forever_waits_without_cancelling_contexts() {
    let setup = setup("forever", GracefulShutdown::Forever, true);
    let (stop, running) = start_reconciling(&setup).await;
    stop.cancel();
    // An hour later (paused time races ahead) it is still waiting, context untouched.
    let waited = tokio::time::timeout(Duration::from_secs(3600), running).await;
    assert!(
        waited.is_err(),
        "start returned under GracefulShutdown::Forever"
    );
    assert!(!setup.cancelled.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_runnable_is_named() {
    let manager = manager(GracefulShutdown::After(Duration::from_secs(5)));
    manager.add(runnable("fragile", false, |_| async {
        panic!("boom");
    }));
    let err = manager.start(CancellationToken::new()).await.unwrap_err();
    match &err {
        Error::Panicked { name, message } => {
            assert_eq!(name, "fragile");
            assert_eq!(message, "boom");
        }
        other => panic!("expected Panicked, got {other:?}"),
    }
    assert_eq!(err.to_string(), "fragile panicked: boom");
}
