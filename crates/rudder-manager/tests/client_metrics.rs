//! `rest_client_requests_total` on a real API server: every request of an instrumented
//! client counted by its answer's code and its method, errors unchanged, and a manager's own
//! requests (cache, leader election) counted in its `/metrics`.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixtures.rs"]
mod fixtures;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, PostParams};
use metrics_exporter_prometheus::PrometheusHandle;
use rudder_client::layers::{NO_ANSWER, REQUESTS_TOTAL, instrument};
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;
use rudder_lease::leader_election::LeaderElectionConfig;
use rudder_manager::{Manager, metrics};
use tokio_util::sync::CancellationToken;

/// The `host` label the tests' clients are instrumented with.
const HOST: &str = "api.rudder.test:6443";

/// The value of `rest_client_requests_total{code, method, host}` (host [`HOST`]) in a
/// Prometheus text page (0 when absent).
fn requests(page: &str, code: &str, method: &str) -> f64 {
    let labels = format!(r#"code="{code}",method="{method}",host="{HOST}""#);
    rudder_envtest::metrics::value(page, REQUESTS_TOTAL, &labels).unwrap_or(0.0)
}

/// How many requests `code`/`method` gained while `act` ran.
async fn counted<T>(
    handle: &PrometheusHandle,
    code: &str,
    method: &str,
    act: impl AsyncFnOnce() -> T,
) -> (f64, T) {
    let before = requests(&handle.render(), code, method);
    let out = act().await;
    (requests(&handle.render(), code, method) - before, out)
}

/// The counter is process-wide: the tests here take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn requests_are_counted_by_code_and_method_and_errors_stay_as_they_were() {
    let _turn = SERIAL.lock().await;
    let handle = metrics::prometheus().unwrap();
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("client-metrics").await.unwrap();
    let client = instrument(ns.client(), HOST);
    assert_eq!(client.default_namespace(), ns.client().default_namespace());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());

    let (n, created) = counted(&handle, "201", "POST", async || {
        cms.create(&PostParams::default(), &fixtures::config_map("a"))
            .await
    })
    .await;
    assert_eq!(n, 1.0);
    created.unwrap();

    let (n, again) = counted(&handle, "409", "POST", async || {
        cms.create(&PostParams::default(), &fixtures::config_map("a"))
            .await
    })
    .await;
    assert_eq!(n, 1.0);
    assert!(matches!(again, Err(kube::Error::Api(s)) if s.code == 409));

    let (n, missing) = counted(&handle, "404", "GET", async || cms.get("nope").await).await;
    assert_eq!(n, 1.0);
    assert!(matches!(missing, Err(kube::Error::Api(s)) if s.code == 404));

    let (n, listed) = counted(&handle, "200", "GET", async || {
        cms.list(&ListParams::default()).await
    })
    .await;
    assert_eq!(n, 1.0);
    assert!(
        listed
            .unwrap()
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("a"))
    );

    // A ServiceAccount with no role: 403, counted as such.
    let nobody = ns.service_account("nobody").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(instrument(nobody.client(), HOST), ns.name());
    let (n, refused) = counted(&handle, "403", "GET", async || {
        secrets.list(&ListParams::default()).await
    })
    .await;
    assert_eq!(n, 1.0);
    assert!(matches!(refused, Err(kube::Error::Api(s)) if s.code == 403));

    // No answer at all: `<error>`, and the same error the bare client gives.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    config.connect_timeout = Some(Duration::from_secs(2));
    let bare = kube::Client::try_from(config).unwrap();
    let bare_error = Api::<ConfigMap>::namespaced(bare.clone(), "x")
        .get("y")
        .await
        .unwrap_err();
    let counted_api: Api<ConfigMap> = Api::namespaced(instrument(bare, HOST), "x");
    let (n, error) = counted(&handle, NO_ANSWER, "GET", async || {
        counted_api.get("y").await
    })
    .await;
    assert_eq!(n, 1.0);
    let error = error.unwrap_err();
    assert_eq!(
        std::mem::discriminant(&error),
        std::mem::discriminant(&bare_error),
        "{error:?} vs {bare_error:?}"
    );

    // The uninstrumented client is not counted.
    let (n, _) = counted(&handle, "404", "GET", async || {
        Api::<ConfigMap>::namespaced(ns.client(), ns.name())
            .get("nope")
            .await
    })
    .await;
    assert_eq!(n, 0.0);
}

/// A plain HTTP/1.0 GET of `/metrics`: the body.
async fn scrape(addr: SocketAddr) -> String {
    rudder_envtest::http::get(addr, "/metrics")
        .await
        .unwrap()
        .body
}

#[tokio::test]
async fn a_manager_counts_its_own_requests_unless_told_not_to() {
    let _turn = SERIAL.lock().await;
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("client-metrics-manager").await.unwrap();
    let loopback = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let manager = Arc::new(
        Manager::builder(ns.client())
            .health_probe_address(None)
            .metrics_address(loopback)
            .api_host(HOST)
            .leader_election(
                LeaderElectionConfig::new(ns.name(), "client-metrics").with_release_on_cancel(true),
            )
            .build()
            .unwrap(),
    );
    // Leader election creates its Lease (POST 201) through the manager's client; the
    // typed API on `Manager::client` is counted too.
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (manager, stop) = (Arc::clone(&manager), stop.clone());
        async move { manager.start(stop).await }
    });
    let addr = eventually("the metrics server", Duration::from_secs(30), async || {
        manager.metrics_address()
    })
    .await;
    let page = eventually(
        "the Lease's creation",
        Duration::from_secs(30),
        async || {
            let page = scrape(addr).await;
            (requests(&page, "201", "POST") >= 1.0).then_some(page)
        },
    )
    .await;
    let gets = requests(&page, "404", "GET");
    let _ = Api::<ConfigMap>::namespaced(manager.client().clone(), ns.name())
        .get("nope")
        .await;
    assert_eq!(requests(&scrape(addr).await, "404", "GET"), gets + 1.0);
    stop.cancel();
    running.await.unwrap().unwrap();

    // Off: the manager's client is the one it was given.
    let quiet = Manager::builder(ns.client())
        .health_probe_address(None)
        .metrics_address(None)
        .client_metrics(false)
        .build()
        .unwrap();
    let handle = metrics::prometheus().unwrap();
    let before = requests(&handle.render(), "404", "GET");
    let _ = Api::<ConfigMap>::namespaced(quiet.client().clone(), ns.name())
        .get("nope")
        .await;
    assert_eq!(requests(&handle.render(), "404", "GET"), before);
}

#[test]
fn a_manager_built_outside_a_runtime_does_not_panic_and_counts_nothing() {
    let _turn = SERIAL.blocking_lock();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The client needs a runtime to be made (its buffer is a task); the build does not.
    let client = {
        let _inside = runtime.enter();
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    };
    let manager = Manager::builder(client)
        .health_probe_address(None)
        .metrics_address(None)
        .build()
        .unwrap();
    // Its client is the one given: a request that gets no answer is not counted.
    let handle = metrics::prometheus().unwrap();
    let before = requests(&handle.render(), NO_ANSWER, "GET");
    let api: Api<ConfigMap> = Api::namespaced(manager.client().clone(), "x");
    let _ = runtime.block_on(api.get("y"));
    assert_eq!(requests(&handle.render(), NO_ANSWER, "GET"), before);
}
