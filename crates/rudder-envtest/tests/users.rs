//! Extra users: a service account's token is authenticated, its client acts as it, and a
//! non-resource URL grant takes effect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use rudder_envtest::TestEnv;

#[tokio::test]
async fn a_service_account_user_is_authenticated_and_only_as_allowed() {
    let env = TestEnv::builder().shared().await.unwrap();
    let ns = env.namespace("service-account-user").await.unwrap();
    let user = ns.service_account("reader").await.unwrap();
    assert_eq!(
        user.username(),
        format!("system:serviceaccount:{}:reader", ns.name())
    );

    // The API server authenticates the token as that user.
    let review: TokenReview = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": { "token": user.token() },
    }))
    .unwrap();
    let reviewed = Api::<TokenReview>::all(env.client().unwrap())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let status = serde_json::to_value(reviewed.status).unwrap();
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(status["user"]["username"], user.username(), "{status}");

    // Its client acts as it: authenticated (discovery works), but with no RBAC of its own.
    user.client().apiserver_version().await.unwrap();
    let listed = Api::<ConfigMap>::namespaced(user.client(), ns.name())
        .list(&ListParams::default())
        .await;
    match listed {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403, got {other:?}"),
    }

    // A grant of a non-resource URL is in effect when it returns.
    let metrics = || async {
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        user.client().request_text(request).await
    };
    match metrics().await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 before the grant, got {other:?}"),
    }
    ns.grant_non_resource_urls(&user, &["get"], &["/metrics"])
        .await
        .unwrap();
    let text = metrics().await.unwrap();
    assert!(text.contains("apiserver_request_total"), "{text}");
}
