//! One control plane shared by every test of a binary, each test in its own namespace and on
//! its own tokio runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, PostParams};
use rudder_envtest::{Error, TestEnv};

async fn same_name_in_own_namespace(test: &str) -> String {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace(test).await.unwrap();
    let cms = ns.api::<ConfigMap>();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("same-name".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let listed = cms
        .list(&ListParams::default().fields("metadata.name=same-name"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    env.dir().display().to_string()
}

#[tokio::test]
async fn first_test_gets_its_own_namespace() {
    same_name_in_own_namespace("first").await;
}

#[tokio::test]
async fn second_test_gets_its_own_namespace() {
    same_name_in_own_namespace("second").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_caller_gets_the_same_control_plane() {
    let a = same_name_in_own_namespace("third").await;
    let b = TestEnv::builder().shared().await.unwrap();
    assert_eq!(a, b.dir().display().to_string());
}

#[tokio::test]
async fn asking_the_shared_plane_for_more_than_it_runs_is_an_error() {
    // Make sure it is running without a controller manager first.
    TestEnv::builder().shared().await.unwrap();
    let err = TestEnv::builder()
        .controller_manager(true)
        .shared()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SharedMismatch { .. }), "{err}");
}
