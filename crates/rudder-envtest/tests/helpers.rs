//! The helpers other crates' tests share, against the real API server: a [`TestCrd`] is
//! served once installed, keeps any fields and has its status subresource; a poll waits for
//! what the server does.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use rudder_envtest::poll::Poll;
use rudder_envtest::poll::eventually;
use rudder_envtest::{TestCrd, TestEnv};

#[tokio::test]
async fn a_test_crd_is_served_at_once_in_every_version_with_any_fields_and_a_status() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("test_crd").await.unwrap();
    env.install_crds([
        TestCrd::new("helpers.envtest.rudder.rs", "Sprocket", "sprockets")
            .versions(["v1", "v2"])
            .status_subresource()
            .build(),
    ])
    .await
    .unwrap();
    let api = |version: &str| {
        let gvk = GroupVersionKind::gvk("helpers.envtest.rudder.rs", version, "Sprocket");
        let resource = ApiResource::from_gvk(&gvk);
        (
            Api::<DynamicObject>::namespaced_with(ns.client(), ns.name(), &resource),
            resource,
        )
    };
    let (v1, resource) = api("v1");
    let mut sprocket = DynamicObject::new("s", &resource);
    sprocket.data = serde_json::json!({ "spec": { "teeth": 12, "finish": { "any": "shape" } } });
    let created = v1.create(&PostParams::default(), &sprocket).await.unwrap();
    assert_eq!(created.data["spec"]["finish"]["any"], "shape");

    // The status subresource: a status write keeps the generation, and reads back.
    let status = serde_json::json!({ "status": { "turning": true } });
    let written = v1
        .patch_status("s", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(written.metadata.generation, created.metadata.generation);
    assert_eq!(written.data["status"]["turning"], true);

    // The other version serves the same object (no schema change, so no conversion).
    let (v2, _) = api("v2");
    let read = eventually("the sprocket in v2", Duration::from_secs(10), async || {
        v2.get_opt("s").await.ok().flatten()
    })
    .await;
    assert_eq!(read.data["spec"]["teeth"], 12);
}

#[tokio::test]
async fn a_poll_waits_for_the_server_and_reports_a_timeout() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("poll").await.unwrap();
    let config_maps = ns.api::<k8s_openapi::api::core::v1::ConfigMap>();
    let never = Poll::new("a ConfigMap nobody creates", Duration::from_millis(200))
        .every(Duration::from_millis(50))
        .try_eventually(async || config_maps.get_opt("absent").await.ok().flatten())
        .await
        .unwrap_err();
    assert_eq!(
        never.to_string(),
        "timed out after 200ms waiting for a ConfigMap nobody creates"
    );
}
