//! What chaospod's tests share: ChaosPods of the pause image, the rendered webhook
//! configurations created as they are, and running a manager. Each test binary uses only
//! part of it.

#![allow(
    clippy::disallowed_methods,
    reason = "tests may spawn: the test owns its tasks"
)]
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use chaospod::ChaosPod;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use rudder::manager::Manager;
use rudder_envtest::TestNamespace;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The image of every test ChaosPod's Pods: it runs nothing (KWOK's nodes run no container
/// anyway) and is small where a real node pulls it.
pub(crate) const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.9";

/// A ChaosPod `name` of the pause image, stopping its Pod every `period`.
pub(crate) fn chaos_pod(name: &str, period: Duration) -> ChaosPod {
    ChaosPod::new_with_image(name, PAUSE_IMAGE, period)
}

/// Creates the webhook configurations as rendered, and returns their APIs (to delete them
/// after the test: configurations are cluster-wide).
pub(crate) async fn create_webhook_configurations(
    ns: &TestNamespace,
    mutating: &MutatingWebhookConfiguration,
    validating: &ValidatingWebhookConfiguration,
) -> (
    Api<MutatingWebhookConfiguration>,
    Api<ValidatingWebhookConfiguration>,
) {
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(ns.client());
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(ns.client());
    mutating_api
        .create(&PostParams::default(), mutating)
        .await
        .unwrap();
    validating_api
        .create(&PostParams::default(), validating)
        .await
        .unwrap();
    (mutating_api, validating_api)
}

/// Starts `manager` on a task of its own: cancel the token, then await the task.
pub(crate) fn start(
    manager: &Arc<Manager>,
) -> (
    CancellationToken,
    JoinHandle<Result<(), rudder::manager::Error>>,
) {
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, stop) = (Arc::clone(manager), stop.clone());
        async move { manager.start(stop).await }
    });
    (stop, task)
}
