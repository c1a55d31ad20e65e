//! The manager against a real API server: probes, metrics, start and stop, failures.
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::core::ObjectMeta;
use rudder_controller::Controller;
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_core::runnable;
use rudder_envtest::poll::eventually;
use rudder_envtest::{TestEnv, TestNamespace};
use rudder_handler::{EnqueueObject, Kind};
use rudder_manager::{Error, GracefulShutdown, Manager};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const LOOPBACK_ANY_PORT: Option<SocketAddr> = Some(SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    0,
));

/// A plain HTTP/1.0 GET: (status, body).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let answer = rudder_envtest::http::get(addr, path).await.unwrap();
    (answer.status, answer.body)
}

/// How long a test waits for the manager to do something.
const WAIT: Duration = Duration::from_secs(30);

struct Recorder(mpsc::UnboundedSender<Request>);

impl Reconciler for Recorder {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, request: Request, _: Context) -> Result<Action, Self::Error> {
        let _ = self.0.send(request);
        Ok(Action::done())
    }
}

async fn manager(ns: &TestNamespace, metrics: bool) -> Manager {
    let namespace = ns.name().to_owned();
    Manager::builder(ns.client())
        .health_probe_address(LOOPBACK_ANY_PORT)
        .metrics_address(if metrics { LOOPBACK_ANY_PORT } else { None })
        .metrics_extra_handler("/debug/echo", |request: http::Request<_>| async move {
            let query = request.uri().query().unwrap_or_default().to_owned();
            http::Response::builder()
                .header("content-type", "text/plain")
                .header("x-echo", "yes")
                .body(format!("echo {query}"))
                .unwrap()
        })
        .cache(move |c| c.default_namespace(namespace))
        .build()
        .unwrap()
}

