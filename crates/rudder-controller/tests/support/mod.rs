//! Helpers shared by the gated-controller tests (leader_gate.rs, shard_cancel.rs).
#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::ObjectMeta;
use rudder_controller::Controller;
use rudder_core::Event;
use rudder_core::Reconciler;
use rudder_handler::EventSender;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Sends a generic event for the ConfigMap `ns/name`.
pub(crate) async fn send(events: &EventSender<ConfigMap>, name: &str) {
    let object = Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    });
    events.send(Event::Generic { object }).await.unwrap();
}

/// Runs `controller` in a task until the returned token is cancelled.
pub(crate) fn spawn_run<R: Reconciler>(
    controller: &Controller<R>,
) -> (CancellationToken, JoinHandle<()>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (controller, stop) = (controller.clone(), stop.clone());
        async move { controller.run(stop).await.unwrap() }
    });
    (stop, task)
}
