//! Signals (in a child process running a manager) and the event recorder.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use kube::core::ObjectMeta;
use kube_runtime::events::{Event, EventType};
use rudder_core::runnable;
use rudder_envtest::TestEnv;
use rudder_manager::Manager;

const CHILD: &str = "RUDDER_MANAGER_SIGNAL_CHILD";

/// In the child: a manager whose one runnable takes `RUDDER_MANAGER_SIGNAL_CHILD` seconds
/// to stop, run until a signal. The runnable prints `ready` when started (the signal
/// handlers are in place by then); the child exits 0 if the manager returned Ok.
#[tokio::test]
async fn signal_child() {
    let Ok(stop_secs) = std::env::var(CHILD) else {
        return; // Only meaningful as the child of the tests below.
    };
    let stop_secs: u64 = stop_secs.parse().unwrap();
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let m = Manager::builder(client)
        .health_probe_address(None)
        .metrics_address(None)
        .build()
        .unwrap();
    m.add(runnable(
        "slow-to-stop",
        false,
        move |shutdown| async move {
            println!("ready");
            shutdown.stopped().await;
            println!("stopping");
            tokio::time::sleep(Duration::from_secs(stop_secs)).await;
            Ok(())
        },
    ));
    let result = m.start_until_signal().await;
    std::process::exit(if result.is_ok() { 0 } else { 2 });
}

/// Starts the child, waits for `ready`, sends SIGTERM, and (for `signals == 2`) once the
/// child says it is stopping, SIGTERM again; returns its exit code and how long it took to
/// exit after the first signal.
fn run_child(stop_secs: u64, signals: usize) -> (Option<i32>, Duration) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "signal_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, stop_secs.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut wait_for = |word: &str| {
        assert!(
            lines.any(|l| l.is_ok_and(|l| l.contains(word))),
            "the child never printed {word}"
        );
    };
    wait_for("ready");
    let term = || {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let first = Instant::now();
    term();
    if signals == 2 {
        wait_for("stopping");
        term();
    }
    let status = child.wait().unwrap();
    (status.code(), first.elapsed())
}

#[test]
fn sigterm_stops_gracefully() {
    let (code, took) = run_child(1, 1);
    assert_eq!(code, Some(0), "graceful stop exits 0");
    assert!(
        took >= Duration::from_millis(900),
        "waited for the runnable: {took:?}"
    );
}

#[test]
fn a_second_signal_exits_at_once() {
    let (code, took) = run_child(30, 2);
    assert_eq!(code, Some(1), "the second signal exits with status 1");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test]
async fn the_event_recorder_publishes_kubernetes_events() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("events").await.unwrap();
    let m = Manager::builder(ns.client())
        .name("event-test")
        .health_probe_address(None)
        .metrics_address(None)
        .build()
        .unwrap();
    let cm = Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("subject".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    m.event_recorder()
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "Reconciled".into(),
                note: Some("all good".into()),
                action: "Reconcile".into(),
                secondary: None,
            },
            &cm.object_ref(&()),
        )
        .await
        .unwrap();
    let events = Api::<K8sEvent>::namespaced(ns.client(), ns.name())
        .list(&ListParams::default())
        .await
        .unwrap();
    let e = events
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("Reconciled"))
        .expect("the event was recorded");
    assert_eq!(e.reporting_controller.as_deref(), Some("event-test"));
    assert_eq!(
        e.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("subject")
    );
}