#[tokio::test]
async fn probes_metrics_and_a_reconcile() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("probes").await.unwrap();
    let m = Arc::new(manager(&ns, true).await);
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("manager-probes", Recorder(tx))
        .build()
        .unwrap();
    c.watch(
        Kind::<ConfigMap>::from_cache(m.cache()),
        EnqueueObject,
        vec![],
    )
    .unwrap();
    m.add_controller(c);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
    let health = eventually("the probe server", WAIT, async || m.health_address()).await;
    assert_eq!(get(health, "/healthz").await, (200, "ok".to_owned()));
    assert_eq!(get(health, "/healthz/ping").await, (200, "ok".to_owned()));
    // Ready once the controller's sources have synced.
    eventually("/readyz to answer 200", WAIT, async || {
        (get(health, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let (status, body) = get(health, "/readyz?verbose").await;
    assert_eq!(status, 200);
    assert!(body.contains("[+]cache-sync ok"), "{body}");
    assert_eq!(get(health, "/nope").await.0, 404);

    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let request = tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap();
    assert_eq!(request, Some(Request::namespaced(ns.name(), "cm")));

    let metrics = m.metrics_address().unwrap();
    let body = eventually("the reconcile in /metrics", WAIT, async || {
        let (_, body) = get(metrics, "/metrics").await;
        body.contains(
            r#"controller_runtime_reconcile_total{controller="manager-probes",result="success"} 1"#,
        )
        .then_some(body)
    })
    .await;
    for series in [
        r#"workqueue_adds_total{name="manager-probes",controller="manager-probes"}"#,
        r#"controller_runtime_reconcile_time_seconds_bucket{controller="manager-probes",le="0.005"}"#,
        r#"controller_runtime_active_workers{controller="manager-probes"}"#,
        "process_resident_memory_bytes",
    ] {
        assert!(
            body.contains(series),
            "{series} missing from /metrics:\n{body}"
        );
    }
    assert_eq!(
        get(metrics, "/debug/echo?x=1").await,
        (200, "echo x=1".to_owned())
    );
    let response = rudder_envtest::http::get(metrics, "/debug/echo")
        .await
        .unwrap();
    assert_eq!(response.header("x-echo"), Some("yes"), "{response:?}");
    assert_eq!(get(metrics, "/debug/other").await.0, 404);
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn not_ready_until_caches_sync() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("not-ready").await.unwrap();
    let m = Arc::new(manager(&ns, false).await);
    // A source on a type the server does not serve never syncs.
    struct Never;
    impl Reconciler for Never {
        type Error = std::convert::Infallible;
        async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
            Ok(Action::done())
        }
    }
    let c = Controller::builder("manager-unsynced", Never)
        .options(rudder_controller::Options::new().cache_sync_timeout(Duration::from_secs(600)))
        .build()
        .unwrap();
    let (_events, source) = rudder_handler::channel::<ConfigMap>(1);
    c.watch(source, EnqueueObject, vec![]).unwrap();
    let unsynced = rudder_core::Synced::new();
    let never = rudder_handler::from_stream_with_sync(futures::stream::pending(), unsynced.clone());
    c.watch::<ConfigMap, _>(never, EnqueueObject, vec![])
        .unwrap();
    m.add_controller(c);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
    let health = eventually("the probe server", WAIT, async || m.health_address()).await;
    let (status, body) = get(health, "/readyz").await;
    assert_eq!(status, 500);
    assert!(
        body.contains("[-]cache-sync failed: not synced: controller manager-unsynced"),
        "{body}"
    );
    assert_eq!(
        get(health, "/healthz").await.0,
        200,
        "alive while not ready"
    );
    assert_eq!(get(health, "/readyz?exclude=cache-sync").await.0, 200);
    unsynced.mark();
    eventually("/readyz to answer 200", WAIT, async || {
        (get(health, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_failing_runnable_stops_the_manager_with_its_error() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("failing").await.unwrap();
    let m = manager(&ns, false).await;
    let other_stopped = Arc::new(AtomicBool::new(false));
    m.add(runnable("patient", false, {
        let other_stopped = other_stopped.clone();
        |shutdown| async move {
            shutdown.stopped().await;
            other_stopped.store(true, Ordering::SeqCst);
            Ok(())
        }
    }));
    m.add(runnable("broken", true, |_| async {
        Err("the database is gone".into())
    }));
    let err = tokio::time::timeout(Duration::from_secs(30), m.start(CancellationToken::new()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, Error::Runnable { name, .. } if name == "broken"),
        "{err}"
    );
    assert_eq!(
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .as_deref(),
        Some("the database is gone")
    );
    assert!(
        other_stopped.load(Ordering::SeqCst),
        "the other runnable was stopped first"
    );
}

#[tokio::test]
async fn graceful_shutdown_waits_for_a_reconcile_in_flight() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("graceful").await.unwrap();
    let m = Arc::new(manager(&ns, false).await);
    struct Slow(mpsc::UnboundedSender<&'static str>);
    impl Reconciler for Slow {
        type Error = std::convert::Infallible;
        async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
            let _ = self.0.send("started");
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _ = self.0.send("finished");
            Ok(Action::done())
        }
    }
    let (tx, mut seen) = mpsc::unbounded_channel();
    let c = Controller::builder("manager-graceful", Slow(tx))
        .build()
        .unwrap();
    c.watch(
        Kind::<ConfigMap>::from_cache(m.cache()),
        EnqueueObject,
        vec![],
    )
    .unwrap();
    m.add_controller(c);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (m, stop) = (Arc::clone(&m), stop.clone());
        async move { m.start(stop).await }
    });
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(ns.client(), ns.name())
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), seen.recv())
        .await
        .unwrap();
    assert_eq!(first, Some("started"));
    stop.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(
        seen.try_recv().ok(),
        Some("finished"),
        "stopped only after the reconcile"
    );
}

#[tokio::test]
async fn a_runnable_that_ignores_stop_is_aborted_after_the_timeout() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("stubborn").await.unwrap();
    let namespace = ns.name().to_owned();
    let m = Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(None)
        .graceful_shutdown(GracefulShutdown::After(Duration::from_millis(300)))
        .cache(move |c| c.default_namespace(namespace))
        .build()
        .unwrap();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    m.add(runnable("stubborn", false, move |_| async move {
        let _ = started_tx.send(());
        std::future::pending::<()>().await;
        Ok(())
    }));
    let stop = CancellationToken::new();
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let _ = started.await;
            stop.cancel();
        })
    };
    let err = m.start(stop).await.unwrap_err();
    stopper.await.unwrap();
    assert!(matches!(err, Error::ShutdownTimeout { .. }), "{err}");
}

#[tokio::test]
async fn an_address_in_use_is_a_clear_error() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("in-use").await.unwrap();
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap();
    let m = Manager::builder(ns.client())
        .health_probe_address(Some(addr))
        .metrics_address(None)
        .build()
        .unwrap();
    let err = m.start(CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(err, Error::Bind { what: "health probes", addr: a, .. } if a == addr),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!("cannot listen for health probes on {addr}")
    );
}
