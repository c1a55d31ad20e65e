//! OpenTelemetry export (`otlp` feature), set up by the manager itself: with an endpoint
//! configured and no subscriber installed, the manager installs its exporter's layer, and a
//! receiver on loopback (OTLP over HTTP/protobuf, decoded with the protocol's own messages)
//! gets the `reconcile` span of a created ConfigMap with its controller, request and cause,
//! under the service name and cluster the manager was given, and the client's API request
//! spans. The manager's stop shuts the exporter down and joins its thread.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/otlp_receiver.rs"]
mod otlp_receiver;

use std::time::Duration;

use fixtures::{config_map, manager_builder};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use otlp_receiver::Receiver;
use rudder_controller::{Controller, WatchSpec};
use rudder_core::Action;
use rudder_core::Context;
use rudder_core::Reconciler;
use rudder_core::Request;
use rudder_envtest::TestEnv;
use rudder_envtest::poll::eventually;
use rudder_handler::{EnqueueObject, Kind};
use rudder_manager::otlp::Otlp;

struct Done;

impl Reconciler for Done {
    type Error = std::convert::Infallible;
    async fn reconcile(&self, _: Request, _: Context) -> Result<Action, Self::Error> {
        Ok(Action::done())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_exports_a_reconcile_span_with_its_cause_service_and_cluster() {
    let receiver = Receiver::http().await;
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("otlp").await.unwrap();
    let manager = manager_builder(ns.client(), ns.name())
        .name("otlp-operator")
        .cluster_name("test-cluster")
        .otlp(Otlp::new().endpoint(receiver.http_endpoint()))
        .build()
        .unwrap();
    let controller = Controller::builder("traced", Done).build().unwrap();
    controller
        .add_watch(
            WatchSpec::objects(
                Kind::<ConfigMap>::from_cache(manager.cache()),
                EnqueueObject,
                vec![],
            )
            .labelled("for"),
        )
        .unwrap();
    manager.add_controller(controller);
    let (stop, task) = fixtures::start(manager);
    let api: Api<ConfigMap> = ns.api();
    // A first object's reconcile shows the watch running, so the next one is a `create`
    // (an object there before the watch's initial list would be `initial`). The batch
    // processor sends every 5 s (OTEL_BSP_SCHEDULE_DELAY's default).
    api.create(&PostParams::default(), &config_map("first"))
        .await
        .unwrap();
    let first = format!("{}/first", ns.name());
    eventually(
        "the first reconcile span",
        Duration::from_secs(60),
        async || {
            receiver.spans().into_iter().find(|span| {
                span.name == "reconcile" && span.attributes.get("request") == Some(&first)
            })
        },
    )
    .await;
    api.create(&PostParams::default(), &config_map("exported"))
        .await
        .unwrap();

    let request = format!("{}/exported", ns.name());
    let span = eventually(
        "the reconcile span at the receiver",
        Duration::from_secs(60),
        async || {
            receiver.spans().into_iter().find(|span| {
                span.name == "reconcile"
                    && span.attributes.get("request") == Some(&request)
                    && span
                        .attributes
                        .get("cause")
                        .is_some_and(|cause| cause.starts_with("for/create ConfigMap"))
            })
        },
    )
    .await;
    assert_eq!(span.attributes["controller"], "traced", "{span:?}");
    assert!(
        span.attributes["cause"].contains(&request),
        "the cause names the object: {span:?}"
    );
    assert_eq!(span.attributes["triggers"], "1", "{span:?}");
    assert!(span.attributes.contains_key("reconcile_id"), "{span:?}");
    assert!(span.attributes.contains_key("queue_wait_ms"), "{span:?}");
    assert_eq!(span.resource["service.name"], "otlp-operator", "{span:?}");
    assert_eq!(
        span.resource["k8s.cluster.name"], "test-cluster",
        "{span:?}"
    );
    assert_eq!(span.trace_id.len(), 16);
    assert_eq!(span.span_id.len(), 8);
    // The client's API requests (kube's `HTTP` spans, the informers' lists among them) were
    // exported before the reconciles they fed.
    let requests = receiver
        .spans()
        .into_iter()
        .filter(|span| span.attributes.contains_key("http.method"))
        .collect::<Vec<_>>();
    assert!(
        requests.iter().any(|span| span.attributes["http.url"]
            .contains(&format!("/api/v1/namespaces/{}/configmaps", ns.name()))),
        "no API request span for the ConfigMaps: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .all(|span| span.resource["service.name"] == "otlp-operator")
    );

    // The exporter's thread is the manager's: joined when it stops.
    assert_eq!(otlp_receiver::exporter_threads(), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
    otlp_receiver::no_exporter_thread().await;
}
